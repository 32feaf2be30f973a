"""Metrics stay right when an agent service runs several worker processes on one host.

Four real worker processes share one ``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's
multiprocess mode); each makes its own mix of calls through a ``ToolRegistry`` with a
``MetricsSink``, and one of them also serves ``/metrics`` with ``serve_metrics``. A real
Prometheus scrapes that one endpoint: its totals per tool and status, the rejections and the
duration histogram's counts equal the calls all four made. The same worker's own registry,
served on a second port, shows only its own calls: what a scrape would see without the mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from support.sre_prom import PrometheusServer, free_port

WORKER = r"""
import json, sys, time
from pathlib import Path
from tooltrace import ToolCall, ToolRegistry, tool
from tooltrace.telemetry.metrics import MetricsSink, serve_metrics

ws, plan, ports, go = Path(sys.argv[2]), json.loads(sys.argv[3]), \
    json.loads(sys.argv[4]), Path(sys.argv[5])
ws.mkdir(parents=True, exist_ok=True)


@tool(capability="read")
def lookup(key: str) -> str:
    '''Look a key up.'''
    return key.upper()


@tool(capability="read")
def flaky(key: str) -> str:
    '''Fail.'''
    raise RuntimeError("upstream down")


sink = MetricsSink()
assert not sink.deferred  # multiprocess mode: counted inline, nothing left in a queue at exit
reg = ToolRegistry(workspace=ws, home=ws / "home", sinks=[sink])
reg.register(lookup)
reg.register(flaky)
servers = []
if ports:
    servers.append(serve_metrics(ports[0], registry=sink))  # the sum over every process
    servers.append(serve_metrics(ports[1], registry=sink.registry))  # this process only
for name, args, n in plan:
    for _ in range(n):
        reg.call(ToolCall(name, args))
reg.shutdown()
print("done", flush=True)
if ports:
    while not go.exists():
        time.sleep(0.05)
"""

# Each worker's calls: (tool, arguments, how many). A wrong argument type is rejected (params).
PLANS = [
    [["lookup", {"key": "a"}, 40], ["flaky", {"key": "a"}, 5], ["lookup", {"key": 1}, 3]],
    [["lookup", {"key": "b"}, 25], ["flaky", {"key": "b"}, 9]],
    [["lookup", {"key": "c"}, 31], ["lookup", {"key": 2}, 7], ["flaky", {"key": "c"}, 2]],
    [["lookup", {"key": "d"}, 17], ["flaky", {"key": "d"}, 11], ["lookup", {"key": 3}, 1]],
]


def _expected() -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for plan in PLANS:
        for name, args, n in plan:
            status = ("rejected" if not isinstance(args["key"], str)
                      else "failed" if name == "flaky" else "ok")
            out[(name, status)] = out.get((name, status), 0) + n
    return out


def _by_tool_status(rows: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    return {(r["metric"]["tool"], r["metric"]["status"]): round(float(r["value"][1]))
            for r in rows if float(r["value"][1]) > 0}


def test_four_worker_processes_are_counted_as_one_service(tmp_path: Path) -> None:
    mpdir = tmp_path / "prom-mp"
    mpdir.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(mpdir)}
    ports = [free_port(), free_port()]
    go = tmp_path / "go"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(i), str(tmp_path / f"ws{i}"), json.dumps(plan),
             json.dumps(ports if i == 0 else []), str(go)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i, plan in enumerate(PLANS)
    ]
    try:
        for w in workers[1:]:
            out, err = w.communicate(timeout=120)
            assert w.returncode == 0 and "done" in out, err
        assert workers[0].stdout is not None
        assert workers[0].stdout.readline().strip() == "done"
        expected = _expected()
        total = sum(expected.values())
        with PrometheusServer([f"127.0.0.1:{p}" for p in ports]) as prom:
            agg = f'instance="127.0.0.1:{ports[0]}"'
            prom.wait_for(f"sum(tooltrace_tool_calls_total{{{agg}}}) == {total}", 60)
            calls = _by_tool_status(prom.query(
                f"sum by (tool, status) (tooltrace_tool_calls_total{{{agg}}})"))
            assert calls == expected
            counts = _by_tool_status(prom.query(
                f"sum by (tool, status) (tooltrace_tool_call_duration_seconds_count{{{agg}}})"))
            assert counts == expected
            rejected = prom.query(
                f'sum(tooltrace_tool_rejections_total{{{agg}, stage="params"}})')
            assert round(float(rejected[0]["value"][1])) == expected[("lookup", "rejected")]
            # The same process's own registry counts only its own 48 calls.
            own = f'instance="127.0.0.1:{ports[1]}"'
            rows = prom.wait_for(f"sum(tooltrace_tool_calls_total{{{own}}})", 30)
            assert round(float(rows[0]["value"][1])) == sum(n for _, _, n in PLANS[0]) < total
    finally:
        go.touch()
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
