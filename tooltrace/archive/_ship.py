"""Ship sealed audit segments into the archive, exactly once.

A segment is shipped whole or not at all, and the archive itself records which segments
landed, keyed by segment id (``<writer>.<n>``) with its last seq and chain head:

- DuckLake: the segment's rows and its ``ship_ledger`` row are inserted in one DuckLake
  transaction. A ship killed at any point has either committed both or neither (Parquet files
  it uploaded before the commit belong to no snapshot and are never read); a re-run reads the
  ledger and skips what landed. Writers on many machines append concurrently (DuckLake
  retries catalog conflicts); within one home a file lock keeps to one shipper at a time.
- Parquet: every file has a deterministic name (``<table>/day=<d>/<writer>.<n>.parquet``), so
  re-shipping a segment overwrites the same objects instead of adding rows; the marker
  ``_shipped/<writer>.<n>.json`` is written last. A re-run skips segments with a marker and
  rewrites the rest, so a crash mid-segment never leaves a record twice.

Segments of crashed writers are sealed first (their torn tails set aside), so they ship too.
Live segments wait until their writer seals them. The home's segment digest records, keyed, each
segment shipped and, before a shipped segment's file is pruned, that it was removed on purpose
(pruning needs the audit key for that, and is skipped without it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._settings import resolve_home
from ..audit import (
    COMPACTED,
    PRUNED,
    SHIPPED,
    ParsedSegment,
    SegmentFate,
    append_digest,
    audit_dir,
    digest_entry,
    list_segments,
    load_key,
    read_digest,
    read_segment,
    recover_dead_segments,
)
from ..envelope import CallRecord
from ._connect import ArchiveError, Target, connect, first_line, parse_target
from ._layout import (
    DATA_TABLES,
    LedgerEntry,
    archive_tables,
    empty_archive_tables,
    ledger_entry,
    segment_key,
)

if TYPE_CHECKING:
    import duckdb

__all__ = ["ArchiveShipper", "ShipResult", "ship"]

_SORT = {
    "calls": "call_id",
    "steps": "call_id, seq, started_at",
    "intents": "call_id",
    "resolutions": "call_id, resolved_at",
    "lines": "segment, line_no",
}
_ROW_GROUP = 16384
_LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS lake.ship_ledger (segment VARCHAR, writer VARCHAR, n BIGINT,"
    " max_seq BIGINT, last_h VARCHAR, final BOOLEAN, calls BIGINT, steps BIGINT, lines BIGINT,"
    " shipped_at TIMESTAMP, host VARCHAR)")


@dataclass(frozen=True, slots=True)
class ShipResult:
    """What one ship run did."""

    archive: str
    shipped: tuple[LedgerEntry, ...]
    already: int
    live: int
    lost_before_ship: tuple[str, ...]
    recovered: tuple[str, ...]
    pruned: int

    @property
    def calls(self) -> int:
        """Calls shipped by this run."""
        return sum(e.calls for e in self.shipped)

    @property
    def steps(self) -> int:
        """Step rows shipped by this run."""
        return sum(e.steps for e in self.shipped)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``tooltrace audit ship --json``)."""
        return {"archive": self.archive, "segments": len(self.shipped), "calls": self.calls,
                "steps": self.steps, "already_shipped": self.already, "live": self.live,
                "lost_before_ship": list(self.lost_before_ship),
                "recovered": list(self.recovered), "pruned": self.pruned,
                "shipped": [e.to_dict() for e in self.shipped]}


def _counts(seg: ParsedSegment) -> tuple[int, int]:
    calls = steps = 0
    for _no, obj, _raw in seg.lines:
        k = obj.get("k")
        if k == "c":
            calls += 1
            steps += len(obj.get("steps") or ())
        elif k == "s" and len(obj.get("step") or ()) >= 6:
            steps += 1
    return calls, steps


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
        if not self.local:
            self.con.execute(f"COPY ({query}) TO '{dest}' ({opts})")
            return
        # Locally, write aside and rename: a reader never sees half a file.
        path = Path(dest)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.con.execute(f"COPY ({query}) TO '{tmp}' ({opts})")
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

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


def _backend(target: Target, data_path: str | None) -> _Backend:
    return _Lake(target, data_path) if target.kind == "ducklake" else _Plain(target)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _prune(adir: Path, key: bytes, segs: Sequence[ParsedSegment]) -> int:
    """Delete shipped segment files, recording first in the digest that they were shipped and
    removed on purpose (with their chain heads, so ``verify`` still links what follows)."""
    with _locked(adir / "compact.lock"):
        append_digest(adir, key, [digest_entry(PRUNED, p, after=SHIPPED) for p in segs])
    n = 0
    for seg in segs:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(seg.info.path)
            n += 1
    return n


def ship(
    home: str | os.PathLike[str] | None = None,
    archive: str | None = None,
    *,
    data_path: str | None = None,
    segments_per_commit: int = 64,
    prune: bool = False,
) -> ShipResult:
    """Ship every sealed segment of ``home`` not yet in ``archive``; safe to re-run any time.

    ``archive`` defaults to ``TOOLTRACE_ARCHIVE``; ``data_path`` (DuckLake only, default
    ``TOOLTRACE_ARCHIVE_DATA_PATH``) is where a new catalog puts its Parquet files. ``prune``
    deletes local segment files once they are in the archive (and the digest says so; without
    the audit key nothing is pruned). Raises ``ArchiveError`` (message free of secrets) when
    the archive cannot be reached or written; what landed before the error stays landed and is
    skipped next time.
    """
    if segments_per_commit < 1:
        raise ValueError("segments_per_commit must be at least 1")
    target = parse_target(archive)
    h = resolve_home(home)
    adir = audit_dir(h)
    if not adir.is_dir():
        return ShipResult(target.display(), (), 0, 0, (), (), 0)
    key = load_key(h, create=False)
    recovered = [r.segment for r in recover_dead_segments(adir, key)] if key else []
    with _locked(adir / "ship.lock"):
        infos = list_segments(adir)
        sealed = [s for s in infos if not s.live]
        live = len(infos) - len(sealed)
        fates = read_digest(adir).fates()
        # Writers with segments here, and those whose pruned segments may never have shipped.
        writers = sorted({s.writer for s in infos} | {
            w for (w, _), f in fates.items() if f.pruned and not f.shipped})
        import duckdb

        try:
            backend = _backend(target, data_path)
        except duckdb.Error as exc:
            raise ArchiveError(f"cannot open the archive {target.display()}:"
                               f" {first_line(exc)}") from None
        try:
            try:
                done = backend.shipped(writers)
            except duckdb.Error as exc:
                raise ArchiveError(f"cannot read the ship ledger of the archive {target.display()}:"
                                   f" {first_line(exc)}") from None
            todo = [s for s in sealed if segment_key(s.writer, s.n) not in done]
            lost = _lost_before_ship(fates, done)
            shipped: list[LedgerEntry] = []
            pruned = 0
            for i in range(0, len(todo), segments_per_commit):
                segs = [p for p in (read_segment(s) for s in todo[i:i + segments_per_commit])
                        if p is not None and p.lines]
                if not segs:
                    continue
                entries = [ledger_entry(p, *_counts(p)) for p in segs]
                try:
                    landed = backend.ship(segs, entries)
                except duckdb.Error as exc:
                    raise ArchiveError(f"shipping to the archive {target.display()} failed after"
                                       f" {len(shipped)} segments: {first_line(exc)}") from None
                shipped.extend(landed)
                names = {e.segment for e in landed}
                mine = [p for p, e in zip(segs, entries, strict=True) if e.segment in names]
                if key is not None and mine:
                    append_digest(adir, key, [digest_entry(SHIPPED, p) for p in mine])
                    if prune:
                        pruned += _prune(adir, key, mine)
            if prune and key is not None:
                # Segments shipped by an earlier run (killed before it pruned) go now too.
                old = [p for p in (read_segment(s) for s in sealed
                                   if segment_key(s.writer, s.n) in done) if p and p.lines]
                unrecorded = [p for p in old if not _recorded_shipped(fates, p)]
                if unrecorded:
                    append_digest(adir, key, [digest_entry(SHIPPED, p) for p in unrecorded])
                if old:
                    pruned += _prune(adir, key, old)
        finally:
            backend.close()
    return ShipResult(target.display(), tuple(shipped), len(sealed) - len(todo), live,
                      tuple(lost), tuple(recovered), pruned)


def _recorded_shipped(fates: Mapping[tuple[str, int], SegmentFate], seg: ParsedSegment
                      ) -> bool:
    f = fates.get((seg.info.writer, seg.info.n))
    return f is not None and f.shipped


def _lost_before_ship(fates: Mapping[tuple[str, int], SegmentFate], done: set[str]
                      ) -> list[str]:
    """Segments compacted and pruned locally before they were ever shipped."""
    out = []
    for (writer, n), f in sorted(fates.items()):
        if f.pruned and f.pruned.get("after") == COMPACTED and not f.shipped:
            k = segment_key(writer, n)
            if k not in done:
                out.append(k)
    return out


class ArchiveShipper:
    """Ships a home's sealed segments in the background, every ``interval_s`` seconds.

    A sink in form (``emit`` does nothing, so it costs no call any time): put it after the
    ``AuditSink`` in ``ToolRegistry(sinks=[...])`` and the registry's shutdown seals the last
    segment first, then this ships it. Failures are counted (``errors``, ``last_error`` holds
    the scrubbed message) and retried on the next round; they never reach a call.
    """

    name = "archive"

    def __init__(self, home: str | os.PathLike[str] | None = None, archive: str | None = None,
                 *, interval_s: float = 30.0, data_path: str | None = None,
                 prune: bool = False) -> None:
        self.target = parse_target(archive)
        self.home = resolve_home(home)
        self.interval_s = interval_s
        self._data_path = data_path
        self._prune = prune
        self.errors = 0
        self.last_error: str | None = None
        self.shipped_segments = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def emit(self, record: CallRecord) -> None:
        """Start the background loop on first use; records themselves go to the AuditSink."""
        if self._thread is None:
            self.start()

    def start(self) -> None:
        """Start the background loop (idempotent)."""
        with self._lock:
            if self._thread is None:
                t = threading.Thread(target=self._loop, name="tooltrace-archive-ship",
                                     daemon=True)
                self._thread = t
                t.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.ship_now()

    def ship_now(self) -> ShipResult | None:
        """Ship once, now; None (and ``errors`` counted) if it failed."""
        with self._lock:
            try:
                res = ship(self.home, self.target.uri, data_path=self._data_path,
                           prune=self._prune)
            except Exception as exc:
                self.errors += 1
                self.last_error = first_line(exc)
                return None
            self.shipped_segments += len(res.shipped)
            return res

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Ship what is sealed now."""
        return self.ship_now() is not None

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop the loop and ship once more (the audit sink sealed its last segment)."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)
        self.ship_now()
