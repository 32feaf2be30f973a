"""The proxy's audit at its start and stop: its segment opens at start
(``AuditSink.open_segment``), so the records of its calls reach the disk without waiting for
the opening's ``fsync`` calls, and a client that stops the proxy as the official client does
(stdin closed, signals 2 s later) finds them in the trail."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import orjson
from mcp import ClientSession, StdioServerParameters, stdio_client
from test_mcp_proxy import REPO, audit_rows, call_id, text_of, toy_server, write_config

from tooltrace.audit import verify
from tooltrace.mcp import McpProxy, load_config


def _config(tmp: Path) -> Path:
    return write_config(tmp, '[proxy]\nhome = "home"\n' + toy_server("toy"))


def _live_segments(home: Path) -> list[Path]:
    return sorted((home / "audit" / "segments").glob("*.live.jsonl"))


def test_the_segment_opens_at_start_before_any_call(tmp_path: Path) -> None:
    config = _config(tmp_path)
    home = tmp_path / "home"

    async def scenario() -> list[str]:
        proxy = McpProxy(load_config(config))
        try:
            await proxy.start()
            deadline = time.monotonic() + 30
            while not _live_segments(home) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            live = _live_segments(home)
            assert len(live) == 1, "no segment opened within 30 s of the start"
            return [orjson.loads(x)["k"] for x in live[0].read_bytes().splitlines()]
        finally:
            await proxy.aclose()

    assert asyncio.run(scenario()) == ["open"]  # no call yet: the header alone
    assert not _live_segments(home)  # sealed at the stop
    rep = verify(home)
    assert rep.ok and rep.segments == 1 and rep.records == 0, rep.findings


def test_calls_are_in_the_trail_after_the_official_clients_own_shutdown(tmp_path: Path) -> None:
    # The SDK's stdio client as it comes (the other proxy tests give the proxy longer to exit).
    # Its grace is a bound in seconds; the proxy's stop takes milliseconds, unless the disk
    # takes most of a second per fsync: with fsync off, the disk's speed is not what is tested.
    config = _config(tmp_path)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tooltrace.mcp", "proxy", "--config", str(config)],
        cwd=str(tmp_path), env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error",
                                "TOOLTRACE_AUDIT_FSYNC": "none"})

    async def scenario() -> list[object]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await asyncio.wait_for(s.initialize(), 60)
            return [await s.call_tool("echo", {"text": w}) for w in ("one", "two")]

    results = asyncio.run(scenario())
    assert [text_of(r) for r in results] == ["toy:one", "toy:two"]
    rows = audit_rows(tmp_path / "home")
    assert [rows[call_id(r)]["status"] for r in results] == ["ok", "ok"]
    rep = verify(tmp_path / "home")
    assert rep.ok and rep.records == 2, rep.findings
