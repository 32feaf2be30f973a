"""Path policy through the registry: every adversarial input of ``tests/support/paths.py`` (and a
few more: NFC/NFD, Unicode two-dot leaders, ``/proc/self/fd``, dangling and directory symlinks
as write targets) sent to the built-in ``read_text`` and ``write_text`` tools, the check/open
swap race through both tools, and the canonical-form property through ``read_text``.

Escape = a read that returns content from outside the workspace, or a write that creates or
changes anything outside it. Target: 0. (``tests/test_paths.py`` holds the same table against
``Workspace`` alone, and its own race at ``TOOLTRACE_LONG=1`` 100,000 iterations.)
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from support.paths import ADVERSARIAL, SECRET, Racing, user_paths

from tooltrace import Status, ToolCall, ToolRegistry
from tooltrace.builtins import register_builtins
from tooltrace.policy import PathPolicyError, canonical_form

from ._figures import LONG, record, size

RACE = size(2_000, 100_000)

# Inputs beyond the Workspace table, for the tools: (input, refused for read, refused for write).
EXTRA: list[str] = [
    "\u2025/outside/secret.txt",  # TWO DOT LEADER: NFKC ".."
    "\u2024\u2024/outside/secret.txt",  # ONE DOT LEADER x2
    "e\u0301/../../outside/secret.txt",  # NFD text before a traversal
    unicodedata.normalize("NFD", "caf\u00e9/../../outside/secret.txt"),
    "/proc/self/fd/0",
    "/proc/self/cwd/../outside/secret.txt",
    "/proc/self/root" + "/etc/hostname",
    "outdir/new.txt",  # a new file under a symlinked outside directory
    "dangling_out.txt",  # a dangling symlink whose target is outside
    "parent/outside/new.txt",
    "./../outside/secret.txt",
    "notes/./../../outside/secret.txt",
    "notes/..\\..\\outside\\secret.txt",
    "C:/outside/secret.txt",
    "c:\\outside\\secret.txt",
    "\\\\?\\UNC\\server\\share\\secret.txt",
    "\\\\.\\C:\\secret.txt",
    "a.txt::$DATA",
    "SECRET~1.TXT",
    "CON.txt",
    "a.txt . .",
]


def _outside_state(root: Path) -> dict[str, str]:
    """Digest of every file outside the workspace (what an escaping write would change)."""
    out: dict[str, str] = {}
    for dirpath, _dirs, files in os.walk(root.parent):
        if Path(dirpath) == root or root in Path(dirpath).parents:
            continue
        for f in files:
            p = Path(dirpath) / f
            if p.is_file() and not p.is_symlink():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture()
def reg(tree: Path) -> Iterator[ToolRegistry]:
    r = register_builtins(ToolRegistry(workspace=tree, home=tree.parent / "home"))
    yield r
    r.shutdown(timeout_s=2.0)


def _inputs() -> list[str]:
    return [p for p, _reason in ADVERSARIAL] + EXTRA


def test_adversarial_paths_through_read_text_and_write_text(
    reg: ToolRegistry, tree: Path
) -> None:
    inputs = _inputs()
    assert len(inputs) >= 30
    before = _outside_state(tree)
    escapes: list[tuple[str, str]] = []
    outcomes: dict[str, int] = {}
    for user_path in inputs:
        env = reg.call(ToolCall("read_text", {"path": user_path}))
        outcomes[f"read_{env.status.value}"] = outcomes.get(f"read_{env.status.value}", 0) + 1
        if env.status is Status.OK or SECRET.decode() in repr(env.to_dict()):
            escapes.append(("read", user_path))
        assert str(tree.parent) not in env.summary
        env = reg.call(ToolCall("write_text", {"path": user_path, "text": "pwned"}))
        outcomes[f"write_{env.status.value}"] = outcomes.get(f"write_{env.status.value}", 0) + 1
        if env.status is Status.OK:
            escapes.append(("write", user_path))
        assert str(tree.parent) not in env.summary
    after = _outside_state(tree)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    record("path inputs via registry", inputs=len(inputs), calls=2 * len(inputs),
           escapes=len(escapes) + len(changed), **outcomes)
    assert not escapes, escapes
    assert not changed, changed


def test_inside_paths_still_work_and_normal_forms_are_distinct_names(
    reg: ToolRegistry, tree: Path
) -> None:
    nfc = "caf\u00e9.txt"
    nfd = unicodedata.normalize("NFD", nfc)
    for name, text in ((nfc, "composed"), (nfd, "decomposed")):
        env = reg.call(ToolCall("write_text", {"path": f"notes/{name}", "text": text}))
        assert env.status is Status.OK, env.summary
    for name, text in ((nfc, "composed"), (nfd, "decomposed")):
        env = reg.call(ToolCall("read_text", {"path": f"notes/{name}"}))
        assert env.status is Status.OK and env.data["text"] == text
    for ok_path in ("chain2.txt", "indir/b.txt", "link_a.txt", str(tree / "a.txt")):
        env = reg.call(ToolCall("read_text", {"path": ok_path}))
        assert env.status is Status.OK, (ok_path, env.summary)
    # A dangling link to a missing name *inside* creates that name inside.
    env = reg.call(ToolCall("write_text", {"path": "dangling_in.txt", "text": "made"}))
    assert env.status is Status.OK and (tree / "missing.txt").read_text() == "made"


def test_hardlinks_are_not_written_and_strict_reads_refuse_them(
    tree: Path, tmp_path: Path
) -> None:
    os.link(tree.parent / "outside" / "secret.txt", tree / "hard.txt")
    reg = register_builtins(ToolRegistry(workspace=tree, home=tmp_path / "h1"))
    env = reg.call(ToolCall("write_text", {"path": "hard.txt", "text": "pwned"}))
    assert env.status is not Status.OK
    assert (tree.parent / "outside" / "secret.txt").read_bytes() == SECRET
    # Reading a hard link is allowed by default (documented); strict workspaces refuse it.
    reg.shutdown()
    from tooltrace import Workspace

    strict = register_builtins(
        ToolRegistry(workspace=Workspace(tree, strict_hardlinks=True), home=tmp_path / "h2")
    )
    env = strict.call(ToolCall("read_text", {"path": "hard.txt"}))
    assert env.status is not Status.OK and SECRET.decode() not in repr(env.to_dict())
    strict.shutdown()


@pytest.mark.timeout(3600 if LONG else 300)
def test_swap_race_through_the_tools_never_escapes(
    racing: Racing, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _ws, tree, _stop, swaps = racing
    # The home (where snapshots of the writes go) lies apart from what must not change.
    home = tmp_path_factory.mktemp("home")
    reg = register_builtins(ToolRegistry(workspace=tree, home=home))
    outside = tree.parent / "outside"
    before = _outside_state(tree)
    escapes = 0
    ok = {"read": 0, "write": 0}
    refused = {"read": 0, "write": 0}
    for i in range(RACE):
        name = "victim.txt" if i % 2 == 0 else "vdir/victim.txt"
        if i % 4 < 2:
            env = reg.call(ToolCall("read_text", {"path": name}))
            kind = "read"
            if env.status is Status.OK and env.data["text"].encode() == SECRET:
                escapes += 1
        else:
            env = reg.call(ToolCall("write_text", {"path": name, "text": f"w{i}"}))
            kind = "write"
        if env.status is Status.OK:
            ok[kind] += 1
        else:
            refused[kind] += 1
    reg.shutdown()
    after = _outside_state(tree)
    stray = [p for p in (outside / "dir").iterdir() if p.name not in ("victim.txt", "secret.txt")]
    changed = [k for k in set(before) | set(after) if before.get(k) != after.get(k)]
    record("path swap race via registry", iterations=RACE, swaps=swaps[0],
           reads_ok=ok["read"], reads_refused=refused["read"], writes_ok=ok["write"],
           writes_refused=refused["write"], escapes=escapes + len(stray) + len(changed))
    assert escapes == 0 and not stray and not changed, (escapes, stray, changed)
    # Both outcomes happened for both tools: the gap between check and open was exercised.
    assert min(ok.values()) > 0 and min(refused.values()) > 0, (ok, refused)


@settings(max_examples=size(150, 2000), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user_path=user_paths())
def test_read_text_decides_like_its_canonical_form(
    reg: ToolRegistry, user_path: str
) -> None:
    env = reg.call(ToolCall("read_text", {"path": user_path}))
    try:
        canon = canonical_form(user_path)
    except PathPolicyError:
        assert env.status is not Status.OK
        return
    env2 = reg.call(ToolCall("read_text", {"path": canon}))
    assert (env.status is Status.OK) == (env2.status is Status.OK), (user_path, canon)
    if env.status is Status.OK:
        assert env.data == env2.data
