"""Turn parsed segment lines into Arrow tables (the rows of ``tool_calls`` and friends).

Used both by readers (segments not yet compacted) and by compaction (into Parquet). Timestamps
stay integer microseconds until the final cast to ``timestamp[us, UTC]``, which costs nothing;
call ids stay canonical lowercase strings, so Parquet min/max statistics prune lookups.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

import orjson

from ._segments import ParsedSegment

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "COLUMNS", "DUCKDB_TYPES", "TABLES", "build_columns", "build_tables", "empty_tables",
    "read_by_name", "schemas",
]

#: The stored tables (``tool_calls``, ``tool_call_steps``, ``tool_call_intents``, the late
#: resolutions of calls that ended ``unknown`` and the approvers' answers), as compaction and
#: the archive name them.
TABLES = ("calls", "steps", "intents", "resolutions", "approvals")


#: Column names and kinds of each stored table, in storage order. Kinds: ``str``, ``i32``,
#: ``i64``, ``f64``, ``bool`` and ``ts`` (naive UTC microseconds). The one definition both
#: the Arrow schemas (compaction, archive) and the DuckDB tables of live rows come from.
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "calls": (
        ("call_id", "str"), ("run_id", "str"), ("tool", "str"), ("source", "str"),
        ("status", "str"), ("reject_stage", "str"), ("summary", "str"), ("error_type", "str"),
        ("started_at", "ts"), ("elapsed_ms", "f64"), ("execution_started", "bool"),
        ("trace_id", "str"), ("span_id", "str"), ("parent_span_id", "str"),
        ("trace_sampled", "bool"), ("args_redacted", "str"), ("result_preview", "str"),
        ("artifact_path", "str"), ("artifact_sha256", "str"), ("artifact_chars", "i64"),
        ("artifact_bytes", "i64"), ("mode", "str"), ("tool_type", "str"),
        ("hook_modified", "bool"), ("attributes", "str"), ("writer", "str"), ("segment", "str"),
        ("line", "i64"), ("parent_call_id", "str"), ("depth", "i32"), ("progress", "str"),
        ("principal_user", "str"), ("principal_agent", "str"), ("principal_tenant", "str"),
        ("principal_roles", "str"), ("capability", "str"), ("effect", "str"),
    ),
    "steps": (
        ("call_id", "str"), ("seq", "i32"), ("step", "str"), ("started_at", "ts"),
        ("elapsed_ms", "f64"), ("decider", "str"), ("decision", "str"), ("detail", "str"),
    ),
    "intents": (
        ("call_id", "str"), ("run_id", "str"), ("tool", "str"), ("started_at", "ts"),
        ("args_redacted", "str"), ("writer", "str"), ("segment", "str"), ("line", "i64"),
    ),
    "resolutions": (
        ("call_id", "str"), ("status", "str"), ("summary", "str"), ("resolved_at", "ts"),
        ("segment", "str"), ("line", "i64"),
    ),
    "approvals": (
        ("approval_id", "str"), ("call_id", "str"), ("run_id", "str"), ("tool", "str"),
        ("rule", "str"), ("decision", "str"), ("approver", "str"), ("reason", "str"),
        ("args_sha256", "str"), ("approved_at", "ts"), ("expires_at", "ts"),
        ("principal_user", "str"), ("principal_agent", "str"), ("principal_tenant", "str"),
        ("principal_roles", "str"), ("writer", "str"), ("segment", "str"), ("line", "i64"),
        ("args_redacted", "str"),
    ),
}

#: DuckDB type of each column kind.
DUCKDB_TYPES = {"str": "VARCHAR", "i32": "INTEGER", "i64": "BIGINT", "f64": "DOUBLE",
                "bool": "BOOLEAN", "ts": "TIMESTAMP"}


def schemas() -> dict[str, pa.Schema]:
    """The Arrow schema of each stored table."""
    import pyarrow as pa

    kinds = {
        "str": pa.string(), "i32": pa.int32(), "i64": pa.int64(), "f64": pa.float64(),
        "bool": pa.bool_(),
        "ts": pa.timestamp("us"),  # UTC; naive so readers need no time-zone database
    }
    return {t: pa.schema([(n, kinds[k]) for n, k in cols]) for t, cols in COLUMNS.items()}


def read_by_name(t: str, source: str) -> str:
    """SQL reading table ``t``'s stored columns, in order, from ``source`` (a FROM item) by
    name: a column the source lacks (a file compacted before it existed) reads as NULL."""
    cols = ", ".join(f'"{c}"' for c, _k in COLUMNS[t])
    empty = ", ".join(f'NULL::{DUCKDB_TYPES[k]} AS "{c}"' for c, k in COLUMNS[t])
    return (f"SELECT {cols} FROM ((SELECT {empty} LIMIT 0)"
            f" UNION ALL BY NAME (SELECT * FROM {source}))")


def _json(v: Any) -> str | None:
    return None if v is None else orjson.dumps(v).decode()


def _artifact(a: Any) -> tuple[Any, Any, Any, Any]:
    if isinstance(a, dict):
        return a.get("path"), a.get("chars"), a.get("bytes"), a.get("sha256")
    if isinstance(a, list) and len(a) == 4:
        return a[0], a[1], a[2], a[3]
    return None, None, None, None


def _resolution_summary(row: Any) -> str:
    detail = row[6] if len(row) > 6 and isinstance(row[6], dict) else {}
    err = detail.get("error_type")
    return f"resolved later as {row[5]}" + (f" ({err})" if err else "")


def build_columns(segments: Iterable[ParsedSegment], tables: Collection[str] = TABLES
                  ) -> dict[str, dict[str, list[Any]]]:
    """The values of every call, step, intent, resolution and approval line in ``segments``,
    column by column (``COLUMNS`` order), as parsed: no type is enforced yet (see
    ``build_tables``). Steps (most of the work: about six a call) only when ``tables`` has
    them; the other tables always."""
    cols: dict[str, dict[str, list[Any]]] = {
        t: {n: [] for n, _k in COLUMNS[t]} for t in TABLES
    }
    c, st, it, rs = cols["calls"], cols["steps"], cols["intents"], cols["resolutions"]
    ap = cols["approvals"]
    with_steps = "steps" in tables

    def add_steps(cid: str, steps: Any) -> None:
        if not with_steps:
            return
        for row in steps:
            seq, name, at, el, decider, decision = row[:6]
            st["call_id"].append(cid)
            st["seq"].append(seq)
            st["step"].append(name)
            st["started_at"].append(at)
            st["elapsed_ms"].append(el / 1000.0)
            st["decider"].append(decider)
            st["decision"].append(decision)
            st["detail"].append(_json(row[6]) if len(row) > 6 else None)

    for seg in segments:
        writer, sname = seg.info.writer, seg.info.name
        for no, o, _raw in seg.lines:
            k = o.get("k")
            if k == "c":
                _call(c, o, writer, sname, no)
                add_steps(o["call_id"], o.get("steps") or ())
            elif k == "i":
                it["call_id"].append(o.get("call_id"))
                it["run_id"].append(o.get("run_id"))
                it["tool"].append(o.get("tool"))
                it["started_at"].append(o.get("started_at_us"))
                it["args_redacted"].append(_json(o.get("args")))
                it["writer"].append(writer)
                it["segment"].append(sname)
                it["line"].append(no)
            elif k == "s":
                cid = o["call_id"]
                row: Any = o.get("step") or ()
                if len(row) < 6:
                    continue
                add_steps(cid, (row,))
                if row[1] == "resolved":
                    rs["call_id"].append(cid)
                    rs["status"].append(row[5])
                    rs["summary"].append(_resolution_summary(row))
                    rs["resolved_at"].append(row[2])
                    rs["segment"].append(sname)
                    rs["line"].append(no)
            elif k == "a":
                _approval(ap, o, writer, sname, no)
    return cols


def _call(c: dict[str, list[Any]], o: dict[str, Any], writer: str, sname: str, no: int) -> None:
    """Append one call line's ``tool_calls`` row (its steps are ``add_steps``'s)."""
    art = _artifact(o.get("artifact"))
    c["call_id"].append(o["call_id"])
    for f in ("run_id", "tool", "source", "status", "reject_stage", "summary", "error_type",
              "trace_id", "span_id", "parent_span_id", "result_preview", "mode", "tool_type",
              "capability", "effect"):
        c[f].append(o.get(f))
    c["started_at"].append(o.get("started_at_us"))
    c["elapsed_ms"].append((o.get("elapsed_us") or 0) / 1000.0)
    c["execution_started"].append(bool(o.get("execution_started")))
    c["trace_sampled"].append(bool(o.get("trace_sampled")))
    c["hook_modified"].append(bool(o.get("hook_modified")))
    c["args_redacted"].append(_json(o.get("args_redacted", o.get("args"))))
    c["attributes"].append(_json(o.get("attributes") or None))
    _principal(c, o)
    c["artifact_path"].append(art[0])
    c["artifact_chars"].append(art[1])
    c["artifact_bytes"].append(art[2])
    c["artifact_sha256"].append(art[3])
    c["writer"].append(writer)
    c["segment"].append(sname)
    c["line"].append(no)
    c["parent_call_id"].append(o.get("parent_call_id"))
    c["depth"].append(o.get("depth") or 0)
    c["progress"].append(_json(o.get("progress") or None))


def _principal(into: dict[str, list[Any]], o: dict[str, Any]) -> None:
    p = o.get("principal")
    p = p if isinstance(p, dict) else {}
    into["principal_user"].append(p.get("user"))
    into["principal_agent"].append(p.get("agent"))
    into["principal_tenant"].append(p.get("tenant"))
    into["principal_roles"].append(_json(p.get("roles") or None))


def _approval(ap: dict[str, list[Any]], o: dict[str, Any], writer: str, seg: str, no: int) -> None:
    """One approval line's values (``a``), read at line ``no`` of segment ``seg``."""
    for f in ("approval_id", "call_id", "run_id", "tool", "rule", "reason", "args_sha256"):
        ap[f].append(o.get(f))
    ap["decision"].append("approve" if o.get("approved") is True else "deny")
    ap["approver"].append(o.get("who"))
    ap["approved_at"].append(o.get("at_us"))
    ap["expires_at"].append(o.get("expires_at_us"))
    ap["args_redacted"].append(_json(o.get("args")))
    _principal(ap, o)
    ap["writer"].append(writer)
    ap["segment"].append(seg)
    ap["line"].append(no)


def build_tables(segments: Iterable[ParsedSegment]) -> dict[str, pa.Table]:
    """Arrow tables of every call, step, intent and resolution line in ``segments``."""
    import pyarrow as pa

    sch = schemas()
    cols = build_columns(segments)
    out: dict[str, pa.Table] = {}
    for t in TABLES:
        arrays = []
        for f in sch[t]:
            vals = cols[t][f.name]
            is_ts = pa.types.is_timestamp(f.type)
            try:
                arr = pa.array(vals, pa.int64() if is_ts else f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                # One malformed value must not make the whole trail unreadable.
                arr = pa.array(_coerce(vals, f.type), pa.int64() if is_ts else f.type)
            arrays.append(arr.cast(f.type) if is_ts else arr)
        out[t] = pa.Table.from_arrays(arrays, schema=sch[t])
    return out


def _coerce(vals: list[Any], typ: pa.DataType) -> list[Any]:
    """Values made to fit a column type: text for strings, None where a number is not one."""
    import pyarrow as pa

    if pa.types.is_string(typ):
        return [v if v is None or isinstance(v, str) else orjson.dumps(v, default=str).decode()
                for v in vals]
    if pa.types.is_boolean(typ):
        return [None if v is None else bool(v) for v in vals]
    if pa.types.is_floating(typ):
        return [v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
                for v in vals]
    lim = 2**31 if typ == pa.int32() else 2**63
    return [v if isinstance(v, int) and not isinstance(v, bool) and -lim <= v < lim else None
            for v in vals]


def empty_tables() -> dict[str, pa.Table]:
    """Tables with the right columns and no rows."""
    return {t: s.empty_table() for t, s in schemas().items()}
