"""Telemetry sinks: tracing, metrics, logging and audit, fed from finished call records.

The audit sink (``AuditSink``) writes the trail that ``tooltrace.audit`` keeps and reads.

Every name is imported on first use (``from tooltrace.telemetry import
TracingSink``), so ``import tooltrace`` does not pay for OpenTelemetry, prometheus-client or
structlog until a sink is wanted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ._auditsink import AuditSink
    from ._sink import DurableSink, OpenSpan, Sink, SpanOpener
    from ._worker import BatchWorker
    from .logging import LoggingSink
    from .metrics import MetricsServer, MetricsSink, multiprocess_registry, serve_metrics
    from .tracing import TracingSink, context_from_traceparent, traceparent

__all__ = [
    "AuditSink",
    "BatchWorker",
    "DurableSink",
    "LoggingSink",
    "MetricsServer",
    "MetricsSink",
    "OpenSpan",
    "Sink",
    "SpanOpener",
    "TracingSink",
    "context_from_traceparent",
    "default_sinks",
    "multiprocess_registry",
    "serve_metrics",
    "traceparent",
]

_LAZY = {
    # The protocols too: whoever imports this package for one sink needs none of them.
    "AuditSink": "._auditsink",
    "BatchWorker": "._worker",
    "DurableSink": "._sink",
    "OpenSpan": "._sink",
    "Sink": "._sink",
    "SpanOpener": "._sink",
    "LoggingSink": ".logging",
    "MetricsServer": ".metrics",
    "MetricsSink": ".metrics",
    "multiprocess_registry": ".metrics",
    "serve_metrics": ".metrics",
    "TracingSink": ".tracing",
    "context_from_traceparent": ".tracing",
    "traceparent": ".tracing",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


def default_sinks(
    *,
    tracing: bool | None = None,
    metrics: bool = True,
    logging: bool = True,
    metrics_registry: CollectorRegistry | None = None,
    metrics_tool_buckets: Mapping[str, Iterable[float]] | None = None,
    log_level: str | None = None,
    log_format: str | None = None,
) -> list[Sink]:
    """The usual sink set: metrics, logging and (when OTLP is configured) tracing.

    ``tracing=None`` adds a ``TracingSink`` only when an ``OTEL_EXPORTER_OTLP_*ENDPOINT``
    variable is set and ``OTEL_SDK_DISABLED`` is not ``true``. The tracing sink is also the
    span opener: pass it as ``ToolRegistry(tracer=...)`` (find it with
    ``isinstance(s, SpanOpener)``). The audit sink is added by the registry's own settings.
    """
    import os

    # The names from the light module: with tracing off, OpenTelemetry is never imported.
    from ._otlp import (
        OTEL_EXPORTER_OTLP_ENDPOINT,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
        OTEL_SDK_DISABLED,
    )

    if tracing is None:
        configured = bool(
            os.environ.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
            or os.environ.get(OTEL_EXPORTER_OTLP_ENDPOINT)
        )
        disabled = os.environ.get(OTEL_SDK_DISABLED, "").strip().lower() == "true"
        tracing = configured and not disabled
    sinks: list[Sink] = []
    if tracing:
        from .tracing import TracingSink

        sinks.append(TracingSink())
    if metrics:
        from .metrics import MetricsSink

        sinks.append(MetricsSink(metrics_registry, tool_buckets=metrics_tool_buckets))
    if logging:
        from .logging import LoggingSink

        sinks.append(LoggingSink(level=log_level, fmt=log_format))
    return sinks
