"""Registration, the shadow report, modes, and the result envelope of the call pipeline."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest

from tooltrace import (
    ApprovalDecision,
    ApprovalRequest,
    CallContext,
    Capability,
    DuplicateToolError,
    Effect,
    InvalidSchemaError,
    Policy,
    RegistrationError,
    RequireApproval,
    Stage,
    Status,
    ToolCall,
    ToolDefinition,
    ToolRegistry,
    tool,
)
from tooltrace.testing import RecordingSink


def _defn(name: str = "t", **kw: Any) -> ToolDefinition:
    params = kw.pop("parameters", {"type": "object", "properties": {"x": {"type": "integer"}}})
    return ToolDefinition(name=name, description="d", parameters=params, **kw)


def _steps(env: Any) -> list[tuple[str, str, str]]:
    return [(s.step, s.decider, s.decision) for s in env.steps]


# -- registration -----------------------------------------------------------------------------


def test_decorator_builds_schema_from_types(registry: ToolRegistry) -> None:
    @tool(capability="read")
    def lookup(
        ctx: CallContext,
        key: Annotated[str, "the key"],
        limit: int = 5,
        kind: Literal["a", "b"] = "a",
    ) -> str:
        """Look a key up."""
        return f"{key}:{limit}:{kind}"

    d = registry.register(lookup)
    assert d.description == "Look a key up."
    props = d.parameters["properties"]
    assert props["key"] == {"type": "string", "description": "the key"}
    assert props["limit"] == {"type": "integer", "default": 5}
    assert props["kind"]["enum"] == ["a", "b"]
    assert "ctx" not in props
    assert d.parameters["required"] == ["key"]
    env = registry.call(ToolCall("lookup", {"key": "k"}))
    assert env.status is Status.OK and env.data == "k:5:a"


@pytest.mark.parametrize("name", ["", "a b", "x" * 129, "naïve", "a/b"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(RegistrationError):
        _defn(name)


def test_invalid_schema_leaves_nothing_registered(tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "h")
    bad = _defn("half", parameters={"type": "object", "properties": {"x": {"type": "integr"}}})
    with pytest.raises(InvalidSchemaError) as ei:
        reg.register(bad, lambda x: x)
    assert "properties/x/type" in str(ei.value)
    assert reg.tool_names() == frozenset()
    assert reg.resolution() == []
    # A definition whose path parameter is not in the schema fails before reaching the registry.
    with pytest.raises(RegistrationError):
        _defn("p", path_params=("nope",))
    # A handler that is not callable: nothing registered either.
    with pytest.raises(RegistrationError):
        reg.register(_defn("nocall"), "not callable")  # type: ignore[arg-type]
    assert reg.tool_names() == frozenset()
    reg.shutdown()


def test_same_source_twice_is_an_error(tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "h")
    reg.register(_defn("dup"), lambda x=0: x)
    with pytest.raises(DuplicateToolError):
        reg.register(_defn("dup"), lambda x=0: x)
    assert [r.name for r in reg.resolution()] == ["dup"]
    reg.shutdown()


def test_shadowing_by_priority_and_report(tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "h")
    reg.register(
        _defn(
            "fmt", source="builtin", priority=0, capability=Capability.WRITE, effect=Effect.LOCAL
        ),
        lambda x=0: "builtin",
    )
    reg.register(_defn("fmt", source="project", priority=10), lambda x=0: "project")
    reg.register(_defn("fmt", source="user", priority=5), lambda x=0: "user")
    with pytest.raises(RegistrationError, match="same priority"):
        reg.register(_defn("fmt", source="mcp:a", priority=5), lambda x=0: "mcp")
    (res,) = reg.resolution()
    assert res.active_source == "project"
    assert res.shadowed == (("user", 5), ("builtin", 0))
    # The override declared read/none, but never gets more freedom than what it shadows.
    assert (res.capability, res.effect, res.narrowed) == ("write", "local", True)
    d = reg.definition("fmt")
    assert d is not None and d.capability is Capability.WRITE and d.effect is Effect.LOCAL
    assert reg.call(ToolCall("fmt", {})).data == "project"
    reg.unregister("fmt", "project")
    assert reg.call(ToolCall("fmt", {})).data == "user"
    reg.shutdown()


def test_visible_tools_per_mode_are_deterministic(tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "h")
    for name, cap, eff in [
        ("zeta", "read", "none"),
        ("alpha", "write", "local"),
        ("mid", "read", "none"),
        ("exec", "execute", "external"),
    ]:
        reg.register(_defn(name, capability=Capability(cap), effect=Effect(eff)), lambda x=0: x)
    plan = reg.visible_tools("plan")
    assert [d.name for d in plan.visible] == ["mid", "zeta"]
    assert [h[0] for h in plan.hidden] == ["alpha", "exec"]
    assert all("not allowed in mode 'plan'" in why for _, why in plan.hidden)
    assert [d.name for d in reg.visible_tools("default").visible] == [
        "alpha",
        "exec",
        "mid",
        "zeta",
    ]
    assert reg.visible_tools("plan") == plan
    env = reg.call(ToolCall("alpha", {}, mode="plan"))
    assert env.status is Status.REJECTED and env.reject_stage is Stage.POLICY
    assert ("policy", "policy:mode", "deny") in _steps(env)
    reg.shutdown()


# -- the four outcomes of one read-only tool --------------------------------------------------


def test_four_outcomes_of_read_text(
    registry: ToolRegistry, workspace: Path, sink: RecordingSink, tmp_path: Path
) -> None:
    ok = registry.call(ToolCall("read_text", {"path": "notes/a.txt"}))
    bad = registry.call(ToolCall("read_text", {"path": 42}))
    denied = registry.call(ToolCall("read_text", {"path": "../secret.txt"}))

    @tool(capability="read", timeout_s=0.2)
    def slow_read(path: str) -> str:
        time.sleep(1.0)
        return "late"

    registry.register(slow_read)
    timed_out = registry.call(ToolCall("slow_read", {"path": "notes/a.txt"}))

    assert ok.status is Status.OK and ok.data["text"] == "alpha\n"
    assert bad.status is Status.REJECTED and bad.reject_stage is Stage.PARAMS
    assert denied.status is Status.REJECTED and denied.reject_stage is Stage.POLICY
    assert timed_out.status is Status.FAILED and timed_out.record.error_type == "timeout"
    assert timed_out.record.execution_started and not denied.record.execution_started
    ids = {e.call_id for e in (ok, bad, denied, timed_out)}
    assert len(ids) == 4 and all(len(i) == 36 and i[14] == "7" for i in ids)  # UUIDv7
    for env in (ok, bad, denied, timed_out):
        assert env.summary and env.steps and env.steps[0].step == "resolve"
        for text in (env.summary, repr(env.record.steps), repr(env.data)):
            assert str(tmp_path) not in text
            assert "TOP SECRET" not in text
        assert [r.call_id for r in sink.records].count(env.call_id) == 1
    assert "must be string" in bad.summary
    assert "outside_workspace" in denied.summary
    assert "timed out" in timed_out.summary
    assert ok.retry.allowed and not denied.retry.allowed
    assert any(s.step == "deadline" for s in timed_out.steps)


def test_read_text_large_file_returns_head_and_size(
    registry: ToolRegistry, workspace: Path
) -> None:
    (workspace / "big.txt").write_text("x" * 30_000)
    env = registry.call(ToolCall("read_text", {"path": "big.txt"}))
    assert env.status is Status.OK
    assert env.data == {"text": "x" * 2048, "truncated": True, "size_bytes": 30_000}
    assert "30000 bytes" in env.summary


def test_read_text_refuses_non_txt(registry: ToolRegistry, workspace: Path) -> None:
    (workspace / "conf.ini").write_text("a=1")
    env = registry.call(ToolCall("read_text", {"path": "conf.ini"}))
    assert env.status is Status.FAILED or env.status is Status.REJECTED
    assert "conf.ini" in env.summary and str(workspace) not in env.summary


@pytest.mark.parametrize(
    "make_path",
    [
        lambda ws, out: "../secret.txt",
        lambda ws, out: str(out / "secret.txt"),
        lambda ws, out: _link(ws / "link.txt", out / "secret.txt"),
        lambda ws, out: _dirlink(ws, out),
        lambda ws, out: _chain(ws, out),
        lambda ws, out: _sibling(ws),
        lambda ws, out: "notes/a.txt\x00.txt",
        lambda ws, out: "%2e%2e/secret.txt",
        lambda ws, out: "%252e%252e%252fsecret.txt",
        lambda ws, out: "..\\secret.txt",
        lambda ws, out: "C:\\Windows\\win.ini.txt",
        lambda ws, out: "c:/secret.txt",
        lambda ws, out: "\\\\server\\share\\secret.txt",
        lambda ws, out: "\\\\?\\C:\\secret.txt",
        lambda ws, out: "notes\\..\\..\\secret.txt",
    ],
)
def test_read_text_never_escapes(registry: ToolRegistry, workspace: Path, make_path: Any) -> None:
    p = make_path(workspace, workspace.parent)
    env = registry.call(ToolCall("read_text", {"path": p}))
    assert env.status is not Status.OK, env.summary
    assert "TOP SECRET" not in repr(env.to_dict())
    assert str(workspace.parent) not in env.summary


def _link(link: Path, target: Path) -> str:
    link.symlink_to(target)
    return link.name


def _dirlink(ws: Path, out: Path) -> str:
    (ws / "notes" / "up").symlink_to(out, target_is_directory=True)
    return "notes/up/secret.txt"


def _chain(ws: Path, out: Path) -> str:
    (ws / "c1.txt").symlink_to("c2.txt")
    (ws / "c2.txt").symlink_to("notes/../c3.txt")
    (ws / "c3.txt").symlink_to("../secret.txt")
    return "c1.txt"


def _sibling(ws: Path) -> str:
    evil = ws.parent / (ws.name + "-evil")
    evil.mkdir()
    (evil / "x.txt").write_text("TOP SECRET sibling")
    return f"../{evil.name}/x.txt"


def test_relative_symlink_chain_inside_is_fine(registry: ToolRegistry, workspace: Path) -> None:
    (workspace / "l1.txt").symlink_to("notes/l2.txt")
    (workspace / "notes" / "l2.txt").symlink_to("a.txt")
    env = registry.call(ToolCall("read_text", {"path": "l1.txt"}))
    assert env.status is Status.OK and env.data["text"] == "alpha\n"


# -- failures, redaction, offload -------------------------------------------------------------


def test_exception_text_is_redacted_and_has_no_host_path(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    @tool()
    def boom(x: int = 0) -> str:
        raise RuntimeError(f"cannot open {tmp_path}/ws/creds.txt with token ghp_{'a1B2' * 9}")

    registry.register(boom)
    env = registry.call(ToolCall("boom", {}))
    assert env.status is Status.FAILED and env.record.error_type == "RuntimeError"
    assert str(tmp_path) not in env.summary
    assert "ghp_a1B2" not in env.summary and "RuntimeError" in env.summary


def test_secret_arguments_and_results_are_redacted(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    secret = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"

    @tool()
    def echo(text: str, password: str = "") -> dict[str, str]:
        return {"echo": text, "password": password}

    registry.register(echo)
    env = registry.call(ToolCall("echo", {"text": f"key {secret}", "password": "hunter2"}))
    assert env.status is Status.OK
    blob = repr(env.to_dict()) + repr(sink.records[-1])
    assert secret not in blob and "hunter2" not in blob and "sk_live_4eC" not in blob
    assert "[REDACTED:" in env.data["echo"]


def test_big_result_goes_to_an_artifact(registry: ToolRegistry, tmp_path: Path) -> None:
    import hashlib

    @tool()
    def dump(n: int) -> str:
        return "line of output\n" * n

    registry.register(dump)
    env = registry.call(ToolCall("dump", {"n": 5000}))
    full = "line of output\n" * 5000
    assert env.status is Status.OK and env.artifact is not None
    assert env.artifact.sha256 == hashlib.sha256(full.encode()).hexdigest()
    assert env.artifact.chars == len(full)
    assert not env.artifact.path.startswith("/")
    assert (registry.home / env.artifact.path).read_text() == full
    assert len(env.data) < 3000 and env.artifact.sha256[:12] in env.summary
    assert any(s.step == "offload" and s.decision == "offloaded" for s in env.steps)


# -- approval ---------------------------------------------------------------------------------


def test_ask_goes_to_the_approver_and_is_recorded(workspace: Path, tmp_path: Path) -> None:
    asked: list[ApprovalRequest] = []

    def approver(req: ApprovalRequest) -> ApprovalDecision:
        asked.append(req)
        return ApprovalDecision(req.arguments.get("x") == 1, who="alice", reason="looked fine")

    sink = RecordingSink()
    reg = ToolRegistry(
        workspace=workspace,
        home=tmp_path / "h",
        sinks=[sink],
        approver=approver,
        policy=Policy([RequireApproval(tools=frozenset({"t"}))]),
    )
    reg.register(_defn("t"), lambda x=0: x)
    yes = reg.call(ToolCall("t", {"x": 1}))
    no = reg.call(ToolCall("t", {"x": 2}))
    assert yes.status is Status.OK and no.status is Status.REJECTED
    assert no.reject_stage is Stage.APPROVAL
    assert ("approval", "user:alice", "approve") in _steps(yes)
    assert ("policy", "policy:require_approval", "ask") in _steps(yes)
    assert ("approval", "user:alice", "deny") in _steps(no)
    assert len(asked) == 2
    reg.shutdown()


def test_ask_without_approver_is_denied(workspace: Path, tmp_path: Path) -> None:
    reg = ToolRegistry(
        workspace=workspace,
        home=tmp_path / "h",
        policy=Policy([RequireApproval(tools=frozenset({"t"}))]),
    )
    reg.register(_defn("t"), lambda x=0: x)
    env = reg.call(ToolCall("t", {}))
    assert env.status is Status.REJECTED and env.reject_stage is Stage.APPROVAL
    reg.shutdown()


# -- parsing, async twin, envelopes ------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        '{"name": "read_text", "arguments": ',
        b"\xff\xfe",
        "[1,2]",
        '{"arguments": {}}',
        '{"name": "read_text", "arguments": "not json"}',
        '{"name": "x", "bogus": 1}',
    ],
)
def test_malformed_calls_are_rejected_and_recorded(
    registry: ToolRegistry, sink: RecordingSink, raw: str | bytes
) -> None:
    env = registry.call(raw)
    assert env.status is Status.REJECTED and env.reject_stage is Stage.PARAMS
    assert "malformed tool call" in env.summary
    assert sink.by_id(env.call_id)[0].tool == "_unregistered"


def test_openai_style_string_arguments(registry: ToolRegistry) -> None:
    env = registry.call('{"name": "read_text", "arguments": "{\\"path\\": \\"hello.txt\\"}"}')
    assert env.status is Status.OK and env.data["text"] == "hello world\n"


def test_unknown_tool_is_rejected_at_resolve(registry: ToolRegistry) -> None:
    env = registry.call(ToolCall("no_such_tool", {}))
    assert env.status is Status.REJECTED and env.reject_stage is Stage.RESOLVE
    assert env.record.tool == "_unregistered"
    assert env.steps[0].detail == {"requested": "no_such_tool"}


def test_async_twin_runs_the_same_pipeline(registry: ToolRegistry) -> None:
    @tool()
    async def aread(path: str) -> str:
        await asyncio.sleep(0.01)
        return path.upper()

    registry.register(aread)

    async def main() -> list[Any]:
        return list(
            await asyncio.gather(
                registry.acall(ToolCall("aread", {"path": "p"})),
                registry.acall(ToolCall("read_text", {"path": "hello.txt"})),
                registry.acall(ToolCall("read_text", {"path": "../secret.txt"})),
                registry.acall(ToolCall("aread", {})),
            )
        )

    a, b, c, d = asyncio.run(main())
    assert a.status is Status.OK and a.data == "P"
    assert b.status is Status.OK and b.data["text"] == "hello world\n"
    assert c.reject_stage is Stage.POLICY and d.reject_stage is Stage.PARAMS
    # Sync caller, async tool.
    assert registry.call(ToolCall("aread", {"path": "q"})).data == "Q"


def test_envelope_to_dict_is_json(registry: ToolRegistry) -> None:
    import json

    env = registry.call(ToolCall("read_text", {"path": "hello.txt"}))
    d = json.loads(json.dumps(env.to_dict()))
    assert d["status"] == "ok" and d["call_id"] == env.call_id
    assert [s["step"] for s in d["steps"]][:3] == ["resolve", "validate", "policy"]


def test_policy_step_records_where_the_path_resolved(
    registry: ToolRegistry, workspace: Path
) -> None:
    (workspace / "alias.txt").symlink_to("notes/a.txt")
    env = registry.call(ToolCall("read_text", {"path": "alias.txt"}))
    pol = next(s for s in env.steps if s.step == "policy")
    assert pol.detail is not None and pol.detail["paths"] == {"path": "notes/a.txt"}


def test_tracing_sink_is_the_tracer_and_rejected_calls_share_its_ids(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tooltrace.telemetry.tracing import TracingSink

    exporter = InMemorySpanExporter()
    tracing = TracingSink(exporter=exporter)
    sink = RecordingSink()
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "h", sinks=[tracing, sink])
    reg.register(_defn("t"), lambda x=0: x)
    envs = [reg.call(ToolCall("t", {})), reg.call(ToolCall("nope", {})), reg.call("{bad json")]
    reg.shutdown()
    spans = {format(s.context.span_id, "016x"): s for s in exporter.get_finished_spans()}
    for env in envs:
        rec = sink.by_id(env.call_id)[0]
        assert rec.trace_id and rec.span_id in spans
        assert spans[rec.span_id].attributes["gen_ai.tool.call.id"] == env.call_id


def test_cancel_before_execution_refuses_the_call(tmp_path: Path) -> None:
    import threading

    from tooltrace import HookView, hook

    ran: list[int] = []
    entered, asked = threading.Event(), threading.Event()

    @hook()
    def slow_check(view: HookView) -> None:
        entered.set()
        asked.wait(30)  # the cancel lands while the call is still in its hooks

    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "h", hooks=[slow_check])
    reg.register(_defn("t"), lambda x=0: ran.append(x))
    call = ToolCall("t", {"x": 1}, call_id="01a23600-0000-7000-8000-000000000001")

    def cancel() -> None:
        entered.wait(30)
        reg.cancel_call(call.call_id or "", wait=False)
        asked.set()

    t = threading.Thread(target=cancel)
    t.start()
    env = reg.call(call)
    t.join()
    assert env.status is Status.REJECTED and env.reject_stage is Stage.CANCEL
    assert ran == [] and not env.record.execution_started
    reg.shutdown()


def test_outcome_unknown_from_a_side_effecting_tool_ends_unknown(tmp_path: Path) -> None:
    from tooltrace import OutcomeUnknown

    class LinkLost(OutcomeUnknown):
        error_type = "link_lost"

    def lost(x: int = 0) -> None:
        raise LinkLost("connection dropped after the request was sent")

    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "h")
    reg.register(_defn("deploy", effect=Effect.EXTERNAL, capability=Capability.EXECUTE), lost)
    reg.register(_defn("peek"), lost)
    deploy = reg.call(ToolCall("deploy", {}))
    peek = reg.call(ToolCall("peek", {}))
    assert deploy.status is Status.UNKNOWN and deploy.record.error_type == "link_lost"
    assert deploy.retry.requires_inspection and not deploy.retry.allowed
    assert peek.status is Status.FAILED  # no side effects: nothing may have happened
    reg.shutdown()


def test_steps_behave_like_their_tuple_and_cost_the_collector_nothing(tmp_path: Path) -> None:
    """Steps unpack, index, encode and convert like the 7-tuple they stand for, and are never
    tracked by the cyclic garbage collector (records wait in sink queues by the thousand)."""
    import gc

    import msgspec

    from tooltrace.model import Step

    reg = ToolRegistry(workspace=tmp_path)

    @tool("echo_steps", execution="inline")
    def echo_steps(text: str) -> str:
        """Echo."""
        return text

    reg.register(echo_steps)
    env = reg.call(ToolCall("echo_steps", {"text": "hi"}))
    assert env.status == Status.OK and len(env.steps) >= 5
    for st in env.steps:
        assert not gc.is_tracked(st)
        seq, name, started, elapsed, decider, decision, detail = st
        assert (seq, name, decider) == (st.seq, st.step, st.decider) and st[1] == name
        assert len(st) == 7 and tuple(st)[-1] is detail
        assert msgspec.json.decode(msgspec.json.encode(st)) == msgspec.json.decode(
            msgspec.json.encode(list(st))
        )
        assert st._asdict()["decision"] == decision
        assert st._replace(decision="x") == Step(seq, name, started, elapsed, decider, "x", detail)
    assert [s.step for s in env.steps][:3] == ["resolve", "validate", "policy"]
    reg.shutdown()


def test_step_details_share_no_container_with_the_tool(tmp_path: Path) -> None:
    """Steps are invisible to the garbage collector, so a detail must not hold the tool's own
    list: if the caller later puts the envelope into that list, the cycle would run through a
    step and never be collected. The detail is a copy; the cycle is collectable."""
    import gc
    import weakref

    class Marker:
        pass

    holder: dict[str, list[Any]] = {"items": ["a"]}

    @tool("with_detail", execution="inline")
    def with_detail(ctx: CallContext, n: int) -> str:
        """Report a detail that holds a list the caller keeps."""
        ctx.set_detail("items", holder["items"])
        return "done"

    reg = ToolRegistry(workspace=tmp_path)
    reg.register(with_detail)
    env = reg.call(ToolCall("with_detail", {"n": 1}))
    assert env.status == Status.OK
    (execute,) = [s for s in env.steps if s.step == "execute"]
    assert execute.detail is not None and execute.detail["items"] == ["a"]
    shared = holder.pop("items")
    assert execute.detail["items"] is not shared  # a copy, not the tool's list
    marker = Marker()
    alive = weakref.ref(marker)
    shared.extend([env, marker])  # the caller makes a cycle through its own list
    del env, execute, marker, shared
    reg.shutdown()
    del reg
    gc.collect()
    assert alive() is None
