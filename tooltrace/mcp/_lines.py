"""The lines of a pipe, split as its bytes arrive: what both stdio sides of the proxy read.

A ``LineReader`` is the pipe's protocol. Each non-blank line is offered to its ``take`` right in
the event loop's callback (the fast paths: the front's ``tools/call``, an upstream's answer to
one), so a call's line reaches its handler with no reader task to wake on the way. A line
``take`` leaves goes to ``lines()``, the SDK's side, and so does every line behind it until the
queue is empty again: ``take`` never overtakes a line that is still waiting, and each line is
offered to it once. Reading pauses while the queue is full. ``jsonrpc_message`` is how a fast
path reads a line it may want: one parse, the same checks on both sides.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

__all__ = ["MAX_LINE_BYTES", "QUEUE_LINES", "LineReader", "LineTooLong", "jsonrpc_message"]

log = logging.getLogger("tooltrace.mcp")

#: The longest line either side accepts (a result of many megabytes is still one line).
MAX_LINE_BYTES = 64 * 1024 * 1024
#: How many lines may wait for ``lines()`` before reading pauses.
QUEUE_LINES = 16


class LineTooLong(ValueError):
    """A line grew past the limit without its newline."""


class LineReader(asyncio.Protocol):
    """A read pipe's non-blank lines, without their newlines: offered to ``take`` as they
    arrive (True: taken), the rest yielded by ``lines()``, which raises ``LineTooLong`` (after
    the lines before it) when a line outgrows ``max_bytes``."""

    def __init__(self, take: Callable[[bytes], bool], max_bytes: int = MAX_LINE_BYTES) -> None:
        self._take = take
        self._max = max_bytes
        self._buf = bytearray()
        # (line, offered to take already): the lines lines() has yet to yield or offer.
        self._queue: collections.deque[tuple[bytes, bool]] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._paused = False
        self._ended = False
        self._error: LineTooLong | None = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if self._ended:
            return
        buf, queue, take = self._buf, self._queue, self._take
        start = len(buf)  # search only the new bytes: a big message arrives in many chunks
        buf += data
        while (nl := buf.find(b"\n", start)) >= 0:
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            start = 0
            if not line.strip():
                continue
            if queue:
                queue.append((line, False))  # behind a waiting line: offered in its turn
            elif not _offer(take, line):
                queue.append((line, True))
        if len(buf) > self._max:
            self._error = LineTooLong(f"a line is longer than {self._max} bytes")
            self._end()
        elif queue:
            if len(queue) >= QUEUE_LINES and not self._paused and self._transport is not None:
                self._paused = True
                self._transport.pause_reading()
            self._wake()

    def eof_received(self) -> bool:
        self._end()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._buf.clear()
            if self._transport is not None:
                self._transport.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def lines(self) -> AsyncIterator[bytes]:
        """The lines ``take`` left, in order, until the pipe ends."""
        queue = self._queue
        while True:
            while queue:
                line, offered = queue.popleft()
                if self._paused and len(queue) < QUEUE_LINES // 2:
                    self._paused = False
                    if self._transport is not None and not self._ended:
                        self._transport.resume_reading()
                if offered or not _offer(self._take, line):
                    yield line
            if self._ended:
                if self._error is not None:
                    raise self._error
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


def jsonrpc_message(line: bytes, *marks: bytes) -> dict[str, Any] | None:
    """The JSON-RPC 2.0 message (an object with ``"jsonrpc": "2.0"``) that ``line`` holds, or
    None. With ``marks``, a line holding none of them is not parsed at all: a fast path names
    the bytes every message it takes contains, and leaves the rest to the SDK unread."""
    if marks and not any(m in line for m in marks):
        return None
    try:
        msg = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        return None
    return msg


def _offer(take: Callable[[bytes], bool], line: bytes) -> bool:
    # A fast path that fails on a line leaves it to the SDK's side, which answers anything.
    try:
        return take(line)
    except Exception:
        log.error("mcp proxy: a line could not be offered to the fast path", exc_info=True)
        return False
