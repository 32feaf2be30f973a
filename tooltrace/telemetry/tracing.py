"""OpenTelemetry spans for tool calls, built off the call path.

``TracingSink`` plays two roles. As a ``SpanOpener`` it mints a call's trace and span ids before
the tool runs (child of whatever span is current, honouring the provider's sampler) and hands
back a handle whose ``attach()`` makes a non-recording span with those ids current, so work the
tool does (nested registry calls, instrumented HTTP clients) joins the trace. As a ``Sink`` it
queues the finished ``CallRecord``; a ``BatchWorker`` thread turns records into SDK
``ReadableSpan`` objects (``execute_tool {tool}``, one event per pipeline step) and hands them to
the span processors of a user-supplied SDK ``TracerProvider`` (through
``provider._active_span_processor.on_end``, the SDK's own fan-out to its processors) or, when no
provider is given, straight to an OTLP exporter configured from the standard ``OTEL_*``
environment variables. Nothing here raises into a call or waits on I/O during one.

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
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status as OtelStatus
from opentelemetry.trace.status import StatusCode

from ..envelope import CallRecord, Stage, Status
from ._worker import BatchWorker

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.sampling import Sampler

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
    "traceparent",
]

_log = logging.getLogger("tooltrace.telemetry.tracing")

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
#: GenAI content capture switch: ``true`` puts redacted arguments and results on spans.
CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: W3C trace context handed to a child process (see ``traceparent()``).
TRACEPARENT_ENV: Final = "TRACEPARENT"

_PROTOCOLS: Final = ("http/protobuf", "grpc")
_TRUE: Final = frozenset({"true", "1", "yes", "on", "span_only", "span_and_event"})
_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED: Final = TraceFlags(TraceFlags.DEFAULT)
_EMPTY_STATE: Final = TraceState()
_ERROR_STATUSES: Final = frozenset({Status.FAILED, Status.UNKNOWN})
_MAX_EXTRA_ATTRIBUTES: Final = 64
# Semantic-convention bucket advice for GenAI durations (seconds).
_DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)


def _flag(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _TRUE


def traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, or None when no valid span is current.

    Put it in a child process's environment as ``TRACEPARENT`` so its calls join this trace.
    """
    sc = trace.get_current_span().get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags) & 0xFF:02x}"


def context_from_traceparent(value: str | None) -> SpanContext | None:
    """Parse a W3C ``traceparent`` string into a remote ``SpanContext``; None if malformed."""
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return None
    version, tid, sid, flags = parts[:4]
    if len(tid) != 32 or len(sid) != 16 or len(flags) != 2 or (version == "00" and len(parts) != 4):
        return None
    try:
        sc = SpanContext(int(tid, 16), int(sid, 16), True, TraceFlags(int(flags, 16) & 0xFF))
    except ValueError:
        return None
    return sc if sc.is_valid else None


class SpanHandle:
    """The span opened for one call (a ``tooltrace.telemetry.OpenSpan``).

    Ids are lowercase hex as the W3C format writes them; ``attach`` makes a non-recording span
    with these ids current so nested work becomes its child.
    """

    __slots__ = ("_sid", "_state", "_tid", "parent_span_id", "sampled", "span_id", "trace_id")

    def __init__(
        self, tid: int, sid: int, parent_sid: int | None, sampled: bool, state: TraceState
    ) -> None:
        self._tid = tid
        self._sid = sid
        self._state = state
        self.trace_id = f"{tid:032x}"
        self.span_id = f"{sid:016x}"
        self.parent_span_id = None if parent_sid is None else f"{parent_sid:016x}"
        self.sampled = sampled

    @property
    def span_context(self) -> SpanContext:
        """The OpenTelemetry ``SpanContext`` of this call's span."""
        flags = _SAMPLED if self.sampled else _NOT_SAMPLED
        return SpanContext(self._tid, self._sid, False, flags, self._state)

    def attach(self) -> object:
        """Make this span's context current; return the token for ``detach``."""
        return otel_context.attach(trace.set_span_in_context(NonRecordingSpan(self.span_context)))

    def detach(self, token: Any) -> None:
        """Restore the context that was current before ``attach``."""
        otel_context.detach(token)


def _sampling_decider(sampler: Sampler) -> Callable[[SpanContext | None, int, str], bool]:
    """A cheap ``(parent, trace_id, tool) -> sampled`` for the common samplers.

    The stock samplers are recognised by identity and decided without building a
    ``SamplingResult``; any other sampler is asked properly (with the current context).
    """
    from opentelemetry.sdk.trace import sampling

    if sampler is sampling.ALWAYS_ON:
        return lambda parent, tid, tool: True
    if sampler is sampling.ALWAYS_OFF:
        return lambda parent, tid, tool: False
    if sampler is sampling.DEFAULT_ON or sampler is sampling.DEFAULT_OFF:
        root = sampler is sampling.DEFAULT_ON
        return lambda parent, tid, tool: root if parent is None else parent.trace_flags.sampled

    sampled_decisions = (sampling.Decision.RECORD_AND_SAMPLE,)

    def ask(parent: SpanContext | None, tid: int, tool: str) -> bool:
        ctx = None if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
        res = sampler.should_sample(ctx, tid, f"execute_tool {tool}", SpanKind.INTERNAL)
        return res.decision in sampled_decisions

    return ask


def _bounded(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: max(0, limit - 1)] + "\u2026"


def _json(value: Any, limit: int) -> str:
    try:
        text = orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS).decode()
    except Exception:
        text = f"<{type(value).__name__}>"
    return _bounded(text, limit)


class TracingSink:
    """Mint span ids before a call, build and export its span after (Sink and SpanOpener).

    Args:
        tracer_provider: an SDK ``TracerProvider``; finished spans go to its span processors via
            ``provider._active_span_processor.on_end`` and its sampler and resource are used.
            When None, a provider and an OTLP exporter are built from ``OTEL_*`` variables.
        endpoint: OTLP traces endpoint, used as is (http: the full ``.../v1/traces`` URL;
            grpc: ``http://host:port``); overrides the environment. Ignored with a provider.
        protocol: ``"http/protobuf"`` or ``"grpc"``; overrides the environment.
        exporter: a ready ``SpanExporter`` to use instead of building an OTLP one.
        export_timeout_s: per-export deadline given to a built OTLP exporter (retries included).
        capture_content: put redacted, bounded arguments and results on spans; None reads
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.
        max_attribute_chars: longest string attribute value; longer ones are cut with an ellipsis.
        meter_provider: an OpenTelemetry ``MeterProvider``; when given, each call's duration is
            recorded in the ``gen_ai.execute_tool.duration`` histogram (seconds).
        inherit_traceparent: use ``TRACEPARENT`` from the environment as the parent of calls
            made while no span is current.
        max_queue, max_batch, interval_s: the background worker's bounds.
        enabled: False turns tracing off; None reads ``OTEL_SDK_DISABLED``.
    """

    name = "tracing"

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        endpoint: str | None = None,
        protocol: str | None = None,
        exporter: SpanExporter | None = None,
        export_timeout_s: float | None = None,
        capture_content: bool | None = None,
        max_attribute_chars: int = 4096,
        meter_provider: MeterProvider | None = None,
        inherit_traceparent: bool = True,
        max_queue: int = 65536,
        max_batch: int = 512,
        interval_s: float = 0.2,
        enabled: bool | None = None,
    ) -> None:
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

        if max_attribute_chars < 16:
            raise ValueError("max_attribute_chars must be at least 16")
        if protocol is not None and protocol not in _PROTOCOLS:
            raise ValueError(f"protocol must be one of {_PROTOCOLS}, not {protocol!r}")
        if tracer_provider is not None and not isinstance(tracer_provider, SdkTracerProvider):
            raise TypeError("tracer_provider must be an opentelemetry.sdk.trace.TracerProvider")
        if capture_content is None:
            capture_content = _flag(os.environ.get(CAPTURE_CONTENT_ENV))
        #: Whether redacted arguments and results go on spans.
        self.capture_content = capture_content
        self.max_attribute_chars = max_attribute_chars
        self._owns_exporter = False
        self._closed = False
        self._exporter: SpanExporter | None = None
        built = tracer_provider is None
        if tracer_provider is None:
            tracer_provider = SdkTracerProvider(shutdown_on_exit=False)
        disabled = bool(getattr(tracer_provider, "_disabled", False))
        #: False when tracing is off (``OTEL_SDK_DISABLED`` or ``enabled=False``).
        self.enabled = (not disabled) if enabled is None else enabled
        if exporter is None and built and self.enabled:
            exporter = _otlp_exporter(endpoint, protocol, export_timeout_s)
            self._owns_exporter = True
        self._exporter = exporter
        #: The SDK provider whose resource, sampler (and, without an exporter, processors) apply.
        self.tracer_provider: TracerProvider = tracer_provider
        self._processor = tracer_provider._active_span_processor
        self._resource = tracer_provider.resource
        self._decide = _sampling_decider(tracer_provider.sampler)
        self._env_parent = (
            context_from_traceparent(os.environ.get(TRACEPARENT_ENV))
            if inherit_traceparent
            else None
        )
        self._scope: Any = None
        self._histogram: Histogram | None = None
        if meter_provider is not None:
            self._histogram = meter_provider.get_meter("tooltrace").create_histogram(
                "gen_ai.execute_tool.duration",
                unit="s",
                description="Duration of tool executions.",
                explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
            )
        #: Spans handed over successfully (to the exporter or the provider's processors).
        self.exported = 0
        #: Spans the exporter or a span processor failed on (counted, never raised).
        self.export_failures = 0
        self._worker: BatchWorker[CallRecord] = BatchWorker(
            "tracing",
            self._export_batch,
            max_queue=max_queue,
            max_batch=max_batch,
            interval_s=interval_s,
            on_error=self._on_error,
        )

    # -- counters read by the metrics sink -----------------------------------------------------

    @property
    def dropped(self) -> int:
        """Records dropped because the queue was full or the sink was shut down."""
        return self._worker.dropped

    @property
    def depth(self) -> int:
        """Records waiting to become spans."""
        return self._worker.depth

    # -- call path ------------------------------------------------------------------------------

    def _mint(self, tool: str) -> SpanHandle:
        parent: SpanContext | None = trace.get_current_span().get_span_context()
        if parent is None or not parent.is_valid:
            parent = self._env_parent
        if parent is None:
            tid = random.getrandbits(128) or 1
            sampled = self._decide(None, tid, tool)
            return SpanHandle(tid, random.getrandbits(64) or 1, None, sampled, _EMPTY_STATE)
        tid = parent.trace_id
        sampled = self._decide(parent, tid, tool)
        return SpanHandle(tid, random.getrandbits(64) or 1, parent.span_id, sampled,
                          parent.trace_state)

    def open_span(self, tool: str) -> SpanHandle | None:
        """Mint the ids of a call's span (child of the current span); None when tracing is off."""
        if not self.enabled:
            return None
        try:
            return self._mint(tool)
        except Exception:
            return None

    def emit(self, record: CallRecord) -> None:
        """Queue a finished record for span building (never blocks, never raises)."""
        if not self.enabled:
            return
        try:
            if record.trace_id is None:
                # No opener ran for this call: it becomes a span of its own, parented to
                # whatever is current where the record is emitted (the caller's context).
                h = self._mint(record.tool)
                if not h.sampled:
                    return
                record = _with_ids(record, h)
            elif not record.trace_sampled:
                return
            self._worker.submit(record)
        except Exception:
            self._worker.dropped += 1

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Export everything queued; False if the deadline passed first."""
        deadline = time.monotonic() + timeout_s
        ok = self._worker.flush(timeout_s)
        if self._exporter is None:
            left = max(0.0, deadline - time.monotonic())
            try:
                ok = bool(self._processor.force_flush(int(left * 1000))) and ok
            except Exception:
                ok = False
        return ok

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush within the deadline, then stop; a stuck exporter is cut off at the deadline.

        A user-supplied provider is flushed but not shut down: its owner does that.
        """
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_s
        self.flush(timeout_s)
        exporter = self._exporter
        if exporter is not None and self._owns_exporter:
            try:
                # Interrupts the exporter's retry back-off so the worker can finish.
                exporter.shutdown()
            except Exception:
                pass
        self._worker.shutdown(max(0.0, deadline - time.monotonic()))

    # -- background worker ----------------------------------------------------------------------

    def _on_error(self, exc: BaseException) -> None:
        _log.debug("tracing export failed: %s", type(exc).__name__)

    def _export_batch(self, batch: list[CallRecord]) -> None:
        spans: list[ReadableSpan] = []
        for rec in batch:
            try:
                spans.append(self.build_span(rec))
            except Exception:
                self.export_failures += 1
        hist = self._histogram
        if hist is not None:
            for rec in batch:
                try:
                    self._record_duration(hist, rec)
                except Exception:
                    pass
        if not spans:
            return
        exporter = self._exporter
        if exporter is not None:
            from opentelemetry.sdk.trace.export import SpanExportResult

            try:
                result = exporter.export(spans)
            except Exception:
                result = SpanExportResult.FAILURE
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.export_failures += len(spans)
            return
        on_end = self._processor.on_end
        for span in spans:
            try:
                on_end(span)
                self.exported += 1
            except Exception:
                self.export_failures += 1

    def _record_duration(self, hist: Histogram, rec: CallRecord) -> None:
        attrs: dict[str, str] = {
            "gen_ai.operation.name": "execute_tool",
            # An unresolved name is caller input, not a closed set: keep it off metrics.
            "gen_ai.tool.name": "_unregistered" if rec.reject_stage is Stage.RESOLVE else rec.tool,
            "tooltrace.status": rec.status.value,
        }
        if rec.status in _ERROR_STATUSES:
            attrs["error.type"] = rec.error_type or "_OTHER"
        hist.record(rec.elapsed_us / 1e6, attrs)

    def build_span(self, rec: CallRecord) -> ReadableSpan:
        """Build the finished SDK span for one record (what the worker exports)."""
        event_cls, span_cls = _SDK or _load_sdk()
        if self._scope is None:
            from opentelemetry.sdk.util.instrumentation import InstrumentationScope

            self._scope = InstrumentationScope("tooltrace", _version())
        limit = self.max_attribute_chars
        tid = int(rec.trace_id or "0", 16)
        ctx = SpanContext(tid, int(rec.span_id or "0", 16), False, _SAMPLED)
        parent = (
            None
            if rec.parent_span_id is None
            else SpanContext(tid, int(rec.parent_span_id, 16), False, _SAMPLED)
        )
        attrs: dict[str, Any] = {}
        for i, (key, value) in enumerate(rec.attributes.items()):
            if i >= _MAX_EXTRA_ATTRIBUTES:
                break
            attrs[_bounded(str(key), 255)] = (
                _bounded(value, limit) if isinstance(value, str) else value
            )
        tool = rec.tool if len(rec.tool) <= 255 else _bounded(rec.tool, 255)
        attrs["gen_ai.operation.name"] = "execute_tool"
        attrs["gen_ai.tool.name"] = tool
        attrs["gen_ai.tool.call.id"] = rec.call_id
        attrs["gen_ai.tool.type"] = rec.tool_type
        if rec.description:
            attrs["gen_ai.tool.description"] = _bounded(rec.description, limit)
        # str() of a StrEnum member is its value, without the enum's slow .value property.
        attrs["tooltrace.status"] = str(rec.status)
        if rec.reject_stage is not None:
            attrs["tooltrace.reject_stage"] = str(rec.reject_stage)
        attrs["tooltrace.source"] = rec.source
        attrs["tooltrace.run_id"] = rec.run_id
        attrs["tooltrace.mode"] = rec.mode
        attrs["tooltrace.execution_started"] = rec.execution_started
        if rec.hook_modified:
            attrs["tooltrace.hook_modified"] = True
        art = rec.artifact
        if art is not None:
            attrs["tooltrace.artifact.sha256"] = art.sha256
            attrs["tooltrace.artifact.chars"] = art.chars
        if rec.status in _ERROR_STATUSES:
            attrs["error.type"] = _bounded(rec.error_type or "_OTHER", 255)
            status = OtelStatus(StatusCode.ERROR, rec.error_type or str(rec.status))
        else:
            status = _UNSET_STATUS
        if self.capture_content:
            if rec.args_redacted is not None:
                attrs["gen_ai.tool.call.arguments"] = _json(rec.args_redacted, limit)
            if art is not None:
                # The full result lives in the artifact store; the span names it by digest, and
                # the reference survives bounding (only the preview after it is cut).
                ref = f"[artifact sha256={art.sha256} chars={art.chars}] "
                preview = _bounded(rec.result_preview or "", max(0, limit - len(ref)))
                attrs["gen_ai.tool.call.result"] = ref + preview
            elif rec.result_preview is not None:
                attrs["gen_ai.tool.call.result"] = _bounded(rec.result_preview, limit)
        events = []
        content = self.capture_content
        for st in rec.steps:
            decider, decision = st.decider, st.decision
            ev: dict[str, Any] = {
                "tooltrace.step": st.step,
                "tooltrace.step.seq": st.seq,
                "tooltrace.decider": decider if len(decider) <= 255 else _bounded(decider, 255),
                "tooltrace.decision": (
                    decision if len(decision) <= 255 else _bounded(decision, 255)
                ),
                "tooltrace.elapsed_ms": st.elapsed_us / 1000.0,
            }
            if content and st.detail:
                ev["tooltrace.detail"] = _json(st.detail, min(limit, 1024))
            events.append(event_cls(st.step, ev, st.started_at_us * 1000))
        start_ns = rec.started_at_us * 1000
        return span_cls(
            name=f"execute_tool {tool}",
            context=ctx,
            parent=parent,
            resource=self._resource,
            attributes=attrs,
            events=events,
            kind=SpanKind.INTERNAL,
            status=status,
            start_time=start_ns,
            end_time=start_ns + rec.elapsed_us * 1000,
            instrumentation_scope=self._scope,
        )


_UNSET_STATUS: Final = OtelStatus(StatusCode.UNSET)
#: (Event, ReadableSpan) from the SDK, imported on the first span built (``import tooltrace``
#: stays free of the SDK; an import statement per span cost 2 us).
_SDK: tuple[type[Event], type[ReadableSpan]] | None = None


def _load_sdk() -> tuple[type[Event], type[ReadableSpan]]:
    global _SDK
    from opentelemetry.sdk.trace import Event as _Event
    from opentelemetry.sdk.trace import ReadableSpan as _ReadableSpan

    _SDK = (_Event, _ReadableSpan)
    return _SDK


def _with_ids(record: CallRecord, h: SpanHandle) -> CallRecord:
    return record.replace(
        trace_id=h.trace_id,
        span_id=h.span_id,
        parent_span_id=h.parent_span_id,
        trace_sampled=h.sampled,
    )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tooltrace")
    except Exception:
        return "0"


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
    if proto not in _PROTOCOLS:
        raise ValueError(f"unsupported OTLP protocol {proto!r}; use one of {_PROTOCOLS}")
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


def _otlp_exporter(
    endpoint: str | None, protocol: str | None, timeout_s: float | None
) -> SpanExporter:
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
