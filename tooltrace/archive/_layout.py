"""The archive's tables: the local audit tables plus the chain lines and the ship ledger.

Both targets store the same tables:

- ``calls``, ``steps``, ``intents``, ``resolutions``, ``approvals``: the columns of the local
  Parquet files (``tooltrace.audit.schemas``), call ids as canonical lowercase strings so
  readers prune row groups by min/max, partitioned by ``day`` (UTC date of ``started_at``, of
  ``resolved_at`` for resolutions, of ``approved_at`` for approvals).
- ``lines``: every line of every shipped segment as written (``writer``, ``segment``, ``n``,
  ``line_no``, ``seq``, ``k``, ``line``), so ``verify`` checks shipped hash chains and keyed
  checkpoints (in written order: a moved line is still caught).
- ``ship_ledger`` (DuckLake) or ``_shipped/<writer>.<n>.json`` markers (Parquet): one entry
  per shipped segment with its last seq and chain head; what makes shipping exactly-once.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..audit import TABLES, ParsedSegment, build_tables, schemas

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "DATA_TABLES",
    "DAY_COLUMN",
    "LedgerEntry",
    "archive_tables",
    "ledger_entry",
    "lines_schema",
    "segment_key",
]

#: Tables whose rows readers query (the local audit tables).
DATA_TABLES = TABLES
#: The column each data table is partitioned by.
DAY_COLUMN = {"calls": "started_at", "steps": "started_at", "intents": "started_at",
              "resolutions": "resolved_at", "approvals": "approved_at"}


def segment_key(writer: str, n: int) -> str:
    """The id of a segment in the archive: ``<writer>.<n:06d>`` (its file name's stem)."""
    return f"{writer}.{n:06d}"


def lines_schema() -> pa.Schema:
    """Schema of the ``lines`` table."""
    import pyarrow as pa

    return pa.schema([("writer", pa.string()), ("segment", pa.string()), ("n", pa.int64()),
                      ("line_no", pa.int64()), ("seq", pa.int64()), ("k", pa.string()),
                      ("line", pa.string())])


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One shipped segment: the ledger row that says it landed, exactly once."""

    segment: str
    writer: str
    n: int
    max_seq: int
    last_h: str
    final: bool
    calls: int
    steps: int
    lines: int
    shipped_at_us: int
    host: str

    def to_dict(self) -> dict[str, Any]:
        """JSON / row form."""
        return {"segment": self.segment, "writer": self.writer, "n": self.n,
                "max_seq": self.max_seq, "last_h": self.last_h, "final": self.final,
                "calls": self.calls, "steps": self.steps, "lines": self.lines,
                "shipped_at_us": self.shipped_at_us, "host": self.host}


def ledger_entry(seg: ParsedSegment, calls: int, steps: int) -> LedgerEntry:
    """The ledger entry for a sealed segment about to ship."""
    last_no, last_obj, _raw = seg.lines[-1]
    seq = last_obj.get("seq")
    return LedgerEntry(
        segment_key(seg.info.writer, seg.info.n), seg.info.writer, seg.info.n,
        int(seq) if isinstance(seq, int) else last_no, seg.last_hash or "",
        bool(last_obj.get("final")), calls, steps, len(seg.lines), time.time_ns() // 1000,
        socket.gethostname() or f"pid-{os.getpid()}")


def archive_tables(segments: Sequence[ParsedSegment]) -> dict[str, pa.Table]:
    """Arrow tables of the data tables (with ``day``) and ``lines`` for ``segments``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tables = build_tables(segments)
    out: dict[str, pa.Table] = {}
    for t in DATA_TABLES:
        tbl = tables[t]
        day = pc.cast(pc.cast(tbl[DAY_COLUMN[t]], pa.timestamp("us")), pa.date32())
        out[t] = tbl.append_column("day", day)
    cols: dict[str, list[Any]] = {f.name: [] for f in lines_schema()}
    for seg in segments:
        name = segment_key(seg.info.writer, seg.info.n)
        for no, obj, raw in seg.lines:
            seq = obj.get("seq")
            cols["line_no"].append(no)
            cols["writer"].append(seg.info.writer)
            cols["segment"].append(name)
            cols["n"].append(seg.info.n)
            cols["seq"].append(seq if isinstance(seq, int) else None)
            cols["k"].append(str(obj.get("k")))
            cols["line"].append(raw.decode("utf-8", "replace"))
    out["lines"] = pa.Table.from_pydict(cols, schema=lines_schema())
    return out


def empty_archive_tables() -> dict[str, pa.Table]:
    """The archive tables with no rows (their schemas, for creating tables)."""
    import pyarrow as pa

    out: dict[str, pa.Table] = {}
    for t, s in schemas().items():
        out[t] = s.append(pa.field("day", pa.date32())).empty_table()
    out["lines"] = lines_schema().empty_table()
    return out
