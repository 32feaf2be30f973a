"""Where segments live, how to tell a live writer from a dead one, and how to read a segment.

Layout under ``<home>/audit/``::

    segments/<writer>.<n>.live.jsonl   being appended to by one writer process (holds a flock)
    segments/<writer>.<n>.jsonl        sealed: complete, ends with a ``seal`` line
    segments/.<writer>.<n>.tmp         being opened: header written, not yet in view
    digest.jsonl                       every writer and segment, and what became of each
    quarantine/<segment>.<offset>.torn torn bytes set aside from a crashed writer's segment
    quarantine/<segment>.<offset>.json what was set aside, when and why
    parquet/{calls,steps,intents,resolutions}/<id>.parquet   compacted, sorted by call id
    parquet/manifest.json              which segments and Parquet files compaction produced

A writer holds an exclusive ``flock`` on its live segment for as long as it lives; the kernel
releases it when the process dies (even by SIGKILL), so "can I take the lock?" is an exact
liveness test that costs the writer nothing on its hot path.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "ParsedSegment",
    "SegmentInfo",
    "audit_dir",
    "list_opening",
    "list_segments",
    "locate_segment",
    "opening_name",
    "read_segment",
    "segment_name",
    "writer_alive",
]

_NAME = re.compile(r"^(?P<writer>[A-Za-z0-9_-]+)\.(?P<n>\d{6})(?P<live>\.live)?\.jsonl$")
_OPENING = re.compile(r"^\.(?P<writer>[A-Za-z0-9_-]+)\.(?P<n>\d{6})\.tmp$")


def audit_dir(home: Path) -> Path:
    """The audit directory inside a tooltrace home."""
    return home / "audit"


def segment_name(writer: str, n: int, *, live: bool) -> str:
    """File name of segment ``n`` of ``writer``."""
    return f"{writer}.{n:06d}{'.live' if live else ''}.jsonl"


def opening_name(writer: str, n: int) -> str:
    """File name of segment ``n`` of ``writer`` while it is being opened (out of view)."""
    return f".{writer}.{n:06d}.tmp"


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment file found on disk."""

    path: Path
    writer: str
    n: int
    live: bool

    @property
    def name(self) -> str:
        """The file name (what reports print: never a full host path)."""
        return self.path.name


def list_segments(adir: Path) -> list[SegmentInfo]:
    """All segment files, ordered by writer then segment number."""
    out: list[SegmentInfo] = []
    try:
        names = os.listdir(adir / "segments")
    except FileNotFoundError:
        return out
    for name in names:
        m = _NAME.match(name)
        if m is None:
            continue
        out.append(
            SegmentInfo(adir / "segments" / name, m["writer"], int(m["n"]), m["live"] is not None)
        )
    out.sort(key=lambda s: (s.writer, s.n))
    return out


def list_opening(adir: Path) -> list[SegmentInfo]:
    """Segments being opened (``live`` is True: their writer holds the lock while it lives)."""
    try:
        names = os.listdir(adir / "segments")
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = _OPENING.match(name)
        if m is not None:
            out.append(SegmentInfo(adir / "segments" / name, m["writer"], int(m["n"]), True))
    out.sort(key=lambda s: (s.writer, s.n))
    return out


def locate_segment(adir: Path, writer: str, n: int) -> tuple[SegmentInfo | None, bool]:
    """Find segment ``n`` of ``writer`` by name: (the segment, or None; True if it is still
    being opened). The names are tried in the order a segment moves through them, so one
    renamed meanwhile is found under its next name."""
    d = adir / "segments"
    if (d / opening_name(writer, n)).exists():
        return SegmentInfo(d / opening_name(writer, n), writer, n, True), True
    for live in (True, False):
        path = d / segment_name(writer, n, live=live)
        if path.exists():
            return SegmentInfo(path, writer, n, live), False
    return None, False


@contextlib.contextmanager
def locked_if_dead(path: Path) -> Iterator[int | None]:
    """Yield an fd holding the segment's exclusive lock if its writer is dead, else None."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield fd
    finally:
        os.close(fd)


def writer_alive(path: Path) -> bool:
    """True while the process appending to this live segment is running."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe lock if we took it
    return False


@dataclass(slots=True)
class ParsedSegment:
    """The complete lines of one segment, and what is wrong with it.

    ``lines`` holds (line number, parsed object, raw bytes) for every complete line.
    ``tail`` is the bytes after the last newline: in-flight data for a live writer, a torn
    record for a dead one. ``bad`` lists (line number, raw bytes) of complete lines that are
    not valid JSON objects.
    """

    info: SegmentInfo
    lines: list[tuple[int, dict[str, Any], bytes]]
    tail: bytes
    tail_offset: int
    bad: list[tuple[int, bytes]]
    alive: bool

    @property
    def last_hash(self) -> str | None:
        """The chain hash of the last complete line (None without one): where the next
        segment's chain goes on, as the digest and the archive's ledger record it."""
        if not self.lines:
            return None
        from ._format import split_hash  # the writer's encoders load only when needed

        sp = split_hash(self.lines[-1][2])
        return sp[1] if sp else None


def read_segment(info: SegmentInfo) -> ParsedSegment | None:
    """Read one segment; None if it vanished (pruned by compaction since it was listed).

    A live segment sealed (renamed) between listing and reading is read under its new name.
    """
    alive = info.live and writer_alive(info.path)
    try:
        data = info.path.read_bytes()
    except FileNotFoundError:
        if not info.live:
            return None
        sealed = info.path.with_name(segment_name(info.writer, info.n, live=False))
        info = SegmentInfo(sealed, info.writer, info.n, False)
        alive = False
        try:
            data = sealed.read_bytes()
        except FileNotFoundError:
            return None
    end = data.rfind(b"\n") + 1
    lines, bad = parse_lines(data[:end].split(b"\n")[:-1], 1)
    return ParsedSegment(info, lines, data[end:], end, bad, alive)


def parse_lines(
    raws: list[bytes], first: int
) -> tuple[list[tuple[int, dict[str, Any], bytes]], list[tuple[int, bytes]]]:
    """Complete lines numbered from ``first``, parsed: (line, object, raw) of each record,
    and (line, raw) of each line that is no JSON object."""
    lines: list[tuple[int, dict[str, Any], bytes]] = []
    bad: list[tuple[int, bytes]] = []
    loads = orjson.loads
    for no, raw in enumerate(raws, start=first):
        try:
            obj = loads(raw)
        except orjson.JSONDecodeError:
            bad.append((no, raw))
            continue
        if isinstance(obj, dict):
            lines.append((no, obj, raw))
        else:
            bad.append((no, raw))
    return lines, bad
