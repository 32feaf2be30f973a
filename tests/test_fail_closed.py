"""The security core's fail-closed branches, each pinned by a case only that branch decides.

Every test here breaks when one line of the product is changed the wrong way (see
docs/internals/testing.md, mutation testing): a hook may not move a path to a sibling directory
that merely starts with the same name, a policy rule that raises is still asked (and its deny
holds), a rule or approver that raises refuses the call before the tool runs, and a record
forged and re-chained in a crashed writer's unsealed segment is caught by the checkpoint's
chain head alone (its MAC and signature still hold, no digest covers the segment yet)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

from tooltrace import (
    ApprovalRequest,
    Capability,
    DenyPrivateNetwork,
    HookDecision,
    HookView,
    Policy,
    RequireApproval,
    Stage,
    Status,
    ToolCall,
    ToolDefinition,
    ToolRegistry,
    hook,
    tool,
)
from tooltrace.audit import verify
from tooltrace.audit._format import chain_hash, seal_line, split_hash
from tooltrace.builtins import register_builtins
from tooltrace.policy import PolicyDecision, PolicyRequest, Verdict

# -- paths: an argument left out does not end the check of the others ---------------------------


def test_a_path_argument_left_out_does_not_skip_the_check_of_the_next(
    workspace: Path, tmp_path: Path
) -> None:
    ran: list[str] = []

    @tool(path_params=("src", "dst"))
    def copy(dst: str, src: str | None = None) -> str:
        """Copy a file (or make an empty one)."""
        ran.append(dst)
        return "copied"

    reg = ToolRegistry(workspace=workspace, home=tmp_path / "home")
    reg.register(copy)
    env = reg.call(ToolCall("copy", {"dst": "../secret.txt"}))
    reg.shutdown()
    assert env.status is Status.REJECTED and env.reject_stage is Stage.POLICY
    assert ran == []


# -- hooks: narrowing is by directory, not by string prefix -------------------------------------


@pytest.mark.parametrize(("before", "after"), [
    ("notes/a.txt", "notes-private/keys.txt"),  # a sibling whose name starts with the scope
    ("notes/a.txt", "notesprivate/keys.txt"),
    ("hello.txt", "notes/a.txt"),  # from the top level into a directory
    ("notes/deeper/a.txt", "notes/a.txt"),  # up out of the original's own directory
])
def test_a_hook_cannot_move_a_path_to_a_sibling_sharing_its_prefix(
        workspace: Path, tmp_path: Path, before: str, after: str) -> None:
    for d in ("notes-private", "notesprivate", "notes/deeper"):
        (workspace / d).mkdir()
        (workspace / d / "keys.txt").write_text("PRIVATE KEY MATERIAL\n")

    @hook()
    def redirect(view: HookView) -> HookDecision:
        return HookDecision.modify(arguments={"path": after})

    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h", hooks=[redirect])
    register_builtins(reg)
    try:
        env = reg.call(ToolCall("read_text", {"path": before}))
        assert env.status is Status.REJECTED and env.reject_stage is Stage.HOOK, env.summary
        last = [s for s in env.steps if s.step == "policy"][-1]
        assert (last.decider, last.decision) == ("policy:hook_scope", "deny")
        assert last.detail == {"param": "path", "reason": "widened path scope",
                               "hook": "redirect"}
        assert env.summary.endswith("hook redirect tried to widen a path's scope")
        assert not env.record.execution_started
        assert "PRIVATE KEY" not in repr(env.to_dict()) and "alpha" not in repr(env.to_dict())
    finally:
        reg.shutdown()


def test_a_hook_that_breaks_the_original_path_cannot_move_the_call_elsewhere(
        workspace: Path, tmp_path: Path) -> None:
    """The original path no longer resolves when the hook's change is checked (the hook made
    its directory a link out of the workspace): its scope is unknown, so no move is a
    narrowing."""
    outside = tmp_path / "outside"
    outside.mkdir()

    @hook()
    def redirect(view: HookView) -> HookDecision:
        (workspace / "notes").rename(tmp_path / "notes-moved")
        (workspace / "notes").symlink_to(outside)
        return HookDecision.modify(arguments={"path": "hello.txt"})

    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h", hooks=[redirect])
    register_builtins(reg)
    try:
        env = reg.call(ToolCall("read_text", {"path": "notes/a.txt"}))
        assert env.status is Status.REJECTED and env.reject_stage is Stage.HOOK, env.summary
        assert [(s.decider, s.decision) for s in env.steps if s.step == "policy"][-1] == (
            "policy:hook_scope", "deny")
        assert not env.record.execution_started
    finally:
        reg.shutdown()


@pytest.mark.parametrize(("before", "after"), [
    ("notes/a.txt", "notes/deeper/c.txt"),  # within notes/
    ("hello.txt", "c.txt"),  # within the top level
])
def test_a_hook_may_narrow_within_the_directory(
        workspace: Path, tmp_path: Path, before: str, after: str) -> None:
    """The contrast case: the same hook, moving within the original's directory, is
    applied."""
    (workspace / "notes" / "deeper").mkdir()
    (workspace / after).write_text("gamma\n")

    @hook()
    def redirect(view: HookView) -> HookDecision:
        return HookDecision.modify(arguments={"path": after})

    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h", hooks=[redirect])
    register_builtins(reg)
    try:
        env = reg.call(ToolCall("read_text", {"path": before}))
        assert env.status is Status.OK and env.data["text"] == "gamma\n", env.summary
    finally:
        reg.shutdown()


# -- policy rules that raise ---------------------------------------------------------------------

ran: list[str] = []


@tool(capability="write", effect="local")
def deploy(target: str) -> str:
    """A tool with an effect (records that it ran)."""
    ran.append(target)
    return "deployed"


class DenyButCannotSay:
    """Denies every call, but its ``applies_to`` raises: it must still be asked."""

    name = "deny_unsure"

    def applies_to(self, tool: Any) -> bool:
        raise RuntimeError("cannot tell")

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        return PolicyDecision(Verdict.DENY, self.name, "never deploy")


class AskButCannotSay(DenyButCannotSay):
    """Asks on every call; its ``applies_to`` raises."""

    name = "ask_unsure"

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        return PolicyDecision(Verdict.ASK, self.name, "a person decides")


class RaisesOnCall:
    """A rule whose evaluation raises."""

    name = "broken_rule"

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        raise ValueError("rule bug with token ghp_" + "x1Y2" * 9)


def _registry(tmp_path: Path, policy: Policy, **kw: Any) -> ToolRegistry:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    reg = ToolRegistry(workspace=ws, home=tmp_path / "h", policy=policy, **kw)
    reg.register(deploy)
    return reg


def test_a_deny_rule_whose_applies_to_raises_still_denies(tmp_path: Path) -> None:
    ran.clear()
    reg = _registry(tmp_path, Policy([DenyButCannotSay()]))
    try:
        env = reg.call(ToolCall("deploy", {"target": "prod"}))
        assert env.status is Status.REJECTED and env.reject_stage is Stage.POLICY, env.summary
        assert ("policy:deny_unsure", "deny") in [
            (s.decider, s.decision) for s in env.steps if s.step == "policy"]
        assert ran == [] and not env.record.execution_started
    finally:
        reg.shutdown()


def test_an_ask_rule_whose_applies_to_raises_still_asks(tmp_path: Path) -> None:
    ran.clear()
    asked: list[ApprovalRequest] = []

    def approver(req: ApprovalRequest) -> Any:
        from tooltrace import ApprovalDecision

        asked.append(req)
        return ApprovalDecision(approved=False, who="alice", reason="no")

    reg = _registry(tmp_path, Policy([AskButCannotSay()]), approver=approver)
    try:
        env = reg.call(ToolCall("deploy", {"target": "prod"}))
        assert [r.rule for r in asked] == ["ask_unsure"]
        assert env.status is Status.REJECTED and env.reject_stage is Stage.APPROVAL, env.summary
        assert ran == []
    finally:
        reg.shutdown()


def test_a_rule_that_raises_refuses_the_call_before_the_tool_runs(tmp_path: Path) -> None:
    ran.clear()
    reg = _registry(tmp_path, Policy([RaisesOnCall()]))
    try:
        env = reg.call(ToolCall("deploy", {"target": "prod"}))
        assert env.status is Status.REJECTED and env.reject_stage is Stage.POLICY, env.summary
        assert ("policy:broken_rule", "deny") in [
            (s.decider, s.decision) for s in env.steps if s.step == "policy"]
        assert ran == [] and not env.record.execution_started
        assert "x1Y2x1Y2" not in repr(env.to_dict())
    finally:
        reg.shutdown()


def test_an_approver_that_raises_refuses_the_call(tmp_path: Path) -> None:
    ran.clear()

    def approver(req: ApprovalRequest) -> Any:
        raise RuntimeError("approval service down")

    reg = _registry(tmp_path, Policy([RequireApproval(tools=frozenset({"deploy"}))]),
                    approver=approver)
    try:
        env = reg.call(ToolCall("deploy", {"target": "prod"}))
        assert env.status is Status.REJECTED and env.reject_stage is Stage.APPROVAL, env.summary
        (step,) = [s for s in env.steps if s.step == "approval"]
        assert (step.decider, step.decision) == ("user:unknown", "deny")
        assert "RuntimeError" in step.detail["error"]  # what went wrong, not "no answer"
        assert ran == [] and not env.record.execution_started
    finally:
        reg.shutdown()


def test_an_approver_answering_nonsense_refuses_the_call(tmp_path: Path) -> None:
    ran.clear()
    reg = _registry(tmp_path, Policy([RequireApproval(tools=frozenset({"deploy"}))]),
                    approver=lambda req: "yes")
    try:
        env = reg.call(ToolCall("deploy", {"target": "prod"}))
        assert env.status is Status.REJECTED and env.reject_stage is Stage.APPROVAL, env.summary
        assert ran == []
    finally:
        reg.shutdown()


# -- verify: a forged record in a crashed writer's unsealed segment ------------------------------

_CRASHING_WRITER = textwrap.dedent("""
    import os, sys, time
    from support.audit import workload
    from tooltrace.telemetry import AuditSink

    sink = AuditSink(sys.argv[1], checkpoint_every=10, group_max_records=4)
    for r in workload(45):
        sink.emit(r)
    end = time.monotonic() + 60
    while sink.acked_records < 45 and time.monotonic() < end:  # on disk, not checkpointed
        time.sleep(0.001)
    os._exit(0 if sink.acked_records == 45 else 3)  # a crash: no seal, no digest entry
""")


def _crashed_trail(home: Path) -> Path:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", _CRASHING_WRITER, str(home)], env=env, check=True,
                   timeout=120)
    (seg,) = sorted((home / "audit" / "segments").glob("*.live.jsonl"))
    return seg


def test_a_record_forged_and_rechained_in_an_unsealed_segment_is_caught(tmp_path: Path) -> None:
    home = tmp_path / "home"
    seg = _crashed_trail(home)
    rep = verify(home)
    assert rep.ok, rep.findings
    assert [f.kind for f in rep.findings] == ["unsealed"]
    lines = seg.read_bytes().splitlines(keepends=True)
    ckpts = [i for i, ln in enumerate(lines) if b'"k":"ckpt"' in ln]
    assert len(ckpts) >= 3
    # The warning counts exactly the lines the last checkpoint does not cover.
    uncovered = len(lines) - 1 - ckpts[-1]
    assert uncovered > 0
    assert f"; {uncovered} records after the last checkpoint" in rep.findings[0].message
    # A call record between the first two checkpoints, its status changed; every later line
    # re-chained (as someone without the key would), the checkpoints' bodies left as they were:
    # their MACs and signatures still hold, only the head they name does not.
    i = next(j for j in range(ckpts[0] + 1, ckpts[1]) if b'"k":"c"' in lines[j])
    prev = split_hash(lines[i - 1].rstrip(b"\n"))[1]  # type: ignore[index]
    for j in range(i, len(lines)):
        body, _ = split_hash(lines[j].rstrip(b"\n"))  # type: ignore[misc]
        if j == i:
            obj = orjson.loads(body)
            obj["status"] = "ok" if obj.get("status") != "ok" else "rejected"
            body = orjson.dumps(obj)
        prev = chain_hash(prev, body)
        lines[j] = seal_line(body, prev)
    seg.write_bytes(b"".join(lines))
    rep = verify(home)
    errors = [f for f in rep.findings if f.severity == "error"]
    assert not rep.ok
    # Every checkpoint from the forged record on names a head the chain no longer has.
    assert [(f.kind, f.line) for f in errors] == [("rewritten", c + 1) for c in ckpts[1:]]
    for f in errors:
        assert "it covers another chain head" in f.message
        assert "MAC" not in f.message and "signature" not in f.message


def test_a_line_stripped_of_its_seq_is_reported_once_not_as_an_edit(tmp_path: Path) -> None:
    """A record whose seq was removed and the chain re-made from it: verify says the seq is
    missing (at the next line) and the checkpoints no longer hold, and does not also call the
    line itself edited (it chains from the line before it, the one that precedes it)."""
    from support.audit import workload

    from tooltrace.telemetry import AuditSink

    home = tmp_path / "home"
    sink = AuditSink(home, checkpoint_every=25, segment_max_bytes=60_000, group_max_records=8)
    for r in workload(60):
        sink.emit(r)
    sink.shutdown()
    seg = sorted((home / "audit" / "segments").glob("*.jsonl"))[0]
    lines = seg.read_bytes().splitlines(keepends=True)
    i = next(j for j in range(5, len(lines)) if b'"k":"c"' in lines[j])
    prev = split_hash(lines[i - 1].rstrip(b"\n"))[1]  # type: ignore[index]
    for j in range(i, len(lines)):
        body, _ = split_hash(lines[j].rstrip(b"\n"))  # type: ignore[misc]
        if j == i:
            obj = orjson.loads(body)
            del obj["seq"]
            body = orjson.dumps(obj)
        prev = chain_hash(prev, body)
        lines[j] = seal_line(body, prev)
    seg.write_bytes(b"".join(lines))
    found = [(f.kind, f.line) for f in verify(home).findings if f.segment == seg.name]
    assert found[0] == ("deleted", i + 2)
    assert ("edited", i + 1) not in found
    assert {k for k, _ in found[1:]} == {"rewritten"}


def test_verify_counts_every_record_kind_and_no_header(tmp_path: Path) -> None:
    """Calls, late steps and approvals are records verify counts; the segment's header and the
    checkpoints are not (a count that drops a kind would hide its deletion from a total)."""
    import random

    from support.audit import make_record
    from support.forge import approval

    from tooltrace.model import Step
    from tooltrace.sinks import LateStep
    from tooltrace.telemetry import AuditSink

    home = tmp_path / "home"
    sink = AuditSink(home, checkpoint_every=2)
    rec = make_record(random.Random(3), kind="unknown")
    sink.emit(rec)
    sink.emit_late(LateStep(rec.call_id, rec.run_id, rec.tool, Step(
        1000, "resolved", rec.started_at_us + 900_000, 0, "runtime", "ok", {"outcome": "ok"})))
    sink.emit_approval(approval(0))
    sink.emit(make_record(random.Random(4), kind="ok"))
    sink.shutdown()
    rep = verify(home)
    assert rep.ok, rep.findings
    assert rep.records == 4 and rep.checkpoints >= 2


def _request(args: dict[str, Any]) -> PolicyRequest:
    d = ToolDefinition(name="fetch", description="", parameters={"type": "object"},
                       capability=Capability.NETWORK)
    return PolicyRequest(d, args, "default", "run", "call")


@pytest.mark.parametrize("levels", [1, 32, 33, 5000])
def test_a_private_url_nested_at_any_depth_is_found(levels: int) -> None:
    """The model controls the nesting: ``DenyPrivateNetwork`` finds a URL however deep it is
    put in lists and dicts (a depth bound would let it hide below), and a cycle ends the
    search instead of hanging it."""
    for wrap in (lambda v: [v], lambda v: {"a": {"b": v}}, lambda v: (0, v)):
        value: Any = "http://10.0.0.1/"
        for _ in range(levels):
            value = wrap(value)
        decision, _ = Policy([DenyPrivateNetwork()]).evaluate(_request({"q": value}))
        assert decision is not None and decision.verdict is Verdict.DENY
        assert decision.reason == "argument holds a URL to a private or local address"
    loop: list[Any] = ["http://example.com/"]
    loop.append(loop)
    assert Policy([DenyPrivateNetwork()]).evaluate(_request({"q": loop}))[0] is None


def test_a_rule_whose_names_tool_raises_is_asked_about_an_entry_that_is_not_a_tool() -> None:
    """Entries that are not tools are decided by the rules that name them; a rule that raises
    when asked whether it names one is asked all the same (as one whose applies_to raises)."""

    class Entry:
        name = "resource:secrets"
        listed = False

    class Unsure:
        name = "unsure"

        def names_tool(self, tool: str) -> bool:
            raise RuntimeError("cannot tell")

    class Elsewhere:
        name = "elsewhere"

        def names_tool(self, tool: str) -> bool:
            return False

    rules = (Elsewhere(), Unsure())
    assert [i for i, _ in Policy._rules_for(Entry(), rules)] == [1]  # type: ignore[arg-type]


# -- sandbox set-up -------------------------------------------------------------------------------


def test_landlock_is_no_backend_without_its_helper_or_an_interpreter(monkeypatch: Any) -> None:
    """The Landlock backend needs both the interpreter and the helper it runs commands through;
    missing either, it is not offered (and ``choose_sandbox`` refuses or falls back)."""
    from support.components import missing

    from tooltrace.runtime import _sandbox

    if _sandbox.landlock_abi() < 1:
        missing("this kernel offers no Landlock (5.13 or newer, enabled at boot)")
    assert _sandbox._landlock_backend(None)[0] is not None
    monkeypatch.setattr(_sandbox, "_HELPER", "/nonexistent/tooltrace-landlock-helper.py")
    box, why = _sandbox._landlock_backend(None)
    assert box is None and "no Python interpreter" in why
    monkeypatch.undo()
    monkeypatch.setattr(_sandbox.sys, "executable", "")
    box, why = _sandbox._landlock_backend(None)
    assert box is None and "no Python interpreter" in why
