"""Where spans go when tooltrace builds its own exporter: the OTLP settings and the exporter.

Explicit argument > environment variable > the OpenTelemetry SDK's default, for the endpoint
and the protocol. The exporters read their other settings (timeout, headers, compression,
certificate) from the environment themselves.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "PROTOCOLS",
    "otlp_exporter",
    "resolve_otlp",
]

#: Turns the whole OpenTelemetry SDK off (``true``); tracing then does nothing.
OTEL_SDK_DISABLED: Final = "OTEL_SDK_DISABLED"
#: Base OTLP endpoint for all signals (``/v1/traces`` is appended for http/protobuf).
OTEL_EXPORTER_OTLP_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: OTLP endpoint for traces only, used as is; wins over ``OTEL_EXPORTER_OTLP_ENDPOINT``.
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
#: OTLP transport for all signals: ``http/protobuf`` (default) or ``grpc``.
OTEL_EXPORTER_OTLP_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
#: OTLP transport for traces only; wins over ``OTEL_EXPORTER_OTLP_PROTOCOL``.
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
#: ``service.name`` of the exported resource (read by the SDK's ``Resource.create``).
OTEL_SERVICE_NAME: Final = "OTEL_SERVICE_NAME"
#: Extra resource attributes, ``k1=v1,k2=v2`` (read by the SDK's ``Resource.create``).
OTEL_RESOURCE_ATTRIBUTES: Final = "OTEL_RESOURCE_ATTRIBUTES"

#: The OTLP transports tooltrace can build an exporter for.
PROTOCOLS: Final = ("http/protobuf", "grpc")


def _env(*names: str) -> str | None:
    for n in names:
        v = os.environ.get(n)
        if v and v.strip():
            return v.strip()
    return None


def resolve_otlp(endpoint: str | None, protocol: str | None) -> tuple[str, str]:
    """The (traces endpoint, protocol) an exporter would use: argument > env > SDK default."""
    proto = protocol or _env(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL)
    proto = proto or "http/protobuf"
    if proto not in PROTOCOLS:
        raise ValueError(f"unsupported OTLP protocol {proto!r}; use one of {PROTOCOLS}")
    if endpoint:
        return endpoint, proto
    traces = _env(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
    if traces:
        return traces, proto
    base = _env(OTEL_EXPORTER_OTLP_ENDPOINT)
    if proto == "grpc":
        return base or "http://localhost:4317", proto
    base = base or "http://localhost:4318"
    return base.rstrip("/") + "/v1/traces", proto


def otlp_exporter(
    endpoint: str | None, protocol: str | None, timeout_s: float | None
) -> SpanExporter:
    """An OTLP span exporter for the resolved endpoint and protocol (imported on demand)."""
    url, proto = resolve_otlp(endpoint, protocol)
    if proto == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        insecure = url.startswith("http://") or None
        return GrpcExporter(endpoint=url, insecure=insecure, timeout=timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter(endpoint=url, timeout=timeout_s)
