"""The calls around one call: the chain of parents above it and the calls it made below it
(nested calls, ``CallContext.call``), as ``autopsy`` shows them.

Both stay cheap at any trail size. Parents are looked up one by one by id (pruned lookups).
Children are searched only when the call's execute step says it made some (``nested_calls``),
and only among call ids of the time the call ran: ids are time-ordered (UUIDv7), and a child
starts after its parent and ends before it returns.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from ._tables import COLUMNS

if TYPE_CHECKING:
    from ._store import AuditStore
    from ._storerecords import CallDetail

__all__ = ["MAX_LEVELS", "call_family"]

#: How many levels up and down the family is followed (the registry's depth bound is lower).
MAX_LEVELS = 32
_KEYS = ("call_id", "tool", "status", "depth", "parent_call_id", "started_at", "elapsed_ms")
_COLS = ", ".join(_KEYS)


def call_family(store: AuditStore, detail: CallDetail) -> dict[str, Any]:
    """``{"ancestors": [root ... parent], "descendants": [rows, depth first]}``: each row has
    ``call_id``, ``tool``, ``status``, ``depth``, ``parent_call_id``, ``started_at`` and
    ``elapsed_ms`` (descendants also ``level``: 1 for a call this one made)."""
    rec = detail.record or {}
    ancestors: list[dict[str, Any]] = []
    parent = rec.get("parent_call_id")
    while parent and len(ancestors) < MAX_LEVELS:
        try:
            up = store.call(str(parent)).record
        except LookupError:
            ancestors.append({"call_id": parent, "tool": None, "status": "not in this trail"})
            break
        if up is None:
            break
        ancestors.append({k: up.get(k) for k in _KEYS})
        parent = up.get("parent_call_id")
    ancestors.reverse()
    return {"ancestors": ancestors, "descendants": _descendants(store, detail)}


def _made_calls(detail: CallDetail) -> bool:
    for s in detail.steps:
        d = s.get("detail")
        if s.get("step") == "execute" and isinstance(d, str) and '"nested_calls"' in d:
            return True
        if s.get("step") == "execute" and isinstance(d, dict) and d.get("nested_calls"):
            return True
    return False


def _descendants(store: AuditStore, detail: CallDetail) -> list[dict[str, Any]]:
    rec = detail.record
    if rec is None or not _made_calls(detail):
        return []
    started = rec.get("started_at")
    elapsed = rec.get("elapsed_ms") or 0.0
    if not isinstance(started, dt.datetime):
        return []
    end_ms = int(started.replace(tzinfo=dt.UTC).timestamp() * 1000 + elapsed) + 1000
    hi = f"{end_ms:012x}"
    hi = f"{hi[:8]}-{hi[8:]}"  # a UUIDv7's first 48 bits are its Unix time in ms
    direct = _direct_descendants(store, detail.call_id, hi)
    if direct is not None:
        return _tree_order(direct, detail.call_id)
    res = store.sql(
        f"""WITH RECURSIVE window_calls AS (
              SELECT {_COLS} FROM tool_calls WHERE call_id > $lo AND call_id < $hi),
            down(call_id, tool, status, depth, parent_call_id, started_at, elapsed_ms, level)
            AS (SELECT {_COLS}, 1 FROM window_calls WHERE parent_call_id = $lo
                UNION ALL
                SELECT c.call_id, c.tool, c.status, c.depth, c.parent_call_id, c.started_at,
                       c.elapsed_ms, d.level + 1
                FROM window_calls c JOIN down d ON c.parent_call_id = d.call_id
                WHERE d.level < {MAX_LEVELS})
            SELECT * FROM down""",
        {"lo": detail.call_id, "hi": hi},
    )
    return _tree_order(res.dicts(), detail.call_id)


def _direct_descendants(store: AuditStore, root: str, hi: str) -> list[dict[str, Any]] | None:
    """The recursive query's rows, from the lookup files (``AuditStore.window``) and the rows
    not compacted yet, walked level by level as the query walks them; None: ask DuckDB."""
    rows = store.window("calls", root, hi)
    if rows is None:
        return None
    names = [c for c, _k in COLUMNS["calls"]]
    kids: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        row = dict(zip(names, r, strict=True))
        if root < row["call_id"] < hi:
            kids.setdefault(row["parent_call_id"], []).append(
                {k: row[k] for k in _KEYS})
    out: list[dict[str, Any]] = []
    level, frontier = 1, [root]
    while frontier and level <= MAX_LEVELS:
        found = [dict(c, level=level) for p in frontier for c in kids.get(p, ())]
        out.extend(found)
        frontier = [c["call_id"] for c in found]
        level += 1
    return out


def _tree_order(rows: list[dict[str, Any]], root: str) -> list[dict[str, Any]]:
    """Rows depth first, each call before the calls it made, siblings by call id (time)."""
    kids: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: str(r["call_id"])):
        kids.setdefault(str(r["parent_call_id"]), []).append(r)
    out: list[dict[str, Any]] = []
    stack = list(reversed(kids.get(root, [])))
    seen: set[str] = set()
    while stack:
        r = stack.pop()
        if r["call_id"] in seen:
            continue
        seen.add(r["call_id"])
        out.append(r)
        stack.extend(reversed(kids.get(str(r["call_id"]), [])))
    return out
