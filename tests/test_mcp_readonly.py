"""A policy file's read-only roots outside the workspace hold in the MCP proxy too: a
``file://`` resource there can be read through the proxy only when the file names its root,
and a denied glob still refuses a file inside that root."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError
from test_mcp_protocol import RICH
from test_mcp_proxy import proxy_session, write_config


def _read(tmp: Path, target: Path, policy: str | None) -> str:
    """Read ``target`` as a file resource through a proxy (with ``policy`` as its policy
    file, when given); the text read, or the error's message."""
    (tmp / "work").mkdir(parents=True, exist_ok=True)
    policy_line = ""
    if policy is not None:
        (tmp / "tooltrace.toml").write_text(policy)
        policy_line = '[policy]\nfile = "tooltrace.toml"\n'
    config = write_config(tmp, f"""
[proxy]
home = "home"
workspace = "work"
{policy_line}[servers.rich]
command = {json.dumps(sys.executable)}
args = [{json.dumps(RICH)}]
env = {{ RICH_FILE = {json.dumps(str(target))} }}
""")

    async def scenario() -> str:
        async with proxy_session(config) as s:
            try:
                res = await s.read_resource(target.as_uri())
            except MCPError as exc:
                return f"error: {exc}"
            return str(getattr(res.contents[0], "text", ""))

    return asyncio.run(scenario())


@pytest.fixture()
def shared(tmp_path: Path) -> Path:
    root = tmp_path / "shared"
    root.mkdir()
    (root / "guide.txt").write_text("read me")
    (root / ".env").write_text("TOKEN=x")
    return root


def test_a_read_only_root_of_the_policy_file_opens_reads_there(tmp_path: Path,
                                                              shared: Path) -> None:
    target = shared / "guide.txt"
    refused = _read(tmp_path / "a", target, None)
    assert refused.startswith("error:") and "read me" not in refused
    policy = f'[paths]\nread_only = [{json.dumps(str(shared))}]\n'
    assert _read(tmp_path / "b", target, policy) == "read me"


def test_a_denied_glob_holds_inside_a_read_only_root(tmp_path: Path, shared: Path) -> None:
    policy = f'[paths]\nread_only = [{json.dumps(str(shared))}]\ndeny = ["**/.env"]\n'
    assert _read(tmp_path / "c", shared / "guide.txt", policy) == "read me"
    out = _read(tmp_path / "d", shared / ".env", policy)
    assert out.startswith("error:") and "TOKEN" not in out
