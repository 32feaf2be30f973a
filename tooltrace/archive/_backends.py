"""Where shipped segments land: a DuckLake catalog (a batch's rows and its ``ship_ledger`` rows
in one transaction, retried on catalog conflicts) or plain Parquet files with deterministic
names and a ``_shipped`` marker written last."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._files import replace_written
from ..audit import ParsedSegment
from ._connect import Target, connect
from ._layout import DATA_TABLES, LedgerEntry, archive_tables, empty_archive_tables

if TYPE_CHECKING:
    import duckdb

__all__ = ["open_backend"]

_SORT = {
    "calls": "call_id",
    "steps": "call_id, seq, started_at",
    "intents": "call_id",
    "resolutions": "call_id, resolved_at",
    "approvals": "call_id, approved_at",
    "lines": "segment, line_no",
}
_ROW_GROUP = 16384
_LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS lake.ship_ledger (segment VARCHAR, writer VARCHAR, n BIGINT,"
    " max_seq BIGINT, last_h VARCHAR, final BOOLEAN, calls BIGINT, steps BIGINT, lines BIGINT,"
    " shipped_at TIMESTAMP, host VARCHAR)")


def _is_conflict(exc: BaseException) -> bool:
    import duckdb

    text = str(exc).lower()
    return isinstance(exc, duckdb.TransactionException) or "conflict" in text or (
        "could not serialize" in text) or "duplicate key" in text


def _retry(fn: Any, attempts: int = 12) -> Any:
    """Run ``fn`` again after catalog conflicts (many machines commit at once)."""
    import duckdb

    for i in range(attempts):
        try:
            return fn()
        except duckdb.Error as exc:
            if i == attempts - 1 or not _is_conflict(exc):
                raise
            time.sleep(min(2.0, 0.05 * 2 ** i) * (0.5 + random.random()))
    return None


class _Backend:
    con: duckdb.DuckDBPyConnection

    def shipped(self, writers: Sequence[str]) -> set[str]:
        raise NotImplementedError

    def ship(self, segs: Sequence[ParsedSegment], entries: Sequence[LedgerEntry]) -> list[
            LedgerEntry]:
        raise NotImplementedError

    def close(self) -> None:
        self.con.close()


class _Lake(_Backend):
    def __init__(self, target: Target, data_path: str | None) -> None:
        self.con = connect(target, data_path=data_path,
                           attach_options={"DATA_INLINING_ROW_LIMIT": 0})
        _retry(self._create)

    def _create(self) -> None:
        con = self.con
        have = {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake'").fetchall()}
        if have >= {*DATA_TABLES, "lines", "ship_ledger"}:
            return
        con.execute("BEGIN")
        try:
            # Small row groups: one call's lookup reads one 16k-row group per file, as locally.
            con.execute(f"CALL lake.set_option('parquet_row_group_size', '{_ROW_GROUP}')")
            con.execute("CALL lake.set_option('parquet_compression', 'zstd')")
            for t, tbl in empty_archive_tables().items():
                if t in have:
                    continue
                con.register("_empty", tbl)
                con.execute(f"CREATE TABLE IF NOT EXISTS lake.{t} AS SELECT * FROM _empty")
                con.unregister("_empty")
                if t in DATA_TABLES:
                    con.execute(f"ALTER TABLE lake.{t} SET PARTITIONED BY (day)")
            con.execute(_LEDGER_DDL)
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                con.execute("ROLLBACK")
            raise

    def shipped(self, writers: Sequence[str]) -> set[str]:
        if not writers:
            return set()
        rows = self.con.execute(
            "SELECT segment FROM lake.ship_ledger WHERE writer IN (SELECT unnest($w))",
            {"w": list(writers)}).fetchall()
        return {r[0] for r in rows}

    def ship(self, segs: Sequence[ParsedSegment], entries: Sequence[LedgerEntry]) -> list[
            LedgerEntry]:
        import pyarrow as pa

        tables = archive_tables(segs)
        ledger = pa.Table.from_pylist([
            {**{k: v for k, v in e.to_dict().items() if k != "shipped_at_us"},
             "shipped_at": e.shipped_at_us} for e in entries])
        ledger = ledger.set_column(ledger.schema.get_field_index("shipped_at"), "shipped_at",
                                   ledger["shipped_at"].cast(pa.timestamp("us")))
        keys = [e.segment for e in entries]
        con = self.con
        for name, tbl in tables.items():
            con.register(f"_s_{name}", tbl)
        con.register("_s_ledger", ledger)

        def attempt() -> list[LedgerEntry]:
            con.execute("BEGIN")
            try:
                landed = {r[0] for r in con.execute(
                    "SELECT segment FROM lake.ship_ledger WHERE segment IN (SELECT unnest($k))",
                    {"k": keys}).fetchall()}
                if landed:
                    # Landed meanwhile (a shipper that ignored the home's lock): skip those.
                    con.execute("ROLLBACK")
                    return [e for e in entries if e.segment in landed]
                for name in (*DATA_TABLES, "lines"):
                    if tables[name].num_rows:
                        con.execute(f"INSERT INTO lake.{name} BY NAME SELECT * FROM _s_{name}"
                                    f" ORDER BY {_SORT[name]}")
                con.execute("INSERT INTO lake.ship_ledger BY NAME SELECT * FROM _s_ledger")
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    con.execute("ROLLBACK")
                raise
            return []

        try:
            landed = _retry(attempt)
        finally:
            for name in tables:
                con.unregister(f"_s_{name}")
            con.unregister("_s_ledger")
        if landed:
            rest = [(s, e) for s, e in zip(segs, entries, strict=True) if e not in landed]
            if not rest:
                return []
            return self.ship([s for s, _ in rest], [e for _, e in rest])
        return list(entries)


class _Plain(_Backend):
    def __init__(self, target: Target) -> None:
        self.root = target.location
        self.local = "://" not in self.root
        self.con = connect(target)

    def shipped(self, writers: Sequence[str]) -> set[str]:
        if self.local and not Path(self.root, "_shipped").is_dir():
            return set()
        out: set[str] = set()
        # One listing per local writer (a prefix on S3), not of the whole fleet's markers.
        for w in writers:
            rows = self.con.execute("SELECT file FROM glob($p)",
                                    {"p": f"{self.root}/_shipped/{w}.*.json"}).fetchall()
            out.update(str(r[0]).rsplit("/", 1)[-1][: -len(".json")] for r in rows)
        return out

    def _copy(self, rel: str, query: str, fmt: str = "parquet") -> None:
        dest = f"{self.root}/{rel}"
        opts = (f"FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {_ROW_GROUP}"
                if fmt == "parquet" else "FORMAT json")

        def copy_to(target: str | Path) -> None:
            self.con.execute(f"COPY ({query}) TO '{target}' ({opts})")

        if not self.local:
            copy_to(dest)
            return
        # Locally, write aside and rename: a reader never sees half a file.
        path = Path(dest)
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_written(path, copy_to)

    def ship(self, segs: Sequence[ParsedSegment], entries: Sequence[LedgerEntry]) -> list[
            LedgerEntry]:
        import pyarrow as pa

        for seg, entry in zip(segs, entries, strict=True):
            tables = archive_tables([seg])
            key = entry.segment
            for name in DATA_TABLES:
                tbl = tables[name]
                if not tbl.num_rows:
                    continue
                self.con.register("_s", tbl)
                try:
                    days = [r[0] for r in self.con.execute(
                        "SELECT DISTINCT day FROM _s ORDER BY 1").fetchall()]
                    for day in days:
                        self._copy(f"{name}/day={day.isoformat()}/{key}.parquet",
                                   f"SELECT * EXCLUDE (day) FROM _s WHERE day = DATE '{day}'"
                                   f" ORDER BY {_SORT[name]}")
                finally:
                    self.con.unregister("_s")
            self.con.register("_s", tables["lines"])
            try:
                self._copy(f"lines/{key}.parquet", f"SELECT * FROM _s ORDER BY {_SORT['lines']}")
            finally:
                self.con.unregister("_s")
            self.con.register("_s", pa.Table.from_pylist([entry.to_dict()]))
            try:
                self._copy(f"_shipped/{key}.json", "SELECT * FROM _s", fmt="json")
            finally:
                self.con.unregister("_s")
        return list(entries)


def open_backend(target: Target, data_path: str | None) -> _Backend:
    """The backend for ``target``: DuckLake for a ``ducklake:`` catalog, else plain Parquet."""
    return _Lake(target, data_path) if target.kind == "ducklake" else _Plain(target)
