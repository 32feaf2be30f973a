"""Section ``memory``: resident memory of a process making many calls with everything on.

A fresh process builds the same registry as the overhead section's "everything on (inline)"
contender (tracing through a batch processor to a dropping exporter, metrics, a log line per
call to /dev/null, audit to a temporary home), makes calls as fast as it can, and at each
checkpoint flushes every sink, collects garbage and reads VmRSS. Growth is measured from the
first checkpoint (10k calls by default) to the last.

By design the registry remembers the status of its last 100,000 calls (for ``status(id)``),
so some growth up to 100k calls is expected; past that, memory should stay flat.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import Table, rss_mib

__all__ = ["run"]

ROOT = Path(__file__).resolve().parent.parent


def child(calls: int, base: int) -> dict[str, Any]:
    """Make ``calls`` calls; return RSS at each checkpoint."""
    from bench._contenders import TOOL, _registry
    from tooltrace import ToolCall

    c = _registry("inline", True)
    reg = c.extra["registry"]
    marks = sorted({m for m in (base, base * 10, base * 100, calls) if m <= calls})
    points = []
    args = {"x": "a"}
    done = 0
    t0 = time.perf_counter()
    for m in marks:
        while done < m:
            reg.call(ToolCall(TOOL, args))
            done += 1
        reg.flush(60.0)
        gc.collect()
        points.append({"calls": done, "rss_mib": rss_mib(),
                       "seconds": time.perf_counter() - t0})
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
        ["calls", "RSS MiB", "growth vs first checkpoint %", "elapsed s"],
    )
    for pt in pts:
        t.add(pt["calls"], pt["rss_mib"], 100.0 * (pt["rss_mib"] - first) / first,
              pt["seconds"], digits=1)
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
