"""The things whose per-call cost the overhead section compares, one per worker process.

Each contender wraps the same no-op tool (``noop(x: str) -> str``, returns its argument) and
exposes ``call()`` (one tool call, what is timed), ``flush()`` (push out deferred work: its CPU
is counted, its time is not) and ``close()``. A contender lives alone in its own process, so
peers that configure OpenTelemetry's global provider (OpenLLMetry, Logfire) cannot affect the
others.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench._common import DropExporter, scratch

__all__ = [
    "CONTENDERS",
    "OPT_IN",
    "PEERS",
    "REFERENCE",
    "Contender",
    "Unavailable",
    "build",
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
    #: Run before each timed call, outside the timing (None: calls back to back).
    between: Callable[[], Any] | None = None


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


#: Microseconds the caller stays busy between two spaced hand-offs: about what a call's inline
#: part takes (telemetry off 15-16 us, everything on 28-30 us, 2026-12-06), during which the
#: worker's CPU has nothing to do.
SPACING_US = 25.0


def _spaced_handoff() -> Contender:
    """The bare hand-off with the caller busy for ``SPACING_US`` between two (untimed), as
    between two calls through the registry: back to back, the worker's CPU never has time to
    go idle, so the bare row measures a hand-off to a CPU that is still awake."""
    c = _handoff()
    clock = time.perf_counter

    def busy() -> None:
        end = clock() + SPACING_US / 1e6
        while clock() < end:
            pass

    return Contender(c.call, c.flush, c.close, between=busy,
                     note=f"the same, the caller busy {SPACING_US:.0f} us before each")


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


def _registry(execution: str, full: bool, group: str | None = None) -> Contender:
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
    if group is not None:
        note += f"; the tool is in group {group!r}"
    return Contender(call, lambda: reg.flush(30.0), close, note=f"{execution}; {note}",
                     extra=extra)


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
    c.note += f"; one subscriber of {', '.join(kinds)}"
    c.extra["subscription"] = sub
    return c


def _grouped() -> Contender:
    """The telemetry-off inline registry with the tool in a group (``tool(group=...)``)."""
    return _registry("inline", False, group="bench")


#: name -> builder; the order is the table's order.
CONTENDERS: dict[str, Callable[[], Contender]] = {
    "bare function call": _bare,
    "bare two-thread hand-off": _handoff,
    "bare two-thread hand-off, spaced as calls": _spaced_handoff,
    "tooltrace, telemetry off (inline)": lambda: _registry("inline", False),
    "tooltrace, telemetry off (thread)": lambda: _registry("thread", False),
    "tooltrace, everything on (inline)": lambda: _registry("inline", True),
    "tooltrace, everything on (thread)": lambda: _registry("thread", True),
    # The same with background compaction off: what the compactor process costs the calls.
    "tooltrace, everything on (inline, compaction off)": lambda: _compaction_off("inline"),
    "tooltrace, everything on (thread, compaction off)": lambda: _compaction_off("thread"),
    # Opt-in rows (``OPT_IN``): what a subscriber and a tool group cost a call, each against
    # "telemetry off (inline)" in the same rounds.
    "tooltrace, telemetry off (inline), idle progress subscriber": lambda: _subscribed(
        ("progress",)),
    "tooltrace, telemetry off (inline), subscriber of every event": lambda: _subscribed(
        ("started", "step", "progress", "finished")),
    "tooltrace, telemetry off (inline), tool in a group": lambda: _grouped(),
    "reference: SDK span + counter + histogram": _reference,
    "OpenLLMetry @tool": _openllmetry,
    "Logfire logfire.span": _logfire,
    "OpenInference tool span": _openinference,
}
REFERENCE = "reference: SDK span + counter + histogram"
#: Contenders the overhead section runs only when ``--contenders`` names them.
OPT_IN = frozenset(n for n in CONTENDERS if n.startswith("tooltrace, telemetry off (inline), "))
PEERS = ("OpenLLMetry @tool", "Logfire logfire.span", "OpenInference tool span")


def build(name: str) -> Contender:
    """Set up one contender (raises ``Unavailable`` when it cannot run here)."""
    return CONTENDERS[name]()
