"""Anchors: every signed checkpoint head, kept where the trail can be checked against it.

A checkpoint or seal line signed by the home's key (``_signing``) vouches for its writer's
whole chain up to it: writer, segment, seq, how many records the segment held by then, the
chain hash before it (``head``), when, the key id and the signature. The writer appends that
head, the *anchor*, to ``<home>/anchors/anchors.jsonl`` once the checkpoint is on disk, and
``tooltrace audit ship-anchors`` copies new anchors to object storage under a COMPLIANCE Object
Lock, where nobody on the host can rewrite or delete them.

This module writes the anchors file; ``_anchorcheck`` reads it and checks a trail against it.
An anchor line is the signed object itself (``_signing.line_payload``'s fields) plus ``sig``,
as canonical JSON; the file takes appends under an exclusive ``flock``, and an append cut short
by a crash is cut off before the next one goes on.
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from .._files import fsync_path, write_all
from ._manifest import last_line_end

__all__ = ["AnchorLog", "PendingAnchors", "anchors_path"]

_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def anchors_path(home: Path) -> Path:
    """``<home>/anchors/anchors.jsonl``."""
    return home / "anchors" / "anchors.jsonl"


class AnchorLog:
    """Appends signed checkpoint heads to an anchors file (crash-safe, many processes)."""

    __slots__ = ("errors", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        #: Appends that failed (the checkpoints stay in the trail; only their anchors are lost).
        self.errors = 0

    def append(self, anchors: Sequence[Mapping[str, Any]], *, sync: bool) -> None:
        """Append ``anchors``; raises ``OSError`` when the disk refuses (callers that must not
        fail use ``try_append``)."""
        if not anchors:
            return
        data = b"".join(orjson.dumps(dict(a), option=_OPTS) + b"\n" for a in anchors)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            good = last_line_end(fd, size)
            if good < size:  # an append cut short by a crash: never acknowledged, cut off
                os.ftruncate(fd, good)
            write_all(fd, data)
            if sync:
                os.fsync(fd)
                if size == 0:  # a new file: its directory entry too
                    fsync_path(self.path.parent)
        finally:
            os.close(fd)  # drops the lock

    def try_append(self, anchors: Sequence[Mapping[str, Any]], *, sync: bool) -> bool:
        """``append``, counting a failure in ``errors`` instead of raising."""
        try:
            self.append(anchors, sync=sync)
        except OSError:
            self.errors += 1
            return False
        return True


class PendingAnchors:
    """A writer's signed checkpoint heads whose lines are written but maybe not yet on disk:
    they go to the anchors file once the lines are synced (an anchor must never name a line a
    crash can still take), or are dropped with the lines when a write is rolled back."""

    __slots__ = ("_heads", "_log")

    def __init__(self, log: AnchorLog | None) -> None:
        self._log = log
        self._heads: list[Mapping[str, Any]] = []

    def add(self, anchor: Mapping[str, Any]) -> None:
        """Hold the anchor of a checkpoint just written."""
        self._heads.append(anchor)

    def drop_after(self, seq: int) -> None:
        """Forget the anchors of lines after ``seq`` (rolled back)."""
        self._heads = [a for a in self._heads if a["seq"] <= seq]

    def flush(self, *, sync: bool) -> None:
        """Append the held anchors (their lines are on disk now); never raises."""
        heads, self._heads = self._heads, []
        if heads and self._log is not None:
            self._log.try_append(heads, sync=sync)
