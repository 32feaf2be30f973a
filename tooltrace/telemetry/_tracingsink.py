"""``TracingSink``: mints a call's span ids before it runs, exports its span after.

On the call path the sink only mints ids (``_propagation.SpanMinter``) and queues the finished
record; a ``BatchWorker`` thread builds the spans (``_spanbuild.SpanBuilder``) and hands them,
a batch at a time, to a span exporter (given, or built from the ``OTEL_*`` settings by
``_otlp``) or to the span processors of a user-supplied SDK ``TracerProvider``. Only the SDK's
public surface is used: the processors are reached through the ``span_processor`` of the SDK
tracer the provider hands out (the provider's own fan-out, so processors added later get spans
too), and a provider made with ``OTEL_SDK_DISABLED=true`` is recognised by the no-op tracer it
returns.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from ..model import CallRecord, Stage
from ._otlp import PROTOCOLS, otlp_exporter
from ._propagation import TRACEPARENT_ENV, SpanHandle, SpanMinter, context_from_traceparent
from ._spanbuild import CAPTURE_CONTENT_ENV, ERROR_STATUSES, SpanBuilder, capture_flag
from ._worker import BatchWorker

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

__all__ = ["TracingSink"]

_log = logging.getLogger("tooltrace.telemetry.tracing")

# Semantic-convention bucket advice for GenAI durations (seconds).
_DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)


class TracingSink:
    """Mint span ids before a call, build and export its span after (Sink and SpanOpener).

    Args:
        tracer_provider: an SDK ``TracerProvider``; its sampler and resource are used and,
            without an ``exporter``, finished spans go to its span processors (those added
            before this sink was made and after). When None, a provider and an OTLP exporter
            are built from ``OTEL_*`` variables.
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
        enabled: False turns tracing off; None follows the provider (off when it was made with
            ``OTEL_SDK_DISABLED=true``). A disabled provider's processors are out of reach, so
            ``enabled=True`` with one needs an ``exporter``; without one, spans are counted in
            ``export_failures``.
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
        if protocol is not None and protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
        if tracer_provider is not None and not isinstance(tracer_provider, SdkTracerProvider):
            raise TypeError("tracer_provider must be an opentelemetry.sdk.trace.TracerProvider")
        if capture_content is None:
            capture_content = capture_flag(os.environ.get(CAPTURE_CONTENT_ENV))
        built = tracer_provider is None
        if tracer_provider is None:
            tracer_provider = SdkTracerProvider(shutdown_on_exit=False)
        self._builder = SpanBuilder(tracer_provider.resource, capture_content, max_attribute_chars)
        disabled, self._processor = _processors(tracer_provider, self._builder.scope)
        #: False when tracing is off (``OTEL_SDK_DISABLED`` or ``enabled=False``).
        self.enabled = (not disabled) if enabled is None else enabled
        self._owns_exporter = False
        self._closed = False
        if exporter is None and built and self.enabled:
            exporter = otlp_exporter(endpoint, protocol, export_timeout_s)
            self._owns_exporter = True
        elif exporter is None and self.enabled and self._processor is None:
            if not disabled:
                raise TypeError(
                    "tracer_provider hands out tracers that are not the SDK's, so tooltrace "
                    "cannot reach its span processors: pass exporter= as well"
                )
            _log.warning("tracing is on but the tracer provider is disabled and no exporter "
                         "was given: spans will be counted as export failures")
        self._exporter = exporter
        #: The SDK provider whose resource, sampler (and, without an exporter, processors) apply.
        self.tracer_provider: TracerProvider = tracer_provider
        env_parent = (
            context_from_traceparent(os.environ.get(TRACEPARENT_ENV))
            if inherit_traceparent
            else None
        )
        self._mint: Callable[[str], SpanHandle] = SpanMinter(
            tracer_provider.sampler, env_parent
        ).mint
        self._histogram = None if meter_provider is None else _duration_histogram(meter_provider)
        #: Spans handed over successfully (to the exporter or the provider's processors).
        self.exported = 0
        #: Spans the exporter or a span processor failed on (counted, never raised).
        self.export_failures = 0
        self._worker: BatchWorker[CallRecord | ReadableSpan] = BatchWorker(
            "tracing",
            self._export_batch,
            max_queue=max_queue,
            max_batch=max_batch,
            interval_s=interval_s,
            on_error=self._on_error,
        )

    # -- settings of the spans built ------------------------------------------------------------

    @property
    def capture_content(self) -> bool:
        """Whether redacted arguments and results go on spans."""
        return self._builder.capture_content

    @capture_content.setter
    def capture_content(self, value: bool) -> None:
        self._builder.capture_content = value

    @property
    def max_attribute_chars(self) -> int:
        """Longest string attribute value; longer ones are cut with an ellipsis."""
        return self._builder.max_attribute_chars

    @max_attribute_chars.setter
    def max_attribute_chars(self, value: int) -> None:
        self._builder.max_attribute_chars = value

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

    def export_span(self, span: ReadableSpan) -> None:
        """Queue a finished SDK span made elsewhere (an MCP proxy's SERVER or CLIENT span) to be
        exported with the calls' spans (never blocks, never raises)."""
        if not self.enabled:
            return
        try:
            self._worker.submit(span)
        except Exception:
            self._worker.dropped += 1

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Export everything queued; False if the deadline passed first."""
        deadline = time.monotonic() + timeout_s
        ok = self._worker.flush(timeout_s)
        if self._exporter is None:
            left = max(0.0, deadline - time.monotonic())
            try:
                ok = bool(self.tracer_provider.force_flush(int(left * 1000))) and ok
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

    def build_span(self, rec: CallRecord) -> ReadableSpan:
        """Build the finished SDK span for one record (what the worker exports)."""
        return self._builder.build(rec)

    def _on_error(self, exc: BaseException) -> None:
        _log.debug("tracing export failed: %s", type(exc).__name__)

    def _export_batch(self, batch: list[CallRecord | ReadableSpan]) -> None:
        spans: list[ReadableSpan] = []
        build = self._builder.build
        records: list[CallRecord] = []
        # In slices that hand the interpreter back to the calls (see BatchWorker.paced).
        for rec in self._worker.paced(batch):
            if not isinstance(rec, CallRecord):
                spans.append(rec)  # made and finished elsewhere (export_span)
                continue
            records.append(rec)
            try:
                spans.append(build(rec))
            except Exception:
                self.export_failures += 1
        hist = self._histogram
        if hist is not None:
            for rec in records:
                try:
                    _record_duration(hist, rec)
                except Exception:
                    pass
        if not spans:
            return
        if self._exporter is not None:
            self._export(self._exporter, spans)
        elif self._processor is None:
            self.export_failures += len(spans)
        else:
            on_end = self._processor.on_end
            for span in self._worker.paced(spans):
                try:
                    on_end(span)
                    self.exported += 1
                except Exception:
                    self.export_failures += 1

    def _export(self, exporter: SpanExporter, spans: list[ReadableSpan]) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = exporter.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.export_failures += len(spans)


def _processors(
    provider: TracerProvider, scope: InstrumentationScope
) -> tuple[bool, SpanProcessor | None]:
    """Whether the provider is disabled, and its fan-out to its span processors if reachable.

    Both come from the tracer the provider hands out: the SDK returns a no-op tracer when the
    provider was made with ``OTEL_SDK_DISABLED=true``, and an SDK tracer's ``span_processor``
    is the provider's own fan-out (processors added to the provider later are reached too).
    """
    from opentelemetry.sdk.trace import Tracer as SdkTracer
    from opentelemetry.trace import NoOpTracer

    tracer = provider.get_tracer(scope.name, scope.version)
    processor = tracer.span_processor if isinstance(tracer, SdkTracer) else None
    return isinstance(tracer, NoOpTracer), processor


def _duration_histogram(meter_provider: MeterProvider) -> Histogram:
    return meter_provider.get_meter("tooltrace").create_histogram(
        "gen_ai.execute_tool.duration",
        unit="s",
        description="Duration of tool executions.",
        explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
    )


def _record_duration(hist: Histogram, rec: CallRecord) -> None:
    attrs: dict[str, str] = {
        "gen_ai.operation.name": "execute_tool",
        # An unresolved name is caller input, not a closed set: keep it off metrics.
        "gen_ai.tool.name": "_unregistered" if rec.reject_stage is Stage.RESOLVE else rec.tool,
        "tooltrace.status": rec.status.value,
    }
    if rec.status in ERROR_STATUSES:
        attrs["error.type"] = rec.error_type or "_OTHER"
    hist.record(rec.elapsed_us / 1e6, attrs)


def _with_ids(record: CallRecord, h: SpanHandle) -> CallRecord:
    return record.replace(
        trace_id=h.trace_id,
        span_id=h.span_id,
        parent_span_id=h.parent_span_id,
        trace_sampled=h.sampled,
    )
