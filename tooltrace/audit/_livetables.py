"""The rows not compacted yet, as DuckDB tables ``_live_<table>`` (``AuditStore``), made when a
store first needs DuckDB. Only the tables a query reads need be loaded (``tables``); the others
stay empty until one does.

Each segment is parsed by DuckDB itself (``_livejson``: a sealed one from its file, kept for the
next reader; a live one from a copy of its complete lines) into a Parquet file the tables'
views read at each query. What DuckDB cannot read as Python does (``_livejson`` says what)
comes parsed a piece at a time (``_livescan``); each piece's rows go into a private temporary
CSV file per table (every value as text: a JSON value as its JSON, cast in SQL, so one
malformed value becomes NULL instead of failing the whole trail), which DuckDB's ``read_csv``
then reads in bulk: no pyarrow (whose list conversions import pandas where it is installed), no
query parameters (DuckDB's client imports numpy to bind them), and never more than one piece in
Python at once. Up to ``COPY_ROWS`` rows the file is copied into a table (joins push filters,
bloom filters, into their inputs); beyond, it is a view that reads the file at each query, so a
large backlog costs time, not memory. The files go when the store closes.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import shutil
import tempfile
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from ._livejson import ParsedCache, copy_segment, raw_fields, table_sql
from ._livescan import PIECE, Segment, torn
from ._segments import SegmentInfo
from ._storerecords import ReadIssue
from ._tables import COLUMNS, DUCKDB_TYPES, TABLES, build_columns

if TYPE_CHECKING:
    import duckdb

    from ._livescan import LiveSegments

__all__ = ["COPY_ROWS", "LiveTables"]

#: What stands for None in those files: ``csv`` writes None as ``""``, the empty text.
_NULL = "\\N"
#: Options of ``read_csv`` for the files of rows not compacted yet: as ``csv`` writes them with
#: ``QUOTE_NONNUMERIC`` (every text quoted, ``_NULL`` for None).
_CSV_OPTS = ("header = false, delim = ',', quote = '\"', escape = '\"', auto_detect = false,"
             f" nullstr = '{_NULL}', allow_quoted_nulls = true")
#: DuckDB's own longest CSV line; a longer one is allowed for when a file has one.
_LINE = 2 * 1024 * 1024
#: Rows of a table copied into DuckDB's memory; a table with more is read from its file.
COPY_ROWS = 20_000


def _text(v: Any) -> Any:
    """A parsed value as the CSV field DuckDB then casts: ``_NULL`` for None, as it is when
    ``csv`` writes it as JSON would (a text, a whole or finite number), else its JSON text."""
    if v is None:
        return _NULL
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None  # orjson writes NaN and infinities as null
    return orjson.dumps(v).decode()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _cast(col: str, kind: str) -> str:
    """SQL turning the text of column ``col`` into its kind (NULL where it does not fit)."""
    q = f'"{col}"'
    if kind == "str":
        return q
    if kind == "ts":
        return f"make_timestamp(TRY_CAST({q} AS BIGINT)) AS {q}"
    return f"TRY_CAST({q} AS {DUCKDB_TYPES[kind]}) AS {q}"


class LiveTables:
    """The temporary files behind one store's tables of rows not compacted yet."""

    def __init__(self, cache: ParsedCache | None = None) -> None:
        #: What DuckDB parsed of sealed segments, kept for the next reader (None: not kept).
        self.cache = cache
        self._dir: str | None = None
        # A bound on the longest CSV line written (twice the longest segment line: quotes
        # are doubled), which ``read_csv`` must be told of.
        self._longest = 0
        # What this made in DuckDB, by name: TABLE or VIEW.
        self._made: dict[str, str] = {}
        # Files of sealed segments parsed by DuckDB so far (each is named by its number).
        self._raw = 0

    @property
    def directory(self) -> str | None:
        """Where this keeps its files (None until it made one)."""
        return self._dir

    def empty(self, con: duckdb.DuckDBPyConnection, prefix: str = "_live_") -> None:
        """Create ``<prefix><table>`` for every table, with no rows."""
        for t in TABLES:
            self._create(con, prefix, t, 0)

    def load(self, con: duckdb.DuckDBPyConnection, segments: LiveSegments, cores: int,
             prefix: str = "_live_", tables: Collection[str] = TABLES,
             only: list[SegmentInfo] | None = None) -> dict[str, int]:
        """Create (or replace) ``<prefix><table>`` for each of ``tables`` from ``segments``
        (``only``: from these of them; ``segments.issues`` is then left as it was); return the
        rows read by Python for each (those of the segments DuckDB parses are not counted)."""
        infos = segments.infos if only is None else only
        # One thread parses the sealed segments: a second one doubles DuckDB's memory for
        # them (129 against 179 MiB peak for `tooltrace stats` over 300,000 calls, 2026-12-06).
        # The queries that follow a load get every core.
        con.execute("SET threads = 1")
        found: list[ReadIssue] = []
        parsed, rest = self._parse_with_duckdb(con, infos, tables, found)
        con.execute(f"SET threads = {cores}")
        rows = dict.fromkeys(tables, 0)
        files: dict[str, TextIO] = {}
        try:
            for piece in segments.pieces(rest, note_issues=only is None, found=found):
                if piece.lines:
                    self._longest = max(self._longest,
                                        2 * max(len(r) for _n, _o, r in piece.lines))
                cols = build_columns([piece], tables)
                for t in tables:
                    self._append(files, prefix, t, cols[t], rows)
        finally:
            for f in files.values():
                f.close()
        for t in tables:
            self._create(con, prefix, t, rows[t], parsed)
        return rows

    def _parse_with_duckdb(self, con: duckdb.DuckDBPyConnection, infos: list[SegmentInfo],
                           tables: Collection[str], issues: list[ReadIssue]
                           ) -> tuple[dict[str, list[str]], list[SegmentInfo]]:
        """Parse each segment of ``infos`` with DuckDB (``_livejson``) into a file of its own,
        a live one from a copy of its complete lines (a dead writer's torn tail goes to
        ``issues``), a sealed one unless earlier readers kept one with the tables asked for:
        (the files that hold each table, the segments left for Python, those DuckDB cannot
        read as Python would)."""
        parsed: dict[str, list[str]] = {t: [] for t in tables}
        rest: list[SegmentInfo] = []
        for info in infos:
            got = self._parse_live(con, info, raw_fields(tables), issues) if info.live else (
                self._parse_sealed(con, info, tables))
            if got is None:
                rest.append(info)
                continue
            for t in tables:
                parsed[t].append(got[t] if isinstance(got, dict) else got)
        return parsed, rest

    def _parse_sealed(self, con: duckdb.DuckDBPyConnection, info: SegmentInfo,
                      tables: Collection[str]) -> dict[str, str] | None:
        """The file that holds each of ``tables`` for sealed segment ``info``: kept by earlier
        readers, or parsed now (what is missing) and kept for the next; None: read it with
        Python."""
        cache = self.cache
        have = cache.find(info, tables, self._raw_path) if cache is not None else {}
        missing = [t for t in tables if t not in have]
        if missing:
            out = self._raw_path()
            if not copy_segment(con, info, raw_fields(missing), out):
                return None
            if cache is not None:
                cache.keep(info, missing, out)
            have.update(dict.fromkeys(missing, out))
        return have

    def _raw_path(self) -> str:
        self._raw += 1
        return os.path.join(os.path.dirname(self._path("", "raw")), f"{self._raw}.parquet")

    def _parse_live(self, con: duckdb.DuckDBPyConnection, info: SegmentInfo, fields: list[str],
                    issues: list[ReadIssue]) -> str | None:
        """A live segment's complete lines, copied aside and parsed by DuckDB (never kept for
        the next reader: the segment grows); None: read it with Python."""
        seg = Segment(info)
        if seg.fd is None:
            return None
        copy = self._raw_path() + ".jsonl"
        try:
            whole, lines = 0, 0
            with open(copy, "wb") as f:
                pos = 0
                while pos < seg.size:
                    buf = os.pread(seg.fd, min(PIECE, seg.size - pos), pos)
                    if not buf:
                        break
                    end = buf.rfind(b"\n") + 1
                    if end:
                        whole, lines = pos + end, lines + buf.count(b"\n")
                    f.write(buf)
                    pos += len(buf)
                f.truncate(whole)
            out = self._raw_path()
            if not copy_segment(con, seg.info, fields, out, source=copy):
                return None
            if pos > whole and not seg.alive:
                issues.append(torn(seg.info.name, lines + 1, pos - whole))
            return out
        except OSError:
            return None
        finally:
            seg.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(copy)

    def load_columns(self, con: duckdb.DuckDBPyConnection, cols: dict[str, dict[str, list[Any]]],
                     prefix: str) -> None:
        """Create ``<prefix><table>`` from rows already in columns (``build_columns``): the
        few rows of one lookup."""
        rows = dict.fromkeys(TABLES, 0)
        files: dict[str, TextIO] = {}
        try:
            for t in TABLES:
                self._append(files, prefix, t, cols[t], rows)
        finally:
            for f in files.values():
                f.close()
        for t in TABLES:
            self._create(con, prefix, t, rows[t])

    def _path(self, prefix: str, t: str) -> str:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="tooltrace-live-")
        return os.path.join(self._dir, f"{prefix}{t}.csv")

    def _append(self, files: dict[str, TextIO], prefix: str, t: str,
                col: dict[str, list[Any]], rows: dict[str, int]) -> None:
        # A view made by an earlier load reads this file: the new rows go to a file of their
        # own (the view is replaced with the table, or a view of the new file).
        if self._dir is not None and t not in files and os.path.exists(self._path(prefix, t)):
            os.unlink(self._path(prefix, t))
        names = [c for c, _k in COLUMNS[t]]
        n = len(col[names[0]])
        if n == 0:
            return
        f = files.get(t)
        if f is None:
            f = files[t] = open(  # noqa: SIM115 - closed by load
                self._path(prefix, t), "w", newline="", encoding="utf-8")
        # Most values are texts or whole numbers already: only the rest go through _text.
        csv.writer(f, quoting=csv.QUOTE_NONNUMERIC).writerows(zip(*(
            [v if v.__class__ is str or v.__class__ is int else _text(v) for v in col[c]]
            for c in names), strict=True))
        rows[t] += n

    def _create(self, con: duckdb.DuckDBPyConnection, prefix: str, t: str, n: int,
                parsed: dict[str, list[str]] | None = None) -> None:
        spec = COLUMNS[t]
        name = f"{prefix}{t}"
        # What this made before (an empty table, made before the views) makes way. (Asking
        # information_schema instead costs DuckDB 80 MiB of memory.)
        for old in (name, f"{name}_rows"):
            there = self._made.pop(old, None)
            if there is not None:
                con.execute(f"DROP {there} {old}")
        files_of_t = parsed.get(t) if parsed else None
        if files_of_t:
            # The rows DuckDB parsed stay in their files, read at each query; those Python
            # read (what DuckDB cannot read as it does) are a table of their own beside them.
            files = f"read_parquet([{', '.join(map(_quote, files_of_t))}], union_by_name = true)"
            typed = ", ".join(f'CAST("{c}" AS {DUCKDB_TYPES[k]}) AS "{c}"' for c, k in spec)
            parts = [f"SELECT {typed} FROM ({table_sql(t, files)})"]
            if n:
                self._create_rows(con, f"{name}_rows", t, n, self._path(prefix, t))
                parts.append(f"SELECT * FROM {name}_rows")
            con.execute(f"CREATE VIEW {name} AS {' UNION ALL '.join(parts)}")
            self._made[name] = "VIEW"
            return
        self._create_rows(con, name, t, n, self._path(prefix, t))

    def _create_rows(self, con: duckdb.DuckDBPyConnection, name: str, t: str, n: int,
                     path: str) -> None:
        """Table (or view) ``name`` of the ``n`` rows of table ``t`` in CSV file ``path``."""
        spec = COLUMNS[t]
        if n == 0:
            ddl = ", ".join(f'"{c}" {DUCKDB_TYPES[k]}' for c, k in spec)
            con.execute(f"CREATE TABLE {name} ({ddl})")
            self._made[name] = "TABLE"
            return
        types = ", ".join(f"{_quote(c)}: 'VARCHAR'" for c, _k in spec)
        kind = "TABLE" if n <= COPY_ROWS else "VIEW"
        # A few rows (one lookup's) are bounded by their file; the others by the lines read.
        line = max(_LINE, min(self._longest or _LINE, os.path.getsize(path)) + 4096)
        con.execute(
            f"CREATE {kind} {name} AS SELECT {', '.join(_cast(c, k) for c, k in spec)}"
            f" FROM read_csv({_quote(path)}, {_CSV_OPTS}, max_line_size = {line},"
            f" buffer_size = {max(16 * _LINE, 2 * line)}, columns = {{{types}}})")
        self._made[name] = kind
        if kind == "TABLE":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def close(self) -> None:
        """Remove the files (the views that read them go with the connection)."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

