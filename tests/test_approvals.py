"""Approvals bound to arguments: the digest, asking again when a hook changes the arguments,
approval records in the audit chain (verified, queried), and reuse within a time to live."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from tooltrace import (
    ApprovalDecision,
    ApprovalRequest,
    HookDecision,
    HookView,
    Policy,
    Principal,
    RequireApproval,
    Stage,
    Status,
    ToolCall,
    ToolRegistry,
    create_registry,
    hook,
    tool,
)
from tooltrace.audit import list_approvals, open_store, verify
from tooltrace.policy import arguments_sha256

SECRET = "ghp_" + "Q7wE9rT2yU4iO6pA8sD0fG1hJ3kL5zX7cV9b"


@tool(capability="network", effect="external")
def send(to: str, body: str = "", token: str = "") -> dict[str, Any]:
    """Pretend to send a message."""
    return {"sent": to}


class Approver:
    """Answers from a script, one answer per question, and keeps what it was asked."""

    def __init__(self, *answers: ApprovalDecision) -> None:
        self.answers = list(answers)
        self.asked: list[ApprovalRequest] = []

    def __call__(self, req: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(req)
        return self.answers.pop(0)


def _registry(tmp_path: Path, approver: Approver, **kw: Any) -> ToolRegistry:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    reg = create_registry(
        ws, home=tmp_path / "home", tracing=False, metrics=False, logging=False,
        builtins=False, approver=approver,
        policy=Policy([RequireApproval(tools=frozenset({"send"}))]), **kw,
    )
    reg.register(send)
    return reg


def _steps(env: Any, name: str = "approval") -> list[Any]:
    return [s for s in env.steps if s.step == name]


def test_the_digest_is_over_canonical_redacted_arguments() -> None:
    a = arguments_sha256({"b": 1, "a": [1, "x"], "c": {"z": 1, "y": 2.5}})
    b = arguments_sha256({"c": {"y": 2.5, "z": 1}, "a": [1, "x"], "b": 1})
    assert a == b and len(a) == 64
    assert a != arguments_sha256({"b": 2, "a": [1, "x"], "c": {"z": 1, "y": 2.5}})


def test_the_digest_reads_sets_as_sorted_lists_and_any_mapping_as_a_dict() -> None:
    # A set's order is arbitrary and a read-only mapping is not a dict: both still digest as
    # the JSON the trail records for them.
    assert arguments_sha256({"tags": frozenset({"b", "a"})}) == arguments_sha256(
        {"tags": ["a", "b"]})
    assert arguments_sha256({"tags": {2, 10}}) == arguments_sha256({"tags": ["10", "2"]})
    view = MappingProxyType({"z": 1, "y": {"x": 2}})
    assert arguments_sha256({"opts": view}) == arguments_sha256({"opts": {"y": {"x": 2}, "z": 1}})


def test_an_approval_records_who_why_when_and_the_digest(tmp_path: Path) -> None:
    ap = Approver(ApprovalDecision(True, who="alice", reason=f"fine, token was {SECRET}"))
    reg = _registry(tmp_path, ap)
    before = time.time()
    # Every argument given: the digest covers the arguments as validated (defaults filled in).
    env = reg.call(ToolCall("send", {"to": "bob", "body": "hi", "token": SECRET}))
    reg.shutdown()
    assert env.status is Status.OK
    (req,) = ap.asked
    assert SECRET not in json.dumps(dict(req.arguments))  # the approver sees redacted arguments
    assert req.arguments_sha256 == arguments_sha256(req.arguments)
    (step,) = _steps(env)
    assert step.decider == "user:alice" and step.decision == "approve"
    assert step.detail["args_sha256"] == req.arguments_sha256
    with open_store(tmp_path / "home") as store:
        (row,) = store.sql("SELECT * FROM approvals").dicts()
        (call,) = store.sql("SELECT args_redacted FROM tool_calls").rows
    assert row["approver"] == "alice" and row["decision"] == "approve" and row["tool"] == "send"
    assert row["approval_id"] == step.detail["approval_id"]
    assert row["args_sha256"] == req.arguments_sha256
    # Anyone can recompute the digest from what the trail recorded of the call's arguments,
    # and from the approval record's own copy of them.
    assert arguments_sha256(json.loads(call[0])) == row["args_sha256"]
    assert arguments_sha256(json.loads(row["args_redacted"])) == row["args_sha256"]
    assert SECRET not in row["args_redacted"]
    assert SECRET not in row["reason"] and "fine" in row["reason"]
    assert row["approved_at"].timestamp() == pytest.approx(before, abs=60)
    assert row["expires_at"] is None and row["covered_calls"] == [env.call_id]


def test_a_hook_that_changes_the_arguments_is_asked_about_again(tmp_path: Path) -> None:
    @hook("reroute", tools={"send"})
    def reroute(view: HookView) -> HookDecision | None:
        return HookDecision.modify(arguments={**view.arguments, "to": "carol"}, reason="reroute")

    ap = Approver(ApprovalDecision(True, who="alice"), ApprovalDecision(True, who="alice"),
                  ApprovalDecision(True, who="alice"), ApprovalDecision(False, who="bob"))
    reg = _registry(tmp_path, ap, hooks=[reroute])
    ok = reg.call(ToolCall("send", {"to": "bob"}))
    denied = reg.call(ToolCall("send", {"to": "dave"}))
    reg.shutdown()
    assert ok.status is Status.OK and len(ap.asked) == 4
    first, second = ap.asked[0], ap.asked[1]
    assert first.arguments["to"] == "bob" and second.arguments["to"] == "carol"
    assert first.arguments_sha256 != second.arguments_sha256
    assert second.arguments_sha256 == arguments_sha256({"to": "carol", "body": "", "token": ""})
    digests = [s.detail["args_sha256"] for s in _steps(ok)]
    assert digests == [first.arguments_sha256, second.arguments_sha256]
    # The second answer (about the new arguments) denies: the call never runs.
    assert denied.status is Status.REJECTED and denied.reject_stage is Stage.APPROVAL
    assert [s.decision for s in _steps(denied)] == ["approve", "deny"]
    assert not any(s.step == "execute" for s in denied.steps)
    with open_store(tmp_path / "home") as store:
        rows = list_approvals(store).dicts()
    assert [r["decision"] for r in rows] == ["deny", "approve", "approve", "approve"]
    assert rows[0]["covered_calls"] == [] and rows[0]["call_id"] == denied.call_id


@pytest.mark.parametrize("setting", [None, "deny", " Allow "])
def test_with_no_approver_an_ask_follows_tooltrace_approval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None
) -> None:
    if setting is None:
        monkeypatch.delenv("TOOLTRACE_APPROVAL", raising=False)
    else:
        monkeypatch.setenv("TOOLTRACE_APPROVAL", setting)
    reg = _registry(tmp_path, Approver())
    reg.approver = None
    env = reg.call(ToolCall("send", {"to": "bob"}))
    reg.shutdown()
    (step,) = _steps(env)
    assert step.detail["reason"] == "no approver configured"
    assert step.detail["args_sha256"] == arguments_sha256({"to": "bob", "body": "", "token": ""})
    if setting == " Allow ":
        assert env.status is Status.OK and step.decision == "approve"
    else:
        assert env.status is Status.REJECTED and env.reject_stage is Stage.APPROVAL
        assert step.decision == "deny"
        assert env.summary.endswith("approval required and no approver is configured")


@pytest.mark.parametrize("ttl", ["soon", object(), 10**400, float("inf"), "inf"])
def test_an_approval_with_a_malformed_time_to_live_covers_its_call_only(
    tmp_path: Path, ttl: Any
) -> None:
    ap = Approver(ApprovalDecision(True, who="alice", ttl=ttl),
                  ApprovalDecision(True, who="alice"))
    reg = _registry(tmp_path, ap)
    envs = [reg.call(ToolCall("send", {"to": "bob"})) for _ in range(2)]
    reg.shutdown()
    assert [e.status for e in envs] == [Status.OK, Status.OK]
    assert len(ap.asked) == 2  # not reused: asked again
    assert "expires_at_us" not in _steps(envs[0])[0].detail


def test_an_approval_with_a_time_to_live_covers_the_same_arguments_only(tmp_path: Path) -> None:
    ap = Approver(ApprovalDecision(True, who="alice", ttl=timedelta(seconds=3)),
                  ApprovalDecision(True, who="alice"), ApprovalDecision(True, who="alice"),
                  ApprovalDecision(True, who="alice"))
    reg = _registry(tmp_path, ap)
    now = [time.time_ns() // 1000]  # the clock approvals expire by, moved by the test
    reg.environment.approvals.now_us = lambda: now[0]
    a = ToolCall("send", {"to": "bob"})
    first = reg.call(a)
    again = reg.call(ToolCall("send", {"to": "bob"}))  # same arguments: not asked
    other = reg.call(ToolCall("send", {"to": "eve"}))  # other arguments: asked
    assert len(ap.asked) == 2
    (reused,) = _steps(again)
    approval_id = _steps(first)[0].detail["approval_id"]
    assert reused.decider == f"approval:{approval_id}" and reused.decision == "approve"
    assert reused.detail["args_sha256"] == _steps(first)[0].detail["args_sha256"]
    assert reused.detail["reused"] is True
    assert _steps(other)[0].decider == "user:alice"
    now[0] += 2_999_999  # still inside the 3 s it lives: reused
    inside = reg.call(ToolCall("send", {"to": "bob"}))
    assert len(ap.asked) == 2 and _steps(inside)[0].decider == f"approval:{approval_id}"
    now[0] += 1  # 3 s to the microsecond: expired, asked again
    expired = reg.call(ToolCall("send", {"to": "bob"}))
    assert len(ap.asked) == 3 and _steps(expired)[0].decider == "user:alice"
    as_else = reg.call(ToolCall("send", {"to": "bob"}, principal=Principal(user="mallory")))
    assert _steps(as_else)[0].decider == "user:alice"  # another principal: asked
    reg.shutdown()
    assert len(ap.asked) == 4
    with open_store(tmp_path / "home") as store:
        (row,) = store.sql("SELECT * FROM approvals WHERE approval_id = $a",
                           {"a": approval_id}).dicts()
    assert row["expires_at"] is not None
    assert sorted(row["covered_calls"]) == sorted([first.call_id, again.call_id,
                                                   inside.call_id])
    assert row["uses"] == 3


def test_a_policy_rule_can_give_approvals_a_time_to_live(tmp_path: Path) -> None:
    from tooltrace.policy.file import load_policy

    f = tmp_path / "tooltrace.toml"
    f.write_text('version = 1\ntools = ["send"]\n[approval]\ntools = ["send"]\nttl = "10m"\n')
    ap = Approver(ApprovalDecision(True, who="alice"))
    ws = tmp_path / "ws"
    ws.mkdir()
    reg = create_registry(ws, home=tmp_path / "home", tracing=False, metrics=False,
                          logging=False, builtins=False, approver=ap, policy_file=f)
    reg.register(send)
    one = reg.call(ToolCall("send", {"to": "bob"}))
    two = reg.call(ToolCall("send", {"to": "bob"}))
    reg.shutdown()
    assert one.status is two.status is Status.OK and len(ap.asked) == 1
    assert _steps(two)[0].decider.startswith("approval:")
    expires = _steps(one)[0].detail["expires_at_us"]
    with open_store(tmp_path / "home") as store:
        (row,) = store.sql("SELECT approved_at, expires_at FROM approvals").dicts()
    # Ten minutes after the recorded approval time, whatever the clock says now.
    assert expires == int(row["approved_at"].timestamp() * 1e6) + 600_000_000
    assert (row["expires_at"] - row["approved_at"]).total_seconds() == 600
    assert "approval" in load_policy(f).rule_ids  # the file is valid on its own too


def test_a_tampered_approval_fails_verify(tmp_path: Path) -> None:
    ap = Approver(ApprovalDecision(True, who="alice", reason="ok"))
    reg = _registry(tmp_path, ap)
    assert reg.call(ToolCall("send", {"to": "bob"})).status is Status.OK
    reg.shutdown()
    home = tmp_path / "home"
    assert verify(home).ok
    (seg,) = sorted((home / "audit" / "segments").glob("*.jsonl"))
    lines = seg.read_bytes().splitlines(keepends=True)
    i = next(n for n, ln in enumerate(lines) if ln.startswith(b'{"k":"a"'))
    at = lines[i].index(b'"who":"alice"') + len(b'"who":"')
    lines[i] = lines[i][:at] + b"m" + lines[i][at + 1:]  # one byte: alice -> mlice
    seg.write_bytes(b"".join(lines))
    rep = verify(home)
    assert not rep.ok
    assert [(f.kind, f.line) for f in rep.findings if f.severity == "error"] == [
        ("edited", i + 1)]


@pytest.mark.parametrize("ttl", ['"soon"', "0", '"-5m"', "true"])
def test_a_bad_approval_ttl_is_a_problem_with_its_line(tmp_path: Path, ttl: str) -> None:
    from tooltrace.policy.file import check_policy

    f = tmp_path / "tooltrace.toml"
    f.write_text(f'version = 1\ntools = ["send"]\n[approval]\ntools = ["send"]\nttl = {ttl}\n')
    (problem,) = check_policy(f)
    assert problem.line == 5 and "ttl" in problem.message


def test_approvals_survive_compaction_into_parquet(tmp_path: Path) -> None:
    from tooltrace.audit import compact

    ap = Approver(ApprovalDecision(True, who="alice", ttl=600), ApprovalDecision(False, who="bob"))
    reg = _registry(tmp_path, ap)
    calls = [reg.call(ToolCall("send", {"to": "bob"})) for _ in range(3)]
    calls.append(reg.call(ToolCall("send", {"to": "eve"})))
    reg.shutdown()
    home = tmp_path / "home"
    with open_store(home) as store:
        before = list_approvals(store).dicts()
    assert compact(home).calls == 4
    assert (home / "audit" / "parquet" / "approvals").is_dir()
    with open_store(home) as store:
        assert store.segments == 0  # everything is read from Parquet now
        after = list_approvals(store).dicts()
    keep = ("approval_id", "decision", "approver", "args_sha256", "covered_calls", "uses")
    assert [{k: r[k] for k in keep} for r in after] == [{k: r[k] for k in keep} for r in before]
    assert sorted(after[1]["covered_calls"]) == sorted(c.call_id for c in calls[:3])
    assert after[0]["decision"] == "deny" and after[0]["call_id"] == calls[3].call_id


def test_in_strict_mode_the_approval_is_durable_before_the_call_runs(tmp_path: Path) -> None:
    seen: list[bool] = []
    home = tmp_path / "home"

    @tool(capability="network", effect="external")
    def launch(target: str) -> str:
        """Look for this call's approval in the trail while the call runs."""
        segs = (home / "audit" / "segments").glob("*.jsonl")
        seen.append(any(b'{"k":"a"' in p.read_bytes() for p in segs))
        return target

    ws = tmp_path / "ws"
    ws.mkdir()
    reg = create_registry(ws, home=home, tracing=False, metrics=False, logging=False,
                          builtins=False, audit_options={"strict": True},
                          approver=Approver(ApprovalDecision(True, who="alice")),
                          policy=Policy([RequireApproval(tools=frozenset({"launch"}))]))
    reg.register(launch)
    assert reg.call(ToolCall("launch", {"target": "x"})).status is Status.OK
    reg.shutdown()
    assert seen == [True]
    assert verify(home).ok


def test_acall_binds_and_reuses_approvals_like_call(tmp_path: Path) -> None:
    import asyncio

    ap = Approver(ApprovalDecision(True, who="alice", ttl=600), ApprovalDecision(True, who="al"))
    reg = _registry(tmp_path, ap)

    async def drive() -> list[Any]:
        return [await reg.acall(ToolCall("send", {"to": t})) for t in ("bob", "bob", "eve")]

    envs = asyncio.run(drive())
    reg.shutdown()
    assert [e.status for e in envs] == [Status.OK] * 3 and len(ap.asked) == 2
    assert [_steps(e)[0].decider.split(":")[0] for e in envs] == ["user", "approval", "user"]


def test_approvals_ship_to_the_archive(tmp_path: Path) -> None:
    from tooltrace.archive import open_archive, ship

    ap = Approver(ApprovalDecision(True, who="alice", ttl=600))
    reg = _registry(tmp_path, ap)
    envs = [reg.call(ToolCall("send", {"to": "bob"})) for _ in range(2)]
    reg.shutdown()
    assert ship(tmp_path / "home", str(tmp_path / "archive")).shipped
    with open_archive(str(tmp_path / "archive")) as store:
        (row,) = store.sql("SELECT approver, covered_calls FROM approvals").rows
    assert row[0] == "alice" and sorted(row[1]) == sorted(e.call_id for e in envs)


def test_the_record_keeps_the_arguments_asked_about_whatever_the_approver_does(
        tmp_path: Path) -> None:
    class Meddler(Approver):
        def __call__(self, req: ApprovalRequest) -> ApprovalDecision:
            answer = super().__call__(req)
            req.arguments["to"] = "someone else"  # type: ignore[index]
            return answer

    ap = Meddler(ApprovalDecision(True, who="alice"))
    reg = _registry(tmp_path, ap)
    assert reg.call(ToolCall("send", {"to": "bob"})).status is Status.OK  # defaults filled in
    reg.shutdown()
    with open_store(tmp_path / "home") as store:
        (row,) = list_approvals(store).dicts()
    args = json.loads(row["args_redacted"])
    assert args == {"to": "bob", "body": "", "token": ""}
    assert arguments_sha256(args) == row["args_sha256"]


def test_an_approval_does_not_cover_a_call_a_hook_moved_off_its_arguments(
        tmp_path: Path) -> None:
    from tooltrace.policy.file import load_policy

    @hook("reroute", tools={"send"})
    def reroute(view: HookView) -> HookDecision | None:
        to = {"reroute": "carol", "evil": "mallory"}.get(view.arguments.get("body", ""))
        if to is None:
            return None
        return HookDecision.modify(arguments={**view.arguments, "to": to}, reason="reroute")

    f = tmp_path / "tooltrace.toml"
    f.write_text('version = 1\ntools = ["send"]\n[[rules]]\nid = "bob-asks"\ndecision = "ask"\n'
                 'tools = ["send"]\nargs = { to = "^bob$" }\nttl = "10m"\n'
                 '[[rules]]\nid = "no-mallory"\ntools = ["send"]\nargs = { to = "^mallory$" }\n')
    ap = Approver(ApprovalDecision(True, who="alice"), ApprovalDecision(True, who="alice"),
                  ApprovalDecision(True, who="alice"))
    reg = _registry(tmp_path, ap, hooks=[reroute])
    load_policy(f, tools=["send"]).apply(reg)
    moved = reg.call(ToolCall("send", {"to": "bob", "body": "reroute"}))
    again = reg.call(ToolCall("send", {"to": "bob", "body": "reroute"}))  # reuses, then moved
    kept = reg.call(ToolCall("send", {"to": "bob", "body": "stay"}))
    denied = reg.call(ToolCall("send", {"to": "bob", "body": "evil"}))  # moved, then denied
    reg.shutdown()
    assert [e.status for e in (moved, again, kept)] == [Status.OK] * 3
    # carol's arguments need no approval (not asked about them); mallory's are denied.
    assert denied.status is Status.REJECTED and len(ap.asked) == 3
    assert _steps(again)[0].decider.startswith("approval:")
    first, second = _steps(moved)[0].detail, _steps(kept)[0].detail
    policy = [s for s in moved.steps if s.step == "policy"]
    assert [s.decision for s in policy] == ["ask", "allow"]
    assert policy[1].detail["args_sha256"] == arguments_sha256(
        {"to": "carol", "body": "reroute", "token": ""})
    with open_store(tmp_path / "home") as store:
        rows = {r["approval_id"]: r for r in list_approvals(store).dicts()}
    # The first approval was given about bob's arguments; both calls ran with carol's.
    assert rows[first["approval_id"]]["covered_calls"] == []
    assert rows[first["approval_id"]]["uses"] == 0
    assert rows[second["approval_id"]]["covered_calls"] == [kept.call_id]
    assert rows[_steps(denied)[0].detail["approval_id"]]["covered_calls"] == []


def test_every_policy_verdict_after_a_hook_moved_approved_arguments_names_their_digest(
        tmp_path: Path) -> None:
    """Allowed, denied or observed: the policy step of arguments a hook changed after their
    approval records the new arguments' digest after the verdict's own fields."""
    from tooltrace.policy.file import load_policy

    @hook("reroute", tools={"send"})
    def reroute(view: HookView) -> HookDecision | None:
        to = {"reroute": "carol", "evil": "mallory", "watch": "eve"}[view.arguments["body"]]
        return HookDecision.modify(arguments={**view.arguments, "to": to}, reason="reroute")

    f = tmp_path / "tooltrace.toml"
    f.write_text('version = 1\ntools = ["send"]\n[[rules]]\nid = "bob-asks"\ndecision = "ask"\n'
                 'tools = ["send"]\nargs = { to = "^bob$" }\n'
                 '[[rules]]\nid = "no-mallory"\ntools = ["send"]\nargs = { to = "^mallory$" }\n'
                 '[[rules]]\nid = "watch-eve"\ntools = ["send"]\nargs = { to = "^eve$" }\n'
                 'mode = "observe"\n')
    ap = Approver(*[ApprovalDecision(True, who="alice")] * 3)
    reg = _registry(tmp_path, ap, hooks=[reroute])
    load_policy(f, tools=["send"]).apply(reg)
    envs = {body: reg.call(ToolCall("send", {"to": "bob", "body": body}))
            for body in ("reroute", "evil", "watch")}
    reg.shutdown()
    assert [e.status for e in envs.values()] == [Status.OK, Status.REJECTED, Status.OK]
    fields = {"reroute": ("allow", ["rules", "paths"]), "evil": ("deny", ["reason", "paths"]),
              "watch": ("observe_deny", ["reason", "paths", "rules"])}
    to = {"reroute": "carol", "evil": "mallory", "watch": "eve"}
    for body, env in envs.items():
        asked, moved = _steps(env, "policy")
        decision, keys = fields[body]
        assert (asked.decision, moved.decision) == ("ask", decision), body
        assert "args_sha256" not in asked.detail
        assert list(moved.detail) == [*keys, "args_sha256"], body
        assert moved.detail["args_sha256"] == arguments_sha256(
            {"to": to[body], "body": body, "token": ""})


def test_who_decided_is_kept_to_64_safe_characters(tmp_path: Path) -> None:
    """The approver's ``who`` is what the decider reads (``user:<who>``): anything but letters,
    digits and ``@._-`` becomes ``_``, and it is cut to exactly 64 characters."""
    long_name = "a" * 60 + "bcdefgh"  # 67: the cut keeps 60 a's and "bcde"
    ap = Approver(ApprovalDecision(True, who=long_name),
                  ApprovalDecision(True, who="eve smith/../root"))
    reg = _registry(tmp_path, ap)
    first = reg.call(ToolCall("send", {"to": "bob"}))
    second = reg.call(ToolCall("send", {"to": "carol"}))
    reg.shutdown()
    assert _steps(first)[0].decider == "user:" + "a" * 60 + "bcde"
    assert _steps(second)[0].decider == "user:eve_smith_.._root"


def test_the_allow_step_names_the_rules_redacted_as_the_redactor_stands(tmp_path: Path) -> None:
    class Named:
        """A rule with no opinion whose name holds what later becomes a secret."""

        name = "rule-sk-live-0123456789"

        def __call__(self, request: Any) -> None:
            return None

    ws = tmp_path / "ws"
    ws.mkdir()
    reg = create_registry(ws, home=tmp_path / "home", tracing=False, metrics=False,
                          logging=False, builtins=False, policy=Policy([Named()]))
    reg.register(send)

    def allow_detail() -> Any:
        env = reg.call(ToolCall("send", {"to": "bob"}))
        (step,) = [s for s in env.steps if s.step == "policy"]
        assert step.decision == "allow"
        return step.detail

    assert allow_detail() == {"rules": ["rule-sk-live-0123456789"]}
    assert allow_detail() == {"rules": ["rule-sk-live-0123456789"]}  # the same rules again
    reg.redactor.register_value("sk-live-0123456789")
    first = allow_detail()
    assert "sk-live-0123456789" not in repr(first) and first["rules"][0].startswith("rule-")
    assert allow_detail() == first
    reg.redactor = type(reg.redactor)(extra_values=["rule-sk"])
    assert "rule-sk" not in repr(allow_detail())
    reg.shutdown()


def test_a_hooks_change_to_a_call_never_approved_records_no_digest(tmp_path: Path) -> None:
    @hook("polish", tools={"send"})
    def polish(view: HookView) -> HookDecision:
        return HookDecision.modify(arguments={**view.arguments, "body": "polished"})

    ws = tmp_path / "ws"
    ws.mkdir()
    reg = create_registry(ws, home=tmp_path / "home", tracing=False, metrics=False,
                          logging=False, builtins=False, hooks=[polish])
    reg.register(send)
    env = reg.call(ToolCall("send", {"to": "bob"}))
    reg.shutdown()
    assert env.status is Status.OK
    policy = [s for s in env.steps if s.step == "policy"]
    assert len(policy) == 2 and all("args_sha256" not in s.detail for s in policy)


def test_a_denial_with_a_time_to_live_does_not_expire_and_keeps_300_characters_of_reason(
    tmp_path: Path,
) -> None:
    why = "n" * 299 + "STOP" + "x" * 100
    ap = Approver(ApprovalDecision(False, who="alice", reason=why, ttl=600),
                  ApprovalDecision(True, who="alice", reason=why, ttl=600))
    reg = _registry(tmp_path, ap)
    denied = reg.call(ToolCall("send", {"to": "bob"}))
    approved = reg.call(ToolCall("send", {"to": "bob"}))
    reg.shutdown()
    assert denied.status is Status.REJECTED and approved.status is Status.OK
    (no,), (yes,) = _steps(denied), _steps(approved)
    assert "expires_at_us" not in no.detail and "expires_at_us" in yes.detail
    assert no.detail["reason"] == yes.detail["reason"] == "n" * 299 + "S"


def test_a_redactor_subclass_redacts_each_allow_step_afresh(tmp_path: Path) -> None:
    from tooltrace.redaction import Redactor

    class Blocklist(Redactor):
        """Also hides the words on a list that may grow without registering a value."""

        blocked: set[str] = set()

        def redact(self, value: Any, depth: int = 0) -> tuple[Any, int]:
            out, n = super().redact(value, depth)
            text = json.dumps(out)
            for word in self.blocked:
                text = text.replace(word, "[BLOCKED]")
            return json.loads(text), n

    ws = tmp_path / "ws"
    ws.mkdir()
    reg = create_registry(ws, home=tmp_path / "home", tracing=False, metrics=False,
                          logging=False, builtins=False, redactor=Blocklist())
    reg.register(send)

    def allow_rules() -> Any:
        env = reg.call(ToolCall("send", {"to": "bob"}))
        return next(s for s in env.steps if s.step == "policy").detail["rules"]

    first = allow_rules()
    Blocklist.blocked.add(first[0])
    assert allow_rules()[0] == "[BLOCKED]"
    reg.shutdown()
