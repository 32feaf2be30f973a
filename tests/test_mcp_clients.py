"""Several clients of one proxy over streamable HTTP: each gets what belongs to it, and only that.

Two official SDK clients connect to one proxy (a subprocess, ``--http``) at once, in front of
the low-level SDK server ``tests/mcp_servers/notifying.py``. Their ``work`` calls are in flight
together (the upstream holds each until both arrived), and the upstream asks for sampling in
each: every client gets its own progress and its own sampling request. The upstream's roots
request, sent on its own right after each client's upstream connection opened, reaches the
client it belongs to. A resource update reaches the client that subscribed and not the other;
log messages and list changes reach the client whose call caused them.
When a client ends its session, its upstream connection is closed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp.types as mt
import pytest
from mcp import ClientSession
from support.otlp import free_port
from test_mcp_notifications import NOTIFYING, until
from test_mcp_proxy import REPO, text_of


async def _client(tag: str, url: str, meet: Path, both: asyncio.Barrier) -> dict[str, Any]:
    from mcp.client.streamable_http import streamable_http_client

    got: list[Any] = []
    progress: list[str | None] = []
    asked: list[str] = []

    async def on_message(message: Any) -> None:
        got.append(getattr(message, "root", message))

    async def sampling(ctx: Any, params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        asked.append(params.messages[0].content.text)  # type: ignore[union-attr]
        return mt.CreateMessageResult(role="assistant", model=f"model-{tag}",
                                      content=mt.TextContent(type="text", text=f"from {tag}"))

    async def list_roots(ctx: Any) -> mt.ListRootsResult:
        return mt.ListRootsResult(roots=[mt.Root(uri=f"file:///{tag}")])

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    def logs() -> list[Any]:
        return [m.params.data for m in got if isinstance(m, mt.LoggingMessageNotification)]

    def updates() -> list[str]:
        return [str(m.params.uri) for m in got if isinstance(m, mt.ResourceUpdatedNotification)]

    out: dict[str, Any] = {}
    async with streamable_http_client(url) as (read, write, *_), \
            ClientSession(read, write, message_handler=on_message, sampling_callback=sampling,
                          list_roots_callback=list_roots) as s:
        await asyncio.wait_for(s.initialize(), 60)
        # The first request opens this client's upstream connection, whose server then asks
        # for the roots on its own.
        for _ in range(200):
            out["roots"] = json.loads(text_of(await s.call_tool("seen_roots", {})))
            if out["roots"]:
                break
            await asyncio.sleep(0.05)
        if tag == "A":
            await s.subscribe_resource("note://a")
        await both.wait()
        res = await asyncio.wait_for(s.call_tool(
            "work", {"tag": tag, "steps": 3, "meet": str(meet)}, progress_callback=on_progress),
            60)
        out["work"] = json.loads(text_of(res))
        out["touch"] = text_of(await s.call_tool("touch", {"uri": "note://a"}))
        if tag == "A":
            await s.call_tool("change_lists", {})
            await until(lambda: updates() == ["note://a"], "A's update")
            await until(lambda: any(isinstance(m, mt.ResourceListChangedNotification)
                                    for m in got), "A's resources/list_changed")
        await until(lambda: logs(), f"{tag}'s log message")
        await both.wait()  # both touched: an update meant for A had time to reach B
        await s.call_tool("seen_roots", {})
        out["updates"], out["progress"], out["asked"] = updates(), progress, asked
        out["logs"] = logs()
        out["list_changed"] = sum(isinstance(m, mt.ResourceListChangedNotification) for m in got)
    return out


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("clients")
    (tmp / "meet").mkdir()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tooltrace.mcp", "proxy", "--home", str(tmp / "home"),
         "--workspace", str(tmp), "--http", f"127.0.0.1:{port}", "--name", "notifying", "--",
         sys.executable, NOTIFYING],
        cwd=tmp, env={**os.environ, "PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "info"},
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    async def scenario() -> dict[str, Any]:
        both = asyncio.Barrier(2)
        url = f"http://127.0.0.1:{port}/mcp"
        a, b = await asyncio.gather(_client("A", url, tmp / "meet", both),
                                    _client("B", url, tmp / "meet", both))
        return {"A": a, "B": b}

    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "listening on" in line:
                break
        else:
            pytest.fail("the proxy exited before listening:\n" + "".join(lines))
        res = asyncio.run(scenario())
    finally:
        proc.terminate()
        try:
            _, rest = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, rest = proc.communicate(timeout=30)
    res["stderr"] = "".join(lines) + (rest or "")
    return res


def test_each_client_gets_its_own_sampling_request_and_progress(two: dict[str, Any]) -> None:
    for tag in "AB":
        got = two[tag]
        assert got["work"] == {"model": f"model-{tag}", "text": f"from {tag}"}
        assert got["asked"] == [tag]
        # Progress is rate-limited (a mark may be skipped), but every mark is the client's own.
        assert got["progress"], tag
        assert set(got["progress"]) <= {f"{tag} 1", f"{tag} 2", f"{tag} 3"}, got["progress"]


def test_roots_asked_on_the_upstreams_own_reach_the_client_it_serves(two: dict[str, Any]
                                                                      ) -> None:
    assert two["A"]["roots"] == [["file:///A"]]
    assert two["B"]["roots"] == [["file:///B"]]


def test_a_resource_update_reaches_the_subscriber_only(two: dict[str, Any]) -> None:
    assert (two["A"]["touch"], two["A"]["updates"]) == ("touched", ["note://a"])
    assert (two["B"]["touch"], two["B"]["updates"]) == ("quiet", [])


def test_log_messages_and_list_changes_reach_only_the_client_they_belong_to(
        two: dict[str, Any]) -> None:
    assert two["A"]["logs"] == ["log A"] and two["B"]["logs"] == ["log B"]
    assert (two["A"]["list_changed"], two["B"]["list_changed"]) == (1, 0)


def test_each_client_session_has_its_own_upstream_connection_closed_with_it(
        two: dict[str, Any]) -> None:
    err = two["stderr"]
    assert err.count("notifying: connected for a client session") == 2
    assert err.count("a client session was ended by its client (DELETE); closing its 1 "
                     "upstream connection(s)") == 2
