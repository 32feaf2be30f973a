"""The rows not compacted yet, copied into DuckDB tables ``_live_<table>`` when a store first
needs DuckDB (``AuditStore``)."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

import orjson

from ._tables import COLUMNS, DUCKDB_TYPES, TABLES

if TYPE_CHECKING:
    import duckdb

__all__ = ["load_live"]

#: Options of ``read_json`` for the rows not yet compacted: every column read as text and cast
#: in SQL, so one malformed value becomes NULL instead of failing the whole trail.
_JSON_OPTS = "format = 'newline_delimited', maximum_object_size = 2147483647"
#: Rows per line of the file the rows not yet compacted pass through.
_CHUNK = 10_000



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


def load_live(con: duckdb.DuckDBPyConnection, cols: dict[str, dict[str, list[Any]]] | None,
              cores: int) -> None:
    """Copy the rows not yet compacted into DuckDB tables ``_live_<table>``.

    Copied rather than scanned in place: joins push filters (bloom filters) into their
    inputs. The rows go through a private temporary NDJSON file (column lists, a chunk of
    rows per line) that DuckDB's ``read_json`` loads in bulk: no pyarrow, whose list
    conversions import pandas where it is installed.
    """
    rows_in = sum(len(cols[t][COLUMNS[t][0][0]]) for t in TABLES) if cols else 0
    tmpdir: str | None = None
    if rows_in:
        con.execute(f"SET threads = {cores}")  # read_json parses in parallel
    try:
        for t in TABLES:
            spec = COLUMNS[t]
            n = len(cols[t][spec[0][0]]) if cols is not None else 0
            if n == 0:
                ddl = ", ".join(f'"{c}" {DUCKDB_TYPES[k]}' for c, k in spec)
                con.execute(f"CREATE TABLE _live_{t} ({ddl})")
                continue
            assert cols is not None
            if tmpdir is None:
                import tempfile

                tmpdir = tempfile.mkdtemp(prefix="tooltrace-live-")
            path = os.path.join(tmpdir, f"{t}.jsonl")
            names = [c for c, _k in spec]
            col = cols[t]
            # Column-major, one line per chunk of rows: one orjson call per chunk instead
            # of one per row, and DuckDB parses the lines in parallel.
            with open(path, "wb") as f:
                f.write(b"\n".join(
                    orjson.dumps({c: col[c][i:i + _CHUNK] for c in names})
                    for i in range(0, n, _CHUNK)))
            types = ", ".join(f"{_quote(c)}: 'VARCHAR[]'" for c in names)
            rows = ", ".join(f'unnest("{c}") AS "{c}"' for c in names)
            con.execute(
                f"CREATE TABLE _live_{t} AS SELECT {', '.join(_cast(c, k) for c, k in spec)}"
                f" FROM (SELECT {rows} FROM read_json({_quote(path)}, {_JSON_OPTS},"
                f" columns = {{{types}}}))")
    finally:
        if rows_in:
            con.execute("SET threads = 1")
        if tmpdir is not None:
            for name in os.listdir(tmpdir):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(tmpdir, name))
            os.rmdir(tmpdir)

