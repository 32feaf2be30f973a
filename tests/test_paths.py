"""Workspace path policy against real files, real symlinks and a real check/open race."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from support.paths import ADVERSARIAL, SECRET, Racing, user_paths

import tooltrace
from tooltrace import Capability, Effect
from tooltrace.policy import PathPolicyError, ResolvedPath, Workspace, canonical_form, reads_only
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
    with pytest.raises(PathPolicyError) as info:
        ws.read_text("nope.txt", max_bytes=10)
    assert str(info.value) == "path 'nope.txt' refused (not_found): no such file or directory"


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


# -- symlinks: how far they lead, and in what spelling ---------------------------------------


def test_a_chain_of_forty_symlinks_resolves_and_one_more_is_a_loop(
    ws: Workspace, tree: Path
) -> None:
    # Linux's own bound: a chain of 40 links opens, one of 41 fails with ELOOP.
    os.symlink("a.txt", tree / "hop40")
    for i in range(39, -1, -1):
        os.symlink(f"hop{i + 1}", tree / f"hop{i}")
    rp = ws.resolve("hop1")  # 40 links
    assert (rp.relative, rp.followed_symlinks) == ("a.txt", True)
    with pytest.raises(PathPolicyError) as info:
        ws.resolve("hop0")  # 41 links
    assert info.value.reason == "symlink_loop"


def test_a_symlink_target_in_any_spelling_leads_to_the_same_place(
    ws: Workspace, tree: Path
) -> None:
    os.symlink(".//notes/./", tree / "spelled")
    os.symlink(str(tree) + "//notes/.//", tree / "abs_spelled")
    for link in ("spelled", "abs_spelled"):
        assert ws.resolve(f"{link}/b.txt").relative == "notes/b.txt"
        assert ws.resolve(link).relative == "notes"


def test_a_symlink_to_a_name_sorting_before_the_dot_leads_to_that_name(
    ws: Workspace, tree: Path
) -> None:
    (tree / "-v.txt").write_text("dash\n")
    os.symlink("-v.txt", tree / "dash_link.txt")
    os.symlink(str(tree / "-v.txt"), tree / "abs_dash_link.txt")
    for link in ("dash_link.txt", "abs_dash_link.txt"):
        assert ws.resolve(link).relative == "-v.txt"


def test_an_absolute_path_is_walked_through_the_symlinks_inside_the_workspace(
    ws: Workspace, tree: Path
) -> None:
    rp = ws.resolve(str(tree / "link_a.txt"))
    assert (rp.relative, rp.followed_symlinks) == ("a.txt", True)
    with pytest.raises(PathPolicyError) as info:
        ws.resolve(str(tree / "to_secret.txt"))
    assert info.value.reason == "symlink_escape"
    assert str(info.value).endswith("a symlink leads outside the workspace")
    with pytest.raises(PathPolicyError) as info:
        ws.resolve(str(tree.parent / "outside" / "secret.txt"))
    assert info.value.reason == "outside_workspace"
    assert str(info.value).endswith("the path is outside the workspace")


def test_a_symlink_climbing_out_after_naming_a_directory_is_the_links_escape(
    ws: Workspace, tree: Path
) -> None:
    os.symlink("notes/../../outside/secret.txt", tree / "sneaky.txt")
    os.symlink(str(tree) + "/notes/../../outside/secret.txt", tree / "abs_sneaky.txt")
    for link in ("sneaky.txt", "abs_sneaky.txt"):
        with pytest.raises(PathPolicyError) as info:
            ws.resolve(link, must_exist=False)
        assert info.value.reason == "symlink_escape"
        assert str(info.value).endswith("a symlink leads outside")
    # The user's own '..' out of the workspace is the user's doing.
    with pytest.raises(PathPolicyError) as info:
        ws.resolve("notes/../../outside/secret.txt")
    assert str(info.value).endswith("'..' leaves the workspace")


def test_a_relative_symlink_may_climb_out_of_the_workspace_and_come_back_in(
    ws: Workspace, tree: Path
) -> None:
    names = Path(ws.root).parts[1:]  # the workspace's real components below "/"
    for where, height in ((tree, len(names)), (tree / "notes", len(names) + 1)):
        # Every climb, up to the host's root itself, then down again to a.txt.
        for up in range(1, height + 1):
            back = "".join(name + "/" for name in names[height - up :])
            link = where / f"up{up}.txt"
            os.symlink("./" + "../" * up + back + "a.txt", link)
            rp = ws.resolve(str(link.relative_to(tree)))
            assert (rp.relative, rp.followed_symlinks) == ("a.txt", True), os.readlink(link)


def test_backing_out_of_a_missing_directory_still_follows_the_next_symlink(
    ws: Workspace,
) -> None:
    with pytest.raises(PathPolicyError) as info:
        ws.resolve("new/../to_secret.txt", must_exist=False)
    assert info.value.reason == "symlink_escape"
    rp = ws.resolve("new/deeper/../../link_a.txt", must_exist=False)
    assert (rp.relative, rp.followed_symlinks) == ("a.txt", True)
    assert ws.resolve("new/deeper/../x.txt", must_exist=False).relative == "new/x.txt"


def test_proc_self_cwd_at_the_root_is_the_root(
    ws: Workspace, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree)
    assert ws.resolve("/proc/self/cwd").relative == ""


def test_the_suffix_is_that_of_the_final_name_not_of_a_directory(
    ws: Workspace, tree: Path
) -> None:
    (tree / "dir.txt").mkdir()
    (tree / "dir.txt" / "key.pem").write_text("not text\n")
    for path in ("dir.txt/key.pem", "."):
        with pytest.raises(PathPolicyError) as info:
            ws.resolve(path, allowed_suffixes=(".txt",))
        assert info.value.reason == "bad_extension"
    assert ws.resolve("notes/b.txt", allowed_suffixes=(".txt",)).relative == "notes/b.txt"


def test_a_path_too_long_for_the_host_is_refused_as_invalid(ws: Workspace, tree: Path) -> None:
    # Real directories nested until the host path nears PATH_MAX (4,096 bytes with its NUL);
    # the user's input stays under its own 4,096-character bound.
    name = "d" * 200
    depth = (4090 - len(str(tree)) - 1) // (len(name) + 1)
    os.makedirs(os.path.join(tree, *[name] * depth))
    last = "x" * (4100 - len(str(tree)) - depth * (len(name) + 1))
    user_path = "/".join([name] * depth) + "/" + last
    assert len(user_path) <= 4096 < len(str(tree)) + 1 + len(user_path)
    with pytest.raises(PathPolicyError) as info:
        ws.resolve(user_path, must_exist=False)
    assert info.value.reason == "invalid"
    assert str(info.value).endswith("cannot inspect (File name too long)")


def test_only_a_tool_that_reads_and_changes_nothing_may_name_a_read_only_root() -> None:
    for capability in Capability:
        for effect in Effect:

            def probe() -> str:
                """A probe."""
                return ""

            definition = tooltrace.tool(capability=capability, effect=effect)(probe).definition
            expected = capability is Capability.READ and effect is Effect.NONE
            assert reads_only(definition) is expected, (capability, effect)


def test_a_protected_root_refuses_itself_and_what_lies_under_it_only(tree: Path) -> None:
    ws = Workspace(tree).with_protected([tree / "notes"])
    for path in ("notes", "notes/b.txt", "indir/b.txt", str(tree / "notes"), "notes/new.txt"):
        with pytest.raises(PathPolicyError) as info:
            ws.resolve(path, must_exist=False)
        assert info.value.reason == "protected"
    # Names sorting before it, after it, and sharing its prefix are not protected.
    for path in ("a.txt", "deep/er/c.txt", "notes-x.txt", "z.txt", "."):
        assert not ws.resolve(path, must_exist=False).read_only
    assert ws.is_protected(str(tree / "notes")) and not ws.is_protected(str(tree))


# -- read-only roots, seen from the workspace --------------------------------------------------


def test_a_read_only_root_at_the_host_root_reads_anywhere_and_writes_nowhere(tree: Path) -> None:
    ws = Workspace(tree, read_only_roots=["/"])
    secret = tree.parent / "outside" / "secret.txt"
    rp = ws.resolve(str(secret))
    assert (rp.relative, rp.read_only) == (os.path.realpath(secret), True)
    assert ws.read_text(str(secret), max_bytes=100)[0] == SECRET.decode()
    with pytest.raises(PathPolicyError) as info:
        ws.open_write(rp)
    assert info.value.reason == "read_only"
    # The workspace, the deeper root, stays writable: by name, and through a link outside it.
    assert (ws.resolve("a.txt").relative, ws.resolve("a.txt").read_only) == ("a.txt", False)
    os.symlink("../" + tree.name, tree.parent / "outside" / "back")
    rp = ws.resolve(str(tree.parent / "outside" / "back"))
    assert (rp.relative, rp.read_only) == ("", False)
    # A read-only root inside it, named for reading, is a directory, not a file.
    ws = Workspace(tree, read_only_roots=["/", tree.parent / "outside"])
    with pytest.raises(PathPolicyError) as info:
        ws.open_read(ws.resolve(str(tree.parent / "outside")))
    assert info.value.reason == "not_regular"
    assert "is a directory" in str(info.value)


def test_a_read_only_root_whose_name_extends_the_workspaces_is_not_the_workspace(
    tree: Path,
) -> None:
    evil = tree.parent / "root-evil"  # "root" is the workspace
    ws = Workspace(tree, read_only_roots=[evil])
    for user_path in (str(evil / "x.txt"), "evil/x.txt"):
        rp = ws.resolve(user_path)
        assert (rp.relative, rp.read_only) == (os.path.realpath(evil / "x.txt"), True)
        assert ws.read_text(user_path, max_bytes=100)[0] == SECRET.decode()
    with pytest.raises(PathPolicyError) as info:
        Workspace(tree, read_only_roots=[tree / "a.txt"])
    assert info.value.reason == "not_found"



def test_with_several_read_only_roots_a_file_is_read_from_the_root_holding_it(
    tree: Path,
) -> None:
    # Roots sorting before and after the one that holds the file, with longer names.
    roots = [tree.parent / ("a" * 20), tree.parent / "outside", tree.parent / ("z" * 20)]
    for root in roots:
        root.mkdir(exist_ok=True)
        (root / "f.txt").write_text(root.name)
    ws = Workspace(tree, read_only_roots=roots)
    for root in roots:
        assert ws.read_text(str(root / "f.txt"), max_bytes=100)[0] == root.name
    assert not ws.resolve("a.txt").read_only


def test_links_in_a_read_only_root_holding_the_workspace_lead_where_the_kernel_goes(
    tree: Path,
) -> None:
    outer = tree.parent  # holds the workspace ("root") and "outside"
    ws = Workspace(tree, read_only_roots=[outer])
    os.symlink(f"../{tree.name}/notes", outer / "outside" / "to_notes")
    os.symlink("../notes/../../outside/secret.txt", tree / "notes" / "back_out.txt")
    user_path = str(outer / "outside" / "to_notes" / "back_out.txt")
    assert os.path.realpath(user_path) == os.path.realpath(outer / "outside" / "secret.txt")
    rp = ws.resolve(user_path)
    assert (rp.relative, rp.read_only) == (os.path.realpath(user_path), True)


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
    assert _read_all(ws.open_read(ws.resolve("deep/er/c.txt"))) == b"gamma\n"


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


# -- opening, in detail ----------------------------------------------------------------------


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_open_dir_opens_the_directory_itself_and_nothing_put_in_its_place(
    ws: Workspace, tree: Path
) -> None:
    for path, real in ((".", tree), ("indir", tree / "notes"), ("deep/er", tree / "deep" / "er")):
        fd = ws.open_dir(ws.resolve(path))
        try:
            assert os.fstat(fd).st_ino == real.stat().st_ino
            assert sorted(os.listdir(fd)) == sorted(os.listdir(real))  # a descriptor to work in
        finally:
            os.close(fd)
    rp = ws.resolve("deep/er")
    os.rename(tree / "deep" / "er", tree / "deep" / "er.bak")
    (tree / "deep" / "er").write_text("now a file\n")
    with pytest.raises(PathPolicyError) as info:
        ws.open_dir(rp)
    assert info.value.reason == "symlink_race"
    os.unlink(tree / "deep" / "er")
    os.symlink(tree.parent / "outside" / "dir", tree / "deep" / "er")
    with pytest.raises(PathPolicyError) as info:
        ws.open_dir(rp)
    assert info.value.reason == "symlink_race"


def test_a_resolved_path_made_by_hand_is_opened_only_in_canonical_form(
    ws: Workspace, tree: Path
) -> None:
    for relative in ("notes/../a.txt", "notes/./b.txt", "notes//b.txt"):
        with pytest.raises(PathPolicyError) as info:
            ws.open_read(ResolvedPath(relative, str(tree / relative), False))
        assert info.value.reason == "invalid"
    # A path another workspace resolved in a read-only root of its own is outside this one,
    # and an absolute path is never taken as one inside the workspace.
    for absolute in (str(tree.parent / "outside" / "secret.txt"), str(tree / "a.txt")):
        with pytest.raises(PathPolicyError) as info:
            ws.open_read(ResolvedPath(absolute, absolute, False, True))
        assert info.value.reason == "outside_workspace"
        assert str(tree.parent) not in str(info.value)
    # Made without saying, a path is not read-only.
    fd = ws.open_write(ResolvedPath("notes/new.txt", str(tree / "notes" / "new.txt"), False))
    os.close(fd)
    assert (tree / "notes" / "new.txt").exists()


def test_descriptors_handed_back_block_like_any_other(ws: Workspace) -> None:
    for fd in (ws.open_read(ws.resolve("a.txt")), ws.open_write("notes/new.txt")):
        try:
            assert os.get_blocking(fd)
        finally:
            os.close(fd)


def test_writing_to_a_fifo_or_a_directory_is_refused_without_blocking(
    ws: Workspace, tree: Path
) -> None:
    os.mkfifo(tree / "fifo.txt")
    with pytest.raises(PathPolicyError) as info:
        ws.open_write("fifo.txt")  # no reader: opening it for writing would wait for one
    assert info.value.reason == "invalid"
    assert "cannot be opened" in str(info.value)
    with pytest.raises(PathPolicyError) as info:
        ws.open_write("notes")
    assert info.value.reason == "not_regular"
    assert str(info.value) == "'notes' is a directory"


def test_new_files_get_the_mode_asked_for_less_the_umask(ws: Workspace, tree: Path) -> None:
    umask = os.umask(0o022)
    try:
        os.close(ws.open_write("default.txt"))
        os.close(ws.open_write("private.txt", mode=0o600))
    finally:
        os.umask(umask)
    assert (tree / "default.txt").stat().st_mode & 0o777 == 0o644
    assert (tree / "private.txt").stat().st_mode & 0o777 == 0o600


def test_open_write_empties_an_existing_file_only_when_asked(ws: Workspace, tree: Path) -> None:
    os.close(ws.open_write("a.txt"))
    assert (tree / "a.txt").read_bytes() == b""
    (tree / "a.txt").write_bytes(b"alpha\n")
    fd = ws.open_write("a.txt", truncate=False)
    os.write(fd, b"A")
    os.close(fd)
    assert (tree / "a.txt").read_bytes() == b"Alpha\n"


def test_a_refused_open_leaves_no_descriptor_behind(ws: Workspace, tree: Path) -> None:
    os.mkfifo(tree / "fifo.txt")
    os.link(tree / "a.txt", tree / "second_name.txt")
    strict = Workspace(tree, strict_hardlinks=True)
    rp_dir = ws.resolve("deep/er")
    rp_file = ws.resolve("deep/er/c.txt")
    before = _open_fds()
    attempts = [
        lambda: ws.open_read(ws.resolve("fifo.txt")),  # opened, then found not regular
        lambda: ws.open_write("second_name.txt"),  # opened, then found hard-linked
        lambda: strict.open_read(strict.resolve("a.txt")),
        lambda: ws.open_write("fifo.txt"),
        lambda: ws.open_read(ResolvedPath("deep/../a.txt", "", False)),  # the walk is refused
    ]
    for attempt in attempts:
        with pytest.raises(PathPolicyError):
            attempt()
    os.rename(tree / "deep", tree / "deep.bak")
    os.symlink(tree.parent / "outside", tree / "deep")
    for attempt in (lambda: ws.open_dir(rp_dir), lambda: ws.open_read(rp_file)):
        with pytest.raises(PathPolicyError):
            attempt()
    assert _open_fds() == before


def test_messages_about_an_opened_path_show_its_end_only(ws: Workspace, tree: Path) -> None:
    name = "n" * 100 + ".txt"
    os.mkfifo(tree / name)
    with pytest.raises(PathPolicyError) as info:
        ws.open_read(ws.resolve(name))
    assert str(info.value) == f"{name[-60:]!r} is not a regular file"
    outside = tree.parent / "outside"
    with_ro = Workspace(tree, read_only_roots=[outside])
    with pytest.raises(PathPolicyError) as info:
        with_ro.open_write(with_ro.resolve(str(outside / "secret.txt")))
    assert str(info.value) == "'<read-only>/secret.txt' is in a read-only root"
    long_name = outside / ("r" * 100 + ".txt")
    long_name.write_text("r\n")
    with pytest.raises(PathPolicyError) as info:
        with_ro.open_write(with_ro.resolve(str(long_name)))
    shown = repr("<read-only>/" + long_name.name[-60:])
    assert str(info.value) == f"{shown} is in a read-only root"


# -- read_text's bound -----------------------------------------------------------------------


def test_read_text_reads_exactly_the_bytes_asked_for(ws: Workspace) -> None:
    assert ws.read_text("a.txt", max_bytes=0)[:2] == ("", 6)
    assert ws.read_text("a.txt", max_bytes=1)[:2] == ("a", 6)
    assert ws.read_text("a.txt", max_bytes=6)[:2] == ("alpha\n", 6)
    with pytest.raises(ValueError, match="max_bytes"):
        ws.read_text("a.txt", max_bytes=-1)


def test_a_file_ending_inside_a_character_shows_a_replacement_when_read_whole(
    ws: Workspace, tree: Path
) -> None:
    (tree / "cut.txt").write_bytes(b"ok\xc3")  # the first byte of a two-byte character
    assert ws.read_text("cut.txt", max_bytes=3)[0] == "ok\ufffd"
    (tree / "long_cut.txt").write_bytes(b"x" * 300 + b"\xc3")
    assert ws.read_text("long_cut.txt", max_bytes=301)[0] == "x" * 300 + "\ufffd"
    (tree / "whole.txt").write_bytes("ok\u00e9".encode())
    assert ws.read_text("whole.txt", max_bytes=3)[0] == "ok"  # cut by the bound: dropped


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


@pytest.mark.parametrize("code", [errno.EACCES, errno.EDQUOT, errno.ESTALE, errno.EOPNOTSUPP])
def test_an_open_error_that_is_no_swap_is_reported_as_itself(code: int) -> None:
    # Only ELOOP and ENOTDIR mean a path changed while it was opened. A quota, a stale NFS
    # handle or a FUSE file system's own error (errno above ELOOP) is reported as it is.
    # No file system here gives those, so the classifier gets each errno directly.
    rp = ResolvedPath("notes/a.txt", "/srv/ws/notes/a.txt", False)
    err = Workspace._open_error(OSError(code, os.strerror(code)), rp)
    assert (err.reason, str(err)) == (
        "invalid", f"'notes/a.txt' cannot be opened ({os.strerror(code)})"
    )
    loop = Workspace._open_error(OSError(errno.ELOOP, os.strerror(errno.ELOOP)), rp)
    assert loop.reason == "symlink_race"
