"""One call by id, straight from what can hold it (``AuditStore.call``).

Each table is read from the compacted files whose recorded call-id range holds the id plus the
rows not compacted yet: from those files' lookup files and the segment lines that hold the id
when they can answer (``_direct``, no DuckDB), else with one plain statement (``read_parquet``
of those files, the stored columns by name, filtered on the id, and the segment lines that hold
the id, copied into DuckDB). Steps are ordered and the latest resolution picked
here, in Python, the same way for both. The row of ``tool_calls`` (its final ``outcome``, when and
how a late step resolved it) is put together here from the stored row and the call's latest
resolution, not by a join in SQL: DuckDB plans and runs a plain scan of one file faster than the
same scan under ``UNION ALL BY NAME``, a join and JSON casts, and the rows are the views' rows.

A file compacted before one of the columns existed fails to bind the plain statement; that
table is then read through ``read_by_name`` (the missing column reads as NULL), as the views do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._storerecords import CallDetail, CallNotFound, _one_call
from ._tables import COLUMNS, read_by_name

if TYPE_CHECKING:
    from ._store import AuditStore

__all__ = ["find_call"]

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
    lookup files and the segment lines when they can answer (``_direct``), else with DuckDB."""
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
