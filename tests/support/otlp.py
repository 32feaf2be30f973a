"""The OTLP trace receiver of the test suite, on 127.0.0.1: HTTP (``/v1/traces``) and gRPC.

Both decode the real wire format with ``opentelemetry-proto`` and keep the spans as plain
``ReceivedSpan`` values, so a test can check names, attributes, events, status and parentage of
what an exporter actually sent. Use them as context managers::

    with OtlpHttpReceiver() as rx:
        ...export to rx.endpoint...
        spans = rx.wait_for(3)

Options: ``keep_bodies=True`` also keeps every request body as it arrived (decompressed), for
tests that search the raw bytes; ``decode=False`` only counts spans (``span_count``,
``requests``), for load tests. Run as a script (``python tests/support/otlp.py``) it is a
counting HTTP receiver in a process of its own (so decoding costs the process under test
nothing): it prints its port, then serves ``POST /v1/traces`` and ``GET /count``
(``{"requests": n, "spans": m}``).
"""

from __future__ import annotations

import gzip
import json
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

__all__ = [
    "OtlpGrpcReceiver",
    "OtlpHttpReceiver",
    "ReceivedEvent",
    "ReceivedSpan",
    "closed_port",
    "decode_request",
    "free_port",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def closed_port() -> int:
    """A loopback port nobody listens on (connections are refused)."""
    return free_port()


def _any_value(v: common_pb2.AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in kvs}


@dataclass(frozen=True)
class ReceivedEvent:
    """A span event as received."""

    name: str
    time_unix_nano: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    """A span as received: ids in lowercase hex, kind and status as proto enum numbers."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    kind: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: dict[str, Any]
    events: list[ReceivedEvent]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""
    trace_state: str = ""  # the W3C tracestate the span carries

    @property
    def is_error(self) -> bool:
        """True when the span status is ERROR."""
        return self.status_code == 2


def decode_request(req: trace_service_pb2.ExportTraceServiceRequest) -> list[ReceivedSpan]:
    """Flatten an ``ExportTraceServiceRequest`` into ``ReceivedSpan`` values."""
    out: list[ReceivedSpan] = []
    for rs in req.resource_spans:
        res = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for sp in ss.spans:
                out.append(
                    ReceivedSpan(
                        name=sp.name,
                        trace_id=sp.trace_id.hex(),
                        span_id=sp.span_id.hex(),
                        parent_span_id=sp.parent_span_id.hex() or None,
                        kind=int(sp.kind),
                        start_time_unix_nano=sp.start_time_unix_nano,
                        end_time_unix_nano=sp.end_time_unix_nano,
                        attributes=_attrs(sp.attributes),
                        events=[
                            ReceivedEvent(e.name, e.time_unix_nano, _attrs(e.attributes))
                            for e in sp.events
                        ],
                        status_code=int(sp.status.code),
                        status_message=sp.status.message,
                        resource=res,
                        scope=ss.scope.name,
                        trace_state=sp.trace_state,
                    )
                )
    return out


class _Collected:
    """Thread-safe store of what was received, with a blocking wait."""

    def __init__(self, *, keep_bodies: bool = False, decode: bool = True) -> None:
        self._cond = threading.Condition()
        self._keep_bodies = keep_bodies
        self._decode = decode
        #: Decoded spans (empty when ``decode=False``).
        self.spans: list[ReceivedSpan] = []
        #: Request bodies as received, decompressed (only with ``keep_bodies=True``).
        self.bodies: list[bytes] = []
        self.requests = 0
        #: Spans received, decoded or not.
        self.span_count = 0

    def add(self, req: trace_service_pb2.ExportTraceServiceRequest, body: bytes = b"") -> None:
        """Record one export request (``body``: its serialized form, when it is to be kept)."""
        spans = decode_request(req) if self._decode else []
        n = len(spans) if self._decode else sum(
            len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
        with self._cond:
            self.spans.extend(spans)
            if self._keep_bodies:
                self.bodies.append(body or req.SerializeToString())
            self.requests += 1
            self.span_count += n
            self._cond.notify_all()

    def counts(self) -> dict[str, int]:
        """``{"requests": n, "spans": m}`` so far."""
        with self._cond:
            return {"requests": self.requests, "spans": self.span_count}

    def wait_for(
        self, n: int, timeout_s: float = 10.0, where: Callable[[ReceivedSpan], bool] | None = None
    ) -> list[ReceivedSpan]:
        """The decoded spans (those ``where`` accepts), once there are at least ``n``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                got = [s for s in self.spans if where is None or where(s)]
                if len(got) >= n:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"received {len(got)} matching spans, wanted {n}")
                self._cond.wait(left)


class OtlpHttpReceiver(_Collected):
    """OTLP/HTTP protobuf receiver (``POST /v1/traces``, gzip or deflate accepted; ``GET /count``
    answers ``{"requests": n, "spans": m}``)."""

    def __init__(self, port: int = 0, *, keep_bodies: bool = False, decode: bool = True) -> None:
        super().__init__(keep_bodies=keep_bodies, decode=decode)
        owner = self
        #: Content-Encoding of each request received (``""`` when uncompressed).
        self.encodings: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                enc = (self.headers.get("Content-Encoding") or "").lower()
                owner.encodings.append(enc)
                if enc == "gzip":
                    body = gzip.decompress(body)
                elif enc == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                req = trace_service_pb2.ExportTraceServiceRequest()
                req.ParseFromString(body)
                owner.add(req, body)
                payload = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                payload = json.dumps(owner.counts()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        #: Full traces URL, as ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` wants it.
        self.endpoint = f"http://127.0.0.1:{self.port}/v1/traces"
        #: Base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` wants it.
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpHttpReceiver:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread (the script mode) instead of a background one."""
        self._server.serve_forever()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()


class OtlpGrpcReceiver(_Collected):
    """OTLP/gRPC receiver (a grpcio ``TraceServiceServicer``) on 127.0.0.1."""

    def __init__(self, port: int = 0, *, keep_bodies: bool = False, decode: bool = True) -> None:
        super().__init__(keep_bodies=keep_bodies, decode=decode)
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        owner = self

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(
                self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
            ) -> trace_service_pb2.ExportTraceServiceResponse:
                owner.add(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), self._server)
        self.port = int(self._server.add_insecure_port(f"127.0.0.1:{port}"))
        #: Endpoint for the gRPC exporter.
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OtlpGrpcReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the server at once."""
        self._server.stop(grace=None)


def spans_by_name(spans: list[ReceivedSpan]) -> Iterator[tuple[str, ReceivedSpan]]:
    """Pairs (name, span), handy for dict() when names are unique."""
    for s in spans:
        yield s.name, s


def serve_counting() -> None:
    """The script mode: a counting HTTP receiver; print its port, serve until killed."""
    rx = OtlpHttpReceiver(decode=False)
    print(rx.port, flush=True)
    sys.stdout.close()
    rx.serve_forever()


if __name__ == "__main__":
    serve_counting()
