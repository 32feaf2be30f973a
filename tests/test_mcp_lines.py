"""The proxy's stdio sides split their pipes into lines as bytes arrive (``_lines``): the fast
paths take their lines in the event loop's callback, and never ahead of a line still waiting
for the SDK's side; both read a line they may want with one parser (``jsonrpc_message``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tooltrace.mcp import _fastcall, _frontcall
from tooltrace.mcp._lines import QUEUE_LINES, LineReader, LineTooLong, jsonrpc_message


async def _read(chunks: list[bytes], take: Callable[[bytes], bool], max_bytes: int = 1 << 20,
                consumer: Callable[[bytes], None] | None = None) -> list[bytes]:
    """Write ``chunks`` into a real pipe (then close it); the lines ``lines()`` yielded."""
    r, w = os.pipe()
    loop = asyncio.get_running_loop()
    transport, reader = await loop.connect_read_pipe(
        lambda: LineReader(take, max_bytes), os.fdopen(r, "rb", buffering=0))
    out: list[bytes] = []

    async def consume() -> None:
        async for line in reader.lines():
            out.append(line)
            if consumer is not None:
                consumer(line)

    task = asyncio.ensure_future(consume())
    try:
        for chunk in chunks:
            os.write(w, chunk)
            await asyncio.sleep(0.01)  # separate arrivals
    finally:
        os.close(w)
    try:
        await asyncio.wait_for(task, 10)
    finally:
        transport.close()
    return out


def _never(_line: bytes) -> bool:
    return False


def test_lines_join_chunks_and_skip_blank_lines() -> None:
    got = asyncio.run(_read([b'{"a":', b'1}\n\n  \n{"b"', b':2}\n{"c":3', b"}\n", b"tail"],
                            _never))
    assert got == [b'{"a":1}', b'{"b":2}', b'{"c":3}']  # an unfinished last line is not a line


def test_a_line_longer_than_the_limit_is_refused_after_the_lines_before_it() -> None:
    with pytest.raises(LineTooLong):
        asyncio.run(_read([b"ok\n", b"x" * 40, b"y" * 40], _never, max_bytes=64))
    assert asyncio.run(_read([b"x" * 60 + b"\n"], _never, max_bytes=64)) == [b"x" * 60]
    seen: list[bytes] = []
    with pytest.raises(LineTooLong):
        asyncio.run(_read([b"ok\n", b"x" * 100], _never, 64, seen.append))
    assert seen == [b"ok"]


def test_taken_lines_never_reach_the_reader_and_none_overtakes_a_waiting_line() -> None:
    offered: list[bytes] = []

    def take(line: bytes) -> bool:
        offered.append(line)
        return line.startswith(b"fast")

    # One chunk: "sdk-1" waits for the reader, so "fast-2" behind it is offered only in its
    # turn, after "sdk-1" was yielded; "fast-3" in a later chunk, with nothing waiting, at once.
    order: list[str] = []
    got = asyncio.run(_read([b"sdk-1\nfast-2\nsdk-3\n", b"fast-4\n"],
                            lambda line: (order.append(f"offer {line.decode()}"), take(line))[1],
                            consumer=lambda line: order.append(f"read {line.decode()}")))
    assert got == [b"sdk-1", b"sdk-3"]
    assert offered == [b"sdk-1", b"fast-2", b"sdk-3", b"fast-4"]  # each line offered once
    assert order.index("read sdk-1") < order.index("offer fast-2")
    assert order.index("offer fast-4") > order.index("read sdk-3")


def test_a_fast_path_that_fails_on_a_line_leaves_it_to_the_reader() -> None:
    def take(line: bytes) -> bool:
        if line == b"boom":
            raise RuntimeError("a bug in a fast path")
        return False

    assert asyncio.run(_read([b"boom\nnext\n"], take)) == [b"boom", b"next"]


def test_reading_pauses_while_the_queue_is_full_and_nothing_is_lost() -> None:
    n = 40_000  # more than one read of the pipe (256 KiB), which queues a read's lines at once
    payload = b"".join(b'{"n":%d}\n' % i for i in range(n))

    async def run() -> tuple[list[bytes], int]:
        r, w = os.pipe()
        loop = asyncio.get_running_loop()
        transport, reader = await loop.connect_read_pipe(
            lambda: LineReader(_never), os.fdopen(r, "rb", buffering=0))
        writer = loop.run_in_executor(None, lambda: (os.write(w, payload), os.close(w)))
        # Nobody reads yet: wait for the reader to pause at the queue's limit (the event the
        # assertion needs, not a guess at how long the writer takes).
        for _ in range(30_000):
            if reader._paused:
                break
            await asyncio.sleep(0.001)
        assert reader._paused, "the reader never paused"
        paused = len(reader._queue)
        got = [line async for line in reader.lines()]
        await writer
        transport.close()
        return got, paused

    got, paused = asyncio.run(run())
    assert got == [b'{"n":%d}' % i for i in range(n)]
    assert QUEUE_LINES <= paused < n


@pytest.mark.parametrize(("line", "marks", "message"), [
    (b'{"jsonrpc":"2.0","id":"tt-1","result":{}}', (b'"tt-',), {
        "jsonrpc": "2.0", "id": "tt-1", "result": {}}),
    (b'{"jsonrpc":"2.0","id":1,"result":{}}', (b'"tt-',), None),  # no mark: never parsed
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}', (b'"ping"', b'"tools/call"'), {
        "jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
    (b'{"jsonrpc":"1.0","id":"tt-1","result":{}}', (b'"tt-',), None),  # not JSON-RPC 2.0
    (b'["tt-", 1]', (b'"tt-',), None),  # not an object
    (b'{"jsonrpc":"2.0", "id": "tt-', (b'"tt-',), None),  # not JSON
    (b'{"jsonrpc":"2.0","method":"x"}', (), {"jsonrpc": "2.0", "method": "x"}),  # no marks
])
def test_one_parser_reads_a_line_for_either_fast_path(
        line: bytes, marks: tuple[bytes, ...], message: dict[str, object] | None) -> None:
    assert jsonrpc_message(line, *marks) == message


def test_both_fast_paths_read_lines_with_the_one_parser() -> None:
    assert _fastcall.jsonrpc_message is jsonrpc_message
    assert _frontcall.jsonrpc_message is jsonrpc_message
    for module in (_fastcall, _frontcall):
        assert "orjson.loads" not in Path(module.__file__ or "").read_text()
