"""Read the audit trail with DuckDB: ``tool_calls``, ``tool_call_steps`` and friends.

``AuditStore`` opens an in-memory DuckDB database whose views cover every record: the Parquet
files compaction produced (read in place, pruned by call id) plus every segment not yet
compacted (sealed, live, or left by a crashed writer; parsed into Arrow). Views:

- ``tool_calls``       one row per call; ``status`` is the final status (a late ``resolved``
  step overrides ``unknown``), ``ended_status`` what the call returned with.
- ``tool_call_steps``  one row per pipeline step, ``detail`` as JSON.
- ``tool_call_intents`` strict-mode intents; ``orphaned`` is true when no final record exists.

DuckDB and pyarrow are imported here, only when a store is opened.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from ..._config import resolve_home
from ._manifest import read_manifest
from ._segments import ParsedSegment, audit_dir, list_segments, read_segment
from ._tables import TABLES, build_tables

__all__ = [
    "AmbiguousCallId",
    "AuditStore",
    "CallNotFound",
    "QueryResult",
    "ReadIssue",
    "open_store",
]


class CallNotFound(LookupError):
    """No call has this id (or id prefix)."""


class AmbiguousCallId(LookupError):
    """An id prefix matches more than one call; ``matches`` lists some of them."""

    def __init__(self, prefix: str, matches: list[str]) -> None:
        super().__init__(f"call id prefix {prefix!r} matches {len(matches)}+ calls")
        self.prefix = prefix
        self.matches = matches


@dataclass(frozen=True, slots=True)
class ReadIssue:
    """Something a reader noticed while loading segments (verify says more)."""

    segment: str
    line: int | None
    message: str


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Columns and rows of one query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        """Rows as dicts keyed by column name."""
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


_PREFIX_OK = re.compile(r"^[0-9a-fA-F-]{1,36}$")

_VIEWS = """
CREATE OR REPLACE VIEW _resolved AS
  SELECT call_id, arg_max(status, resolved_at) AS status,
         arg_max(summary, resolved_at) AS summary, max(resolved_at) AS resolved_at
  FROM _all_resolutions GROUP BY call_id;
CREATE OR REPLACE VIEW tool_calls AS
  SELECT c.call_id, c.run_id, c.tool, c.source, coalesce(r.status, c.status) AS status,
         c.reject_stage, c.summary, c.error_type, c.started_at, c.elapsed_ms,
         c.execution_started, c.trace_id, c.span_id, c.parent_span_id, c.trace_sampled,
         c.args_redacted::JSON AS args_redacted, c.result_preview, c.artifact_path,
         c.artifact_sha256, c.artifact_chars, c.artifact_bytes, c.mode, c.tool_type,
         c.hook_modified, c.attributes::JSON AS attributes, c.status AS ended_status,
         r.resolved_at, r.summary AS resolution_summary, c.writer, c.segment, c.line
  FROM _all_calls c LEFT JOIN _resolved r ON r.call_id = c.call_id;
CREATE OR REPLACE VIEW tool_call_steps AS
  SELECT call_id, seq, step, started_at, elapsed_ms, decider, decision, detail::JSON AS detail
  FROM _all_steps;
CREATE OR REPLACE VIEW tool_call_intents AS
  SELECT i.call_id, i.run_id, i.tool, i.started_at, i.args_redacted::JSON AS args_redacted,
         i.writer, i.segment, i.line,
         NOT EXISTS (SELECT 1 FROM _all_calls c WHERE c.call_id = i.call_id) AS orphaned
  FROM _all_intents i;
"""


class AuditStore:
    """A read-only DuckDB view of one tooltrace home's audit trail.

    Opening parses every segment not yet compacted; Parquet files are read in place. Use
    ``sql`` for any query (named parameters ``$name``), or the helpers the CLI uses.
    """

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        import duckdb

        self.home = resolve_home(home)
        self.adir = audit_dir(self.home)
        self.issues: list[ReadIssue] = []
        self.segments = 0
        self.parquet_files = 0
        self.con = duckdb.connect(":memory:")
        # Parquet footers are parsed once per store, not once per query.
        self.con.execute("SET parquet_metadata_cache = true")
        self._load()
        row = self.con.execute("SELECT count(*) FROM _all_intents").fetchone()
        self._has_intents = bool(row and row[0])

    def _load(self) -> None:
        manifest = read_manifest(self.adir)
        done = {s["name"] for s in manifest.get("segments", [])}
        parsed: list[ParsedSegment] = []
        for info in list_segments(self.adir):
            if info.name in done:
                continue
            seg = read_segment(info)
            if seg is None:
                continue
            parsed.append(seg)
            if seg.tail and not seg.alive:
                self.issues.append(ReadIssue(
                    info.name, seg.lines[-1][0] + 1 if seg.lines else 1,
                    f"torn record ({len(seg.tail)} bytes) after the last complete line: the"
                    " writer stopped mid-write; it is set aside, not read"))
            for no, _raw in seg.bad:
                self.issues.append(ReadIssue(info.name, no, "line is not a valid record"))
        self.segments = len(parsed)
        live = build_tables(parsed)
        files = manifest.get("files") or {}
        for t in TABLES:
            # Copied into DuckDB rather than scanned as Arrow: joins push filters (bloom
            # filters) into their inputs, which DuckDB's Arrow scan does not take.
            self.con.register("_arrow_in", live[t])
            self.con.execute(f"CREATE TABLE _live_{t} AS SELECT * FROM _arrow_in")
            self.con.unregister("_arrow_in")
            paths = [str(self.adir / rel) for rel in files.get(t, [])]
            paths = [p for p in paths if Path(p).exists()]
            self.parquet_files += len(paths)
            if paths:
                lst = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
                src = (f"SELECT * FROM read_parquet([{lst}]) UNION ALL "
                       f"SELECT * FROM _live_{t}")
            else:
                src = f"SELECT * FROM _live_{t}"
            self.con.execute(f"CREATE OR REPLACE VIEW _all_{t} AS {src}")
        self.con.execute(_VIEWS)

    # -- generic ------------------------------------------------------------------------------

    def sql(self, query: str, params: dict[str, Any] | None = None) -> QueryResult:
        """Run one query; ``params`` fill ``$name`` placeholders."""
        cur = self.con.execute(query, params or None)
        desc = cur.description or []
        return QueryResult([d[0] for d in desc], cur.fetchall())

    # -- helpers for the CLI ----------------------------------------------------------------

    def resolve_call_id(self, prefix: str) -> str:
        """The full call id for an id or unique id prefix.

        Raises ``CallNotFound`` or ``AmbiguousCallId``. The range predicate lets DuckDB skip
        every Parquet row group whose min/max excludes the prefix.
        """
        p = prefix.strip().lower()
        if not _PREFIX_OK.match(p):
            raise CallNotFound(f"not a call id: {prefix[:40]!r}")
        if len(p) == 36:
            rows = self.con.execute(
                "SELECT call_id FROM _all_calls WHERE call_id = $p "
                "UNION SELECT call_id FROM _all_intents WHERE call_id = $p LIMIT 1", {"p": p}
            ).fetchall()
        else:
            upper = p[:-1] + chr(ord(p[-1]) + 1)
            rows = self.con.execute(
                "SELECT DISTINCT call_id FROM (SELECT call_id FROM _all_calls WHERE call_id >= $p"
                " AND call_id < $u UNION SELECT call_id FROM _all_intents WHERE call_id >= $p"
                " AND call_id < $u) ORDER BY call_id LIMIT 5", {"p": p, "u": upper}
            ).fetchall()
        if not rows:
            raise CallNotFound(f"no call with id {prefix[:40]!r}")
        if len(rows) > 1:
            raise AmbiguousCallId(prefix, [r[0] for r in rows])
        return str(rows[0][0])

    def call(self, call_id: str) -> CallDetail:
        """Everything recorded about one call (``call_id`` may be a unique prefix)."""
        p = call_id.strip().lower()
        # A full id needs no resolution query: each query over Parquet costs a pruned scan.
        cid = p if len(p) == 36 and _PREFIX_OK.match(p) else self.resolve_call_id(call_id)
        rec = self.sql("SELECT * FROM tool_calls WHERE call_id = $c", {"c": cid}).dicts()
        intent: list[dict[str, Any]] = []
        if self._has_intents:
            intent = self.sql(
                "SELECT * FROM tool_call_intents WHERE call_id = $c", {"c": cid}
            ).dicts()
        if not rec and not intent:
            raise CallNotFound(f"no call with id {call_id[:40]!r}")
        steps = self.sql(
            "SELECT seq, step, started_at, elapsed_ms, decider, decision, detail "
            "FROM tool_call_steps WHERE call_id = $c ORDER BY started_at, seq", {"c": cid}
        ).dicts()
        return CallDetail(cid, rec[0] if rec else None, steps, intent[0] if intent else None)

    def calls(
        self,
        *,
        tool: str | None = None,
        status: str | None = None,
        run_id: str | None = None,
        since: str | None = None,
        limit: int = 50,
    ) -> QueryResult:
        """Recent calls, newest first, filtered."""
        where: list[str] = []
        params: dict[str, Any] = {}
        for col, val in (("tool", tool), ("status", status), ("run_id", run_id)):
            if val is not None:
                where.append(f"{col} = ${col}")
                params[col] = val
        if since is not None:
            where.append("started_at >= CAST($since AS TIMESTAMP)")
            params["since"] = since
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        params["limit"] = int(limit)
        return self.sql(
            "SELECT call_id, started_at, run_id, tool, status, reject_stage, elapsed_ms, summary "
            f"FROM tool_calls {clause} ORDER BY call_id DESC LIMIT $limit", params)

    def counts(self) -> dict[str, int]:
        """Row counts of the main views."""
        r = self.con.execute(
            "SELECT (SELECT count(*) FROM _all_calls), (SELECT count(*) FROM _all_steps), "
            "(SELECT count(*) FROM _all_intents)").fetchone()
        assert r is not None
        return {"calls": int(r[0]), "steps": int(r[1]), "intents": int(r[2])}

    def to_duckdb(self, path: str | os.PathLike[str]) -> dict[str, int]:
        """Write ``tool_calls``, ``tool_call_steps`` and ``tool_call_intents`` as tables of a
        DuckDB database file, sorted by call id with ``call_id`` typed UUID (inside DuckDB the
        UUID type scans much faster than text, and sorted UUIDv7 zone maps prune lookups).
        Returns the row count of each table."""
        target = str(Path(path)).replace("'", "''")
        self.con.execute(f"ATTACH '{target}' AS out")
        try:
            counts: dict[str, int] = {}
            for view, order in (("tool_calls", "call_id"), ("tool_call_steps", "call_id, seq"),
                                ("tool_call_intents", "call_id")):
                self.con.execute(
                    f"CREATE OR REPLACE TABLE out.{view} AS SELECT call_id::UUID AS call_id, "
                    f"* EXCLUDE (call_id) FROM {view} ORDER BY {order}")
                row = self.con.execute(f"SELECT count(*) FROM out.{view}").fetchone()
                counts[view] = int(row[0]) if row else 0
            return counts
        finally:
            self.con.execute("DETACH out")

    def close(self) -> None:
        """Close the DuckDB connection."""
        self.con.close()

    def __enter__(self) -> AuditStore:
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class CallDetail:
    """One call: its ``tool_calls`` row (None if only an intent exists), steps and intent."""

    call_id: str
    record: dict[str, Any] | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    intent: dict[str, Any] | None = None


def open_store(home: str | os.PathLike[str] | None = None) -> AuditStore:
    """Open the audit trail of a tooltrace home for reading."""
    return AuditStore(home)
