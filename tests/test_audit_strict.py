"""Strict audit: the intent is durable before a tool runs, the final record is durable too, and
a call is refused (stage ``audit``) when the intent cannot be made durable."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner

from tooltrace import Stage, Status, ToolCall, ToolRegistry, tool
from tooltrace.audit import AuditStore, verify
from tooltrace.audit._segments import list_segments
from tooltrace.cli import main
from tooltrace.telemetry import AuditSink


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=120)


def test_intent_is_on_disk_before_the_tool_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    seen: list[bool] = []
    sink = AuditSink(home, strict=True)

    @tool(capability="read")
    def peek(marker: str) -> str:
        """Look for this call's intent in the audit segments."""
        text = b"".join(s.path.read_bytes() for s in list_segments(home / "audit"))
        seen.append(b'"k":"i"' in text and marker.encode() in text)
        return "looked"

    reg = ToolRegistry(workspace=tmp_path, home=home, sinks=[sink])
    reg.register(peek)
    env = reg.call(ToolCall("peek", {"marker": "m-123"}))
    assert env.status is Status.OK and seen == [True]
    # The final record is written synchronously too: readable before any flush or shutdown.
    with AuditStore(home) as store:
        d = store.call(env.call_id)
        assert d.record is not None and d.record["status"] == "ok"
        assert d.intent is not None and d.intent["orphaned"] is False
    assert [s.step for s in env.steps].count("audit_intent") == 1
    reg.shutdown()
    assert verify(home).ok


def test_call_refused_when_the_home_cannot_be_written(tmp_path: Path) -> None:
    blocked = tmp_path / "home"
    blocked.write_text("a file where the home directory should be")
    ran: list[str] = []

    @tool(capability="write", effect="local")
    def act(x: str) -> str:
        """Do something with side effects."""
        ran.append(x)
        return "done"

    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "regdata",
                       sinks=[AuditSink(blocked, strict=True)])
    reg.register(act)
    env = reg.call(ToolCall("act", {"x": "1"}))
    assert env.status is Status.REJECTED and env.reject_stage is Stage.AUDIT
    assert ran == [] and not env.record.execution_started
    step = next(s for s in env.steps if s.step == "audit_intent")
    assert step.decision == "reject" and step.decider == "audit"
    reg.shutdown()


def test_call_refused_when_the_file_size_limit_is_hit(tmp_path: Path) -> None:
    # A real write failure (EFBIG) from the kernel, in a process of its own.
    code = """
    import json, resource, signal, sys
    from tooltrace import ToolCall, ToolRegistry, tool
    from tooltrace.telemetry import AuditSink
    home, ws = sys.argv[1], sys.argv[2]
    sink = AuditSink(home, strict=True)
    ran = []

    @tool(capability="write", effect="local")
    def act(n: int) -> str:
        '''Side effect we must not run without an audit record.'''
        ran.append(n)
        return "done"

    reg = ToolRegistry(workspace=ws, home=home + "-data", sinks=[sink])
    reg.register(act)
    reg.call(ToolCall("act", {"n": -1}))  # the key and the segment exist now
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death
    resource.setrlimit(resource.RLIMIT_FSIZE, (24_000, resource.RLIM_INFINITY))
    out = []
    for n in range(60):
        env = reg.call(ToolCall("act", {"n": n}))
        out.append([n, env.status.value, env.reject_stage and env.reject_stage.value,
                    env.call_id])
    print(json.dumps({"calls": out, "ran": ran}))
    """
    home = tmp_path / "home"
    res = _run(code, str(home), str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads(res.stdout)
    statuses = [(c[1], c[2]) for c in data["calls"]]
    assert ("ok", None) in statuses and ("rejected", "audit") in statuses
    refused = [c[0] for c in data["calls"] if c[2] == "audit"]
    # A refused call never ran; every call that ran got through first.
    assert not set(refused) & set(data["ran"])
    assert data["ran"] == [-1] + [c[0] for c in data["calls"] if c[1] == "ok"]
    # Everything that ran has its intent on disk; the trail still verifies (no torn bytes).
    with AuditStore(home) as store:
        intents = {r[0] for r in store.sql("SELECT call_id FROM tool_call_intents").rows}
    ok_ids = {c[3] for c in data["calls"] if c[1] == "ok"}
    assert ok_ids <= intents
    assert not intents & {c[3] for c in data["calls"] if c[2] == "audit"}
    rep = verify(home)
    assert not [f for f in rep.findings if f.severity == "error"], rep.findings


def test_process_dying_mid_call_leaves_an_orphaned_intent(tmp_path: Path) -> None:
    code = """
    import os, signal, sys
    from tooltrace import ToolCall, ToolRegistry, tool
    from tooltrace.telemetry import AuditSink
    home, ws = sys.argv[1], sys.argv[2]

    @tool(capability="write", effect="local")
    def crash(path: str) -> str:
        '''Dies half way through.'''
        print(os.environ.get("X", ""), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        return "never"

    @tool(capability="read")
    def fine() -> str:
        '''Works.'''
        return "fine"

    reg = ToolRegistry(workspace=ws, home=home + "-data", sinks=[AuditSink(home, strict=True)],
                       run_id="run-crash")
    reg.register(crash)
    reg.register(fine)
    print(reg.call(ToolCall("fine", {})).call_id, flush=True)
    reg.call(ToolCall("crash", {"path": "notes/x.txt"}, call_id=sys.argv[3]))
    """
    home = tmp_path / "home"
    cid = "01a236d0-0000-7000-8000-00000000c0de"
    res = _run(code, str(home), str(tmp_path), cid)
    assert res.returncode == -9
    fine_id = res.stdout.split()[0]
    with AuditStore(home) as store:
        orphans = store.sql("SELECT call_id, tool, run_id FROM tool_call_intents "
                            "WHERE orphaned").rows
        assert orphans == [(cid, "crash", "run-crash")]
        assert store.call(fine_id).record is not None
    q = CliRunner().invoke(main, ["query", "orphan_intents", "--home", str(home), "--json"])
    assert q.exit_code == 0 and json.loads(q.output)[0]["call_id"] == cid
    a = CliRunner().invoke(main, ["autopsy", cid[:30], "--home", str(home)])
    assert a.exit_code == 0 and "no final record" in a.output and "strict intent" in a.output
    assert "notes/x.txt" in a.output
