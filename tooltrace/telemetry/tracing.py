"""OpenTelemetry spans for tool calls, built off the call path.

``TracingSink`` plays two roles. As a ``SpanOpener`` it mints a call's trace and span ids before
the tool runs (child of whatever span is current, honouring the provider's sampler) and hands
back a handle whose ``attach()`` makes a non-recording span with those ids current, so work the
tool does (nested registry calls, instrumented HTTP clients) joins the trace. As a ``Sink`` it
queues the finished ``CallRecord``; a ``BatchWorker`` thread turns records into SDK
``ReadableSpan`` objects (``execute_tool {tool}``, one event per pipeline step) and hands them to
the span processors of a user-supplied SDK ``TracerProvider`` (through the ``span_processor`` of
the SDK tracer it hands out: the provider's own fan-out to its processors) or, when no provider
is given, straight to an OTLP exporter configured from the standard ``OTEL_*`` environment
variables. Nothing here raises into a call or waits on I/O during one.

Configuration, explicit argument > environment variable > default:

- ``OTEL_SDK_DISABLED=true``: tracing off (``open_span`` returns None, records are ignored).
- ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as is) or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (base
  URL; ``/v1/traces`` is appended for http/protobuf). Default ``http://localhost:4318`` (http)
  or ``http://localhost:4317`` (grpc), as in the OpenTelemetry SDK.
- ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf``
  (default) or ``grpc``.
- ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``: the resource of exported spans.
- ``OTEL_TRACES_SAMPLER`` (+ ``_ARG``): the sampler, read by the SDK provider.
- ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``: content capture (arguments and
  result, already redacted and bounded) on spans. Off by default.
- ``TRACEPARENT``: a W3C trace context inherited from a parent process; calls made while no
  span is current become its children.

The work lives in private modules, one concern each: ``_propagation`` (the call's span context:
parent, ids, sampling, ``traceparent``), ``_spanbuild`` (the finished span from a record),
``_otlp`` (OTLP settings and exporter) and ``_tracingsink`` (the sink).
"""

from __future__ import annotations

from ._otlp import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_RESOURCE_ATTRIBUTES,
    OTEL_SDK_DISABLED,
    OTEL_SERVICE_NAME,
    resolve_otlp,
)
from ._propagation import TRACEPARENT_ENV, SpanHandle, context_from_traceparent, traceparent
from ._spanbuild import CAPTURE_CONTENT_ENV
from ._tracingsink import TracingSink

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "TRACEPARENT_ENV",
    "SpanHandle",
    "TracingSink",
    "context_from_traceparent",
    "resolve_otlp",
    "traceparent",
]
