"""A stdio client's ``tools/call`` is served by the proxy itself (``_frontcall``) once the session
is initialized, and answered byte for byte as the SDK's server answers it. The proxy serves real
pipes in-process (``serve_stdio(wire=...)``); the client is raw JSON-RPC lines."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_mcp_proxy import REPO, audit_rows, toy_server, write_config

from tooltrace.mcp import McpProxy, load_config
from tooltrace.mcp._frontcall import FrontCalls
from tooltrace.mcp._server import serve_stdio

ASKING = str(REPO / "tests" / "mcp_servers" / "asking.py")
WIRE = str(REPO / "tests" / "mcp_servers" / "wire.py")
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {"sampling": {}},
    "clientInfo": {"name": "raw", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class _NoFront(FrontCalls):
    """Takes nothing: every line goes to the SDK's server (the reference path)."""

    def take(self, line: bytes) -> bool:
        return False


class Client:
    """Raw JSON-RPC lines over a pair of pipes to a proxy served in this process."""

    def __init__(self, reader: asyncio.StreamReader, wfd: int) -> None:
        self.reader, self.wfd = reader, wfd
        self.seen: list[dict[str, Any]] = []  # every message the proxy sent

    def send(self, msg: Any) -> None:
        data = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
        os.write(self.wfd, data + b"\n")

    async def line(self) -> bytes:
        line = (await asyncio.wait_for(self.reader.readline(), 30)).rstrip(b"\n")
        self.seen.append(json.loads(line))
        return line

    async def answer(self, rid: Any) -> bytes:
        """The next line that answers ``rid`` (other messages in between are kept in seen)."""
        while True:
            line = await self.line()
            if self.seen[-1].get("id") == rid and "method" not in self.seen[-1]:
                return line


async def _session(config: Path, front: FrontCalls, script: Any) -> Any:
    proxy = McpProxy(load_config(config))
    await proxy.start()
    to_proxy, from_client = os.pipe()
    to_client, from_proxy = os.pipe()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    rfile = os.fdopen(to_client, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), rfile)
    serving = asyncio.ensure_future(serve_stdio(proxy, wire=(to_proxy, from_proxy), front=front))
    client = Client(reader, from_client)
    try:
        client.send(INIT)
        await client.answer(0)
        client.send(INITIALIZED)
        await _until_initialized(front)
        return await script(client)
    finally:
        os.close(from_client)
        await asyncio.wait_for(serving, 30)
        transport.close()
        for fd in (to_proxy, from_proxy):
            os.close(fd)
        await proxy.aclose()


def _call(rid: Any, name: str, arguments: Any, **extra: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, **extra}}


# Requests answered by both paths: ok, a tool error, an unknown tool, bad params, a bad name,
# no arguments, a field no revision declares (checked by the SDK then, as any shape beyond a
# name and arguments is) and a bad one a revision does declare.
REQUESTS: list[Any] = [
    _call(1, "echo", {"text": "héllo \u2028 \"quoted\""}),
    _call("s-2", "fail", {"reason": "no"}),
    _call(3, "no_such_tool", {}),
    {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"arguments": {}}},
    _call(5, 42, {}),
    {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "echo",
                                                                   "arguments": "x"}},
    _call(7, "echo", {"text": "meta"}, _meta={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16
                                              + "-01"}),
    _call(8, "echo", None),
    _call(9, "echo", {"text": "extra"}, color="blue"),
    _call(10, "echo", {"text": "task"}, task="soon"),
]
_CALL_ID = re.compile(rb'"tooltrace/call_id":"[^"]*"')


def _answers(config: Path, front: FrontCalls) -> list[bytes]:
    async def script(c: Client) -> list[bytes]:
        out = []
        for req in REQUESTS:
            c.send(req)
            out.append(_CALL_ID.sub(b'"tooltrace/call_id":"-"', await c.answer(req["id"])))
        return out

    return asyncio.run(_session(config, front, script))


def test_fast_path_answers_byte_for_byte_as_the_sdk(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[proxy]\nhome = "home"\n' + toy_server("toy"))
    front = FrontCalls()
    fast = _answers(config, front)
    sdk = _answers(config, _NoFront())
    assert fast == sdk
    assert front.calls == 6  # the valid requests (3: an unknown tool) took the fast path
    assert json.loads(fast[7])["result"]["isError"]  # no arguments: echo's schema refuses
    assert json.loads(fast[8])["result"]["content"][0]["text"] == "toy:extra"
    assert json.loads(fast[9])["error"]["code"] == -32602  # task: not an object
    assert json.loads(fast[2])["error"]["code"] == -32602  # the unknown tool
    assert json.loads(fast[0])["result"]["content"][0]["text"] == 'toy:héllo \u2028 "quoted"'
    rows = audit_rows(tmp_path / "home")
    assert sorted(r["tool"] for r in rows.values()).count("echo") == 8  # both paths audited


def test_a_call_before_initialize_is_the_sdks_to_answer(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[proxy]\nhome = "home"\n' + toy_server("toy"))

    async def run(front: FrontCalls) -> bytes:
        proxy = McpProxy(load_config(config))
        await proxy.start()
        to_proxy, from_client = os.pipe()
        to_client, from_proxy = os.pipe()
        reader = asyncio.StreamReader()
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(to_client, "rb", 0))
        serving = asyncio.ensure_future(serve_stdio(proxy, wire=(to_proxy, from_proxy),
                                                    front=front))
        client = Client(reader, from_client)
        try:
            client.send(_call(9, "echo", {"text": "early"}))
            return await client.answer(9)
        finally:
            os.close(from_client)
            await asyncio.wait_for(serving, 30)
            transport.close()
            for fd in (to_proxy, from_proxy):
                os.close(fd)
            await proxy.aclose()

    front = FrontCalls()
    fast = asyncio.run(run(front))
    assert fast == asyncio.run(run(_NoFront()))
    assert front.calls == 0 and "error" in json.loads(fast)


def _wire_config(tmp_path: Path, log: Path, more: str = "") -> Path:
    """A proxy in front of the wire-level server, which logs what it receives to ``log``."""
    return write_config(tmp_path, f"""[proxy]
home = "home"
[servers.wire]
command = {json.dumps(sys.executable)}
args = [{json.dumps(WIRE)}]
env = {{ WIRE_LOG = {json.dumps(str(log))} }}
{more}""")


async def _until_initialized(front: FrontCalls) -> None:
    """Until the proxy's front has seen the client's ``notifications/initialized`` (the SDK
    dispatches it in a task of its own, so it can come after the next line is read)."""
    deadline = time.monotonic() + 30
    while front._ctx is None:
        assert time.monotonic() < deadline, "the front never saw the client initialized"
        await asyncio.sleep(0.01)


async def _until_logged(log: Path, text: str) -> bool:
    """Wait (up to 10 s) until the wire server has logged ``text``."""
    for _ in range(200):
        if log.exists() and text in log.read_text():
            return True
        await asyncio.sleep(0.05)
    return False


def test_cancel_progress_and_sampling_during_fast_path_calls(tmp_path: Path) -> None:
    log = tmp_path / "wire.log"
    config = _wire_config(tmp_path, log, f"""[servers.asking]
command = {json.dumps(sys.executable)}
args = [{json.dumps(ASKING)}]
""")
    front = FrontCalls()

    async def script(c: Client) -> dict[str, Any]:
        got: dict[str, Any] = {}
        c.send(_call("h", "slow", {"seconds": 30}))
        await _until_logged(log, '"slow"')  # until the proxy has sent it upstream
        c.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "h", "reason": "user"}})
        # A call with a progressToken: its progress is relayed (on the fast path too).
        c.send(_call(20, "slow", {"seconds": 0.2, "steps": 3}, _meta={"progressToken": "tok"}))
        got["progress"] = json.loads(await c.answer(20))
        # The upstream asks the client for a sampling during a fast-path call.
        c.send(_call(21, "sample", {"prompt": "hi"}))
        while True:
            msg = json.loads(await c.line())
            if msg.get("method") == "sampling/createMessage":
                c.send({"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "role": "assistant", "model": "m",
                    "content": {"type": "text", "text": "sampled!"}}})
            elif msg.get("id") == 21:
                got["sample"] = msg
                break
        c.send(_call(22, "echo", {"text": "after"}))
        got["after"] = json.loads(await c.answer(22))
        return got

    client_seen: list[dict[str, Any]] = []

    async def recorded(c: Client) -> dict[str, Any]:
        c.seen = client_seen
        return await script(c)

    got = asyncio.run(_session(config, front, recorded))
    assert not [m for m in client_seen if m.get("id") == "h"]  # a cancelled call: no answer
    marks = [m["params"] for m in client_seen if m.get("method") == "notifications/progress"]
    assert marks and all(p["progressToken"] == "tok" for p in marks)
    assert got["progress"]["result"]["content"][0]["text"] == "slow done"
    assert "sampled!" in json.dumps(got["sample"]["result"])
    assert got["after"]["result"]["content"][0]["text"] == "after"
    assert front.calls == 4  # slow (cancelled), slow with progress, sample, echo
    sent = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    assert [m["params"]["reason"] for m in sent
            if m.get("method") == "notifications/cancelled"] == ["caller cancelled"]
    rows = audit_rows(tmp_path / "home")
    slow = next(r for r in rows.values() if r["tool"] == "slow" and r["status"] != "ok")
    assert (slow["status"], slow["error_type"]) == ("unknown", "cancelled")


@pytest.mark.parametrize("path", ["fast", "sdk"])
def test_a_cancel_that_names_an_integer_id_as_text_cancels_the_call(
        tmp_path: Path, path: str) -> None:
    """``"7"`` and ``7`` are one request id for a cancel, on the fast path as on the SDK's."""
    log = tmp_path / "wire.log"
    config = _wire_config(tmp_path, log)
    front = FrontCalls() if path == "fast" else _NoFront()

    async def script(c: Client) -> dict[str, Any]:
        c.send(_call(7, "slow", {"seconds": 30}))
        await _until_logged(log, '"slow"')  # until the proxy has sent it upstream
        c.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "7", "reason": "user"}})
        c.send(_call(8, "echo", {"text": "after"}))
        got = json.loads(await c.answer(8))
        # The cancel reaches the upstream now, not when the session ends.
        got["cancelled_in_session"] = await _until_logged(log, "notifications/cancelled")
        return got

    after = asyncio.run(_session(config, front, script))
    assert after["result"]["content"][0]["text"] == "after"
    assert after.get("cancelled_in_session")
    assert front.calls == (2 if path == "fast" else 0)
    sent = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    assert [m["params"]["reason"] for m in sent
            if m.get("method") == "notifications/cancelled"] == ["caller cancelled"]
    rows = audit_rows(tmp_path / "home")
    slow = next(r for r in rows.values() if r["tool"] == "slow")
    assert (slow["status"], slow["error_type"]) == ("unknown", "cancelled")


def test_progress_on_the_fast_path_is_the_sdks_byte_for_byte_and_never_after_the_answer(
        tmp_path: Path) -> None:
    """A call with a ``progressToken`` gets the same lines on both paths: its progress
    notifications, then its answer, and nothing of it after the answer."""
    log = tmp_path / "wire.log"
    config = _wire_config(tmp_path, log)

    async def script(c: Client) -> list[bytes]:
        out: list[bytes] = []
        # The second call's marks and answer leave the server in one burst.
        for rid, token, gap in ((20, "tok", 0.3), (21, 7, 0)):
            c.send(_call(rid, "slow", {"seconds": 0, "steps": 3, "gap": gap},
                         _meta={"progressToken": token}))
            while True:
                out.append(_CALL_ID.sub(b'"tooltrace/call_id":"-"', await c.line()))
                if c.seen[-1].get("id") == rid and "method" not in c.seen[-1]:
                    break
        c.send(_call(22, "echo", {"text": "after"}))
        out.append(_CALL_ID.sub(b'"tooltrace/call_id":"-"', await c.line()))
        return out

    front = FrontCalls()
    fast = asyncio.run(_session(config, front, script))
    sdk = asyncio.run(_session(config, _NoFront(), script))
    assert front.calls == 3
    assert fast == sdk
    marks = [json.loads(x) for x in fast if b"notifications/progress" in x]
    assert len(marks) >= 4 and {m["params"]["progressToken"] for m in marks} == {"tok", 7}
    assert json.loads(fast[-1])["id"] == 22  # nothing of the progress calls after their answers


def test_a_call_running_when_stdin_ends_is_answered_as_the_sdk_does(tmp_path: Path) -> None:
    log = tmp_path / "wire.log"
    config = _wire_config(tmp_path, log)

    async def run(front: FrontCalls) -> bytes:
        proxy = McpProxy(load_config(config))
        await proxy.start()
        to_proxy, from_client = os.pipe()
        to_client, from_proxy = os.pipe()
        reader = asyncio.StreamReader()
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(to_client, "rb", 0))
        serving = asyncio.ensure_future(serve_stdio(proxy, wire=(to_proxy, from_proxy),
                                                    front=front))
        client = Client(reader, from_client)
        try:
            client.send(INIT)
            await client.answer(0)
            client.send(INITIALIZED)
            await _until_initialized(front)
            log.unlink(missing_ok=True)
            client.send(_call(5, "slow", {"seconds": 30}))
            await _until_logged(log, '"slow"')  # until the proxy has sent it upstream
            os.close(from_client)  # the client closes stdin while the call runs
            return await client.answer(5)
        finally:
            await asyncio.wait_for(serving, 30)
            transport.close()
            for fd in (to_proxy, from_proxy):
                os.close(fd)
            await proxy.aclose()

    front = FrontCalls()
    fast = asyncio.run(run(front))
    assert front.calls == 1
    assert fast == asyncio.run(run(_NoFront()))
    assert json.loads(fast)["error"]["code"] == -32000


@pytest.mark.parametrize("rid", [7, 0, -1, "abc", "tt-\u00e9"])
def test_an_answer_is_the_bytes_the_sdks_writer_makes(rid: Any) -> None:
    """The fast path writes the JSON-RPC answer with orjson: the same bytes as the SDK's
    ``JSONRPCResponse.model_dump_json``, for text of every kind, floats and ids."""
    import random

    import mcp.types as mt

    from tooltrace.mcp._frontcall import _response

    rnd = random.Random(5)
    results: list[dict[str, Any]] = [
        {"content": [{"type": "text", "text": "\u00e9\u2028\x1f\"\\/</script>\U0001F600"}],
         "isError": False, "structuredContent": {
             "a": 1.0, "b": 1e16, "c": 1e-7, "d": 0.1, "e": -0.0, "f": 123456789.123456789,
             "g": 2**63 - 1, "h": [None, True], "i": 5e-324, "j": 1.7976931348623157e308}},
    ]
    for _ in range(300):
        results.append({"content": [], "structuredContent": {
            "f": rnd.uniform(-1e30, 1e30) * 10.0 ** rnd.randint(-300, 0),
            "s": "".join(chr(rnd.randint(0, 0xD7FF)) for _ in range(20))}})
    for result in results:
        sdk = mt.JSONRPCResponse(jsonrpc="2.0", id=rid, result=result).model_dump_json(
            by_alias=True, exclude_unset=True).encode()
        assert _response(rid, result) == sdk
    # What orjson cannot encode (an integer beyond 64 bits) is left to the SDK's model.
    big = _response(rid, {"content": [], "structuredContent": {"n": 2**70}})
    assert isinstance(big, mt.JSONRPCResponse)
    assert json.loads(big.model_dump_json())["result"]["structuredContent"]["n"] == 2**70
