"""Follow a home's audit trail as it grows: the lines its writers append (calls as they finish,
late steps, strict-mode intents) and the live progress files of calls in flight. What
``tooltrace tail`` reads; it opens no database and talks to no server.

``Follower.poll()`` reads each segment from where the last poll stopped (only whole lines; a
segment sealed meanwhile is found under its new name by writer and number) and the live files
of processes still running.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ._live import read_live
from ._segments import audit_dir, list_segments

__all__ = ["Follower", "Poll"]

_KINDS = frozenset({"c", "s", "i"})
#: Most bytes read from one segment per poll (the rest waits for the next poll).
_MAX_READ = 8 * 1024 * 1024


@dataclass(slots=True)
class Poll:
    """What one poll found: new lines (parsed, in each writer's order) and the calls in flight
    (by call id)."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    inflight: dict[str, dict[str, Any]] = field(default_factory=dict)


class Follower:
    """Reads what is new in a home's audit trail at each ``poll``.

    ``from_start``: the first poll returns every line already there; otherwise only lines
    appended after the follower was made. ``done``: segments, by (writer, number), whose lines
    are never returned (those already read elsewhere, such as the compacted ones). ``kinds``: the
    line kinds returned (default: calls, late steps and intents; add ``a`` for approvals).
    """

    def __init__(self, home: Path, *, from_start: bool = False,
                 done: Iterable[tuple[str, int]] = (), kinds: Iterable[str] = _KINDS) -> None:
        self.adir = audit_dir(home)
        self._kinds = frozenset(kinds)
        self._offsets: dict[tuple[str, int], int] = dict.fromkeys(done, sys.maxsize)
        if not from_start:
            for info in list_segments(self.adir):
                if (info.writer, info.n) in self._offsets:
                    continue
                try:
                    self._offsets[(info.writer, info.n)] = info.path.stat().st_size
                except FileNotFoundError:
                    continue  # sealed meanwhile: read from the start under its new name

    def reached(self, sizes: Mapping[tuple[str, int], int]) -> bool:
        """Whether each segment in ``sizes`` (by writer and number) has been read up to that
        many bytes (a size taken when a snapshot began, say)."""
        return all(self._offsets.get(key, 0) >= size for key, size in sizes.items())

    def poll(self) -> Poll:
        """The lines appended since the last poll and the calls in flight now."""
        out = Poll()
        for info in list_segments(self.adir):
            key = (info.writer, info.n)
            start = self._offsets.get(key, 0)
            try:
                with open(info.path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if size <= start:
                        continue
                    f.seek(start)
                    data = f.read(min(size - start, _MAX_READ))
            except FileNotFoundError:
                continue  # renamed (sealed) between the listing and the open: next poll
            end = data.rfind(b"\n")
            if end < 0:
                continue  # a line is still being written
            self._offsets[key] = start + end + 1
            for raw in data[: end + 1].splitlines():
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and obj.get("k") in self._kinds:
                    out.lines.append(obj)
        for c in read_live(self.adir):
            out.inflight[c["call_id"]] = c
        return out
