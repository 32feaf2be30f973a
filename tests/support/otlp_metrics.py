"""An OTLP/HTTP metrics receiver on 127.0.0.1 (``POST /v1/metrics``), for tests.

It decodes the real wire format (``ExportMetricsServiceRequest`` from ``opentelemetry-proto``,
gzip accepted) and keeps every histogram data point as a ``ReceivedPoint``; ``POST /v1/traces``
is answered and ignored (a process that exports spans to the same endpoint is not disturbed).
Use it as a context manager::

    with OtlpMetricsReceiver() as rx:
        ...export to rx.endpoint...
        points = rx.histogram("mcp.server.operation.duration")
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

from support.otlp import _attrs

__all__ = ["OtlpMetricsReceiver", "ReceivedPoint"]


@dataclass(frozen=True)
class ReceivedPoint:
    """One histogram data point as received."""

    metric: str
    unit: str
    attributes: dict[str, Any]
    count: int
    total: float
    bounds: tuple[float, ...]


class OtlpMetricsReceiver:
    """OTLP/HTTP protobuf metrics receiver; ``endpoint`` is its base URL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.points: list[ReceivedPoint] = []
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/metrics":
                    req = metrics_service_pb2.ExportMetricsServiceRequest()
                    req.ParseFromString(body)
                    owner._add(req)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _add(self, req: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        got: list[ReceivedPoint] = []
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.WhichOneof("data") != "histogram":
                        continue
                    for p in m.histogram.data_points:
                        got.append(ReceivedPoint(m.name, m.unit, _attrs(p.attributes), p.count,
                                                 p.sum, tuple(p.explicit_bounds)))
        with self._lock:
            self.points.extend(got)
            self.requests += 1

    def histogram(self, name: str) -> list[ReceivedPoint]:
        """The data points received for histogram ``name`` (every export's)."""
        with self._lock:
            return [p for p in self.points if p.metric == name]

    def __enter__(self) -> OtlpMetricsReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
