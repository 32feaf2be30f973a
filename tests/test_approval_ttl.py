"""An approval's time to live set by the rule that asks: ``[approval] ttl``, ``ttl`` on an ask
``[[rules]]`` entry and ``@ttl`` on a Cedar ask policy; reused within it through a real registry
and DuckDB trail, and a malformed one placed at file:line:column by ``tooltrace policy check``
(a real subprocess, exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.components import extra, require_module

from tooltrace import ApprovalDecision, ApprovalRequest, Status, ToolCall, create_registry, tool
from tooltrace.audit import list_approvals, open_store
from tooltrace.policy.file import PolicyFileError, load_policy


@tool(capability="network", effect="external")
def send(to: str) -> dict[str, Any]:
    """Pretend to send a message."""
    return {"sent": to}


TOOLTRACE = Path(sys.executable).parent / "tooltrace"


class Approver:
    """Approves every question, with no time to live of its own, and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []

    def __call__(self, req: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(req)
        return ApprovalDecision(True, who="alice")


RULE_TTL = """version = 1
tools = ["send"]

[[rules]]
id = "sends-ask"
decision = "ask"
tools = ["send"]
ttl = "15m"
"""
CEDAR_TTL = """@id("sends-ask") @decision("ask") @ttl("15m")
forbid (principal, action == Tooltrace::Action::"send", resource);
"""


def _check(f: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([str(TOOLTRACE), "policy", "check", str(f)],
                          capture_output=True, text=True, env=env, timeout=120)


def _reused_for_15_minutes(tmp_path: Path, f: Path) -> None:
    ap = Approver()
    ws = tmp_path / "ws"
    ws.mkdir()
    reg = create_registry(ws, home=tmp_path / "home", tracing=False, metrics=False,
                          logging=False, builtins=False, approver=ap)
    reg.register(send)
    # As create_registry(policy_file=...) does, with the tool registered first: the Cedar
    # schema is made from the registry's tools.
    load_policy(f, tools={"send": reg.definition("send")}).apply(reg)  # type: ignore[dict-item]
    envs = [reg.call(ToolCall("send", {"to": t})) for t in ("bob", "bob", "eve")]
    reg.shutdown()
    assert [e.status for e in envs] == [Status.OK] * 3
    assert [r.arguments["to"] for r in ap.asked] == ["bob", "eve"]  # bob's is reused once
    steps = [next(s for s in e.steps if s.step == "approval") for e in envs]
    assert steps[1].decider == f"approval:{steps[0].detail['approval_id']}"
    with open_store(tmp_path / "home") as store:
        rows = {r["approval_id"]: r for r in list_approvals(store).dicts()}
    first = rows[steps[0].detail["approval_id"]]
    assert first["rule"] == "sends-ask"
    assert (first["expires_at"] - first["approved_at"]).total_seconds() == pytest.approx(900)
    assert sorted(first["covered_calls"]) == sorted([envs[0].call_id, envs[1].call_id])


def test_an_ask_rule_gives_its_approvals_a_time_to_live(tmp_path: Path) -> None:
    f = tmp_path / "tooltrace.toml"
    f.write_text(RULE_TTL)
    _reused_for_15_minutes(tmp_path, f)


def test_a_cedar_ask_policy_gives_its_approvals_a_time_to_live(tmp_path: Path) -> None:
    require_module("cedarpy", extra("cedar"))
    (tmp_path / "agents.cedar").write_text(CEDAR_TTL)
    f = tmp_path / "tooltrace.toml"
    f.write_text('version = 1\ntools = ["send"]\n[cedar]\npolicies = ["agents.cedar"]\n')
    _reused_for_15_minutes(tmp_path, f)


@pytest.mark.parametrize(("ttl", "decision", "message"), [
    ('"soon"', "ask", "ttl must be a number of seconds or a duration"),
    ("0", "ask", "ttl must be a number of seconds or a duration"),
    ('"15m"', "deny", 'ttl is only for rules with decision = "ask"'),
])
def test_a_bad_rule_ttl_is_placed_and_refused(
    tmp_path: Path, ttl: str, decision: str, message: str
) -> None:
    f = tmp_path / "tooltrace.toml"
    f.write_text(RULE_TTL.replace('"ask"', f'"{decision}"').replace('"15m"', ttl))
    res = _check(f)
    assert res.returncode == 2, res.stdout + res.stderr
    (line,) = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.startswith(f"{f}:")]
    assert line.startswith(f"{f}:8:") and line.split(": ", 1)[1].startswith(message), line
    with pytest.raises(PolicyFileError):
        create_registry(tmp_path, home=tmp_path / "h", policy_file=f, metrics=False,
                        tracing=False, logging=False)


@pytest.mark.parametrize(("annotations", "message"), [
    ('@decision("ask") @ttl("soon")', '@ttl must be a number of seconds or a duration'),
    ('@ttl("15m")', '@ttl is only for policies with @decision("ask")'),
])
def test_a_bad_cedar_ttl_is_placed_and_refused(
    tmp_path: Path, annotations: str, message: str
) -> None:
    require_module("cedarpy", extra("cedar"))
    cedar = tmp_path / "agents.cedar"
    cedar.write_text('// sends\n\n@id("sends-ask") ' + annotations +
                     '\nforbid (principal, action == Tooltrace::Action::"send", resource);\n')
    f = tmp_path / "tooltrace.toml"
    f.write_text('version = 1\ntools = ["send"]\n[cedar]\npolicies = ["agents.cedar"]\n')
    res = _check(f)
    assert res.returncode == 2, res.stdout + res.stderr
    col = len('@id("sends-ask") ') + annotations.index("@ttl") + 1  # at the annotation
    assert f"{cedar}:3:{col}: policy sends-ask: {message}" in res.stdout + res.stderr
