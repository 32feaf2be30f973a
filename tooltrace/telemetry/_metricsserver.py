"""Serving metrics for scraping: one process's registry, or the sum over every process of a
prometheus-client multiprocess directory."""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry

__all__ = ["MetricsServer", "multiprocess_registry", "serve_metrics"]


class MetricsServer:
    """A running metrics endpoint; ``close()`` stops it and frees the port."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        #: The address it listens on.
        self.addr: str = str(server.server_address[0])
        #: The port it listens on (the real one when 0 was asked for).
        self.port: int = int(server.server_port)
        #: The scrape URL.
        self.url = f"http://{self.addr}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def multiprocess_registry(path: str | None = None) -> CollectorRegistry:
    """A registry that sums the counters and histograms of every process sharing ``path``
    (default: ``PROMETHEUS_MULTIPROC_DIR``), for one endpoint in front of many workers.

    With ``PROMETHEUS_MULTIPROC_DIR`` set before ``prometheus_client`` is first imported, each
    process's ``MetricsSink`` keeps its values in files there instead of in memory (the
    prometheus-client multiprocess mode); this registry reads them all at scrape time. It
    serves no exemplars and none of the scrape-time gauges (in flight, queue depths, caps,
    sink drops): those belong to one process. Raises ``ValueError`` without a directory.
    """
    from prometheus_client.multiprocess import MultiProcessCollector

    from .._settings import PROMETHEUS_MULTIPROC_DIR, prometheus_multiproc_dir

    where = path or prometheus_multiproc_dir()
    if not where:
        raise ValueError(f"no multiprocess directory: pass path or set {PROMETHEUS_MULTIPROC_DIR}")
    reg = CollectorRegistry()
    MultiProcessCollector(reg, path=where)  # type: ignore[no-untyped-call]
    return reg


def serve_metrics(
    port: int = 0,
    addr: str = "127.0.0.1",
    registry: CollectorRegistry | Any = None,
) -> MetricsServer:
    """Serve ``registry`` (or a sink's registry) over HTTP at ``/metrics`` for scraping.

    The endpoint negotiates the OpenMetrics format (so exemplars appear) when the scraper asks
    for it, and the classic text format otherwise. ``port=0`` picks a free port (see
    ``.port``). With no registry, the process-wide ``prometheus_client.REGISTRY`` is served.
    With ``PROMETHEUS_MULTIPROC_DIR`` set, a sink (or no registry) is served as the sum over
    every process of the directory (``multiprocess_registry``): each process's own registry
    would show only its own calls.
    """
    from prometheus_client import REGISTRY, start_http_server

    from .._settings import prometheus_multiproc_dir

    # Anything but a registry is a sink (``MetricsSink``), served through its registry.
    sink = registry is not None and not isinstance(registry, CollectorRegistry)
    if prometheus_multiproc_dir() and (registry is None or sink):
        registry = multiprocess_registry()
    elif sink:
        held: Any = registry
        registry = held.registry
    target = REGISTRY if registry is None else registry
    server, thread = start_http_server(port, addr=addr, registry=target)
    return MetricsServer(server, thread)
