"""MetricsSink: the metric contract, closed label sets, scrape-time gauges, a real Prometheus."""

from __future__ import annotations

import io
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.otlp import closed_port
from support.prom import Prometheus, promtool_check_metrics
from support.telemetry import make_record

from tooltrace import ToolCall, ToolRegistry, tool
from tooltrace.model import Artifact, Stage, Status
from tooltrace.telemetry import Sink
from tooltrace.telemetry.logging import LoggingSink
from tooltrace.telemetry.metrics import (
    DURATION_BUCKETS,
    UNREGISTERED,
    MetricsSink,
    serve_metrics,
)
from tooltrace.telemetry.tracing import TracingSink
from tooltrace.testing import RecordingSink

STATUSES = {s.value for s in Status}
STAGES = {s.value for s in Stage}


def _samples(registry: CollectorRegistry) -> dict[str, list[Any]]:
    """Sample name -> samples, from a real text exposition."""
    out: dict[str, list[Any]] = defaultdict(list)
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[s.name].append(s)
    return out


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    matches = [s.value for s in _samples(registry)[name]
               if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matches) == 1, (name, labels, matches)
    return float(matches[0])


def _histogram_quantile(q: float, values: list[float], bounds: tuple[float, ...]) -> float:
    """PromQL's histogram_quantile over the classic buckets these values fall into."""
    upper = [*bounds, float("inf")]
    cumulative = [sum(1 for v in values if v <= b) for b in upper]
    rank = q * cumulative[-1]
    i = next(k for k, c in enumerate(cumulative) if c >= rank)
    if i == len(upper) - 1:
        return upper[-2]
    lower, below = (0.0, 0) if i == 0 else (upper[i - 1], cumulative[i - 1])
    return lower + (upper[i] - lower) * (rank - below) / (cumulative[i] - below)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace."""
    p = tmp_path / "ws"
    p.mkdir()
    return p


def test_counters_and_histograms_follow_the_contract() -> None:
    sink = MetricsSink(tool_names={"read_text", "write_text"})
    assert isinstance(sink, Sink)
    art = Artifact(path="artifacts/x", chars=10, bytes=10, sha256="00" * 32)
    for elapsed in (2_000, 20_000, 200_000):
        sink.emit(make_record("read_text", elapsed_us=elapsed))
    sink.emit(make_record("read_text", artifact=art))
    sink.emit(make_record("read_text", Status.FAILED, error_type="OSError"))
    sink.emit(make_record("write_text", Status.REJECTED, reject_stage=Stage.PARAMS))
    sink.emit(make_record("write_text", Status.REJECTED, reject_stage=Stage.POLICY))
    sink.emit(make_record("write_text", hook_modified=True))
    sink.emit(make_record("../../etc/passwd", Status.REJECTED, reject_stage=Stage.RESOLVE))
    reg = sink.registry

    assert _value(reg, "tooltrace_tool_calls_total", tool="read_text", status="ok") == 4
    assert _value(reg, "tooltrace_tool_calls_total", tool="read_text", status="failed") == 1
    assert _value(reg, "tooltrace_tool_calls_total", tool="write_text", status="rejected") == 2
    assert _value(reg, "tooltrace_tool_calls_total", tool=UNREGISTERED, status="rejected") == 1
    assert _value(reg, "tooltrace_tool_rejections_total", tool="write_text", stage="params") == 1
    assert _value(reg, "tooltrace_tool_rejections_total", tool="write_text", stage="policy") == 1
    assert _value(reg, "tooltrace_tool_rejections_total", tool=UNREGISTERED,
                  stage="resolve") == 1
    assert _value(reg, "tooltrace_tool_hook_modifications_total", tool="write_text") == 1
    assert _value(reg, "tooltrace_tool_offloads_total", tool="read_text") == 1
    dur = "tooltrace_tool_call_duration_seconds"
    assert _value(reg, f"{dur}_count", tool="read_text", status="ok") == 4
    assert _value(reg, f"{dur}_sum", tool="read_text", status="ok") == pytest.approx(0.2235)
    assert _value(reg, f"{dur}_bucket", tool="read_text", status="ok", le="0.001") == 0
    assert _value(reg, f"{dur}_bucket", tool="read_text", status="ok", le="0.0025") == 2
    assert _value(reg, f"{dur}_bucket", tool="read_text", status="ok", le="0.025") == 3
    assert _value(reg, f"{dur}_bucket", tool="read_text", status="ok", le="600.0") == 4
    # Every record that passed admission observed its wait (400 us in these records).
    wait = "tooltrace_tool_admission_wait_seconds"
    assert _value(reg, f"{wait}_count", tool="read_text") == 5
    assert _value(reg, f"{wait}_sum", tool="read_text") == pytest.approx(5 * 0.0004)
    # Fixed label names on every series.
    expected = {
        "tooltrace_tool_calls_total": {"tool", "status"},
        "tooltrace_tool_rejections_total": {"tool", "stage"},
        "tooltrace_tool_hook_modifications_total": {"tool"},
        "tooltrace_tool_offloads_total": {"tool"},
        f"{dur}_count": {"tool", "status"},
        f"{wait}_count": {"tool"},
    }
    samples = _samples(reg)
    for name, labels in expected.items():
        assert samples[name], name
        assert all(set(s.labels) == labels for s in samples[name]), name
    assert sink.dropped == 0


def test_tool_label_is_unregistered_until_bound_then_follows_the_registry(ws: Path) -> None:
    sink = MetricsSink()
    sink.emit(make_record("ping"))
    assert _value(sink.registry, "tooltrace_tool_calls_total", tool=UNREGISTERED,
                  status="ok") == 1
    reg = ToolRegistry(workspace=ws, home=ws.parent / "home", sinks=[sink])

    @tool()
    def ping() -> str:
        """Answer."""
        return "pong"

    # Registered after the sink was bound: still labelled by name from its first call on.
    reg.register(ping)
    assert reg.call(ToolCall("ping", {})).status is Status.OK
    assert reg.call(ToolCall("pong", {})).status is Status.REJECTED
    assert _value(sink.registry, "tooltrace_tool_calls_total", tool="ping", status="ok") == 1
    assert _value(sink.registry, "tooltrace_tool_rejections_total", tool=UNREGISTERED,
                  stage="resolve") == 1
    reg.shutdown(timeout_s=2.0)


def test_state_gauges_are_read_from_the_registry_at_scrape_time(ws: Path) -> None:
    sink = MetricsSink()
    release = threading.Event()
    started = threading.Semaphore(0)

    @tool(max_concurrency=2)
    def slow() -> str:
        """Wait for the test."""
        started.release()
        release.wait(10)
        return "done"

    @tool
    def quick() -> str:
        """No cap of its own."""
        return "done"

    reg = ToolRegistry(workspace=ws, home=ws.parent / "home", max_concurrency=8)
    reg.register(slow)
    reg.register(quick)
    reg.add_sink(sink)
    threads = [threading.Thread(target=reg.call, args=(ToolCall("slow", {}),)) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(2):
            assert started.acquire(timeout=10)
        deadline = time.monotonic() + 10
        while reg.queue_depth().get("slow", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        r = sink.registry
        assert _value(r, "tooltrace_tool_inflight", tool="slow") == 2
        assert _value(r, "tooltrace_tool_admission_queue_depth", tool="slow") == 1
        assert _value(r, "tooltrace_tool_concurrency_limit", tool="slow") == 2
        assert _value(r, "tooltrace_concurrency_limit") == 8
        # A tool without a cap of its own reports the global cap it runs under.
        assert _value(r, "tooltrace_tool_concurrency_limit", tool="quick") == 8
    finally:
        release.set()
        for t in threads:
            t.join(10)
    assert _value(sink.registry, "tooltrace_tool_inflight", tool="slow") == 0
    assert _value(sink.registry, "tooltrace_tool_calls_total", tool="slow", status="ok") == 3
    reg.shutdown(timeout_s=2.0)


def test_drops_and_queue_depths_of_every_sink_are_reported(ws: Path) -> None:
    metrics = MetricsSink()
    # A logging sink whose worker sleeps long and whose queue holds 5: 15 of 20 are dropped.
    logging_sink = LoggingSink(io.BytesIO(), max_queue=5, interval_s=30)
    tracing = TracingSink(endpoint=f"http://127.0.0.1:{closed_port()}/v1/traces", max_queue=3,
                          interval_s=30)
    reg = ToolRegistry(workspace=ws, home=ws.parent / "home",
                       sinks=[metrics, logging_sink, tracing])
    for _ in range(20):
        rec = make_record("x", handle=tracing.open_span("x"))
        logging_sink.emit(rec)
        tracing.emit(rec)
    r = metrics.registry
    assert _value(r, "tooltrace_telemetry_dropped_total", sink="logging") == 15
    assert _value(r, "tooltrace_telemetry_queue_depth", sink="logging") == 5
    assert _value(r, "tooltrace_telemetry_dropped_total", sink="tracing") == 17
    assert _value(r, "tooltrace_telemetry_queue_depth", sink="tracing") == 3
    assert _value(r, "tooltrace_telemetry_dropped_total", sink="metrics") == 0
    # Without a registry, watch() reports the same.
    lone = MetricsSink()
    lone.watch(logging_sink)
    assert _value(lone.registry, "tooltrace_telemetry_dropped_total", sink="logging") == 15
    tracing.shutdown(0.2)  # its collector is unreachable: do not wait for retries
    reg.shutdown(timeout_s=2.0)


def test_cardinality_stays_bounded_under_hostile_input() -> None:
    registered = {"read_text", "write_text"}
    sink = MetricsSink(tool_names=registered)
    statuses = list(Status)
    stages = list(Stage)
    n = 100_000
    for i in range(n):
        status = statuses[i % len(statuses)]
        name = (f"evil_{i % 10_000}/../../home/u{i}" if i % 2 else
                ("read_text", "write_text")[i % 4 // 2])
        sink.emit(make_record(
            name, status,
            reject_stage=stages[i % len(stages)] if status is Status.REJECTED else None,
            error_type=f"Error at /tmp/file{i}.txt: token={i}",
            args={"path": f"/home/user/{i}", "content": f"secret-{i}"},
            run_id=f"run-{i}",
            steps=(),
        ))
    assert sink.dropped == 0
    samples = _samples(sink.registry)
    allowed_tools = registered | {UNREGISTERED}
    label_sets: dict[str, set[tuple[tuple[str, str], ...]]] = defaultdict(set)
    for name, ss in samples.items():
        for s in ss:
            labels = {k: v for k, v in s.labels.items() if k != "le"}
            if "tool" in labels:
                assert labels["tool"] in allowed_tools, labels
            label_sets[name].add(tuple(sorted(labels.items())))
    t = len(allowed_tools)
    assert len(label_sets["tooltrace_tool_calls_total"]) <= t * len(STATUSES)
    assert len(label_sets["tooltrace_tool_call_duration_seconds_count"]) <= t * len(STATUSES)
    assert len(label_sets["tooltrace_tool_rejections_total"]) <= t * len(STAGES)
    for name in ("tooltrace_tool_offloads_total", "tooltrace_tool_hook_modifications_total",
                 "tooltrace_tool_admission_wait_seconds_count"):
        assert len(label_sets[name]) <= t
    assert sum(s.value for s in samples["tooltrace_tool_calls_total"]) == n
    unreg = sum(s.value for s in samples["tooltrace_tool_calls_total"]
                if s.labels["tool"] == UNREGISTERED)
    assert unreg == n // 2
    # Nothing per-call was kept either.
    assert len(sink._children) <= t


@pytest.fixture
def served() -> Iterator[tuple[MetricsSink, Any]]:
    """A sink with its metrics served on a free loopback port."""
    sink = MetricsSink(tool_names={"read_text"})
    with serve_metrics(0, registry=sink) as srv:
        yield sink, srv


def _get(url: str, accept: str | None = None) -> str:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=5) as r:
        return str(r.read().decode())


def test_exemplars_carry_trace_ids_in_openmetrics_only(served: tuple[MetricsSink, Any]) -> None:
    sink, srv = served
    tracing = TracingSink(enabled=True, endpoint=f"http://127.0.0.1:{closed_port()}/v1/traces")
    h = tracing.open_span("read_text")
    assert h is not None
    sink.emit(make_record(handle=h, elapsed_us=3_000))
    om = _get(srv.url, "application/openmetrics-text; version=1.0.0; charset=utf-8")
    assert f'# {{trace_id="{h.trace_id}"}} 0.003' in om
    assert om.rstrip().endswith("# EOF")
    text = _get(srv.url)
    assert h.trace_id not in text
    tracing.shutdown(0.5)


def test_exposition_passes_promtool_check_metrics(ws: Path) -> None:
    sink = MetricsSink()
    reg = ToolRegistry(workspace=ws, home=ws.parent / "home", sinks=[sink])

    @tool()
    def echo(text: str) -> str:
        """Echo."""
        return text

    reg.register(echo)
    reg.call(ToolCall("echo", {"text": "hi"}))
    reg.call(ToolCall("echo", {}))
    reg.call(ToolCall("nope", {}))
    with serve_metrics(0, registry=sink.registry) as srv:
        exposition = _get(srv.url)
    proc = promtool_check_metrics(exposition)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "" and proc.stderr.strip() == "", proc.stdout + proc.stderr
    assert "tooltrace_tool_calls_total" in exposition
    reg.shutdown(timeout_s=2.0)


def test_serve_metrics_close_frees_the_port() -> None:
    sink = MetricsSink()
    srv = serve_metrics(0, registry=sink)
    assert srv.addr == "127.0.0.1"
    assert "tooltrace_concurrency_limit" in _get(srv.url) or "tooltrace_tool" in _get(srv.url)
    srv.close()
    with pytest.raises(urllib.error.URLError):
        _get(srv.url)


def test_real_prometheus_scrapes_rates_and_quantiles_match_the_calls(ws: Path) -> None:
    sink = MetricsSink()
    tracing = TracingSink(enabled=True, endpoint=f"http://127.0.0.1:{closed_port()}/v1/traces",
                          max_queue=10)

    @tool()
    def work(ms: int) -> int:
        """Sleep for ``ms`` milliseconds."""
        time.sleep(ms / 1000)
        return ms

    recorded = RecordingSink()
    reg = ToolRegistry(workspace=ws, home=ws.parent / "home", tracer=tracing, sinks=[recorded])
    reg.register(work)
    reg.add_sink(sink)
    with serve_metrics(0, registry=sink) as srv, Prometheus(
        [f"127.0.0.1:{srv.port}"], extra_args=["--enable-feature=exemplar-storage"]
    ) as prom:
        prom.wait_for_up()
        sel = 'tool="work"'
        # The zero-valued series are scraped before any call, so rate() counts every call.
        prom.wait_until(f'sum(tooltrace_tool_calls_total{{{sel}}})', lambda v: v == 0)
        ok_fast, ok_slow, rejected = 0, 0, 0
        t_start = time.monotonic()
        for i in range(60):
            if i % 3 == 2:
                env = reg.call(ToolCall("work", {"ms": "not a number"}))
                assert env.reject_stage is Stage.PARAMS
                rejected += 1
            elif (ok_fast + ok_slow) % 5 == 4:
                assert reg.call(ToolCall("work", {"ms": 150})).ok  # in (0.1, 0.25] s
                ok_slow += 1
            else:
                assert reg.call(ToolCall("work", {"ms": 3})).ok  # well under 0.1 s
                ok_fast += 1
        drove_s = time.monotonic() - t_start
        total = ok_fast + ok_slow + rejected
        assert (ok_fast, ok_slow, rejected) == (32, 8, 20)
        prom.wait_until(f'sum(tooltrace_tool_calls_total{{{sel}}})', lambda v: v == total)
        ratio = prom.value(
            f'sum(rate(tooltrace_tool_rejections_total{{{sel},stage="params"}}[1m]))'
            f' / sum(rate(tooltrace_tool_calls_total{{{sel}}}[1m]))'
        )
        assert ratio == pytest.approx(rejected / total, abs=1e-9)
        rate = prom.value(f'sum(rate(tooltrace_tool_rejections_total{{{sel}}}[1m]))')
        assert rate is not None and rate * 60 >= rejected
        increase = prom.value(f'sum(increase(tooltrace_tool_rejections_total{{{sel}}}[1m]))')
        assert increase is not None and rejected <= increase <= rejected * 1.6
        assert drove_s > 0
        # 80 % of ok calls are fast, 20 % in (0.1, 0.25]: p95 interpolates inside the slow
        # bucket, to 0.2125 s on an idle machine. The expectation is computed from the
        # durations the calls really took, so a busy machine does not change the verdict.
        p95 = prom.value(
            'histogram_quantile(0.95, sum by (le) '
            f'(rate(tooltrace_tool_call_duration_seconds_bucket{{{sel},status="ok"}}[1m])))'
        )
        took = [r.elapsed_us / 1e6 for r in recorded.records if r.status is Status.OK]
        assert len(took) == ok_fast + ok_slow
        assert p95 == pytest.approx(_histogram_quantile(0.95, took, DURATION_BUCKETS), abs=1e-9)
        # Exemplars were scraped (OpenMetrics) and point at real trace ids.
        ex = prom.api("query_exemplars",
                      query=f'tooltrace_tool_call_duration_seconds_bucket{{{sel}}}',
                      start=time.time() - 120, end=time.time() + 5)
        trace_ids = {e["labels"]["trace_id"] for series in ex for e in series["exemplars"]}
        assert trace_ids and all(len(t) == 32 for t in trace_ids)
    reg.shutdown(timeout_s=2.0)
    tracing.shutdown(0.5)


def test_the_audit_backlog_is_reported_under_sink_audit(ws: Path) -> None:
    from tooltrace.telemetry import AuditSink

    metrics = MetricsSink()
    audit = AuditSink(home=ws.parent / "home", group_interval_ms=60_000, max_queue=4)
    reg = ToolRegistry(workspace=ws, home=ws.parent / "home", sinks=[metrics, audit])

    @tool()
    def ping() -> str:
        """Answer."""
        return "pong"

    reg.register(ping)
    for _ in range(6):
        reg.call(ToolCall("ping", {}))
    r = metrics.registry
    assert _value(r, "tooltrace_telemetry_queue_depth", sink="audit") == audit.depth
    assert _value(r, "tooltrace_telemetry_dropped_total", sink="audit") == audit.dropped
    assert audit.depth + audit.dropped >= 6 and audit.dropped >= 2
    reg.shutdown(timeout_s=5.0)
    assert _value(r, "tooltrace_telemetry_queue_depth", sink="audit") == 0


def test_each_bucket_takes_at_most_one_exemplar_per_interval() -> None:
    sink = MetricsSink(tool_names={"read_text"}, exemplar_interval_s=3600)
    tracing = TracingSink(enabled=True, endpoint=f"http://127.0.0.1:{closed_port()}/v1/traces")
    first, second, slow = (tracing.open_span("read_text") for _ in range(3))
    assert first is not None and second is not None and slow is not None
    sink.emit(make_record(handle=first, elapsed_us=3_000))
    sink.emit(make_record(handle=second, elapsed_us=3_100))  # same bucket, within the interval
    sink.emit(make_record(handle=slow, elapsed_us=2_000_000))  # another bucket: its own
    with serve_metrics(0, registry=sink) as srv:
        om = _get(srv.url, "application/openmetrics-text; version=1.0.0; charset=utf-8")
    assert f'trace_id="{first.trace_id}"' in om
    assert second.trace_id not in om
    assert f'trace_id="{slow.trace_id}"' in om
    # Every call is still counted and observed.
    assert 'tooltrace_tool_call_duration_seconds_count{status="ok",tool="read_text"} 3.0' in om
    # With no interval every call replaces its bucket's exemplar.
    eager = MetricsSink(tool_names={"read_text"}, exemplar_interval_s=0)
    eager.emit(make_record(handle=first, elapsed_us=3_000))
    eager.emit(make_record(handle=second, elapsed_us=3_100))
    with serve_metrics(0, registry=eager) as srv:
        om = _get(srv.url, "application/openmetrics-text; version=1.0.0; charset=utf-8")
    assert f'trace_id="{second.trace_id}"' in om and first.trace_id not in om
    tracing.shutdown(0.5)


def test_a_late_resolution_is_counted_by_its_final_outcome(ws: Path) -> None:
    """A side-effecting call abandoned at its deadline returns unknown; when it ends after
    all, the resolution is counted under its final outcome (and the call stays counted under
    the status it returned)."""

    release = threading.Event()

    @tool("slow_write", effect="local", timeout_s=5.0)
    def slow_write() -> str:
        """Write something, ignoring every signal until released (after its call returned)."""
        release.wait(30)
        return "written"

    sink = MetricsSink()
    reg = ToolRegistry(workspace=ws, sinks=[sink], cancel_grace_s=0.1)
    reg.register(slow_write)
    try:
        env = reg.call(ToolCall("slow_write", {}, timeout_s=0.1))
        release.set()
        assert env.status is Status.UNKNOWN
        deadline = time.monotonic() + 10.0
        while reg.status(env.call_id).resolved is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert reg.status(env.call_id).resolved is Status.OK
        m = sink.registry
        assert _value(m, "tooltrace_tool_calls_total", tool="slow_write", status="unknown") == 1
        assert _value(m, "tooltrace_tool_unknown_resolved_total", tool="slow_write",
                      outcome="ok") == 1
    finally:
        reg.shutdown(2.0)


def test_a_scrape_counts_every_call_finished_before_it() -> None:
    """Calls are counted on a worker thread; a scrape first counts what is still queued."""
    sink = MetricsSink(tool_names={"read_text"})
    assert sink.deferred
    for _ in range(500):
        sink.emit(make_record("read_text"))
    reg = sink.registry  # read at once: the worker's timer has not fired yet
    assert _value(reg, "tooltrace_tool_calls_total", tool="read_text", status="ok") == 500
    assert _value(reg, "tooltrace_tool_call_duration_seconds_count", tool="read_text",
                  status="ok") == 500
    assert sink.depth == 0 and sink.dropped == 0
    sink.shutdown()


def test_the_worker_counts_without_a_scrape_and_a_full_queue_drops_and_counts() -> None:
    sink = MetricsSink(tool_names={"read_text"}, max_queue=5)
    for _ in range(50):  # faster than the worker's timer: the queue fills
        sink.emit(make_record("read_text"))
    deadline = time.monotonic() + 30
    while sink.depth and time.monotonic() < deadline:  # the worker's timer, no scrape
        time.sleep(0.01)
    assert sink.depth == 0
    dropped = sink.dropped
    assert 0 < dropped <= 45
    reg = sink.registry
    assert _value(reg, "tooltrace_tool_calls_total", tool="read_text", status="ok") == \
        50 - dropped
    assert _value(reg, "tooltrace_telemetry_dropped_total", sink="metrics") == dropped
    sink.shutdown()
    sink.emit(make_record("read_text"))  # after shutdown: dropped, never raised
    assert sink.dropped == dropped + 1


def test_metrics_can_be_counted_inline() -> None:
    sink = MetricsSink(tool_names={"read_text"}, deferred=False)
    sink.emit(make_record("read_text"))
    assert not sink.deferred and sink.depth == 0
    assert _value(sink.registry, "tooltrace_tool_calls_total", tool="read_text",
                  status="ok") == 1


#: A tool whose calls all take 1.2 to 1.4 s gets bounds 50 ms apart there; the others keep the
#: default buckets (1 to 1.5 s in one bucket).
DEPLOY_BUCKETS = (0.5, 1.0, 1.1, 1.2, 1.25, 1.3, 1.35, 1.4, 1.5, 2.0, 5.0)


def _le_sets(exposition: str) -> dict[tuple[str, str], list[str]]:
    """(tool, status) -> the ``le`` values of its duration buckets, as exposed, in order."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for fam in text_string_to_metric_families(exposition):
        for s in fam.samples:
            if s.name == "tooltrace_tool_call_duration_seconds_bucket":
                out[(s.labels["tool"], s.labels["status"])].append(s.labels["le"])
    return out


def test_a_tool_s_own_buckets_label_its_series_in_the_one_histogram_family() -> None:
    sink = MetricsSink(tool_names={"deploy_service", "grep"}, deferred=False,
                       tool_buckets={"deploy_service": reversed(DEPLOY_BUCKETS)})
    sink.emit(make_record("deploy_service", elapsed_us=1_300_000))
    sink.emit(make_record("grep", elapsed_us=4_000))
    assert sink.buckets_of("deploy_service") == DEPLOY_BUCKETS
    assert sink.buckets_of("grep") == DURATION_BUCKETS == sink.buckets_of("not registered")
    text = generate_latest(sink.registry).decode()
    assert text.count("# TYPE tooltrace_tool_call_duration_seconds histogram") == 1
    les = _le_sets(text)
    assert les[("deploy_service", "ok")] == [*(str(b) for b in DEPLOY_BUCKETS), "+Inf"]
    assert les[("grep", "ok")] == [*(str(b) for b in DURATION_BUCKETS), "+Inf"]
    assert les[(UNREGISTERED, "failed")] == les[("grep", "ok")]
    assert _value(sink.registry, "tooltrace_tool_call_duration_seconds_bucket",
                  tool="deploy_service", status="ok", le="1.3") == 1
    assert _value(sink.registry, "tooltrace_tool_call_duration_seconds_bucket",
                  tool="deploy_service", status="ok", le="1.25") == 0
    proc = promtool_check_metrics(text)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "" and proc.stderr.strip() == "", proc.stdout + proc.stderr
    # The OpenMetrics exposition (what Prometheus asks for, with exemplars) parses too.
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

    om = om_latest(sink.registry).decode()  # type: ignore[no-untyped-call]
    fams = {f.name: f for f in om_parse(om)}  # type: ignore[no-untyped-call]
    assert {s.labels["le"] for s in fams["tooltrace_tool_call_duration_seconds"].samples
            if s.labels.get("tool") == "deploy_service" and "le" in s.labels} == {
        *(str(b) for b in DEPLOY_BUCKETS), "+Inf"}


@pytest.mark.parametrize("bad", [(), (0.0, 1.0), (-1.0,), (float("nan"),), ("soon",)])
def test_a_bad_bucket_set_is_refused_when_the_sink_is_made(bad: tuple[Any, ...]) -> None:
    with pytest.raises(ValueError, match="deploy_service"):
        MetricsSink(tool_buckets={"deploy_service": bad})


def test_real_prometheus_reads_each_tool_s_quantiles_from_its_own_buckets() -> None:
    import random

    rng = random.Random(37)
    took = {"deploy_service": [rng.uniform(1.2, 1.4) for _ in range(200)],
            "fetch": [rng.uniform(1.2, 1.4) for _ in range(200)]}  # the same, default buckets
    sink = MetricsSink(tool_names=set(took), deferred=False,
                       tool_buckets={"deploy_service": DEPLOY_BUCKETS})
    for name, values in took.items():
        for v in values:
            sink.emit(make_record(name, elapsed_us=round(v * 1e6)))
    with serve_metrics(0, registry=sink) as srv, Prometheus([f"127.0.0.1:{srv.port}"]) as prom:
        prom.wait_for_up()
        for name, bounds in (("deploy_service", DEPLOY_BUCKETS), ("fetch", DURATION_BUCKETS)):
            sel = f'tool="{name}",status="ok"'
            prom.wait_until(f"sum(tooltrace_tool_call_duration_seconds_count{{{sel}}})",
                            lambda v: v == 200)
            for q in (0.5, 0.95):
                got = prom.value(f"histogram_quantile({q}, sum by (le) "
                                 f"(tooltrace_tool_call_duration_seconds_bucket{{{sel}}}))")
                # What PromQL computes from this tool's own bounds, to the last digit.
                assert got == pytest.approx(
                    _histogram_quantile(q, took[name], bounds), abs=1e-9), (name, q)
        # The narrow buckets read the true quantiles within 2 %; the default ones do not.
        for q in (0.5, 0.95):
            exact = sorted(took["deploy_service"])[int(q * 200) - 1]
            own = _histogram_quantile(q, took["deploy_service"], DEPLOY_BUCKETS)
            default = _histogram_quantile(q, took["fetch"], DURATION_BUCKETS)
            assert abs(own - exact) / exact < 0.02 < abs(default - exact) / exact, (q, own)


def test_tool_buckets_hold_in_multiprocess_mode(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "from tooltrace.telemetry.metrics import MetricsSink, multiprocess_registry\n"
        "from prometheus_client import generate_latest\n"
        "from support.telemetry import make_record\n"
        f"s = MetricsSink(tool_names={{'deploy_service', 'grep'}},"
        f" tool_buckets={{'deploy_service': {DEPLOY_BUCKETS!r}}})\n"
        "assert not s.deferred\n"
        "s.emit(make_record('deploy_service', elapsed_us=1_300_000))\n"
        "s.emit(make_record('grep', elapsed_us=4_000))\n"
        "print(generate_latest(multiprocess_registry()).decode())\n"
    )
    env = {**__import__("os").environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
           "PYTHONPATH": str(Path(__file__).parent)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    les = _le_sets(out)
    assert les[("deploy_service", "ok")] == [*(str(b) for b in DEPLOY_BUCKETS), "+Inf"]
    assert les[("grep", "ok")] == [*(str(b) for b in DURATION_BUCKETS), "+Inf"]
    proc = promtool_check_metrics(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_tool_definition_s_latency_buckets_are_its_series_buckets(tmp_path: Path) -> None:
    @tool("deploy_service", execution="inline", latency_buckets=reversed(DEPLOY_BUCKETS))
    def deploy_service() -> str:
        return "done"

    @tool("grep", execution="inline")
    def grep() -> str:
        return "found"

    sink = MetricsSink(deferred=False)
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", sinks=[sink])
    try:
        reg.register(deploy_service)
        reg.register(grep)
        assert reg.definition("deploy_service").latency_buckets == tuple(  # type: ignore[union-attr]
            reversed(DEPLOY_BUCKETS))
        assert reg.call(ToolCall("deploy_service", {})).ok
        assert reg.call(ToolCall("grep", {})).ok
    finally:
        reg.shutdown()
    assert sink.buckets_of("deploy_service") == DEPLOY_BUCKETS
    assert sink.buckets_of("grep") == DURATION_BUCKETS
    les = _le_sets(generate_latest(sink.registry).decode())
    assert les[("deploy_service", "ok")] == [*(str(b) for b in DEPLOY_BUCKETS), "+Inf"]
    assert les[("grep", "ok")] == [*(str(b) for b in DURATION_BUCKETS), "+Inf"]


@pytest.mark.parametrize("bad", [(), (0.0, 1.0), (-1.0,), (float("nan"),), ("soon",), (True,)])
def test_a_bad_latency_bucket_set_is_refused_at_registration(bad: tuple[Any, ...]) -> None:
    from tooltrace import RegistrationError

    with pytest.raises(RegistrationError, match="latency_buckets"):
        tool("deploy_service", latency_buckets=bad)(lambda: "done")
