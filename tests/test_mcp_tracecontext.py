"""One trace across the MCP proxy: the client's trace context in ``params._meta`` is the parent of
the proxy's SERVER span, and what the proxy sends upstream carries, in its own ``params._meta``,
the context of a span of that request's trace (the proxy's CLIENT span, inside the SERVER span).

A real OTLP receiver on loopback gets the proxy's spans; the upstream (``toy.py``, written
against the wire) answers a ``tools/call``, a ``resources/read`` and a ``prompts/get`` with the
``_meta`` it received, so the test sees both ends: one trace id from the client to the upstream,
every parent link in place, and the client's ``tracestate`` handed on. The proxy serves over
stdio and over streamable HTTP.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from support.otlp import OtlpHttpReceiver, ReceivedSpan, free_port
from test_mcp_proxy import REPO, proxy_session, toy_server, write_config

TRACE_ID, SPAN_ID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"
TRACESTATE = "vendor=opaque-7,other=x"
SERVER, CLIENT = 2, 3  # the OTLP proto's SpanKind numbers
SENT: Any = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE}  # a request's _meta


@asynccontextmanager
async def _http_session(config: Path, env: dict[str, str]) -> AsyncIterator[ClientSession]:
    import os

    from mcp.client.streamable_http import streamable_http_client

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tooltrace.mcp", "proxy", "--config", str(config),
         "--http", f"127.0.0.1:{port}"],
        cwd=config.parent, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error", **env})
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "listening on" in line:
                break
        else:
            pytest.fail("the proxy exited before listening")
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (r, w, *_), \
                ClientSession(r, w) as session:
            await session.initialize()
            yield session
    finally:
        proc.terminate()  # SIGTERM: a graceful shutdown that flushes the spans
        proc.wait(timeout=60)


@pytest.fixture(scope="module", params=["stdio", "http"])
def traced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[dict[str, dict[str, Any]], list[ReceivedSpan]]:
    tmp = tmp_path_factory.mktemp(f"trace-{request.param}")
    config = write_config(tmp, '[proxy]\nhome = "home"\n' + toy_server(
        "toy", env={"TOY_TOOLS": "meta", "TOY_RESOURCES": "1"}))
    with OtlpHttpReceiver() as rx:
        env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.endpoint,
               "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
        session = (proxy_session(config, env=env) if request.param == "stdio"
                   else _http_session(config, env))

        async def scenario() -> dict[str, dict[str, Any]]:
            async with session as s:
                call = await s.call_tool("meta", {}, meta=SENT)
                read = await s.read_resource("toy://meta", meta=SENT)
                prompt = await s.get_prompt("meta", meta=SENT)
            return {"tools/call": json.loads(call.content[0].text),
                    "resources/read": json.loads(read.contents[0].text),
                    "prompts/get": json.loads(prompt.messages[0].content.text)}

        received = asyncio.run(scenario())
        # Each request: a SERVER span, the registry's span of the call and a CLIENT span.
        spans = rx.wait_for(3, timeout_s=30, where=lambda s: s.kind == CLIENT)
        spans = rx.wait_for(len(rx.spans), timeout_s=30)
    return received, spans


@pytest.mark.parametrize("method", ["tools/call", "resources/read", "prompts/get"])
def test_one_trace_from_the_client_through_the_proxy_to_the_upstream(
        traced: tuple[dict[str, dict[str, Any]], list[ReceivedSpan]], method: str) -> None:
    received, spans = traced
    by_id = {s.span_id: s for s in spans}
    meta = received[method]
    version, trace_id, parent_id, flags = meta["traceparent"].split("-")
    # The upstream's request is in the client's trace, sampled as the client's was.
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    # Its parent is the proxy's CLIENT span for this request ...
    client = by_id[parent_id]
    assert client.kind == CLIENT and client.name.startswith(method)
    assert client.attributes["mcp.method.name"] == method
    assert client.attributes["tooltrace.mcp.server"] == "toy"
    # ... inside the SERVER span of the client's request, whose parent is the client's span.
    chain = [client]
    while chain[-1].parent_span_id in by_id:
        chain.append(by_id[chain[-1].parent_span_id])
    server = chain[-1]
    assert server.kind == SERVER and server.name.startswith(method)
    assert server.parent_span_id == SPAN_ID
    assert {s.trace_id for s in chain} == {TRACE_ID}
    # The client's tracestate travels with its trace: to the upstream, and on the proxy's
    # SERVER and CLIENT spans. (The registry's span of the call is exported from its record,
    # which keeps no tracestate.)
    assert meta["tracestate"] == TRACESTATE
    assert (server.trace_state, client.trace_state) == (TRACESTATE, TRACESTATE)
