"""The path-race kit: a workspace tree with escaping symlinks, the inputs that must be refused,
and the two flippers that swap a workspace name for a symlink to outside while tests use it.

``tree`` (a fixture) builds ``tmp/outside`` (the secret), ``tmp/root`` (the workspace, with
symlinks that escape and ones that stay inside) and ``tmp/root-evil``. ``racing`` swaps names in
a thread of the test process; ``flipper`` swaps ``root/pdir`` from a process of its own
(``dir_flipper.py``). Test modules import the fixtures they use by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import strategies as st

from tooltrace.policy import Workspace

SECRET = b"TOP-SECRET-OUTSIDE"
#: What ``racing`` yields: the workspace, its root, the stop event and the swap count.
Racing = tuple[Workspace, Path, threading.Event, list[int]]
FLIPPER = Path(__file__).with_name("dir_flipper.py")


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """tmp/outside/secret.txt, tmp/root (the workspace), tmp/root-evil, and links inside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    (outside / "dir").mkdir()
    (outside / "dir" / "secret.txt").write_bytes(SECRET)
    evil = tmp_path / "root-evil"
    evil.mkdir()
    (evil / "x.txt").write_bytes(SECRET)
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "notes").mkdir()
    (root / "notes" / "b.txt").write_text("beta\n")
    (root / "deep" / "er").mkdir(parents=True)
    (root / "deep" / "er" / "c.txt").write_text("gamma\n")
    (root / "key.pem").write_text("not text\n")
    # symlinks inside the workspace
    os.symlink("../outside/secret.txt", root / "to_secret.txt")  # relative, escapes
    os.symlink(str(outside / "secret.txt"), root / "abs_secret.txt")  # absolute, escapes
    os.symlink("../outside/dir", root / "outdir")  # directory outside
    os.symlink("notes", root / "indir")  # directory inside
    os.symlink("a.txt", root / "link_a.txt")  # file inside
    os.symlink(str(root / "a.txt"), root / "abs_a.txt")  # absolute target inside
    os.symlink("link_a.txt", root / "chain1.txt")  # chain inside: chain1 -> link_a -> a
    os.symlink("chain1.txt", root / "chain2.txt")
    os.symlink("deep/er/up.txt", root / "chain_out.txt")  # chain that ends outside
    os.symlink("../../../outside/secret.txt", root / "deep" / "er" / "up.txt")
    os.symlink("../outside/missing.txt", root / "dangling_out.txt")
    os.symlink("missing.txt", root / "dangling_in.txt")
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    os.symlink("..", root / "parent")  # the workspace's parent directory
    os.symlink("../root-evil", root / "evil")
    os.symlink("key.pem", root / "disguised.txt")
    os.symlink("/proc/self/root", root / "procroot")
    return root


# (input, expected reason) -- every one of these must be refused, with exactly this reason.
ADVERSARIAL: list[tuple[str, str]] = [
    ("../outside/secret.txt", "outside_workspace"),
    ("../../etc/passwd", "outside_workspace"),
    ("notes/../../outside/secret.txt", "outside_workspace"),
    ("a/../../outside/secret.txt", "outside_workspace"),
    ("new/x/../../../outside/secret.txt", "outside_workspace"),
    ("/etc/passwd", "outside_workspace"),
    ("/proc/self/root/etc/passwd", "outside_workspace"),
    ("/proc/self/environ", "outside_workspace"),
    ("../root-evil/x.txt", "outside_workspace"),
    ("to_secret.txt", "symlink_escape"),
    ("abs_secret.txt", "symlink_escape"),
    ("outdir/secret.txt", "symlink_escape"),
    ("chain_out.txt", "symlink_escape"),
    ("deep/er/up.txt", "symlink_escape"),
    ("dangling_out.txt", "symlink_escape"),
    ("parent/outside/secret.txt", "symlink_escape"),
    ("evil/x.txt", "symlink_escape"),
    ("procroot/etc/passwd", "symlink_escape"),
    ("indir/../../outside/secret.txt", "outside_workspace"),
    ("loop1", "symlink_loop"),
    ("a\x00.txt", "nul_byte"),
    ("a.txt%00.txt", "nul_byte"),
    ("%2e%2e/outside/secret.txt", "encoded_traversal"),
    ("%2E%2E%2Foutside%2Fsecret.txt", "encoded_traversal"),
    ("..%2foutside/secret.txt", "encoded_traversal"),
    ("%252e%252e%252foutside", "encoded_traversal"),
    ("%25252e%25252e/x", "encoded_traversal"),
    ("%c0%ae%c0%ae/outside", "encoded_traversal"),
    ("%e0%80%ae%e0%80%ae/x", "encoded_traversal"),
    ("..%5coutside", "encoded_traversal"),
    ("%u002e%u002e/x", "encoded_traversal"),
    ("%ef%bc%8e%ef%bc%8e/x", "encoded_traversal"),
    ("\uff0e\uff0e/outside/secret.txt", "lookalike"),
    ("\uff0e\uff0e\uff0foutside", "lookalike"),
    ("..\u2215outside", "lookalike"),
    ("\u2024\u2024/outside", "lookalike"),
    ("a\u202e.txt", "control_char"),
    ("a\nb.txt", "control_char"),
    ("a\udcc0\udcae.txt", "invalid"),
    ("~/secret.txt", "home_expansion"),
    ("~root/.ssh/id_rsa", "home_expansion"),
    ("$HOME/secret.txt", "env_expansion"),
    ("${HOME}/x", "env_expansion"),
    ("$(id)/x", "env_expansion"),
    ("%USERPROFILE%\\x", "env_expansion"),
    ("C:\\Windows\\win.ini", "windows_path"),
    ("c:/windows/win.ini", "windows_path"),
    ("C:win.ini", "windows_path"),
    ("\\\\server\\share\\x", "windows_path"),
    ("\\\\?\\C:\\x", "windows_path"),
    ("\\\\.\\PhysicalDrive0", "windows_path"),
    ("//server/share", "windows_path"),
    ("a\\..\\..\\outside\\secret.txt", "outside_workspace"),
    ("notes\\..\\..\\outside/secret.txt", "outside_workspace"),
    ("PROGRA~1\\x", "short_name"),
    ("notes/SECRET~1.TXT", "short_name"),
    ("a.txt:hidden", "stream_name"),
    ("a.txt::$DATA", "stream_name"),
    ("CON", "device_name"),
    ("nul.txt", "device_name"),
    ("notes/com1", "device_name"),
    ("LPT1.log", "device_name"),
    ("aux .txt", "device_name"),
    ("a.txt.", "trailing_dot_space"),
    ("a.txt ", "trailing_dot_space"),
    ("notes./b.txt", "trailing_dot_space"),
    ("...", "trailing_dot_space"),
    ("", "invalid"),
    ("a/" * 2100, "too_long"),
    ("x" * 300, "too_long"),
]


COMPONENTS = st.sampled_from(
    [
        "a.txt", "notes", "b.txt", "indir", "outdir", "link_a.txt", "chain2.txt", "deep", "er",
        "parent", "evil", "loop1", "..", ".", "", "new", "x.txt", "secret.txt", "outside",
        "to_secret.txt", "dangling_out.txt", "CON", "a:b", "PROGRA~1", "\uff0e\uff0e", "%2e%2e",
        "~", "$HOME", "c:", "root", "%41", "%2f", "caf\u00e9", "cafe\u0301", "a b", ".hidden",
        "x~1", "COM1", "a.txt.", "chain1.txt", "abs_a.txt", "dangling_in.txt", "procroot",
    ]
)
SEPARATORS = st.sampled_from(["/", "\\", "//", "/./", "\\.\\"])


@st.composite
def user_paths(draw: st.DrawFn) -> str:
    """A path a model might send, built from names the ``tree`` fixture holds."""
    comps = draw(st.lists(COMPONENTS, min_size=1, max_size=6))
    seps = draw(st.lists(SEPARATORS, min_size=len(comps), max_size=len(comps)))
    lead = draw(st.sampled_from(["", "/", "./"]))
    body = "".join(s + c for s, c in zip(seps, comps, strict=True))[1:]
    return lead + body


@pytest.fixture()
def racing(tree: Path) -> Iterator[Racing]:
    """A thread keeps swapping root/victim.txt and root/vdir between real and symlinked-outside.

    Yields ``(Workspace(tree), tree, stop, swaps)``: ``swaps[0]`` counts finished swaps (each
    turns vdir into a symlink and back: two flips).
    """
    outside = tree.parent / "outside"
    (outside / "dir" / "victim.txt").write_bytes(SECRET)
    (tree / "vdir").mkdir()
    (tree / "vdir" / "victim.txt").write_bytes(b"safe")
    (tree / "victim.txt").write_bytes(b"safe")
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            link = tree / f".l{i}"
            os.symlink(outside / "secret.txt", link)
            os.replace(link, tree / "victim.txt")  # atomically a symlink to the secret
            dlink = tree / f".d{i}"
            os.symlink(outside / "dir", dlink)
            os.rename(tree / "vdir", tree / f".real{i}")
            os.replace(dlink, tree / "vdir")  # the directory is now a symlink outside
            plain = tree / f".f{i}"
            plain.write_bytes(b"safe")
            os.replace(plain, tree / "victim.txt")  # and back to a plain file
            os.unlink(tree / "vdir")
            os.rename(tree / f".real{i}", tree / "vdir")
            swaps[0] = i

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        yield Workspace(tree), tree, stop, swaps
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.fixture()
def flipper(tree: Path) -> Iterator[Callable[[], int]]:
    """A separate process swapping root/pdir for a symlink to outside/dir and back.

    Yields a function returning how many flips it has made so far.
    """
    outside = tree.parent / "outside"
    (outside / "dir" / "victim.txt").write_bytes(SECRET)
    (tree / "pdir").mkdir()
    (tree / "pdir" / "victim.txt").write_bytes(b"safe")
    counter = tree.parent / "flips"
    counter.write_bytes(bytes(16))
    proc = subprocess.Popen([sys.executable, str(FLIPPER), str(tree / "pdir"),
                             str(outside / "dir"), str(counter)])

    def flips() -> int:
        return int.from_bytes(counter.read_bytes()[:8], "little")

    try:
        # Wait (bounded) for the first flip, so every call below meets a live race.
        for _ in range(3000):
            if flips() or proc.poll() is not None:
                break
            time.sleep(0.01)
        assert flips() > 0, "the flipper did not start"
        yield flips
    finally:
        with open(counter, "r+b") as fh:
            fh.seek(8)
            fh.write((1).to_bytes(8, "little"))
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
