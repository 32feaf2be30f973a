"""The proxy's stdio front end (``tooltrace.mcp._stdio``): stdin and stdout served on the event
loop, and the wire taken away from fds 0 and 1 while it serves (the line splitting both stdio
sides share: ``test_mcp_lines``)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from support.components import extra, require_module

REPO = Path(__file__).resolve().parent.parent
TOY = str(REPO / "tests" / "mcp_servers" / "toy.py")


def test_stray_stdout_output_goes_to_stderr_not_to_the_wire(tmp_path: Path) -> None:
    """A hook that prints to stdout while the proxy serves: the client still gets clean
    JSON-RPC, and the text lands on the proxy's stderr."""
    errlog = tmp_path / "stderr.txt"
    config = tmp_path / "servers.toml"
    config.write_text(
        f'[proxy]\nhooks = ["tests.mcp_servers.hooks:chatty"]\n\n'
        f"[servers.toy]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(TOY)}]\n"
        'env = { TOY_TOOLS = "echo" }\n')

    async def run() -> list[str]:
        params = StdioServerParameters(
            command=sys.executable, cwd=str(tmp_path),
            args=["-m", "tooltrace.mcp", "proxy", "--config", str(config)],
            env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error"})
        texts = []
        with errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (r, w), ClientSession(r, w) as s:
                await asyncio.wait_for(s.initialize(), 60)
                for word in ("one", "two"):
                    res = await s.call_tool("echo", {"text": word})
                    assert not res.is_error
                    texts.append("".join(getattr(b, "text", "") for b in res.content))
        return texts

    assert asyncio.run(run()) == ["toy:one", "toy:two"]
    assert errlog.read_text().count("chatty hook saw echo") == 2


def test_a_stdout_that_is_a_file_is_served_too(tmp_path: Path) -> None:
    """A file cannot be watched by the event loop: the SDK's threaded transport serves it."""
    answers = tmp_path / "out.jsonl"
    with answers.open("wb") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tooltrace.mcp", "proxy", "--home", str(tmp_path / "home"),
             "--name", "toy", "--", sys.executable, TOY],
            stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.DEVNULL, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error"})
        assert proc.stdin is not None
        try:
            proc.stdin.write(("\n".join(json.dumps(m) for m in [
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "file", "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            ]) + "\n").encode())
            proc.stdin.flush()
            deadline = time.monotonic() + 120
            while answers.read_text().count("\n") < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            proc.stdin.close()
            proc.wait(60)
    by_id = {m.get("id"): m for m in map(json.loads, answers.read_text().splitlines())}
    names = {t["name"] for t in by_id[2]["result"]["tools"]}
    assert "echo" in names and by_id[1]["result"]["serverInfo"]["name"] == "tooltrace-mcp-proxy"


@pytest.mark.parametrize(("choice", "loop"), [("auto", "uvloop"), ("asyncio", "asyncio")])
def test_the_proxy_runs_on_the_event_loop_chosen(tmp_path: Path, choice: str, loop: str) -> None:
    """``--loop auto`` takes uvloop (installed with the ``mcp`` extra), ``--loop asyncio`` the
    standard library's; calls go through either."""
    require_module("uvloop", extra("mcp"))
    errlog = tmp_path / "stderr.txt"

    async def run() -> str:
        params = StdioServerParameters(
            command=sys.executable, cwd=str(tmp_path),
            args=["-m", "tooltrace.mcp", "proxy", "--home", str(tmp_path / "home"),
                  "--loop", choice, "--name", "toy", "--", sys.executable, TOY],
            env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "debug", "TOY_TOOLS": "echo"})
        with errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (r, w), ClientSession(r, w) as s:
                await asyncio.wait_for(s.initialize(), 60)
                res = await s.call_tool("echo", {"text": "loop"})
        return "".join(getattr(b, "text", "") for b in res.content)

    assert asyncio.run(run()) == "toy:loop"
    log = errlog.read_text()
    assert f"mcp proxy: event loop {loop}" in log
    # What starting made is out of the collector's reach (the SDK alone makes ~100,000 objects).
    frozen = re.search(r"mcp proxy: (\d+) objects from start-up frozen", log)
    assert frozen is not None and int(frozen.group(1)) > 10_000


def test_loop_uvloop_without_uvloop_is_a_usage_error(tmp_path: Path) -> None:
    """``--loop uvloop`` where uvloop cannot be imported says so and exits 2."""
    shadow = tmp_path / "shadow" / "uvloop"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("no uvloop here")\n')
    out = subprocess.run(
        [sys.executable, "-m", "tooltrace.mcp", "proxy", "--home", str(tmp_path / "home"),
         "--loop", "uvloop", "--name", "toy", "--", sys.executable, TOY],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), str(REPO)])},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--loop uvloop: uvloop is not installed" in out.stderr
