"""An OTLP/HTTP receiver in a process of its own that counts spans (so decoding them costs the
process under test nothing). ``python _otlp_counter.py`` prints its port, then serves
``POST /v1/traces`` and ``GET /count`` (``{"requests": n, "spans": m}``) on 127.0.0.1.
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

_lock = threading.Lock()
_counts = {"requests": 0, "spans": 0}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
            body = gzip.decompress(body)
        req = trace_service_pb2.ExportTraceServiceRequest()
        req.ParseFromString(body)
        n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
        with _lock:
            _counts["requests"] += 1
            _counts["spans"] += n
        out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self) -> None:
        with _lock:
            out = json.dumps(_counts).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
