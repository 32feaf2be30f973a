"""Faults: calls keep their contract and every lost record is counted, while the OTLP endpoint
refuses connections for the whole run, the audit directory is full (``RLIMIT_FSIZE`` in a
process of its own: EFBIG from the kernel), and hooks raise or hang.

- required hooks that raise or hang block the call (fail closed), optional ones become warn
  steps and the call runs (fail open);
- tracing exports nothing and counts every span as an export failure or a drop, exactly;
- the audit sink counts every record it could not write, exactly (non-strict), and in strict
  mode no tool runs before its intent is on disk (the tool itself looks) and calls are refused
  at stage ``audit`` once the disk is full;
- logs and metrics still account for every call.

A second test guards the hook pool: an optional hook that hangs must not make a healthy
required hook of another tool time out.

An upstream MCP server dying mid-call is covered by ``tests/test_mcp_proxy.py``
(``test_crash_hang_and_garbage_answer_promptly_and_restart``); the combination of hooks and
sink faults is not repeated there.
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from support.otlp import closed_port

from tooltrace import HookView, Status, ToolCall, ToolRegistry, hook, tool

from ._figures import record, size

N_CALLS = size(150, 5000)
FAULTY = Path(__file__).with_name("_faulty.py")


def _run_faulty(tmp_path: Path, strict: bool) -> dict[str, Any]:
    ws = tmp_path / "ws"
    ws.mkdir()
    res = subprocess.run(
        [sys.executable, str(FAULTY), str(tmp_path / "home"), str(ws), str(closed_port()),
         str(N_CALLS), "1" if strict else "0"],
        capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def _metric_sum(exposition: str, name: str) -> float:
    pat = re.compile(rf"^{name}\{{[^}}]*\}} ([0-9.e+]+)$", re.M)
    return sum(float(v) for v in pat.findall(exposition))


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_calls_keep_their_contract_and_losses_are_counted(tmp_path: Path, strict: bool) -> None:
    d = _run_faulty(tmp_path, strict)
    calls = d["calls"]
    n = len(calls)
    by = collections.Counter((c["tool"], c["status"], c["stage"]) for c in calls)
    ran = d["ran"]
    ids = {c["call_id"]: c for c in calls}
    # Hooks: required ones fail closed (the tool never ran), optional ones fail open.
    for name in ("req_raise", "req_hang"):
        mine = [c for c in calls if c["tool"] == name]
        assert all((c["status"], c["stage"]) == ("rejected", "hook") for c in mine)
        assert not any(c["call_id"] in ran for c in mine)
    for name in ("opt_raise", "opt_hang", "plain"):
        mine = [c for c in calls if c["tool"] == name]
        assert all(c["stage"] != "hook" for c in mine)
        if not strict:
            assert all(c["status"] == "ok" for c in mine), by
    # Tracing: nothing exported, every span counted once as a failure or a drop.
    tr = d["tracing"]
    assert tr["exported"] == 0 and tr["depth"] == 0
    assert tr["failures"] + tr["dropped"] == n, tr
    # Audit: every record acknowledged or counted as dropped.
    au = d["audit"]
    assert au["depth"] == 0
    if strict:
        refused = [c for c in calls if c["stage"] == "audit"]
        ok = [c for c in calls if c["status"] == "ok"]
        assert refused and ok, by  # the disk filled up during the run
        assert not any(c["call_id"] in ran for c in refused)
        # No tool ran before its intent was on disk.
        assert all(ran.values()) and set(ran) == {c["call_id"] for c in ok}
        # Intents of the calls that ran, plus one final record per call.
        assert au["acked"] + au["dropped"] == n + len(ran), au
    else:
        assert au["dropped"] > 0, au  # the disk really was full
        assert au["acked"] + au["dropped"] == n, au
        assert set(ran) == {c["call_id"] for c in calls if c["status"] == "ok"}
    # Logs and metrics account for every call.
    assert d["log_lines"] == n
    assert _metric_sum(d["exposition"], "tooltrace_tool_calls_total") == n
    assert d["sink_errors"] == 0
    worst = max(c["ms"] for c in calls if c["tool"] == "plain" and c["status"] == "ok")
    assert all(cid in ids for cid in ran)
    record(
        f"faults ({'strict' if strict else 'default'} audit)",
        calls=n,
        spans_failed=tr["failures"],
        spans_dropped=tr["dropped"],
        audit_acked=au["acked"],
        audit_dropped=au["dropped"],
        refused_at_audit=by.get(("plain", "rejected", "audit"), 0)
        + sum(v for (t, s, st), v in by.items() if st == "audit" and t != "plain"),
        hook_fail_closed=sum(v for (t, s, st), v in by.items() if st == "hook"),
        worst_plain_call_ms=round(worst, 1),
    )


def test_a_hanging_optional_hook_does_not_starve_a_healthy_required_one() -> None:
    """Regression: an optional hook past its time limit is abandoned (fail open) but its thread
    keeps running; hung hooks used to fill the registry's hook pool (``hook_threads``, 8) until
    a healthy required hook of another tool timed out and its calls were rejected."""
    ws = tempfile.mkdtemp()
    release = threading.Event()

    # Every hung hook holds its thread until the test ends (an event, not a time a busy host
    # may outlast); the healthy hook's limit is generous, so only a starved pool can miss it.
    @hook("hangs", tools={"b"}, timeout_s=0.05)
    def hangs(view: HookView) -> None:
        release.wait(60)

    @hook("healthy", tools={"a"}, required=True, timeout_s=5.0)
    def healthy(view: HookView) -> None:
        return None

    reg = ToolRegistry(workspace=ws, home=ws + "/home", hooks=[hangs, healthy])

    @tool(capability="read")
    def a() -> str:
        """A tool with a healthy required hook."""
        return "a"

    @tool(capability="read")
    def b() -> str:
        """A tool with an optional hook that hangs."""
        return "b"

    reg.register(a)
    reg.register(b)
    outcomes: collections.Counter[str] = collections.Counter()
    for _ in range(size(24, 200)):
        assert reg.call(ToolCall("b", {})).status is Status.OK  # fail open
        env = reg.call(ToolCall("a", {}))
        outcomes[env.status.value] += 1
    release.set()
    reg.shutdown(timeout_s=1.0)
    record("hung optional hook vs healthy required hook", **outcomes)
    assert outcomes["rejected"] == 0, outcomes
