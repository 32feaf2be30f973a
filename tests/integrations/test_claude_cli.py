"""The Claude Agent SDK adapter driving the real Claude Code CLI bundled with the SDK.

The CLI runs as it does for users (a native binary, its own schemas, hooks and permission
flow); only the model is fake: ``support.claude_api.FakeMessagesApi`` answers its Messages API
requests on loopback with scripted turns in the API's streaming format and keeps every request
body, so each test reads what the model was shown. ``test_claude_agent_sdk.py`` covers the same
adapter against a fake transport that plays the CLI's side.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.components import extra, require_binary, require_module
from support.integrations import SECRET, add, explode, unsure

sdk = require_module("claude_agent_sdk", extra("claude-agent-sdk"))

from claude_agent_sdk import (  # noqa: E402
    ClaudeAgentOptions,
    PermissionResult,
    PermissionResultAllow,
    ToolPermissionContext,
    query,
)
from support.claude_api import (  # noqa: E402
    FakeMessagesApi,
    Turn,
    cli_env,
    deferred_names,
    text,
    tool_results,
    use,
)

from tooltrace import HookDecision, HookView, Stage, Status, ToolRegistry, hook  # noqa: E402
from tooltrace.integrations.claude_agent_sdk import (  # noqa: E402
    BUILTIN_TOOLS,
    PASSED_THROUGH_TOOLS,
    REFUSAL,
    ClaudeAgentAdapter,
)
from tooltrace.telemetry.audit import AuditSink, AuditStore  # noqa: E402
from tooltrace.testing import RecordingSink  # noqa: E402

CLI = require_binary("claude", "pip install 'tooltrace[claude-agent-sdk]' (the SDK bundles it)",
                     path=Path(sdk.__file__).parent / "_bundled" / "claude")
ADD = "mcp__tooltrace__add"


@dataclass
class Run:
    """One session of the real CLI: what the model was shown, what tooltrace recorded."""

    api: FakeMessagesApi
    registry: ToolRegistry
    sink: RecordingSink
    audit_home: Path
    messages: list[Any] = field(default_factory=list)

    def record(self, use_id: str) -> Any:
        """The one record of tool use ``use_id``."""
        recs = [r for r in self.sink.records
                if r.attributes.get("provider.tool_call_id") == use_id]
        assert len(recs) == 1, [(r.tool, r.status, dict(r.attributes)) for r in self.sink.records]
        return recs[0]

    def shown(self, use_id: str) -> dict[str, Any]:
        """The ``tool_result`` of ``use_id`` in the first request that carries it."""
        for body in self.api.requests:
            for block in tool_results(body):
                if block.get("tool_use_id") == use_id:
                    return block
        raise AssertionError(f"no request carried the result of {use_id}")

    def shown_text(self, use_id: str) -> str:
        content = self.shown(use_id).get("content")
        if isinstance(content, list):
            return "\n".join(str(c.get("text", "")) for c in content)
        return str(content)

    def audit_rows(self) -> list[tuple[Any, ...]]:
        """``(tool, status, reject_stage, execution_started)`` of every audit row."""
        self.registry.flush(10.0)
        with AuditStore(self.audit_home) as store:
            return store.sql("SELECT tool, status, reject_stage, execution_started "
                             "FROM tool_calls ORDER BY call_id").rows


@pytest.fixture
def run_cli(workspace: Path, tmp_path: Path, otel: Any) -> Iterator[Any]:
    """Run one ``query()`` of the real CLI through an adapter on a fresh registry (the
    ``add``, ``explode`` and ``unsure`` tools and Claude Code's built-ins registered) against
    scripted turns; every registry is shut down after the test."""
    made: list[ToolRegistry] = []

    def run(turns: list[Turn], *, env: dict[str, str] | None = None,
            adapter: dict[str, Any] | None = None, registry: dict[str, Any] | None = None,
            builtins: list[str] | None = None) -> Run:
        sink = RecordingSink()
        audit_home = tmp_path / f"audit-{len(made)}"
        reg = ToolRegistry(workspace=workspace, home=tmp_path / f"home-{len(made)}",
                           sinks=[sink, AuditSink(audit_home), otel.sink], **(registry or {}))
        made.append(reg)
        for t in (add, explode, unsure):
            reg.register(t)
        ad = ClaudeAgentAdapter(reg, **(adapter or {}))
        ad.register_builtins(builtins)
        with FakeMessagesApi(list(turns)) as api:
            out = Run(api, reg, sink, audit_home)
            options = ad.options(ClaudeAgentOptions(
                cwd=str(workspace), setting_sources=[], cli_path=CLI,
                env=cli_env(api, tmp_path / f"cli-home-{len(made)}", **(env or {}))))

            async def go() -> None:
                async with ad:  # at the end: what the last turn's transcript still held
                    async for message in query(prompt="go", options=options):
                        out.messages.append(message)

            asyncio.run(asyncio.wait_for(go(), 120))
        # Nothing but the Messages API was asked for, and only on loopback.
        assert api.paths and all(p.startswith("/v1/messages") for p in api.paths), api.paths
        assert type(out.messages[-1]).__name__ == "ResultMessage"
        reg.flush(10.0)
        return out

    yield run
    for reg in made:
        reg.shutdown(5.0)


def _builtin_names(names: list[str]) -> set[str]:
    return {n for n in names if not n.startswith("mcp__")}


# -- what the model is shown ------------------------------------------------------------------


def test_every_tool_the_bundled_cli_offers_is_in_the_table(run_cli: Any) -> None:
    """The table of built-ins is kept current: a name the CLI offers that the table does not
    know (neither policed nor passed through) fails here, not in a user's session."""
    known = set(BUILTIN_TOOLS) | set(PASSED_THROUGH_TOOLS)
    deferred = run_cli([[text("hi")]])
    listed = run_cli([[text("hi")]], env={"ENABLE_TOOL_SEARCH": "false"})
    first = deferred.api.requests[0]
    offered = _builtin_names(deferred.api.tool_names(0) + deferred_names(first))
    assert {"Bash", "Read", "Write", "Edit", "ToolSearch"} <= offered  # the read worked
    assert offered - known == set()
    all_listed = _builtin_names(listed.api.tool_names(0))
    assert all_listed - known == set()
    # With tool search off every offered tool is listed (ToolSearch itself goes away).
    assert offered - {"ToolSearch", "DeferredToolPlaceholder"} <= all_listed
    init = next(m for m in deferred.messages if type(m).__name__ == "SystemMessage")
    assert _builtin_names(init.data["tools"]) - known == set()


def test_registry_schemas_reach_the_model_through_tool_search(run_cli: Any) -> None:
    run = run_cli([[use("ToolSearch", {"query": f"select:{ADD}"}, "toolu_ts")],
                   [use(ADD, {"a": 2, "b": 3}, "toolu_add")]])
    definition = run.registry.definition("add")
    assert definition is not None
    # Deferred: named in the first request, its schema not loaded ...
    assert ADD in deferred_names(run.api.requests[0]) and run.api.schema(0, ADD) is None
    # ... ToolSearch passes untouched (no record); its result references the tool, and the
    # next request carries the schema the reference expands to.
    assert run.shown("toolu_ts")["content"] == [{"type": "tool_reference", "tool_name": ADD}]
    shown = run.api.schema(1, ADD)
    assert shown is not None
    assert shown["properties"] == dict(definition.parameters)["properties"]
    assert shown["required"] == ["a", "b"]
    assert [r.tool for r in run.sink.records] == ["add"]
    rec = run.record("toolu_add")  # the model's tool-use id, from the request's _meta
    assert rec.status is Status.OK and run.shown_text("toolu_add") == "5"


def test_registry_schemas_are_in_the_first_request_without_tool_search(run_cli: Any) -> None:
    run = run_cli([[use(ADD, {"a": 1, "b": 1}, "toolu_add")]],
                  env={"ENABLE_TOOL_SEARCH": "false"})
    definition = run.registry.definition("add")
    assert definition is not None
    shown = run.api.schema(0, ADD)
    assert shown is not None and shown["properties"] == definition.parameters["properties"]
    tools = {t["name"]: t for t in run.api.requests[0]["tools"]}
    assert tools[ADD]["description"] == definition.description
    assert "ToolSearch" not in tools
    assert run.record("toolu_add").status is Status.OK


# -- every status, as the model reads it ------------------------------------------------------


@hook()
def hookme(view: HookView) -> HookDecision:
    """Block any command that names HOOKME."""
    if "HOOKME" in str(view.arguments.get("command", "")):
        return HookDecision.block("maintenance window")
    return HookDecision.proceed()


def test_every_status_reaches_the_model_through_the_clis_error_path(
        run_cli: Any, workspace: Path) -> None:
    run = run_cli([
        [use(ADD, {"a": 2, "b": 3}, "u_ok")],
        [use(ADD, {"a": "two"}, "u_params")],
        [use("Bash", {"command": "rm -rf /"}, "u_policy")],
        [use("Bash", {"command": "echo HOOKME"}, "u_hook")],
        [use("Write", {"file_path": str(workspace / "n.txt"), "content": "x"}, "u_unknown")],
        [use("mcp__tooltrace__explode", {}, "u_failed")],
        [use("mcp__tooltrace__unsure", {}, "u_maybe")],
    ], registry={"hooks": [hookme]}, builtins=["Bash", "Read"],
        env={"ENABLE_TOOL_SEARCH": "false"})
    expected = {
        "u_ok": (Status.OK, None), "u_params": (Status.REJECTED, Stage.PARAMS),
        "u_policy": (Status.REJECTED, Stage.POLICY), "u_hook": (Status.REJECTED, Stage.HOOK),
        "u_unknown": (Status.REJECTED, Stage.RESOLVE), "u_failed": (Status.FAILED, None),
        "u_maybe": (Status.UNKNOWN, None),
    }
    for use_id, (status, stage) in expected.items():
        rec = run.record(use_id)
        assert (rec.status, rec.reject_stage) == (status, stage), use_id
        if status is Status.OK:
            continue
        shown = run.shown(use_id)
        assert shown.get("is_error") is True, use_id
        # The CLI words a built-in's denial as a hook error around the envelope's summary.
        assert rec.summary in run.shown_text(use_id), (use_id, run.shown_text(use_id))
    # The CLI words a PreToolUse denial as a hook error (docs: what the model reads).
    assert run.shown_text("u_policy").startswith("PreToolUse:Bash hook error: ")
    assert not (workspace / "n.txt").exists()
    assert SECRET not in json.dumps(run.api.requests)  # explode's text never reached it
    # A registry schema was in the prompt: the CLI adds no "schema was not in your prompt".
    assert "was not in your prompt" not in run.shown_text("u_params")
    rows = run.audit_rows()
    assert len(rows) == len(expected) == len(run.sink.records)
    assert sorted((r[1], r[2] or "") for r in rows) == sorted(
        (s.value, st.value if st else "") for s, st in expected.values())


def test_secrets_from_bash_reach_neither_the_model_nor_the_trail(
        run_cli: Any, workspace: Path) -> None:
    (workspace / "creds.txt").write_text(f"OPENAI_API_KEY={SECRET}\n")
    run = run_cli([[use("Bash", {"command": "cat creds.txt"}, "u_cat")]])
    rec = run.record("u_cat")
    assert rec.status is Status.OK and rec.execution_started
    shown = run.shown_text("u_cat")
    assert "OPENAI_API_KEY=" in shown and "[REDACTED" in shown  # updatedToolOutput, redacted
    assert SECRET not in json.dumps(run.api.requests)
    run.registry.flush(10.0)
    trail = b"".join(p.read_bytes() for p in run.audit_home.rglob("*") if p.is_file())
    assert SECRET.encode() not in trail


def test_parallel_uses_get_one_record_row_and_span_each(run_cli: Any, otel: Any) -> None:
    uses = [use("Bash", {"command": f"echo {i}"}, f"u_bash{i}") for i in range(3)]
    uses += [use(ADD, {"a": i, "b": 1}, f"u_add{i}") for i in range(2)]
    run = run_cli([uses], env={"ENABLE_TOOL_SEARCH": "false"})
    ids = [b["id"] for b in uses]
    recs = [run.record(i) for i in ids]
    assert len({r.call_id for r in recs}) == len(run.sink.records) == 5
    assert all(r.status is Status.OK for r in recs)
    for i in range(3):
        assert run.shown_text(f"u_bash{i}").strip() == str(i)
    assert [run.shown_text(f"u_add{i}") for i in range(2)] == ["1", "2"]
    assert len(run.audit_rows()) == 5
    spans = otel.tool_spans()
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in spans) == sorted(
        r.call_id for r in recs)


# -- attempts the CLI refuses before any hook ---------------------------------------------------


def test_uses_the_cli_refuses_before_any_hook_are_recorded(run_cli: Any, workspace: Path
                                                           ) -> None:
    run = run_cli([[use("Write", {"file_path": str(workspace / "n.txt"), "content": 123},
                        "u_bad"), use("NoSuchTool", {"x": SECRET}, "u_none")]])
    bad, none = run.record("u_bad"), run.record("u_none")
    assert "InputValidationError" in run.shown_text("u_bad")
    for rec in (bad, none):
        assert rec.status is Status.REJECTED and not rec.execution_started
        assert [s.step for s in rec.steps] == ["resolve"]  # no policy, approval or hook
    assert bad.tool == "Write" and bad.reject_stage is Stage.CANCEL
    assert "InputValidationError" in str(bad.attributes[REFUSAL])
    assert none.reject_stage is Stage.RESOLVE
    assert none.attributes["provider.tool_name"] == "NoSuchTool"
    assert "No such tool available" in str(none.attributes[REFUSAL])
    assert SECRET not in str(none.args_redacted)
    assert sorted(r[1:] for r in run.audit_rows()) == [("rejected", "cancel", False),
                                                       ("rejected", "resolve", False)]


def test_refused_uses_outside_the_matcher_are_not_recorded(run_cli: Any, workspace: Path
                                                           ) -> None:
    run = run_cli([[use("Write", {"file_path": str(workspace / "n.txt"), "content": 123},
                        "u_bad"), use("Bash", {"command": "echo hi"}, "u_bash")]],
                  adapter={"matcher": "Bash"})
    assert [r.attributes["provider.tool_call_id"] for r in run.sink.records] == ["u_bash"]


# -- built-ins beyond the files and the shell ---------------------------------------------------


def test_a_sub_agent_is_policed_and_its_own_uses_are_decided(run_cli: Any) -> None:
    def route(body: dict[str, Any]) -> list[dict[str, Any]]:
        asked = json.dumps(body["messages"][:2])
        results = list(tool_results(body))
        if "SUBTASK" in asked:  # the sub-agent's own conversation
            if not results:
                return [use("Bash", {"command": "echo from-sub"}, "u_sub_bash"),
                        use("NoSuchTool", {}, "u_sub_none")]
            return [text("sub finished")]
        if not results:
            return [use("Agent", {"description": "echo", "prompt": "SUBTASK: echo",
                                  "subagent_type": "general-purpose"}, "u_agent")]
        return [text("all done")]

    run = run_cli([route] * 6)
    agent, sub_bash = run.record("u_agent"), run.record("u_sub_bash")
    assert agent.tool == "Agent" and agent.status is Status.OK
    # The CLI runs the sub-agent in the background: the main agent's turn ends (Stop) while
    # the sub-agent's Bash runs, and that use is still completed by the outcome it reports.
    assert "launched" in run.shown_text("u_agent")
    assert sub_bash.status is Status.OK and run.shown_text("u_sub_bash").strip() == "from-sub"
    # What the CLI refused the sub-agent is read from the sub-agent's own transcript.
    refused = run.record("u_sub_none")
    assert (refused.status, refused.reject_stage) == (Status.REJECTED, Stage.RESOLVE)


def test_the_user_answers_a_passed_through_question(run_cli: Any) -> None:
    asked: list[str] = []

    async def ask_user(name: str, tool_input: dict[str, Any], context: ToolPermissionContext
                       ) -> PermissionResult:
        asked.append(name)
        question = tool_input["questions"][0]["question"]
        return PermissionResultAllow(updated_input={**tool_input,
                                                    "answers": {question: "Parquet"}})

    question = {"question": "Which format?", "header": "Format", "multiSelect": False,
                "options": [{"label": "Parquet", "description": "columns"},
                            {"label": "CSV", "description": "rows"}]}
    run = run_cli([[use("AskUserQuestion", {"questions": [question]}, "u_ask")]],
                  adapter={"ask_user": ask_user})
    assert asked == ["AskUserQuestion"]
    assert "Parquet" in run.shown_text("u_ask")
    assert run.sink.records == []  # passed through: nothing decided, nothing recorded
