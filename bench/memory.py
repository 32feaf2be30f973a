"""Section ``memory``: resident memory of a process making many calls with everything on.

A fresh process builds the same registry as the overhead section's "everything on (inline)"
contender (tracing through a batch processor to a dropping exporter, metrics, a log line per
call to /dev/null, audit to a temporary home), makes calls as fast as it can, and at each
checkpoint flushes every sink, collects garbage and reads VmRSS. Growth is measured from the
first checkpoint (10k calls by default) to the last.

The registry remembers the status of its last 4,096 calls (for ``status(id)``), full well
before the first checkpoint, so memory should stay flat. Beside RSS, each checkpoint says where
the memory is, to tell a leak from allocator retention: Python's own allocator (pymalloc:
arenas held vs bytes in live objects), glibc malloc (bytes in use vs free but kept, summed over
every thread's arena; Linux/glibc only) and the deepest any sink's queue got since the last
checkpoint (records waiting in a queue are live Python objects: a backlog raises the pymalloc
high-water mark, and an arena is returned only once every object in it is gone).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import Table, rss_mib

__all__ = ["run"]

ROOT = Path(__file__).resolve().parent.parent


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _malloc_mib() -> tuple[float | None, float | None]:
    """glibc malloc: (MiB in use, MiB free but kept in arenas), summed over all arenas."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None, None
    fn.restype = _MallInfo2
    mi = fn()
    return (mi.uordblks + mi.hblkhd) / 2**20, mi.fordblks / 2**20


def _pymalloc_mib() -> tuple[float | None, float | None]:
    """pymalloc: (MiB of arenas held, MiB in live objects), from ``sys._debugmallocstats``
    (which writes to file descriptor 2: captured through a temporary file)."""
    stats = getattr(sys, "_debugmallocstats", None)
    if stats is None:
        return None, None
    sys.stderr.flush()
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            stats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode("ascii", "replace")
    arenas = re.search(r"(\d+) arenas \* (\d+) bytes/arena", text)
    live = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text)
    if arenas is None or live is None:
        return None, None
    return (int(arenas.group(1)) * int(arenas.group(2)) / 2**20,
            int(live.group(1).replace(",", "")) / 2**20)


def child(calls: int, base: int) -> dict[str, Any]:
    """Make ``calls`` calls; return RSS and the allocators' figures at each checkpoint."""
    from bench._contenders import TOOL, _registry
    from tooltrace import ToolCall

    c = _registry("inline", True)
    reg = c.extra["registry"]
    marks = sorted({m for m in (base, base * 10, base * 100, calls) if m <= calls})
    points = []
    args = {"x": "a"}
    done = 0
    queued = [s for s in reg.sinks if hasattr(s, "depth")]
    t0 = time.perf_counter()
    for m in marks:
        peak = 0
        while done < m:
            reg.call(ToolCall(TOOL, args))
            done += 1
            if not done & 1023:
                peak = max(peak, *(int(s.depth or 0) for s in queued), 0)
        reg.flush(60.0)
        gc.collect()
        py_arenas, py_live = _pymalloc_mib()
        c_used, c_free = _malloc_mib()
        points.append({"calls": done, "rss_mib": rss_mib(),
                       "seconds": time.perf_counter() - t0,
                       "pymalloc_arenas_mib": py_arenas, "pymalloc_live_mib": py_live,
                       "malloc_used_mib": c_used, "malloc_free_mib": c_free,
                       "peak_queue": peak})
    dropped = {s.name: int(getattr(s, "dropped", 0) or 0) for s in reg.sinks}
    c.close()
    return {"points": points, "dropped": dropped}


def run(*, calls: int, base: int) -> dict[str, Any]:
    """Run the child; print the table; return the figures."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(
        [sys.executable, "-m", "bench.memory", "--calls", str(calls), "--base", str(base)],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    if p.returncode != 0:
        raise RuntimeError(f"memory child failed: {p.stderr.strip()[-500:]}")
    res: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    pts = res["points"]
    first = pts[0]["rss_mib"]
    t = Table(
        "Memory: RSS with everything on (flushed, after gc.collect())",
        ["calls", "RSS MiB", "growth vs first checkpoint %", "elapsed s",
         "pymalloc arenas / live MiB", "malloc used / free MiB", "peak queue"],
    )

    def pair(a: float | None, b: float | None) -> str:
        return "n/a" if a is None or b is None else f"{a:.1f} / {b:.1f}"

    for pt in pts:
        t.add(pt["calls"], pt["rss_mib"], 100.0 * (pt["rss_mib"] - first) / first,
              pt["seconds"],
              pair(pt.get("pymalloc_arenas_mib"), pt.get("pymalloc_live_mib")),
              pair(pt.get("malloc_used_mib"), pt.get("malloc_free_mib")),
              pt.get("peak_queue", 0), digits=1)
    t.print()
    res["growth_pct"] = 100.0 * (pts[-1]["rss_mib"] - first) / first
    return res


def _main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.memory")
    ap.add_argument("--calls", type=int, required=True)
    ap.add_argument("--base", type=int, required=True)
    ns = ap.parse_args()
    sys.stdout.write(json.dumps(child(ns.calls, ns.base)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
