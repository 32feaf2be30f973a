"""Finding one call in the trail: its rows by id (``AuditStore.call``), read without DuckDB where
the lookup files and the segment lines can answer (``LookupFiles``), and whether a call id is
already recorded (``recorded``).

Each table is read from the compacted files whose recorded call-id range holds the id plus the
rows not compacted yet: from those files' lookup files and the segment lines that hold the id
when they can answer (``LookupFiles``, no DuckDB), else with one plain statement
(``read_parquet`` of those files, the stored columns by name, filtered on the id, and the
segment lines that hold the id, copied into DuckDB). Steps are ordered and the latest
resolution picked here, in Python, the same way for both. The row of ``tool_calls`` (its final
``outcome``, when and how a late step resolved it) is put together here from the stored row and
the call's latest resolution, not by a join in SQL: DuckDB plans and runs a plain scan of one
file faster than the same scan under ``UNION ALL BY NAME``, a join and JSON casts, and the rows
are the views' rows.

A file compacted before one of the columns existed fails to bind the plain statement; that
table is then read through ``read_by_name`` (the missing column reads as NULL), as the views
do.

``LookupFiles`` reads the rows of one call (or one call-id range) without DuckDB: from the
lookup files beside the compacted Parquet files (``_lookupfile``) and from the segment lines
not compacted yet that hold the id (``_livescan``), as parsed.

Every answer is the one DuckDB would give over the same files: the stored columns in order,
timestamps as naive UTC datetimes, and the rows not compacted yet converted the way the store's
SQL casts them. When that cannot be promised, the answer is None and the caller asks DuckDB: a
Parquet file without a lookup file (a trail compacted before they existed), no audit key to
authenticate one with, a value not compacted yet whose cast only DuckDB can say, or a lookup
file that is not what compaction wrote (``LookupDamaged``: it is then never read again by this
store, and ``warnings`` says so).

``recorded`` says whether a call id is already in the trail: the look-up that lets a registry
refuse a caller-supplied call id that an earlier process recorded.

A call id is an identity: the registry refuses an id it remembers (its own recent calls and
caller-supplied ids), and asks the trail about the ids it cannot vouch for. ``recorded``
answers without DuckDB for the segments and without parsing a line that does not match:

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

import datetime as dt
import mmap
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._ids import CLOCK_SKEW_S, id_time_ms
from ._lookupfile import LookupDamaged, LookupFile, lookup_rel, read_key
from ._manifest import read_manifest
from ._segments import list_segments, segment_name
from ._storerecords import CallDetail, CallNotFound, _one_call
from ._tables import COLUMNS, read_by_name

if TYPE_CHECKING:
    from ._store import AuditStore, _ParquetFile

__all__ = ["LookupFiles", "find_call", "recorded"]


_STORED = {t: [c for c, _k in cols] for t, cols in COLUMNS.items()}
_SELECT = {t: ", ".join(f'"{c}"' for c in names) for t, names in _STORED.items()}
_STEP_KEYS = ["seq", "step", "started_at", "elapsed_ms", "decider", "decision", "detail"]
_INTENT_KEYS = ["call_id", "run_id", "tool", "started_at", "args_redacted", "writer",
                "segment", "line"]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _rows(store: AuditStore, t: str, cols: list[str], cid: str
          ) -> list[tuple[Any, ...]] | None:
    """Rows of table ``t`` for call ``cid`` (columns ``cols``), or None when nothing can hold
    it (no file whose range holds the id and no segment not compacted yet). Read from the
    lookup files and the segment lines when they can answer (``LookupFiles``), else with DuckDB."""
    assert store.files_by_table is not None
    hi = cid + "\x00"
    files = [f for f in store.files_by_table[t] if f.overlaps(cid, hi)]
    paths = [f.path for f in files]
    store.lookup_files.extend(paths)
    live = bool(store.uncompacted)
    if not paths and not live:
        return None
    direct = store.lookups.rows(t, files, cid)
    if direct is not None:
        pick = [_STORED[t].index(c) for c in cols]
        return [tuple(r[i] for i in pick) for r in direct]
    return _duckdb_rows(store, t, cols, cid, paths, live)


def _duckdb_rows(store: AuditStore, t: str, cols: list[str], cid: str, paths: list[str],
                 live: bool) -> list[tuple[Any, ...]]:
    import duckdb

    select = ", ".join(f'"{c}"' for c in cols)
    where = f"WHERE call_id = {_quote(cid)}"
    files = ", ".join(map(_quote, paths))
    parts = []
    if paths:
        opts = ", union_by_name = true" if len(paths) > 1 else ""
        parts.append(f"SELECT {select} FROM read_parquet([{files}]{opts}) {where}")
    if live:
        # Only the segment lines that hold the id, in tables of their own: the lookup does not
        # copy every row not compacted yet into DuckDB.
        store.load_hits(cid, cid + "\x00")
        parts.append(f"SELECT {select} FROM _hit_{t} {where}")
    try:
        return store.connection.execute(" UNION ALL ".join(parts)).fetchall()
    except duckdb.BinderException:  # a file without one of the columns: read them by name
        src = f"read_parquet([{files}], union_by_name = true)"
        by_name = read_by_name(t, src)
        if live:
            by_name += f" UNION ALL SELECT {_SELECT[t]} FROM _hit_{t}"
        return store.connection.execute(f"SELECT {select} FROM ({by_name}) {where}").fetchall()


def _nulls_last(*vals: Any) -> tuple[Any, ...]:
    """A sort key ordering like SQL's ``ORDER BY a, b`` (ascending, NULLs last)."""
    return tuple(x for v in vals for x in (v is None, v if v is not None else 0))


def _call_row(stored: tuple[Any, ...], res: tuple[Any, Any, Any] | None) -> dict[str, Any]:
    """A ``tool_calls`` row: the stored columns plus ``outcome``, ``resolved_at`` and
    ``resolution_summary``, in the view's column order."""
    row = dict(zip(_STORED["calls"], stored, strict=True))
    r_status, r_summary, r_at = res if res is not None else (None, None, None)
    out: dict[str, Any] = {}
    for k, v in row.items():
        out[k] = v
        if k == "status":
            out["outcome"] = r_status if r_status is not None else v
        elif k == "attributes":
            out["resolved_at"] = r_at
            out["resolution_summary"] = r_summary
    return out


def find_call(store: AuditStore, call_id: str, cid: str) -> CallDetail:
    """Everything recorded about the call with the full id ``cid`` (``call_id``: as asked)."""
    store.lookup_files = []
    rec: list[dict[str, Any]] | None = None
    calls = _rows(store, "calls", _STORED["calls"], cid)
    if calls is not None:
        res = None
        if calls:
            # The latest resolution (the view's arg_max by resolved_at).
            late = [r for r in _rows(store, "resolutions", ["status", "summary", "resolved_at"],
                                     cid) or () if r[2] is not None]
            if late:
                res = max(late, key=lambda r: r[2])
        rec = [_call_row(r, res) for r in calls]
    found = _rows(store, "intents", _INTENT_KEYS, cid)
    intent = [dict(zip(_INTENT_KEYS, r, strict=True)) for r in found or ()]
    found = sorted(_rows(store, "steps", _STEP_KEYS, cid) or (),
                   key=lambda r: _nulls_last(r[2], r[0]))  # ORDER BY started_at, seq
    steps = [dict(zip(_STEP_KEYS, r, strict=True)) for r in found]
    if not rec and not intent:
        raise CallNotFound(f"no call with id {call_id[:40]!r}")
    _one_call(cid, rec)
    if intent:
        intent[0]["orphaned"] = not rec
    return CallDetail(cid, rec[0] if rec else None, steps, intent[0] if intent else None)


_EPOCH = dt.datetime(1970, 1, 1)
_INT_LIMITS = {"i32": 2**31, "i64": 2**63}
_UNSET = object()


class _Uncastable(Exception):
    """A value not compacted yet whose SQL cast only DuckDB can say."""


def _cast(kind: str, v: Any) -> Any:
    """``v`` as the store's SQL casts the text of a parsed value of ``kind``."""
    if v is None:
        return None
    if kind == "str":
        if isinstance(v, str):
            return v
    elif kind in _INT_LIMITS:
        lim = _INT_LIMITS[kind]
        if isinstance(v, int) and not isinstance(v, bool) and -lim <= v < lim:
            return v
    elif kind == "f64":
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    elif kind == "bool":
        if isinstance(v, bool):
            return v
    elif kind == "ts" and isinstance(v, int) and not isinstance(v, bool):
        try:
            return _EPOCH + dt.timedelta(microseconds=v)
        except OverflowError:
            pass
    raise _Uncastable


class LookupFiles:
    """The lookup files of one ``AuditStore``, opened on first use, and its segments not
    compacted yet, searched in place."""

    def __init__(self, store: AuditStore) -> None:
        self._store = store
        self._key: Any = _UNSET
        self._open: dict[str, LookupFile] = {}
        self._damaged: set[str] = set()

    def _file(self, t: str, f: _ParquetFile) -> LookupFile | None:
        """The lookup file of ``f``, or None when there is none that can be trusted."""
        if not f.has_lookup or f.rel in self._damaged:
            return None
        got = self._open.get(f.rel)
        if got is not None:
            return got
        if self._key is _UNSET:
            self._key = read_key(self._store.home)
            if self._key is None:
                self._store.warnings.append(
                    "no audit key: the lookup files cannot be authenticated, so the Parquet"
                    " files are read instead (slower)")
        if self._key is None:
            return None
        try:
            got = LookupFile(str(self._store.adir / lookup_rel(f.rel)), f.rel, t, self._key)
        except (OSError, LookupDamaged) as exc:
            self._distrust(f.rel, exc)
            return None
        self._open[f.rel] = got
        return got

    def _distrust(self, rel: str, exc: BaseException) -> None:
        self._damaged.add(rel)
        old = self._open.pop(rel, None)
        if old is not None:
            old.close()
        why = str(exc) if isinstance(exc, LookupDamaged) else f"{rel}: {type(exc).__name__}"
        self._store.warnings.append(
            f"lookup file not trusted ({why}); the Parquet file was read instead."
            " Run `tooltrace verify`.")

    def rows(self, t: str, files: list[_ParquetFile], cid: str) -> list[tuple[Any, ...]] | None:
        """Table ``t``'s stored rows of call ``cid`` from ``files`` and the rows not compacted
        yet (files first, in order), or None when DuckDB must answer."""
        out: list[tuple[Any, ...]] = []
        for f in files:
            lf = self._file(t, f)
            if lf is None:
                return None
            try:
                out.extend(lf.rows(cid))
            except (LookupDamaged, ValueError) as exc:
                self._distrust(f.rel, exc)
                return None
        live = self.live(t, cid, cid + "\x00")
        return None if live is None else out + live

    def between(self, t: str, files: list[_ParquetFile], lo: str, hi_excl: str,
                ids: int | None = None) -> list[tuple[Any, ...]] | None:
        """Table ``t``'s stored rows with a call id in ``[lo, hi_excl)``, or None; ``ids``:
        only the rows of each file's first that many calls (enough to name the first few
        matches of a prefix without reading every block it spans)."""
        out: list[tuple[Any, ...]] = []
        for f in files:
            lf = self._file(t, f)
            if lf is None:
                return None
            try:
                seen: set[Any] = set()
                for row in lf.between(lo, hi_excl):
                    if ids is not None and row[lf.ci] not in seen:
                        if len(seen) == ids:
                            break
                        seen.add(row[lf.ci])
                    out.append(row)
            except (LookupDamaged, ValueError) as exc:
                self._distrust(f.rel, exc)
                return None
        live = self.live(t, lo, hi_excl, ids)
        return None if live is None else out + live

    def live(self, t: str, lo: str, hi_excl: str, ids: int | None = None
             ) -> list[tuple[Any, ...]] | None:
        """Table ``t``'s rows not compacted yet with a call id in ``[lo, hi_excl)``, cast as
        the store's SQL casts them (None: a value only DuckDB can cast)."""
        segs = self._store.uncompacted
        if not segs:
            return []
        col = segs.matching(lo, hi_excl, ids)[t]
        ids_col = col["call_id"]
        spec = COLUMNS[t]
        out = []
        for i, c in enumerate(ids_col):
            if not (isinstance(c, str) and lo <= c < hi_excl):
                continue
            try:
                out.append(tuple(_cast(k, col[name][i]) for name, k in spec))
            except _Uncastable:
                return None
        return out

    def close(self) -> None:
        """Unmap every lookup file."""
        for lf in self._open.values():
            lf.close()
        self._open.clear()


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
