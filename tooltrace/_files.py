"""Files written whole: created or replaced complete or not at all, and their directory entries
synced."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["create_whole", "fsync_path", "replace_whole", "replace_written", "write_all"]


def create_whole(path: Path, data: bytes, mode: int) -> bool:
    """Create ``path`` holding ``data`` unless it exists; True if this call made it.

    The data goes to a private temporary name beside it and is synced, then hard-linked to its
    name: the link either makes the file complete or fails because another process (or thread)
    made it first, whose file then stands. Concurrent creators therefore agree on one content.
    """
    tmp = _aside(path)
    try:
        _write_new(tmp, data, mode, sync=True)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)


def replace_whole(path: Path, data: bytes, *, mode: int = 0o644, sync: bool = True) -> None:
    """Make ``path`` hold ``data``: a reader sees the old file or the new one, never part of one.

    The data goes to a private temporary name beside it, synced unless ``sync`` is False (a
    file that need not outlive a crash), then renamed over ``path``; on any failure the
    temporary file is removed and ``path`` is left as it was. The rename itself is durable once
    the directory is synced (``fsync_path(path.parent)``), which is the caller's to decide.
    """
    replace_written(path, lambda tmp: _write_new(tmp, data, mode, sync=sync), sync=False)


def replace_written(path: Path, write: Callable[[Path], object], *, sync: bool = True) -> None:
    """``replace_whole`` for a file another writer makes (Parquet, DuckDB's ``COPY``):
    ``write`` makes the file at the temporary path it is given, which is then synced (unless
    ``sync`` is False) and renamed over ``path``."""
    tmp = _aside(path)
    try:
        write(tmp)
        if sync:
            fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may take only part of it)."""
    with memoryview(data) as view:
        off = 0
        while off < len(view):
            off += os.write(fd, view[off:])


def fsync_path(path: Path) -> None:
    """Make a file's data, or a directory's entries (a file created, renamed or removed in
    it), durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _aside(path: Path) -> Path:
    """A temporary name beside ``path`` that no other process or thread picks."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}."
                          f"{os.urandom(4).hex()}.tmp")


def _write_new(path: Path, data: bytes, mode: int, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
