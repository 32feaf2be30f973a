"""Rows of one call (or one call-id range) without DuckDB: from the lookup files beside the
compacted Parquet files (``_lookupfile``) and from the segment lines not compacted yet that hold
the id (``_livescan``), as parsed.

Every answer is the one DuckDB would give over the same files: the stored columns in order,
timestamps as naive UTC datetimes, and the rows not compacted yet converted the way the store's
SQL casts them. When that cannot be promised, the answer is None and the caller asks DuckDB:
a Parquet file without a lookup file (a trail compacted before they existed), no audit key to
authenticate one with, a value not compacted yet whose cast only DuckDB can say, or a lookup
file that is not what compaction wrote (``LookupDamaged``: it is then never read again by this
store, and ``warnings`` says so).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from ._lookupfile import LookupDamaged, LookupFile, lookup_rel, read_key
from ._tables import COLUMNS

if TYPE_CHECKING:
    from ._store import AuditStore, _ParquetFile

__all__ = ["LookupFiles"]

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
