"""``restore``: put a file back as it was before an earlier call wrote it.

It reads the call's snapshot manifest (``tooltrace.snapshots``) and is itself a tool that
writes (``writes=("path",)``), so the registry snapshots the file again before it runs: a
restore is policed, audited and can be undone like any write. It refuses when the file is no
longer what the earlier call left (its sha256 differs) unless ``force``; a file the call created
is restored by deleting it. Every file operation walks from the workspace root without following
a symlink, and checks it acts on the file the registry just snapshotted.
"""

from __future__ import annotations

import os
from typing import Annotated

from ..model import Capability, Effect, FunctionTool, ToolResult, tool
from ..policy import PathPolicyError
from ..registry import ToolRegistry
from ..runtime import CallContext
from ..snapshots import FileSnapshot, FileState
from ._write_text import atomic_write

__all__ = ["RestoreRefused", "build_restore"]

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class RestoreRefused(RuntimeError):
    """The file was not restored; the message says why (``force`` overrides a changed file)."""


def _matches(now: FileState, left: FileState | None) -> bool:
    """Whether the file now holds what the earlier call left."""
    if left is None:
        return False
    if not left.exists or not now.exists:
        return left.exists == now.exists
    return now.sha256 is not None and now.sha256 == left.sha256


def _delete(ctx: CallContext, rel: str, now: FileSnapshot) -> None:
    """Delete the file the registry just snapshotted (and no other)."""
    rp = ctx.workspace.resolve(rel, must_exist=False)
    dfd, name = ctx.workspace.open_parent(rp)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK, dir_fd=dfd)
        except OSError as exc:
            raise PathPolicyError("symlink_race", f"{rel!r} changed while being opened") from exc
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if (st.st_dev, st.st_ino) != (now.device, now.inode):
            raise RestoreRefused(f"{rel!r} changed while being restored; nothing deleted")
        ctx.check()
        os.unlink(name, dir_fd=dfd)
    finally:
        os.close(dfd)


def build_restore(registry: ToolRegistry) -> FunctionTool:
    """The ``restore`` tool, reading the snapshots of ``registry``."""

    @tool("restore", capability=Capability.WRITE, effect=Effect.LOCAL, timeout_s=30.0,
          source="builtin", path_params=("path",), writes=("path",), group="files")
    def restore(
        ctx: CallContext,
        call_id: Annotated[str, "The call whose write to undo"],
        path: Annotated[str, "The file that call wrote (workspace-relative)"],
        force: Annotated[bool, "Restore even if the file changed since that call"] = False,
    ) -> ToolResult:
        """Put a file back as it was before an earlier call wrote it (delete it if that call
        created it); refused if the file changed since, unless force."""
        rec = registry.snapshots.load(call_id)
        if os.path.realpath(rec.workspace) != ctx.workspace.root:
            raise RestoreRefused(f"call {call_id} wrote in another workspace")
        rel = ctx.workspace.resolve(path, must_exist=False).relative
        snap = next((f for f in rec.files if f.path == rel), None)
        if snap is None:
            raise RestoreRefused(f"call {call_id} kept no snapshot of {rel!r}")
        now = (ctx.snapshots or {}).get("path")
        if now is None:
            raise RestoreRefused("the registry took no snapshot before this restore")
        changed = not _matches(now.before, snap.after)
        ctx.set_detail("restored_from", call_id)
        ctx.set_detail("changed_since", changed)
        if snap.after is None and not force:
            raise RestoreRefused(
                f"what call {call_id} left in {rel!r} is not known (it never returned, or the "
                "file could not be read after it); nothing restored: force to restore")
        if changed and not force:
            raise RestoreRefused(
                f"{rel!r} changed since call {call_id} (its sha256 is not what that call "
                "wrote); nothing restored: force to overwrite")
        if snap.created:
            if now.before.exists:
                _delete(ctx, rel, now)
            return ToolResult({"path": rel, "deleted": now.before.exists, "forced": changed},
                              summary=f"restored {rel} by deleting it (call {call_id} created it)")
        data = registry.snapshots.content(snap.before)
        if data is None:
            raise RestoreRefused(f"call {call_id} kept no content of {rel!r} (it was over the "
                                 "snapshot limit)")
        atomic_write(ctx.workspace, rel, data, ctx=ctx, suffixes=None, snapshot=now)
        return ToolResult({"path": rel, "bytes": len(data), "sha256": snap.before.sha256,
                           "forced": changed},
                          summary=f"restored {rel} as it was before call {call_id} "
                                  f"({len(data)} bytes)")

    return restore
