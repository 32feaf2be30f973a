"""An upstream MCP server over streamable HTTP: the SDK's client, with the configured headers
(``${NAME}`` read from the environment when connecting, so a token lives only in the HTTP
client), reading a streamed JSON answer as the events it holds (``_line_streams``).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ._errors import UpstreamUnavailable

if TYPE_CHECKING:
    from ._config import ServerConfig

__all__ = ["http_transport"]


@contextlib.asynccontextmanager
async def http_transport(cfg: ServerConfig) -> AsyncIterator[tuple[Any, Any, None]]:
    """Streamable HTTP to ``cfg.url`` with the configured headers (``${NAME}`` expanded from
    the environment here, so the values are only ever in the HTTP client)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {k: _expand(v) for k, v in cfg.headers.items()}
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout,
                           transport=_line_streams(httpx2.AsyncHTTPTransport())) as client,
        streamable_http_client(str(cfg.url), http_client=client) as (read, write, *_),
    ):
        yield read, write, None


def _line_streams(inner: Any) -> Any:
    """An HTTP transport that hands the SDK a streamed ``application/json`` answer (chunked:
    no ``Content-Length``) as the server-sent events it reads: servers that stream a request's
    messages (progress, then the result; a ``subscriptions/listen`` stream) write them as JSON
    lines, one message a line, which the SDK would read as one malformed document."""
    import httpx2

    class EventLines(httpx2.AsyncByteStream):
        """JSON lines as server-sent events (one ``message`` event a line)."""

        def __init__(self, lines: Any) -> None:
            self._lines = lines

        async def __aiter__(self) -> AsyncIterator[bytes]:
            pending = b""
            async for chunk in self._lines:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield b"event: message\ndata: " + line.strip() + b"\n\n"
            if pending.strip():
                yield b"event: message\ndata: " + pending.strip() + b"\n\n"

        async def aclose(self) -> None:
            await self._lines.aclose()

    class LineStreams(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            response: httpx2.Response = await inner.handle_async_request(request)
            kind = response.headers.get("content-type", "")
            if not (kind.startswith("application/json") and 200 <= response.status_code < 300
                    and "content-length" not in response.headers):
                return response
            headers = [(k, v) for k, v in response.headers.multi_items()
                       if k.lower() not in ("content-type", "transfer-encoding")]
            headers.append(("content-type", "text/event-stream"))
            return httpx2.Response(response.status_code, headers=headers,
                                   stream=EventLines(response.stream),
                                   extensions=response.extensions)

        async def aclose(self) -> None:
            await inner.aclose()

    return LineStreams()


def _expand(value: str) -> str:
    def var(m: re.Match[str]) -> str:
        got = os.environ.get(m.group(1))
        if got is None:
            raise UpstreamUnavailable(f"environment variable {m.group(1)} is not set")
        return got

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", var, value)
