"""``subscriptions/listen`` through the proxy (2026-07-28) for resource updates: the resources
a client's listen stream asks for are asked of the upstream on the proxy's own listen stream,
and an update the upstream announces reaches the client's stream, tagged with its subscription
id; an update of a resource it did not ask for does not. The upstream is the SDK ``MCPServer``
``tests/mcp_servers/watching.py`` (``touch(uri)`` announces an update).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
from support.mcp_client import until_answering
from support.otlp import free_port

from tooltrace.mcp import McpProxy, ProxyConfig, ServerConfig, serve_http

WATCHING = str(Path(__file__).parent / "mcp_servers" / "watching.py")
MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}
HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": MODERN}


def _touch(uri: str, n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "touch", "arguments": {"uri": uri}, "_meta": META}}


def test_resource_updates_asked_on_a_listen_stream_reach_it(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"

    async def scenario() -> tuple[list[dict[str, Any]], frozenset[str]]:
        config = ProxyConfig(home=str(tmp_path / "home"), workspace=str(tmp_path), servers=(
            ServerConfig(label="w", command=sys.executable, args=(WATCHING,)),))
        proxy = McpProxy(config)
        await proxy.start()
        up = proxy.upstreams["w"]
        stop = asyncio.Event()
        serving = asyncio.ensure_future(serve_http(proxy, "127.0.0.1", port, stop=stop))
        frames: list[dict[str, Any]] = []
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                await until_answering(http, url)
                listen = {"jsonrpc": "2.0", "id": "sub-7", "method": "subscriptions/listen",
                          "params": {"notifications": {"resourceSubscriptions": ["note://a"]},
                                     "_meta": META}}
                call = {**HEADERS, "mcp-method": "tools/call", "mcp-name": "touch"}
                async with http.stream("POST", url, json=listen, headers={
                        **HEADERS, "mcp-method": "subscriptions/listen"}) as stream:
                    lines = stream.aiter_lines()

                    async def frame() -> dict[str, Any]:
                        async for line in lines:
                            if line.startswith("data:"):
                                return dict(json.loads(line[5:]))
                        raise AssertionError("the listen stream ended")

                    frames.append(await frame())  # the acknowledgment
                    for _ in range(1000):  # the proxy's own stream, asking for note://a
                        if up.watching == {"note://a"}:
                            break
                        await asyncio.sleep(0.01)
                    asked = up.watching
                    await http.post(url, json=_touch("note://b", 1), headers=call)
                    await http.post(url, json=_touch("note://a", 2), headers=call)
                    frames.append(await frame())
        finally:
            stop.set()
            await serving
            await proxy.aclose()
        return frames, asked

    (ack, update), asked = asyncio.run(scenario())
    assert asked == {"note://a"}
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"resourceSubscriptions": ["note://a"]}
    # note://b was touched first and not asked for: the first update is note://a's.
    assert update["method"] == "notifications/resources/updated"
    assert update["params"]["uri"] == "note://a"
    assert update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "sub-7"
