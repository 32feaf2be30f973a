"""`tooltrace tail` follows a live demo run from another process: calls as they finish,
rejections marked, progress of the calls in flight; it reads only the home's files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tooltrace import CallContext, ToolCall, create_registry, tool
from tooltrace.audit import audit_dir, live_dir, read_live
from tooltrace.demo import FAKE_KEY

EXE = str(Path(sys.executable).with_name("tooltrace"))
DEMO_CALLS = 17  # the scripted story (tests/test_demo.py's EXPECTED)


def _warm_up(home: Path) -> None:
    """One finished call in the trail before the demo: the tail prints it once it follows."""

    @tool(capability="read")
    def warm_up() -> str:
        """Answer at once."""
        return "ready"

    reg = create_registry(home.parent, home=home, metrics=False, logging=False, builtins=False)
    reg.register(warm_up)
    try:
        assert reg.call(ToolCall("warm_up", {})).ok
    finally:
        reg.shutdown()


def _follow_a_demo(home: Path, *tail_args: str) -> str:
    """What the tail printed of a demo run it followed from the start (the warm-up call's line
    left out)."""
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("TOOLTRACE_HOME", None)
    _warm_up(home)
    tail = subprocess.Popen(
        [EXE, "tail", "--home", str(home), "--from-start", "--interval", "0.05",
         "--max-calls", str(DEMO_CALLS + 1), "--duration", "120", *tail_args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # The demo starts once the tail follows (it printed the warm-up call), so the progress
        # of the demo's scan cannot be over before the tail's first look, however slow its start.
        assert tail.stdout is not None
        first = tail.stdout.readline()
        assert "warm_up" in first, first + tail.stderr.read() if tail.stderr else first
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


def _trail_ids(home: Path) -> list[str]:
    out = subprocess.run([EXE, "calls", "--home", str(home), "--json", "--limit", "1000"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [r["call_id"] for r in json.loads(out)]


def _unique_prefix(shown: str, every: list[str]) -> bool:
    """``shown`` names exactly one id of the trail, and is never shorter than the ms."""
    return len(shown) >= 13 and sum(i.startswith(shown) for i in every) == 1


def _a_prefix(shown: str, every: list[str]) -> bool:
    """``shown`` starts an id of the trail (a call of its millisecond that the tail had not
    seen yet when it printed the line may share it) and is never shorter than the ms."""
    return len(shown) >= 13 and any(i.startswith(shown) for i in every)


def test_tail_text_marks_rejections_in_aligned_lines_that_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    out = _follow_a_demo(tmp_path / "home")
    lines = out.splitlines()
    every = _trail_ids(tmp_path / "home")
    # time, status, tool, duration or progress, the call id's unique prefix (an 18-character
    # column that a longer prefix of calls made in one millisecond overflows), summary (cut)
    fields = [(ln[13:22].strip(), ln[23:37].strip(), ln[38:46].strip(),
               f"{ln[47:].partition(' ')[0]:<18}", ln[47:].partition(" ")[2].lstrip())
              for ln in lines]
    assert sum(f[0] == "REJECTED" and f[4].startswith("(policy)") for f in fields) == 3
    assert any(f[0] == "REJECTED" and f[1] == "run_command" and f[4].startswith("(hook)")
               for f in fields)
    assert any(f[0] == "running" and f[1] == "scan_index" and f[2].endswith("%")
               and "/16" in f[4] for f in fields)
    assert {f[0] for f in fields} >= {"ok", "REJECTED", "running", "failed", "unknown"}
    for f in fields:  # every line's call id is a prefix of one, in one column
        assert f[3][8] == "-" and _a_prefix(f[3].strip(), every), lines
    assert max(map(len, lines)) <= 120
    assert FAKE_KEY not in out


def test_tail_lines_fit_80_columns_with_unique_id_prefixes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    demo = subprocess.run([EXE, "demo", "--home", str(home), "--calls", "30", "--json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert demo.returncode == 0, demo.stderr
    ids = {r["call_id"] for r in json.loads(demo.stdout)["story"]}
    out = subprocess.run([EXE, "tail", "--home", str(home), "--from-start", "--max-calls",
                          "30"], capture_output=True, text=True, env=env, timeout=60).stdout
    lines = out.splitlines()
    assert len(lines) >= 30 and max(map(len, lines)) <= 80  # and a late resolution
    every = _trail_ids(home)
    # The tail read the finished trail in one look: each prefix is unique in the whole trail.
    shown = {ln[43:].split(" ", 1)[0] for ln in lines}  # one column
    assert all(_unique_prefix(p, every) for p in shown), shown
    assert all(any(i.startswith(p) for p in shown) for i in ids)


def test_the_live_file_holds_calls_in_flight_only_while_the_process_lives(
    tmp_path: Path,
) -> None:
    release = threading.Event()

    @tool(execution="thread")
    def slow(ctx: CallContext) -> str:
        """Reports progress, then waits to be released."""
        ctx.progress(1, 4, f"first quarter key={FAKE_KEY}")
        release.wait(30)
        return "done"

    home = tmp_path / "home"
    reg = create_registry(tmp_path, home=home, metrics=False, logging=False, builtins=False)
    reg.register(slow)
    adir = audit_dir(home)
    # A file left by a process that is gone is not read (and the next writer removes it).
    live_dir(adir).mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = live_dir(adir) / f"{dead}-0000.json"
    stale.write_text(json.dumps({"v": 1, "calls": [{"call_id": "x", "tool": "ghost"}]}))
    t = threading.Thread(target=lambda: reg.call(ToolCall("slow", {})))
    t.start()
    try:
        for _ in range(500):
            calls = list(read_live(adir))
            if calls:
                break
            threading.Event().wait(0.01)
        (c,) = calls
        assert (c["tool"], c["done"], c["total"]) == ("slow", 1, 4)
        assert FAKE_KEY not in c["message"]
        assert not stale.exists()
    finally:
        release.set()
        t.join(30)
        reg.shutdown()
    assert list(read_live(adir)) == []
    assert list(live_dir(adir).glob("*.json")) == []


def test_a_progress_event_after_its_call_returned_does_not_bring_it_back(
    tmp_path: Path,
) -> None:
    # The event hub hands progress over on a worker thread, so the last report of a call can
    # arrive after the call returned: the live file must not show it as running again.
    from tooltrace.audit import LiveProgress
    from tooltrace.events import CallProgress
    from tooltrace.model import ProgressMark

    adir = audit_dir(tmp_path / "home")
    live = LiveProgress(adir)

    def report(call_id: str, seq: int) -> None:
        mark = ProgressMark(seq=seq, at_us=1, done=seq, total=4, message="")
        live.on_progress(CallProgress(call_id=call_id, run_id="r", tool="t", mark=mark))

    report("a", 0)
    report("b", 0)
    live.finished("a")
    live.finished("c")  # returned before any of its progress arrived
    report("a", 1)
    report("c", 3)
    live.write()
    assert [c["call_id"] for c in read_live(adir)] == ["b"]
    live.close()


def test_the_live_file_forgets_every_finished_call(tmp_path: Path) -> None:
    # Many quick calls whose last act is a progress report: once they have all returned and
    # the sink has written the file again, nothing is left running.
    @tool(execution="thread")
    def quick(ctx: CallContext) -> str:
        """Reports progress and returns."""
        for i in range(3):
            ctx.progress(i + 1, 3, "step")
        return "done"

    @tool(execution="thread")
    def held(ctx: CallContext) -> str:
        """Reports progress, then waits: the one call really in flight."""
        ctx.progress(1, 2, "waiting")
        release.wait(30)
        return "done"

    release = threading.Event()
    home = tmp_path / "home"
    reg = create_registry(tmp_path, home=home, metrics=False, logging=False, builtins=False)
    reg.register(quick)
    reg.register(held)
    adir = audit_dir(home)
    t = threading.Thread(target=lambda: reg.call(ToolCall("held", {})))
    t.start()
    try:
        for _ in range(60):
            reg.call(ToolCall("quick", {}))
        reg.flush()

        def tools() -> list[str]:
            return sorted(c["tool"] for c in read_live(adir))

        for _ in range(500):  # the file is rewritten on the sink's next tick
            if tools() == ["held"]:
                break
            threading.Event().wait(0.01)
        assert tools() == ["held"]
    finally:
        release.set()
        t.join(30)
        reg.shutdown()


def test_on_a_terminal_tail_keeps_the_calls_in_flight_and_a_summary_at_the_bottom(
    tmp_path: Path,
) -> None:
    import pty
    import re

    release = threading.Event()

    @tool(execution="thread")
    def held(ctx: CallContext) -> str:
        """Reports progress, then waits: the call in flight."""
        ctx.progress(1, 4, "a quarter")
        release.wait(60)
        return "done"

    @tool
    def quick() -> str:
        """Returns at once."""
        return "done"

    home = tmp_path / "home"
    reg = create_registry(tmp_path, home=home, metrics=False, logging=False, builtins=False)
    reg.register(held)
    reg.register(quick)
    for _ in range(3):
        reg.call(ToolCall("quick", {}))
    t = threading.Thread(target=lambda: reg.call(ToolCall("held", {})))
    t.start()
    try:
        reg.flush()
        for _ in range(500):
            if list(read_live(audit_dir(home))):
                break
            threading.Event().wait(0.01)
        leader, follower = pty.openpty()
        env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
        proc = subprocess.Popen([EXE, "tail", "--home", str(home), "--from-start",
                                 "--duration", "1.5", "--interval", "0.05"],
                                stdin=follower, stdout=follower, stderr=follower, env=env)
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break  # the tail exited and closed its end
            if not data:
                break
            chunks.append(data)
        proc.wait(30)
        os.close(leader)
    finally:
        release.set()
        t.join(30)
        reg.shutdown()
    raw = b"".join(chunks).decode(errors="replace")
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", raw)
    lines = [ln.rstrip("\r") for ln in text.split("\n") if ln.strip()]
    assert proc.returncode == 0, text
    assert sum(ln[9:18].strip() == "ok" and "quick" in ln for ln in lines) == 3
    assert any(ln[9:18].strip() == "running" and "held" in ln and "25%" in ln for ln in lines)
    assert any(ln.startswith("-- 1 in flight; 3 finished (3 ok)") for ln in lines), lines
    assert max(map(len, lines)) <= 80
    # The bottom block is redrawn only when it changes: never once per look at the trail.
    assert text.count("-- 1 in flight") <= 4, text.count("-- 1 in flight")
