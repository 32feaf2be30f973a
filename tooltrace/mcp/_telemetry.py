"""The proxy's telemetry per the MCP semantic conventions.

Each client request gets a SERVER span ``{mcp.method.name} {target}`` (the client's
``params._meta.traceparent`` is its parent); a ``tools/call``'s ``execute_tool`` span, made by the
registry, is its child; each request the proxy sends upstream gets a CLIENT span, whose context
is what the upstream receives in ``params._meta``. Spans go out through the registry's tracing
sink. Durations are recorded in the histograms ``mcp.server.operation.duration`` and
``mcp.client.operation.duration`` (on an OpenTelemetry meter when one is given) and their
Prometheus counterparts ``tooltrace_mcp_server_operation_duration_seconds{method,error_type}``
and ``tooltrace_mcp_client_operation_duration_seconds{server,method,error_type}``. Label values
come from closed sets: MCP method names (else ``_other``), configured server labels, and the
error types below (else ``_other``); an ok outcome has ``error_type=""``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..model import Stage
from ..registry import ToolRegistry

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

__all__ = ["ERROR_TYPES", "METHODS", "ProxyTelemetry", "error_label", "method_label"]

#: MCP request methods (the ``method`` label's values, with ``_other``).
METHODS: frozenset[str] = frozenset({
    "initialize", "ping", "tools/list", "tools/call", "resources/list",
    "resources/templates/list", "resources/read", "resources/subscribe",
    "resources/unsubscribe", "prompts/list", "prompts/get", "completion/complete",
    "logging/setLevel", "sampling/createMessage", "elicitation/create", "roots/list",
})

#: ``error.type`` values a label may take (with ``_other``).
ERROR_TYPES: frozenset[str] = frozenset({
    "tool_error", "redacted_invalid", "upstream_error", "upstream_unavailable", "upstream_exited",
    "upstream_protocol_error", "upstream_timeout", "timeout", "cancelled", "unknown",
    "-32700", "-32600", "-32601", "-32602", "-32603", "-32000", "-32001", "-32002",
    *(s.value for s in Stage),
})

_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                     10.0, 30.0, 60.0, 120.0, 300.0)


def method_label(method: str) -> str:
    """``method`` when it is an MCP method, else ``_other``."""
    return method if method in METHODS else "_other"


def error_label(error_type: str | None) -> str:
    """``""`` for ok, the error type when it is in ``ERROR_TYPES``, else ``_other``."""
    if not error_type:
        return ""
    return error_type if error_type in ERROR_TYPES else "_other"


class ProxyTelemetry:
    """SERVER and CLIENT spans and the operation-duration histograms of one proxy.

    Spans are made when the registry has a tracing sink (they are exported with its spans);
    Prometheus histograms when it has a metrics sink; OpenTelemetry histograms when
    ``meter_provider`` is given.
    """

    def __init__(self, registry: ToolRegistry, servers: Iterable[str], *,
                 meter_provider: Any = None) -> None:
        self.servers = frozenset(servers)
        self.tracer: Tracer | None = _tracer(registry)
        self._prom_server, self._prom_client = _prometheus(registry)
        self._otel_server: Any = None
        self._otel_client: Any = None
        if meter_provider is not None:
            meter = meter_provider.get_meter("tooltrace.mcp")
            self._otel_server = meter.create_histogram(
                "mcp.server.operation.duration", unit="s",
                description="Duration of MCP requests the proxy served.",
                explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS))
            self._otel_client = meter.create_histogram(
                "mcp.client.operation.duration", unit="s",
                description="Duration of MCP requests the proxy sent upstream.",
                explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS))

    def server_span(self, method: str, target: str | None, attributes: Mapping[str, Any],
                    meta: Mapping[str, Any] | None
                    ) -> contextlib.AbstractContextManager[Span | None]:
        """A current SERVER span for one client request (None when tracing is off)."""
        if self.tracer is None:
            return contextlib.nullcontext()
        return self._server_span(self.tracer, method, target, attributes, meta)

    @staticmethod
    @contextlib.contextmanager
    def _server_span(tracer: Tracer, method: str, target: str | None,
                     attributes: Mapping[str, Any], meta: Mapping[str, Any] | None
                     ) -> Iterator[Span]:
        from opentelemetry.trace import SpanKind

        name = f"{method} {target}" if target else method
        with tracer.start_as_current_span(
                name, kind=SpanKind.SERVER, attributes=dict(attributes),
                context=_parent(meta), record_exception=False,
                set_status_on_exception=False) as span:
            yield span

    def client_span(self, server: str, method: str, target: str | None,
                    meta: dict[str, Any]) -> contextlib.AbstractContextManager[Span | None]:
        """A current CLIENT span for one upstream request; its context goes into ``meta``
        (None when tracing is off)."""
        if self.tracer is None:
            return contextlib.nullcontext()
        return self._client_span(self.tracer, server, method, target, meta)

    @staticmethod
    @contextlib.contextmanager
    def _client_span(tracer: Tracer, server: str, method: str, target: str | None,
                     meta: dict[str, Any]) -> Iterator[Span]:
        from opentelemetry.propagate import inject
        from opentelemetry.trace import SpanKind

        name = f"{method} {target}" if target else method
        attrs = {"mcp.method.name": method, "tooltrace.mcp.server": server,
                 "network.transport": "pipe"}
        if target and method == "tools/call":
            attrs["gen_ai.tool.name"] = target
        with tracer.start_as_current_span(
                name, kind=SpanKind.CLIENT, attributes=attrs, record_exception=False,
                set_status_on_exception=False) as span:
            inject(meta)
            yield span

    def record_server(self, method: str, error_type: str | None, seconds: float) -> None:
        """One served request's duration."""
        m, e = method_label(method), error_label(error_type)
        if self._prom_server is not None:
            self._prom_server.labels(m, e).observe(seconds)
        if self._otel_server is not None:
            attrs = {"mcp.method.name": m, **({"error.type": e} if e else {})}
            self._otel_server.record(seconds, attrs)

    def record_client(self, server: str, method: str, error_type: str | None,
                      seconds: float) -> None:
        """One upstream request's duration."""
        m, e = method_label(method), error_label(error_type)
        s = server if server in self.servers else "_other"
        if self._prom_client is not None:
            self._prom_client.labels(s, m, e).observe(seconds)
        if self._otel_client is not None:
            attrs = {"mcp.method.name": m, "tooltrace.mcp.server": s,
                     **({"error.type": e} if e else {})}
            self._otel_client.record(seconds, attrs)


def mark_error(span: Span | None, error_type: str, message: str | None = None) -> None:
    """Set ``error.type`` and an ERROR status on a span (no-op without one)."""
    if span is None:
        return
    from opentelemetry.trace import StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR, message)


def clock() -> float:
    """Seconds on the monotonic clock (durations of operations)."""
    return time.perf_counter()


def _parent(meta: Mapping[str, Any] | None) -> Any:
    if not meta or not isinstance(meta.get("traceparent"), str):
        return None
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    try:
        ctx = TraceContextTextMapPropagator().extract(
            {k: v for k, v in meta.items() if k in ("traceparent", "tracestate")
             and isinstance(v, str)})
    except (ValueError, TypeError):
        return None
    return ctx if get_current_span(ctx).get_span_context().is_valid else None


def _tracer(registry: ToolRegistry) -> Tracer | None:
    from ..telemetry.tracing import TracingSink

    sink = next((s for s in registry.sinks if isinstance(s, TracingSink)), None)
    if sink is None or not sink.enabled:
        return None
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    export = sink.export_span

    class _ToSink(SpanProcessor):
        def on_end(self, span: Any) -> None:
            export(span)

    base = sink.tracer_provider
    provider = TracerProvider(resource=getattr(base, "resource", None),
                              sampler=getattr(base, "sampler", None), shutdown_on_exit=False)
    provider.add_span_processor(_ToSink())
    from .. import __version__

    return provider.get_tracer("tooltrace.mcp", __version__)


def _prometheus(registry: ToolRegistry) -> tuple[Any, Any]:
    """The server and client histograms in the registry's metrics sink, or Nones."""
    from ..telemetry.metrics import MetricsSink

    sink = next((s for s in registry.sinks if isinstance(s, MetricsSink)), None)
    if sink is None:
        return None, None
    from prometheus_client import Histogram

    try:
        return _histograms(Histogram, sink.registry)
    except ValueError:  # another proxy registered them in this registry: it records there
        return None, None


def _histograms(histogram: Any, registry: Any) -> tuple[Any, Any]:
    server = histogram(
        "tooltrace_mcp_server_operation_duration_seconds",
        "Duration of MCP requests the proxy served (mcp.server.operation.duration).",
        ["method", "error_type"], registry=registry, buckets=_DURATION_BUCKETS)
    client = histogram(
        "tooltrace_mcp_client_operation_duration_seconds",
        "Duration of MCP requests the proxy sent upstream (mcp.client.operation.duration).",
        ["server", "method", "error_type"], registry=registry, buckets=_DURATION_BUCKETS)
    return server, client
