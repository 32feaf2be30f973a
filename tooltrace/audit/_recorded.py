"""Is a call id already in the trail? The look-up that lets a registry refuse a caller-supplied
call id that an earlier process recorded.

A call id is an identity: the registry refuses an id it remembers (its own recent calls and
caller-supplied ids), and asks the trail about the ids it cannot vouch for. This module answers
without DuckDB for the segments and without parsing a line that does not match:

- **Segments** (live and sealed): a record's line starts with ``{"k":"c","call_id":"<id>"``
  (a call) or ``{"k":"i","call_id":"<id>"`` (a strict-mode intent) right after a newline; the
  line format has no other place where a newline is followed by those bytes (JSON text escapes
  its newlines, and a nested object is never at the start of a line). Each candidate file is
  searched as one memory map. For a UUIDv7 id, whose first 48 bits are the milliseconds it was
  made, a segment last written more than ``skew_s`` (``CLOCK_SKEW_S``) before that time cannot
  hold it and is skipped; other UUIDs have no time and every segment is searched.
- **Parquet** (compacted): only the files whose recorded call-id range holds the id are read,
  through DuckDB, which skips every row group whose min/max excludes it.

What it cannot see: a record still in another process's write buffer (a call that has just
ended elsewhere). Readers never merge two calls with one id (``DuplicateCallId``).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from .._ids import CLOCK_SKEW_S, id_time_ms
from ._manifest import read_manifest
from ._segments import list_segments, segment_name

__all__ = ["recorded"]

_KINDS = (b'\n{"k":"c","call_id":"', b'\n{"k":"i","call_id":"')


def recorded(adir: Path, call_id: str, *, skew_s: float = CLOCK_SKEW_S) -> bool:
    """Whether the trail under ``adir`` (``<home>/audit``) holds a call or an intent with
    ``call_id`` (a lowercase UUID string).

    Raises ``OSError`` when a segment or Parquet file cannot be read: the answer is then
    unknown, and the caller decides (the registry refuses the call).
    """
    t_ms = id_time_ms(call_id)
    oldest_s = None if t_ms is None else t_ms / 1000 - skew_s
    needles = [k + call_id.encode("ascii") + b'"' for k in _KINDS]
    for info in list_segments(adir):
        path = info.path
        try:
            if _holds(path, needles, oldest_s):
                return True
        except FileNotFoundError:
            # Sealed (renamed) between the listing and the search: look under its new name.
            # Gone altogether means pruned after compaction: its rows are in Parquet.
            if not info.live:
                continue
            try:
                if _holds(path.with_name(segment_name(info.writer, info.n, live=False)),
                          needles, oldest_s):
                    return True
            except FileNotFoundError:
                continue
    return _in_parquet(adir, call_id)


def _holds(path: Path, needles: list[bytes], oldest_s: float | None) -> bool:
    """Does the segment at ``path`` hold one of ``needles``? (Skipped when last written
    before ``oldest_s``.)"""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_size == 0 or (oldest_s is not None and st.st_mtime < oldest_s):
            return False
        with mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ) as m:
            return any(m.find(n) >= 0 for n in needles)
    finally:
        os.close(fd)


def _in_parquet(adir: Path, call_id: str) -> bool:
    """Does a compacted file whose call-id range holds ``call_id`` have a row for it?"""
    manifest = read_manifest(adir)
    files = manifest.get("files") or {}
    ranges = manifest.get("ranges") or {}
    paths: list[str] = []
    for table in ("calls", "intents"):
        for rel in files.get(table, []):
            r = ranges.get(rel) if isinstance(ranges, dict) else None
            if (isinstance(r, list) and len(r) == 2 and isinstance(r[0], str)
                    and isinstance(r[1], str) and not r[0] <= call_id <= r[1]):
                continue
            path = adir / rel
            if path.exists():
                paths.append(str(path))
    if not paths:
        return False
    import duckdb

    con = duckdb.connect(config={"threads": 1})
    try:
        row = con.execute(
            "SELECT 1 FROM read_parquet($paths, union_by_name = true) WHERE call_id = $c LIMIT 1",
            {"paths": paths, "c": call_id},
        ).fetchone()
    except duckdb.Error as exc:  # damaged or unreadable: the answer is unknown
        raise OSError(f"compacted audit file unreadable: {exc}") from None
    finally:
        con.close()
    return row is not None
