"""Read the audit trail with DuckDB: ``tool_calls``, ``tool_call_steps`` and friends.

``AuditStore`` opens an in-memory DuckDB database whose views cover every record: the Parquet
files compaction produced (read in place, pruned by call id) plus every segment not yet
compacted (sealed, live, or left by a crashed writer: read from their files, a piece at a time,
only when a question needs them, ``_livescan``). Views:

- ``tool_calls``       one row per call; ``status`` is what the call returned (as the
  envelope, the metrics and the spans say), ``outcome`` its final outcome: the same, except for
  a call that returned ``unknown`` and was resolved later (``resolved_at``,
  ``resolution_summary``) by a late ``resolved`` step.
- ``tool_call_steps``  one row per pipeline step, ``detail`` as JSON.
- ``tool_call_intents`` strict-mode intents; ``orphaned`` is true when no final record exists.
- ``approvals``        approvers' answers and the calls each covered (``_approvalrows``).

Only DuckDB is imported, when a store first needs it: no pyarrow, no pandas. A lookup by call id
(``call``, ``resolve_call_id``) does not go through the views: it reads only the Parquet files
whose call-id range (recorded in the compaction manifest) can hold the id (their lookup files,
when they have them), and only the lines of the segments not compacted yet that hold the id.
The views copy the rows not compacted yet into DuckDB when they are first used. ``calls``
(newest first) reads the segments not compacted yet newest first, only as many as it needs.

A store reads the trail as it was when opened. When compaction replaced a Parquet file the
store listed (background compaction merges small files and rewrites a file whose call was
resolved later), the store reads the trail afresh and asks again, once.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import orjson

from .._ids import CLOCK_SKEW_S, id_prefix
from .._settings import resolve_home
from ._approvalrows import APPROVALS_VIEW
from ._livejson import ParsedCache
from ._livescan import LiveSegments
from ._livetables import LiveTables
from ._lookup import LookupFiles, find_call
from ._manifest import manifest_path, read_manifest
from ._segments import SegmentInfo, audit_dir, list_segments
from ._storerecords import (
    AmbiguousCallId,
    CallDetail,
    CallNotFound,
    DuplicateCallId,
    QueryResult,
    ReadIssue,
    _one_call,
)
from ._tables import TABLES, read_by_name

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "AmbiguousCallId",
    "AuditStore",
    "CallNotFound",
    "DuplicateCallId",
    "QueryResult",
    "ReadIssue",
    "open_store",
]

_PREFIX_OK = re.compile(r"^[0-9a-fA-F-]{1,36}$")
_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The stored tables each view (and the tables behind them) reads.
_READS: dict[str, tuple[str, ...]] = {
    "tool_calls": ("calls", "resolutions"), "_resolved": ("resolutions",),
    "tool_call_steps": ("steps",), "tool_call_intents": ("intents", "calls"),
    "approvals": ("approvals", "steps"),
    **{f"{p}{t}": (t,) for t in TABLES for p in ("_all_", "_live_")},
}
_T = TypeVar("_T")

# The row shapes of the views, shared with the direct lookups in ``AuditStore.call``.
_RESOLVED = """SELECT call_id, arg_max(status, resolved_at) AS status,
         arg_max(summary, resolved_at) AS summary, max(resolved_at) AS resolved_at
  FROM {src} GROUP BY call_id"""
_CALL_ROW = """SELECT c.call_id, c.run_id, c.tool, c.source, c.status,
         coalesce(r.status, c.status) AS outcome, c.reject_stage, c.summary, c.error_type,
         c.started_at, c.elapsed_ms, c.execution_started, c.trace_id, c.span_id,
         c.parent_span_id, c.trace_sampled, c.args_redacted::JSON AS args_redacted,
         c.result_preview, c.artifact_path, c.artifact_sha256, c.artifact_chars,
         c.artifact_bytes, c.mode, c.tool_type, c.hook_modified,
         c.attributes::JSON AS attributes, r.resolved_at, r.summary AS resolution_summary,
         c.writer, c.segment, c.line, c.parent_call_id, c.depth, c.progress::JSON AS progress,
         c.principal_user, c.principal_agent, c.principal_tenant, c.principal_roles,
         c.capability, c.effect
  FROM {calls} c LEFT JOIN {resolved} r ON r.call_id = c.call_id"""
_STEP_COLS = "seq, step, started_at, elapsed_ms, decider, decision, detail::JSON AS detail"
_INTENT_COLS = """i.call_id, i.run_id, i.tool, i.started_at, i.args_redacted::JSON AS args_redacted,
         i.writer, i.segment, i.line"""

_VIEWS = f"""
CREATE OR REPLACE VIEW _resolved AS {_RESOLVED.format(src="_all_resolutions")};
CREATE OR REPLACE VIEW tool_calls AS {_CALL_ROW.format(calls="_all_calls", resolved="_resolved")};
CREATE OR REPLACE VIEW tool_call_steps AS SELECT call_id, {_STEP_COLS} FROM _all_steps;
CREATE OR REPLACE VIEW tool_call_intents AS
  SELECT {_INTENT_COLS},
         NOT EXISTS (SELECT 1 FROM _all_calls c WHERE c.call_id = i.call_id) AS orphaned
  FROM _all_intents i;
{APPROVALS_VIEW}"""

@dataclass(frozen=True, slots=True)
class _ParquetFile:
    """One compacted file and, when the manifest records it, its call-id range."""

    path: str
    lo: str | None
    hi: str | None
    rel: str = ""
    #: The manifest lists a lookup file for it (``_lookupfile``).
    has_lookup: bool = False

    def overlaps(self, lo: str, hi_excl: str) -> bool:
        """Can the file hold a call id in ``[lo, hi_excl)``? (True when its range is unknown.)"""
        if self.lo is None or self.hi is None:
            return True
        return self.lo < hi_excl and self.hi >= lo


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _inline(query: str, params: dict[str, Any]) -> str | None:
    """``query`` with each ``$name`` placeholder of ``params`` written as its value's literal,
    or None when a value has none (it is then bound). Binding a parameter makes DuckDB's
    client import numpy (80 MiB: `tooltrace stats --tool x` peaked at 170 MiB, 2026-12-06), and
    a bound ``LIMIT`` is planned as a sort of every row. The placeholders are found with
    DuckDB's own tokenizer, so text in a string or a comment is left alone."""
    import duckdb

    lits: dict[str, str] = {}
    for name, v in params.items():
        if v is None:
            lits[name] = "NULL"
        elif isinstance(v, bool):
            lits[name] = "true" if v else "false"
        elif isinstance(v, int | float) and math.isfinite(v):
            # In brackets: a negative one after a minus would start a comment (``3--5``).
            lits[name] = f"({v!r})"
        elif isinstance(v, str) and "\x00" not in v:  # a NUL ends DuckDB's reading of a text
            lits[name] = _quote(v)
        else:
            return None
    try:
        tokens = duckdb.tokenize(query)
    except Exception:  # the text goes to DuckDB as it is, which says what is wrong
        return None
    out: list[str] = []
    last = 0
    for at, kind in tokens:
        if query[at] != "$" or kind != duckdb.token_type.operator:
            continue
        m = _PARAM.match(query, at + 1)
        if m is None or m.group(0) not in lits:
            continue
        out.append(query[last:at])
        out.append(lits[m.group(0)])
        last = m.end()
    out.append(query[last:])
    return "".join(out)


def _written_at(info: SegmentInfo) -> float:
    """When a segment was last written (Unix seconds); +inf when it is gone or cannot be
    asked (read first: it could hold anything)."""
    try:
        return os.stat(info.path).st_mtime
    except OSError:
        return math.inf


def _cores() -> int:
    """CPUs this process may run on (DuckDB's own default)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class AuditStore:
    """A read-only DuckDB view of one tooltrace home's audit trail.

    Opening reads the compaction manifest and lists the segments not compacted yet; Parquet
    files are read in place, segments when a question needs them. Use ``sql`` for any query
    (named parameters ``$name``), or the helpers the CLI uses.

    ``lookup_files`` lists the Parquet files the last ``call`` or ``resolve_call_id`` read;
    ``segments`` counts the segments not compacted yet.
    """

    #: The SQL that defines ``tool_calls``, ``tool_call_steps`` and ``tool_call_intents`` over
    #: the ``_all_<table>`` views (one per name in ``TABLES``) that ``_load`` creates. A store
    #: that reads its records from elsewhere (``tooltrace.archive.ArchiveStore``) creates those
    #: views in its own ``_load`` and then runs this.
    VIEWS: ClassVar[str] = _VIEWS

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.home = resolve_home(home)
        self.adir = audit_dir(self.home)
        #: What a lookup could not trust (a damaged lookup file it read the Parquet for
        #: instead); the CLI prints these.
        self.warnings: list[str] = []
        self._reset()
        self._load()

    def _reset(self) -> None:
        self.segments = 0
        self.parquet_files = 0
        self.lookup_files: list[str] = []
        # Per table: the compacted files with their call-id ranges. None (a store whose _load
        # does not fill them) means: look up through the views.
        self.files_by_table: dict[str, list[_ParquetFile]] | None = None
        self._stamp: tuple[int, int, int] | None = None
        #: The segments not compacted yet, read when a question needs them.
        self.uncompacted = LiveSegments([])
        self._live_tables = LiveTables(ParsedCache(self.adir, self.home))
        self._has_intents: bool | None = None
        # SQL that creates the views, run when ``con`` is first used: a lookup by call id
        # needs none of them, and binding them reads Parquet footers.
        self._pending: list[str] = []
        self._db: duckdb.DuckDBPyConnection | None = None
        self._live_loaded: set[str] = set()
        self._compacted_names: set[str] = set()
        self._swept = False
        # After ``calls`` read only the newest segments: the id prefix no unread segment can
        # reach (ids above it are all in ``_newest_<table>`` and Parquet); else None.
        self._newest_above: str | None = None
        self._newest_sources: dict[str, str] = {}
        #: The segments the last ``calls`` read (all of them when it read the whole trail).
        self.segments_read = 0
        self._single = True
        self.lookups = LookupFiles(self)

    @property
    def issues(self) -> list[ReadIssue]:
        """What reading the segments not compacted yet found wrong (torn tails of crashed
        writers, lines that are not records): known once every line was read, which this
        does when no query has yet."""
        if self.uncompacted.issues is None:
            self._load_live()  # the tables of rows not compacted yet read every line
        return list(self.uncompacted.issues or ())

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection, opened on first use: a lookup answered from the lookup files
        and the segments never imports DuckDB."""
        if self._db is None:
            import duckdb

            # One DuckDB thread until ``con`` is first used: a lookup reads one row group per
            # table, which a second thread cannot share, and handing work to the pool and back
            # costs more CPU than it saves (most on a busy machine). Analytical queries get
            # every core.
            self._db = duckdb.connect(":memory:", config={"threads": 1})
            # No progress bar: DuckDB draws one on standard output for a query that runs
            # over two seconds, inside a command's table or JSON.
            self._db.execute("SET enable_progress_bar = false")
            # Parquet footers are parsed once per store, not once per query.
            self._db.execute("SET parquet_metadata_cache = true")
            # Memory DuckDB freed goes back to the system past 8 MiB rather than 128 MiB: the
            # peak RSS of `tooltrace stats` over 300,000 calls not compacted fell from 147 to
            # 113 MiB (2026-12-06, docs/internals/performance-history.md).
            self._db.execute("SET allocator_flush_threshold = '8MiB'")
            self._db.execute("SET allocator_bulk_deallocation_flush_threshold = '8MiB'")
            # Empty until a query reads them (``_load_live``); the views need them to exist.
            self._live_tables.empty(self._db)
        return self._db

    def _load_live(self, tables: frozenset[str] = frozenset(TABLES)
                   ) -> duckdb.DuckDBPyConnection:
        """The connection with tables ``_live_<table>`` of the rows not compacted yet, at least
        for ``tables`` (read when first asked for; every line is read again for tables asked
        for later)."""
        con = self.connection
        missing = [t for t in TABLES if t in tables and t not in self._live_loaded]
        if missing:
            self._sweep_once()
        if missing and self.uncompacted:
            self._live_tables.load(con, self.uncompacted, _cores(), tables=missing)
        self._live_loaded.update(missing)
        return con

    def _sweep_once(self) -> None:
        """Remove what earlier readers kept of segments since compacted or gone (once)."""
        cache = self._live_tables.cache
        if cache is not None and not self._swept:
            self._swept = True
            cache.sweep(self._compacted_names, self.adir / "segments")

    def _tables_read(self, query: str) -> frozenset[str]:
        """The stored tables ``query`` reads through the views, from its parse tree (all of
        them for anything but a SELECT over the views: DDL, PREPARE, a name of its own)."""
        # The text as a literal, not a parameter: DuckDB's Python client imports numpy to bind
        # any parameter but NULL (80 MiB of memory). A NUL ends DuckDB's reading of a text, so
        # no literal can hold it: such a query reads every table.
        if "\x00" in query:
            return frozenset(TABLES)
        row = self.connection.execute(f"SELECT json_serialize_sql({_quote(query)})").fetchone()
        try:
            tree = orjson.loads(row[0]) if row else {"error": True}
        except orjson.JSONDecodeError:
            tree = {"error": True}
        if not isinstance(tree, dict) or tree.get("error"):
            return frozenset(TABLES)
        names: set[str] = set()
        ctes: set[str] = set()
        todo: list[Any] = [tree]
        while todo:
            node = todo.pop()
            if isinstance(node, dict):
                if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
                    names.add(node["table_name"].lower())
                for m in (node.get("cte_map") or {}).get("map") or ():
                    if isinstance(m, dict) and isinstance(m.get("key"), str):
                        ctes.add(m["key"].lower())
                todo.extend(node.values())
            elif isinstance(node, list):
                todo.extend(node)
        out: set[str] = set()
        for name in names - ctes:
            reads = _READS.get(name)
            if reads is None:
                return frozenset(TABLES)
            out.update(reads)
        return frozenset(out)

    def load_hits(self, lo: str, hi_excl: str, ids: int | None = None) -> None:
        """Tables ``_hit_<table>`` of the rows not compacted yet with a call id in
        ``[lo, hi_excl)`` (for a lookup that DuckDB answers); ``ids``: of the first that many
        calls found (enough to name the first matches of a prefix)."""
        self._live_tables.load_columns(self.connection, self.uncompacted.matching(lo, hi_excl, ids),
                                       "_hit_")

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection, with every view in place, every row not compacted yet in
        it, and every core in use."""
        self._load_live()
        return self._views()

    def _views(self) -> duckdb.DuckDBPyConnection:
        """The connection with every view in place and every core in use (the tables of rows
        not compacted yet as loaded so far)."""
        con = self.connection
        if self._single:
            self._single = False
            con.execute(f"SET threads = {_cores()}")
        while self._pending:
            con.execute(self._pending.pop(0))
        return con

    def _load(self) -> None:
        self._stamp = self._manifest_stamp()
        manifest = read_manifest(self.adir)
        done = {s["name"] for s in manifest.get("segments", [])}
        self.uncompacted = LiveSegments([i for i in list_segments(self.adir) if i.name not in done])
        self._compacted_names = done
        self.segments = len(self.uncompacted.infos)
        files = manifest.get("files") or {}
        ranges = manifest.get("ranges") or {}
        lookups = set(manifest.get("lookups") or ())
        self.files_by_table = {}
        for t in TABLES:
            listed: list[_ParquetFile] = []
            for rel in files.get(t, []):
                path = self.adir / rel
                if not path.exists():
                    continue
                r = ranges.get(rel) if isinstance(ranges, dict) else None
                if (isinstance(r, list) and len(r) == 2
                        and isinstance(r[0], str) and isinstance(r[1], str)):
                    listed.append(_ParquetFile(str(path), r[0], r[1], rel, rel in lookups))
                else:  # a manifest from before ranges: this file is read for every lookup
                    listed.append(_ParquetFile(str(path), None, None, rel, rel in lookups))
            self.files_by_table[t] = listed
            self.parquet_files += len(listed)
            src = self._source(t, [f.path for f in listed], "_live_") or f"_live_{t}"
            self._pending.append(f"CREATE OR REPLACE VIEW _all_{t} AS SELECT * FROM {src}")
        self._pending.append(_VIEWS)

    def _source(self, t: str, paths: list[str], live: str | None) -> str | None:
        """A FROM item over ``paths`` and (``live``: the prefix of their tables) table ``t``'s
        rows not compacted yet, or None."""
        parts = []
        if paths:
            # The stored columns only, by name (``read_by_name``): compaction adds the final
            # outcome to ``calls`` files for plain SQL, which the views compute instead.
            files = f"read_parquet([{', '.join(map(_quote, paths))}], union_by_name = true)"
            parts.append(read_by_name(t, files))
        if live and self.uncompacted:
            parts.append(f"SELECT * FROM {live}{t}")
        if not parts:
            return None
        return f"({' UNION ALL '.join(parts)})"

    def _lookup_source(self, t: str, lo: str, hi_excl: str) -> str | None:
        """A FROM item over only what can hold a call id in ``[lo, hi_excl)``: the files whose
        recorded range overlaps it (every file without a range) and the segment lines not
        compacted yet that do (``load_hits`` first)."""
        assert self.files_by_table is not None
        paths = [f.path for f in self.files_by_table[t] if f.overlaps(lo, hi_excl)]
        self.lookup_files.extend(paths)
        return self._source(t, paths, "_hit_")

    # -- generic ------------------------------------------------------------------------------

    def sql(self, query: str, params: dict[str, Any] | None = None) -> QueryResult:
        """Run one query; ``params`` fill ``$name`` placeholders (``ValueError``: no statement)."""
        if params:
            inlined = _inline(query, params)
            if inlined is not None:
                query, params = inlined, None

        def run() -> QueryResult:
            # Only the rows not compacted yet that the query reads are copied into DuckDB
            # (``calls`` and ``stats`` read no step: about six rows a call).
            self._load_live(self._tables_read(query))
            cur = self._views().execute(query, params or None)
            if cur is None:  # DuckDB returns no cursor for a text with no statement in it
                raise ValueError("no SQL statement to run (the text is empty)")
            desc = cur.description or []
            return QueryResult([d[0] for d in desc], cur.fetchall())

        return self._again_if_replaced(run)

    def _again_if_replaced(self, ask: Callable[[], _T]) -> _T:
        """``ask()``; when it failed because compaction replaced a file this store listed, read
        the trail afresh and ask once more."""
        try:
            return ask()
        except Exception:
            if not self._replaced():
                raise
        self.close()
        self.warnings.clear()
        self._reset()
        self._load()
        return ask()

    def _replaced(self) -> bool:
        """Whether compaction replaced a file this store listed: the file is gone and the
        manifest changed since the store read it (a file removed by anyone else stays an
        error)."""
        if self.files_by_table is None or self._manifest_stamp() == self._stamp:
            return False
        return any(not os.path.exists(f.path) for listed in self.files_by_table.values()
                   for f in listed)

    def _manifest_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(manifest_path(self.adir))
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    # -- helpers for the CLI ----------------------------------------------------------------

    def resolve_call_id(self, prefix: str) -> str:
        """The full call id for an id or unique id prefix.

        Raises ``CallNotFound`` or ``AmbiguousCallId``. Only the files whose call-id range
        overlaps the prefix are read, and in them the range predicate lets DuckDB skip every
        row group whose min/max excludes it.
        """
        p = prefix.strip().lower()
        if not _PREFIX_OK.match(p):
            raise CallNotFound(f"not a call id: {prefix[:40]!r}")
        return self._again_if_replaced(lambda: self._resolve(prefix, p))

    def _resolve(self, prefix: str, p: str) -> str:
        upper = p + "\x00" if len(p) == 36 else p[:-1] + chr(ord(p[-1]) + 1)
        self.lookup_files = []
        found = self._direct_ids(p, upper)
        if found is not None:
            return self._one_id(prefix, found)
        if self.files_by_table is None:
            calls: str | None = "_all_calls"
            intents: str | None = "_all_intents"
        else:
            if self.uncompacted:
                self.load_hits(p, upper, 5)
            calls = self._lookup_source("calls", p, upper)
            intents = self._lookup_source("intents", p, upper)
        where = f"call_id = {_quote(p)}" if len(p) == 36 else (
            f"call_id >= {_quote(p)} AND call_id < {_quote(upper)}")
        parts = [f"SELECT call_id FROM {src} WHERE {where}" for src in (calls, intents) if src]
        if not parts:
            raise CallNotFound(f"no call with id {prefix[:40]!r}")
        con = self.con if self.files_by_table is None else self.connection
        rows = con.execute(
            f"SELECT DISTINCT call_id FROM ({' UNION '.join(parts)}) ORDER BY call_id LIMIT 5"
        ).fetchall()
        return self._one_id(prefix, [str(r[0]) for r in rows])

    @staticmethod
    def _one_id(prefix: str, ids: list[str]) -> str:
        if not ids:
            raise CallNotFound(f"no call with id {prefix[:40]!r}")
        if len(ids) > 1:
            raise AmbiguousCallId(prefix, ids[:5])
        return ids[0]

    def _direct_ids(self, lo: str, hi_excl: str) -> list[str] | None:
        """The distinct call ids in ``[lo, hi_excl)`` among calls and intents (sorted, at most
        five), from the lookup files and the rows not compacted yet; None: ask DuckDB."""
        rows = self.window("calls", lo, hi_excl, ids=5)
        more = self.window("intents", lo, hi_excl, ids=5) if rows is not None else None
        if rows is None or more is None:
            self.lookup_files = []
            return None
        return sorted({r[0] for r in rows + more})[:5]

    def window(self, t: str, lo: str, hi_excl: str, ids: int | None = None
               ) -> list[tuple[Any, ...]] | None:
        """Table ``t``'s stored rows with a call id in ``[lo, hi_excl)`` from the lookup files
        and the rows not compacted yet, or None when only DuckDB can answer (``ids``: see
        ``LookupFiles.between``)."""
        if self.files_by_table is None:
            return None
        files = [f for f in self.files_by_table[t] if f.overlaps(lo, hi_excl)]
        self.lookup_files.extend(f.path for f in files)
        return self.lookups.between(t, files, lo, hi_excl, ids)

    def call(self, call_id: str) -> CallDetail:
        """Everything recorded about one call (``call_id`` may be a unique prefix)."""
        p = call_id.strip().lower()
        # A full id needs no resolution query: each query over Parquet costs a pruned scan.
        cid = p if len(p) == 36 and _PREFIX_OK.match(p) else self.resolve_call_id(call_id)
        if self.files_by_table is None:
            return self._call_via_views(call_id, cid)
        return self._again_if_replaced(lambda: find_call(self, call_id, cid))

    def _call_via_views(self, call_id: str, cid: str) -> CallDetail:
        """``call`` for a store without per-file ranges (an archive): through the views."""
        rec = self.sql("SELECT * FROM tool_calls WHERE call_id = $c", {"c": cid}).dicts()
        if self._has_intents is None:
            row = self.con.execute("SELECT count(*) FROM _all_intents").fetchone()
            self._has_intents = bool(row and row[0])
        intent: list[dict[str, Any]] = []
        if self._has_intents:
            intent = self.sql(
                "SELECT * FROM tool_call_intents WHERE call_id = $c", {"c": cid}
            ).dicts()
        if not rec and not intent:
            raise CallNotFound(f"no call with id {call_id[:40]!r}")
        _one_call(cid, rec)
        steps = self.sql(f"SELECT {_STEP_COLS} FROM tool_call_steps WHERE call_id = $c"
                         " ORDER BY started_at, seq", {"c": cid}).dicts()
        return CallDetail(cid, rec[0] if rec else None, steps, intent[0] if intent else None)

    def calls(
        self, *, tool: str | None = None, status: str | None = None, run_id: str | None = None,
        since: str | None = None, limit: int = 50, outcome: str | None = None,
        user: str | None = None, agent: str | None = None,
    ) -> QueryResult:
        """Recent calls, newest first, filtered: ``status`` is what a call returned, ``outcome``
        its final outcome (they differ for a call that returned ``unknown`` and was resolved);
        ``user`` and ``agent`` are the principal's. Each row names its user and agent."""
        where: list[str] = []
        params: dict[str, Any] = {}
        for col, val in (("tool", tool), ("status", status), ("outcome", outcome),
                         ("run_id", run_id), ("principal_user", user),
                         ("principal_agent", agent), ("since", since)):
            if val is None:
                continue
            params[col] = val
            where.append(f"started_at >= CAST(${col} AS TIMESTAMP)" if col == "since"
                         else f"{col} = ${col}")
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        # The limit written out, not a parameter: DuckDB plans ORDER BY ... LIMIT <literal>
        # as a top-N (20 rows kept), with a parameter as a sort of every row.
        query = ("SELECT call_id, started_at, run_id, tool, status, outcome,"
                 " principal_user AS user, principal_agent AS agent, reject_stage, elapsed_ms,"
                 f" summary FROM {{calls}} {clause} ORDER BY call_id DESC LIMIT {int(limit)}")
        self._newest_above = None
        self.segments_read = self.segments
        if not self.uncompacted or self.files_by_table is None or limit <= 0:
            return self.sql(query.format(calls="tool_calls"), params)
        return self._again_if_replaced(lambda: self._newest_calls(query, params, int(limit)))

    def _newest_calls(self, query: str, params: dict[str, Any], limit: int) -> QueryResult:
        """``query`` (``{calls}``: the rows of ``tool_calls``) over the compacted files and the
        newest segments not compacted yet, as few as answer it: segments are read newest first
        (by when they were last written), twice as many each round, until the ``limit`` rows
        found are all newer than any call an unread segment can hold. A record is written
        after its call id was made, so a segment last written at ``t`` holds no UUIDv7 id of
        a time after ``t`` (plus ``CLOCK_SKEW_S``)."""
        assert self.files_by_table is not None
        self._sweep_once()
        written = {i.path: _written_at(i) for i in self.uncompacted.infos}
        order = sorted(self.uncompacted.infos, key=lambda i: written[i.path], reverse=True)
        # No call can be newer than the newest segment's last write (plus the skew), so the
        # segments written within the skew of it can never be left unread: they come first
        # (and one gone since it was listed, which ``_written_at`` puts first, alone).
        first = max(1, sum(1 for i in order
                           if written[i.path] >= written[order[0].path] - CLOCK_SKEW_S))
        read = 0
        rounds: list[str] = []  # the prefixes of the tables each round loaded
        while True:
            take = order[read:max(first, 2 * read)]
            rounds.append(f"_newest{len(rounds)}_")
            self._live_tables.load(self.connection, self.uncompacted, _cores(), rounds[-1],
                                   ("calls", "resolutions"), only=take)
            read += len(take)
            self.segments_read = read
            self._newest_sources = {t: self._union(t, rounds) for t in ("calls", "resolutions")}
            calls = _CALL_ROW.format(
                calls=self._newest_sources["calls"],
                resolved=f"({_RESOLVED.format(src=self._newest_sources['resolutions'])})")
            # The values as literals where they can be, as ``sql`` writes them.
            text = query.format(calls=f"({calls})")
            inlined = _inline(text, params) if params else None
            res = self._views().execute(*((inlined,) if inlined is not None
                                          else (text, params or None)))
            got = QueryResult([d[0] for d in res.description or []], res.fetchall())
            if read == len(order):
                self._newest_above = ""  # every segment was read: nothing unread can hold more
                return got
            above = id_prefix(written[order[read].path] + CLOCK_SKEW_S)
            ids = [str(r[0]) for r in got.rows]
            if len(ids) == limit and all(i[:13] > above and i[14:15] == "7" for i in ids):
                self._newest_above = above
                return got

    def _union(self, t: str, prefixes: list[str]) -> str:
        """A FROM item over table ``t``'s compacted files and its tables of each prefix."""
        assert self.files_by_table is not None
        parts = [f"SELECT * FROM {p}{t}" for p in prefixes]
        paths = [f.path for f in self.files_by_table[t]]
        if paths:
            parts.insert(0, read_by_name(t, f"read_parquet([{', '.join(map(_quote, paths))}],"
                                            " union_by_name = true)"))
        return f"({' UNION ALL '.join(parts)})"

    def call_ids_between(self, ranges: list[tuple[str, str]]) -> list[str]:
        """The distinct ids of ``tool_calls`` in any of ``ranges`` (``[lo, hi)`` each),
        sorted; after a ``calls`` that read only the newest segments, from what it read when
        no unread segment can hold such an id."""
        # The ranges written into the query, not bound: DuckDB's client imports numpy and
        # pandas to bind a list (100 MiB more for a command that lists 20 calls).
        where = " OR ".join(f"(call_id >= {_quote(lo)} AND call_id < {_quote(hi)})"
                            for lo, hi in ranges) or "false"
        above = self._newest_above
        if above is not None and all(lo[:13] > above for lo, _hi in ranges):
            src = self._newest_sources["calls"]
            rows = self._views().execute(
                f"SELECT DISTINCT call_id FROM {src} WHERE {where}").fetchall()
        else:
            rows = self.sql(f"SELECT DISTINCT call_id FROM tool_calls WHERE {where}").rows
        return sorted(str(r[0]) for r in rows)

    def lock_down(self, query: str | None = None) -> bool:
        """Let this store's DuckDB read the trail only: no other file, no ``COPY ... TO``, no
        ``ATTACH``, no extension, and no going back (``enable_external_access = false``,
        ``lock_configuration = true``). False when this kind of store cannot be locked.

        The rows not compacted yet cannot be read once locked: those of every table are read
        first, or with ``query``, those of the tables it reads and of ``tool_calls`` (what
        ``call_ids_between`` and the lookups' fallbacks ask)."""
        where = self._readable_dir()
        if where is None:
            return False
        tables = frozenset(TABLES) if query is None else (
            self._tables_read(query) | frozenset(_READS["tool_calls"]))
        self._load_live(tables)
        con = self._views()  # the views first: they read the files they name when created
        # The rows not compacted yet that are read at each query are in this store's own
        # temporary files.
        dirs = [where, *filter(None, [self._live_tables.directory])]
        con.execute("SET allowed_directories = ["
                    + ", ".join(_quote(d.rstrip(os.sep) + os.sep) for d in dirs) + "]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        return True

    def _readable_dir(self) -> str | None:
        """The one directory a locked-down store may read (None: cannot be locked down)."""
        return str(self.adir.resolve())

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
        self._pending.clear()
        self.lookups.close()
        if self._db is not None:
            self._db.close()
            self._db = None
        self._live_tables.close()

    def __enter__(self) -> AuditStore:
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_store(home: str | os.PathLike[str] | None = None) -> AuditStore:
    """Open the audit trail of a tooltrace home for reading."""
    return AuditStore(home)
