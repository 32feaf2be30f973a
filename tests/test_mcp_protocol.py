"""The rest of the MCP protocol through the proxy: resources, templates, prompts, completion,
instructions, upstream progress and log messages, with the official SDK client in front of the
proxy (a subprocess) and a server built with the SDK's ``MCPServer`` behind it.

``resources/read`` and ``prompts/get`` are audited as their own kind and policed: the path
policy keeps a ``file://`` resource outside the workspace from being read at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import mcp.types as mt
import pytest
from click.testing import CliRunner
from mcp import ClientSession, StdioServerParameters
from mcp.shared.exceptions import MCPError
from support.mcp_client import patient_stdio_client
from support.otlp import free_port
from test_mcp_proxy import REPO, audit_rows, proxy_session, write_config

from tooltrace.cli.mcp import mcp as mcp_cli

RICH = str(REPO / "tests" / "mcp_servers" / "rich.py")


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("protocol")
    inside = tmp / "work" / "inside.txt"
    inside.parent.mkdir()
    inside.write_text("a file in the workspace")
    config = write_config(tmp, f"""
[proxy]
home = "home"
workspace = "work"
[servers.rich]
command = {json.dumps(sys.executable)}
args = [{json.dumps(RICH)}]
env = {{ RICH_FILE = {json.dumps(str(inside))} }}
""")
    logs: list[Any] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_log(params: mt.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def scenario() -> dict[str, Any]:
        res: dict[str, Any] = {}
        params = StdioServerParameters(
            command=sys.executable, cwd=str(tmp),
            args=["-m", "tooltrace.mcp", "proxy", "--config", str(config)],
            env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error"})
        async with patient_stdio_client(params) as (read, write), \
                ClientSession(read, write, logging_callback=on_log) as s:
            res["init"] = await asyncio.wait_for(s.initialize(), 60)
            res["resources"] = (await s.list_resources()).resources
            res["templates"] = (await s.list_resource_templates()).resource_templates
            res["greeting"] = await s.read_resource("note://greeting")
            res["secret"] = await s.read_resource("note://secret")
            res["templated"] = await s.read_resource("note://notes/alpha")
            res["inside"] = await s.read_resource(inside.as_uri())
            try:
                await s.read_resource("file:///etc/passwd")
            except MCPError as exc:
                res["outside"] = exc
            try:  # a server's read_resource is the registry's, not a tool of the proxy
                await s.call_tool("mcp.rich.read_resource", {"uri": "note://greeting"})
            except MCPError as exc:
                res["as_tool"] = exc
            res["prompts"] = (await s.list_prompts()).prompts
            res["prompt"] = await s.get_prompt("review", {"code": "x = 1"})
            res["complete"] = await s.complete(
                mt.PromptReference(type="ref/prompt", name="review"),
                {"name": "language", "value": "p"})
            res["progress_call"] = await s.call_tool("with_progress", {"steps": 3},
                                                     progress_callback=on_progress)
            for _ in range(100):  # the log notification travels on its own
                if logs:
                    break
                await asyncio.sleep(0.02)
        return res

    res = asyncio.run(scenario())
    res.update(logs=logs, progress=progress, home=tmp / "home")
    return res


def test_resources_and_templates_pass_through(out: dict[str, Any]) -> None:
    uris = {str(r.uri) for r in out["resources"]}
    assert {"note://greeting", "note://secret"} <= uris
    assert [t.uri_template for t in out["templates"]] == ["note://notes/{name}"]
    assert [c.text for c in out["greeting"].contents] == ["hello from rich"]
    assert [c.text for c in out["templated"].contents] == ["note alpha"]
    assert [c.text for c in out["inside"].contents] == ["a file in the workspace"]
    # Redacted in place, and said so in _meta; an unchanged read says nothing.
    secret = out["secret"].contents[0].text
    assert "AKIA" not in secret and secret.startswith("aws_access_key_id = [REDACTED")
    assert out["secret"].meta["tooltrace/changed"] == ["redacted"]
    assert out["secret"].meta["tooltrace/status"] == "ok"
    assert out["greeting"].meta is None


def test_reads_and_prompts_are_audited_as_their_own_kind(out: dict[str, Any]) -> None:
    rows = list(audit_rows(out["home"]).values())
    reads = [r for r in rows if r["tool"] == "mcp.rich.read_resource"]
    prompts = [r for r in rows if r["tool"] == "mcp.rich.get_prompt"]
    assert len(reads) == 5 and len(prompts) == 1
    assert all(json.loads(r["attributes"])["mcp.method.name"] == "resources/read"
               for r in reads)
    assert all(r["source"] == "mcp:rich" for r in reads + prompts)
    assert "AKIA" not in json.dumps([r["result_preview"] for r in reads])
    # A file:// resource outside the workspace: refused by the path policy, never read.
    outside = out["outside"]
    assert isinstance(outside, MCPError) and outside.code == -32602
    refused = [r for r in reads if r["status"] == "rejected"]
    assert [(r["reject_stage"], r["execution_started"]) for r in refused] == [("policy", False)]
    assert "/etc/passwd" not in outside.message
    assert out["as_tool"].code == -32602


def test_prompts_and_completion_pass_through(out: dict[str, Any]) -> None:
    assert [p.name for p in out["prompts"]] == ["review"]
    msg = out["prompt"].messages[0]
    assert (msg.role, msg.content.text) == ("user", "Review this python code:\nx = 1")
    assert out["complete"].completion.values == ["python", "perl", "php"]


def test_instructions_are_joined_per_server(out: dict[str, Any]) -> None:
    assert out["init"].instructions == "[rich]\nRich test server: one tool per kind of result."


def test_upstream_progress_and_logs_reach_the_client(out: dict[str, Any]) -> None:
    assert not out["progress_call"].is_error
    progress = out["progress"]
    assert progress and progress[-1] == (3.0, 3.0, "step 3 of 3")
    assert [p[0] for p in progress] == sorted(p[0] for p in progress)
    logs = out["logs"]
    # The logger name as the upstream gave it (rich names none).
    assert logs and logs[0].logger is None
    assert "working with" in str(logs[0].data) and "ghp_" not in str(logs[0].data)


def test_upstream_over_streamable_http_with_a_bearer_token(tmp_path: Path) -> None:
    token = "tok-" + "9f8e7d6c5b4a39281706f5e4d3c2b1a0"
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, RICH], env={**os.environ, "RICH_HTTP_PORT": str(port),
                                     "RICH_TOKEN": token},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):  # until it listens (a request without the token gets a 401)
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/mcp", timeout=2).close()
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.1)
        config = write_config(tmp_path, f"""
[proxy]
home = "home"
[servers.remote]
url = "http://127.0.0.1:{port}/mcp"
headers = {{ Authorization = "Bearer ${{RICH_TEST_TOKEN}}" }}
""")
        env = {"RICH_TEST_TOKEN": token, "TOOLTRACE_LOG_LEVEL": "info"}

        async def scenario() -> tuple[Any, Any]:
            async with proxy_session(config, env=env) as s:
                return (await s.call_tool("read_file", {}),
                        await s.read_resource("note://greeting"))

        res, greeting = asyncio.run(scenario())
        assert res.structured_content == {"content": "alpha\nbeta"}
        assert greeting.contents[0].text == "hello from rich"
        # The wrong token: the server refuses, the report says so, and no token is shown.
        bad = CliRunner().invoke(mcp_cli, ["report", "--config", str(config), "--json"],
                                 env={"RICH_TEST_TOKEN": "wrong-" + token})
        assert bad.exit_code == 1 and json.loads(bad.output)["servers"][0]["state"] == "failed"
        assert token not in bad.output
    finally:
        server.terminate()
        server.wait(timeout=30)
    for f in (tmp_path / "home").rglob("*"):
        if f.is_file():
            assert token.encode() not in f.read_bytes(), f


def test_a_client_cancel_follows_the_cancel_contract(tmp_path: Path) -> None:
    from test_mcp_proxy import call_id, toy_server

    config = write_config(tmp_path, f"""
[proxy]
home = "home"
{toy_server("toy", env={"TOY_TOOLS": "echo,hang"}, extra="timeout_s = 20.0")}
""")

    async def scenario() -> Any:
        async with proxy_session(config) as s:
            marker = tmp_path / "hanging"
            hang = asyncio.ensure_future(
                s.call_tool("hang", {"seconds": 2, "marker": str(marker)}))
            for _ in range(30_000):  # until the upstream has the call, not a guessed time
                if marker.exists():
                    break
                await asyncio.sleep(0.001)
            assert marker.exists(), "the upstream never got the call"
            hang.cancel()  # the client sends notifications/cancelled
            with contextlib.suppress(asyncio.CancelledError):
                await hang
            return await s.call_tool("echo", {"text": "after"})

    after = asyncio.run(scenario())
    assert not after.is_error
    rows = audit_rows(tmp_path / "home")
    hang = next(r for r in rows.values() if r["tool"] == "hang")
    # Told to stop and the upstream told too, but an MCP server cannot confirm it stopped: the
    # side-effecting call's outcome is unknown, never a silent gap in the trail.
    assert (hang["status"], hang["error_type"], hang["execution_started"]) == (
        "unknown", "cancelled", True)
    assert rows[call_id(after)]["status"] == "ok"
