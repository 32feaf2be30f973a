"""``tools/call`` through the proxy to a stdio upstream takes the fast path (``_fastcall``): the
request goes out as a JSON-RPC line with a ``"tt-<n>"`` id and its answer is taken by id, not by
the SDK's client session; everything else on the connection stays the SDK's. A wire-level
upstream (``tests/mcp_servers/wire.py``) writes down what it received."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams
from test_mcp_proxy import REPO, audit_rows, call_id, proxy_session, text_of, write_config

from tooltrace.mcp import McpProxy, build_server, load_config

WIRE = str(REPO / "tests" / "mcp_servers" / "wire.py")


def _config(tmp: Path, log: Path) -> Path:
    return write_config(tmp, f"""
[proxy]
home = "home"
[servers.wire]
command = {json.dumps(sys.executable)}
args = [{json.dumps(WIRE)}]
env = {{ WIRE_LOG = {json.dumps(str(log))} }}
timeout_s = 20.0
""")


def _received(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_tools_call_goes_upstream_on_the_fast_path(tmp_path: Path) -> None:
    log = tmp_path / "wire.log"
    config = _config(tmp_path, log)

    async def scenario() -> tuple[list[Any], int]:
        proxy = McpProxy(load_config(config))
        await proxy.start()
        server = build_server(proxy, "stdio")
        out = []
        try:
            async with create_client_server_memory_streams() as (client, srv), \
                    anyio.create_task_group() as tg:
                tg.start_soon(lambda: server.run(srv[0], srv[1],
                                                 server.create_initialization_options()))
                async with ClientSession(client[0], client[1]) as s:
                    await s.initialize()
                    await s.list_tools()
                    for word in ("one", "two", "three"):
                        out.append(await s.call_tool("echo", {"text": word}))
                tg.cancel_scope.cancel()
            return out, proxy.upstreams["wire"].fast_calls
        finally:
            await proxy.aclose()

    results, fast = asyncio.run(scenario())
    assert [text_of(r) for r in results] == ["one", "two", "three"]
    assert fast == 3
    sent = _received(log)
    calls = [m for m in sent if m.get("method") == "tools/call"]
    # The proxy's own requests of its upstream (the SDK's) keep integer ids; tools/call has its
    # own id space. The client asked for no progress: the upstream is asked for none (the
    # proxy sends no progress token of its own).
    assert [c["id"] for c in calls] == ["tt-1", "tt-2", "tt-3"]
    assert all("progressToken" not in c["params"].get("_meta", {}) for c in calls)
    assert [c["params"]["arguments"] for c in calls] == [{"text": w} for w in
                                                        ("one", "two", "three")]
    others = [m for m in sent if m.get("method") in ("initialize", "tools/list")]
    assert others and all(isinstance(m["id"], int) for m in others)
    rows = audit_rows(tmp_path / "home")
    assert [rows[call_id(r)]["status"] for r in results] == ["ok", "ok", "ok"]


def test_progress_and_cancel_during_a_fast_path_call(tmp_path: Path) -> None:
    log = tmp_path / "wire.log"
    config = _config(tmp_path, log)
    marks: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        marks.append((done, total, message))

    async def scenario() -> tuple[Any, Any]:
        async with proxy_session(config) as s:
            done = await s.call_tool("slow", {"seconds": 0.2, "steps": 3},
                                     progress_callback=on_progress)
            slow = asyncio.ensure_future(s.call_tool("slow", {"seconds": 30}))
            for _ in range(200):  # until the proxy has sent it upstream
                await asyncio.sleep(0.05)
                if log.exists() and log.read_text().count('"slow"') == 2:
                    break
            slow.cancel()  # the client sends notifications/cancelled
            with contextlib.suppress(asyncio.CancelledError):
                await slow
            return done, await s.call_tool("echo", {"text": "after"})

    done, after = asyncio.run(scenario())
    assert text_of(done) == "slow done"
    # The upstream's marks, as the call's own progress (which the registry rate-limits).
    assert marks and marks[0] == (1, 3, "step 1")
    assert all((t, m) == (3, f"step {d:g}") for d, t, m in marks)
    assert [d for d, _t, _m in marks] == sorted({d for d, _t, _m in marks})
    assert text_of(after) == "after"
    sent = _received(log)
    cancelled = [m for m in sent if m.get("method") == "notifications/cancelled"]
    second = [m for m in sent if m.get("method") == "tools/call"][1]
    # The upstream hears of the cancel under the id it was sent, as the SDK would tell it.
    assert [c["params"] for c in cancelled] == [
        {"requestId": second["id"], "reason": "caller cancelled"}]
    rows = audit_rows(tmp_path / "home")
    slow_row = next(r for r in rows.values() if r["tool"] == "slow" and r["status"] != "ok")
    assert (slow_row["status"], slow_row["error_type"], slow_row["execution_started"]) == (
        "unknown", "cancelled", True)


def test_error_answer_and_crash_mid_call_keep_their_envelopes(tmp_path: Path) -> None:
    log = tmp_path / "wire.log"
    config = _config(tmp_path, log)

    async def scenario() -> list[Any]:
        async with proxy_session(config) as s:
            try:
                await s.call_tool("refuse", {})
            except MCPError as exc:
                refused = exc
            return [refused, await s.call_tool("garble", {}), await s.call_tool("crash", {}),
                    await s.call_tool("echo", {"text": "restarted"})]

    refused, garbled, crashed, after = asyncio.run(scenario())
    rows = audit_rows(tmp_path / "home")
    assert crashed.is_error
    # The upstream's JSON-RPC error reaches the client as it was sent; the trail has the call.
    assert (refused.code, refused.message, refused.data) == (-32603, "the server refused", None)
    refused_row = next(r for r in rows.values() if r["tool"] == "refuse")
    assert (refused_row["status"], refused_row["error_type"]) == ("failed", "-32603")
    assert "answered error -32603: the server refused" in str(refused_row["summary"])
    # A malformed answer is judged by the connection's reader, as any line: not JSON-RPC, so the
    # server is restarted and the call's outcome is unknown.
    assert garbled.is_error and "not JSON-RPC" in text_of(garbled)
    assert (rows[call_id(garbled)]["status"], rows[call_id(garbled)]["error_type"]) == (
        "unknown", "upstream_protocol_error")
    # The server died after the request was sent: the outcome is unknown, and it is restarted.
    assert "exited" in text_of(crashed) or "closed the connection" in text_of(crashed)
    assert (rows[call_id(crashed)]["status"], rows[call_id(crashed)]["error_type"]) == (
        "unknown", "upstream_exited")
    assert text_of(after) == "restarted"
    assert "Traceback" not in text_of(crashed)


def test_other_requests_are_answered_during_a_slow_fast_path_call(tmp_path: Path) -> None:
    log = tmp_path / "wire.log"
    config = _config(tmp_path, log)

    async def scenario() -> tuple[list[str], Any, list[str]]:
        order: list[str] = []
        async with proxy_session(config) as s:
            async def slow() -> Any:
                res = await s.call_tool("slow", {"seconds": 3})
                order.append("slow")
                return res

            pending = asyncio.ensure_future(slow())
            await asyncio.sleep(0.3)
            tools = [t.name for t in (await s.list_tools()).tools]
            order.append("list")
            await s.send_ping()
            order.append("ping")
            echo = await s.call_tool("echo", {"text": "meanwhile"})
            order.append(text_of(echo))
            res = await pending
            return order, res, tools

    order, res, tools = asyncio.run(scenario())
    assert order == ["list", "ping", "meanwhile", "slow"]
    assert text_of(res) == "slow done"
    assert {"echo", "slow", "refuse", "garble", "crash"} <= set(tools)
