"""Section ``profile`` (second part): what each sink costs per record, on and off the call path.

For a batch of real records (the no-op tool's record, with trace ids), each sink is fed through
its public ``emit`` and ``flush``: ``emit`` is what the call path pays; the deferred work
(building SDK spans and handing them to a BatchSpanProcessor, counting metrics, rendering log
lines, encoding and appending audit lines with grouped fsync) is the CPU time every other thread
of the process used meanwhile (process CPU time less the calling thread's). A second, profiled
run of a fresh sink gives the hottest functions of its background threads (cProfile started in
each thread the sink starts, through ``threading.setprofile``), waits and pauses left out. Last,
the cyclic garbage collector's share with everything on: records and spans waiting in queues
survive young collections, and every collection of an older generation walks them.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import threading
import time
from types import FrameType
from typing import Any

from bench._common import Table, scratch

__all__ = ["run"]

#: Sinks in the order they are measured.
SINKS = ("tracing", "metrics", "logging", "audit")
#: Where a background thread waits or pauses rather than works (builtins' pstats keys).
_WAITS = frozenset({
    "<method 'acquire' of '_thread.lock' objects>",
    "<method 'acquire' of '_thread.RLock' objects>",
    "<built-in method time.sleep>",
    "<method 'get' of '_queue.SimpleQueue' objects>",
})
#: Records the profiled run of each sink is fed.
_PROFILED = 5120


def _sink(name: str) -> tuple[Any, Any, Any]:
    """A fresh sink ``name``, the tracer provider it exports to (or None) and the stream it
    writes (or None)."""
    from tooltrace.telemetry import AuditSink, LoggingSink, MetricsSink, TracingSink

    if name == "tracing":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from bench._common import DropExporter

        provider = TracerProvider(shutdown_on_exit=False)
        provider.add_span_processor(BatchSpanProcessor(DropExporter()))
        return TracingSink(provider), provider, None
    if name == "metrics":
        return MetricsSink(tool_names=["noop"]), None, None
    if name == "logging":
        stream = open(os.devnull, "wb")  # noqa: SIM115 - closed by _feed
        return LoggingSink(stream), None, stream
    return AuditSink(scratch("tooltrace-bench-sinks-")), None, None


class _ThreadProfiles:
    """cProfile in every thread started while this is installed: the first event a new thread
    reports hands the thread to a profiler of its own."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []

    def __enter__(self) -> _ThreadProfiles:
        threading.setprofile(self._start)
        return self

    def __exit__(self, *exc: object) -> None:
        threading.setprofile(None)

    def _start(self, _frame: FrameType, _event: str, _arg: Any) -> None:
        prof = cProfile.Profile()
        self.profiles.append(prof)
        sys.setprofile(None)
        prof.enable()


def _feed(name: str, recs: list[Any], profiled: bool) -> tuple[float, float, list[Any]]:
    """Emit ``recs`` into a fresh sink, flush it and shut it down: (emit us per record, deferred
    CPU us per record, the profiles of its threads when ``profiled``)."""
    with _ThreadProfiles() if profiled else _NoProfiles() as threads:
        sink, provider, stream = _sink(name)
        n = len(recs)
        c0, m0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
        for r in recs:
            sink.emit(r)
        emit_us = (time.perf_counter() - w0) / n * 1e6
        sink.flush(60.0)
        if provider is not None:
            provider.force_flush(30_000)
        # What the other threads used: the calling thread's share (emit, the flush's waits) out.
        deferred_us = ((time.process_time() - c0) - (time.thread_time() - m0)) / n * 1e6
        sink.shutdown(10.0)
        if provider is not None:
            provider.shutdown()
        if stream is not None:
            stream.close()
    return emit_us, max(0.0, deferred_us), threads.profiles


class _NoProfiles:
    """The unprofiled run's stand-in for ``_ThreadProfiles``."""

    profiles: list[cProfile.Profile] = []

    def __enter__(self) -> _NoProfiles:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def run(*, records: int = 20000, top: int = 8) -> dict[str, Any]:
    """Time and profile every sink over ``records`` records; print their tables."""
    from bench.ingest import _records

    recs = _records(records)
    out: dict[str, Any] = {}
    t = Table(
        f"Sink cost per record ({records} records of the no-op call, {len(recs[0].steps)} steps)",
        ["sink", "emit us (call path)", "deferred us (worker)", "deferred share of total %"],
    )
    profiles: dict[str, list[Any]] = {}
    for name in SINKS:
        emit_us, deferred_us, _none = _feed(name, recs, profiled=False)
        profiles[name] = _feed(name, recs[:_PROFILED], profiled=True)[2]
        total = emit_us + deferred_us
        t.add(name, emit_us, deferred_us, 100.0 * deferred_us / total if total else 0.0,
              digits=2)
        out[name] = {"emit_us": emit_us, "deferred_us": deferred_us}
    t.print()
    for name, profs in profiles.items():
        if not profs:
            continue
        st = pstats.Stats(profs[0])
        for prof in profs[1:]:
            st.add(prof)
        work = {k: v for k, v in st.stats.items()  # type: ignore[attr-defined]
                if k[2] not in _WAITS}
        tt_total = sum(v[2] for v in work.values()) or 1.0
        rows = sorted(((v[2], v[3], v[1], k) for k, v in work.items()), reverse=True)[:top]
        pt = Table(f"Deferred work of the {name} sink: hottest functions (cProfile, own time "
                   "in its background threads, waits and pauses left out)",
                   ["function", "own %", "calls per record"])
        n = min(records, _PROFILED)
        for tt, _ct, nc, (file, line, fn) in rows:
            short = file.split("site-packages/")[-1].split("/main/")[-1]
            pt.add(f"{short}:{line}({fn})", 100 * tt / tt_total, nc / n, digits=2)
        pt.print()
        out[f"{name}_hot"] = [f"{r[3][0]}:{r[3][1]}({r[3][2]})" for r in rows]
    return out


def gc_cost(calls: int) -> dict[str, Any]:
    """Calls through the everything-on registry (inline no-op), timing each collection of the
    cyclic garbage collector (``gc.callbacks``), whichever thread it ran on."""
    import gc

    from bench._contenders import build

    gc.collect()  # what earlier sections left for the collector is not this section's cost
    c = build("tooltrace, everything on (inline)")
    for _ in range(min(calls, 2000)):
        c.call()
    c.flush()
    stats = {g: [0, 0] for g in range(3)}
    started = [0]

    def cb(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter_ns()
        else:
            s = stats[info["generation"]]
            s[0] += 1
            s[1] += time.perf_counter_ns() - started[0]

    gc.callbacks.append(cb)
    try:
        cpu0 = time.process_time()
        for _ in range(calls):
            c.call()
        c.flush()
        cpu = time.process_time() - cpu0
    finally:
        gc.callbacks.remove(cb)
        c.close()
    t = Table(
        f"Cyclic garbage collection, everything on ({calls} calls, deferred work included; "
        f"CPU {cpu / calls * 1e6:.1f} us/call)",
        ["generation", "collections", "calls per collection", "ms each (mean)", "us per call"],
    )
    out: dict[str, Any] = {"cpu_us_per_call": cpu / calls * 1e6}
    for g, (n, ns) in stats.items():
        t.add(f"gen{g}", n, calls / n if n else 0.0, ns / n / 1e6 if n else 0.0, ns / calls / 1e3,
              digits=2)
        out[f"gen{g}"] = {"collections": n, "us_per_call": ns / calls / 1e3}
    t.add("all", sum(v[0] for v in stats.values()), "", "",
          sum(v[1] for v in stats.values()) / calls / 1e3, digits=2)
    t.print()
    return out
