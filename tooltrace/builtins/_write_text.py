"""``write_text``: write a ``.txt`` file inside the workspace, atomically.

The path goes through the workspace policy twice: the registry's path scope check before the
call, and again here (with the ``.txt`` suffix rule) right before opening. The new content is
written to a temporary file in the same directory and renamed over the target; every operation
is relative to a directory descriptor reached by walking from the workspace root with
``O_NOFOLLOW``, so a component swapped for a symlink in between makes the write fail instead of
escaping. The sha256 of the content before (``None`` for a new file) and after goes into the
execute step's detail, so the audit trail shows exactly what changed. Before it runs, the
registry snapshots the file (``writes``); the write goes ahead only if it replaces that very file
(same device and inode, same content; no file if there was none).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from typing import Annotated

from ..model import Capability, Effect, ToolResult, tool
from ..policy import PathPolicyError, Workspace
from ..runtime import CallContext
from ..snapshots import FileSnapshot

__all__ = ["MAX_WRITE_BYTES", "write_text"]

#: Largest content ``write_text`` accepts (UTF-8 bytes).
MAX_WRITE_BYTES = 8 * 1024 * 1024
#: Largest existing file whose digest is taken before it is replaced.
_MAX_HASH_BYTES = 256 * 1024 * 1024

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class ContentMismatchError(ValueError):
    """The file's current sha256 is not the one the caller expected; nothing was written."""


def _digest_existing(
    dfd: int, name: str, shown: str
) -> tuple[str | None, int | None, tuple[int, int]]:
    """(sha256, mode, (st_dev, st_ino)) of the current file, or (None, None, (0, 0)) if there
    is none."""
    try:
        fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK, dir_fd=dfd)
    except FileNotFoundError:
        return None, None, (0, 0)
    except OSError as exc:
        # ELOOP: the final component became a symlink after the policy resolved it.
        if exc.errno == 40:
            raise PathPolicyError("symlink_race", f"{shown} changed while being opened") from None
        raise PathPolicyError("invalid", f"{shown} cannot be opened ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PathPolicyError("not_regular", f"{shown} is not a regular file")
        if st.st_nlink > 1:
            # Replacing one name of a hard-linked file would silently fork its content.
            raise PathPolicyError("hardlink", f"{shown} has more than one hard link")
        if st.st_size > _MAX_HASH_BYTES:
            raise PathPolicyError("too_large", f"{shown} is too large to replace")
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest(), stat.S_IMODE(st.st_mode), (st.st_dev, st.st_ino)
    finally:
        os.close(fd)


def atomic_write(
    workspace: Workspace,
    user_path: str,
    data: bytes,
    *,
    ctx: CallContext | None = None,
    expected_sha256: str | None = None,
    suffixes: tuple[str, ...] | None = (".txt",),
    snapshot: FileSnapshot | None = None,
) -> tuple[str, str | None, str]:
    """Atomically replace (or create) a file (``.txt`` unless ``suffixes`` says otherwise);
    return (relative path, sha before, after).

    ``ctx`` (if given) is checked right before the rename, so a call that is past its deadline
    or cancelled leaves the file untouched and confirms it stopped. ``snapshot`` (what the
    registry kept of the file before the call) must describe the very file being replaced:
    the same file object, the same content, or nothing is written.
    """
    rp = workspace.resolve(user_path, must_exist=False, allowed_suffixes=suffixes)
    dfd, name = workspace.open_parent(rp)
    shown = repr(rp.relative[-60:])
    try:
        before, mode, ident = _digest_existing(dfd, name, shown)
        if expected_sha256 is not None and expected_sha256.lower() != (before or ""):
            raise ContentMismatchError(
                f"{shown} does not have the expected content (sha256 mismatch); nothing written")
        if snapshot is not None and not _is_snapshotted(snapshot, rp.relative, before, ident):
            raise ContentMismatchError(
                f"{shown} changed after it was snapshotted; nothing written")
        tmp = f".{name[:80]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                     0o644 if mode is None else mode, dir_fd=dfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                os.fsync(fd)
            finally:
                os.close(fd)
            if ctx is not None:
                ctx.check()
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        with contextlib.suppress(OSError):
            os.fsync(dfd)  # make the rename itself durable
    finally:
        os.close(dfd)
    return rp.relative, before, hashlib.sha256(data).hexdigest()


def _is_snapshotted(
    snap: FileSnapshot, relative: str, sha: str | None, ident: tuple[int, int]
) -> bool:
    """Whether the file about to be replaced is the one the registry snapshotted."""
    if snap.path != relative:
        return False
    if not snap.before.exists:
        return sha is None
    if (snap.device, snap.inode) != ident:
        return False
    return not snap.before.kept or snap.before.sha256 == sha


@tool(
    "write_text",
    capability=Capability.WRITE,
    effect=Effect.LOCAL,
    timeout_s=10.0,
    source="builtin",
    path_params=("path",),
    writes=("path",),
    group="files",
)
def write_text(
    ctx: CallContext,
    path: Annotated[str, "Workspace-relative path of a .txt file (its directory must exist)"],
    text: Annotated[str, "The complete new content (UTF-8)"],
    expected_sha256: Annotated[
        str | None, "Only write if the file's current sha256 is this (optimistic locking)"
    ] = None,
) -> ToolResult:
    """Write a .txt file in the workspace atomically; the step records sha256 before and after."""
    data = text.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise ValueError(f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}")
    snap = ctx.snapshots.get("path") if ctx.snapshots else None
    rel, before, after = atomic_write(ctx.workspace, path, data, ctx=ctx,
                                      expected_sha256=expected_sha256, snapshot=snap)
    ctx.set_detail("resolved", rel)
    ctx.set_detail("sha256_before", before)
    ctx.set_detail("sha256_after", after)
    ctx.set_detail("bytes", len(data))
    verb = "created" if before is None else ("left unchanged" if before == after else "replaced")
    return ToolResult(
        {"path": rel, "bytes": len(data), "sha256_before": before, "sha256_after": after,
         "created": before is None},
        summary=f"{verb} {rel} ({len(data)} bytes)",
    )
