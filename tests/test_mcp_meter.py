"""``tooltrace mcp proxy`` exports its operation-duration histograms over OTLP when the standard
environment asks for it: the proxy runs as a subprocess with ``OTEL_EXPORTER_OTLP_ENDPOINT`` and
``OTEL_METRICS_EXPORTER=otlp`` pointing at a real OTLP/HTTP receiver on loopback, an SDK client
makes a few requests (one of them for an unknown tool), and the histograms
``mcp.server.operation.duration`` and ``mcp.client.operation.duration`` arrive (flushed when
the proxy stops) with labels from closed sets only.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from support.otlp_metrics import OtlpMetricsReceiver, ReceivedPoint
from test_mcp_notifications import NOTIFYING
from test_mcp_proxy import REPO

from tooltrace.mcp._meter import otlp_meter_provider
from tooltrace.mcp._telemetry import ERROR_TYPES, METHODS

SERVER, CLIENT = "mcp.server.operation.duration", "mcp.client.operation.duration"


def _run(env: dict[str, str], cwd: str) -> dict[str, Any]:
    async def scenario() -> dict[str, Any]:
        res: dict[str, Any] = {}
        params = StdioServerParameters(
            command=sys.executable, cwd=cwd,
            args=["-m", "tooltrace.mcp", "proxy", "--home", "home", "--name", "notifying", "--",
                  sys.executable, NOTIFYING],
            env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error", **env})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await asyncio.wait_for(s.initialize(), 60)
            await s.list_tools()
            res["touch"] = await s.call_tool("touch", {"uri": "note://a"})
            try:
                await s.call_tool("no_such_tool", {})
            except MCPError as exc:
                res["unknown"] = exc.error.code
            await s.read_resource("note://a")
        return res

    return asyncio.run(scenario())


def _wait(rx: OtlpMetricsReceiver, name: str) -> list[ReceivedPoint]:
    for _ in range(200):  # the proxy flushes as it stops: bounded wait for the export
        if rx.histogram(name):
            return rx.histogram(name)
        time.sleep(0.1)
    raise AssertionError(f"no {name} histogram arrived")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("meter")
    with OtlpMetricsReceiver() as rx:
        res = _run({"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "OTEL_METRICS_EXPORTER": "otlp",
                    "OTEL_METRIC_EXPORT_INTERVAL": "60000"}, str(tmp))
        res["server"], res["client"] = _wait(rx, SERVER), _wait(rx, CLIENT)
    return res


def _last(points: list[ReceivedPoint]) -> dict[tuple[tuple[str, Any], ...], ReceivedPoint]:
    # Cumulative temporality: the last export of each attribute set holds the totals.
    return {tuple(sorted(p.attributes.items())): p for p in points}


def test_server_histogram_counts_each_method_with_closed_labels(exported: dict[str, Any]
                                                                ) -> None:
    assert exported["unknown"] == -32602 and not exported["touch"].is_error
    points = _last(exported["server"]).values()
    counts = {(p.attributes["mcp.method.name"], p.attributes.get("error.type")): p.count
              for p in points}
    assert counts[("tools/call", None)] == 1
    assert counts[("tools/call", "-32602")] == 1
    assert counts[("resources/read", None)] == 1
    assert counts[("tools/list", None)] >= 1
    for p in points:
        assert set(p.attributes) <= {"mcp.method.name", "error.type"}
        assert p.attributes["mcp.method.name"] in METHODS | {"_other"}
        assert p.attributes.get("error.type", "tool_error") in ERROR_TYPES | {"_other"}
        assert p.unit == "s" and p.bounds[:3] == (0.001, 0.0025, 0.005)
        assert p.total > 0


def test_client_histogram_labels_name_the_configured_server(exported: dict[str, Any]) -> None:
    points = list(_last(exported["client"]).values())
    # The scenario's call and its read, each sent upstream once.
    assert sorted((p.attributes["mcp.method.name"], p.attributes, p.count) for p in points) == [
        ("resources/read", {"mcp.method.name": "resources/read",
                            "tooltrace.mcp.server": "notifying"}, 1),
        ("tools/call", {"mcp.method.name": "tools/call", "tooltrace.mcp.server": "notifying"}, 1)]


def test_no_otlp_metrics_unless_the_environment_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert otlp_meter_provider() is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    assert otlp_meter_provider() is None
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert otlp_meter_provider() is None
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    provider = otlp_meter_provider()
    assert provider is not None
    provider.shutdown(timeout_millis=100)
