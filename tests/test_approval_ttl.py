"""An approval's time to live set by the rule that asks: ``[approval] ttl``, ``ttl`` on an ask
``[[rules]]`` entry and ``@ttl`` on a Cedar ask policy; reused within it through a real registry
and DuckDB trail, and a malformed one placed at file:line:column by ``tooltrace policy check``
(a real subprocess, exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.components import extra, require_module

from tooltrace import ApprovalDecision, ApprovalRequest, Status, ToolCall, create_registry, tool
from tooltrace.audit import list_approvals, open_store
from tooltrace.policy import ApprovalCache, Reusable, ttl_seconds
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


@pytest.mark.parametrize(("ttl", "seconds"), [
    (None, None), (True, None), (False, None), (0, None), (-0.5, None), (-5, None),
    (0.5, 0.5), (15, 15.0), (timedelta(minutes=15), 900.0), (timedelta(0), None),
])
def test_a_time_to_live_of_zero_or_less_or_a_boolean_means_no_reuse(
    ttl: Any, seconds: float | None
) -> None:
    assert ttl_seconds(ttl) == seconds


def _approval(n: int, expires_at_us: int) -> Reusable:
    return Reusable(f"ap-{n}", "sends-ask", expires_at_us)


def test_a_kept_approval_is_reused_until_the_instant_it_expires() -> None:
    cache = ApprovalCache()
    cache.keep("send", None, "d1", _approval(1, 1000), now_us=0)
    assert cache.find("send", None, "d1", now_us=999) == _approval(1, 1000)
    assert cache.find("send", None, "d1", now_us=1000) is None
    cache.keep("send", None, "d2", _approval(2, 1000), now_us=0)
    assert cache.find("send", None, "d2", now_us=5000) is None
    assert cache.find("send", None, "d2", now_us=0) is None  # an expired one is forgotten


def test_a_full_approval_cache_drops_the_expired_first_then_the_oldest() -> None:
    cache = ApprovalCache(max_entries=3)
    cache.keep("send", None, "expired", _approval(1, 100), now_us=0)
    cache.keep("send", None, "at-now", _approval(2, 200), now_us=0)
    cache.keep("send", None, "old", _approval(3, 900), now_us=0)
    # Full at 3: the one that expired and the one expiring at this instant make room; the
    # live one stays, though it is the oldest left.
    cache.keep("send", None, "new", _approval(4, 900), now_us=200)
    assert cache.find("send", None, "old", now_us=150) == _approval(3, 900)
    assert cache.find("send", None, "expired", now_us=50) is None
    assert cache.find("send", None, "at-now", now_us=150) is None
    cache.keep("send", None, "newer", _approval(5, 900), now_us=200)
    # Full with three live ones: the oldest goes.
    cache.keep("send", None, "newest", _approval(6, 900), now_us=200)
    assert cache.find("send", None, "old", now_us=200) is None
    for n, key in ((4, "new"), (5, "newer"), (6, "newest")):
        assert cache.find("send", None, key, now_us=200) == _approval(n, 900)


def test_the_approval_cache_holds_4096_approvals_by_default() -> None:
    cache = ApprovalCache()
    for n in range(4097):
        cache.keep("send", None, f"d{n}", _approval(n, 10**9), now_us=0)
    assert cache.find("send", None, "d0", now_us=0) is None
    assert cache.find("send", None, "d1", now_us=0) == _approval(1, 10**9)
    assert cache.find("send", None, "d4096", now_us=0) == _approval(4096, 10**9)
