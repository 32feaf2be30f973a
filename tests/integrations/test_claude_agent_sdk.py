"""The Claude Agent SDK adapter: built-in tools decided by tooltrace and recorded with the
outcome Claude Code reports; in-process MCP tools run through the registry.

Hook callables are called with the SDK's own types; whole runs go through ``query()`` against a
fake CLI (``support.claude_fake_cli.FakeCli``) that speaks the SDK's control protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from conftest import Watch
from support.bypass import deny_all, touch
from support.components import extra, require_module
from support.integrations import SECRET, add, explode, unsure
from support.trail import assert_ids_were_minted

sdk = require_module("claude_agent_sdk", extra("claude-agent-sdk"))

from claude_agent_sdk import (  # noqa: E402
    HookContext,
    PermissionResultAllow,
    PermissionResultDeny,
    PostToolUseFailureHookInput,
    PostToolUseHookInput,
    PreToolUseHookInput,
    StopHookInput,
    SubagentStopHookInput,
    ToolPermissionContext,
    create_sdk_mcp_server,
    query,
)
from support.claude_fake_cli import FakeCli, Use  # noqa: E402

from tooltrace import (  # noqa: E402
    ApprovalDecision,
    ApprovalRequest,
    HookDecision,
    HookView,
    Policy,
    RequireApproval,
    Stage,
    Status,
    ToolRegistry,
    hook,
    tool,
)
from tooltrace.integrations.claude_agent_sdk import (  # noqa: E402
    PASSED_THROUGH_TOOLS,
    REFUSAL,
    ClaudeAgentAdapter,
    adopt,
    sdk_schema,
)
from tooltrace.model import Principal  # noqa: E402
from tooltrace.testing import RecordingSink  # noqa: E402

CTX: HookContext = {"signal": None}
BASE = {"session_id": "s1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp"}


def pre(name: str, tool_input: dict[str, Any], use: str = "toolu_1") -> PreToolUseHookInput:
    return {**BASE, "hook_event_name": "PreToolUse", "tool_name": name,  # type: ignore[typeddict-item]
            "tool_input": tool_input, "tool_use_id": use}


def post(name: str, tool_input: dict[str, Any], response: Any,
         use: str = "toolu_1") -> PostToolUseHookInput:
    return {**BASE, "hook_event_name": "PostToolUse", "tool_name": name,  # type: ignore[typeddict-item]
            "tool_input": tool_input, "tool_response": response, "tool_use_id": use}


def failure(name: str, tool_input: dict[str, Any], error: str, interrupt: bool = False,
            use: str = "toolu_1") -> PostToolUseFailureHookInput:
    return {**BASE, "hook_event_name": "PostToolUseFailure", "tool_name": name,  # type: ignore[typeddict-item]
            "tool_input": tool_input, "tool_use_id": use, "error": error,
            "is_interrupt": interrupt}


STOP: StopHookInput = {**BASE, "hook_event_name": "Stop", "stop_hook_active": False}  # type: ignore[typeddict-item]


@pytest.fixture
def make(workspace: Path, tmp_path: Path, sink: RecordingSink) -> Iterator[Any]:
    """Build a registry recording into ``sink`` and an adapter on it."""
    made: list[ToolRegistry] = []

    def build(**kw: Any) -> tuple[ToolRegistry, ClaudeAgentAdapter]:
        reg = ToolRegistry(workspace=workspace, home=tmp_path / "home",
                           sinks=kw.pop("sinks", [sink]),
                           cancel_grace_s=kw.pop("grace", 0.3), **kw.pop("registry", {}))
        made.append(reg)
        return reg, ClaudeAgentAdapter(reg, **kw)

    yield build
    for reg in made:
        reg.shutdown(timeout_s=2.0)


def one(sink: RecordingSink, tool_name: str) -> Any:
    recs = [r for r in sink.records if r.tool == tool_name]
    assert len(recs) == 1, [(r.tool, r.status) for r in sink.records]
    return recs[0]


# -- built-in tools: decided by the pipeline, completed by the CLI's report -------------------


def test_builtin_use_is_decided_by_the_pipeline_and_completed_by_post_tool_use(
        make: Any, sink: RecordingSink, tmp_path: Path) -> None:
    from tooltrace.telemetry.audit import AuditSink, AuditStore

    audit = AuditSink(tmp_path / "audit-home")
    reg, adapter = make()
    reg.add_sink(audit)
    adapter.register_builtins()

    async def run() -> tuple[Any, Any]:
        out = await adapter.pre_tool_use(pre("Bash", {"command": "ls"}), "toolu_1", CTX)
        assert sink.records == []  # decided, not finished: the CLI runs the tool now
        done = await adapter.post_tool_use(
            post("Bash", {"command": "ls"}, {"stdout": "a.txt", "stderr": ""}), "toolu_1", CTX)
        return out, done

    out, done = asyncio.run(run())
    assert out == {} and done == {}  # no objection; the output needed no redaction
    rec = one(sink, "Bash")
    assert rec.status is Status.OK and rec.execution_started
    assert [s.step for s in rec.steps][:5] == ["resolve", "validate", "policy", "admission",
                                               "execute"]
    assert rec.attributes["provider.tool_call_id"] == "toolu_1"
    assert rec.result_preview is not None and "a.txt" in rec.result_preview
    audit.flush()
    with AuditStore(tmp_path / "audit-home") as store:
        row = store.call(rec.call_id).record
    assert row is not None
    assert (row["tool"], row["status"], row["execution_started"]) == ("Bash", "ok", True)


def test_the_adapters_principal_goes_on_every_call(make: Any, sink: RecordingSink) -> None:
    p = Principal(user="ann", agent="claude-coder")
    _, adapter = make(principal=p)
    adapter.register_builtins()
    _, leaky = make(principal=Principal(user="AKIA" + "Z7QF3EXAMPLE4DMO"))
    leaky.register_builtins()

    async def run() -> Any:
        await adapter.pre_tool_use(pre("Bash", {"command": "ls"}), "toolu_p1", CTX)
        await adapter.post_tool_use(
            post("Bash", {"command": "ls"}, {"stdout": "a.txt", "stderr": ""}), "toolu_p1", CTX)
        return await leaky.pre_tool_use(pre("Bash", {"command": "ls"}), "toolu_p2", CTX)

    refused = asyncio.run(run())
    ok, bad = sink.records
    assert ok.status is Status.OK and ok.principal == p
    # A principal that looks like a secret is refused like any other, and not recorded.
    assert bad.status is Status.REJECTED and bad.principal is None
    assert "deny" in str(refused) and "AKIA" not in str(refused)


def test_rejections_reach_claude_as_deny_with_the_summary(make: Any, sink: RecordingSink
                                                          ) -> None:
    _, adapter = make()
    adapter.register_builtins(["Bash", "Read"])

    async def run() -> list[Any]:
        return [
            await adapter.pre_tool_use(pre("Bash", {"command": "rm -rf /"}, "u1"), "u1", CTX),
            await adapter.pre_tool_use(pre("Bash", {"cmd": "ls"}, "u2"), "u2", CTX),
            await adapter.pre_tool_use(pre("Read", {"file_path": "/etc/passwd"}, "u3"), "u3",
                                       CTX),
            await adapter.pre_tool_use(pre("Skill", {"x": 1}, "u4"), "u4", CTX),
            await adapter.can_use_tool("Bash", {"command": "rm -rf /"},
                                       ToolPermissionContext(tool_use_id="u5")),
        ]

    outs = asyncio.run(run())
    stages = [r.reject_stage for r in sink.records]
    assert stages == [Stage.POLICY, Stage.PARAMS, Stage.POLICY, Stage.RESOLVE, Stage.POLICY]
    for out, rec in zip(outs[:4], sink.records, strict=False):
        spec = out["hookSpecificOutput"]
        assert spec["permissionDecision"] == "deny"
        assert spec["permissionDecisionReason"] == rec.summary
        assert not rec.execution_started
    assert "/etc/passwd" not in sink.records[2].summary  # host paths never reach the model
    assert outs[4] == PermissionResultDeny(message=sink.records[4].summary)


def test_pre_hook_changes_reach_the_cli_as_updated_input(make: Any, sink: RecordingSink
                                                         ) -> None:
    @hook()
    def cap_timeout(view: HookView) -> HookDecision:
        return HookDecision.modify(arguments={**view.arguments, "timeout": 1000})

    _, adapter = make(registry={"hooks": [cap_timeout]})
    adapter.register_builtins(["Bash"])

    async def run() -> list[Any]:
        asked = await adapter.pre_tool_use(pre("Bash", {"command": "ls"}), "toolu_1", CTX)
        allowed = await adapter.can_use_tool("Bash", {"command": "ls"},
                                             ToolPermissionContext(tool_use_id="toolu_1"))
        await adapter.post_tool_use(post("Bash", {"command": "ls", "timeout": 1000},
                                         {"stdout": ""}), "toolu_1", CTX)
        return [asked, allowed]

    asked, allowed = asyncio.run(run())
    spec = asked["hookSpecificOutput"]
    # Claude Code's own permission flow is kept ("ask"); the change travels with it.
    assert spec["permissionDecision"] == "ask"
    assert spec["updatedInput"] == {"command": "ls", "timeout": 1000}
    assert allowed == PermissionResultAllow(updated_input={"command": "ls", "timeout": 1000})
    rec = one(sink, "Bash")
    assert rec.status is Status.OK and rec.hook_modified
    assert "ran_other_input" not in (rec.steps[-2].detail or {})


def test_matcher_limits_the_tool_hooks(make: Any) -> None:
    _, adapter = make(matcher="Bash|Write")
    hooks = adapter.hooks()
    assert [m.matcher for m in hooks["PreToolUse"] + hooks["PostToolUse"]] == ["Bash|Write"] * 2
    assert hooks["PreToolUse"][0].on_failure == "block"  # fail closed


def test_grant_lets_accepted_uses_skip_claudes_prompt(make: Any) -> None:
    _, adapter = make(grant=True)
    adapter.register_builtins(["Bash"])

    async def run() -> Any:
        out = await adapter.pre_tool_use(pre("Bash", {"command": "ls"}), "toolu_1", CTX)
        await adapter.aclose()
        return out

    assert asyncio.run(run())["hookSpecificOutput"]["permissionDecision"] == "allow"


def test_approval_decides_builtin_uses(make: Any, sink: RecordingSink, workspace: Path) -> None:
    def approver(req: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision("hello" in str(req.arguments["content"]), "reviewer", "checked")

    policy = Policy(rules=[RequireApproval(tools=frozenset({"Write"}))])
    _, adapter = make(registry={"policy": policy, "approver": approver})
    adapter.register_builtins(["Write"])
    target = str(workspace / "notes.txt")

    async def run() -> list[Any]:
        no = await adapter.pre_tool_use(
            pre("Write", {"file_path": target, "content": "bye"}, "u1"), "u1", CTX)
        yes = await adapter.pre_tool_use(
            pre("Write", {"file_path": target, "content": "hello"}, "u2"), "u2", CTX)
        await adapter.post_tool_use(post("Write", {"file_path": target, "content": "hello"},
                                         {"type": "create"}, "u2"), "u2", CTX)
        return [no, yes]

    no, yes = asyncio.run(run())
    assert no["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "denied by reviewer" in no["hookSpecificOutput"]["permissionDecisionReason"]
    assert yes == {}
    assert [(r.status, r.reject_stage) for r in sink.records] == [
        (Status.REJECTED, Stage.APPROVAL), (Status.OK, None)]
    assert [s.decider for s in sink.records[1].steps if s.step == "approval"] == [
        "user:reviewer"]


def test_reported_failure_and_interrupt_complete_the_record(make: Any, sink: RecordingSink
                                                            ) -> None:
    _, adapter = make()
    adapter.register_builtins(["Bash"])

    async def run() -> None:
        await adapter.pre_tool_use(pre("Bash", {"command": "false"}, "u1"), "u1", CTX)
        await adapter.post_tool_use_failure(
            failure("Bash", {"command": "false"}, f"exit 1 {SECRET}", use="u1"), "u1", CTX)
        await adapter.pre_tool_use(pre("Bash", {"command": "sleep 9"}, "u2"), "u2", CTX)
        await adapter.post_tool_use_failure(
            failure("Bash", {"command": "sleep 9"}, "Interrupted", True, "u2"), "u2", CTX)

    asyncio.run(run())
    failed, cancelled = sink.records
    assert failed.status is Status.FAILED and failed.execution_started
    assert "exit 1" in failed.summary and SECRET not in failed.summary
    assert cancelled.status is Status.CANCELLED


def test_the_model_gets_the_redacted_output_in_the_tools_shape(make: Any, sink: RecordingSink
                                                               ) -> None:
    _, adapter = make(registry={"max_inline_chars": 200})
    adapter.register_builtins(["Bash"])
    small = {"stdout": f"key {SECRET}", "stderr": "", "interrupted": False}
    big = {"stdout": "x" * 500 + " " + SECRET, "stderr": "", "interrupted": False}

    async def run() -> list[Any]:
        outs = []
        for use, response in (("u1", small), ("u2", big)):
            await adapter.pre_tool_use(pre("Bash", {"command": "env"}, use), use, CTX)
            outs.append(await adapter.post_tool_use(post("Bash", {"command": "env"}, response,
                                                         use), use, CTX))
        return outs

    outs = asyncio.run(run())
    for out, response in zip(outs, (small, big), strict=True):
        shown = out["hookSpecificOutput"]["updatedToolOutput"]
        assert shown.keys() == response.keys() and SECRET not in str(shown)
        assert shown["stdout"].endswith("]") and "[REDACTED" in shown["stdout"]
    # The big output was offloaded for the record; the CLI's copy cannot be trimmed.
    assert sink.records[1].artifact is not None
    assert len(outs[1]["hookSpecificOutput"]["updatedToolOutput"]["stdout"]) > 500


def test_post_hook_block_tells_the_model(make: Any, sink: RecordingSink, workspace: Path) -> None:
    @hook(phase="post")
    def withhold(view: HookView) -> HookDecision:
        return HookDecision.block("contains customer data")

    _, adapter = make(registry={"hooks": [withhold]})
    adapter.register_builtins(["Read"])
    path = str(workspace / "hello.txt")

    async def run() -> Any:
        await adapter.pre_tool_use(pre("Read", {"file_path": path}), "toolu_1", CTX)
        return await adapter.post_tool_use(post("Read", {"file_path": path}, {"text": "x"}),
                                           "toolu_1", CTX)

    out = asyncio.run(run())
    rec = one(sink, "Read")
    assert rec.status is Status.FAILED
    assert out["decision"] == "block" and out["reason"] == rec.summary
    assert "contains customer data" in out["hookSpecificOutput"]["additionalContext"]


def test_unreported_uses_settle_at_the_end_of_the_turn(make: Any, sink: RecordingSink,
                                                       workspace: Path) -> None:
    _, adapter = make()
    adapter.register_builtins(["Bash", "Read"])
    path = str(workspace / "hello.txt")

    async def run() -> None:
        await adapter.pre_tool_use(pre("Bash", {"command": "ls"}, "u1"), "u1", CTX)
        await adapter.pre_tool_use(pre("Read", {"file_path": path}, "u2"), "u2", CTX)
        await adapter.stop(STOP, None, CTX)

    asyncio.run(run())
    bash, read = one(sink, "Bash"), one(sink, "Read")
    assert bash.status is Status.UNKNOWN  # it has side effects: it may have run
    assert read.status is Status.FAILED  # no side effects: nothing to be unsure of


def test_a_builtin_past_its_deadline_ends_unknown_and_resolves_late(make: Any,
                                                                    sink: RecordingSink) -> None:
    _, adapter = make(grace=0.05)
    adapter.register_builtins(["Bash"], timeout_s=0.1)

    async def run() -> None:
        await adapter.pre_tool_use(pre("Bash", {"command": "sleep 1"}), "toolu_1", CTX)
        while not sink.records:
            await asyncio.sleep(0.02)
        await adapter.post_tool_use(post("Bash", {"command": "sleep 1"}, {"stdout": ""}),
                                    "toolu_1", CTX)
        for _ in range(250):
            if sink.late:
                break
            await asyncio.sleep(0.02)

    asyncio.run(run())
    rec = one(sink, "Bash")
    assert rec.status is Status.UNKNOWN  # tooltrace cannot stop the CLI's tool
    assert [(s.step.step, s.step.decision) for s in sink.late] == [("resolved", "ok")]


def test_withdrawn_question_cancels_the_call(make: Any, sink: RecordingSink) -> None:
    import threading

    asked, release = threading.Event(), threading.Event()

    def slow(req: ApprovalRequest) -> ApprovalDecision:
        asked.set()
        release.wait(30)  # answers only after the question was withdrawn
        return ApprovalDecision(True, "late")

    _, adapter = make(registry={"approver": slow,
                                  "policy": Policy(rules=[RequireApproval(
                                      tools=frozenset({"Bash"}))])})
    adapter.register_builtins(["Bash"])

    async def run() -> None:
        task = asyncio.ensure_future(
            adapter.pre_tool_use(pre("Bash", {"command": "ls"}), "toolu_1", CTX))
        assert await asyncio.to_thread(asked.wait, 30)  # the approver holds the question
        task.cancel()  # what the SDK does on the CLI's control_cancel_request
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        await adapter.aclose()

    asyncio.run(run())
    rec = one(sink, "Bash")
    assert (rec.status, rec.reject_stage) == (Status.REJECTED, Stage.CANCEL)
    assert not rec.execution_started


def test_passed_through_tools_are_let_through_untouched(make: Any, sink: RecordingSink
                                                        ) -> None:
    _, adapter = make()
    adapter.register_builtins()

    async def run() -> list[Any]:
        return [
            await adapter.pre_tool_use(pre("ToolSearch", {"query": "select:x"}), "toolu_1", CTX),
            await adapter.can_use_tool("AskUserQuestion", {"questions": []},
                                       ToolPermissionContext(tool_use_id="toolu_2")),
        ]

    assert asyncio.run(run()) == [{}, PermissionResultAllow()]
    assert sink.records == []  # nothing decided, nothing recorded
    assert "ToolSearch" in PASSED_THROUGH_TOOLS


def test_a_turns_stop_leaves_a_sub_agents_uses_to_its_own_stop(make: Any, sink: RecordingSink
                                                               ) -> None:
    _, adapter = make()
    adapter.register_builtins(["Bash"])
    sub_stop: SubagentStopHookInput = {  # type: ignore[typeddict-item]
        **BASE, "hook_event_name": "SubagentStop", "stop_hook_active": False,
        "agent_id": "a1", "agent_type": "general-purpose",
        "agent_transcript_path": "/nonexistent/a1.jsonl"}

    async def run() -> list[int]:
        counts = []
        await adapter.pre_tool_use({**pre("Bash", {"command": "ls"}, "u1"),  # type: ignore[typeddict-item]
                                    "agent_id": "a1"}, "u1", CTX)
        await adapter.pre_tool_use(pre("Bash", {"command": "ls"}, "u2"), "u2", CTX)
        await adapter.stop(STOP, None, CTX)  # the main agent's turn ends: only u2 settles
        counts.append(len(sink.records))
        await adapter.subagent_stop(sub_stop, None, CTX)
        counts.append(len(sink.records))
        return counts

    assert asyncio.run(run()) == [1, 2]
    assert [r.attributes["provider.tool_call_id"] for r in sink.records] == ["u2", "u1"]
    assert all(r.status is Status.UNKNOWN for r in sink.records)


def _line(role: str, *blocks: dict[str, Any]) -> str:
    import json
    return json.dumps({"type": role, "message": {"role": role, "content": list(blocks)}}) + "\n"


def test_refused_uses_are_read_from_the_transcript_once(make: Any, sink: RecordingSink,
                                                        tmp_path: Path) -> None:
    _, adapter = make()
    adapter.register_builtins(["Write"])
    refused = "<tool_use_error>InputValidationError: content must be a string</tool_use_error>"
    transcript = tmp_path / "session.jsonl"
    uses = [{"type": "tool_use", "id": f"u{i}", "name": n, "input": {"content": 1}}
            for i, n in enumerate(("Write", "Nope", "Write", "Write"))]
    results = [
        {"type": "tool_result", "tool_use_id": "u0", "is_error": True, "content": refused},
        {"type": "tool_result", "tool_use_id": "u1", "is_error": True,
         "content": [{"type": "text", "text": "<tool_use_error>Error: No such tool available:"
                                              " Nope</tool_use_error>"}]},
        # Seen by a hook (below): the adapter already recorded it.
        {"type": "tool_result", "tool_use_id": "u2", "is_error": True, "content": refused},
        # The tool's own error, not the CLI's refusal.
        {"type": "tool_result", "tool_use_id": "u3", "is_error": True, "content": "exit 1"},
    ]
    whole = _line("assistant", *uses) + _line("user", *results)
    cut = len(whole) - 40  # the last line is still being written

    async def run() -> list[int]:
        await adapter.pre_tool_use(pre("Write", {"file_path": "/etc/x", "content": "x"}, "u2"),
                                   "u2", CTX)
        transcript.write_text(whole[:cut])
        counts = [len(await adapter.record_refused(transcript))]
        transcript.write_text(whole)
        counts.append(len(await adapter.record_refused(transcript)))
        counts.append(len(await adapter.record_refused(transcript)))  # each use once
        await adapter.aclose()
        return counts

    assert asyncio.run(run()) == [0, 2, 0]
    by_use = {r.attributes["provider.tool_call_id"]: r for r in sink.records}
    assert sorted(by_use) == ["u0", "u1", "u2"]
    assert (by_use["u0"].reject_stage, by_use["u1"].reject_stage) == (Stage.CANCEL,
                                                                      Stage.RESOLVE)
    assert by_use["u0"].attributes[REFUSAL] == "InputValidationError: content must be a string"
    assert not by_use["u0"].execution_started and by_use["u2"].reject_stage is Stage.POLICY


def test_a_refused_use_of_a_served_tool_is_recorded_under_its_registry_name(
        make: Any, sink: RecordingSink, tmp_path: Path) -> None:
    reg, adapter = make()
    reg.register(add)
    adapter.mcp_server()
    transcript = tmp_path / "session.jsonl"
    transcript.write_text(
        _line("assistant", {"type": "tool_use", "id": "u1", "name": "mcp__tooltrace__add",
                            "input": {"a": 1, "b": 2}})
        + _line("user", {"type": "tool_result", "tool_use_id": "u1", "is_error": True,
                         "content": "<tool_use_error>InputValidationError: x</tool_use_error>"}))
    asyncio.run(adapter.record_refused(transcript))
    rec = one(sink, "add")
    assert (rec.status, rec.reject_stage) == (Status.REJECTED, Stage.CANCEL)
    assert rec.attributes["provider.tool_name"] == "mcp__tooltrace__add"


def test_the_docs_table_of_built_ins_is_the_codes(make: Any) -> None:
    import re

    page = (Path(__file__).parents[2] / "docs" / "integrations" / "claude-agent-sdk.md")
    section = page.read_text().split("## Claude Code's built-in tools")[1].split("\n## ")[0]
    rows = {m[1]: m[2] for m in re.finditer(r"^\| `(\w+)`[^|]*\|(.*)\|$", section, re.M)}
    _, adapter = make()
    policed = {d.name: [d.capability.value, d.effect.value, ", ".join(f"`{p}`" for p in
                                                                        d.path_params)]
               for d in adapter.register_builtins()}
    documented = {n: [c.strip() for c in cells.split("|")] for n, cells in rows.items()
                  if n in policed}
    assert documented == policed
    assert set(rows) == set(policed) | set(PASSED_THROUGH_TOOLS)


# -- whole runs through query() and a fake CLI ------------------------------------------------


def test_agent_run_mixes_builtins_and_in_process_tools(make: Any, sink: RecordingSink,
                                                      watch: Watch) -> None:
    reg, adapter = make(sinks=[sink, watch.trail])
    for t in (add, explode, unsure):
        reg.register(t)
    adapter.register_builtins(["Bash"])
    bash_out = {"stdout": "hi", "stderr": "", "interrupted": False}
    cli = FakeCli([[Use("Bash", {"command": "echo hi"}, run=lambda i: bash_out),
                    Use("add", {"a": 2, "b": 3}, server="tooltrace"),
                    Use("add", {"a": "two"}, server="tooltrace"),
                    Use("explode", {}, server="tooltrace"),
                    Use("unsure", {}, server="tooltrace")]])

    async def run() -> list[Any]:
        return [m async for m in query(prompt="go", options=adapter.options(), transport=cli)]

    messages = asyncio.run(run())
    assert type(messages[-1]).__name__ == "ResultMessage"
    ok_add, bad_add, boom, maybe = (cli.seen[f"toolu_0{i}"] for i in range(2, 6))
    assert ok_add["isError"] is False and ok_add["content"][0]["text"] == "5"
    recs = {r.attributes.get("provider.tool_call_id", r.call_id): r for r in sink.records}
    assert len(sink.records) == 5 and len({r.call_id for r in sink.records}) == 5
    assert recs["toolu_01"].status is Status.OK
    statuses = sorted((r.tool, r.status.value, r.reject_stage) for r in sink.records
                      if r.tool != "Bash")
    assert statuses == [("add", "ok", None), ("add", "rejected", Stage.PARAMS),
                        ("explode", "failed", None), ("unsure", "unknown", None)]
    texts = {r.status: r.summary for r in sink.records if r.tool != "Bash"}
    for seen, status in ((bad_add, Status.REJECTED), (boom, Status.FAILED),
                         (maybe, Status.UNKNOWN)):
        assert seen["isError"] is True and seen["content"][0]["text"] == texts[status]
    assert SECRET not in texts[Status.FAILED]
    assert_ids_were_minted(reg, watch.trail, "add", {"a": 1, "b": 1})  # named by the registry


def test_the_cli_lists_the_registry_schemas(make: Any) -> None:
    reg, adapter = make()
    reg.register(add)
    adapter.register_builtins(["Bash"])
    cli = FakeCli([[Use("add", {"a": 1, "b": 1}, server="tooltrace")]])

    async def run() -> None:
        async for _ in query(prompt="go", options=adapter.options(), transport=cli):
            pass

    asyncio.run(run())
    tools = cli.listed["tooltrace"]
    assert [t["name"] for t in tools] == ["add"]  # built-ins are Claude Code's, not served
    definition = reg.definition("add")
    assert definition is not None
    assert tools[0]["inputSchema"] == dict(definition.parameters)
    assert tools[0]["description"] == definition.description


def test_adopted_sdk_tools_keep_their_wire_schema_and_errors(make: Any, sink: RecordingSink
                                                             ) -> None:
    class Point(TypedDict):
        x: int
        y: float

    @sdk.tool("greet", "Greet someone", {"name": str})
    async def greet(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": f"Hello, {args['name']}"}]}

    @sdk.tool("plot", "Plot a point", Point)
    async def plot(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "no canvas"}], "is_error": True}

    reg, adapter = make()
    defs = adopt(reg, [greet, plot])
    wire = {"greet": {"type": "object", "properties": {"name": {"type": "string"}},
                      "required": ["name"]},
            "plot": {"type": "object", "properties": {"x": {"type": "integer"},
                                                      "y": {"type": "number"}},
                     "required": ["x", "y"]}}
    assert {d.name: dict(d.parameters) for d in defs} == wire
    assert sdk_schema(Point) == wire["plot"]
    create_sdk_mcp_server("same", tools=[greet, plot])  # the SDK accepts the same tools
    cli = FakeCli([[Use("greet", {"name": "Ada"}, server="tooltrace"),
                    Use("plot", {"x": 1, "y": 2.0}, server="tooltrace")]])

    async def run() -> None:
        async for _ in query(prompt="go", options=adapter.options(), transport=cli):
            pass

    asyncio.run(run())
    assert cli.seen["toolu_01"]["content"][0]["text"] == "Hello, Ada"
    plotted = cli.seen["toolu_02"]
    assert plotted["isError"] is True and "no canvas" in plotted["content"][0]["text"]
    assert one(sink, "plot").status is Status.FAILED


def test_parallel_uses_keep_their_own_call_ids(make: Any, sink: RecordingSink) -> None:
    reg, adapter = make()
    reg.register(add)
    adapter.register_builtins(["Bash"])
    cli = FakeCli([[Use("Bash", {"command": f"echo {i}"}, run=lambda i: {"stdout": i["command"]})
                    for i in range(3)] + [Use("add", {"a": 1, "b": 1}, server="tooltrace")]])

    async def run() -> None:
        async for _ in query(prompt="go", options=adapter.options(), transport=cli):
            pass

    asyncio.run(run())
    bash = [r for r in sink.records if r.tool == "Bash"]
    assert len(bash) == 3 and len({r.call_id for r in sink.records}) == 4
    for r in bash:
        use = r.attributes["provider.tool_call_id"]
        assert cli.seen[use]["output"] == {"stdout": r.args_redacted["command"]}


def test_spans_nest_under_the_applications_span(make: Any, sink: RecordingSink, otel: Any
                                                ) -> None:
    reg, adapter = make(sinks=[sink, otel.sink])
    reg.register(add)
    adapter.register_builtins(["Bash"])
    cli = FakeCli([[Use("Bash", {"command": "ls"}, run=lambda i: {"stdout": ""}),
                    Use("add", {"a": 1, "b": 2}, server="tooltrace")]])
    tracer = otel.provider.get_tracer("app")

    async def run() -> Any:
        with tracer.start_as_current_span("agent run") as span:
            async for _ in query(prompt="go", options=adapter.options(), transport=cli):
                pass
        return span.get_span_context()

    parent = asyncio.run(run())
    assert len(sink.records) == 2
    for r in sink.records:
        assert r.trace_id == f"{parent.trace_id:032x}"
        assert r.parent_span_id == f"{parent.span_id:016x}"
    names = sorted(s.name for s in otel.tool_spans())
    assert names == ["execute_tool Bash", "execute_tool add"]  # one span per call


def test_cancelled_mcp_call_follows_the_cancel_contract(make: Any, sink: RecordingSink
                                                        ) -> None:
    @tool(effect="local")
    async def slow(seconds: float) -> str:
        """Sleep (a cancel lands in the sleep and confirms the stop)."""
        await asyncio.sleep(seconds)
        return "slept"

    reg, adapter = make()
    reg.register(slow)
    cli = FakeCli([[Use("slow", {"seconds": 30}, server="tooltrace", cancel_after=0.3)]])

    async def run() -> None:
        async for _ in query(prompt="go", options=adapter.options(), transport=cli):
            pass

    asyncio.run(asyncio.wait_for(run(), 20))
    assert "error" in cli.seen["toolu_01"]  # the CLI gets no result for a call it cancelled
    rec = one(sink, "slow")
    assert rec.status is Status.CANCELLED and rec.execution_started


# -- the bypass test, through Claude ------------------------------------------------------------


def test_always_block_hook_stops_builtin_and_in_process_tools(
        make: Any, sink: RecordingSink, marker: Path) -> None:
    reg, adapter = make(registry={"hooks": [deny_all]})
    reg.register(touch)
    adapter.register_builtins(["Bash"])
    cli = FakeCli([[Use("Bash", {"command": f"touch {marker}"},
                        run=lambda i: marker.write_text("bash")),
                    Use("touch", {"name": "x"}, server="tooltrace")]])

    async def run() -> None:
        async for _ in query(prompt="go", options=adapter.options(), transport=cli):
            pass

    asyncio.run(run())
    assert not marker.exists() and cli.ran == []
    bash, mcp_touch = one(sink, "Bash"), one(sink, "touch")
    for rec in (bash, mcp_touch):
        assert (rec.status, rec.reject_stage) == (Status.REJECTED, Stage.HOOK)
        assert "maintenance window" in rec.summary
    assert cli.seen["toolu_01"] == {"denied": bash.summary}
    assert cli.seen["toolu_02"]["isError"] is True
    assert cli.seen["toolu_02"]["content"][0]["text"] == mcp_touch.summary
