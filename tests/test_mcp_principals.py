"""Whom a proxied call acts for, taken from its MCP session: the client's ``clientInfo`` as the
agent, and over HTTP the configured ``principal_header`` as the user; each principal's calls a
run of their own; a value that looks like a secret gets the call refused and is not recorded.
The official SDK client talks to the proxy (a subprocess) in front of the toy server."""

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
from mcp import ClientSession, StdioServerParameters
from support.mcp_client import patient_stdio_client
from support.otlp import free_port
from test_mcp_proxy import REPO, TOY, audit_rows, call_id, text_of, write_config

from tooltrace.exceptions import ConfigurationError
from tooltrace.mcp import config_from_dict

_SECRET = "AKIA" + "Z7QF3EXAMPLE4DMO"


def _principal(row: dict[str, Any]) -> tuple[Any, Any]:
    return row["principal_user"], row["principal_agent"]


def test_stdio_client_name_and_version_are_the_agent(tmp_path: Path) -> None:
    config = write_config(tmp_path, f"""
[proxy]
home = "home"
[servers.toy]
command = {json.dumps(sys.executable)}
args = [{json.dumps(TOY)}]
""")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tooltrace.mcp", "proxy", "--config", str(config)],
        cwd=str(tmp_path), env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error"})

    async def scenario() -> list[Any]:
        info = mt.Implementation(name="Nightly Triage", version="2.1")
        async with patient_stdio_client(params) as (read, write), \
                ClientSession(read, write, client_info=info) as s:
            await asyncio.wait_for(s.initialize(), 60)
            return [await s.call_tool("echo", {"text": str(i)}) for i in range(2)]

    results = asyncio.run(scenario())
    assert [text_of(r) for r in results] == ["toy:0", "toy:1"]
    rows = audit_rows(tmp_path / "home")
    got = [rows[call_id(r)] for r in results]
    # Characters a principal may not hold (the space) become '-'.
    assert [_principal(r) for r in got] == [(None, "Nightly-Triage@2.1")] * 2
    assert got[0]["run_id"] == got[1]["run_id"]


def test_http_header_is_the_user_and_each_principal_has_its_run(tmp_path: Path) -> None:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    config = write_config(tmp_path, f"""
[proxy]
home = "home"
principal_header = "X-Tooltrace-User"
[servers.toy]
command = {json.dumps(sys.executable)}
args = [{json.dumps(TOY)}]
""")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tooltrace.mcp", "proxy", "--config", str(config),
         "--http", f"127.0.0.1:{port}"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error"},
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "listening on" in line:
                break
        else:
            pytest.fail("the proxy exited before listening")

        async def one(name: str, user: str | None) -> Any:
            headers = {"X-Tooltrace-User": user} if user else None
            async with create_mcp_http_client(headers=headers) as http, \
                    streamable_http_client(f"http://127.0.0.1:{port}/mcp",
                                           http_client=http) as (read, write, *_), \
                    ClientSession(read, write,
                                  client_info=mt.Implementation(name=name, version="1")) as s:
                await s.initialize()
                return await s.call_tool("echo", {"text": name})

        async def scenario() -> list[Any]:
            return [await one("coder", "ann"), await one("reviewer", "bob"),
                    await one("coder", None), await one("leaky", _SECRET)]

        results = asyncio.run(scenario())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    ann, bob, nobody, leaky = results
    assert text_of(ann) == "toy:coder" and text_of(bob) == "toy:reviewer"
    assert leaky.is_error and _SECRET not in text_of(leaky)
    rows = audit_rows(tmp_path / "home")
    assert _principal(rows[call_id(ann)]) == ("ann", "coder@1")
    assert _principal(rows[call_id(bob)]) == ("bob", "reviewer@1")
    assert _principal(rows[call_id(nobody)]) == (None, "coder@1")
    # Different principals never share a run (none is refused as a principal change).
    assert len({rows[call_id(r)]["run_id"] for r in (ann, bob, nobody)}) == 3
    refused = rows[call_id(leaky)]
    assert refused["status"] == "rejected" and _principal(refused) == (None, None)
    assert _SECRET not in json.dumps(list(rows.values()), default=str)


@pytest.mark.parametrize("header", ["", "X Tooltrace", "a" * 65, 7])
def test_principal_header_must_be_a_header_name(header: Any) -> None:
    with pytest.raises(ConfigurationError, match="principal_header"):
        config_from_dict({"proxy": {"principal_header": header}})
