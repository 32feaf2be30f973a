"""The default call-duration buckets against the real durations: calls from 1 ms to 10 minutes
go through a real ``MetricsSink``, a real Prometheus scrapes it, and ``histogram_quantile``
(what the p50/p95 recording rules compute) lands within 25% of the exact p50 and p95 of those
durations (a constant duration just above a bound is the worst case: 1.2 ms reads 1.475 ms at
p95), where the buckets before (1-2.5 s in one bucket) read 1.30 s calls 35% and 86% off."""

from __future__ import annotations

import itertools
import math
import random
import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from prometheus_client import make_wsgi_app
from support.sre_prom import PrometheusServer
from support.telemetry import make_record

from tooltrace.telemetry.metrics import DURATION_BUCKETS, MetricsSink

#: Durations in seconds per tool: constant, narrow and wide spreads across the whole range.
rng = random.Random(37)
DURATIONS: dict[str, list[float]] = {
    "deploy_service": [1.30] * 40,  # every call took 1.30 s
    "grep": [10 ** rng.uniform(-3, -1.7) for _ in range(400)],  # 1 to 20 ms
    "fetch": [rng.gauss(0.4, 0.05) for _ in range(400)],
    "build": [rng.uniform(30, 90) for _ in range(200)],
    "migrate": [rng.uniform(120, 590) for _ in range(100)],  # 2 to 10 minutes
    "tiny": [0.0012] * 50,
}
TOLERANCE = 0.25


def _exact(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, math.ceil(q * len(s)) - 1)]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def scraped() -> Iterator[PrometheusServer]:
    sink = MetricsSink(tool_names=DURATIONS, deferred=False)
    for tool, values in DURATIONS.items():
        for v in values:
            sink.emit(make_record(tool, elapsed_us=round(v * 1e6)))
    server: WSGIServer = make_server("127.0.0.1", 0, make_wsgi_app(sink.registry),
                                     handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with PrometheusServer([f"127.0.0.1:{server.server_port}"]) as prom:
            prom.wait_for(f"count(count by (tool) ({DURATION}_count)) > {len(DURATIONS)}", 60)
            yield prom
    finally:
        server.shutdown()


DURATION = "tooltrace_tool_call_duration_seconds"


@pytest.mark.parametrize("q", [0.5, 0.95])
@pytest.mark.parametrize("tool", sorted(DURATIONS))
def test_default_buckets_give_p50_and_p95_close_to_the_real_durations(
        scraped: PrometheusServer, tool: str, q: float) -> None:
    expr = f'histogram_quantile({q}, sum by (le) ({DURATION}_bucket{{tool="{tool}"}}))'
    got = scraped.value(expr)
    want = _exact(DURATIONS[tool], q)
    assert got is not None
    assert abs(got - want) / want <= TOLERANCE, (tool, q, got, want)


def test_the_buckets_cover_1_ms_to_10_minutes_at_most_1_5x_apart() -> None:
    assert DURATION_BUCKETS[0] == 0.001 and DURATION_BUCKETS[-1] == 600.0
    ratios = [b / a for a, b in itertools.pairwise(DURATION_BUCKETS)]
    assert max(ratios) <= 1.5 + 1e-9
