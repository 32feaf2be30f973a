"""Background jobs: started by run_command, watched and stopped by audited tool calls."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from support.runtime import live_in_group, live_with_marker, wait_for

from tooltrace import Status, ToolCall, ToolRegistry
from tooltrace.builtins import register_builtins
from tooltrace.testing import RecordingSink

TICKER = [sys.executable, "-u", "-c",
          "import time\nfor i in range(100000):\n    print('tick', i); time.sleep(0.01)"]


def _start(reg: ToolRegistry, argv: list[str], run_id: str = "run-a", **args: object) -> str:
    env = reg.call(ToolCall("run_command", {"argv": argv, **args}, run_id=run_id, background=True,
                            timeout_s=60))
    assert env.status is Status.OK, env.summary
    job_id: str = env.data["job_id"]
    return job_id


def test_job_runs_is_tailed_and_killed_each_as_its_own_call(
    registry: ToolRegistry, sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = os.urandom(8).hex()
    monkeypatch.setenv("TT_TEST_MARK", marker)
    start = registry.call(ToolCall("run_command", {"argv": TICKER}, run_id="run-a",
                                   background=True, timeout_s=60))
    assert start.status is Status.OK
    job_id = start.data["job_id"]
    pid = start.data["pid"]
    execute = next(s for s in start.steps if s.step == "execute")
    assert execute.detail is not None and execute.detail["job_id"] == job_id

    # The start returned while the job runs on: the ticker only ends when it is killed below.
    status = registry.call(ToolCall("job_status", {"job_id": job_id}, run_id="run-a"))
    assert status.status is Status.OK
    assert status.data["state"] == "running"
    assert status.data["started_by"] == start.call_id

    def ticks() -> object:
        env = registry.call(ToolCall("job_tail", {"job_id": job_id, "max_bytes": 200},
                                     run_id="run-a"))
        return env if "tick 5" in env.data["stdout"] else None

    tail = wait_for(ticks, 10.0, "the job's output")
    assert tail.status is Status.OK
    assert len(tail.data["stdout"].encode()) <= 200
    assert live_with_marker(marker)

    kill = registry.call(ToolCall("job_kill", {"job_id": job_id}, run_id="run-a"))
    assert kill.status is Status.OK
    assert kill.data["state"] == "killed"
    assert not live_with_marker(marker)
    assert not live_in_group(pid)

    # Each of the four is its own call with its own single record.
    ids = [start.call_id, status.call_id, tail.call_id, kill.call_id]
    assert len(set(ids)) == 4
    for cid in ids:
        assert len(sink.by_id(cid)) == 1
    assert [sink.by_id(c)[0].tool for c in ids] == ["run_command", "job_status", "job_tail",
                                                    "job_kill"]
    # The job's end is a late step of the call that started it, naming the killer.
    (late,) = [x for x in sink.late if x.call_id == start.call_id]
    assert late.step.step == "job_ended"
    assert late.step.decision == "killed"
    assert late.step.detail is not None
    assert late.step.detail["killed_by"] == kill.call_id
    assert late.step.detail["kill_confirmed"] is True
    assert late.tool == "run_command" and late.run_id == "run-a"

    # Killing again is harmless and says so.
    again = registry.call(ToolCall("job_kill", {"job_id": job_id}, run_id="run-a"))
    assert again.status is Status.OK
    assert "already ended" in again.summary


def test_job_exit_is_recorded_against_its_call(registry: ToolRegistry,
                                              sink: RecordingSink) -> None:
    job_id = _start(registry, [sys.executable, "-c", "print('done'); raise SystemExit(4)"])
    starter = sink.records[-1].call_id

    def ended() -> object:
        return [x for x in sink.late if x.call_id == starter]

    (late,) = wait_for(ended, 10.0, "the job_ended step")
    assert late.step.decision == "exited"
    assert late.step.detail is not None and late.step.detail["exit_code"] == 4
    env = registry.call(ToolCall("job_status", {"job_id": job_id}, run_id="run-a"))
    assert env.data["state"] == "exited" and env.data["exit_code"] == 4
    tail = registry.call(ToolCall("job_tail", {"job_id": job_id}, run_id="run-a"))
    assert tail.data["stdout"] == "done\n"


def test_jobs_are_private_to_their_run(registry: ToolRegistry) -> None:
    job_id = _start(registry, TICKER, run_id="run-a")
    try:
        for tool_name in ("job_status", "job_tail", "job_kill"):
            env = registry.call(ToolCall(tool_name, {"job_id": job_id}, run_id="run-b"))
            assert env.status is Status.FAILED
            assert env.record.error_type == "JobNotFoundError"
        env = registry.call(ToolCall("job_status", {"job_id": job_id}, run_id="run-a"))
        assert env.data["state"] == "running"
    finally:
        registry.call(ToolCall("job_kill", {"job_id": job_id}, run_id="run-a"))


def test_job_deadline_kills_it(registry: ToolRegistry, sink: RecordingSink,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    marker = os.urandom(8).hex()
    monkeypatch.setenv("TT_TEST_MARK", marker)
    env = registry.call(ToolCall("run_command", {"argv": ["sh", "-c", "sleep 60 & sleep 60"]},
                                 run_id="run-a", background=True, timeout_s=0.5))
    assert env.status is Status.OK

    def ended() -> object:
        return [x for x in sink.late if x.call_id == env.call_id]

    (late,) = wait_for(ended, 10.0, "the job to time out")
    assert late.step.decision == "timeout"
    assert not live_with_marker(marker)


def test_shutdown_kills_jobs_unless_kept(workspace: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    marker = os.urandom(8).hex()
    monkeypatch.setenv("TT_TEST_MARK", marker)
    sink = RecordingSink()
    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h", sinks=[sink], cancel_grace_s=0.3)
    register_builtins(reg)
    killed = reg.call(ToolCall("run_command", {"argv": ["sleep", "60"]}, background=True))
    kept = reg.call(ToolCall("run_command", {"argv": ["sleep", "60"], "keep_after_shutdown": True},
                             background=True))
    kept_pid = kept.data["pid"]
    try:
        wait_for(lambda: len(live_with_marker(marker)) == 2, 5.0, "both jobs to run")
        reg.shutdown(timeout_s=3.0)
        assert live_with_marker(marker) == [kept_pid]
        by_call = {x.call_id: x.step for x in sink.late}
        assert by_call[killed.call_id].step == "job_ended"
        assert by_call[killed.call_id].decision == "shutdown"
        assert by_call[kept.call_id].step == "job_ended"
        assert by_call[kept.call_id].decision == "detached"
        # After shutdown no new call (and so no new job) is admitted.
        env = reg.call(ToolCall("run_command", {"argv": ["true"]}, background=True))
        assert env.status is Status.REJECTED
    finally:
        os.kill(kept_pid, signal.SIGKILL)
    wait_for(lambda: not live_with_marker(marker), 5.0, "the kept job to die")


def test_background_flag_on_a_foreground_only_tool_runs_in_the_foreground(
    registry: ToolRegistry,
) -> None:
    env = registry.call(ToolCall("read_text", {"path": "hello.txt"}, background=True))
    assert env.status is Status.OK
    assert env.data["text"] == "hello world\n"


def test_job_status_shows_the_progress_its_command_reports(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    # A command's progress is its output: bytes and lines written so far, never its text.
    secret = "sk-" + "f00dbabe" * 5
    argv = [sys.executable, "-u", "-c",
            "import time\nfor i in range(100000):\n"
            f"    print(f'step {{i}} token={secret}'); time.sleep(0.01)"]
    seen = []
    sub = registry.subscribe(seen.append, kinds=["progress"])
    job_id = _start(registry, argv)

    def progressed() -> object:
        env = registry.call(ToolCall("job_status", {"job_id": job_id}, run_id="run-a"))
        p = env.data["progress"]
        return p if p is not None and p["seq"] > 3 else None

    p = wait_for(progressed, 10.0, "the job's progress")
    assert p["done"] > 0 and p["total"] is None
    assert p["message"].endswith(" lines of output") and secret not in p["message"]
    registry.call(ToolCall("job_kill", {"job_id": job_id}, run_id="run-a"))
    assert sub.flush(5)
    assert seen and all(ev.call_id == seen[0].call_id for ev in seen)
    assert all(secret not in (ev.mark.message or "") for ev in seen)
