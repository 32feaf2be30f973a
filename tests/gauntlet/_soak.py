"""The soak driver shared by ``test_soak.py`` (about 10 s) and ``python -m bench.gauntlet soak``
(minutes): paced calls through ``create_registry`` with every sink on.

Everything is real: spans go over OTLP/HTTP to a receiver process on 127.0.0.1, a scraper
thread reads ``/metrics`` from ``serve_metrics`` every second, log lines go to a file, the audit
trail is the default one (grouped fsync) and the built-in tools read and write real files. The
workload mixes a no-op tool (its latency *is* the registry's overhead), ``read_text``,
arguments holding a secret (redaction), parameter rejections, a failing tool, ``write_text``
and results big enough to be offloaded to artifacts.
"""

from __future__ import annotations

import array
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._figures import rss_bytes

#: The counting OTLP receiver, run as a process of its own.
COUNTER = Path(__file__).resolve().parents[1] / "support" / "otlp.py"


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _filled(n: int) -> array.array[float]:
    """``n`` zeroed doubles, every page already written (so resident before the first sample)."""
    return array.array("d", [0.0]) * max(n, 1)


class _Scraper(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(name="soak-scraper", daemon=True)
        self.url = url
        self.ok = 0
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    r.read()
                    self.ok += 1 if r.status == 200 else 0
            except OSError:
                self.failed += 1


def run_soak(
    seconds: float,
    rate: float,
    work: Path,
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Drive ``rate`` calls/s for ``seconds``; return the figures (see the module docstring)."""
    from prometheus_client import CollectorRegistry

    from tooltrace import Status, ToolCall, create_registry, tool
    from tooltrace.telemetry.metrics import MetricsSink, serve_metrics
    from tooltrace.telemetry.tracing import TracingSink

    proc = subprocess.Popen([sys.executable, str(COUNTER)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    ws = work / "ws"
    (ws / "notes").mkdir(parents=True, exist_ok=True)
    (ws / "notes" / "a.txt").write_text("alpha\n" * 40)
    log_file = open(work / "tooltrace.log", "wb")  # noqa: SIM115 (closed below)
    tracing = TracingSink(endpoint=f"http://127.0.0.1:{port}/v1/traces",
                          protocol="http/protobuf")
    reg = create_registry(ws, home=work / "home", tracing=False, extra_sinks=(tracing,),
                          log_stream=log_file, metrics_registry=CollectorRegistry())

    @tool(capability="read")
    def noop() -> None:
        """Do nothing (its call latency is the registry's overhead)."""

    @tool(capability="read")
    def echo(text: str, api_key: str = "") -> dict[str, str]:
        """Return the text."""
        return {"text": text}

    @tool(capability="read")
    def flaky(n: int) -> str:
        """Always fails."""
        raise ValueError(f"bad input {n}")

    @tool(capability="read")
    def big(n: int) -> str:
        """A result long enough to be offloaded."""
        return f"row {n}\n" * 4000

    for t in (noop, echo, flaky, big):
        reg.register(t)
    metrics = next(s for s in reg.sinks if isinstance(s, MetricsSink))
    server = serve_metrics(0, registry=metrics)
    scraper = _Scraper(server.url)
    scraper.start()

    def plan(i: int) -> ToolCall:
        k = i % 20
        if k < 10:
            return ToolCall("noop", {})
        if k in (10, 11):
            return ToolCall("read_text", {"path": "notes/a.txt"})
        if k in (12, 13):
            return ToolCall("echo", {"text": f"item {i}",
                                     "api_key": "sk-proj-Zq81kLmQ0pRt5vWy2AbCdEfGh3JkLmN4"})
        if k == 14:
            return ToolCall("echo", {"text": i})  # parameter rejection
        if k == 15:
            return ToolCall("flaky", {"n": i})
        if k == 16 and i % 100 == 16:
            return ToolCall("write_text", {"path": f"notes/w{i % 7}.txt", "text": f"v{i}"})
        if k == 17 and i % 200 == 17:
            return ToolCall("big", {"n": i})
        return ToolCall("noop", {})

    # Warm-up calls first, unpaced, with the same mix: the registry remembers the status of its
    # last 4,096 calls (for ``status(call_id)``), and filling that table (about 1.4 MiB), like
    # creating each metric child and the artifact store, is growth by design, not the steady
    # state the RSS target is about. Paced at 500/s it would take 8 of the CI run's 10 seconds.
    warmup = int(getattr(reg, "_status_cap", 4096)) + 1000
    for i in range(warmup):
        reg.call(plan(i))
    statuses: dict[str, int] = {}
    warm_s = max(2.0, seconds * 0.1)
    total = int(seconds * rate)
    # The driver's own bookkeeping must not grow with the calls, or the RSS it samples measures
    # itself: a Python float per call in a list is ~46 bytes, as much as the whole growth a
    # 10-minute run once reported. Latencies go to preallocated, already-touched arrays (8 bytes a
    # call, resident from the start), the no-op flag to a bytearray, RSS to one slot per second.
    lat_all = _filled(total)
    is_noop = bytearray(total)
    rss: list[tuple[float, int]] = [(0.0, 0)] * (int(seconds) + 2)
    n_rss = 0
    t0 = time.perf_counter()
    next_sample = t0
    behind = 0
    for i in range(total):
        due = t0 + i / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        elif now - due > 0.1:
            behind += 1
        call = plan(i)
        c0 = time.perf_counter()
        env = reg.call(call)
        lat_all[i] = time.perf_counter() - c0
        if call.name == "noop":
            is_noop[i] = 1
        statuses[env.status.value] = statuses.get(env.status.value, 0) + 1
        if c0 >= next_sample and n_rss < len(rss) - 1:
            rss[n_rss] = (c0 - t0, rss_bytes())
            n_rss += 1
            next_sample = c0 + 1.0
            if progress is not None and int(c0 - t0) % 30 == 0:
                mib = rss[n_rss - 1][1] / 2**20
                progress(f"{c0 - t0:6.0f} s  {i + 1} calls  rss {mib:.1f} MiB")
        assert env.status is not Status.UNKNOWN
    elapsed = time.perf_counter() - t0
    rss[n_rss] = (elapsed, rss_bytes())
    del rss[n_rss + 1:]
    lat_noop = [v for v, f in zip(lat_all, is_noop, strict=True) if f]
    reg.flush(30.0)
    drops = {getattr(s, "name", type(s).__name__): int(getattr(s, "dropped", 0) or 0)
             for s in reg.sinks}
    export_failures = int(tracing.export_failures)
    scraper.stop.set()
    scraper.join(5)
    reg.shutdown(timeout_s=30.0)
    server.close()
    log_file.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=5) as r:
        received = json.loads(r.read())
    proc.terminate()
    proc.wait(10)
    warm = next((v for t, v in rss if t >= warm_s), rss[0][1])
    end = statistics.median(v for t, v in rss if t >= elapsed * 0.9)
    with open(work / "tooltrace.log", "rb") as fh:
        log_lines = sum(1 for _ in fh)
    return {
        "seconds": round(elapsed, 1),
        "calls": total,
        "warmup_calls": warmup,
        "rate_per_s": round(total / elapsed, 1),
        "late_calls": behind,
        "statuses": statuses,
        "noop_p50_us": round(_pct(lat_noop, 0.50) * 1e6, 1),
        "noop_p99_us": round(_pct(lat_noop, 0.99) * 1e6, 1),
        "noop_p999_us": round(_pct(lat_noop, 0.999) * 1e6, 1),
        "all_p99_ms": round(_pct(list(lat_all), 0.99) * 1e3, 3),
        "rss_after_warmup_mib": round(warm / 2**20, 1),
        "rss_end_mib": round(end / 2**20, 1),
        "rss_growth_pct": round(100 * (end - warm) / warm, 2),
        "drops": drops,
        "export_failures": export_failures,
        "spans_received": int(received["spans"]),
        "log_lines": log_lines,
        "scrapes_ok": scraper.ok,
        "scrapes_failed": scraper.failed,
    }
