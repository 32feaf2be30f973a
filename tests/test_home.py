"""Where the home lies and why no tool reaches it: the default home is outside the workspace
(``_settings.default_home``), and a home placed inside one is still refused to every built-in by
the path policy (``Workspace.protected_roots``) and the policy stage (command words)."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import tooltrace
from tooltrace import Status, ToolCall, ToolRegistry
from tooltrace.model import Stage
from tooltrace.policy import PathPolicyError, Workspace


@pytest.fixture
def inside(workspace: Path) -> Iterator[tuple[ToolRegistry, Path]]:
    """A default registry whose home the user placed inside the workspace, with a trail."""
    home = workspace / ".tooltrace"
    reg = tooltrace.create_registry(workspace, home=home, metrics=False, logging=False,
                                    policy_file=None)
    first = reg.call(ToolCall("read_text", {"path": "hello.txt"}))
    assert first.status is Status.OK
    reg.flush(timeout_s=10.0)
    assert any((home / "audit").rglob("*.jsonl"))
    yield reg, home
    reg.shutdown(timeout_s=5.0)


def test_a_default_registry_keeps_its_home_outside_the_workspace(workspace: Path) -> None:
    reg = tooltrace.create_registry(workspace, metrics=False, logging=False)
    try:
        assert reg.call(ToolCall("read_text", {"path": "hello.txt"})).status is Status.OK
        home = Path(reg.home).resolve()
        assert not home.is_relative_to(workspace.resolve())
        assert home == tooltrace._settings.default_home(workspace)
        assert not (workspace / ".tooltrace").exists()
    finally:
        reg.shutdown(timeout_s=5.0)


def _refused(env: tooltrace.ToolResultEnvelope) -> bool:
    return env.status is Status.REJECTED and env.reject_stage is Stage.POLICY


@pytest.mark.parametrize("path", [
    ".tooltrace/audit.key",
    "./.tooltrace/../.tooltrace/audit.key",
    "notes/../.tooltrace/audit.key",
    "{abs}/audit.key",
    "{abs}",
])
def test_no_read_or_write_reaches_a_home_inside_the_workspace(
    inside: tuple[ToolRegistry, Path], path: str,
) -> None:
    reg, home = inside
    p = path.format(abs=home)
    before = sorted(str(f) for f in home.rglob("*"))
    assert _refused(reg.call(ToolCall("read_text", {"path": p})))
    for name in ("/x.txt", ".txt") if p != str(home) else ("/x.txt",):
        env = reg.call(ToolCall("write_text", {"path": p + name, "text": "forged"}))
        assert _refused(env), env.summary
    # The writes' own records are added, nothing else appears or goes.
    after = {str(f) for f in home.rglob("*")}
    assert set(before) - after == set()
    assert not any(f.endswith(".txt") for f in after)


def test_a_planted_symlink_into_the_home_is_refused(
    inside: tuple[ToolRegistry, Path], workspace: Path,
) -> None:
    reg, home = inside
    (workspace / "notes" / "evidence").symlink_to(home)
    (workspace / "notes" / "key.txt").symlink_to(home / "audit.key")
    assert _refused(reg.call(ToolCall("read_text", {"path": "notes/key.txt"})))
    env = reg.call(ToolCall("write_text", {"path": "notes/evidence/audit/x.txt",
                                            "text": "forged"}))
    assert _refused(env)
    assert not (home / "audit" / "x.txt").exists()


@pytest.mark.parametrize("argv", [
    ["cat", ".tooltrace/audit.key"],
    ["cp", "-r", ".tooltrace/audit", "notes/copy"],
    ["rm", "-rf", ".tooltrace/audit"],
    ["sh", "-c", "echo forged >> .tooltrace/audit/x"],
    ["sh", "-c", "cat<.tooltrace/audit.key"],
    ["tar", "--file=.tooltrace/snapshots", "-c", "notes"],
    ["cat", "{abs}/audit.key"],
    ["ls", "notes/../.tooltrace"],
    ["cat", "notes/evidence/audit.key"],
])
def test_no_command_word_may_name_the_home(
    inside: tuple[ToolRegistry, Path], workspace: Path, argv: list[str],
) -> None:
    reg, home = inside
    (workspace / "notes" / "evidence").symlink_to(home)
    words = [a.format(abs=home) for a in argv]
    env = reg.call(ToolCall("run_command", {"argv": words}))
    assert _refused(env), (words, env.status, env.summary)
    assert (home / "audit").is_dir() and (home / "audit.key").is_file()


def test_a_command_may_not_start_in_the_home(inside: tuple[ToolRegistry, Path]) -> None:
    reg, _home = inside
    env = reg.call(ToolCall("run_command", {"argv": ["pwd"], "cwd": ".tooltrace/audit"}))
    assert _refused(env)


def test_commands_that_do_not_name_the_home_still_run(inside: tuple[ToolRegistry, Path]) -> None:
    reg, _home = inside
    env = reg.call(ToolCall("run_command", {"argv": ["cat", "hello.txt", "--x=notes/a.txt"]}))
    assert env.status is Status.OK, env.summary


def test_the_workspace_refuses_protected_paths_with_a_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "home" / "audit").mkdir(parents=True)
    w = Workspace(ws).with_protected([ws / "home"])
    with pytest.raises(PathPolicyError) as err:
        w.resolve("home/audit/seg.jsonl", must_exist=False)
    assert err.value.reason == "protected"
    # The protection is carried by with_read_only too (the policy file adds read-only roots).
    ro = tmp_path / "ro"
    ro.mkdir()
    with pytest.raises(PathPolicyError):
        w.with_read_only([ro]).resolve("home", must_exist=True)
    assert w.resolve("homework.txt", must_exist=False).relative == "homework.txt"
    assert not w.is_protected(os.fspath(ws / "home-not"))
    assert w.is_protected(os.fspath(ws / "home" / "audit"))


def test_the_audit_key_never_reaches_a_result_or_the_trail(tmp_path: Path, workspace: Path) -> None:
    home = tmp_path / "home"
    reg = tooltrace.create_registry(workspace, home=home, metrics=False, logging=False)

    signing = home / "keys" / "signing.ed25519"

    @tooltrace.tool(capability="read", effect="none")
    def leak(ctx: tooltrace.CallContext) -> str:
        """Print the keys the way a careless script would."""
        return "key=" + (home / "audit.key").read_text() + "\n" + signing.read_text()

    reg.register(leak)
    try:
        key = (home / "audit.key").read_text().strip()
        body = "".join(ln for ln in signing.read_text().splitlines() if "-----" not in ln)
        assert len(key) == 64 and len(body) > 40
        env = reg.call(ToolCall("leak", {}))
        assert env.status is Status.OK
        for secret in (key, body):
            assert secret not in str(env.data) and secret not in env.summary
        assert "REDACTED" in str(env.data)
    finally:
        reg.shutdown(timeout_s=5.0)
    trail = b"".join(p.read_bytes() for p in (home / "audit").rglob("*") if p.is_file())
    assert b"leak" in trail and key.encode() not in trail and body.encode() not in trail


@pytest.mark.parametrize("where", ["same", "nested"])
def test_a_workspace_inside_its_home_keeps_the_homes_entries_protected(
    tmp_path: Path, where: str,
) -> None:
    home = tmp_path / "home"
    ws = home if where == "same" else home / "ws"
    ws.mkdir(parents=True)
    (ws / "notes.txt").write_text("hello\n")
    reg = tooltrace.create_registry(ws, home=home, metrics=False, logging=False)
    try:
        assert reg.call(ToolCall("read_text", {"path": "notes.txt"})).status is Status.OK
        assert reg.call(ToolCall("run_command", {"argv": ["cat", "notes.txt"]})).status \
            is Status.OK
        for path in (f"{home}/audit.key", f"{home}/audit/x.txt", f"{home}/snapshots/x.txt"):
            assert _refused(reg.call(ToolCall("read_text", {"path": path})))
            assert _refused(reg.call(ToolCall("write_text", {"path": path, "text": "x"})))
        assert _refused(reg.call(ToolCall("run_command", {"argv": ["cat", f"{home}/audit.key"]})))
        # A path built at run time is the sandbox's to stop: the key's file is empty there.
        encoded = base64.b64encode(f"{home}/audit.key".encode()).decode()
        key = f'"$(echo {encoded} | base64 -d)"'
        env = reg.call(ToolCall("run_command", {"argv": ["sh", "-c",
                                                         f"wc -c < {key}; echo x >> {key}"]}))
        assert env.status is Status.OK and env.data["exit_code"] != 0, env.data
        assert env.data["stdout"].strip() in ("", "0"), env.data
        assert len((home / "audit.key").read_text().strip()) == 64
    finally:
        reg.shutdown(timeout_s=5.0)


def test_a_long_script_is_still_read_word_by_word(inside: tuple[ToolRegistry, Path]) -> None:
    reg, _home = inside
    script = "echo " + "x" * 70_000 + "; cat .tooltrace/audit.key"
    assert _refused(reg.call(ToolCall("run_command", {"argv": ["sh", "-c", script]})))


def test_a_word_as_long_as_the_longest_path_is_still_checked(
    inside: tuple[ToolRegistry, Path],
) -> None:
    reg, home = inside
    word = "./" * 2038 + ".tooltrace/audit.key"  # 4,096 characters: PATH_MAX on Linux
    assert len(word) == 4096
    assert _refused(reg.call(ToolCall("run_command", {"argv": ["cat", word]})))
    assert (home / "audit.key").is_file()


def test_a_refused_command_says_it_names_tooltraces_own_files(
    inside: tuple[ToolRegistry, Path],
) -> None:
    reg, _home = inside
    env = reg.call(ToolCall("run_command", {"argv": ["cat", ".tooltrace/audit.key"]}))
    assert _refused(env)
    assert env.summary.endswith("argument argv names tooltrace's own files (protected)")


def test_a_command_word_that_is_not_valid_unicode_is_refused_never_run(
    inside: tuple[ToolRegistry, Path],
) -> None:
    """A lone surrogate in a word names no file the home could be checked against: the command
    is refused before it runs, with a reason of its own; a word of undecodable bytes
    (``os.fsdecode``'s surrogate escapes) is an ordinary file name and is checked as one."""
    reg, home = inside
    ws = home.parent
    env = reg.call(ToolCall("run_command", {"argv": ["sh", "-c", "touch ran", "x\ud800"]}))
    assert _refused(env)
    assert env.summary.endswith("argument argv is not valid Unicode text (not_unicode)")
    assert not (ws / "ran").exists() and not env.record.execution_started
    env = reg.call(ToolCall("run_command", {"argv": ["cat", os.fsdecode(b".tooltrace/k\xff")]}))
    assert _refused(env) and env.summary.endswith("(protected)")
    argv = ["sh", "-c", "touch ran", os.fsdecode(b"\xff")]
    env = reg.call(ToolCall("run_command", {"argv": argv}))
    assert env.status is Status.OK, env.summary
    assert (ws / "ran").exists()


def test_a_tool_that_runs_no_command_may_take_the_homes_name_as_data(
    inside: tuple[ToolRegistry, Path],
) -> None:
    reg, _home = inside

    @tooltrace.tool(capability="network")
    def note(text: str) -> str:
        """Keep a note (it opens no file)."""
        return text

    reg.register(note)
    env = reg.call(ToolCall("note", {"text": ".tooltrace/audit.key"}))
    assert env.status is Status.OK, env.summary


def test_a_word_that_cannot_be_a_path_does_not_end_the_check_of_the_next(
    inside: tuple[ToolRegistry, Path],
) -> None:
    reg, _home = inside
    env = reg.call(ToolCall("run_command", {"argv": ["cat", "a\x00b", ".tooltrace/audit.key"]}))
    assert _refused(env)
