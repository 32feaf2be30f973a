"""The snapshot stage: before a tool that declares the files it writes runs, keep what they
hold; after it returns, note what it left (see ``tooltrace.snapshots``).

It runs after admission, right before execution, only for tools with ``writes``: a call of any
other tool pays nothing for it. A file that cannot be read safely (a symlink swapped in, a
directory, a device) refuses the call: a write there could not be undone. A file over the
size bound is recorded as ``too_large`` and the call goes on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..model import Stage, StepName, ToolDefinition
from ..policy import PathPolicyError
from ..snapshots import FileSnapshot, FileState, SnapshotRecord, read_state
from ._record import Builder, error_text

if TYPE_CHECKING:
    from ._environment import Environment

__all__ = ["snapshot_after", "snapshot_before"]

_perf_ns = time.perf_counter_ns


def snapshot_before(
    env: Environment, b: Builder, d: ToolDefinition, args: Mapping[str, Any]
) -> tuple[FileSnapshot, ...] | None:
    """One ``snapshot`` step per written file, its previous content kept as an artifact;
    None when a file cannot be snapshotted safely (the call is refused)."""
    store = env.snapshots
    taken: list[FileSnapshot] = []
    for param in d.writes:
        value = args.get(param)
        if not isinstance(value, str):
            continue  # an optional path left out: nothing is written there
        t = _perf_ns()
        try:
            rel = env.workspace.resolve(value, must_exist=False).relative
            state, data, (dev, ino) = read_state(env.workspace, rel, store.max_bytes)
            if data is not None:
                store.keep(data)
        except (PathPolicyError, OSError) as exc:
            reason = exc.reason if isinstance(exc, PathPolicyError) else "not_saved"
            _refuse(env, b, d, t, {"param": param, "reason": reason}, exc)
            return None
        b.step(StepName.SNAPSHOT, t, "runtime", _decision(state), _detail(param, rel, state,
                                                                            store.max_bytes))
        taken.append(FileSnapshot(param, rel, state, None, dev, ino))
    if taken:
        # The manifest is made durable before the write, so a call that never returns (a
        # crash) can still be restored; what it left is then unknown (restore needs --force).
        t = _perf_ns()
        try:
            store.save(SnapshotRecord(b.call_id, d.name, env.workspace.root, tuple(taken)))
        except OSError as exc:
            _refuse(env, b, d, t, {"reason": "not_saved"}, exc)
            return None
    return tuple(taken)


def _refuse(env: Environment, b: Builder, d: ToolDefinition, t: int,
            detail: dict[str, Any], exc: BaseException) -> None:
    """Record the refused snapshot and refuse the call: the write could not be undone."""
    detail["error"] = error_text(env, exc)
    b.step(StepName.SNAPSHOT, t, "runtime", "reject", detail)
    b.reject(Stage.POLICY, f"the file it writes cannot be snapshotted safely before the write "
             f"({detail['reason']})", d.name)


def _decision(state: FileState) -> str:
    if not state.exists:
        return "created"
    return "stored" if state.kept else "too_large"


def _detail(param: str, rel: str, state: FileState, limit: int) -> dict[str, Any]:
    detail: dict[str, Any] = {"param": param, "path": rel}
    if not state.exists:
        detail["created"] = True
    elif state.kept:
        detail.update(sha256=state.sha256, size=state.size)
    else:
        detail.update(size=state.size, limit_bytes=limit,
                      note="over the snapshot limit: not kept, cannot be restored")
    return detail


def snapshot_after(env: Environment, b: Builder, tool: str,
                   taken: tuple[FileSnapshot, ...], ended: bool) -> None:
    """Read each written file again and save the call's manifest (never raises: a failure
    leaves the after-state unknown). A tool that did not end (abandoned at its deadline) may
    still be writing: what it leaves is unknown, and the manifest stays as it was."""
    if not ended:
        return
    store = env.snapshots
    files = []
    for snap in taken:
        after: FileState | None
        try:
            after, data, _ident = read_state(env.workspace, snap.path, store.max_bytes)
            if data is not None:
                store.keep(data)
        except (PathPolicyError, OSError):
            after = None
        files.append(FileSnapshot(snap.param, snap.path, snap.before, after,
                                  snap.device, snap.inode))
    try:
        store.save(SnapshotRecord(b.call_id, tool, env.workspace.root, tuple(files)))
    except OSError:
        env.emitter.errors += 1

