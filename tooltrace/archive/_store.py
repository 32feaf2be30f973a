"""Read the archive with the same views and helpers as a local audit trail.

``ArchiveStore`` is an ``AuditStore`` whose ``tool_calls``, ``tool_call_steps`` and
``tool_call_intents`` views cover the archive instead of a home: the DuckLake tables, or the
day-partitioned Parquet read in place over S3. Every CLI reader (``autopsy``, ``calls``,
``stats``, ``query``) works on it unchanged; lookups by call id prune by the min/max of the
string call id, so one call among millions reads a few row groups.
"""

from __future__ import annotations

from pathlib import Path

from ..audit import TABLES, AuditStore, empty_tables, schemas
from ._connect import ArchiveError, Target, first_line, parse_target, prepare

__all__ = ["ArchiveStore", "open_archive"]


class ArchiveStore(AuditStore):
    """A read-only DuckDB view of an archive (``ducklake:...``, ``s3://...`` or a directory)."""

    def __init__(self, archive: str | None = None) -> None:
        self.target: Target = parse_target(archive)
        super().__init__()

    def _load(self) -> None:
        # Called by AuditStore.__init__ on its fresh in-memory connection.
        import duckdb

        try:
            prepare(self.con, self.target, read_only=True)
            self._load_archive()
        except duckdb.Error as exc:
            self.con.close()
            raise ArchiveError(f"cannot read the archive {self.target.display()}:"
                               f" {first_line(exc)}") from None
        except BaseException:
            self.con.close()
            raise

    def _load_archive(self) -> None:
        con = self.con
        cols = {t: ", ".join(f'"{c}"' for c in s.names) for t, s in schemas().items()}
        empty = empty_tables()
        if self.target.kind == "ducklake":
            have = {r[0] for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake'"
            ).fetchall()}
        for t in TABLES:
            src: str | None = None
            if self.target.kind == "ducklake":
                if t in have:
                    src = f"SELECT {cols[t]} FROM lake.{t}"
            else:
                pattern = f"{self.target.location}/{t}/*/*.parquet"
                n = con.execute("SELECT count(*) FROM glob($p)", {"p": pattern}).fetchone()
                if n and n[0]:
                    self.parquet_files += int(n[0])
                    quoted = pattern.replace("'", "''")
                    src = (f"SELECT {cols[t]} FROM read_parquet('{quoted}',"
                           " hive_partitioning = true, union_by_name = true)")
            if src is None:
                con.register(f"_empty_{t}", empty[t])
                src = f"SELECT * FROM _empty_{t}"
            con.execute(f"CREATE OR REPLACE VIEW _all_{t} AS {src}")
        con.execute(self.VIEWS)


    def _readable_dir(self) -> str | None:
        # A Parquet archive on this machine is one directory; one on object storage or a
        # DuckLake catalog needs its extensions' network access, which the lock would remove.
        if self.target.kind == "parquet" and not self.target.remote:
            return str(Path(self.target.location).resolve())
        return None


def open_archive(archive: str | None = None) -> ArchiveStore:
    """Open an archive for reading (``None``: ``TOOLTRACE_ARCHIVE``)."""
    return ArchiveStore(archive)
