"""A contender's process: set it up, then run timed rounds on request (JSON lines on stdio).

Protocol: the worker prints one line ``{"ok": true, "note": ...}`` or ``{"ok": false,
"reason": ...}`` after set-up; then for each request line ``{"n": N}`` it runs N calls, timing
each, flushes, and answers ``{"samples": [...ns...], "cpu_loop_ns", "cpu_total_ns",
"wall_ns", "dropped", "exported"}``; ``{"close": true}`` ends it.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from typing import Any


def _dropped(extra: dict[str, Any]) -> int | None:
    reg = extra.get("registry")
    if reg is None:
        return None
    return sum(int(getattr(s, "dropped", 0) or 0) for s in reg.sinks)


def main(name: str) -> int:
    """Serve rounds for contender ``name`` until told to close."""
    out = sys.stdout
    # Peers may print banners: keep the protocol channel clean.
    sys.stdout = sys.stderr
    from bench._contenders import Unavailable, build

    try:
        c = build(name)
    except Unavailable as exc:
        out.write(json.dumps({"ok": False, "reason": str(exc)}) + "\n")
        out.flush()
        return 0
    except Exception as exc:  # a peer that fails to start is reported, not hidden
        out.write(json.dumps({"ok": False, "reason": f"{type(exc).__name__}: {exc}"[:300]}) + "\n")
        out.flush()
        return 0
    out.write(json.dumps({"ok": True, "note": c.note}) + "\n")
    out.flush()
    call, flush = c.call, c.flush
    pc, cpu = time.perf_counter_ns, time.process_time_ns
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("close"):
            break
        n = int(req["n"])
        samples = [0] * n
        gc.collect()
        c0 = cpu()
        w0 = pc()
        for i in range(n):
            t = pc()
            call()
            samples[i] = pc() - t
        w1 = pc()
        c1 = cpu()
        flush()
        c2 = cpu()
        exporter = c.extra.get("exporter")
        out.write(json.dumps({
            "samples": samples,
            "cpu_loop_ns": c1 - c0,
            "cpu_total_ns": c2 - c0,
            "wall_ns": w1 - w0,
            "dropped": _dropped(c.extra),
            "exported": None if exporter is None else exporter.spans,
        }) + "\n")
        out.flush()
    try:
        c.close()
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
