"""The proxy's stdio front end on the event loop (its lines split as they arrive: ``_lines``).

The SDK's ``stdio_server`` reads stdin and writes stdout through worker threads: every line
read, every write and every flush is a hop to a thread and back, three per ``tools/call``, which
on a busy two-core machine cost more than the rest of the proxy (``docs/performance/
analysis.md``). When stdin and stdout are pipes or sockets (what an MCP client gives the server
it spawns) ``stdio_streams`` reads and writes them on the event loop instead. Like the SDK, it
takes the wire away from fds 0 and 1 while it serves (fd 0 reads the null device and fd 1 goes
to stderr, so a stray ``print`` in a hook cannot corrupt the protocol) and gives it back on
exit. Anything else (a terminal, a file) is served by the SDK's ``stdio_server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import stat
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ._lines import LineReader, LineTooLong

if TYPE_CHECKING:
    from ._frontcall import FrontCalls

__all__ = ["stdio_streams"]

log = logging.getLogger("tooltrace.mcp")

# How long the last answers get to go out when serving ends.
_DRAIN_S = 5.0


def _is_stream(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.asynccontextmanager
async def stdio_streams(front: FrontCalls | None = None, *,
                        wire: tuple[int, int] | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """``(read_stream, write_stream)`` of ``SessionMessage`` over this process's stdin and
    stdout, for ``Server.run``; the ``tools/call`` lines ``front`` takes are served by it
    (``_frontcall``). ``wire`` serves a pair of pipe descriptors (read, write) instead."""
    if wire is not None:
        async with _serve(*wire, front) as streams:
            yield streams
        return
    if not (_is_stream(0) and _is_stream(1)):
        from mcp.server.stdio import stdio_server

        async with stdio_server() as streams:
            yield streams
        return
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    blocking = (os.get_blocking(wire_in), os.get_blocking(wire_out))
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        async with _serve(wire_in, wire_out, front) as streams:
            yield streams
    finally:
        for fd, dup, was in ((0, wire_in, blocking[0]), (1, wire_out, blocking[1])):
            with contextlib.suppress(OSError):
                # O_NONBLOCK belongs to the pipe end the client handed over: give it back as it
                # came, then point the standard descriptor at the wire again.
                os.set_blocking(dup, was)
                os.dup2(dup, fd)
            with contextlib.suppress(OSError):
                os.close(dup)


class _Out(asyncio.Protocol):
    """The write side's flow control: writes wait while the pipe's buffer is full."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.ready.set()
        self.lost = False
        self.closed = asyncio.Event()

    def pause_writing(self) -> None:
        self.ready.clear()

    def resume_writing(self) -> None:
        self.ready.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.ready.set()
        self.closed.set()


def _leave(_line: bytes) -> bool:
    return False  # no front: every line is the SDK's


def _line_writer(transport: asyncio.WriteTransport, out: _Out
                 ) -> Callable[[bytes], Coroutine[Any, Any, None]]:
    async def write_line(data: bytes) -> None:
        # One whole line in one transport write, as _serve's writer writes the SDK's: the two
        # never interleave within a line, and this one still goes out after the SDK's server
        # has closed its stream (an answer to a call still running when stdin ended).
        if out.lost:
            raise BrokenPipeError("the client closed its end")
        transport.write(data)
        if not out.ready.is_set():
            await out.ready.wait()

    return write_line


@contextlib.asynccontextmanager
async def _serve(wire_in: int, wire_out: int, front: FrontCalls | None
                 ) -> AsyncIterator[tuple[Any, Any]]:
    import anyio
    import mcp.types as mt
    from mcp.shared.message import SessionMessage

    loop = asyncio.get_running_loop()
    # closefd=False: the descriptors are the wire's duplicates, closed by stdio_streams.
    rpipe = os.fdopen(wire_in, "rb", buffering=0, closefd=False)
    wpipe = os.fdopen(wire_out, "wb", buffering=0, closefd=False)
    # The front's tools/call lines are taken as they arrive; the rest go to the SDK.
    take = front.take if front is not None else _leave
    rtransport, reader = await loop.connect_read_pipe(lambda: LineReader(take), rpipe)
    wtransport, out = await loop.connect_write_pipe(_Out, wpipe)
    read_send, read_recv = anyio.create_memory_object_stream[Any](16)
    write_send, write_recv = anyio.create_memory_object_stream[Any](16)

    async def read_stdin() -> None:
        async with read_send:
            try:
                async for line in reader.lines():
                    try:
                        msg: Any = mt.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError as exc:  # the SDK's server answers it with an error
                        await read_send.send(exc)
                        continue
                    await read_send.send(SessionMessage(msg))
            except LineTooLong:
                log.error("mcp proxy: the client sent an over-long line; closing")
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass

    drained = anyio.Event()

    async def write_stdout() -> None:
        try:
            async with write_recv:
                async for sm in write_recv:
                    if out.lost:
                        return
                    data = sm.message.model_dump_json(by_alias=True, exclude_unset=True)
                    wtransport.write(data.encode() + b"\n")
                    if not out.ready.is_set():
                        await out.ready.wait()
        finally:
            drained.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_stdin)
            tg.start_soon(write_stdout)
            if front is not None:
                front.bind(_line_writer(wtransport, out))
            try:
                yield read_recv, write_send
            finally:
                if front is not None:  # its calls still running end before the writer does
                    with anyio.move_on_after(_DRAIN_S, shield=True):
                        await front.aclose()
                # What the server has sent still goes out (the writer ends once it is written);
                # only then is reading stopped.
                write_send.close()
                with anyio.move_on_after(_DRAIN_S, shield=True):
                    await drained.wait()
                tg.cancel_scope.cancel()
    finally:
        rtransport.close()
        wtransport.close()  # closes once its buffer is written
        with anyio.move_on_after(_DRAIN_S, shield=True):
            await out.closed.wait()
