"""Server-to-client requests through the proxy: an upstream built with the SDK's ``MCPServer``
asks for sampling, elicitation and roots while it runs a tool; the official SDK client in front
of the proxy (a subprocess, over stdio and over streamable HTTP) answers them, and the answers
reach the upstream.

A client that did not declare a capability gets a clean tool error (the upstream hears the
SDK's "not supported" error), not a hang; nothing the client answered is logged.

One test drives the backchannel in process, where the order of events can be pinned: a request
the upstream asked before the client's handshake stays outside any request even when the
client's first call has started by the time the handshake is seen (over real pipes that order
happens only sometimes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import mcp.types as mt
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.shared.exceptions import MCPError
from support.mcp_client import patient_stdio_client
from test_mcp_proxy import REPO, audit_rows, text_of, write_config

ASKING = str(REPO / "tests" / "mcp_servers" / "asking.py")
SECRET = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"


def _run(tmp: Path, extra: str = "", calls: tuple[tuple[str, dict[str, Any]], ...] = (
        ("sample", {"prompt": "say hi " + SECRET}), ("ask", {"question": "your name?"}),
        ("roots", {})), **callbacks: Any) -> dict[str, Any]:
    config = write_config(tmp, f"""
[proxy]
home = "home"
workspace = "."
[servers.asking]
command = {json.dumps(sys.executable)}
args = [{json.dumps(ASKING)}]
{extra}""")
    async def scenario() -> dict[str, Any]:
        res: dict[str, Any] = {}
        params = StdioServerParameters(
            command=sys.executable, cwd=str(tmp),
            args=["-m", "tooltrace.mcp", "proxy", "--config", str(config)],
            env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "debug"})
        with tempfile.TemporaryFile("w+") as err:
            async with patient_stdio_client(params, errlog=err) as (read, write), \
                    ClientSession(read, write, **callbacks) as s:
                await asyncio.wait_for(s.initialize(), 60)
                for tool, args in calls:
                    key = args.pop("n", tool)
                    try:
                        res[key] = await asyncio.wait_for(s.call_tool(tool, args), 60)
                    except MCPError as exc:  # the upstream's JSON-RPC error, handed on
                        res[key] = exc
            err.seek(0)
            res["stderr"] = err.read()
        return res

    res = asyncio.run(scenario())
    res["rows"] = list(audit_rows(tmp / "home").values())
    res["home"] = tmp / "home"
    return res


@pytest.fixture(scope="module")
def answered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def sampling(ctx: Any, params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        seen["sampling"] = params
        return mt.CreateMessageResult(
            role="assistant", model="test-model",
            content=mt.TextContent(type="text", text="hi from the client " + SECRET))

    async def elicitation(ctx: Any, params: mt.ElicitRequestParams) -> mt.ElicitResult:
        seen["elicitation"] = params
        return mt.ElicitResult(action="accept", content={"name": "Ada"})

    async def list_roots(ctx: Any) -> mt.ListRootsResult:
        seen["roots"] = True
        return mt.ListRootsResult(roots=[mt.Root(uri="file:///srv/project", name="project")])

    res = _run(tmp_path_factory.mktemp("backchannel"), sampling_callback=sampling,
               elicitation_callback=elicitation, list_roots_callback=list_roots)
    res["seen"] = seen
    return res


def test_sampling_reaches_the_client_and_its_answer_the_upstream(answered: dict[str, Any]
                                                                  ) -> None:
    params = answered["seen"]["sampling"]
    assert [m.content.text for m in params.messages] == ["say hi " + SECRET]
    assert (params.max_tokens, params.system_prompt) == (50, "be brief")
    res = answered["sample"]
    assert not res.is_error
    got = json.loads(text_of(res).replace("[REDACTED", "REDACTED"))  # redacted in the result
    assert got["model"] == "test-model"
    assert got["text"].startswith("hi from the client ") and SECRET not in got["text"]


def test_elicitation_and_roots_round_trip(answered: dict[str, Any]) -> None:
    assert answered["seen"]["elicitation"].message == "your name?"
    assert json.loads(text_of(answered["ask"])) == {"action": "accept", "data": {"name": "Ada"}}
    assert answered["seen"]["roots"] is True
    assert json.loads(text_of(answered["roots"])) == ["file:///srv/project"]


def test_answers_are_not_logged_and_calls_are_audited(answered: dict[str, Any]) -> None:
    assert SECRET not in answered["stderr"]
    assert "hi from the client" not in answered["stderr"]
    assert "refused" not in answered["stderr"]
    tools = sorted(r["tool"] for r in answered["rows"] if not r["tool"].startswith("mcp."))
    assert tools == ["ask", "roots", "sample"]
    assert SECRET not in json.dumps([r["result_preview"] for r in answered["rows"]])


def test_each_server_request_is_audited_as_a_child_of_its_call(answered: dict[str, Any]
                                                                ) -> None:
    by_tool = {r["tool"]: r for r in answered["rows"]}
    for tool, kind, method in (("sample", "sampling", "sampling/createMessage"),
                               ("ask", "elicitation", "elicitation/create"),
                               ("roots", "roots", "roots/list")):
        row = by_tool[f"mcp.asking.{kind}"]
        assert row["parent_call_id"] == by_tool[tool]["call_id"], kind
        assert (row["status"], row["error_type"]) == ("ok", None), kind
        args = json.loads(row["args_redacted"])
        assert args["method"] == method and args["in_call"] is True, kind
        assert "answered" in row["result_preview"], kind
        assert row["elapsed_ms"] is not None and row["elapsed_ms"] >= 0
    assert "test-model" in by_tool["mcp.asking.sampling"]["result_preview"]
    assert "accept" in by_tool["mcp.asking.elicitation"]["result_preview"]
    # Sizes, never the content: the message's secret and its system prompt (which only the
    # sampling request carries) are in no file of the trail (segments, DuckDB, Parquet).
    files = [p for p in answered["home"].rglob("*") if p.is_file()]
    assert files
    for p in files:
        data = p.read_bytes()
        assert SECRET.encode() not in data, p
        assert b"be brief" not in data, p


def test_a_client_without_the_capabilities_gets_the_upstreams_errors(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    res = _run(tmp_path_factory.mktemp("backchannel-none"))
    for tool, message in (("sample", "Sampling not supported"),
                          ("ask", "Elicitation not supported"),
                          ("roots", "List roots not supported")):
        # The upstream's tool fails on the SDK's "not supported" answer, and the upstream
        # answers the call with that JSON-RPC error, which reaches the client as it was sent.
        got = res[tool]
        text = got.message if isinstance(got, MCPError) else text_of(got)
        assert isinstance(got, MCPError) or got.is_error, tool
        assert message in text, (tool, text)
    assert "client lacks capability" in res["stderr"]
    declined = {r["tool"]: (r["status"], r["error_type"]) for r in res["rows"]
                if r["tool"].startswith("mcp.")}
    assert declined == {f"mcp.asking.{k}": ("failed", "declined")
                        for k in ("sampling", "elicitation", "roots")}


def test_refused_unanswered_and_failed_requests_are_audited_with_their_outcome(
        tmp_path: Path) -> None:
    # The proxy denies sampling by name; a policy file denies every call without side effects
    # and asks for every read (rules about tools, which leave the client requests alone); the
    # client answers elicitation with an error, and the first roots request never (it may wait
    # 1 s), the second at once.
    (tmp_path / "policy.toml").write_text("""version = 1
[[rules]]
id = "no-side-effect-free-calls"
effects = ["none"]
reason = "broad"

[approval]
capabilities = ["read"]
""")
    asked: list[str] = []
    never = asyncio.Event()

    async def sampling(ctx: Any, params: Any) -> Any:
        asked.append("sampling")
        return mt.CreateMessageResult(role="assistant", model="m",
                                      content=mt.TextContent(type="text", text="no"))

    async def elicitation(ctx: Any, params: Any) -> mt.ErrorData:
        asked.append("elicitation")
        return mt.ErrorData(code=-32042, message="the user closed the form")

    async def list_roots(ctx: Any) -> mt.ListRootsResult:
        asked.append("roots")
        if asked.count("roots") == 1:
            await never.wait()
        return mt.ListRootsResult(roots=[])

    kinds = ("sampling", "elicitation", "roots", "roots")
    res = _run(tmp_path, 'client_timeout_s = 1\n[policy]\ndeny = ["mcp.asking.sampling"]\n'
               'file = "policy.toml"\n',
               tuple(("probe", {"kind": k, "n": i}) for i, k in enumerate(kinds)),
               sampling_callback=sampling, elicitation_callback=elicitation,
               list_roots_callback=list_roots)
    # What the upstream got: a JSON-RPC error each, saying why (or the answer).
    got = [json.loads(text_of(res[i])) for i in range(len(kinds))]
    assert got == [
        {"code": mt.INVALID_REQUEST, "message": "sampling/createMessage refused by the "
         "proxy's policy"},
        {"code": -32042, "message": "the user closed the form"},
        {"code": mt.INVALID_REQUEST, "message": "roots/list not answered (timeout)"},
        {"answered": True}]
    assert asked == ["elicitation", "roots", "roots"]  # a refused request never reaches it
    rows = [r for r in res["rows"] if r["tool"].startswith("mcp.")]
    outcome = [(r["tool"], r["status"], r["reject_stage"], r["error_type"]) for r in rows]
    assert outcome == [("mcp.asking.sampling", "rejected", "policy", "policy"),
                       ("mcp.asking.elicitation", "failed", None, "client_error"),
                       ("mcp.asking.roots", "failed", None, "timeout"),
                       ("mcp.asking.roots", "ok", None, None)], outcome
    probes = [r for r in res["rows"] if r["tool"] == "probe"]
    assert [r["parent_call_id"] for r in rows] == [r["call_id"] for r in probes]
    assert all(r["status"] == "ok" for r in probes)
    assert ("policy", "policy:mcp_deny", "deny") in audit_steps_detail(
        res["home"], rows[0]["call_id"])
    assert "the user closed the form" not in json.dumps([r["result_preview"] for r in rows])


_POLICY_FILE = """version = 1
[[rules]]
id = "no-sampling"
tools = ["mcp.*.sampling"]
reason = "no server may ask the model"
"""


@pytest.mark.parametrize(("config", "decider"), [
    ('[policy]\ndeny = ["mcp.*.sampling"]\n', "policy:mcp_deny"),
    ('[policy]\nfile = "policy.toml"\n', "policy:no-sampling"),
], ids=["proxy-config", "policy-file"])
def test_a_wildcard_denies_every_servers_sampling(tmp_path: Path, config: str,
                                                  decider: str) -> None:
    """``mcp.*.sampling``, in ``[policy] deny`` or in a rule of the proxy's policy file,
    refuses the sampling of a server it does not name."""
    (tmp_path / "policy.toml").write_text(_POLICY_FILE)
    asked: list[str] = []

    async def sampling(ctx: Any, params: Any) -> Any:
        asked.append("sampling")
        return mt.CreateMessageResult(role="assistant", model="m",
                                      content=mt.TextContent(type="text", text="no"))

    res = _run(tmp_path, config, (("probe", {"kind": "sampling", "n": 0}),),
               sampling_callback=sampling)
    assert json.loads(text_of(res[0])) == {
        "code": mt.INVALID_REQUEST, "message": "sampling/createMessage refused by the proxy's "
        "policy"}
    assert asked == []
    row = next(r for r in res["rows"] if r["tool"] == "mcp.asking.sampling")
    assert (row["status"], row["reject_stage"]) == ("rejected", "policy")
    assert ("policy", decider, "deny") in audit_steps_detail(res["home"], row["call_id"])


def audit_steps_detail(home: Path, call_id: str) -> list[tuple[str, str, str]]:
    from tooltrace.audit import AuditStore

    with AuditStore(home) as store:
        rows = store.sql("SELECT step, decider, decision FROM tool_call_steps "
                         "WHERE call_id = $c ORDER BY seq", {"c": call_id}).rows
    return [tuple(r) for r in rows]  # type: ignore[misc]


def test_sampling_over_streamable_http(tmp_path: Path) -> None:
    # Over HTTP the request must ride the stream of the call it belongs to.
    from mcp.client.streamable_http import streamable_http_client
    from support.otlp import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tooltrace.mcp", "proxy", "--home", str(tmp_path / "home"),
         "--http", f"127.0.0.1:{port}", "--name", "asking", "--", sys.executable, ASKING],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error"},
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    async def sampling(ctx: Any, params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        return mt.CreateMessageResult(role="assistant", model="http-model",
                                      content=mt.TextContent(type="text", text="over http"))

    async def scenario() -> Any:
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, *_), \
                ClientSession(read, write, sampling_callback=sampling) as s:
            await asyncio.wait_for(s.initialize(), 60)
            return await asyncio.wait_for(s.call_tool("sample", {"prompt": "hi"}), 60)

    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "listening on" in line:
                break
        else:
            pytest.fail("the proxy exited before listening")
        res = asyncio.run(scenario())
        # A client without a session id is refused before anything is forwarded: no request
        # of it can reach an upstream, so no server-to-client request can be routed to it.
        import httpx

        sessionless = [httpx.post(f"http://127.0.0.1:{port}/mcp", json={
            "jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "sample", "arguments": {"prompt": "hi"}}}, headers={
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-06-18"}, timeout=30) for n in (1, 2)]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    assert not res.is_error, text_of(res)
    assert json.loads(text_of(res)) == {"model": "http-model", "text": "over http"}
    for r in sessionless:
        assert r.status_code == 400 and "Missing session ID" in r.text, r.text
    rows = audit_rows(tmp_path / "home").values()
    assert sorted(r["tool"] for r in rows) == ["mcp.asking.sampling", "sample"]


def test_a_request_asked_before_the_client_stays_outside_the_first_call(
        caplog: pytest.LogCaptureFixture) -> None:
    # roots/list asked while no client is there waits for one; if the client's first request
    # is already in flight when its handshake is seen, the waiting request still belongs to
    # no request (it was asked before that request existed).
    from tooltrace.mcp._backchannel import Backchannel

    class Downstream:  # the one client, as the proxy's front end holds it
        client_capabilities = mt.ClientCapabilities(roots=mt.RootsCapability())

        async def list_roots(self) -> mt.ListRootsResult:
            return mt.ListRootsResult(roots=[mt.Root(uri="file:///first")])

    async def scenario() -> list[Any]:
        channel, client = Backchannel(), Downstream()
        roots = channel.callbacks("up", fallback=lambda: client)["list_roots_callback"]
        asked = asyncio.create_task(roots(None))
        await asyncio.sleep(0)  # the upstream's request is waiting for a client
        with channel.serving("up", client, 7):  # the client's first call is in flight
            channel.client_arrived.set()
            return [await asked, await roots(None)]  # the second belongs to that call

    caplog.set_level(logging.INFO, logger="tooltrace.mcp")
    answers = asyncio.run(scenario())
    assert [[str(r.uri) for r in a.roots] for a in answers] == [["file:///first"]] * 2
    assert caplog.messages == [
        "mcp upstream up: roots/list (outside any request) answered by the client",
        "mcp upstream up: roots/list (during a request) answered by the client"]
