"""The things whose per-call cost the overhead section compares, one per worker process.

Each contender wraps the same no-op tool (``noop(x: str) -> str``, returns its argument) and
exposes ``call()`` (one tool call, what is timed), ``flush()`` (push out deferred work: its CPU
is counted, its time is not) and ``close()``. A contender lives alone in its own process, so
peers that configure OpenTelemetry's global provider (OpenLLMetry, Logfire) cannot affect the
others.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench._common import DropExporter, scratch

__all__ = [
    "CONTENDERS",
    "EVENT_CONFIGS",
    "EVENT_CONTENDERS",
    "EVENT_VARIANTS",
    "TAIL_ONLY",
    "Contender",
    "Unavailable",
    "build",
    "event_contender",
]

TOOL = "noop"
DESCRIPTION = "Return the argument unchanged."


class Unavailable(Exception):
    """A contender cannot run here (a peer not installed, or needing the network)."""


@dataclass
class Contender:
    """One set-up contender."""

    call: Callable[[], Any]
    flush: Callable[[], Any]
    close: Callable[[], Any] = lambda: None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def noop(x: str) -> str:
    """Return the argument unchanged."""
    return x


# -- baselines ------------------------------------------------------------------------------


def _bare() -> Contender:
    return Contender(lambda: noop(x="a"), lambda: None, note="plain function call")


def _handoff() -> Contender:
    """The no-op run on another thread and waited for: a ``SimpleQueue`` to one waiting worker
    and a held lock it releases, what ``execution="thread"`` does at the least (a synchronous
    call must return at its deadline, so the tool cannot run on the caller's thread)."""
    import queue
    import threading

    jobs: queue.SimpleQueue[tuple[Any, Any] | None] = queue.SimpleQueue()

    def work() -> None:
        while (job := jobs.get()) is not None:
            job[0](x="a")
            job[1].release()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    alloc = threading.Lock

    def call() -> None:
        done = alloc()
        done.acquire()
        jobs.put((noop, done))
        done.acquire()

    def close() -> None:
        jobs.put(None)
        worker.join(5.0)

    return Contender(call, lambda: None, close, note="SimpleQueue to one worker, a lock back")


def _compaction_off(execution: str) -> Contender:
    """The everything-on registry with background compaction turned off (this worker process
    is the contender's own: the variable reaches its audit sink only)."""
    os.environ["TOOLTRACE_AUDIT_COMPACT"] = "off"
    c = _registry(execution, True)
    c.note += "; background compaction off"
    return c


def _provider() -> tuple[Any, Any]:
    """An SDK TracerProvider whose spans go through a BatchSpanProcessor to a dropping exporter."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = DropExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, exporter


def _unsliced(reg: Any) -> None:
    """Turn off the sinks' work slices (``BatchWorker.paced``): what the tail was before them."""
    for sink in reg.sinks:
        worker = getattr(sink, "_worker", None)
        if worker is not None:
            worker._slice_s = 0.0


def _unyielding(reg: Any) -> None:
    """Make the sinks' workers work while tool calls are in flight: what they did before they
    waited for calls in flight (``tooltrace._inflight``)."""
    for sink in reg.sinks:
        worker = getattr(sink, "_worker", None)
        if worker is not None:
            worker._yield_max_s = 0.0


def _registry(execution: str, full: bool, sliced: bool = True, group: str | None = None,
              yields: bool = True) -> Contender:
    from tooltrace import ToolCall, tool

    home = scratch("tooltrace-bench-")
    fn = tool(TOOL, execution=execution, description=DESCRIPTION, group=group)(noop)
    extra: dict[str, Any] = {"home": home}
    if full:
        from tooltrace import create_registry
        from tooltrace.telemetry import TracingSink

        provider, exporter = _provider()
        devnull = open(os.devnull, "wb")  # noqa: SIM115 - closed in close()
        reg = create_registry(
            home,
            home=home,
            tracing=False,
            builtins=False,
            log_stream=devnull,
            extra_sinks=(TracingSink(provider),),
        )
        extra["exporter"] = exporter
        note = "tracing (batch -> dropping exporter), metrics, log line, audit (grouped fsync)"
        if not sliced:
            _unsliced(reg)
            note += "; sink workers not sliced"
        if not yields:
            _unyielding(reg)
            note += "; sink workers do not wait for calls in flight"

        def close() -> None:
            reg.shutdown(10.0)
            provider.shutdown()
            devnull.close()
    else:
        from tooltrace import ToolRegistry

        reg = ToolRegistry(workspace=home, home=home)
        note = "no sinks, no tracer"

        def close() -> None:
            reg.shutdown(5.0)

    reg.register(fn)
    args = {"x": "a"}

    def call() -> Any:
        return reg.call(ToolCall(TOOL, args))

    env = call()
    if env.status != "ok":
        raise RuntimeError(f"the no-op tool did not succeed: {env.summary}")
    extra["registry"] = reg
    from tooltrace._build import BUILD

    build_note = "compiled" if BUILD.compiled else f"source: {BUILD.reason}"
    if group is not None:
        note += f"; the tool is in group {group!r}"
    return Contender(call, lambda: reg.flush(30.0), close,
                     note=f"{execution}; {build_note}; {note}", extra=extra)


def _step_names() -> list[str]:
    """The steps tooltrace records for one successful call of the no-op tool."""
    from tooltrace import ToolCall, ToolRegistry, tool

    home = scratch("tooltrace-bench-")
    reg = ToolRegistry(workspace=home, home=home)
    reg.register(tool(TOOL, execution="inline", description=DESCRIPTION)(noop))
    env = reg.call(ToolCall(TOOL, {"x": "a"}))
    reg.shutdown(1.0)
    return [str(s.step) for s in env.record.steps]


def _reference() -> Contender:
    """What a careful hand-rolled instrumentation of one call costs.

    One SDK span (same name, attributes and one event per step as tooltrace's span), made
    current around the call, through a BatchSpanProcessor; one Prometheus counter and one
    histogram updated with ``labels(...)``.
    """
    import time

    import uuid_utils
    from prometheus_client import CollectorRegistry, Counter, Histogram

    provider, exporter = _provider()
    tracer = provider.get_tracer("bench-reference")
    preg = CollectorRegistry()
    calls = Counter("ref_tool_calls", "calls", ["tool", "status"], registry=preg)
    duration = Histogram("ref_tool_call_duration_seconds", "duration", ["tool", "status"],
                         registry=preg)
    steps = _step_names()
    before = steps[: steps.index("execute")] if "execute" in steps else steps
    after = steps[len(before):]
    run_id = str(uuid_utils.uuid7())

    def event(span: Any, name: str, seq: int, t: float) -> None:
        span.add_event(name, {
            "tooltrace.step": name,
            "tooltrace.step.seq": seq,
            "tooltrace.decider": "registry",
            "tooltrace.decision": "accept",
            "tooltrace.elapsed_ms": (time.perf_counter() - t) * 1000.0,
        })

    def call() -> Any:
        t0 = time.perf_counter()
        with tracer.start_as_current_span(f"execute_tool {TOOL}", attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": TOOL,
            "gen_ai.tool.call.id": str(uuid_utils.uuid7()),
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": DESCRIPTION,
            "tooltrace.source": "user",
            "tooltrace.run_id": run_id,
            "tooltrace.mode": "default",
        }) as span:
            seq = 0
            for name in before:
                event(span, name, seq, t0)
                seq += 1
            result = noop(x="a")
            for name in after:
                event(span, name, seq, t0)
                seq += 1
            span.set_attribute("tooltrace.status", "ok")
            span.set_attribute("tooltrace.execution_started", True)
        elapsed = time.perf_counter() - t0
        calls.labels(TOOL, "ok").inc()
        duration.labels(TOOL, "ok").observe(elapsed)
        return result

    return Contender(
        call,
        lambda: provider.force_flush(30_000),
        provider.shutdown,
        note=f"1 SDK span, 10 attributes, {len(steps)} events, BatchSpanProcessor; "
        "counter + histogram",
        extra={"exporter": exporter},
    )


# -- peers ----------------------------------------------------------------------------------


def _openllmetry() -> Contender:
    os.environ["TRACELOOP_TRACE_CONTENT"] = "false"
    os.environ["TRACELOOP_TELEMETRY"] = "false"
    os.environ.pop("TRACELOOP_API_KEY", None)
    try:
        from traceloop.sdk import Traceloop  # type: ignore[import-not-found]
        from traceloop.sdk.decorators import tool as tl_tool  # type: ignore[import-not-found]
    except ImportError as exc:
        raise Unavailable(f"traceloop-sdk not installed ({exc.name})") from None
    import contextlib
    import io

    from opentelemetry import trace

    exporter = DropExporter()
    with contextlib.redirect_stdout(io.StringIO()):
        Traceloop.init(app_name="bench", exporter=exporter, disable_batch=False,
                       instruments=set(), telemetry_enabled=False)
    fn = tl_tool(name=TOOL)(noop)

    def flush() -> Any:
        return trace.get_tracer_provider().force_flush(30_000)  # type: ignore[attr-defined]

    fn(x="a")
    return Contender(lambda: fn(x="a"), flush,
                     note="traceloop-sdk @tool, content off, batch -> dropping exporter",
                     extra={"exporter": exporter})


def _logfire() -> Contender:
    try:
        import logfire  # type: ignore[import-not-found]
    except ImportError as exc:
        raise Unavailable(f"logfire not installed ({exc.name})") from None
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = DropExporter()
    logfire.configure(send_to_logfire=False, console=False, metrics=False,
                      inspect_arguments=False,
                      additional_span_processors=[BatchSpanProcessor(exporter)])

    def call() -> Any:
        with logfire.span("execute_tool {tool}", tool=TOOL):
            return noop(x="a")

    call()
    return Contender(call, lambda: logfire.force_flush(30_000),
                     note="logfire.span, send_to_logfire=False, batch -> dropping exporter",
                     extra={"exporter": exporter})


def _openinference() -> Contender:
    try:
        from openinference.instrumentation import (  # type: ignore[import-not-found]
            TraceConfig,
            TracerProvider,
        )
    except ImportError as exc:
        raise Unavailable(f"openinference-instrumentation not installed ({exc.name})") from None
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = DropExporter()
    provider = TracerProvider(config=TraceConfig(hide_inputs=True, hide_outputs=True),
                              shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("bench-openinference")
    fn = tracer.tool(name=TOOL, description=DESCRIPTION)(noop)
    fn(x="a")
    return Contender(lambda: fn(x="a"), lambda: provider.force_flush(30_000),
                     provider.shutdown,
                     note="OITracer @tracer.tool, inputs/outputs hidden, batch -> dropping "
                     "exporter", extra={"exporter": exporter})


def _subscribed(kinds: tuple[str, ...]) -> Contender:
    """The telemetry-off inline registry with one subscriber of ``kinds`` (a counter)."""
    c = _registry("inline", False)
    reg = c.extra["registry"]
    seen = [0]

    def count(_ev: Any) -> None:
        seen[0] += 1

    sub = reg.subscribe(count, kinds=list(kinds))
    c.flush = lambda: sub.flush(30.0)
    c.note = f"one subscriber of {', '.join(kinds)}"
    c.extra["subscription"] = sub
    return c


#: The events section's configurations (bench/events_cost.py): name -> (execution, everything on).
EVENT_CONFIGS = {
    "telemetry off (inline)": ("inline", False),
    "telemetry off (thread)": ("thread", False),
    "everything on (inline)": ("inline", True),
    "everything on (thread)": ("thread", True),
}
#: Its variants of each configuration: the features whose call-path code is taken out
#: (``bench._stripped``; None: the code as shipped, not recompiled) and whether the tool is in
#: a group.
EVENT_VARIANTS: dict[str, tuple[tuple[str, ...] | None, bool]] = {
    "as shipped": (None, False),
    "recompiled, nothing removed": ((), False),
    "without call events and progress": (("events",), False),
    "without snapshots before writes": (("snapshots",), False),
    "without nested calls": (("nested",), False),
    "without all three": (("events", "snapshots", "nested"), False),
    "tool in a group": (None, True),
}


def event_contender(config: str, variant: str) -> str:
    """The contender name of one configuration and variant of the events section."""
    return f"events: {config}, {variant}"


def _variant(config: str, variant: str) -> Contender:
    """The no-op registry of ``config`` with ``variant``'s call path (see ``EVENT_VARIANTS``)."""
    execution, full = EVENT_CONFIGS[config]
    stripped, grouped = EVENT_VARIANTS[variant]
    if stripped is not None:
        from bench._stripped import Stale, strip

        try:
            strip(stripped)
        except Stale as exc:
            raise Unavailable(f"its call-path code cannot be taken out: {exc}") from None
    c = _registry(execution, full, group="bench" if grouped else None)
    if stripped:
        c.note += f"; call path without: {', '.join(stripped)}"
    elif stripped is not None:
        c.note += "; call path recompiled, nothing removed"
    return c


#: name -> builder; the order is the table's order.
CONTENDERS: dict[str, Callable[[], Contender]] = {
    "bare function call": _bare,
    "bare two-thread hand-off": _handoff,
    "tooltrace, telemetry off (inline)": lambda: _registry("inline", False),
    "tooltrace, telemetry off (thread)": lambda: _registry("thread", False),
    "tooltrace, everything on (inline)": lambda: _registry("inline", True),
    "tooltrace, everything on (thread)": lambda: _registry("thread", True),
    # The same with background compaction off: what the compactor process costs the calls.
    "tooltrace, everything on (inline, compaction off)": lambda: _compaction_off("inline"),
    "tooltrace, everything on (thread, compaction off)": lambda: _compaction_off("thread"),
    # The same registries with the call path run from the checkout's Python source; the rows
    # above run the compiled wheel when .venv-compiled has one (see bench/overhead.py).
    "tooltrace, telemetry off (inline, from source)": lambda: _registry("inline", False),
    "tooltrace, everything on (inline, from source)": lambda: _registry("inline", True),
    # Call events (bench/events_cost.py): an idle subscriber (no tool reports progress) and
    # one that gets every event.
    "tooltrace, telemetry off (inline), idle progress subscriber": lambda: _subscribed(
        ("progress",)),
    "tooltrace, telemetry off (inline), subscriber of every event": lambda: _subscribed(
        ("started", "step", "progress", "finished")),
    # The same with the sink workers' slices off: what the slices buy, in the same run.
    "tooltrace, everything on (inline, unsliced)": lambda: _registry("inline", True, False),
    "tooltrace, everything on (thread, unsliced)": lambda: _registry("thread", True, False),
    # The same with the workers working while calls are in flight: what waiting for them buys.
    "tooltrace, everything on (thread, not yielding)": lambda: _registry(
        "thread", True, yields=False),
    "reference: SDK span + counter + histogram": _reference,
    "OpenLLMetry @tool": _openllmetry,
    "Logfire logfire.span": _logfire,
    "OpenInference tool span": _openinference,
}
CONTENDERS.update({
    event_contender(c, v): functools.partial(_variant, c, v)
    for c in EVENT_CONFIGS for v in EVENT_VARIANTS
})

REFERENCE = "reference: SDK span + counter + histogram"
#: Contenders only the events section runs (bench/events_cost.py), not the overhead table.
EVENT_CONTENDERS = frozenset(n for n in CONTENDERS
                             if "subscriber" in n or n.startswith("events: "))
#: Contenders only the tail section runs by default.
TAIL_ONLY = frozenset(n for n in CONTENDERS
                      if n.endswith(", unsliced)") or n.endswith(", not yielding)"))
#: Contenders whose worker always runs tooltrace's call path from the checkout's source.
SOURCE_BUILD = frozenset(n for n in CONTENDERS if n.endswith(", from source)"))
PEERS = ("OpenLLMetry @tool", "Logfire logfire.span", "OpenInference tool span")


def build(name: str) -> Contender:
    """Set up one contender (raises ``Unavailable`` when it cannot run here)."""
    return CONTENDERS[name]()
