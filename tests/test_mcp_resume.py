"""SSE streams of the proxy's HTTP front are primed and resumable (2025-11-25): each stream
opens with an event that has an id, no data and the ``retry`` wait; a client whose stream broke
during a call reconnects with ``Last-Event-ID`` and gets the rest (the progress it missed, then
the answer), with no event twice. The upstream is ``tests/mcp_servers/wire.py``, whose ``slow``
tool reports progress marks apart, then answers.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from support.mcp_client import until_answering
from support.otlp import free_port

from tooltrace.mcp import McpProxy, ProxyConfig, ServerConfig, serve_http
from tooltrace.mcp._resume import RETRY_MS

WIRE = str(Path(__file__).parent / "mcp_servers" / "wire.py")
OLD = "2025-11-25"
HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": OLD}


async def _events(response: httpx.Response) -> AsyncIterator[dict[str, str]]:
    """The SSE events of ``response`` as they arrive (fields by name)."""
    event: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        event[name] = event.get(name, "") + value.removeprefix(" ")


def test_a_broken_stream_resumes_where_it_broke(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"

    async def scenario() -> dict[str, Any]:
        config = ProxyConfig(home=str(tmp_path / "home"), workspace=str(tmp_path), servers=(
            ServerConfig(label="wire", command=sys.executable, args=(WIRE,)),))
        proxy = McpProxy(config)
        await proxy.start()
        stop = asyncio.Event()
        serving = asyncio.ensure_future(serve_http(proxy, "127.0.0.1", port, stop=stop))
        out: dict[str, Any] = {}
        try:
            async with httpx.AsyncClient(timeout=60) as http:
                await until_answering(http, url)
                async with http.stream("POST", url, headers=HEADERS, json={
                        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                            "protocolVersion": OLD, "capabilities": {},
                            "clientInfo": {"name": "raw", "version": "1"}}}) as r:
                    session = r.headers["mcp-session-id"]
                    out["init"] = [e async for e in _events(r)]
                headers = {**HEADERS, "mcp-session-id": session}
                await http.post(url, headers=headers, json={
                    "jsonrpc": "2.0", "method": "notifications/initialized"})
                call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                    "name": "slow", "arguments": {"steps": 6, "gap": 0.2},
                    "_meta": {"progressToken": "p"}}}
                before: list[dict[str, str]] = []
                async with http.stream("POST", url, headers=headers, json=call) as r:
                    async for e in _events(r):
                        before.append(e)
                        if sum(1 for b in before if b.get("data")) == 2:
                            break  # the client's connection breaks here
                out["before"] = before
                after: list[dict[str, str]] = []
                async with http.stream("GET", url, headers={
                        **headers, "last-event-id": before[-1]["id"]}) as r:
                    async for e in _events(r):
                        after.append(e)
                        if '"id":2' in e.get("data", "").replace(" ", ""):
                            break
                out["after"] = after
        finally:
            stop.set()
            await serving
            await proxy.aclose()
        return out

    out = asyncio.run(scenario())
    priming = out["init"][0]
    assert priming.get("id") and priming.get("data", "") == "" and priming["retry"] == str(
        RETRY_MS)
    assert out["before"][0].get("data", "") == "" and out["before"][0].get("retry")
    seen = [json.loads(e["data"]) for e in out["before"] + out["after"] if e.get("data")]
    marks = [m["params"]["progress"] for m in seen if m.get("method") == "notifications/progress"]
    assert marks == [1, 2, 3, 4, 5, 6]  # each once, in order, across the break
    assert seen[-1]["id"] == 2 and seen[-1]["result"]["content"][0]["text"] == "slow done"
    ids = [e["id"] for e in out["before"] + out["after"] if e.get("id")]
    assert len(ids) == len(set(ids))
