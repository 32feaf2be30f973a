"""One upstream MCP server over stdio: start, list tools, call, detect failure, restart.

A supervisor task owns the connection (``stdio_client`` + ``ClientSession`` must be entered and
left by the same task). Between the transport and the session sits a relay that sees every
inbound item: a line that is not JSON-RPC, or the end of the server's stdout, breaks the
connection at once, so in-flight calls fail promptly instead of waiting out their deadline. A
call that outlives its wait also breaks the connection (a hung server is killed). The
supervisor then restarts the server with exponential backoff.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from ._config import ServerConfig
from ._errors import (
    UpstreamExited,
    UpstreamProtocolError,
    UpstreamRPCError,
    UpstreamTimeout,
    UpstreamUnavailable,
)

if TYPE_CHECKING:
    import mcp.types as mt
    from mcp import ClientSession

__all__ = ["Upstream"]

log = logging.getLogger("tooltrace.mcp")

# The SDK logs a full traceback with the offending line for every non-JSON line on a server's
# stdout; that line is untrusted output and may hold secrets. The relay below reports it instead.
logging.getLogger("mcp.client.stdio").setLevel(logging.CRITICAL)

_BACKOFF_MIN_S = 0.2
_BACKOFF_MAX_S = 10.0
_STABLE_S = 30.0
_CONNECTION_CLOSED = -32000


class Upstream:
    """A supervised connection to one upstream server.

    ``on_tools(upstream, tools)`` is called with the wire form of the tool listing after every
    (re)connect, so pins are checked again when a restarted server changes its tools.
    """

    def __init__(
        self,
        config: ServerConfig,
        *,
        on_tools: Callable[[Upstream, list[dict[str, Any]]], None] | None = None,
        errlog: TextIO | None = None,
    ) -> None:
        self.config = config
        self.label = config.label
        self._on_tools = on_tools
        self._errlog = errlog if errlog is not None else sys.stderr
        self._session: ClientSession | None = None
        self._broken: asyncio.Event = asyncio.Event()
        self._broken_reason = ""
        self._ready: asyncio.Event = asyncio.Event()
        self._first: asyncio.Future[list[mt.Tool]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        #: Tools as listed by the last successful connect (SDK models).
        self.tools: list[mt.Tool] = []
        #: How many times the server was (re)started after the first start.
        self.restarts = 0
        #: Why the last connection ended or failed (short, no upstream output).
        self.last_error: str | None = None
        #: Server info from the last handshake.
        self.server_name: str | None = None
        self.protocol_version: str | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """``running``, ``starting`` (or restarting) or ``stopped``."""
        if self._closing:
            return "stopped"
        return "running" if self._ready.is_set() else "starting"

    async def start(self) -> list[mt.Tool]:
        """Start the supervisor and wait for the first listing (raises on a failed start)."""
        loop = asyncio.get_running_loop()
        self._first = loop.create_future()
        self._task = loop.create_task(self._supervise(), name=f"mcp-upstream-{self.label}")
        timeout = self.config.startup_timeout_s + 2.0
        try:
            return await asyncio.wait_for(asyncio.shield(self._first), timeout)
        except TimeoutError:
            raise UpstreamUnavailable(
                f"server {self.label} did not finish its handshake within "
                f"{self.config.startup_timeout_s:g} s") from None

    async def aclose(self) -> None:
        """Stop the server and the supervisor."""
        self._closing = True
        self._broken.set()
        task = self._task
        if task is not None:
            try:
                await asyncio.wait_for(task, 5.0)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
            except Exception:
                pass

    def _break(self, reason: str) -> None:
        if not self._broken.is_set():
            self._broken_reason = reason
            self._broken.set()
            self._ready.clear()

    async def _supervise(self) -> None:
        backoff = _BACKOFF_MIN_S
        while not self._closing:
            started = time.monotonic()
            try:
                await self._run_once()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self.last_error = _describe(exc)
                if self._first is not None and not self._first.done():
                    self._first.set_exception(UpstreamUnavailable(
                        f"server {self.label} failed to start: {self.last_error}"))
            self._session = None
            self._ready.clear()
            if self._closing:
                break
            if time.monotonic() - started > _STABLE_S:
                backoff = _BACKOFF_MIN_S
            log.warning("mcp upstream %s stopped (%s); restarting in %.1f s", self.label,
                        self.last_error or self._broken_reason or "exited", backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX_S)
            self.restarts += 1

    async def _run_once(self) -> None:
        import anyio
        from mcp import ClientSession, StdioServerParameters, stdio_client

        cfg = self.config
        params = StdioServerParameters(
            command=cfg.command, args=list(cfg.args), env=dict(cfg.env) or None, cwd=cfg.cwd)
        self._broken = asyncio.Event()
        self._broken_reason = ""
        async with stdio_client(params, errlog=self._errlog) as (read, write):
            relay_send, relay_recv = anyio.create_memory_object_stream[Any](16)

            async def relay() -> None:
                async with relay_send:
                    async for item in read:
                        if isinstance(item, Exception):
                            log.warning("mcp upstream %s wrote a line that is not JSON-RPC",
                                        self.label)
                            self._break("protocol")
                            return
                        await relay_send.send(item)
                self._break("exited")

            async with anyio.create_task_group() as tg:
                tg.start_soon(relay)
                async with ClientSession(relay_recv, write) as session:
                    with anyio.fail_after(cfg.startup_timeout_s):
                        init = await session.initialize()
                        tools = await _list_all(session)
                    self.server_name = init.server_info.name if init.server_info else None
                    self.protocol_version = str(init.protocol_version)
                    self.tools = tools
                    if self._on_tools is not None:
                        self._on_tools(self, [_wire(t) for t in tools])
                    self._session = session
                    self._ready.set()
                    self.last_error = None
                    if self._first is not None and not self._first.done():
                        self._first.set_result(tools)
                    await self._broken.wait()
                    self._session = None
                    self._ready.clear()
                tg.cancel_scope.cancel()
        self.last_error = {"protocol": "wrote a line that is not JSON-RPC",
                           "exited": "the process exited",
                           "hung": "it stopped answering"}.get(self._broken_reason,
                                                              self._broken_reason or "closed")

    # -- calls -----------------------------------------------------------------------------

    async def call(self, name: str, arguments: Mapping[str, Any], *,
                   meta: Mapping[str, Any] | None, wait_s: float) -> mt.CallToolResult:
        """Forward one ``tools/call``; raise an ``UpstreamError`` if no answer comes."""
        deadline = time.monotonic() + wait_s
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise UpstreamUnavailable(
                    f"server {self.label} is not running (restart {self.restarts} pending)"
                ) from None
        session, broken = self._session, self._broken
        if session is None:
            raise UpstreamUnavailable(f"server {self.label} is not running")
        call = asyncio.ensure_future(session.call_tool(
            name, dict(arguments), meta=dict(meta) if meta else None))  # type: ignore[arg-type]
        stop = asyncio.ensure_future(broken.wait())
        try:
            done, _ = await asyncio.wait(
                {call, stop}, timeout=max(0.0, deadline - time.monotonic()),
                return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if call in done:
            exc = call.exception()
            if exc is None:
                return call.result()
            raise self._map_error(exc) from None
        call.cancel()
        if stop in done:
            if self._broken_reason == "protocol":
                raise UpstreamProtocolError(
                    f"server {self.label} wrote a line that is not JSON-RPC; it is restarted")
            raise UpstreamExited(f"server {self.label} exited during the call; it is restarted")
        self._break("hung")
        raise UpstreamTimeout(
            f"server {self.label} did not answer within {wait_s:g} s; it is restarted")

    def _map_error(self, exc: BaseException) -> Exception:
        code = getattr(getattr(exc, "error", None), "code", None)
        if isinstance(code, int):
            if code == _CONNECTION_CLOSED:
                if self._broken.is_set() and self._broken_reason == "protocol":
                    # The relay cut the connection because of a non-JSON-RPC line.
                    return UpstreamProtocolError(
                        f"server {self.label} wrote a line that is not JSON-RPC; it is restarted")
                self._break("exited")
                return UpstreamExited(f"server {self.label} closed the connection during the call")
            message = str(getattr(exc.error, "message", "") or "")  # type: ignore[attr-defined]
            return UpstreamRPCError(code, f"server {self.label} answered error {code}: "
                                          f"{message[:300]}")
        if isinstance(exc, asyncio.CancelledError):
            return UpstreamExited(f"server {self.label} went away during the call")
        return UpstreamExited(f"server {self.label} failed during the call ({type(exc).__name__})")


async def _list_all(session: ClientSession) -> list[mt.Tool]:
    import mcp.types as mt

    tools: list[mt.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a server paging forever is a broken server
        params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
        res = await session.list_tools(params=params)
        tools.extend(res.tools)
        cursor = res.next_cursor
        if not cursor:
            break
    return tools


def _wire(tool: mt.Tool) -> dict[str, Any]:
    """A tool's wire form (camelCase keys, unset fields left out)."""
    data: dict[str, Any] = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
    return data


def _describe(exc: BaseException) -> str:
    """A short reason for a failed start, without host paths or upstream output."""
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _describe(inner)
    if isinstance(exc, FileNotFoundError):
        return "command not found"
    if isinstance(exc, TimeoutError):
        return "handshake timed out"
    if isinstance(exc, PermissionError):
        return "command not executable"
    name = type(exc).__name__
    code = getattr(getattr(exc, "error", None), "code", None)
    return f"{name} {code}" if code is not None else name

