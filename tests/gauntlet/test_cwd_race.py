"""``run_command``'s ``cwd`` against a directory that keeps turning into a symlink to outside.

The workspace directory given as ``cwd`` is swapped for a symlink to a directory outside (which
holds a file of the same name with the secret in it) and back, by a thread (the ``racing``
fixture) and by a separate process (``flipper``), both fixtures of ``tests/support/paths.py``,
while ``cat victim.txt`` runs there through the registry. Every call that runs must run in the
directory the policy checked, so it prints the inside file or is refused.

Escape = the secret anywhere in a call's envelope. Target: 0, with at least 5,000 flips in
all. The sizes are counts, not durations: each flipper gets at least ``CALLS`` calls, and more
while it has not yet flipped its share, for as long as it keeps flipping (a flipper that makes no
flip during ``STALL_CALLS`` calls in a row has stopped, and the test fails on its count).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.paths import SECRET, Racing

from tooltrace import Status, ToolCall, ToolRegistry
from tooltrace.builtins import register_builtins

from ._figures import LONG, record, size

CALLS = size(500, 20_000)  # per flipper, at least
STALL_CALLS = 20_000  # calls in a row without a flip: the flipper has stopped
# 5,000 flips in all: a thread flips slower (it shares the GIL with the calls).
THREAD_FLIPS = size(1_500, 30_000)
PROCESS_FLIPS = size(3_500, 70_000)


@dataclass
class Tally:
    """What the calls made of one flipper's race."""

    calls: int = 0
    ran_inside: int = 0
    refused: int = 0
    other: int = 0
    escapes: int = 0


def _hammer(root: Path, cwd: str, min_flips: int, flips: Callable[[], int]) -> Tally:
    """``cat victim.txt`` in ``cwd`` through a registry until ``flips()`` reaches ``min_flips``
    (and at least ``CALLS`` times; fewer flips only if the flipper stalls for ``STALL_CALLS``).

    How fast the flipper goes against the calls depends on the host (on two busy cores the calls
    can outrun it several times), so the bound is on its progress, not on the calls' count."""
    reg = register_builtins(ToolRegistry(workspace=root, home=root.parent / f"home-{cwd}"))
    tally = Tally()
    secret = SECRET.decode()
    seen, still = flips(), 0
    try:
        while tally.calls < CALLS or (flips() < min_flips and still < STALL_CALLS):
            now = flips()
            seen, still = now, (still + 1 if now == seen else 0)
            env = reg.call(ToolCall("run_command", {"argv": ["cat", "victim.txt"], "cwd": cwd}))
            tally.calls += 1
            if secret in repr(env.to_dict()):
                tally.escapes += 1
            elif env.status is not Status.OK:
                tally.refused += 1
            elif env.data["exit_code"] == 0 and env.data["stdout"] == "safe":
                tally.ran_inside += 1
            else:
                tally.other += 1
    finally:
        reg.shutdown(timeout_s=2.0)
    return tally


def _check(name: str, tally: Tally, min_flips: int, flips: int, outside: Path) -> None:
    record(name, calls=tally.calls, flips=flips, ran_inside=tally.ran_inside,
           refused=tally.refused, other=tally.other, escapes=tally.escapes)
    assert tally.escapes == 0, tally
    assert (outside / "dir" / "victim.txt").read_bytes() == SECRET
    assert flips >= min_flips, (flips, tally)
    # Both outcomes happened, so the check/start gap was really exercised.
    assert tally.ran_inside > 0 and tally.refused > 0, tally


@pytest.mark.timeout(3600 if LONG else 300)
def test_cwd_swapped_by_a_thread_never_escapes(
    racing: Racing,
) -> None:
    _ws, root, _stop, swaps = racing
    # Each swap turns vdir into a symlink to outside/dir and back: two flips.
    tally = _hammer(root, "vdir", THREAD_FLIPS, lambda: 2 * swaps[0])
    _check("cwd swap race, thread", tally, THREAD_FLIPS, 2 * swaps[0], root.parent / "outside")


@pytest.mark.timeout(3600 if LONG else 300)
def test_cwd_swapped_by_another_process_never_escapes(
    tree: Path, flipper: Callable[[], int]
) -> None:
    tally = _hammer(tree, "pdir", PROCESS_FLIPS, flipper)
    _check("cwd swap race, process", tally, PROCESS_FLIPS, flipper(), tree.parent / "outside")
