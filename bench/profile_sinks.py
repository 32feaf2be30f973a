"""Section ``profile`` (second part): what each sink costs per record, on and off the call path.

For a batch of real records (the no-op tool's record, with trace ids), times each sink's
``emit`` (what the call path pays) and its deferred work (what its background worker pays:
building SDK spans and handing them to a BatchSpanProcessor, rendering log lines, encoding and
appending audit lines with grouped fsync), then profiles the deferred work with cProfile and
lists the hottest functions of each. Last, the cyclic garbage collector's share with everything
on: records and spans waiting in queues survive young collections, and every collection of an
older generation walks them.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import time
from collections.abc import Callable
from typing import Any

from bench._common import Table, scratch

__all__ = ["run"]


def _sinks() -> dict[str, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from bench._common import DropExporter
    from tooltrace.telemetry import AuditSink, LoggingSink, MetricsSink, TracingSink

    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(DropExporter()))
    home = scratch("tooltrace-bench-sinks-")
    return {
        "tracing": TracingSink(provider),
        "metrics": MetricsSink(tool_names=["noop"]),
        "logging": LoggingSink(open(os.devnull, "wb")),
        "audit": AuditSink(home),
    }


def _deferred(name: str, sink: Any) -> Callable[[list[Any]], None]:
    if name == "tracing":
        return sink._export_batch  # type: ignore[no-any-return]
    if name == "logging":
        return sink._write_batch  # type: ignore[no-any-return]
    if name == "audit":
        return sink._export  # type: ignore[no-any-return]

    def count(batch: list[Any]) -> None:  # metrics: the worker's updates, without its pauses
        for record in batch:
            sink._count(record)

    return count


def run(*, records: int = 20000, top: int = 8) -> dict[str, Any]:
    """Time and profile every sink over ``records`` records; print two tables."""
    from bench.ingest import _records

    recs = _records(records)
    sinks = _sinks()
    out: dict[str, Any] = {}
    t = Table(
        f"Sink cost per record ({records} records of the no-op call, {len(recs[0].steps)} steps)",
        ["sink", "emit us (call path)", "deferred us (worker)", "deferred share of total %"],
    )
    batch = 512
    profiles: dict[str, pstats.Stats] = {}
    for name, sink in sinks.items():
        # emit: what the caller pays (the worker is kept from running by a huge interval only
        # for the queue-based sinks, so this is the enqueue cost alone).
        w = getattr(sink, "_worker", None)
        c0 = time.perf_counter()
        for r in recs:
            sink.emit(r)
        emit_us = (time.perf_counter() - c0) / records * 1e6
        if w is not None:
            sink.flush(60.0)
        fn = _deferred(name, sink)
        c0 = time.process_time()
        for i in range(0, records, batch):
            fn(recs[i:i + batch])
        if name == "tracing":
            sink.tracer_provider.force_flush(30_000)
        deferred_us = (time.process_time() - c0) / records * 1e6
        prof = cProfile.Profile()
        prof.enable()
        for i in range(0, min(records, 5120), batch):
            fn(recs[i:i + batch])
        prof.disable()
        profiles[name] = pstats.Stats(prof)
        total = emit_us + deferred_us
        t.add(name, emit_us, deferred_us, 100.0 * deferred_us / total if total else 0.0,
              digits=2)
        out[name] = {"emit_us": emit_us, "deferred_us": deferred_us}
    t.print()
    for name, st in profiles.items():
        tt_total = sum(v[2] for v in st.stats.values())  # type: ignore[attr-defined]
        rows = sorted(
            ((v[2], v[3], v[1], k) for k, v in st.stats.items()),  # type: ignore[attr-defined]
            reverse=True,
        )[:top]
        pt = Table(f"Deferred work of the {name} sink: hottest functions (cProfile, own time)",
                   ["function", "own %", "cumulative % "])
        for tt, ct, _nc, (file, line, fn) in rows:
            short = file.split("site-packages/")[-1].split("/main/")[-1]
            pt.add(f"{short}:{line}({fn})", 100 * tt / tt_total, 100 * ct / tt_total)
        pt.print()
        out[f"{name}_hot"] = [f"{r[3][0]}:{r[3][1]}({r[3][2]})" for r in rows]
    for sink in sinks.values():
        sink.shutdown(10.0)
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
