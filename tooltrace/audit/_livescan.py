"""The records not compacted yet, read from their segments only as far as a question needs.

Compaction takes sealed segments into Parquet in the background; what it has not reached yet
(every live segment, and sealed ones it has still to take) is read here, from the segment files,
a few MiB at a time and never whole, so a reader's memory does not grow with the trail:

- ``LiveSegments.matching(lo, hi_excl)``: the lines of the calls whose id lies in
  ``[lo, hi_excl)`` (a call, its late steps, its strict-mode intent, its approvals). The bytes
  are searched for the id (or for the prefix both ends of the range share); only the lines that
  hold it are parsed (a sealed segment through memory maps, a live one read). A record is
  written after its call id was made, so for a time-ordered id (UUIDv7) a segment last written
  more than ``CLOCK_SKEW_S`` before the id's time is skipped, as ``recorded`` skips it.
- ``LiveSegments.pieces()``: every complete line, parsed one piece of a segment at a time, for
  the DuckDB tables of the rows not compacted yet that DuckDB cannot parse itself
  (``_livetables``); it notes what is wrong on the way (``issues``: torn tails of dead
  writers, lines that are not records).

Only complete lines are read: bytes after a live writer's last newline are in flight, after a
dead writer's a torn record (reported, never read). A live segment sealed (renamed) between
listing and reading is read under its sealed name; one pruned meanwhile is skipped (its rows
are in Parquet).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from typing import Any

import orjson

from ._segments import ParsedSegment, SegmentInfo, parse_lines, segment_name, writer_alive
from ._storerecords import ReadIssue
from ._tables import build_columns

__all__ = ["PIECE", "LiveSegments", "Segment", "torn"]

#: Bytes read from a segment at a time.
PIECE = 4 * 1024 * 1024
#: ``tooltrace._ids.CLOCK_SKEW_S``, repeated so the reader does not load the id generator.
_SKEW_S = 300.0
_RECORD_KINDS = frozenset({"c", "i", "s", "a"})
# Where a record line's own call id starts when the line is laid out as the writer lays it
# out ({"k":"c","call_id":"...): a hit there needs no parsing to know whose line it is.
_OWN_ID = len(b'{"k":"c","call_id":"')
_CANONICAL = (b'{"k":"c","call_id":"', b'{"k":"i","call_id":"', b'{"k":"s","call_id":"')


def _time_floor_s(lo: str) -> float | None:
    """The earliest time (Unix seconds) a call with an id ``>= lo`` could have been made at,
    when ``lo`` says its ids are UUIDv7 (its version digit is there and is 7); else None."""
    if len(lo) < 15 or lo[14] != "7" or lo[8] != "-":
        return None
    try:
        return int(lo[:8] + lo[9:13], 16) / 1000.0
    except ValueError:
        return None


def torn(segment: str, line: int, size: int) -> ReadIssue:
    """What a reader reports of the bytes a dead writer left after its last complete line."""
    return ReadIssue(segment, line, f"torn record ({size} bytes) after the last complete line:"
                     " the writer stopped mid-write; it is set aside, not read")


def _shared_prefix(lo: str, hi_excl: str) -> str:
    n = 0
    for a, b in zip(lo, hi_excl, strict=False):
        if a != b:
            break
        n += 1
    return lo[:n]


class Segment:
    """One segment file, opened for reading (under its sealed name if it was sealed since it
    was listed); ``fd`` is None when it is gone."""

    def __init__(self, info: SegmentInfo) -> None:
        self.alive = info.live and writer_alive(info.path)
        self.fd: int | None = None
        self.size = 0
        self.mtime = 0.0
        self.tail = b""
        self.lines = 0
        # (offset, newlines before it) as far as ``line_at`` counted.
        self._counted = (0, 0)
        try:
            self.fd = os.open(info.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            if info.live:
                sealed = info.path.with_name(segment_name(info.writer, info.n, live=False))
                info = SegmentInfo(sealed, info.writer, info.n, False)
                self.alive = False
                with contextlib.suppress(FileNotFoundError):
                    self.fd = os.open(sealed, os.O_RDONLY | os.O_CLOEXEC)
        self.info = info
        if self.fd is not None:
            st = os.fstat(self.fd)
            self.size, self.mtime = st.st_size, st.st_mtime

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def pieces(self, count: bool = True) -> Iterator[tuple[int, int, bytes, int]]:
        """(lines before the piece, where it starts in the file, its bytes, where its whole
        lines end), up to the size the file had when opened; then ``tail`` is what follows the
        last newline and ``lines`` how many whole lines there were. Each piece starts at a
        line's start (what follows its last newline is read again with the next one, rather
        than copied onto it). Not ``count``: lines are not counted (-1; ``line_at`` counts
        them for the few lines a search finds)."""
        self.tail, self.lines = b"", 0
        fd = self.fd
        if fd is None:
            return
        pos, lines, want = 0, 0, PIECE
        while pos < self.size:
            buf = os.pread(fd, min(want, self.size - pos), pos)
            if not buf:
                break
            end = buf.rfind(b"\n") + 1
            if end == 0:
                if pos + len(buf) >= self.size:
                    break  # no newline to the end: the tail
                want *= 2  # a line longer than a piece: read on
                continue
            want = PIECE
            yield (lines if count else -1), pos, buf, end
            if count:
                lines += buf.count(b"\n", 0, end)
            pos += end
        self.tail = os.pread(fd, self.size - pos, pos) if pos < self.size else b""
        self.lines = lines

    def windows(self) -> Iterator[tuple[int, bytes | mmap.mmap, int, int]]:
        """For a search: (where the window starts in the file, its bytes, where its first
        whole line starts in it, where its whole lines end), up to the size the file had when
        opened. A sealed segment never changes and is searched through memory maps of
        ``PIECE`` bytes at a time (nothing copied; one map at a time, so memory stays
        bounded); a live one is read (a writer that undoes a failed write truncates its file,
        and a map past the end would kill the reader)."""
        if self.info.live:
            for _n, at, buf, end in self.pieces(count=False):
                yield at, buf, 0, end
            return
        fd = self.fd
        if fd is None:
            return
        pos, want, grain = 0, PIECE, mmap.ALLOCATIONGRANULARITY
        while pos < self.size:
            base = pos - pos % grain
            mm = mmap.mmap(fd, min(pos - base + want, self.size - base),
                           access=mmap.ACCESS_READ, offset=base)
            try:
                end = mm.rfind(b"\n", pos - base) + 1
                if end == 0:
                    if base + len(mm) >= self.size:
                        break  # no newline to the end: the tail
                    want *= 2  # a line longer than a window: map more
                    continue
                want = PIECE
                yield base, mm, pos - base, end
            finally:
                mm.close()
            pos = base + end

    def line_at(self, offset: int) -> int:
        """The number of the line that starts at byte ``offset`` (counted on from the last
        offset asked for, which must not be later)."""
        assert self.fd is not None
        at, lines = self._counted
        while at < offset:
            buf = os.pread(self.fd, min(PIECE, offset - at), at)
            if not buf:
                break
            lines += buf.count(b"\n")
            at += len(buf)
        self._counted = (at, lines)
        return lines + 1


class LiveSegments:
    """The segments not compacted yet (``infos``), read on demand."""

    def __init__(self, infos: list[SegmentInfo]) -> None:
        self.infos = infos
        #: What reading every line found wrong; None until ``pieces`` has read them all.
        self.issues: list[ReadIssue] | None = None if infos else []
        self._cache: dict[tuple[str, str, int | None], dict[str, dict[str, list[Any]]]] = {}

    def __bool__(self) -> bool:
        return bool(self.infos)

    # -- one call, or one range of call ids --------------------------------------------------

    def matching(self, lo: str, hi_excl: str, ids: int | None = None
                 ) -> dict[str, dict[str, list[Any]]]:
        """The rows (``build_columns``) of every record line whose call id lies in
        ``[lo, hi_excl)``; ``ids``: stop once that many distinct call ids were found (enough to
        name the first matches of a prefix)."""
        key = (lo, hi_excl, ids)
        got = self._cache.get(key)
        if got is None:
            if len(self._cache) >= 8:
                self._cache.clear()
            got = self._cache[key] = build_columns(self._search(lo, hi_excl, ids))
        return got

    def _search(self, lo: str, hi_excl: str, ids: int | None) -> list[ParsedSegment]:
        needle = b'"' + _shared_prefix(lo, hi_excl).encode()
        floor = _time_floor_s(lo)
        oldest = None if floor is None else floor - _SKEW_S
        found: list[ParsedSegment] = []
        seen: set[str] = set()
        for info in self.infos:
            seg = Segment(info)
            try:
                if seg.fd is None or (oldest is not None and seg.mtime < oldest):
                    continue
                lines = self._hits(seg, needle, lo, hi_excl, seen, ids)
            finally:
                seg.close()
            if lines:
                found.append(ParsedSegment(seg.info, lines, b"", 0, [], seg.alive))
            if ids is not None and len(seen) >= ids:
                break
        return found

    @staticmethod
    def _hits(seg: Segment, needle: bytes, lo: str, hi_excl: str, seen: set[str],
              ids: int | None) -> list[tuple[int, dict[str, Any], bytes]]:
        out: list[tuple[int, dict[str, Any], bytes]] = []
        loads = orjson.loads
        for at, data, first, stop in seg.windows():
            i = data.find(needle, first, stop)
            while i >= 0:
                start = max(first, data.rfind(b"\n", first, i) + 1)
                end = data.find(b"\n", i)
                raw = data[start:end]
                if raw.startswith(_CANONICAL):
                    # The line's own id is at a known place: a line that only names the id
                    # elsewhere (a nested call's parent) is passed over unparsed.
                    own = raw[_OWN_ID:raw.find(b'"', _OWN_ID)].decode("utf-8", "replace")
                    if not lo <= own < hi_excl:
                        i = data.find(needle, end, stop)
                        continue
                try:
                    obj = loads(raw)
                except orjson.JSONDecodeError:
                    obj = None
                if (isinstance(obj, dict) and obj.get("k") in _RECORD_KINDS
                        and isinstance(obj.get("call_id"), str) and lo <= obj["call_id"] < hi_excl):
                    out.append((seg.line_at(at + start), obj, raw))
                    seen.add(obj["call_id"])
                    if ids is not None and len(seen) >= ids:
                        return out
                i = data.find(needle, end, stop)
        return out

    # -- every line ---------------------------------------------------------------------------

    def pieces(self, infos: list[SegmentInfo] | None = None, *, note_issues: bool = True,
               found: list[ReadIssue] | None = None) -> Iterator[ParsedSegment]:
        """Every complete line of every segment (of ``infos``), one parsed piece at a time;
        once all were read, fills ``issues`` with what they found (``note_issues``: the other
        segments were read elsewhere, which ``found`` what it lists)."""
        issues: list[ReadIssue] = list(found or ())
        for info in self.infos if infos is None else infos:
            seg = Segment(info)
            try:
                for before, _at, data, stop in seg.pieces():
                    whole = data.split(b"\n", data.count(b"\n", 0, stop))[:-1]
                    lines, bad = parse_lines(whole, before + 1)
                    issues.extend(ReadIssue(seg.info.name, no, "line is not a valid record")
                                  for no, _raw in bad)
                    yield ParsedSegment(seg.info, lines, b"", 0, bad, seg.alive)
                if seg.tail and not seg.alive:
                    issues.append(torn(seg.info.name, seg.lines + 1, len(seg.tail)))
            finally:
                seg.close()
        if note_issues:
            self.issues = issues
