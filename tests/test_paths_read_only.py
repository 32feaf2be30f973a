"""Read-only roots outside the workspace, with real files and symlinks: read there, never write
there, and symlinks decided on the real path they lead to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooltrace.policy import PathPolicyError, Workspace


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """ws/ (the workspace), ro/ (a read-only root beside it) and secret/ (neither)."""
    for d in ("ws", "ro/docs", "secret"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "ro/docs/guide.txt").write_text("the guide")
    (tmp_path / "secret/s.txt").write_text("SECRET")
    (tmp_path / "ws/mine.txt").write_text("mine")
    # Out of the read-only root: absolute, relative, and a directory.
    os.symlink(tmp_path / "secret/s.txt", tmp_path / "ro/abs-leak.txt")
    os.symlink("../../secret/s.txt", tmp_path / "ro/docs/rel-leak.txt")
    os.symlink(tmp_path / "secret", tmp_path / "ro/dir-leak")
    # Into the read-only root from the workspace: absolute and relative.
    os.symlink(tmp_path / "ro/docs/guide.txt", tmp_path / "ws/abs-guide.txt")
    os.symlink("../ro/docs", tmp_path / "ws/docs")
    # From the read-only root back into the workspace.
    os.symlink(tmp_path / "ws/mine.txt", tmp_path / "ro/back.txt")
    return tmp_path


@pytest.fixture
def ws(tree: Path) -> Workspace:
    return Workspace(tree / "ws", read_only_roots=[tree / "ro"])


def _refused(ws: Workspace, path: str, reason: str) -> PathPolicyError:
    with pytest.raises(PathPolicyError) as info:
        ws.resolve(path)
    assert info.value.reason == reason
    return info.value


def test_a_file_in_a_read_only_root_is_read(ws: Workspace, tree: Path) -> None:
    rp = ws.resolve(str(tree / "ro/docs/guide.txt"))
    assert rp.read_only and rp.relative == str((tree / "ro/docs/guide.txt").resolve())
    assert ws.read_text(str(tree / "ro/docs/guide.txt"), max_bytes=100)[0] == "the guide"
    assert not ws.resolve("mine.txt").read_only


def test_nothing_in_a_read_only_root_is_opened_for_writing(ws: Workspace, tree: Path) -> None:
    target = tree / "ro/docs/guide.txt"
    rp = ws.resolve(str(target))
    for attempt in (lambda: ws.open_write(rp), lambda: ws.open_write(str(target)),
                    lambda: ws.open_parent(rp), lambda: ws.open_dir(ws.resolve(str(tree / "ro")))):
        with pytest.raises(PathPolicyError) as info:
            attempt()
        assert info.value.reason == "read_only"
        assert str(tree) not in str(info.value)  # never the host path
    new = ws.resolve(str(tree / "ro/docs/new.txt"), must_exist=False)
    with pytest.raises(PathPolicyError, match="read-only"):
        ws.open_write(new)
    assert target.read_text() == "the guide" and not (tree / "ro/docs/new.txt").exists()


def test_symlinks_out_of_the_read_only_root_are_refused(ws: Workspace, tree: Path) -> None:
    for link in ("ro/abs-leak.txt", "ro/docs/rel-leak.txt", "ro/dir-leak/s.txt"):
        err = _refused(ws, str(tree / link), "symlink_escape")
        assert str(tree) not in str(err)
    # '..' out of the root is refused too, and so is any path under no root.
    _refused(ws, str(tree / "ro") + "/../secret/s.txt", "outside_workspace")
    _refused(ws, str(tree / "secret/s.txt"), "outside_workspace")


def test_a_workspace_symlink_into_the_read_only_root_is_read_only(ws: Workspace,
                                                                  tree: Path) -> None:
    real = str((tree / "ro/docs/guide.txt").resolve())
    for link in ("abs-guide.txt", "docs/guide.txt"):
        rp = ws.resolve(link)
        assert (rp.read_only, rp.relative, rp.followed_symlinks) == (True, real, True)
        assert ws.read_text(link, max_bytes=100)[0] == "the guide"
        with pytest.raises(PathPolicyError) as info:
            ws.open_write(link)
        assert info.value.reason == "read_only"
    assert (tree / "ro/docs/guide.txt").read_text() == "the guide"


def test_a_read_only_symlink_back_into_the_workspace_is_the_workspace_file(
        ws: Workspace, tree: Path) -> None:
    rp = ws.resolve(str(tree / "ro/back.txt"))
    assert (rp.relative, rp.read_only) == ("mine.txt", False)


def test_without_the_root_the_same_paths_are_outside(tree: Path) -> None:
    plain = Workspace(tree / "ws")
    _refused(plain, str(tree / "ro/docs/guide.txt"), "outside_workspace")
    _refused(plain, "abs-guide.txt", "symlink_escape")
    _refused(plain, "docs/guide.txt", "symlink_escape")
    assert plain.with_read_only([tree / "ro"]).resolve("docs/guide.txt").read_only


def test_roots_nest_either_way(tree: Path) -> None:
    (tree / "ws/vendor").mkdir()
    (tree / "ws/vendor/lib.txt").write_text("lib")
    inner = Workspace(tree / "ws", read_only_roots=[tree / "ws/vendor"])
    rp = inner.resolve("vendor/lib.txt")
    assert (rp.relative, rp.read_only) == ("vendor/lib.txt", True)
    with pytest.raises(PathPolicyError, match="read-only"):
        inner.open_write(rp)
    # A read-only root holding the workspace: the workspace is still writable.
    outer = Workspace(tree / "ws", read_only_roots=[tree])
    assert not outer.resolve("mine.txt").read_only
    assert outer.resolve(str(tree / "secret/s.txt")).read_only


def test_a_read_only_root_must_be_a_directory(tree: Path) -> None:
    with pytest.raises(PathPolicyError) as info:
        Workspace(tree / "ws", read_only_roots=[tree / "nowhere"])
    assert info.value.reason == "not_found"


def test_through_a_registry_a_reading_tool_reads_there_and_a_writing_one_is_refused(
    ws: Workspace, tree: Path
) -> None:
    from tooltrace import Stage, Status, ToolCall, ToolRegistry, tool

    @tool(path_params=("path",))
    def peek(path: str) -> str:
        """Read a file."""
        return Path(path).name

    @tool(capability="write", effect="local", path_params=("path",))
    def touch(path: str) -> str:
        """Write a file."""
        return "written"

    reg = ToolRegistry(workspace=ws, home=tree / "home")
    reg.register(peek)
    reg.register(touch)
    guide = str(tree / "ro/docs/guide.txt")
    read = reg.call(ToolCall("peek", {"path": guide}))
    written = reg.call(ToolCall("touch", {"path": guide}))
    reg.shutdown()
    assert read.status is Status.OK, read.summary
    assert written.status is Status.REJECTED and written.reject_stage is Stage.POLICY
    (step,) = [s for s in written.steps if s.step == "policy"]
    assert (step.decider, step.decision) == ("policy:path_scope", "deny")
    assert step.detail == {"param": "path", "reason": "read_only"}
