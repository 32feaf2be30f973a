"""Where the gauntlet looks for leaks: the raw bytes each sink produced.

``RawOtlpReceiver`` is an OTLP/HTTP receiver on 127.0.0.1 that keeps every request body as it
arrived (decompressed) besides decoding the spans; ``sink_blobs`` gathers every file a tooltrace
home holds (segments, quarantine, Parquet decoded to rows, artifacts) and the other outputs a
test hands it.
"""

from __future__ import annotations

import gzip
import os
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from otlp_receiver import decode_request


class RawOtlpReceiver:
    """OTLP/HTTP on 127.0.0.1 keeping raw request bodies and a span count."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.spans = 0
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                enc = (self.headers.get("Content-Encoding") or "").lower()
                if enc == "gzip":
                    body = gzip.decompress(body)
                elif enc == "deflate":
                    body = zlib.decompress(body)
                req = trace_service_pb2.ExportTraceServiceRequest()
                req.ParseFromString(body)
                n = len(decode_request(req))
                with owner._lock:
                    owner.bodies.append(body)
                    owner.spans += n
                payload = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RawOtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def parquet_rows(path: Path) -> bytes:
    """A Parquet file's rows as JSON lines (its raw bytes are compressed)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    return b"\n".join(orjson.dumps(r, default=str) for r in rows)


def home_blobs(home: Path) -> Iterator[tuple[str, bytes]]:
    """(label, bytes) for every file under a tooltrace home; Parquet also as decoded rows."""
    for dirpath, _dirs, files in os.walk(home):
        for name in sorted(files):
            p = Path(dirpath) / name
            rel = str(p.relative_to(home))
            data = p.read_bytes()
            yield rel, data
            if name.endswith(".parquet"):
                yield rel + " (rows)", parquet_rows(p)
