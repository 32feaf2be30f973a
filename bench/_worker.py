"""A contender's process: set it up, then run timed rounds on request (JSON lines on stdio).

Protocol: the worker prints one line ``{"ok": true, "note": ..., "tooltrace": <the
``__init__.py`` of the tooltrace it runs, or null>}`` or ``{"ok": false,
"reason": ...}`` after set-up; then for each request line ``{"n": N}`` it runs N calls, timing
each, flushes, and answers ``{"samples": [...ns...], "cpu_loop_ns", "cpu_total_ns",
"wall_ns", "dropped", "exported"}``; ``{"close": true}`` ends it.

With ``--tail`` (the tail section) the worker first installs ``bench._tailtrace`` and each
answer also holds ``starts`` (each call's start, ns on ``perf_counter_ns``), ``slices``
(background work slices: thread, start, end, thread CPU ns) and ``collections`` (generation,
start, end) seen during the timed loop, and ``bg_cpu`` (for each call, the CPU time the
process's other threads, tool threads excepted, used while it ran: read from their CPU clocks,
so it counts only time they held the interpreter or ran outside it, never time the machine gave
to other processes) and ``preempted`` (for each call, how many times the kernel took the CPU from
the calling thread while it ran: ``ru_nivcsw`` of ``getrusage(RUSAGE_THREAD)``, which, unlike
reading ``/proc``, does not release the interpreter lock and so leaves the contention as it is).
"""

from __future__ import annotations

import gc
import json
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

#: Threads named so run the tools themselves (``execution="thread"``): the call's own work.
TOOL_THREADS = "tooltrace-tool"


def _dropped(extra: dict[str, Any]) -> int | None:
    reg = extra.get("registry")
    if reg is None:
        return None
    return sum(int(getattr(s, "dropped", 0) or 0) for s in reg.sinks)


def _background_cpu() -> Callable[[], int]:
    """A reader of the summed CPU time of this process's background threads (ns)."""
    main = threading.main_thread()
    clocks = []
    for t in threading.enumerate():
        if t is main or t.ident is None or t.name.startswith(TOOL_THREADS):
            continue
        try:
            clocks.append(time.pthread_getcpuclockid(t.ident))
        except OSError:  # ended meanwhile
            pass
    read = time.clock_gettime_ns

    def total() -> int:
        n = 0
        for c in clocks:
            try:
                n += read(c)
            except OSError:
                pass
        return n

    return total


def main(name: str, tail: bool = False) -> int:
    """Serve rounds for contender ``name`` until told to close."""
    out = sys.stdout
    # Peers may print banners: keep the protocol channel clean.
    sys.stdout = sys.stderr
    from bench._contenders import Unavailable, build

    recorder = None
    if tail:
        from bench._tailtrace import install

        recorder = install()

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
    # Which tree's tooltrace this process runs (a ``--baseline`` worker's is that tree's).
    loaded = sys.modules.get("tooltrace")
    tree = getattr(loaded, "__file__", None)
    out.write(json.dumps({"ok": True, "note": c.note, "tooltrace": tree}) + "\n")
    out.flush()
    call, flush, between = c.call, c.flush, c.between
    pc, cpu = time.perf_counter_ns, time.process_time_ns
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("close"):
            break
        n = int(req["n"])
        samples = [0] * n
        starts = [0] * n
        gc.collect()
        if recorder is not None:
            recorder.reset()
        c0 = cpu()
        w0 = pc()
        if recorder is None:
            for i in range(n):
                if between is not None:
                    between()
                t = pc()
                call()
                samples[i] = pc() - t
        else:
            bg = _background_cpu()
            bg_cpu = [0] * n
            preempted = [0] * n
            usage, me = resource.getrusage, resource.RUSAGE_THREAD
            for i in range(n):
                if between is not None:
                    between()
                v = usage(me).ru_nivcsw
                b = bg()
                t = pc()
                call()
                samples[i] = pc() - t
                bg_cpu[i] = bg() - b
                preempted[i] = usage(me).ru_nivcsw - v
                starts[i] = t
        w1 = pc()
        c1 = cpu()
        extra: dict[str, Any] = {}
        if recorder is not None:
            extra["slices"], extra["collections"] = recorder.take(w1)
            extra["starts"] = starts
            extra["bg_cpu"] = bg_cpu
            extra["preempted"] = preempted
        flush()
        c2 = cpu()
        exporter = c.extra.get("exporter")
        out.write(json.dumps({
            **extra,
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
    raise SystemExit(main(sys.argv[1], tail="--tail" in sys.argv[2:]))
