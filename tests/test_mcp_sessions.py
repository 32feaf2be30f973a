"""Client sessions of a proxy over streamable HTTP: requests without a session id, sessions that
go idle, and sessions their client ends.

One proxy (a subprocess, ``--http``, ``--idle-timeout 3``) in front of the SDK ``MCPServer``
``tests/mcp_servers/asking.py``, whose ``pid`` tool names the upstream process a call reached.
An official SDK client (with a session, holding its stream open) stays connected throughout;
raw HTTP requests play the other clients:

- without ``Mcp-Session-Id`` on the 2025 protocol: the SDK's front end answers 400;
- without one on the session-less 2026-07-28 protocol: served on the proxy's shared upstream
  connection, never on a session's; a server-to-client request made for it is declined
  with a message naming why (the proxy's own backstop), never sent to the other client. (The
  upstream is held at the 2025-11-25 revision here, as a server that speaks no later one
  would be: speaking 2026-07-28, it could not ask its client during a call at all.)
- a session left idle: its upstream process ends, and its session id then gets 404;
- a session ended with ``DELETE``: its upstream process ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import mcp.types as mt
import pytest
from mcp import ClientSession
from support.otlp import free_port
from test_mcp_backchannel import ASKING
from test_mcp_proxy import REPO, audit_rows, text_of

IDLE_S = 3
OLD, MODERN = "2025-06-18", "2026-07-28"
ACCEPT = "application/json, text/event-stream"


def _message(r: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response (a JSON body, or the last SSE event's data)."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
        return dict(json.loads([d for d in data if d][-1]))
    return dict(r.json())


def _post(url: str, body: dict[str, Any], *, session: str | None = None,
          version: str = OLD) -> httpx.Response:
    headers = {"accept": ACCEPT, "mcp-protocol-version": version}
    if session:
        headers["mcp-session-id"] = session
    if version == MODERN and "method" in body:
        headers["mcp-method"] = body["method"]
        name = (body.get("params") or {}).get("name")
        if name:
            headers["mcp-name"] = name
    return httpx.post(url, json=body, headers=headers, timeout=60)


def _call(tool: str, args: dict[str, Any], n: int, *, modern: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": args}
    if modern:  # the 2026-07-28 envelope: every request says who it is, no handshake
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def _raw_session(url: str) -> tuple[str, int]:
    """A client session opened by hand (no open stream); its id and its upstream's pid."""
    r = _post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": OLD, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
    assert r.status_code == 200, r.text
    session = r.headers["mcp-session-id"]
    r = _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session=session)
    assert r.status_code == 202, r.text
    return session, _pid(_post(url, _call("pid", {}, 2), session=session))


def _pid(r: httpx.Response) -> int:
    assert r.status_code == 200, r.text
    result = _message(r)["result"]
    assert not result.get("isError"), result
    return int(result["content"][0]["text"])


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


def _until_gone(pid: int, tries: int = 600) -> bool:
    for _ in range(tries):
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from mcp.client.streamable_http import streamable_http_client

    tmp = tmp_path_factory.mktemp("sessions")
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    config = tmp / "proxy.toml"
    config.write_text(f"[servers.asking]\ncommand = {json.dumps(sys.executable)}\n"
                      f"args = [{json.dumps(str(ASKING))}]\nprotocol_version = \"2025-11-25\"\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tooltrace.mcp", "proxy", "--home", str(tmp / "home"),
         "--http", f"127.0.0.1:{port}", "--idle-timeout", str(IDLE_S), "--config", str(config)],
        cwd=tmp, env={**os.environ, "PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "info"},
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out: dict[str, Any] = {"asked": []}

    async def sampling(ctx: Any, params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        out["asked"].append(params)
        return mt.CreateMessageResult(role="assistant", model="m",
                                      content=mt.TextContent(type="text", text="from A"))

    async def scenario() -> None:
        async with streamable_http_client(url) as (read, write, *_), \
                ClientSession(read, write, sampling_callback=sampling) as a:
            await asyncio.wait_for(a.initialize(), 60)
            out["pid_a"] = int(text_of(await a.call_tool("pid", {})))
            # Other clients, while A is connected (blocking calls: in a thread).
            out.update(await asyncio.to_thread(others, url))
            out["pid_a_after"] = int(text_of(await a.call_tool("pid", {})))
            out["a_alive"] = _alive(out["pid_a"])

    lines: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "listening on" in line:
                break
        else:
            pytest.fail("the proxy exited before listening:\n" + "".join(lines))
        asyncio.run(scenario())
    finally:
        proc.terminate()
        try:
            _, rest = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, rest = proc.communicate(timeout=30)
    out["stderr"] = "".join(lines) + (rest or "")
    out["rows"] = list(audit_rows(tmp / "home").values())
    return out


def others(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["old"] = _post(url, _call("sample", {"prompt": "hi"}, 1))
    out["modern_sample"] = _post(url, _call("sample", {"prompt": "hi"}, 1, modern=True),
                                 version=MODERN)
    out["modern_pid"] = _pid(_post(url, _call("pid", {}, 2, modern=True), version=MODERN))
    # A session left alone: no request in flight, no stream open.
    idle, out["pid_idle"] = _raw_session(url)
    out["idle_gone"] = _until_gone(out["pid_idle"])
    out["idle_back"] = _post(url, _call("pid", {}, 3), session=idle)
    # A session its client ends.
    ended, out["pid_ended"] = _raw_session(url)
    out["delete"] = httpx.delete(url, headers={"mcp-session-id": ended,
                                               "mcp-protocol-version": OLD}, timeout=60)
    out["ended_gone"] = _until_gone(out["pid_ended"])
    return out


def test_a_request_without_session_id_on_the_2025_protocol_gets_400(run: dict[str, Any]
                                                                    ) -> None:
    r = run["old"]
    assert r.status_code == 400 and "Missing session ID" in r.text, r.text


def test_a_sessionless_request_never_reaches_another_clients_upstream(run: dict[str, Any]
                                                                       ) -> None:
    # Served on the proxy's shared connection, not on A's.
    assert run["modern_pid"] != run["pid_a"]
    assert run["pid_a_after"] == run["pid_a"]
    # The upstream answers its tool's failed request with a JSON-RPC error, which the client
    # gets as the upstream sent it (the proxy's refusal is its message).
    r = run["modern_sample"]
    error = _message(r)["error"]
    assert "client without an MCP session id" in error["message"], r.text
    # The upstream's sampling request went to nobody: not to A, which could have answered.
    assert run["asked"] == []
    assert "refused (the calls in flight come from clients without a session id)" in (
        run["stderr"])
    declined = [(r["status"], r["error_type"]) for r in run["rows"]
                if r["tool"] == "mcp.asking.sampling"]
    assert declined == [("failed", "declined")]


def test_an_idle_session_ends_and_its_upstream_process_with_it(run: dict[str, Any]) -> None:
    assert run["idle_gone"], "the idle session's upstream process still runs"
    assert f"a client session was idle for {IDLE_S} s; closing its 1 upstream connection(s)" in (
        run["stderr"])
    back = run["idle_back"]
    assert back.status_code == 404, back.text
    assert _message(back)["error"]["message"] == "Session not found"
    # The connected client, which holds its stream open, is not idle.
    assert run["a_alive"] and run["pid_a_after"] == run["pid_a"]


def test_delete_ends_a_session_and_its_upstream_process(run: dict[str, Any]) -> None:
    assert run["delete"].status_code == 200, run["delete"].text
    assert run["ended_gone"], "the ended session's upstream process still runs"
    assert "a client session was ended by its client (DELETE); closing its 1 upstream" in (
        run["stderr"])
