"""Workspace path policy against real files, real symlinks and a real check/open race."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from support.paths import ADVERSARIAL, SECRET, Racing, user_paths

from tooltrace.policy import PathPolicyError, ResolvedPath, Workspace, canonical_form
from tooltrace.policy._paths import REASONS

LONG = os.environ.get("TOOLTRACE_LONG") == "1"
RACE_ITERATIONS = 100_000 if LONG else 5_000


@pytest.fixture()
def ws(tree: Path) -> Workspace:
    return Workspace(tree)


@pytest.mark.parametrize(("user_path", "reason"), ADVERSARIAL)
def test_adversarial_inputs_are_refused_with_their_reason(
    ws: Workspace, tree: Path, user_path: str, reason: str
) -> None:
    assert len(ADVERSARIAL) >= 30
    with pytest.raises(PathPolicyError) as info:
        ws.resolve(user_path, must_exist=False)
    assert info.value.reason == reason
    assert info.value.reason in REASONS
    assert isinstance(info.value, ValueError)
    # The message never names the host: neither the workspace nor its parent.
    assert str(tree.parent) not in str(info.value)
    assert not ws.contains(user_path)


@pytest.mark.parametrize(
    ("user_path", "relative", "followed"),
    [
        ("a.txt", "a.txt", False),
        ("./a.txt", "a.txt", False),
        ("notes//b.txt", "notes/b.txt", False),
        ("notes/../a.txt", "a.txt", False),
        ("notes\\b.txt", "notes/b.txt", False),
        ("indir/b.txt", "notes/b.txt", True),
        ("indir/../a.txt", "a.txt", True),
        ("link_a.txt", "a.txt", True),
        ("abs_a.txt", "a.txt", True),
        ("chain2.txt", "a.txt", True),
        ("deep/er/c.txt", "deep/er/c.txt", False),
        ("100%25.txt", "100%25.txt", False),
        ("price$.txt", "price$.txt", False),
        ("backup.txt~", "backup.txt~", False),
        ("caf\u00e9.txt", "caf\u00e9.txt", False),
        ("console.txt", "console.txt", False),
        (".", "", False),
    ],
)
def test_inside_paths_resolve_to_their_real_relative_path(
    ws: Workspace, user_path: str, relative: str, followed: bool
) -> None:
    rp = ws.resolve(user_path, must_exist=False)
    assert rp.relative == relative
    assert rp.followed_symlinks is followed
    assert rp.absolute == (os.path.join(ws.root, relative) if relative else ws.root)
    assert ws.contains(user_path)


def test_absolute_paths_inside_are_accepted_and_the_prefix_sibling_is_not(
    ws: Workspace, tree: Path
) -> None:
    assert ws.resolve(str(tree / "notes" / "b.txt")).relative == "notes/b.txt"
    assert ws.resolve(str(tree)).relative == ""
    sibling = str(tree) + "-evil/x.txt"
    with pytest.raises(PathPolicyError) as info:
        ws.resolve(sibling)
    assert info.value.reason == "outside_workspace"
    assert str(tree) not in str(info.value)
    assert not ws.contains(str(tree) + "-evil")


def test_root_given_through_a_symlink_is_made_real(tree: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    os.symlink(tree, alias)
    ws = Workspace(alias)
    assert ws.root == os.path.realpath(tree)
    assert ws.resolve(str(alias / "a.txt")).relative == "a.txt"


def test_proc_self_cwd_is_decided_on_its_real_target(
    ws: Workspace, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree / "notes")
    assert ws.resolve("/proc/self/cwd/b.txt").relative == "notes/b.txt"
    monkeypatch.chdir(tree.parent / "outside")
    with pytest.raises(PathPolicyError) as info:
        ws.resolve("/proc/self/cwd/secret.txt")
    assert info.value.reason == "outside_workspace"


def test_missing_and_dangling_paths(ws: Workspace) -> None:
    with pytest.raises(PathPolicyError) as info:
        ws.resolve("nope.txt")
    assert info.value.reason == "not_found"
    assert ws.resolve("nope.txt", must_exist=False).relative == "nope.txt"
    # A dangling link inside resolves to its (inside) target when creating is allowed.
    assert ws.resolve("dangling_in.txt", must_exist=False).relative == "missing.txt"
    with pytest.raises(PathPolicyError) as info:
        ws.resolve("dangling_in.txt")
    assert info.value.reason == "not_found"
    with pytest.raises(PathPolicyError) as info:
        ws.resolve("a.txt/x")
    assert info.value.reason == "not_a_directory"


def test_allowed_suffixes_apply_to_the_real_name(ws: Workspace) -> None:
    assert ws.resolve("a.txt", allowed_suffixes=(".txt",)).relative == "a.txt"
    assert ws.resolve("a.txt", allowed_suffixes=(".TXT", ".md")).relative == "a.txt"
    for name in ("key.pem", "disguised.txt"):
        with pytest.raises(PathPolicyError) as info:
            ws.resolve(name, allowed_suffixes=(".txt",))
        assert info.value.reason == "bad_extension"


def test_messages_for_absolute_inputs_hide_the_host_path(ws: Workspace, tree: Path) -> None:
    with pytest.raises(PathPolicyError) as info:
        ws.resolve(str(tree.parent / "outside" / "secret.txt"))
    message = str(info.value)
    assert "secret.txt" in message
    assert str(tree.parent) not in message
    assert "<absolute>" in message


def test_canonical_form_is_lexical() -> None:
    assert canonical_form("a//b/./c\\d/") == "a/b/c/d"
    assert canonical_form("a/../b") == "a/../b"
    assert canonical_form("/x/./y") == "/x/y"
    assert canonical_form("./") == "."
    with pytest.raises(PathPolicyError):
        canonical_form("C:\\x")


# -- opening --------------------------------------------------------------------------------


def _read_all(fd: int) -> bytes:
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def test_open_read_reads_the_resolved_file(ws: Workspace) -> None:
    assert _read_all(ws.open_read(ws.resolve("chain2.txt"))) == b"alpha\n"
    assert _read_all(ws.open_read(ws.resolve("indir/b.txt"))) == b"beta\n"


def test_open_read_refuses_non_regular_files(ws: Workspace, tree: Path) -> None:
    os.mkfifo(tree / "fifo.txt")
    with pytest.raises(PathPolicyError) as info:
        ws.open_read(ws.resolve("fifo.txt"))
    assert info.value.reason == "not_regular"
    with pytest.raises(PathPolicyError) as info:
        ws.open_read(ws.resolve("notes"))
    assert info.value.reason == "not_regular"
    with pytest.raises(PathPolicyError) as info:
        ws.open_read(ws.resolve("."))
    assert info.value.reason == "not_regular"


def test_open_refuses_a_component_swapped_after_the_check(ws: Workspace, tree: Path) -> None:
    rp = ws.resolve("notes/b.txt")
    os.rename(tree / "notes", tree / "notes.bak")
    os.symlink(tree.parent / "outside", tree / "notes")
    os.rename(tree.parent / "outside" / "secret.txt", tree.parent / "outside" / "b.txt")
    with pytest.raises(PathPolicyError) as info:
        ws.open_read(rp)
    assert info.value.reason == "symlink_race"
    rp = ws.resolve("a.txt")
    os.unlink(tree / "a.txt")
    os.symlink(tree.parent / "outside" / "b.txt", tree / "a.txt")
    with pytest.raises(PathPolicyError) as info:
        ws.open_read(rp)
    assert info.value.reason == "symlink_race"
    with pytest.raises(PathPolicyError) as info:
        ws.open_write(rp)
    assert info.value.reason == "symlink_race"
    assert (tree.parent / "outside" / "b.txt").read_bytes() == SECRET


def test_open_parent_gives_the_real_parent_directory(ws: Workspace, tree: Path) -> None:
    rp = ws.resolve("indir/new.txt", must_exist=False)
    dfd, name = ws.open_parent(rp)
    try:
        assert name == "new.txt"
        assert os.fstat(dfd).st_ino == (tree / "notes").stat().st_ino
    finally:
        os.close(dfd)
    os.rename(tree / "notes", tree / "moved")
    os.symlink(tree.parent / "outside", tree / "notes")
    with pytest.raises(PathPolicyError) as info:
        ws.open_parent(rp)
    assert info.value.reason == "symlink_race"


def test_open_write_creates_truncates_and_refuses_hardlinks(ws: Workspace, tree: Path) -> None:
    fd = ws.open_write("notes/new.txt")
    os.write(fd, b"hello")
    os.close(fd)
    assert (tree / "notes" / "new.txt").read_bytes() == b"hello"
    fd = ws.open_write(ws.resolve("notes/new.txt"))
    os.write(fd, b"hi")
    os.close(fd)
    assert (tree / "notes" / "new.txt").read_bytes() == b"hi"
    with pytest.raises(PathPolicyError) as info:
        ws.open_write("gone.txt", create=False)
    assert info.value.reason == "not_found"
    with pytest.raises(PathPolicyError) as info:
        ws.open_write("../outside/secret.txt")
    assert info.value.reason == "outside_workspace"
    with pytest.raises(PathPolicyError) as info:
        ws.open_write("to_secret.txt")
    assert info.value.reason == "symlink_escape"
    # A hard link inside the workspace to a file outside: refused for writing, and the outside
    # file is not truncated (truncation happens only after the check).
    os.link(tree.parent / "outside" / "secret.txt", tree / "hard.txt")
    with pytest.raises(PathPolicyError) as info:
        ws.open_write("hard.txt")
    assert info.value.reason == "hardlink"
    assert (tree.parent / "outside" / "secret.txt").read_bytes() == SECRET
    # Reads of hard links are allowed by default (package managers use them) ...
    assert _read_all(ws.open_read(ws.resolve("hard.txt"))) == SECRET
    # ... and refused in strict mode.
    strict = Workspace(tree, strict_hardlinks=True)
    with pytest.raises(PathPolicyError) as info:
        strict.open_read(strict.resolve("hard.txt"))
    assert info.value.reason == "hardlink"


def test_read_text_bounds_and_reports_size(ws: Workspace, tree: Path) -> None:
    text, size, rp = ws.read_text("a.txt", max_bytes=3)
    assert (text, size, rp.relative) == ("alp", 6, "a.txt")
    text, size, _ = ws.read_text("a.txt", max_bytes=100)
    assert (text, size) == ("alpha\n", 6)
    (tree / "u.txt").write_bytes("\u00e9\u00e9".encode())  # 4 bytes, 2 chars
    assert ws.read_text("u.txt", max_bytes=3)[0] == "\u00e9"  # the cut character is dropped
    (tree / "bad.txt").write_bytes(b"ok\xff")
    assert ws.read_text("bad.txt", max_bytes=10)[0] == "ok\ufffd"
    with pytest.raises(PathPolicyError) as info:
        ws.read_text("key.pem", max_bytes=10)
    assert info.value.reason == "bad_extension"
    assert ws.read_text("key.pem", max_bytes=10, allowed_suffixes=None)[0] == "not text\n"
    with pytest.raises(PathPolicyError) as info:
        ws.read_text("to_secret.txt", max_bytes=100)
    assert info.value.reason == "symlink_escape"


def test_workspace_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(PathPolicyError) as info:
        Workspace(tmp_path / "missing")
    assert info.value.reason == "not_found"




# -- the race (the ``racing`` fixture: tests/support/paths.py) -------------------------------


def test_swapping_a_file_or_directory_for_a_symlink_never_escapes(
    racing: Racing,
) -> None:
    ws, _tree, _stop, swaps = racing
    escapes = 0
    opened = 0
    refused = 0
    outside = _tree.parent / "outside"
    for i in range(RACE_ITERATIONS):
        name = "victim.txt" if i % 2 == 0 else "vdir/victim.txt"
        try:
            if i % 4 == 3:
                # A write through the same gap must never land on (or truncate) the secret.
                fd = ws.open_write(name)
                os.write(fd, b"written")
                os.close(fd)
                opened += 1
                continue
            rp = ws.resolve(name)
            fd = ws.open_read(rp)
        except PathPolicyError:
            refused += 1
            continue
        opened += 1
        if _read_all(fd) == SECRET:
            escapes += 1
    assert escapes == 0
    assert (outside / "secret.txt").read_bytes() == SECRET
    assert (outside / "dir" / "victim.txt").read_bytes() == SECRET
    # Both outcomes happened, so the check/open gap was really exercised.
    assert opened > 0
    assert refused > 0
    assert swaps[0] > 0


# -- properties -----------------------------------------------------------------------------


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(user_path=user_paths())
def test_decision_equals_decision_on_canonical_form(ws: Workspace, user_path: str) -> None:
    decision = ws.contains(user_path)
    try:
        canon = canonical_form(user_path)
    except PathPolicyError:
        assert decision is False
        return
    assert ws.contains(canon) is decision
    if decision:
        rp = ws.resolve(user_path, must_exist=False)
        assert ws.resolve(canon, must_exist=False) == rp
        # The resolved relative path is itself canonical and resolves to itself.
        assert ws.resolve(rp.relative or ".", must_exist=False).relative == rp.relative
        assert rp.absolute == ws.root or rp.absolute.startswith(ws.root + os.sep)


def test_resolved_path_is_frozen() -> None:
    rp = ResolvedPath("a", "/x/a", False)
    with pytest.raises(AttributeError):
        rp.relative = "b"  # type: ignore[misc]
