"""Notifications and server-to-client requests outside tool calls, through the proxy over stdio:
the official SDK client in front of the proxy (a subprocess), the low-level SDK server
``tests/mcp_servers/notifying.py`` behind it.

- ``notifications/resources/updated`` reaches the client for a URI it subscribed to, and stops
  once it unsubscribed; ``resources/list_changed`` and ``prompts/list_changed`` reach it.
- the upstream's ``roots/list`` sent on its own (right after its ``initialize``, before the
  client was even there, and after the client's ``notifications/roots/list_changed``) and its
  requests while it serves a ``resources/read`` or a ``prompts/get`` reach the client, and the
  answers go back; they are logged (method, and that they belonged to no request), never their
  content.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from typing import Any

import mcp.types as mt
import pytest
from mcp import ClientSession, StdioServerParameters
from support.mcp_client import patient_stdio_client
from test_mcp_proxy import REPO, audit_rows, text_of, write_config

NOTIFYING = str(REPO / "tests" / "mcp_servers" / "notifying.py")


async def until(cond: Any, what: str, tries: int = 300) -> None:
    """Wait (bounded) until ``cond()`` holds: notifications travel on their own."""
    for _ in range(tries):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("notifications")
    config = write_config(tmp, f"""
[proxy]
home = "home"
workspace = "."
[servers.notifying]
command = {json.dumps(sys.executable)}
args = [{json.dumps(NOTIFYING)}]
""")
    got: list[Any] = []
    roots = ["file:///first"]

    async def on_message(message: Any) -> None:
        got.append(getattr(message, "root", message))

    async def list_roots(ctx: Any) -> mt.ListRootsResult:
        return mt.ListRootsResult(roots=[mt.Root(uri=u) for u in roots])

    async def sampling(ctx: Any, params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        return mt.CreateMessageResult(role="assistant", model="stdio-model",
                                      content=mt.TextContent(type="text", text="sampled"))

    def updates() -> list[str]:
        return [str(m.params.uri) for m in got if isinstance(m, mt.ResourceUpdatedNotification)]

    async def scenario() -> dict[str, Any]:
        res: dict[str, Any] = {}
        params = StdioServerParameters(
            command=sys.executable, cwd=str(tmp),
            args=["-m", "tooltrace.mcp", "proxy", "--config", str(config)],
            env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "info"})
        with tempfile.TemporaryFile("w+") as err:
            async with patient_stdio_client(params, errlog=err) as (read, write), \
                    ClientSession(read, write, message_handler=on_message,
                                  list_roots_callback=list_roots,
                                  sampling_callback=sampling) as s:
                await asyncio.wait_for(s.initialize(), 60)

                async def seen_roots(n: int) -> list[list[str]]:
                    # The upstream asks on its own: wait (bounded) until it was told n times.
                    for _ in range(200):
                        told = json.loads(text_of(await s.call_tool("seen_roots", {})))
                        if len(told) >= n:
                            break
                        await asyncio.sleep(0.05)
                    return list(told)

                # Asked right after the upstream's initialize, before this client connected.
                res["first_roots"] = await seen_roots(1)
                await s.subscribe_resource("note://a")
                res["touch_a"] = text_of(await s.call_tool("touch", {"uri": "note://a"}))
                await until(lambda: updates() == ["note://a"], "the update of note://a")
                res["touch_b"] = text_of(await s.call_tool("touch", {"uri": "note://b"}))
                await s.unsubscribe_resource("note://a")
                res["touch_a_after"] = text_of(await s.call_tool("touch", {"uri": "note://a"}))
                await s.call_tool("change_lists", {})
                kinds = (mt.ResourceListChangedNotification, mt.PromptListChangedNotification)
                await until(lambda: all(any(isinstance(m, k) for m in got) for k in kinds),
                            "both list_changed notifications")
                res["updates"] = updates()
                res["read_roots"] = await s.read_resource("note://roots")
                res["prompt"] = await s.get_prompt("sampled")
                roots[:] = ["file:///second", "file:///third"]
                await s.send_roots_list_changed()
                res["roots"] = await seen_roots(2)
            err.seek(0)
            res["stderr"] = err.read()
        return res

    res = asyncio.run(scenario())
    res["rows"] = list(audit_rows(tmp / "home").values())
    return res


def test_resource_updates_reach_the_subscriber_until_it_unsubscribes(out: dict[str, Any]
                                                                      ) -> None:
    assert (out["touch_a"], out["touch_b"], out["touch_a_after"]) == ("touched", "quiet", "quiet")
    assert out["updates"] == ["note://a"]


def test_roots_asked_outside_any_call_reach_the_client(out: dict[str, Any]) -> None:
    # Right after the upstream's initialize (the proxy's client came later, and was waited for).
    assert out["first_roots"] == [["file:///first"]]
    # After the client's roots/list_changed: the notification reached the upstream, which asked.
    assert out["roots"] == [["file:///first"], ["file:///second", "file:///third"]]
    assert "roots/list (outside any request) answered by the client" in out["stderr"]
    assert "file:///second" not in out["stderr"]


def test_requests_while_serving_a_read_or_a_prompt_reach_the_client(out: dict[str, Any]
                                                                     ) -> None:
    assert json.loads(out["read_roots"].contents[0].text) == ["file:///first"]
    [message] = out["prompt"].messages
    assert message.content.text == "stdio-model: sampled"
    assert "sampled" not in out["stderr"]
    kinds = sorted({r["tool"] for r in out["rows"] if r["tool"].startswith("mcp.")})
    assert kinds == ["mcp.notifying.get_prompt", "mcp.notifying.read_resource",
                     "mcp.notifying.roots", "mcp.notifying.sampling"]


def test_server_requests_are_audited_in_and_outside_calls(out: dict[str, Any]) -> None:
    by_id = {r["call_id"]: r for r in out["rows"]}
    asked = [r for r in out["rows"] if r["tool"] in ("mcp.notifying.roots",
                                                      "mcp.notifying.sampling")]
    assert all((r["status"], r["error_type"]) == ("ok", None) for r in asked)
    parents = {(r["tool"], by_id[r["parent_call_id"]]["tool"]) for r in asked
               if r["parent_call_id"]}
    # A roots/list the upstream sends on its own while a seen_roots call is in flight over
    # stdio is recorded on that call (the one request it can be tied to).
    assert parents - {("mcp.notifying.roots", "seen_roots")} == {
        ("mcp.notifying.roots", "mcp.notifying.read_resource"),
        ("mcp.notifying.sampling", "mcp.notifying.get_prompt")}
    # On its own with no call in flight (right after the upstream's initialize): its own call.
    alone = [r for r in asked if not r["parent_call_id"]]
    assert alone and {r["tool"] for r in alone} == {"mcp.notifying.roots"}
    assert all(json.loads(r["args_redacted"])["in_call"] is False for r in alone)
    assert "file:///second" not in json.dumps(asked, default=str)
