"""One span per call when a framework opens its own OpenTelemetry tool span.

Pydantic AI's instrumentation opens an ``execute_tool {tool}`` span around every tool call and
keeps it current while the tool runs. Rather than add tooltrace's own span as its child (two
spans for one call), the call *takes over* the framework's span: ``SharedSpans`` hands the
registry that span's ids (so the audit row, the logs and nested work all point at it) and
exports nothing for the call, and ``annotate`` writes tooltrace's attributes and one event per
pipeline step onto it before the framework ends it. Calls made outside such a span get their
own span from the wrapped ``TracingSink`` as usual.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Span, StatusCode

if TYPE_CHECKING:
    from ..model import CallRecord
    from ..registry import ToolRegistry
    from ..sinks import OpenSpan
    from ..telemetry.tracing import TracingSink

__all__ = ["SharedSpans", "annotate", "framework_span", "tool_span"]

_log = logging.getLogger("tooltrace.integrations")

# A one-element list holding the framework span the next call should take; the registry's
# call empties it, so calls nested inside the tool get spans of their own.
_OWNER: ContextVar[list[Span] | None] = ContextVar("tooltrace_framework_span", default=None)
# Attributes the framework already set for the call; its values stay (the tool call id is the
# model's, tooltrace's own goes under ``tooltrace.call_id``).
_FRAMEWORK_KEYS: Final = frozenset(
    {"gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id"}
)
# Where frameworks put the model's raw arguments when they capture content.
_ARGUMENT_KEYS: Final = ("gen_ai.tool.call.arguments", "tool_arguments")
_MAX_OWNED: Final = 65536
_ARGUMENT_CHARS: Final = 4096
_warned = False


def tool_span(tool_call_id: str | None) -> Span | None:
    """The current span when it is the framework's recording tool span for this call."""
    span = trace.get_current_span()
    if not isinstance(span, ReadableSpan) or not span.is_recording():
        return None
    attrs = span.attributes or {}
    if attrs.get("gen_ai.operation.name") != "execute_tool":
        return None
    if tool_call_id is not None and attrs.get("gen_ai.tool.call.id") != tool_call_id:
        return None
    return span


@contextmanager
def framework_span(span: Span | None) -> Iterator[None]:
    """Within the block, the next registry call takes ``span`` as its own (``SharedSpans``)."""
    if span is None:
        yield
        return
    token = _OWNER.set([span])
    try:
        yield
    finally:
        _OWNER.reset(token)


class _TakenSpan:
    """The framework's span, handed to the registry as the call's ``OpenSpan``."""

    __slots__ = ("_span", "parent_span_id", "sampled", "span_id", "trace_id")

    def __init__(self, span: Span) -> None:
        sc = span.get_span_context()
        parent = span.parent if isinstance(span, ReadableSpan) else None
        self._span = span
        self.trace_id = f"{sc.trace_id:032x}"
        self.span_id = f"{sc.span_id:016x}"
        self.parent_span_id = None if parent is None else f"{parent.span_id:016x}"
        self.sampled = sc.trace_flags.sampled

    def attach(self) -> object:
        return otel_context.attach(trace.set_span_in_context(self._span))

    def detach(self, token: Any) -> None:
        otel_context.detach(token)


class SharedSpans:
    """Tooltrace's tracing for a registry whose calls may run inside a framework's tool span.

    Use it in place of the ``TracingSink`` it wraps: ``ToolRegistry(sinks=[SharedSpans(t)])``.
    A call an adapter runs inside the framework's own tool span takes that span (its record
    carries the span's ids; the adapter writes tooltrace's attributes and step events onto it)
    and exports no span of its own; every other call is traced by ``tracing`` as usual.
    """

    name = "tracing"

    def __init__(self, tracing: TracingSink) -> None:
        self.tracing = tracing
        self._owned: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def open_span(self, tool: str) -> OpenSpan | None:
        """The framework's span when an adapter offers one for this call, else a new one."""
        box = _OWNER.get()
        if box:
            taken = _TakenSpan(box.pop())
            with self._lock:
                self._owned[taken.span_id] = None
                if len(self._owned) > _MAX_OWNED:
                    self._owned.popitem(last=False)
            return taken
        return self.tracing.open_span(tool)

    def emit(self, record: CallRecord) -> None:
        """Pass the record on, unless its span belongs to the framework (never raises)."""
        sid = record.span_id
        if sid is not None:
            with self._lock:
                if sid in self._owned:
                    del self._owned[sid]
                    return
        self.tracing.emit(record)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Flush the wrapped sink."""
        return self.tracing.flush(timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Shut the wrapped sink down."""
        self.tracing.shutdown(timeout_s)

    @property
    def dropped(self) -> int:
        """Records the wrapped sink dropped."""
        return self.tracing.dropped

    @property
    def depth(self) -> int:
        """Records waiting in the wrapped sink."""
        return self.tracing.depth

    @property
    def export_failures(self) -> int:
        """Spans the wrapped sink failed to export."""
        return self.tracing.export_failures


_builder: TracingSink | None = None


def _span_builder(registry: ToolRegistry) -> TracingSink:
    for sink in registry.sinks:
        if isinstance(sink, SharedSpans):
            return sink.tracing
    global _builder
    if _builder is None:
        # Builds span data only (content capture from the environment); it never exports.
        from opentelemetry.sdk.trace import TracerProvider

        from ..telemetry.tracing import TracingSink

        _builder = TracingSink(TracerProvider(shutdown_on_exit=False))
    return _builder


def annotate(span: Span, record: CallRecord, registry: ToolRegistry) -> None:
    """Write tooltrace's attributes and one event per step onto the framework's span.

    Done only when the call took the span (``SharedSpans``) or the registry traces nothing;
    when the registry made a span of its own, writing the same data twice would not help, so
    that case logs once how to get one span. Never raises.
    """
    global _warned
    try:
        sid = f"{span.get_span_context().span_id:016x}"
        if record.span_id is not None and record.span_id != sid:
            if not _warned:
                _warned = True
                _log.warning(
                    "tool calls get two spans (the framework's and tooltrace's): wrap the "
                    "registry's TracingSink in tooltrace.integrations SharedSpans for one"
                )
            return
        built = _span_builder(registry).build_span(record)
        for key, value in (built.attributes or {}).items():
            if key not in _FRAMEWORK_KEYS:
                span.set_attribute(key, value)
        span.set_attribute("tooltrace.call_id", record.call_id)
        have = span.attributes if isinstance(span, ReadableSpan) else None
        if have and record.args_redacted is not None:
            # The framework captured the model's raw arguments: keep only the redacted ones.
            text = orjson.dumps(record.args_redacted, default=str).decode()[:_ARGUMENT_CHARS]
            for key in _ARGUMENT_KEYS:
                if key in have:
                    span.set_attribute(key, text)
        for event in built.events:
            span.add_event(event.name, event.attributes, event.timestamp)
        if built.status.status_code is StatusCode.ERROR:
            span.set_status(built.status)
    except Exception:
        _log.debug("could not annotate the framework's tool span", exc_info=True)
