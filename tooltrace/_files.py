"""Files written whole: created complete or not at all, and their directory entries synced."""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["create_whole", "fsync_path", "write_all"]


def create_whole(path: Path, data: bytes, mode: int) -> bool:
    """Create ``path`` holding ``data`` unless it exists; True if this call made it.

    The data goes to a private temporary name beside it and is synced, then hard-linked to its
    name: the link either makes the file complete or fails because another process (or thread)
    made it first, whose file then stands. Concurrent creators therefore agree on one content.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}."
                         f"{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def write_all(fd: int, data: bytes) -> None:
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
