"""The bypass test: with an always-block hook, no entry point reaches a tool's side effect.

Entry points: the Python API (sync, async, raw JSON, mappings), the CLI (`tooltrace call`), and
background jobs (`run_command` with `background=True`), and a sub-agent reaching the tool through
a nested call (`ctx.call`). The MCP proxy has its own bypass test in
tests/test_mcp_proxy.py.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.bypass import deny_all, deny_touch, subagent, touch

from tooltrace import Stage, Status, ToolCall, ToolRegistry
from tooltrace.builtins import register_builtins

TESTS = Path(__file__).parent


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    m = tmp_path / "side-effect.txt"
    monkeypatch.setenv("TOOLTRACE_TEST_MARKER", str(m))
    return m


def test_every_entry_point_gets_the_same_rejection(tmp_path: Path, marker: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    reg = ToolRegistry(workspace=ws, home=tmp_path / "home", hooks=[deny_all])
    register_builtins(reg)
    reg.register(touch)
    call = ToolCall("touch", {"name": "x"})
    summaries = set()
    envs = [
        reg.call(call),
        reg.call({"name": "touch", "arguments": {"name": "x"}}),
        reg.call('{"name": "touch", "arguments": {"name": "x"}}'),
        asyncio.run(reg.acall(call)),
    ]
    job = reg.call(ToolCall("run_command", {"argv": ["touch", str(marker)]}, background=True))
    reg.shutdown()
    for env in envs:
        assert (env.status, env.reject_stage) == (Status.REJECTED, Stage.HOOK)
        summaries.add(env.summary)
    assert len(summaries) == 1
    assert (job.status, job.reject_stage) == (Status.REJECTED, Stage.HOOK)
    assert job.summary == envs[0].summary.replace("touch", "run_command", 1)

    env = {**os.environ, "PYTHONPATH": str(TESTS), "NO_COLOR": "1"}
    exe = Path(sys.executable).with_name("tooltrace")
    out = subprocess.run(
        [str(exe), "call", "touch", '{"name": "x"}', "--workspace", str(ws), "--home",
         str(tmp_path / "home"), "--tools", "support.bypass:touch", "--hook",
         "support.bypass:deny_all"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert out.stdout.strip().splitlines()[0] == f"rejected: {envs[0].summary}"
    assert not marker.exists()


def test_a_nested_call_gets_the_same_rejection(tmp_path: Path, marker: Path) -> None:
    # The sub-agent's tool itself may run (the hook blocks only touch): its nested call of
    # touch must be refused exactly as a direct call is, and at any depth.
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", hooks=[deny_touch])
    reg.register(touch)
    reg.register(subagent)
    direct = reg.call(ToolCall("touch", {"name": "x"}))
    via = reg.call(ToolCall("subagent", {"name": "x"}))
    reg.shutdown()
    assert (direct.status, direct.reject_stage) == (Status.REJECTED, Stage.HOOK)
    assert via.status is Status.OK
    assert via.data == {"status": "rejected", "stage": "hook", "summary": direct.summary}
    assert not marker.exists()


def test_cli_call_runs_the_tool_without_the_hook(tmp_path: Path, marker: Path) -> None:
    # The positive control: the same CLI path does reach the side effect when nothing blocks it.
    env = {**os.environ, "PYTHONPATH": str(TESTS), "NO_COLOR": "1"}
    exe = Path(sys.executable).with_name("tooltrace")
    out = subprocess.run(
        [str(exe), "call", "touch", '{"name": "x"}', "--workspace", str(tmp_path), "--home",
         str(tmp_path / "home"), "--tools", "support.bypass:touch", "--json"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert marker.read_text() == "x"
    assert '"status": "ok"' in out.stdout
    audit = subprocess.run([str(exe), "calls", "--json", "--home", str(tmp_path / "home")],
                           capture_output=True, text=True, timeout=60, env=env)
    assert audit.returncode == 0 and '"touch"' in audit.stdout
