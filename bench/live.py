"""Section ``live``: the trail read while it is written, and compaction nobody runs.

For each size (100,000 and 1,000,000 calls by default):

1. A writer process (a real ``ToolRegistry`` whose only sink is the audit sink, default
   settings: background compaction on) calls a no-op tool N times at a paced rate
   (``--live-rate``, 5,000 calls/s; 0: as fast as it goes), timing each call and sampling its
   compaction backlog every second, then stays alive with its live segment open.
2. ``live``: each command (``tooltrace autopsy`` of the first, middle and last call,
   ``calls --limit 20``, ``stats``) runs in turns with the floor (``python -c "import
   duckdb"``), a fresh process each time: wall time and the process's own peak RSS (VmHWM).
3. The writer shuts down; the next process to write opens the home and background compaction
   takes every sealed segment (the time it took is reported; the last segment, sealed at the
   shutdown, is small and young, so this process starts the compactor at once rather than
   when a writer would find it due, 30 s later); ``compacted``: the same commands, the same
   way.
4. ``compaction off`` (sizes up to ``--live-off-max``): a trail written with
   ``TOOLTRACE_AUDIT_COMPACT=off`` and read the same way: what a reader pays when nothing
   compacts at all.

The aims are ratios of the same run: live against compacted, each command's peak RSS, and the
backlog staying bounded at the paced rate.

``python -m bench.live backlog --calls 300000`` (``large_backlog``): a backlog nothing compacts
(compaction off, calls written as fast as the writer goes), each command over it against the
same calls once compacted, in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import Table, percentile, scratch

__all__ = ["COMMANDS", "backlog_over_time", "compactors_over_time", "large_backlog", "run",
           "targets"]

ROOT = Path(__file__).resolve().parent.parent
#: What each timed process prints last on standard error: its peak RSS in KiB.
_HWM = """
def _hwm():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
"""
_COMMAND = _HWM + """
import sys
from tooltrace.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
sys.stderr.write(f"\\nVmHWM {_hwm()}\\n")
sys.exit(code)
"""
_FLOOR = _HWM + """
import sys
import duckdb
sys.stderr.write(f"\\nVmHWM {_hwm()}\\n")
"""
#: The commands timed, by name: (arguments before ``--home``, the id they need or None).
COMMANDS = (
    ("autopsy first", ["autopsy"], "first"),
    ("autopsy middle", ["autopsy"], "middle"),
    ("autopsy last", ["autopsy"], "last"),
    ("calls --limit 20", ["calls", "--limit", "20"], None),
    ("stats", ["stats"], None),
)


# -- the writer process ---------------------------------------------------------------------


def child_writer(home: str, calls: int, rate: float) -> None:
    """Write ``calls`` calls at ``rate`` per second (0: flat out), print what it saw, wait for
    a line on standard input, shut down."""
    from tooltrace import ToolCall, ToolRegistry, tool
    from tooltrace.telemetry import AuditSink

    ws = Path(home + "-ws")
    ws.mkdir(parents=True, exist_ok=True)
    sink = AuditSink(home)
    reg = ToolRegistry(workspace=ws, home=home, sinks=[sink])

    def noop(x: str) -> str:
        return x

    def fail(x: str) -> str:
        raise ValueError("no")

    reg.register(tool("noop", execution="inline", description="Return x.")(noop))
    reg.register(tool("fail", execution="inline", description="Fail.")(fail))
    lat: list[int] = []
    backlog: list[tuple[float, int, int, float]] = []
    ids: list[str] = []
    pc = time.perf_counter_ns
    t0 = time.perf_counter()
    next_sample = t0
    for i in range(calls):
        if rate:
            due = t0 + i / rate
            while time.perf_counter() < due:
                time.sleep(0.0002)
        elif sink.depth > 30_000:
            while sink.depth > 5_000:  # flat out, without dropping
                time.sleep(0.001)
        name, args = ("fail", {"x": "v"}) if i % 97 == 3 else (
            ("noop", {"y": 1}) if i % 50 == 7 else ("noop", {"x": f"value {i % 1000}"}))
        a = pc()
        env = reg.call(ToolCall(name, args))
        lat.append(pc() - a)
        if i in (0, calls // 2, calls - 1):
            ids.append(env.call_id)
        now = time.perf_counter()
        if now >= next_sample:
            b = sink.compaction_backlog
            backlog.append((now - t0, b.calls, b.bytes, b.oldest_age_s))
            next_sample = now + 1.0
    elapsed = time.perf_counter() - t0
    sink.flush(120.0)
    lat.sort()
    b = sink.compaction_backlog
    backlog.append((time.perf_counter() - t0, b.calls, b.bytes, b.oldest_age_s))
    half = len(backlog) // 2
    out = {"calls": calls, "rate": rate, "achieved": calls / elapsed, "seconds": elapsed,
           "p50_us": percentile(lat, 50) / 1000, "p999_us": percentile(lat, 99.9) / 1000,
           "dropped": sink.dropped, "ids": ids,
           "backlog_max_calls": max((s[1] for s in backlog), default=0),
           "backlog_max_mib": max((s[2] for s in backlog), default=0) / 2**20,
           "backlog_max_age_s": max((s[3] for s in backlog), default=0.0),
           "backlog_max_mib_first_half": max((s[2] for s in backlog[:half]), default=0) / 2**20,
           "backlog_max_mib_second_half": max((s[2] for s in backlog[half:]), default=0) / 2**20,
           "backlog_end_calls": b.calls, "backlog_end_mib": b.bytes / 2**20,
           "backlog_end_age_s": b.oldest_age_s,
           "backlog_samples": [[round(t, 1), c, n, round(age, 1)] for t, c, n, age in backlog],
           "compactors_started": sink.compaction.started if sink.compaction else 0,
           "compactors_retired": sink.compaction.retired if sink.compaction else 0,
           "compactors_escalated": sink.compaction.escalated if sink.compaction else 0,
           "compactors_caught_up": sink.compaction.caught_up if sink.compaction else 0,
           "compactor_failures": sink.compaction.failures if sink.compaction else 0}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    sys.stdin.readline()
    reg.shutdown(60.0)


def child_next(home: str, timeout_s: float) -> None:
    """The next process to write: open the home and wait until background compaction has
    taken every sealed segment; print how long that took."""
    from tooltrace.audit import BackgroundCompaction, list_segments, load_key
    from tooltrace.telemetry import AuditSink

    adir = Path(home) / "audit"
    t0 = time.perf_counter()
    sink = AuditSink(home)
    sink.open_segment()
    key = load_key(Path(home), create=False)
    assert key is not None
    now = BackgroundCompaction(Path(home), key, after_s=0.0)
    done = False
    while time.perf_counter() - t0 < timeout_s:
        sealed = {(s.writer, s.n) for s in list_segments(adir) if not s.live}
        if sealed <= _compacted(adir):
            done = True
            break
        now.poke()
        time.sleep(0.5)
    waited = time.perf_counter() - t0
    now.wait(60.0)
    if sink.compaction is not None:
        sink.compaction.wait(60.0)
    sink.shutdown(30.0)
    sys.stdout.write(json.dumps({"caught_up": done, "seconds": waited}) + "\n")


# -- the coordinator ------------------------------------------------------------------------


def _status(pid: int) -> dict[str, str]:
    """The lines of ``/proc/<pid>/status`` by name; empty once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(ln.rstrip("\n").split(":\t", 1) for ln in f if ":\t" in ln)
    except OSError:
        return {}


class _Peaks:
    """The peak RSS (VmHWM, MiB) of one process and of each of its children, read from
    ``/proc`` every second by a thread of this process, so the writer's own loop is not
    touched. A child's peak is its last reading (at most a second before it exited). Each
    reading of a child also notes its RSS now and its scheduling policy (``children``)."""

    def __init__(self, pid: int) -> None:
        import threading

        self.pid = pid
        self.peaks: dict[int, float] = {}
        #: [s since the start, pid, VmRSS MiB, policy] of each child at each reading.
        self.children: list[list[Any]] = []
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                pid = int(entry)
                st = _status(pid)
                if pid != self.pid and st.get("PPid", "").strip() != str(self.pid):
                    continue
                hwm = st.get("VmHWM", "").split()
                if hwm:
                    self.peaks[pid] = max(self.peaks.get(pid, 0.0), int(hwm[0]) / 1024)
                rss = st.get("VmRSS", "").split()
                if pid != self.pid and rss:
                    self.children.append([round(time.monotonic() - self._t0, 1), pid,
                                          int(rss[0]) / 1024, _policy(pid)])
            self._stop.wait(1.0)

    def stop(self) -> dict[str, Any]:
        """Stop watching: the process's peak, its children's largest and how many were seen,
        and the children's readings."""
        self._stop.set()
        self._thread.join()
        children = [m for pid, m in self.peaks.items() if pid != self.pid]
        return {"writer_peak_mib": self.peaks.get(self.pid, 0.0),
                "child_peak_mib": max(children, default=0.0), "children_seen": len(children),
                "child_samples": self.children}


def _policy(pid: int) -> str:
    """A process's scheduling policy: ``idle`` (``SCHED_IDLE``), ``normal`` or ``other``."""
    try:
        pol = os.sched_getscheduler(pid)
    except OSError:
        return "gone"
    return {os.SCHED_IDLE: "idle", os.SCHED_OTHER: "normal"}.get(pol, "other")


def compactors_over_time(samples: list[list[Any]], span_s: float = 60.0
                         ) -> list[list[Any]]:
    """The compactor readings ``[s, pid, RSS MiB, policy]`` cut into spans of ``span_s``:
    ``[span end s, largest RSS MiB, processes seen, policies seen]`` each."""
    out: dict[float, list[Any]] = {}
    for t, pid, rss, pol in samples:
        end = span_s * (int(t // span_s) + 1)
        row = out.setdefault(end, [end, 0.0, set(), set()])
        row[1] = max(row[1], rss)
        row[2].add(pid)
        row[3].add(pol)
    return [[end, rss, len(pids), "+".join(sorted(pols))]
            for end, rss, pids, pols in sorted(out.values(), key=lambda r: r[0])]


def _env(compaction: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TOOLTRACE_HOME", None)
    env["TOOLTRACE_AUDIT_COMPACT"] = "auto" if compaction else "off"
    return env


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, peak RSS MiB) of one process; raises when it fails."""
    a = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = (time.perf_counter() - a) * 1000
    tail = p.stderr.strip().splitlines()
    if p.returncode != 0 or not tail or not tail[-1].startswith("VmHWM "):
        raise RuntimeError(f"{cmd[3:5]} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    return wall, int(tail[-1].split()[1]) / 1024


def _measure(home: str, ids: dict[str, str], repeats: int, env: dict[str, str]
             ) -> dict[str, dict[str, Any]]:
    """Each command and the floor, ``repeats`` times in turns: medians and the worst RSS."""
    got: dict[str, list[tuple[float, float]]] = {name: [] for name, _a, _i in COMMANDS}
    got["floor"] = []
    py = sys.executable
    for _ in range(repeats):
        for name, args, which in COMMANDS:
            extra = [ids[which]] if which else []
            got[name].append(_timed([py, "-c", _COMMAND, *args, *extra, "--home", home], env))
        got["floor"].append(_timed([py, "-c", _FLOOR], env))
    return {name: {"ms": statistics.median(w for w, _m in v), "ms_all": [w for w, _m in v],
                   "rss_mib": max(m for _w, m in v)} for name, v in got.items()}


def _write(home: str, calls: int, rate: float, compaction: bool
           ) -> tuple[subprocess.Popen[str], dict[str, Any], _Peaks]:
    p = subprocess.Popen([sys.executable, "-m", "bench.live", "writer", "--home", home,
                          "--calls", str(calls), "--rate", str(rate)], cwd=ROOT,
                         env=_env(compaction), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    peaks = _Peaks(p.pid)
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line:
        p.wait()
        peaks.stop()
        raise RuntimeError(f"the writer of {calls} calls failed ({p.returncode})")
    return p, json.loads(line), peaks


def _stop(p: subprocess.Popen[str], peaks: _Peaks, wrote: dict[str, Any]) -> None:
    """Shut the writer down; add its peak RSS and its compactors' to ``wrote``."""
    assert p.stdin is not None
    p.stdin.write("stop\n")
    p.stdin.flush()
    code = p.wait(300)
    wrote.update(peaks.stop())
    if code != 0:
        raise RuntimeError(f"the writer failed at shutdown ({code})")


def _compacted(adir: Path) -> set[tuple[str, int]]:
    """(writer, number) of every segment the digest says compaction took (it says so once
    the rows are in Parquet)."""
    from tooltrace.audit import COMPACTED, read_digest

    return {(ln.writer, ln.n) for ln in read_digest(adir).lines if ln.kind == COMPACTED}


def _trail_state(home: str) -> dict[str, Any]:
    from tooltrace.audit import list_segments

    adir = Path(home) / "audit"
    done = _compacted(adir)
    segs = list_segments(adir)
    tables = adir / "parquet"
    files = {t.name: len(list(t.glob("*.parquet")))
             for t in sorted(tables.iterdir()) if t.is_dir()} if tables.is_dir() else {}
    return {"segments": len(segs), "compacted": len([s for s in segs if (s.writer, s.n) in done]),
            "parquet_files": {t: n for t, n in files.items() if n},
            "segment_mib": sum(s.path.stat().st_size for s in segs if s.path.exists()) / 2**20}


def _size(calls: int, rate: float, repeats: int, off: bool) -> dict[str, Any]:
    home = scratch(f"tooltrace-bench-live-{calls}-")
    try:
        writer, wrote, peaks = _write(home, calls, rate, True)
        ids = dict(zip(("first", "middle", "last"), wrote["ids"], strict=True))
        try:
            state_live = _trail_state(home)
            live = _measure(home, ids, repeats, _env(True))
        finally:
            _stop(writer, peaks, wrote)
        nxt = subprocess.run([sys.executable, "-m", "bench.live", "next", "--home", home],
                             cwd=ROOT, env=_env(True), capture_output=True, text=True)
        if nxt.returncode != 0:
            raise RuntimeError(f"the next writer failed: {nxt.stderr.strip()[-400:]}")
        caught = json.loads(nxt.stdout.strip().splitlines()[-1])
        state_compacted = _trail_state(home)
        compacted = _measure(home, ids, repeats, _env(True))
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(home + "-ws", ignore_errors=True)
    out: dict[str, Any] = {"calls": calls, "writer": wrote, "live": live,
                           "compacted": compacted, "caught_up": caught,
                           "state_live": state_live, "state_compacted": state_compacted}
    if off:
        home = scratch(f"tooltrace-bench-live-off-{calls}-")
        try:
            writer, wrote_off, peaks = _write(home, calls, rate, False)
            ids = dict(zip(("first", "middle", "last"), wrote_off["ids"], strict=True))
            try:
                out["off"] = _measure(home, ids, repeats, _env(False))
                out["state_off"] = _trail_state(home)
            finally:
                _stop(writer, peaks, wrote_off)
        finally:
            shutil.rmtree(home, ignore_errors=True)
            shutil.rmtree(home + "-ws", ignore_errors=True)
    return out


def run(*, sizes: list[int], rate: float, repeats: int, off_max: int) -> dict[str, Any]:
    """Measure each size; print the tables; return the figures."""
    # Other work on the host slows the writer and the compactor alike: say how busy it was.
    out: dict[str, Any] = {"sizes": [], "rate": rate, "repeats": repeats,
                           "load_start": os.getloadavg()}
    for n in sizes:
        res = _size(n, rate, repeats, n <= off_max)
        out["sizes"].append(res)
        _print(res, rate, repeats)
    out["load_end"] = os.getloadavg()
    print("- load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}; after: {:.2f} {:.2f} {:.2f}"
          .format(*out["load_start"], *out["load_end"]))
    return out


def backlog_over_time(samples: list[list[float]], rows: int = 10) -> list[list[float]]:
    """The writer's backlog samples ``[s, calls, bytes, oldest age s]`` cut into at most
    ``rows`` equal spans of the run: ``[span end s, max calls, max MiB, max age s]`` each."""
    if not samples:
        return []
    span = max(1.0, samples[-1][0] / rows)
    out: list[list[float]] = []
    for t, calls, size, age in samples:
        end = span * (int(t // span) + 1)
        if out and out[-1][0] == end:
            last = out[-1]
            last[1], last[2], last[3] = max(last[1], calls), max(last[2], size / 2**20), max(
                last[3], age)
        else:
            out.append([end, calls, size / 2**20, age])
    return out


def _print(res: dict[str, Any], rate: float, repeats: int) -> None:
    n = res["calls"]
    w = res["writer"]
    pace = f"{rate:,.0f} calls/s" if rate else "as fast as it goes"
    t = Table(f"The live trail: {n:,} calls written at {pace}, each command a fresh process"
              f" (median of {repeats}; peak RSS is the worst)",
              ["command", "live ms", "live MiB", "compacted ms", "compacted MiB",
               "live / compacted", "compaction off ms", "compaction off MiB"])
    off = res.get("off", {})
    for name in [c[0] for c in COMMANDS] + ["floor"]:
        lv, cp, of = res["live"][name], res["compacted"][name], off.get(name)
        t.add(name, lv["ms"], lv["rss_mib"], cp["ms"], cp["rss_mib"], lv["ms"] / cp["ms"],
              of["ms"] if of else None, of["rss_mib"] if of else None, digits=1)
    t.print()
    sl, sc = res["state_live"], res["state_compacted"]
    print(f"- writing: {w['achieved']:,.0f} calls/s achieved, call p50 {w['p50_us']:.1f} us, "
          f"p99.9 {w['p999_us']:.1f} us, {w['dropped']} dropped, {w['compactors_started']} "
          f"compactor processes started")
    print(f"- compaction backlog while writing (sampled each second): at most "
          f"{w['backlog_max_calls']:,} calls, {w['backlog_max_mib']:.1f} MiB (first half "
          f"{w['backlog_max_mib_first_half']:.1f}, second half "
          f"{w['backlog_max_mib_second_half']:.1f}), oldest {w['backlog_max_age_s']:.0f} s; "
          f"at the end {w['backlog_end_calls']:,} calls, {w['backlog_end_mib']:.1f} MiB, oldest "
          f"{w.get('backlog_end_age_s', 0.0):.0f} s")
    if "writer_peak_mib" in w:
        kids = (f"its compactor processes at most {w['child_peak_mib']:.0f} MiB "
                f"({w['children_seen']} seen)" if w["children_seen"] else
                "no compactor process seen")
        print(f"- peak RSS: the writer {w['writer_peak_mib']:.0f} MiB, {kids}")
    if w.get("child_samples"):
        ct = Table(f"Compactor processes over time ({n:,} calls, read every second: largest"
                   " RSS in each minute, processes seen, their scheduling policy)",
                   ["up to s", "RSS MiB", "processes", "policy"])
        for row in compactors_over_time(w["child_samples"]):
            ct.add(*row, digits=0)
        ct.print()
        print(f"- compactors: {w.get('compactors_started', 0)} started, "
              f"{w.get('compactors_retired', 0)} retired past their memory bound, "
              f"{w.get('compactors_escalated', 0)} idle ones replaced at the writer's priority, "
              f"{w.get('compactors_caught_up', 0)} at the writer's priority made way for an idle"
              f" one once caught up, {w.get('compactor_failures', 0)} failed")
    if w.get("backlog_samples"):
        bt = Table(f"Compaction backlog over time ({n:,} calls, max in each span)",
                   ["up to s", "calls", "MiB", "oldest s"])
        for row in backlog_over_time(w["backlog_samples"]):
            bt.add(*row, digits=1)
        bt.print()
    print(f"- live: {sl['compacted']} of {sl['segments']} segments compacted "
          f"({sl['segment_mib']:.0f} MiB of segments), Parquet files {sl['parquet_files']}")
    print(f"- compacted: the next writer's background compaction caught up in "
          f"{res['caught_up']['seconds']:.0f} s; {sc['compacted']} of {sc['segments']} segments,"
          f" Parquet files {sc['parquet_files']}\n")


def targets(res: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(aim, what was measured, met?) at the largest size: each command live within its
    ratio of the same command once compacted, every command's peak RSS, the backlog bounded."""
    if not res["sizes"]:
        return []
    big = max(res["sizes"], key=lambda s: s["calls"])
    at = f" at {big['calls']:,} calls"
    out = []
    for name, _a, _w in COMMANDS:
        lv, cp = big["live"][name]["ms"], big["compacted"][name]["ms"]
        bound = 1.5 if name.startswith("autopsy") else 2.0
        out.append((f"live `{name}` <= {bound}x compacted", f"{lv:.0f} vs {cp:.0f} ms = "
                    f"{lv / cp:.2f}x{at}", lv <= bound * cp))
    worst = max((big[state][name]["rss_mib"], f"{name} ({state})")
                for state in ("live", "compacted") for name, _a, _w in COMMANDS)
    out.append(("every command's peak RSS < 150 MiB", f"at most {worst[0]:.0f} MiB, "
                f"{worst[1]}{at}", worst[0] < 150))
    w = big["writer"]
    # Bounded: what waits in the second half of the run is no more than in the first (plus a
    # segment or two being written and compacted), and the oldest waits seconds, not minutes.
    grows = w["backlog_max_mib_second_half"] > w["backlog_max_mib_first_half"] + 32
    out.append((f"compaction keeps up at {res['rate']:,.0f} calls/s (backlog bounded)",
                f"at most {w['backlog_max_mib']:.0f} MiB ({w['backlog_max_mib_first_half']:.0f}"
                f" first half, {w['backlog_max_mib_second_half']:.0f} second), oldest "
                f"{w['backlog_max_age_s']:.0f} s, over {w['seconds']:.0f} s",
                not grows and w["backlog_max_age_s"] <= 120))
    return out


def _measure_cold(home: str, ids: dict[str, str], repeats: int, env: dict[str, str]
                  ) -> dict[str, dict[str, Any]]:
    """``_measure``, with what readers keep of parsed segments (``audit/readcache``) removed
    before each command: what the first reader of a backlog pays."""
    got: dict[str, list[tuple[float, float]]] = {name: [] for name, _a, _i in COMMANDS}
    py = sys.executable
    for _ in range(repeats):
        for name, args, which in COMMANDS:
            shutil.rmtree(Path(home) / "audit" / "readcache", ignore_errors=True)
            extra = [ids[which]] if which else []
            got[name].append(_timed([py, "-c", _COMMAND, *args, *extra, "--home", home], env))
    return {name: {"ms": statistics.median(w for w, _m in v), "ms_all": [w for w, _m in v],
                   "rss_mib": max(m for _w, m in v)} for name, v in got.items()}


def large_backlog(calls: int, repeats: int) -> dict[str, Any]:
    """A backlog nothing compacts: ``calls`` calls written as fast as the writer goes with
    compaction off (``TOOLTRACE_AUDIT_COMPACT=off``), the writer alive with its last segment
    live while each command runs over it, ``repeats`` times in turns: first with nothing kept
    by earlier readers ("cold"), then after them ("warm"); then a copy of the trail compacted
    (``tooltrace compact``) and the same commands over the copy, in the same run."""
    home = scratch(f"tooltrace-bench-backlog-{calls}-")
    copy = home + "-compacted"
    try:
        writer, wrote, peaks = _write(home, calls, 0.0, False)
        ids = dict(zip(("first", "middle", "last"), wrote["ids"], strict=True))
        try:
            state = _trail_state(home)
            cold = _measure_cold(home, ids, repeats, _env(False))
            warm = _measure(home, ids, repeats, _env(False))
        finally:
            _stop(writer, peaks, wrote)
        shutil.copytree(home, copy)
        compact_ms, compact_mib = _timed(
            [sys.executable, "-c", _COMMAND, "compact", "--home", copy], _env(False))
        compacted = _measure(copy, ids, repeats, _env(False))
    finally:
        for d in (home, copy, home + "-ws"):
            shutil.rmtree(d, ignore_errors=True)
    out = {"calls": calls, "repeats": repeats, "state": state, "cold": cold, "warm": warm,
           "compacted": compacted, "compact_ms": compact_ms, "compact_mib": compact_mib,
           "writer": {k: v for k, v in wrote.items() if k != "backlog_samples"}}
    t = Table(f"A backlog nothing compacts: {calls:,} calls ({state['segments']} segments,"
              f" {state['segment_mib']:.0f} MiB) against the same calls compacted, each"
              f" command a fresh process (median of {repeats}; peak RSS is the worst)",
              ["command", "cold ms", "cold MiB", "warm ms", "warm MiB", "compacted ms",
               "compacted MiB", "cold / compacted", "warm / compacted"])
    for name in [c[0] for c in COMMANDS] + ["floor"]:
        w, c = warm[name], compacted[name]
        k = cold.get(name)
        t.add(name, k["ms"] if k else None, k["rss_mib"] if k else None, w["ms"],
              w["rss_mib"], c["ms"], c["rss_mib"], k["ms"] / c["ms"] if k else None,
              w["ms"] / c["ms"], digits=1)
    t.print()
    print(f"- compacting the copy: {compact_ms / 1000:.1f} s, {compact_mib:.0f} MiB")
    return out


def _main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.live")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("writer")
    w.add_argument("--home", required=True)
    w.add_argument("--calls", type=int, required=True)
    w.add_argument("--rate", type=float, default=5000.0)
    nx = sub.add_parser("next")
    nx.add_argument("--home", required=True)
    nx.add_argument("--timeout", type=float, default=600.0)
    r = sub.add_parser("run", help="the section alone")
    r.add_argument("--sizes", default="100000")
    r.add_argument("--rate", type=float, default=5000.0)
    r.add_argument("--repeats", type=int, default=5)
    r.add_argument("--off-max", type=int, default=100_000)
    bk = sub.add_parser("backlog", help="a large backlog nothing compacts, against it compacted")
    bk.add_argument("--calls", type=int, default=300_000)
    bk.add_argument("--repeats", type=int, default=3)
    ns = ap.parse_args()
    if ns.cmd == "writer":
        child_writer(ns.home, ns.calls, ns.rate)
    elif ns.cmd == "next":
        child_next(ns.home, ns.timeout)
    elif ns.cmd == "backlog":
        load = os.getloadavg()
        res = large_backlog(ns.calls, ns.repeats)
        res["load_start"], res["load_end"] = load, os.getloadavg()
        print("- load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}; after: {:.2f} {:.2f}"
              " {:.2f}".format(*res["load_start"], *res["load_end"]))
        sys.stdout.write(json.dumps(res, default=str) + "\n")
    else:
        res = run(sizes=[int(x) for x in ns.sizes.split(",")], rate=ns.rate,
                  repeats=ns.repeats, off_max=ns.off_max)
        sys.stdout.write(json.dumps(res, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
