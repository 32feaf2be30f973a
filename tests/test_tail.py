"""`tooltrace tail` follows a live demo run from another process: calls as they finish,
rejections marked, progress of the calls in flight; it reads only the home's files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tooltrace.demo import FAKE_KEY

EXE = str(Path(sys.executable).with_name("tooltrace"))
DEMO_CALLS = 17  # the scripted story (tests/test_demo.py's EXPECTED)


def _follow_a_demo(home: Path, *tail_args: str) -> str:
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("TOOLTRACE_HOME", None)
    tail = subprocess.Popen(
        [EXE, "tail", "--home", str(home), "--from-start", "--interval", "0.05",
         "--max-calls", str(DEMO_CALLS), "--duration", "120", *tail_args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        demo = subprocess.run([EXE, "demo", "--home", str(home), "--json"], capture_output=True,
                              text=True, env=env, timeout=120)
        assert demo.returncode == 0, demo.stderr
        out, err = tail.communicate(timeout=120)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    assert tail.returncode == 0, err
    return out


def test_tail_json_follows_a_live_demo(tmp_path: Path) -> None:
    out = _follow_a_demo(tmp_path / "home", "--json")
    events = [json.loads(line) for line in out.splitlines()]
    finished = [e for e in events if e["event"] == "finished"]
    assert len(finished) == DEMO_CALLS
    rejected = {e["reject_stage"] for e in finished if e["rejected"]}
    assert rejected == {"params", "policy", "approval", "hook"}
    assert all(e["status"] == "rejected" for e in finished if e["rejected"])
    # The index scan reported its progress while it ran: seen before it finished.
    scan = next(e for e in finished if e["tool"] == "scan_index" and e["status"] == "ok")
    progress = [e for e in events if e["event"] == "progress" and e["call_id"] == scan["call_id"]]
    assert progress, "no progress seen for the call in flight"
    assert all(p["total"] == 16 and 0 < p["done"] <= 16 for p in progress)
    assert [p["done"] for p in progress] == sorted(p["done"] for p in progress)
    assert events.index(progress[-1]) < events.index(scan)
    assert FAKE_KEY not in out


def test_tail_text_marks_rejections(tmp_path: Path) -> None:
    out = _follow_a_demo(tmp_path / "home")
    lines = out.splitlines()
    assert sum("REJECTED (policy)" in line for line in lines) == 3
    assert any("REJECTED (hook)" in line and "run_command" in line for line in lines)
    assert any(line.startswith("running") and "scan_index" in line and "/16" in line
               for line in lines)
    assert FAKE_KEY not in out
