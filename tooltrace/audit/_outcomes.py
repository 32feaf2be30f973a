"""The final outcome of each compacted call, written into the ``calls`` Parquet files.

A call that returned ``unknown`` gets its final outcome later, from a ``resolved`` step (a row
of ``resolutions``). The store's views join the two; plain SQL over the compacted files (any
engine, no tooltrace) should not have to. So compaction writes, next to ``status`` (what the
call returned), ``outcome`` (its final outcome), ``resolved_at`` and ``resolution_summary``
into every ``calls`` file. When a resolution arrives in a later batch than its call, the file
that holds the call is rewritten under a new name with the outcome filled in; the manifest
switch that lists the batch also swaps the file, so a reader sees the old file or the new one.
The old file is removed at once (plain SQL reads ``calls/*.parquet``, so it must not see a call
twice); a tooltrace reader that listed it just before the switch fails that query and reads the
new one when opened again.
Files written before these columns existed get them the same way on the next compaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["OUTCOME_COLUMNS", "Resolved", "latest_resolutions", "refresh_outcomes",
           "with_outcomes"]

#: The columns compaction adds to ``calls`` (names and kinds, as in ``COLUMNS``).
OUTCOME_COLUMNS = (("outcome", "str"), ("resolved_at", "ts"), ("resolution_summary", "str"))

#: call id -> (final status, resolved_at as a datetime, summary) of its latest resolution.
Resolved = dict[str, tuple[str, Any, str]]


def latest_resolutions(tables: Iterable[pa.Table]) -> Resolved:
    """The latest resolution of each call in ``resolutions`` tables (few rows: one per call
    that returned ``unknown``)."""
    out: Resolved = {}
    for tbl in tables:
        for r in tbl.select(["call_id", "status", "resolved_at", "summary"]).to_pylist():
            cur = out.get(r["call_id"])
            if cur is None or (r["resolved_at"] is not None
                               and (cur[1] is None or r["resolved_at"] >= cur[1])):
                out[r["call_id"]] = (r["status"], r["resolved_at"], r["summary"])
    return out


def with_outcomes(calls: pa.Table, resolved: Resolved) -> pa.Table:
    """``calls`` with the outcome columns: ``status`` unless ``resolved`` holds a resolution of
    the call (a table that has them keeps its own where ``resolved`` has none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = calls.num_rows
    ts = pa.timestamp("us")
    if "outcome" in calls.column_names:
        old = [calls["outcome"], calls["resolved_at"], calls["resolution_summary"]]
        calls = calls.drop_columns([c for c, _k in OUTCOME_COLUMNS])
    else:
        old = [calls["status"], pa.nulls(n, ts), pa.nulls(n, pa.string())]
    if resolved:
        ids = list(resolved)
        idx = pc.index_in(calls["call_id"], value_set=pa.array(ids, pa.string()))
        new = [pc.take(pa.array([resolved[i][k] for i in ids], typ), idx)
               for k, typ in ((0, pa.string()), (1, ts), (2, pa.string()))]
        old = [pc.coalesce(a, b) for a, b in zip(new, old, strict=True)]
    for (name, _k), col in zip(OUTCOME_COLUMNS, old, strict=True):
        calls = calls.append_column(name, col)
    return calls


def refresh_outcomes(adir: Path, manifest: dict[str, Any], resolved: Resolved,
                     write: Callable[[pa.Table, str], str], *, missing_only: bool = False
                     ) -> bool:
    """Rewrite the listed ``calls`` files that hold a call ``resolved`` resolves, and those
    that lack the outcome columns (only those with ``missing_only``); ``write`` stores a table
    and returns its relative path. Updates ``manifest`` (files and ranges); the caller writes
    it. True when a file was replaced."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files: list[str] = (manifest.get("files") or {}).get("calls", [])
    ranges: dict[str, Any] = manifest.setdefault("ranges", {})
    replaced = False
    for pos, rel in enumerate(list(files)):
        path = adir / rel
        try:
            has = "outcome" in pq.read_schema(path).names
        except (OSError, ValueError):  # gone, or not Parquet: readers report it, not us
            continue
        r = ranges.get(rel)
        lo, hi = (str(r[0]), str(r[1])) if isinstance(r, list) and len(r) == 2 else ("", "~")
        mine = {c: v for c, v in resolved.items() if lo <= c <= hi}
        if has and (missing_only or not mine):
            continue
        tbl = pq.read_table(path)
        if has and not pc.any(pc.is_in(tbl["call_id"], value_set=_ids(mine))).as_py():
            continue
        new_rel = write(with_outcomes(tbl, mine), "calls")
        files[pos] = new_rel
        if rel in ranges:
            ranges[new_rel] = ranges.pop(rel)
        replaced = True
    return replaced


def _ids(resolved: Resolved) -> pa.Array:
    import pyarrow as pa

    return pa.array(list(resolved), pa.string())
