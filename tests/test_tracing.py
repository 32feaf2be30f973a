"""TracingSink: spans built from call records and exported over real OTLP on loopback."""

from __future__ import annotations

import ast
import contextlib
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased
from support.otlp import OtlpGrpcReceiver, OtlpHttpReceiver, ReceivedSpan, closed_port
from support.telemetry import make_record

from tooltrace.model import Artifact, ProgressMark, Stage, Status
from tooltrace.telemetry import Sink, SpanOpener
from tooltrace.telemetry.tracing import (
    CAPTURE_CONTENT_ENV,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_RESOURCE_ATTRIBUTES,
    OTEL_SDK_DISABLED,
    OTEL_SERVICE_NAME,
    TracingSink,
    context_from_traceparent,
    resolve_otlp,
    traceparent,
)

SPAN_KIND_INTERNAL = 1
STATUS_UNSET, STATUS_ERROR = 0, 2

_OTEL_VARS = (
    "OTEL_SDK_DISABLED",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "TRACEPARENT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
)


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from an environment with no OpenTelemetry settings."""
    for var in _OTEL_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(params=["http/protobuf", "grpc"])
def receiver(request: pytest.FixtureRequest) -> Iterator[OtlpHttpReceiver | OtlpGrpcReceiver]:
    """An OTLP receiver of each protocol, with ``.protocol`` set."""
    rx: OtlpHttpReceiver | OtlpGrpcReceiver
    rx = OtlpHttpReceiver() if request.param == "http/protobuf" else OtlpGrpcReceiver()
    rx.protocol = request.param  # type: ignore[union-attr]
    with rx:
        yield rx


def _by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans}


def test_sink_implements_both_protocols() -> None:
    sink = TracingSink(enabled=False)
    assert isinstance(sink, Sink)
    assert isinstance(sink, SpanOpener)
    assert sink.open_span("x") is None


def test_spans_over_otlp_carry_semconv_attributes_events_status_and_parentage(
    receiver: OtlpHttpReceiver,
) -> None:
    sink = TracingSink(endpoint=receiver.endpoint, protocol=receiver.protocol)  # type: ignore[attr-defined]
    outer = sink.open_span("outer_tool")
    assert outer is not None and outer.parent_span_id is None and outer.sampled
    token = outer.attach()
    try:
        # Opened while the outer call executes: a nested call.
        inner = sink.open_span("inner_tool")
        failed = sink.open_span("broken_tool")
        lost = sink.open_span("slow_tool")
        refused = sink.open_span("write_text")
    finally:
        outer.detach(token)
    assert inner is not None and failed is not None and lost is not None and refused is not None
    art = Artifact(path="artifacts/ab/abcd.txt", chars=90_000, bytes=90_000, sha256="ab" * 32)
    started = int(time.time() * 1e6)
    records = [
        make_record("inner_tool", handle=inner, artifact=art, description="Reads a thing.",
                    attributes={"mcp.method.name": "tools/call"}),
        make_record("broken_tool", Status.FAILED, handle=failed, error_type="ValueError"),
        make_record("slow_tool", Status.UNKNOWN, handle=lost, error_type="DeadlineExceeded"),
        make_record("write_text", Status.REJECTED, handle=refused, reject_stage=Stage.POLICY),
        make_record("outer_tool", handle=outer, started_at_us=started, elapsed_us=25_000),
    ]
    for r in records:
        sink.emit(r)
    assert sink.flush(10.0)
    spans = _by_name(receiver.wait_for(5))
    sink.shutdown(5.0)

    top = spans["execute_tool outer_tool"]
    assert top.parent_span_id is None
    assert (top.trace_id, top.span_id) == (outer.trace_id, outer.span_id)
    assert top.kind == SPAN_KIND_INTERNAL
    assert top.start_time_unix_nano == started * 1000
    assert top.end_time_unix_nano == (started + 25_000) * 1000
    assert top.scope == "tooltrace"
    for name in ("inner_tool", "broken_tool", "slow_tool", "write_text"):
        child = spans[f"execute_tool {name}"]
        assert child.trace_id == outer.trace_id
        assert child.parent_span_id == outer.span_id

    ok = spans["execute_tool inner_tool"]
    rec = records[0]
    assert ok.attributes["gen_ai.operation.name"] == "execute_tool"
    assert ok.attributes["gen_ai.tool.name"] == "inner_tool"
    assert ok.attributes["gen_ai.tool.call.id"] == rec.call_id
    assert ok.attributes["gen_ai.tool.type"] == "function"
    assert ok.attributes["gen_ai.tool.description"] == "Reads a thing."
    assert ok.attributes["tooltrace.status"] == "ok"
    assert ok.attributes["tooltrace.source"] == "user"
    assert ok.attributes["tooltrace.run_id"] == "run-1"
    assert ok.attributes["tooltrace.artifact.sha256"] == "ab" * 32
    assert ok.attributes["mcp.method.name"] == "tools/call"
    assert "error.type" not in ok.attributes and "tooltrace.reject_stage" not in ok.attributes
    assert ok.status_code == STATUS_UNSET
    # Content capture is off by default.
    assert "gen_ai.tool.call.arguments" not in ok.attributes
    assert "gen_ai.tool.call.result" not in ok.attributes
    # One event per step, named for the step, at the step's start.
    assert [e.name for e in ok.events] == [s.step for s in rec.steps]
    for ev, st in zip(ok.events, rec.steps, strict=True):
        assert ev.time_unix_nano == st.started_at_us * 1000
        assert ev.attributes["tooltrace.decider"] == st.decider
        assert ev.attributes["tooltrace.decision"] == st.decision
        assert ev.attributes["tooltrace.elapsed_ms"] == pytest.approx(st.elapsed_us / 1000)

    bad = spans["execute_tool broken_tool"]
    assert bad.is_error and bad.attributes["error.type"] == "ValueError"
    unknown = spans["execute_tool slow_tool"]
    assert unknown.is_error and unknown.attributes["error.type"] == "DeadlineExceeded"
    assert unknown.attributes["tooltrace.status"] == "unknown"
    rejected = spans["execute_tool write_text"]
    assert not rejected.is_error
    assert rejected.attributes["tooltrace.reject_stage"] == "policy"
    assert rejected.events[-1].attributes["tooltrace.decision"] == "reject"
    assert sink.exported == 5 and sink.export_failures == 0 and sink.dropped == 0


def test_content_capture_is_bounded_and_offloads_are_referenced_by_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")  # the receiver inflates it
    with OtlpHttpReceiver() as rx:
        sink = TracingSink(endpoint=rx.endpoint, max_attribute_chars=128)
        assert sink.capture_content
        art = Artifact(path="artifacts/cd/cdef.txt", chars=5000, bytes=5000, sha256="cd" * 32)
        h1, h2 = sink.open_span("read_text"), sink.open_span("read_text")
        assert h1 is not None and h2 is not None
        sink.emit(make_record(handle=h1, args={"path": "a.txt", "token": "[REDACTED]"},
                              result_preview="x" * 500))
        sink.emit(make_record(handle=h2, artifact=art, result_preview="head of file"))
        sink.shutdown(5.0)
        spans = {s.span_id: s for s in rx.wait_for(2)}
        assert set(rx.encodings) == {"gzip"}
    inline = spans[h1.span_id].attributes
    assert inline["gen_ai.tool.call.arguments"] == '{"path":"a.txt","token":"[REDACTED]"}'
    assert len(inline["gen_ai.tool.call.result"]) == 128
    assert inline["gen_ai.tool.call.result"].endswith("\u2026")
    offloaded = spans[h2.span_id].attributes["gen_ai.tool.call.result"]
    assert offloaded == f"[artifact sha256={'cd' * 32} chars=5000] head of file"


def test_standard_env_vars_configure_endpoint_protocol_and_resource(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OtlpGrpcReceiver() as rx:
        monkeypatch.setenv(OTEL_EXPORTER_OTLP_ENDPOINT, rx.endpoint)
        monkeypatch.setenv(OTEL_EXPORTER_OTLP_PROTOCOL, "grpc")
        monkeypatch.setenv(OTEL_SERVICE_NAME, "agent-under-test")
        monkeypatch.setenv(OTEL_RESOURCE_ATTRIBUTES, "deployment.environment=ci,team=tools")
        sink = TracingSink()
        h = sink.open_span("read_text")
        assert h is not None
        sink.emit(make_record(handle=h))
        sink.shutdown(5.0)
        (span,) = rx.wait_for(1)
    assert span.resource["service.name"] == "agent-under-test"
    assert span.resource["deployment.environment"] == "ci"
    assert span.resource["team"] == "tools"


def test_endpoint_resolution_follows_the_otlp_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_otlp(None, None) == ("http://localhost:4318/v1/traces", "http/protobuf")
    assert resolve_otlp(None, "grpc") == ("http://localhost:4317", "grpc")
    monkeypatch.setenv(OTEL_EXPORTER_OTLP_ENDPOINT, "http://collector:4318/")
    assert resolve_otlp(None, None)[0] == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:9999/custom")
    assert resolve_otlp(None, None)[0] == "http://traces:9999/custom"
    assert resolve_otlp("http://explicit/v1/traces", None)[0] == "http://explicit/v1/traces"
    with pytest.raises(ValueError, match="protocol"):
        TracingSink(protocol="thrift")
    monkeypatch.setenv(OTEL_EXPORTER_OTLP_PROTOCOL, "http/json")
    with pytest.raises(ValueError, match="unsupported OTLP protocol"):
        TracingSink()


def test_sdk_disabled_turns_tracing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OTEL_SDK_DISABLED, "true")
    sink = TracingSink(endpoint=f"http://127.0.0.1:{closed_port()}/v1/traces")
    assert not sink.enabled
    assert sink.open_span("read_text") is None
    sink.emit(make_record())
    assert sink.depth == 0 and sink.dropped == 0
    sink.shutdown(1.0)


def test_user_provider_gets_spans_and_instrumented_work_becomes_a_child() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    with OtlpHttpReceiver() as rx:
        provider = TracerProvider(resource=Resource.create({"service.name": "svc"}),
                                  shutdown_on_exit=False)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rx.endpoint)))
        tracer = provider.get_tracer("test-app")
        sink = TracingSink(provider)
        with tracer.start_as_current_span("agent turn") as turn:
            h = sink.open_span("fetch")
            assert h is not None
            token = h.attach()
            try:
                # What an instrumented HTTP client inside the tool would do.
                with tracer.start_as_current_span("GET example"):
                    pass
            finally:
                h.detach(token)
        sink.emit(make_record("fetch", handle=h))
        assert sink.flush(5.0)
        spans = _by_name(rx.wait_for(3))
        provider.shutdown()
    turn_id = f"{turn.get_span_context().span_id:016x}"
    call = spans["execute_tool fetch"]
    assert call.parent_span_id == turn_id
    assert spans["GET example"].parent_span_id == call.span_id
    assert call.resource["service.name"] == "svc"
    assert len({s.trace_id for s in spans.values()}) == 1


def test_processors_added_to_the_provider_before_and_after_the_sink_get_its_spans() -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    before, after = InMemorySpanExporter(), InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(before))
    sink = TracingSink(provider, interval_s=0.05)
    provider.add_span_processor(SimpleSpanProcessor(after))
    h = sink.open_span("read_text")
    assert h is not None
    sink.emit(make_record(handle=h))
    assert sink.flush(5.0)
    sink.shutdown(1.0)
    for exporter in (before, after):
        (span,) = exporter.get_finished_spans()
        assert span.context is not None and f"{span.context.span_id:016x}" == h.span_id
    assert sink.exported == 1 and sink.export_failures == 0
    provider.shutdown()


def test_a_provider_made_while_the_sdk_is_disabled_turns_tracing_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.setenv(OTEL_SDK_DISABLED, "true")
    on_provider = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(on_provider))
    monkeypatch.delenv(OTEL_SDK_DISABLED)
    sink = TracingSink(provider)
    assert not sink.enabled and sink.open_span("t") is None
    # Forced on with an exporter of its own, the sink exports there.
    own = InMemorySpanExporter()
    forced = TracingSink(provider, exporter=own, enabled=True, interval_s=0.05)
    forced.emit(make_record(handle=forced.open_span("t")))
    assert forced.flush(5.0) and len(own.get_finished_spans()) == 1
    # Forced on without one: the disabled provider's processors are out of reach; counted.
    blind = TracingSink(provider, enabled=True, interval_s=0.05)
    blind.emit(make_record(handle=blind.open_span("t")))
    blind.flush(5.0)
    assert blind.export_failures == 1 and blind.exported == 0
    assert on_provider.get_finished_spans() == ()
    for s in (sink, forced, blind):
        s.shutdown(1.0)


def test_a_provider_whose_tracers_are_not_the_sdks_needs_an_exporter() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import ProxyTracer, Tracer

    class Wrapping(TracerProvider):
        def get_tracer(self, *args: object, **kwargs: object) -> Tracer:
            return ProxyTracer("wrapped")

    with pytest.raises(TypeError, match="exporter="):
        TracingSink(Wrapping(shutdown_on_exit=False))
    sink = TracingSink(Wrapping(shutdown_on_exit=False), exporter=InMemorySpanExporter())
    assert sink.enabled
    sink.shutdown(1.0)


# Private attributes tooltrace once read from the SDK; named so the check below cannot miss them.
_KNOWN_SDK_PRIVATES = frozenset({"_active_span_processor", "_disabled"})
_DEFINED_PRIVATE = re.compile(r"(?:self\.|def |class )(_[A-Za-z]\w*)")


def _otel_private_names() -> frozenset[str]:
    """Every private attribute and function name the installed OpenTelemetry packages define."""
    import opentelemetry

    names = set(_KNOWN_SDK_PRIVATES)
    for root in opentelemetry.__path__:
        for path in Path(root).rglob("*.py"):
            found = _DEFINED_PRIVATE.findall(path.read_text(errors="replace"))
            names.update(n for n in found if not n.startswith("__"))
    return frozenset(names)


def _reads_private(node: ast.AST, names: frozenset[str]) -> bool:
    """``x._name`` (x not ``self`` or ``cls``) or ``getattr(x, "_name")`` for a name in names."""
    if isinstance(node, ast.Attribute):
        mine = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        return node.attr in names and not mine
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant) and node.args[1].value in names)


def _private_otel_access(source: str, otel_private: frozenset[str]) -> list[str]:
    """The known SDK privates read anywhere, and any OpenTelemetry private name read in a
    module that imports OpenTelemetry (where its objects are handled)."""
    tree = ast.parse(source)
    imports_otel = any(
        (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("opentelemetry"))
        or (isinstance(n, ast.Import) and any(a.name.startswith("opentelemetry") for a in n.names))
        for n in ast.walk(tree)
    )
    names = otel_private if imports_otel else _KNOWN_SDK_PRIVATES
    return [f"line {n.lineno}: {ast.unparse(n)}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute | ast.Call) and _reads_private(n, names)]


def test_no_private_attribute_of_opentelemetry_is_used() -> None:
    # An SDK upgrade may rename or drop its private attributes without notice.
    import tooltrace

    otel_private = _otel_private_names()
    sample = (
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "def f(p: TracerProvider) -> None:\n"
        "    p._active_span_processor.on_end(None)\n"
        "    getattr(p, '_disabled', False)\n"
        "    p._span_limits\n"
        "    self._resource\n"
    )
    assert len(_private_otel_access(sample, otel_private)) == 3  # the check itself works
    package = Path(tooltrace.__file__).parent
    found = {
        path.relative_to(package).as_posix(): hits
        for path in sorted(package.rglob("*.py"))
        if (hits := _private_otel_access(path.read_text(), otel_private))
    }
    assert found == {}


def test_provider_sampler_is_respected() -> None:
    with OtlpHttpReceiver() as rx:
        off = TracingSink(TracerProvider(sampler=ALWAYS_OFF, shutdown_on_exit=False),
                          exporter=_http_exporter(rx.endpoint))
        h = off.open_span("t")
        assert h is not None and not h.sampled
        off.emit(make_record(handle=h))
        assert off.depth == 0
        # A non-stock sampler goes through should_sample.
        never = TracingSink(TracerProvider(sampler=TraceIdRatioBased(0.0), shutdown_on_exit=False),
                            exporter=_http_exporter(rx.endpoint))
        h2 = never.open_span("t")
        assert h2 is not None and not h2.sampled
        # Parent-based: an unsampled parent makes an unsampled child even though root samples.
        pb = TracingSink(TracerProvider(sampler=ParentBased(TraceIdRatioBased(1.0)),
                                        shutdown_on_exit=False),
                         exporter=_http_exporter(rx.endpoint))
        token = h.attach()
        try:
            child = pb.open_span("t")
        finally:
            h.detach(token)
        assert child is not None and not child.sampled and child.trace_id == h.trace_id
        root = pb.open_span("t")
        assert root is not None and root.sampled
        pb.emit(make_record(handle=root))
        pb.shutdown(5.0)
        (span,) = rx.wait_for(1)
        assert span.span_id == root.span_id
        for s in (off, never):
            s.shutdown(1.0)


def _http_exporter(endpoint: str):  # type: ignore[no-untyped-def]
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint)


def test_traceparent_carries_the_trace_into_a_subprocess(tmp_path: Path) -> None:
    with OtlpHttpReceiver() as rx:
        sink = TracingSink(endpoint=rx.endpoint)
        assert traceparent() is None
        h = sink.open_span("run_command")
        assert h is not None
        token = h.attach()
        try:
            tp = traceparent()
        finally:
            h.detach(token)
        assert tp == f"00-{h.trace_id}-{h.span_id}-01"
        ctx = context_from_traceparent(tp)
        assert ctx is not None and ctx.is_remote and f"{ctx.span_id:016x}" == h.span_id
        assert context_from_traceparent("00-zz-bad") is None
        child_code = textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from support.telemetry import make_record
            from tooltrace.telemetry.tracing import TracingSink
            sink = TracingSink(endpoint={rx.endpoint!r})
            h = sink.open_span("child_tool")
            sink.emit(make_record("child_tool", handle=h))
            sink.shutdown(5.0)
            """
        )
        env = {**os.environ, "TRACEPARENT": tp}
        proc = subprocess.run([sys.executable, "-c", child_code], env=env, timeout=60,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        (span,) = rx.wait_for(1)
        sink.shutdown(1.0)
    assert span.name == "execute_tool child_tool"
    assert span.trace_id == h.trace_id and span.parent_span_id == h.span_id


def test_records_without_ids_become_spans_of_their_own() -> None:
    with OtlpHttpReceiver() as rx:
        sink = TracingSink(endpoint=rx.endpoint)
        sink.emit(make_record("plain"))
        sink.shutdown(5.0)
        (span,) = rx.wait_for(1)
    assert span.name == "execute_tool plain" and len(span.trace_id) == 32
    assert span.parent_span_id is None


def test_attribute_values_are_size_bounded() -> None:
    with OtlpHttpReceiver() as rx:
        sink = TracingSink(endpoint=rx.endpoint, max_attribute_chars=100)
        h = sink.open_span("t")
        assert h is not None
        sink.emit(make_record("t", handle=h, description="d" * 10_000,
                              attributes={"note": "n" * 10_000}))
        sink.shutdown(5.0)
        (span,) = rx.wait_for(1)
    assert len(span.attributes["gen_ai.tool.description"]) == 100
    assert len(span.attributes["note"]) == 100


def test_duration_histogram_goes_to_a_meter_provider() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    with OtlpHttpReceiver() as rx:
        sink = TracingSink(endpoint=rx.endpoint, meter_provider=meters)
        for status, elapsed in ((Status.OK, 20_000), (Status.OK, 40_000), (Status.FAILED, 1000)):
            h = sink.open_span("read_text")
            sink.emit(make_record(status=status, handle=h, elapsed_us=elapsed,
                                  error_type="OSError" if status is Status.FAILED else None))
        sink.shutdown(5.0)
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[Any, HistogramDataPoint] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "gen_ai.execute_tool.duration":
                    assert m.unit == "s"
                    for p in m.data.data_points:
                        assert isinstance(p, HistogramDataPoint) and p.attributes is not None
                        points[p.attributes.get("error.type")] = p
    assert points[None].count == 2 and points[None].sum == pytest.approx(0.06)
    assert points["OSError"].count == 1
    assert dict(points[None].attributes or {})["gen_ai.tool.name"] == "read_text"
    meters.shutdown()


class SilentCollector:
    """A loopback listener that accepts connections, reads what is sent and never answers: an
    exporter talking to it waits for a reply until the listener closes."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        #: Set once a request's first bytes have arrived (the exporter now waits for a reply).
        self.request_arrived = threading.Event()
        self._conns: list[socket.socket] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> SilentCollector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        # shutdown, not just close: the accepting and reading threads hold the sockets, and
        # only shutdown stops the listening and hangs up on the exporter while they do.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for c in list(self._conns):
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        try:
            while conn.recv(65536):
                self.request_arrived.set()
        except OSError:
            pass


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_collector_that_never_answers_never_blocks_calls_and_deadlines_hold(
    protocol: str,
) -> None:
    with SilentCollector() as rx:
        endpoint = (f"http://127.0.0.1:{rx.port}/v1/traces" if protocol == "http/protobuf"
                    else f"http://127.0.0.1:{rx.port}")
        # The export deadline is far beyond the test's own timeout: an emit, flush or shutdown
        # that waited for the export would never return in the test's lifetime.
        sink = TracingSink(endpoint=endpoint, protocol=protocol, max_queue=100, max_batch=50,
                           interval_s=0.05, export_timeout_s=3600)
        sink.emit(make_record(handle=sink.open_span("read_text")))
        assert rx.request_arrived.wait(60)
        for _ in range(2000):
            h = sink.open_span("read_text")
            sink.emit(make_record(handle=h))
        # Every open and emit returned while the first export still waited for its reply.
        assert sink.exported == 0 and sink.export_failures == 0
        assert sink.dropped >= 2000 - 100
        # flush gives up at its deadline with the export still waiting, and says so.
        assert sink.flush(0.5) is False
        assert sink.exported == 0
        sink.shutdown(1.0)
        dropped = sink.dropped
        sink.emit(make_record(handle=sink.open_span("read_text")))
        assert sink.dropped == dropped + 1  # after shutdown, records are dropped and counted
    # The collector hung up: the waiting export ends as a counted failure, never a success.
    while sink.export_failures == 0:
        time.sleep(0.01)
    assert sink.exported == 0


def test_through_the_registry_nested_calls_are_children_and_failures_are_errors(
    tmp_path: Path,
) -> None:
    from tooltrace import ToolCall, ToolRegistry, tool

    with OtlpHttpReceiver() as rx:
        sink = TracingSink(endpoint=rx.endpoint)
        (tmp_path / "ws").mkdir()
        reg = ToolRegistry(workspace=tmp_path / "ws", home=tmp_path / "home", sinks=[sink],
                           tracer=sink, cancel_grace_s=0.2)

        @tool()
        def inner(x: int) -> int:
            """Double a number."""
            return x * 2

        @tool()
        def outer(x: int) -> int:
            """Call inner through the registry."""
            env = reg.call(ToolCall("inner", {"x": x}))
            return int(env.data) + 1

        @tool()
        def broken() -> str:
            """Always fails."""
            raise ValueError("secret-bearing message that must not become error.type")

        @tool(effect="local", cancellable=False, timeout_s=0.2)
        def stuck() -> str:
            """Ignores its deadline."""
            time.sleep(1.0)
            return "late"

        for t in (inner, outer, broken, stuck):
            reg.register(t)
        assert reg.call(ToolCall("outer", {"x": 20})).data == 41
        assert reg.call(ToolCall("broken", {})).status is Status.FAILED
        assert reg.call(ToolCall("stuck", {})).status is Status.UNKNOWN
        assert reg.call(ToolCall("no_such_tool", {})).status is Status.REJECTED
        reg.shutdown(timeout_s=5.0)
        spans = _by_name(rx.wait_for(5))
    top, nested = spans["execute_tool outer"], spans["execute_tool inner"]
    assert top.parent_span_id is None
    assert nested.parent_span_id == top.span_id and nested.trace_id == top.trace_id
    assert nested.attributes["gen_ai.tool.description"] == "Double a number."
    assert [e.name for e in nested.events][:2] == ["resolve", "validate"]
    failed = spans["execute_tool broken"]
    assert failed.is_error and failed.attributes["tooltrace.status"] == "failed"
    assert "secret" not in failed.attributes["error.type"]
    unknown = spans["execute_tool stuck"]
    assert unknown.is_error and unknown.attributes["tooltrace.status"] == "unknown"
    assert unknown.attributes["error.type"].startswith("unconfirmed_")
    assert not spans["execute_tool _unregistered"].is_error


def test_a_forked_child_gets_a_working_sink_of_its_own() -> None:
    with OtlpHttpReceiver() as rx:
        sink = TracingSink(endpoint=rx.endpoint, interval_s=30)
        parent_h = sink.open_span("before_fork")
        sink.emit(make_record("before_fork", handle=parent_h))
        assert sink.depth == 1  # queued in the parent, not yet exported
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                # The child starts with an empty queue and a fresh worker thread.
                if sink.depth == 0:
                    h = sink.open_span("in_child")
                    sink.emit(make_record("in_child", handle=h))
                    code = 0 if sink.flush(10.0) else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert sink.flush(10.0)
        names = sorted(s.name for s in rx.wait_for(2))
        sink.shutdown(1.0)
    assert names == ["execute_tool before_fork", "execute_tool in_child"]


def test_default_sinks_add_tracing_only_when_otlp_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tooltrace.telemetry import LoggingSink, MetricsSink, default_sinks

    kinds = [type(s) for s in default_sinks()]
    assert kinds == [MetricsSink, LoggingSink]
    monkeypatch.setenv(OTEL_EXPORTER_OTLP_ENDPOINT, f"http://127.0.0.1:{closed_port()}")
    sinks = default_sinks(logging=False)
    assert [type(s) for s in sinks] == [TracingSink, MetricsSink]
    assert isinstance(sinks[0], SpanOpener)
    monkeypatch.setenv(OTEL_SDK_DISABLED, "true")
    assert [type(s) for s in default_sinks(logging=False)] == [MetricsSink]
    for s in sinks:
        s.shutdown(0.5)
        s.shutdown(0.5)  # a second shutdown is harmless


def test_text_that_is_not_unicode_loses_no_span_of_its_batch(
    receiver: OtlpHttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lone surrogate (a model's or an MCP server's JSON escape, a file name os.fsdecode could
    # not decode) anywhere in a span made the OTLP encoder refuse its whole batch.
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    sink = TracingSink(endpoint=receiver.endpoint, protocol=receiver.protocol)  # type: ignore[attr-defined]
    mark = ProgressMark(seq=0, at_us=int(time.time() * 1e6), done=1, total=2,
                        message="reading caf\udce9.txt")
    records = [
        make_record("before"),
        make_record("up\ud83d", Status.FAILED, error_type="Err\udfff",
                    attributes={"mcp.client\ud800": "name \ud83d", "list": ["a\udc80", "b"]},
                    description="d\ud83d", args={"path": "\ud83d.txt"}, progress=(mark,)),
        make_record("after"),
    ]
    for r in records:
        sink.emit(r)
    assert sink.flush(10.0)
    spans = _by_name(receiver.wait_for(3))
    sink.shutdown(5.0)
    assert sorted(spans) == ["execute_tool after", "execute_tool before", "execute_tool up\ufffd"]
    odd = spans["execute_tool up\ufffd"]
    assert odd.attributes["gen_ai.tool.name"] == "up\ufffd"
    assert odd.attributes["mcp.client\ufffd"] == "name \ufffd"
    assert odd.attributes["gen_ai.tool.description"] == "d\ufffd"
    assert odd.attributes["list"] == ["a\ufffd", "b"]
    assert odd.attributes["gen_ai.tool.call.arguments"] == '{"path":"\ufffd.txt"}'
    assert odd.status_message == "Err\ufffd"
    (progress,) = [e for e in odd.events if e.name == "tooltrace.progress"]
    assert progress.attributes["tooltrace.progress.message"] == "reading caf\ufffd.txt"
