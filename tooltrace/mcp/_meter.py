"""The proxy's OpenTelemetry metrics over OTLP, configured by the standard environment.

``tooltrace mcp proxy`` records ``mcp.server.operation.duration`` and
``mcp.client.operation.duration`` on an OpenTelemetry meter exporting over OTLP when:

- ``OTEL_METRICS_EXPORTER`` names ``otlp`` (``none`` or another exporter: no OTLP metrics), or
  is unset while an OTLP endpoint is (``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_ENDPOINT``, as for spans), and
- ``OTEL_SDK_DISABLED`` is not ``true``.

The protocol is ``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`` > ``OTEL_EXPORTER_OTLP_PROTOCOL`` >
``http/protobuf``. The exporter reads its endpoint (``.../v1/metrics`` for http/protobuf),
headers, timeout and compression from the environment itself, the reader its interval
(``OTEL_METRIC_EXPORT_INTERVAL``, milliseconds, default 60000), the resource
``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``. What is still unexported when the proxy
stops is flushed. An export that fails is logged by the SDK, never raised into a call.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from ..telemetry.tracing import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_SDK_DISABLED,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider

__all__ = [
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_METRICS_EXPORTER",
    "otlp_meter_provider",
]

#: Which exporters metrics go to (comma-separated); tooltrace builds ``otlp`` only.
OTEL_METRICS_EXPORTER: Final = "OTEL_METRICS_EXPORTER"
#: OTLP endpoint for metrics only, used as is; wins over ``OTEL_EXPORTER_OTLP_ENDPOINT``.
OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
#: OTLP transport for metrics only; wins over ``OTEL_EXPORTER_OTLP_PROTOCOL``.
OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def otlp_meter_provider() -> MeterProvider | None:
    """A meter provider exporting over OTLP when the environment asks for one, else None."""
    if _env(OTEL_SDK_DISABLED).lower() == "true":
        return None
    exporters = {e.strip().lower() for e in _env(OTEL_METRICS_EXPORTER).split(",") if e.strip()}
    if exporters:
        if "otlp" not in exporters:
            return None
    elif not (_env(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) or _env(OTEL_EXPORTER_OTLP_ENDPOINT)):
        return None
    protocol = (_env(OTEL_EXPORTER_OTLP_METRICS_PROTOCOL) or _env(OTEL_EXPORTER_OTLP_PROTOCOL)
                or "http/protobuf")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    exporter: MetricExporter
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcExporter,
        )

        endpoint = _env(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) or _env(OTEL_EXPORTER_OTLP_ENDPOINT)
        exporter = GrpcExporter(insecure=endpoint.startswith("http://") or None)
    elif protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpExporter,
        )

        exporter = HttpExporter()
    else:
        from ..exceptions import ConfigurationError

        raise ConfigurationError(
            f"unsupported OTLP metrics protocol {protocol!r}; use http/protobuf or grpc")
    reader = PeriodicExportingMetricReader(exporter)
    return MeterProvider(metric_readers=[reader], resource=Resource.create(),
                         shutdown_on_exit=False)
