"""Path rules on resolved paths: ``only_paths`` (where a tool may go), ``except_paths`` and
``paths``, decided on the path after ``..`` and symlinks are resolved by the workspace's walk,
through a real registry over real files and symlinks, with an approver that says yes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooltrace import ApprovalDecision, ApprovalRequest, create_registry
from tooltrace.model import Status, ToolCall
from tooltrace.registry import ToolRegistry

WRITES_ONLY_IN_NOTES = """
[[rules]]
id = "writes-only-in-notes"
tools = ["write_text"]
only_paths = ["notes/**"]
reason = "agents write only under notes/"

[approval]
tools = ["write_text"]
"""

RAW_ARGS = """
[[rules]]
id = "writes-only-in-notes"
tools = ["write_text"]
args = { path = "^(?!notes/)" }

[approval]
tools = ["write_text"]
"""


def _yes(req: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(True, who="ops", reason="looks fine")


def _registry(tmp_path: Path, text: str) -> ToolRegistry:
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    (ws / "reports").mkdir()
    os.symlink("../reports", ws / "notes" / "link")
    f = tmp_path / "tooltrace.toml"
    f.write_text(text)
    return create_registry(ws, home=tmp_path / "home", policy_file=f, metrics=False,
                           logging=False, approver=_yes)


def _write(reg: ToolRegistry, path: str) -> tuple[Status, str, str]:
    env = reg.call(ToolCall("write_text", {"path": path, "text": "x\n"}))
    step = [s for s in env.steps if s.step == "policy"][-1]
    return env.status, step.decider, step.decision


@pytest.mark.parametrize("escape", ["notes/../reports/evil.txt", "notes/link/evil.txt"])
def test_only_paths_denies_a_write_that_resolves_outside_however_it_is_spelled(
    tmp_path: Path, escape: str
) -> None:
    reg = _registry(tmp_path, WRITES_ONLY_IN_NOTES)
    try:
        assert _write(reg, "notes/ok.txt") == (Status.OK, "policy:approval", "ask")
        assert _write(reg, escape) == (
            Status.REJECTED, "policy:writes-only-in-notes", "deny")
        assert _write(reg, "reports/direct.txt")[0] is Status.REJECTED
    finally:
        reg.shutdown()
    ws = tmp_path / "ws"
    assert (ws / "notes" / "ok.txt").exists()
    assert sorted(os.listdir(ws / "reports")) == []


def test_an_args_pattern_sees_the_raw_argument_and_lets_both_escapes_through(
    tmp_path: Path,
) -> None:
    # What the docs warn about (and `policy check` warns at the line): a pattern over the raw
    # argument is not a statement about where the path leads.
    reg = _registry(tmp_path, RAW_ARGS)
    try:
        assert _write(reg, "notes/../reports/evil.txt")[0] is Status.OK
        assert _write(reg, "notes/link/evil2.txt")[0] is Status.OK
    finally:
        reg.shutdown()
    assert sorted(os.listdir(tmp_path / "ws" / "reports")) == ["evil.txt", "evil2.txt"]


def test_except_paths_takes_paths_out_of_a_rules_reach(tmp_path: Path) -> None:
    text = """
[[rules]]
id = "reports-are-final"
tools = ["write_text"]
paths = ["reports/**"]
except_paths = ["reports/drafts/**"]
"""
    reg = _registry(tmp_path, text)
    (tmp_path / "ws" / "reports" / "drafts").mkdir()
    try:
        assert _write(reg, "reports/q3.txt")[1:] == ("policy:reports-are-final", "deny")
        assert _write(reg, "reports/drafts/q3.txt")[0] is Status.OK
        # Through the symlink: the resolved path decides.
        assert _write(reg, "notes/link/q4.txt")[1:] == ("policy:reports-are-final", "deny")
        assert _write(reg, "notes/link/drafts/q4.txt")[0] is Status.OK
    finally:
        reg.shutdown()


def test_a_path_rule_skips_tools_without_path_arguments(tmp_path: Path) -> None:
    text = """
[[rules]]
id = "commands-in-notes"
capabilities = ["execute", "write"]
only_paths = ["notes/**"]
"""
    reg = _registry(tmp_path, text)
    try:
        env = reg.call(ToolCall("run_command", {"argv": ["true"], "cwd": "reports"}))
        step = [s for s in env.steps if s.step == "policy"][-1]
        assert (env.status, step.decider) == (Status.REJECTED, "policy:commands-in-notes")
        env = reg.call(ToolCall("run_command", {"argv": ["true"], "cwd": "notes"}))
        assert env.ok
        rule = next(r for r in reg.policy.rules if r.name == "commands-in-notes")
        echo = reg.definition("job_status")
        assert echo is not None and not echo.path_params
        assert not rule.applies_to(echo)  # type: ignore[attr-defined]
    finally:
        reg.shutdown()
