"""The official MCP client's stdio transport, patient with the proxy's shutdown.

The SDK's ``stdio_client`` closes the server's stdin when its block ends and signals the process
2 s later (SIGTERM, then SIGKILL after 2 s more): a client's choice, which the proxy meets on an
ordinary disk. The tests read the audit trail a finished shutdown leaves, so they give the proxy
longer: on a host whose disk takes most of a second per ``fsync`` (opening a segment takes
several), the SDK's grace can end the proxy before its last records are written, and a test
would then check the host's disk instead of the proxy. What a short grace costs is documented
in ``docs/guide/mcp.md`` (Failure behaviour).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp.client.stdio as sdk_stdio
from mcp import StdioServerParameters

__all__ = ["SHUTDOWN_GRACE_S", "patient_stdio_client", "until_answering"]

#: How long the tests' client waits for the proxy to exit on its own once stdin is closed.
SHUTDOWN_GRACE_S = 60.0

_clients = 0  # these clients open now
_sdk_grace = 0.0  # the SDK's own grace, put back when the last of them is done


@asynccontextmanager
async def patient_stdio_client(params: StdioServerParameters,
                               **kwargs: Any) -> AsyncIterator[Any]:
    """``stdio_client(params, **kwargs)`` that waits up to ``SHUTDOWN_GRACE_S`` for the server
    to exit after its stdin closes, before the SDK's signals."""
    global _clients, _sdk_grace
    if not hasattr(sdk_stdio, "PROCESS_TERMINATION_TIMEOUT"):
        raise RuntimeError("mcp.client.stdio no longer has PROCESS_TERMINATION_TIMEOUT: "
                           "tests/support/mcp_client.py needs the SDK's new way to set the grace")
    if not _clients:
        _sdk_grace = sdk_stdio.PROCESS_TERMINATION_TIMEOUT
    _clients += 1
    sdk_stdio.PROCESS_TERMINATION_TIMEOUT = SHUTDOWN_GRACE_S
    try:
        async with sdk_stdio.stdio_client(params, **kwargs) as streams:
            yield streams
    finally:
        _clients -= 1
        if not _clients:
            sdk_stdio.PROCESS_TERMINATION_TIMEOUT = _sdk_grace


async def until_answering(http: Any, url: str, tries: int = 500) -> None:
    """Return once an HTTP server that is starting answers ``url`` at all (any status); polls
    ``tries`` times, 20 ms apart, then lets the last connection error through."""
    import httpx

    for attempt in range(tries):
        try:
            await http.get(url)
            return
        except httpx.TransportError:
            if attempt == tries - 1:
                raise
            await asyncio.sleep(0.02)
