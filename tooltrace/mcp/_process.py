"""An upstream MCP server's process, its stdio connected to the SDK's message streams and to
the connection's fast ``tools/call`` path (``_fastcall``).

Unlike the SDK's ``stdio_client``, the transport reports a non-JSON-RPC line or the end of
stdout at once (without logging the line: it is untrusted output), and stops a server that was
declared broken (hung, garbage) by killing its process group instead of waiting for it to notice
its closed stdin. A line is written in one transport write and waits only while the pipe is
full (anyio's stream wrapper would add two cancellation checkpoints, one a full turn of the event
loop, to every request); stdout is a pipe of the proxy's own, split into lines as it arrives
(``_lines``), so an answer to a fast-path call wakes its caller with no reader task between.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ._fastcall import FastCalls
from ._lines import LineReader, LineTooLong

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
    from mcp.shared.message import SessionMessage

    process, out = await _spawn(cfg)
    assert process.stdin is not None
    send = _line_sender(process.stdin)
    fast = FastCalls(send)
    try:
        stdout, liner = await asyncio.get_running_loop().connect_read_pipe(
            lambda: LineReader(fast.route), out)
    except BaseException:
        out.close()
        await _stop_process(process, graceful=False)
        raise
    read_send, read_recv = anyio.create_memory_object_stream[Any](16)
    write_send, write_recv = anyio.create_memory_object_stream[Any](16)
    reason: list[str] = []

    def broken(why: str) -> None:
        reason.append(why)
        on_broken(why)

    async def reader() -> None:
        try:
            await read()
        finally:  # after on_broken: a call in flight fails as the connection's end says
            fast.close()

    async def read() -> None:
        async with read_send:
            try:
                # Answers to fast-path calls were taken as they came (fast.route).
                async for line in liner.lines():
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
        try:
            async with write_recv:
                async for sm in write_recv:
                    data = sm.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await send((data + "\n").encode())
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
            stdout.close()


async def _spawn(cfg: ServerConfig) -> tuple[asyncio.subprocess.Process, io.FileIO]:
    """Start the server, its stdin asyncio's pipe, its stdout a pipe of the proxy's own (the
    read end returned, for a ``LineReader``)."""
    from mcp.client.stdio import get_default_environment

    env = {**get_default_environment(), **cfg.env}
    out_r, out_w = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            cfg.command, *cfg.args, env=env, cwd=cfg.cwd, stdin=asyncio.subprocess.PIPE,
            stdout=out_w, stderr=None, start_new_session=True)
    except BaseException:
        os.close(out_r)
        raise
    finally:
        os.close(out_w)  # the server's now: its exit ends the pipe
    return process, io.FileIO(out_r, "rb")


def _line_sender(stdin: asyncio.StreamWriter) -> Callable[[bytes], Coroutine[Any, Any, None]]:
    """``send(line)``: one transport write, then a wait only while the pipe is full;
    ``BrokenPipeError`` once the server's stdin is gone."""

    async def send(data: bytes) -> None:
        if stdin.is_closing():
            raise BrokenPipeError("the server's stdin is closed")
        try:
            stdin.write(data)
        except RuntimeError as exc:  # uvloop's word for a write on a closed pipe
            raise BrokenPipeError(str(exc)) from exc
        await stdin.drain()

    return send


async def _stop_process(process: asyncio.subprocess.Process, *, graceful: bool) -> None:
    """Close stdin and give the server a moment to exit; then signal its process group."""
    import anyio

    if process.stdin is not None:
        with contextlib.suppress(Exception):
            process.stdin.close()
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

