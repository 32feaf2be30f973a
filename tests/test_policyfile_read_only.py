"""A policy file's read-only roots outside the workspace, through a real registry and its
built-in tools, and through what-if over the trail those calls wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from tooltrace import create_registry
from tooltrace.cli import main
from tooltrace.model import ToolCall, ToolResultEnvelope
from tooltrace.policy.file import PolicyFileError, check_policy

TOOLTRACE = Path(sys.executable).parent / "tooltrace"

DENY = '["**/.env", "**/*.pem", "**/id_*"]'


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for d in ("ws", "ro/keys", "secret"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "ro/guide.txt").write_text("the guide")
    (tmp_path / "ro/keys/id_rsa.txt").write_text("not for agents")
    (tmp_path / "ro/.env").write_text("X=1")
    (tmp_path / "ro/server.pem").write_text("-----")
    (tmp_path / "secret/s.txt").write_text("SECRET")
    os.symlink(tmp_path / "secret/s.txt", tmp_path / "ro/leak.txt")
    os.symlink(tmp_path / "ro/guide.txt", tmp_path / "ws/guide.txt")
    return tmp_path


def _file(tree: Path, name: str, read_only: list[str]) -> Path:
    f = tree / name
    f.write_text(f"[paths]\ndeny = {DENY}\nread_only = {read_only!r}\n")
    return f


def _policy_step(env: ToolResultEnvelope) -> tuple[str, str]:
    st = [s for s in env.steps if s.step == "policy"][-1]
    return st.decider, st.decision


def _calls(tree: Path) -> dict[str, ToolResultEnvelope]:
    """Each case called once through a registry built from the file."""
    ro = tree / "ro"
    reg = create_registry(tree / "ws", home=tree / "home", metrics=False, logging=False,
                          policy_file=_file(tree, "p.toml", ["vendor", str(ro)]))
    cases = {
        "read": ToolCall("read_text", {"path": str(ro / "guide.txt")}),
        "read via workspace link": ToolCall("read_text", {"path": "guide.txt"}),
        "write": ToolCall("write_text", {"path": str(ro / "guide.txt"), "text": "x"}),
        "write via workspace link": ToolCall("write_text", {"path": "guide.txt", "text": "x"}),
        "new file": ToolCall("write_text", {"path": str(ro / "new.txt"), "text": "x"}),
        "command there": ToolCall("run_command", {"argv": ["touch", "x"], "cwd": str(ro)}),
        "link out": ToolCall("read_text", {"path": str(ro / "leak.txt")}),
        "id_*": ToolCall("read_text", {"path": str(ro / "keys/id_rsa.txt")}),
        ".env": ToolCall("read_text", {"path": str(ro / ".env")}),
        "*.pem": ToolCall("read_text", {"path": str(ro / "server.pem")}),
    }
    try:
        return {k: reg.call(c) for k, c in cases.items()}
    finally:
        reg.shutdown()


def test_read_tools_read_there_and_write_tools_never_write(tree: Path) -> None:
    got = _calls(tree)
    for case in ("read", "read via workspace link"):
        assert got[case].ok and got[case].data["text"] == "the guide"
    for case in ("write", "write via workspace link", "new file", "command there"):
        env = got[case]
        assert env.status == "rejected" and not env.record.execution_started
        assert _policy_step(env) == ("policy:path_scope", "deny")
        assert "read_only" in env.summary
    assert (tree / "ro/guide.txt").read_text() == "the guide"
    assert sorted(p.name for p in (tree / "ro").iterdir()) == [
        ".env", "guide.txt", "keys", "leak.txt", "server.pem"]
    env = got["link out"]
    assert env.status == "rejected" and "symlink_escape" in env.summary
    assert "SECRET" not in str(env.data)
    # The denied globs hold inside the read-only root.
    for case in ("id_*", ".env", "*.pem"):
        assert _policy_step(got[case]) == ("policy:denied_path", "deny"), case


def test_without_the_file_the_root_is_outside(tree: Path) -> None:
    reg = create_registry(tree / "ws", home=tree / "h2", metrics=False, logging=False,
                          audit=False, policy_file=_file(tree, "none.toml", []))
    try:
        env = reg.call(ToolCall("read_text", {"path": str(tree / "ro/guide.txt")}))
        assert env.status == "rejected" and "outside_workspace" in env.summary
    finally:
        reg.shutdown()


def test_a_root_must_be_a_plain_directory(tree: Path) -> None:
    f = tree / "bad.toml"
    f.write_text('[paths]\nread_only = ["/usr/*/doc", "/a/../b"]\n')
    problems = check_policy(f)
    assert [(p.line, p.message) for p in problems] == [
        (2, "an absolute read-only root must be a directory (no glob, no '..')")] * 2
    for missing in (tree / "nowhere", tree / "ro/guide.txt"):  # absent; a file
        f.write_text(f'[paths]\ndeny = ["**/.env"]\nread_only = ["vendor", "{missing}"]\n')
        res = subprocess.run([str(TOOLTRACE), "policy", "check", str(f)], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
        assert res.returncode == 2, res.stdout + res.stderr
        out = res.stdout + res.stderr
        assert f"{f}:3:24: a read-only root must be an existing directory" in out, out
        with pytest.raises(PolicyFileError) as info:
            create_registry(tree / "ws", home=tree / "h3", metrics=False, logging=False,
                            audit=False, policy_file=f)
        assert [(p.line, p.column) for p in info.value.problems] == [(3, 24)]


def _whatif(tree: Path, candidate: Path) -> dict:  # type: ignore[type-arg]
    res = CliRunner().invoke(main, ["policy", "test", str(candidate), "--home",
                                    str(tree / "home"), "--json"])
    assert res.exit_code in (0, 1), res.output
    return orjson.loads(res.output)  # type: ignore[no-any-return]


def _groups(d: dict) -> list[tuple[str, str, str, str, int]]:  # type: ignore[type-arg]
    return [(c["tool"], c["rule"], c["before"], c["after"], c["count"]) for c in d["changes"]]


def test_recorded_reads_there_replay_the_same_way(tree: Path) -> None:
    _calls(tree)
    ro = str(tree / "ro")
    same = _whatif(tree, _file(tree, "same.toml", ["vendor", ro]))
    # Every policy decision replays as recorded; the path-scope refusals are not replayed.
    assert (same["calls"], same["replayed"], same["changed"]) == (10, 5, 0)
    # Without the root, both recorded reads would be refused by the workspace's scope.
    gone = _whatif(tree, _file(tree, "gone.toml", ["vendor"]))
    assert _groups(gone) == [("read_text", "path_scope", "allow", "deny", 2)]
    # A further denied glob inside the root applies to the recorded real paths.
    f = tree / "tighter.toml"
    f.write_text(_file(tree, "same.toml", [ro]).read_text().replace('"]', '", "**/guide.txt"]', 1))
    assert _groups(_whatif(tree, f)) == [("read_text", "denied_path", "allow", "deny", 2)]
