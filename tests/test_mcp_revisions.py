"""Protocol revisions across the proxy, against the conformance suite's reference server (it
speaks 2025-11-25 with sessions and 2026-07-28 stateless requests; installed by
``.ci/setup.d/42-mcp-conformance.sh``):

- the proxy speaks 2026-07-28 to it, and keeps a 2025-11-25 connection for the clients that
  speak that revision; ``protocol_version`` in the server's configuration pins one revision;
- a 2025-11-25 client calls a tool the server offers at 2026-07-28 only, which answers with an
  ``InputRequiredResult``: the proxy asks the client (``elicitation/create``, a server request
  of its revision) and retries with the answer, and the client gets the tool's result;
- a 2026-07-28 client gets the ``InputRequiredResult`` itself, as the server sent it (but
  for the elicitation's ``mode: "form"``, the default the SDK's front end writes out).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp.types as mt
import pytest
from mcp import ClientSession
from mcp.shared.memory import create_client_server_memory_streams
from support.mcp_client import until_answering
from support.otlp import free_port
from test_mcp_conformance import NODE, REFERENCE, TSX, _installed, _serve, _stop

from tooltrace.mcp import McpProxy, ProxyConfig, ServerConfig, build_server, serve_http

MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def reference() -> Iterator[str]:
    """The reference server over streamable HTTP: its URL."""
    _installed()
    import os

    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = _serve([str(NODE), str(TSX), "everything-server.ts"],
                    {**os.environ, "PORT": str(port)}, url, REFERENCE)
    try:
        yield url
    finally:
        _stop(server)


def _config(tmp: Path, url: str, **server: Any) -> ProxyConfig:
    return ProxyConfig(home=str(tmp / "home"), workspace=str(tmp),
                       servers=(ServerConfig(label="ref", url=url, **server),))


def test_the_newest_revision_both_speak_and_a_connection_at_the_older_one(
        reference: str, tmp_path: Path) -> None:
    async def scenario() -> list[tuple[str | None, str | None]]:
        out = []
        for pinned in ({}, {"protocol_version": "2025-11-25"}, {"protocol_version": MODERN}):
            proxy = McpProxy(_config(tmp_path, reference, **pinned))
            await proxy.start()
            try:
                up = proxy.upstreams["ref"]
                out.append((up.protocol_version,
                            up.twin.protocol_version if up.twin is not None else None))
            finally:
                await proxy.aclose()
        return out

    assert asyncio.run(scenario()) == [(MODERN, "2025-11-25"), ("2025-11-25", None),
                                       (MODERN, None)]


def test_an_older_client_is_asked_what_the_server_asks_in_a_result(
        reference: str, tmp_path: Path) -> None:
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> mt.ElicitResult:
        asked.append(str(params.message))
        return mt.ElicitResult(action="accept", content={"name": "Ada"})

    async def scenario() -> mt.CallToolResult:
        proxy = McpProxy(_config(tmp_path, reference))
        await proxy.start()
        server = build_server(proxy, "stdio")
        try:
            async with create_client_server_memory_streams() as (client, srv), \
                    anyio.create_task_group() as tg:
                tg.start_soon(lambda: server.run(srv[0], srv[1],
                                                 server.create_initialization_options()))
                async with ClientSession(client[0], client[1],
                                         elicitation_callback=elicit) as session:
                    init = await session.initialize()
                    assert init.protocol_version == "2025-11-25"
                    res = await session.call_tool("test_input_required_result_elicitation", {})
                tg.cancel_scope.cancel()
            return res
        finally:
            await proxy.aclose()

    res = asyncio.run(scenario())
    assert not res.is_error, res
    assert asked == ["What is your name?"]
    assert [c.text for c in res.content if isinstance(c, mt.TextContent)] == ["Hello, Ada!"]


def test_a_client_of_the_newest_revision_gets_the_request_for_input_as_sent(
        reference: str, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "test_input_required_result_elicitation", "arguments": {},
                       "_meta": meta}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": MODERN,
               "mcp-method": "tools/call", "mcp-name": "test_input_required_result_elicitation"}

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        proxy = McpProxy(_config(tmp_path, reference))
        await proxy.start()
        stop = asyncio.Event()
        serving = asyncio.ensure_future(serve_http(proxy, "127.0.0.1", port, stop=stop))
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                await until_answering(http, url)
                through = await http.post(url, json=body, headers=headers)
                direct = await http.post(reference, json=body, headers=headers)
            return _message(through.text), _message(direct.text)
        finally:
            stop.set()
            await serving
            await proxy.aclose()

    through, direct = asyncio.run(scenario())
    got, want = through["result"], direct["result"]
    assert got["resultType"] == want["resultType"] == "input_required"
    # As sent, but for the default the SDK's front end writes out (an elicitation's mode).
    for request in got["inputRequests"].values():
        if request["params"].get("mode") == "form":
            del request["params"]["mode"]
    assert got["inputRequests"] == want["inputRequests"]
    assert isinstance(got.get("requestState"), str) or "requestState" not in want


def _message(text: str) -> dict[str, Any]:
    """The JSON-RPC message of a response body (JSON, or one server-sent event)."""
    if text.lstrip().startswith("{"):
        return dict(json.loads(text))
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return dict(json.loads(data[-1]))


def test_a_change_the_server_announces_reaches_a_listen_stream(reference: str,
                                                             tmp_path: Path) -> None:
    # The proxy listens to the server (2026-07-28) for changes; a change made on the server
    # (its hook called directly, not through the proxy) reaches a client's listen stream on
    # the proxy, tagged with that stream's subscription id.
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": MODERN}

    async def scenario() -> list[dict[str, Any]]:
        proxy = McpProxy(_config(tmp_path, reference))
        await proxy.start()
        stop = asyncio.Event()
        serving = asyncio.ensure_future(serve_http(proxy, "127.0.0.1", port, stop=stop))
        frames: list[dict[str, Any]] = []
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                await until_answering(http, url)
                listen = {"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
                          "params": {"notifications": {"toolsListChanged": True},
                                     "_meta": meta}}
                async with http.stream("POST", url, json=listen, headers={
                        **headers, "mcp-method": "subscriptions/listen"}) as stream:
                    lines = stream.aiter_lines()
                    async for line in lines:
                        if line.startswith("data:"):
                            frames.append(json.loads(line[5:]))
                            break  # the acknowledgment
                    await proxy.upstreams["ref"].listening.wait()
                    trigger = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                        "name": "test_trigger_tool_change", "arguments": {}, "_meta": meta}}
                    await http.post(reference, json=trigger, headers={
                        **headers, "mcp-method": "tools/call",
                        "mcp-name": "test_trigger_tool_change"})
                    async for line in lines:
                        if line.startswith("data:"):
                            frames.append(json.loads(line[5:]))
                            break
        finally:
            stop.set()
            await serving
            await proxy.aclose()
        return frames

    ack, change = asyncio.run(scenario())
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"toolsListChanged": True}
    assert change["method"] == "notifications/tools/list_changed"
    assert change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "sub-1"
