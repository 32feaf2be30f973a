"""An upstream MCP server's process, its stdio connected to the SDK's message streams and to
the connection's fast ``tools/call`` path (``_fastcall``).

Unlike the SDK's ``stdio_client``, the transport reports a non-JSON-RPC line or the end of
stdout at once (without logging the line: it is untrusted output), and stops a server that was
declared broken (hung, garbage) by killing its process group instead of waiting for it to notice
its closed stdin.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from ._fastcall import FastCalls
from ._stdio import LineTooLong, lines

if TYPE_CHECKING:
    from ._config import ServerConfig

__all__ = ["stdio_process"]

log = logging.getLogger("tooltrace.mcp")

_EXIT_GRACE_S = 1.0


@contextlib.asynccontextmanager
async def stdio_process(
    cfg: ServerConfig, on_broken: Callable[[str], None], graceful: Callable[[], bool]
) -> AsyncIterator[tuple[Any, Any, FastCalls]]:
    """Spawn the server; yield ``(read_stream, write_stream, fast)``: the SDK's message
    streams and the connection's fast ``tools/call`` path. A non-JSON-RPC line or the end of
    stdout is reported to ``on_broken`` at once."""
    import anyio
    import mcp.types as mt
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    env = {**get_default_environment(), **cfg.env}
    process = await anyio.open_process(
        [cfg.command, *cfg.args], env=env, cwd=cfg.cwd, stderr=None, start_new_session=True)
    read_send, read_recv = anyio.create_memory_object_stream[Any](16)
    write_send, write_recv = anyio.create_memory_object_stream[Any](16)
    reason: list[str] = []
    assert process.stdin is not None
    fast = FastCalls(process.stdin.send)

    def broken(why: str) -> None:
        reason.append(why)
        on_broken(why)

    async def reader() -> None:
        try:
            await read()
        finally:  # after on_broken: a call in flight fails as the connection's end says
            fast.close()

    async def read() -> None:
        assert process.stdout is not None
        async with read_send:
            try:
                async for line in lines(process.stdout):
                    if fast.route(line):  # an answer to a fast-path call: not the SDK's
                        continue
                    try:
                        msg = mt.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError:
                        log.warning("mcp upstream %s wrote a line that is not JSON-RPC",
                                    cfg.label)
                        broken("protocol")
                        return
                    await read_send.send(SessionMessage(msg))
            except LineTooLong:
                log.warning("mcp upstream %s wrote an over-long line", cfg.label)
                broken("protocol")
                return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass
        broken("exited")

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with write_recv:
                async for sm in write_recv:
                    data = sm.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            broken("exited")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield read_recv, write_send, fast
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            fast.close()
            await _stop_process(process, graceful=graceful() and reason[:1] != ["protocol"])


async def _stop_process(process: Any, *, graceful: bool) -> None:
    """Close stdin and give the server a moment to exit; then signal its process group."""
    import anyio

    with contextlib.suppress(Exception):
        await process.stdin.aclose()
    if graceful:
        with anyio.move_on_after(_EXIT_GRACE_S):
            await process.wait()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.returncode is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        with anyio.move_on_after(_EXIT_GRACE_S):
            await process.wait()
    with contextlib.suppress(Exception):
        await process.aclose()

