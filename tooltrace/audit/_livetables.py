"""The rows not compacted yet, as DuckDB tables ``_live_<table>`` (``AuditStore``), made when a
store first needs DuckDB.

The lines come parsed a piece at a time (``_livescan``); each piece's rows go, column by column,
into a private temporary NDJSON file per table, which DuckDB's ``read_json`` then reads in bulk:
no pyarrow (whose list conversions import pandas where it is installed), and never more than one
piece in Python at once. Up to ``COPY_ROWS`` rows the file is copied into a table (joins push
filters, bloom filters, into their inputs); beyond, ``_live_<table>`` is a view that reads the
file at each query, so a trail with a large backlog costs time, not memory. The files go when
the store closes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

from ._segments import ParsedSegment
from ._tables import COLUMNS, DUCKDB_TYPES, TABLES, build_columns

if TYPE_CHECKING:
    import duckdb

__all__ = ["COPY_ROWS", "LiveTables"]

#: Options of ``read_json`` for the rows not yet compacted: every column read as text and cast
#: in SQL, so one malformed value becomes NULL instead of failing the whole trail.
_JSON_OPTS = "format = 'newline_delimited', maximum_object_size = 2147483647"
#: Rows per line of the file the rows not yet compacted pass through.
_CHUNK = 10_000
#: Rows of a table copied into DuckDB's memory; a table with more is read from its file.
COPY_ROWS = 200_000


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

    def __init__(self) -> None:
        self._dir: str | None = None

    def load(self, con: duckdb.DuckDBPyConnection, pieces: Iterable[ParsedSegment],
             cores: int, prefix: str = "_live_") -> dict[str, int]:
        """Create ``<prefix><table>`` for every table from the parsed ``pieces``; return the
        rows of each."""
        rows = dict.fromkeys(TABLES, 0)
        files: dict[str, BinaryIO] = {}
        try:
            for piece in pieces:
                cols = build_columns([piece])
                for t in TABLES:
                    self._append(files, prefix, t, cols[t], rows)
        finally:
            for f in files.values():
                f.close()
        if any(rows.values()):
            con.execute(f"SET threads = {cores}")  # read_json parses in parallel
        try:
            for t in TABLES:
                self._create(con, prefix, t, rows[t])
        finally:
            if any(rows.values()):
                con.execute("SET threads = 1")
        return rows

    def load_columns(self, con: duckdb.DuckDBPyConnection, cols: dict[str, dict[str, list[Any]]],
                     prefix: str) -> None:
        """Create ``<prefix><table>`` from rows already in columns (``build_columns``): the
        few rows of one lookup."""
        rows = dict.fromkeys(TABLES, 0)
        files: dict[str, BinaryIO] = {}
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
        return os.path.join(self._dir, f"{prefix}{t}.jsonl")

    def _append(self, files: dict[str, BinaryIO], prefix: str, t: str,
                col: dict[str, list[Any]], rows: dict[str, int]) -> None:
        names = [c for c, _k in COLUMNS[t]]
        n = len(col[names[0]])
        if n == 0:
            return
        f = files.get(t)
        if f is None:
            f = files[t] = open(self._path(prefix, t), "wb")  # noqa: SIM115 - closed by load
        # Column-major, one line per chunk of rows: one orjson call per chunk instead of one
        # per row, and DuckDB parses the lines in parallel.
        for i in range(0, n, _CHUNK):
            f.write(orjson.dumps({c: col[c][i:i + _CHUNK] for c in names}))
            f.write(b"\n")
        rows[t] += n

    def _create(self, con: duckdb.DuckDBPyConnection, prefix: str, t: str, n: int) -> None:
        spec = COLUMNS[t]
        name = f"{prefix}{t}"
        if n == 0:
            ddl = ", ".join(f'"{c}" {DUCKDB_TYPES[k]}' for c, k in spec)
            con.execute(f"CREATE OR REPLACE TABLE {name} ({ddl})")
            return
        names = [c for c, _k in spec]
        types = ", ".join(f"{_quote(c)}: 'VARCHAR[]'" for c in names)
        unnest = ", ".join(f'unnest("{c}") AS "{c}"' for c in names)
        kind = "TABLE" if n <= COPY_ROWS else "VIEW"
        con.execute(
            f"CREATE OR REPLACE {kind} {name} AS SELECT {', '.join(_cast(c, k) for c, k in spec)}"
            f" FROM (SELECT {unnest} FROM read_json({_quote(self._path(prefix, t))},"
            f" {_JSON_OPTS}, columns = {{{types}}}))")
        if kind == "TABLE":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(prefix, t))

    def close(self) -> None:
        """Remove the files (the views that read them go with the connection)."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

