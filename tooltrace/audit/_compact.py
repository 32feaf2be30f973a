"""Compaction: sealed segments into Parquet files sorted by call id.

Each run turns the sealed segments not yet compacted into one Parquet file per table
(``calls``, ``steps``, ``intents``, ``resolutions``, ``approvals``; an empty one only while
none of its kind exists, so plain SQL always finds each table), sorted by the time-ordered call
id and written in row groups of ``row_group_size`` rows, so a lookup of one call reads the
min/max statistics and then one row group. Call ids are stored as canonical lowercase strings:
DuckDB (and other engines) prune row groups by min/max on strings; they do not for the Parquet
UUID type. The same files work unchanged from object storage (see the README). ``calls`` files
also hold each call's final outcome (``_outcomes``), so plain SQL needs no join with
``resolutions``.

The manifest also records each file's smallest and largest call id (``ranges``), so a reader
looking up one call opens only the files whose range holds it instead of every file's footer.
A manifest written before ranges existed gets them on the next compaction (from the files'
Parquet statistics); until then readers scan every file it lists.

Each run reads the segments a batch at a time (``max_batch_bytes``), so its memory does not
grow with the backlog, and then merges small files (``_merge``): background compaction takes
segments as they are sealed, a few MiB at a time, and left alone a busy trail would collect
thousands of small files.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._files import replace_written
from .._ids import new_call_id
from .._settings import resolve_home
from ._format import load_key
from ._lookupfile import backfill_lookups, drop_unlisted_lookups, write_lookup_for
from ._manifest import (
    COMPACTED,
    PRUNED,
    append_digest,
    digest_entry,
    read_manifest,
    write_manifest,
)
from ._merge import merge_small_files
from ._outcomes import Resolved, latest_resolutions, refresh_outcomes, with_outcomes
from ._recover import Recovered, recover_dead_segments
from ._segments import ParsedSegment, SegmentInfo, audit_dir, list_segments, parse_lines
from ._signing import Signer, load_signer
from ._tables import TABLES, build_tables

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["CompactionResult", "compact", "parquet_id_range"]

_SORT = {
    "calls": [("call_id", "ascending")],
    "steps": [("call_id", "ascending"), ("seq", "ascending"), ("started_at", "ascending")],
    "intents": [("call_id", "ascending")],
    "resolutions": [("call_id", "ascending"), ("resolved_at", "ascending")],
    "approvals": [("call_id", "ascending"), ("approved_at", "ascending")],
}


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What one compaction did."""

    segments: int
    calls: int
    steps: int
    files: tuple[str, ...]
    recovered: tuple[Recovered, ...]
    pruned: bool
    #: Small compacted files merged into larger ones (``_merge``), which replace them.
    merged: int = 0
    #: Another compaction held the lock and ``wait`` was false: this one did nothing.
    busy: bool = False


def compact(
    home: str | os.PathLike[str] | None = None,
    *,
    prune: bool = False,
    row_group_size: int = 16384,
    max_batch_bytes: int = 64 * 1024 * 1024,
    merge: bool = True,
    key: bytes | None = None,
    wait: bool = True,
    recover: bool = True,
    max_bytes: int | None = None,
) -> CompactionResult:
    """Compact every sealed segment not yet in Parquet; safe to run while writers write.

    First seals segments of crashed writers (quarantining torn tails; not with
    ``recover=False``, as background compaction leaves that to writers). Records in the segment
    digest which segments are now in Parquet. ``prune`` deletes the segments once their rows
    are in Parquet, after recording that in the digest (with their chain heads, so ``verify``
    neither reports them missing nor loses the link to the segments that follow). ``merge``
    then merges small compacted files (``_merge``). ``key`` is the audit key (default: the
    home's, as ``load_key`` finds it); ``wait=False`` returns at once (``busy``) when another
    compaction is running instead of waiting for it. ``max_bytes``: take sealed segments until
    about this many bytes of them are in Parquet and leave the rest to the next run (background
    compaction takes a batch per run, so it can stop between two).
    """
    h = resolve_home(home)
    adir = audit_dir(h)
    adir.mkdir(parents=True, exist_ok=True)
    if key is None:
        key = load_key(h, create=True)
    assert key is not None
    lock_fd = os.open(adir / "compact.lock", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        # One compactor at a time; writers never take this lock.
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return CompactionResult(0, 0, 0, (), (), prune, busy=True)
        signer = load_signer(h, create=False)
        recovered = recover_dead_segments(adir, key, signer) if recover else []
        manifest = read_manifest(adir)
        done = {s["name"] for s in manifest.get("segments", [])}
        todo = [s for s in list_segments(adir) if not s.live and s.name not in done]
        if max_bytes is not None:
            todo = _first_bytes(todo, max_bytes)
        files: list[str] = []
        n_calls = n_steps = n_segs = 0
        batches = _batches(todo, max_batch_bytes)
        write = _writer(adir, manifest, row_group_size, key)
        if (_backfill_ranges(adir, manifest) | _backfill_outcomes(adir, manifest, write)
                | backfill_lookups(adir, manifest, key)):
            write_manifest(adir, manifest)
        for batch in batches:
            calls, steps, written = _compact_batch(adir, manifest, batch, write, key, signer,
                                                   prune)
            n_calls += calls
            n_steps += steps
            files.extend(written)
            n_segs += len(batch)
            # Let this batch go before the next one is read, not after.
            del batch
        merged = merge_small_files(adir, manifest, write) if merge else []
        _remove_orphans(adir, manifest)
        return CompactionResult(n_segs, n_calls, n_steps, tuple(files), tuple(recovered), prune,
                                len(merged))
    finally:
        os.close(lock_fd)


def _compact_batch(
    adir: Path, manifest: dict[str, Any], batch: list[_Taken],
    write: Callable[[pa.Table, str], str], key: bytes,
    signer: Signer | None, prune: bool,
) -> tuple[int, int, list[str]]:
    """Move one batch of segments into Parquet and say so in the manifest and the digest
    (then delete them with ``prune``); (calls, steps, files written)."""
    import pyarrow as pa

    tables = {t: pa.concat_tables([tk.tables[t] for tk in batch]) for t in TABLES}
    # Each call's final outcome goes into its row, for plain SQL; a resolution of a call
    # compacted earlier rewrites that call's file (listed in the same switch).
    resolved = latest_resolutions([tables["resolutions"]])
    tables["calls"] = with_outcomes(tables["calls"], resolved)
    refresh_outcomes(adir, manifest, _elsewhere(resolved, tables["calls"]), write)
    written = _write_tables(tables, manifest, write)
    for t, rel in written.items():
        manifest.setdefault("files", {}).setdefault(t, []).append(rel)
    segs = [tk.seg for tk in batch]
    for seg in segs:
        manifest.setdefault("segments", []).append(
            {"name": seg.info.name, "writer": seg.info.writer, "n": seg.info.n})
    # The manifest switch is the commit point: before it these rows are read from the
    # segments, after it from Parquet, never from both.
    write_manifest(adir, manifest)
    # The digest says, keyed, that the rows are in Parquet and (before any file goes) that the
    # segments were removed on purpose, with the chain heads that let ``verify`` link the
    # segments that follow.
    entries = [digest_entry(COMPACTED, seg) for seg in segs]
    if prune:
        entries += [digest_entry(PRUNED, seg, after=COMPACTED) for seg in segs]
    append_digest(adir, key, entries, signer=signer)
    if prune:
        for seg in segs:
            try:
                os.unlink(seg.info.path)
            except FileNotFoundError:
                pass
    return tables["calls"].num_rows, tables["steps"].num_rows, list(written.values())


def _first_bytes(todo: list[SegmentInfo], max_bytes: int) -> list[SegmentInfo]:
    """The first segments of ``todo`` until their sizes reach ``max_bytes`` (at least one)."""
    out: list[SegmentInfo] = []
    size = 0
    for info in todo:
        if out and size >= max_bytes:
            break
        try:
            size += info.path.stat().st_size
        except FileNotFoundError:
            continue
        out.append(info)
    return out


@dataclass(frozen=True, slots=True)
class _Taken:
    """One segment read for compaction: its rows as Arrow tables, and the segment with only
    its last complete line (what the manifest and the digest need of it)."""

    seg: ParsedSegment
    tables: dict[str, pa.Table]


#: Lines of a segment parsed at a time: a parsed line takes several times its bytes as Python
#: objects, so a 16 MiB segment parsed whole held about 200 MiB (2026-12-06, 1M-call backlog).
_LINES_AT_A_TIME = 4096


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off while lines are parsed into rows: they hold no cycles, and
    collecting while they pile up only walked them again and again (a third of compaction's
    CPU: ``tooltrace compact`` of 200,000 calls took 8.3 s of user CPU with it, 5.9 s
    without, 2026-12-06)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _take(info: SegmentInfo) -> _Taken | None:
    """Read one sealed segment into Arrow tables, ``_LINES_AT_A_TIME`` lines at a time; None
    if it vanished (pruned since it was listed)."""
    import pyarrow as pa

    try:
        data = info.path.read_bytes()
    except FileNotFoundError:
        return None
    end = data.rfind(b"\n") + 1
    raws = data.split(b"\n")
    raws.pop()  # what follows the last newline: nothing in a sealed segment
    del data
    parts: list[dict[str, pa.Table]] = []
    last: list[tuple[int, dict[str, Any], bytes]] = []
    for lo in range(0, len(raws), _LINES_AT_A_TIME):
        with _collector_paused():
            lines, _bad = parse_lines(raws[lo:lo + _LINES_AT_A_TIME], lo + 1)
            parts.append(build_tables([ParsedSegment(info, lines, b"", end, [], False)]))
        last = lines[-1:] or last
    tables = ({t: pa.concat_tables([p[t] for p in parts]) for t in TABLES} if parts
              else build_tables([]))
    return _Taken(ParsedSegment(info, last, b"", end, [], False), tables)


def _batches(todo: list[SegmentInfo], max_batch_bytes: int) -> Iterator[list[_Taken]]:
    """The segments still readable, in batches of about ``max_batch_bytes`` each, each read
    only when the one before it is done with."""
    batch: list[_Taken] = []
    size = 0
    for info in todo:
        if size >= max_batch_bytes and batch:
            yield batch
            batch, size = [], 0
        taken = _take(info)
        if taken is None:
            continue
        batch.append(taken)
        size += taken.seg.tail_offset
    if batch:
        yield batch


def _writer(adir: Path, manifest: dict[str, Any], row_group_size: int,
            key: bytes) -> Callable[[pa.Table, str], str]:
    """A function that writes a table of kind ``t`` to a new Parquet file (fsynced, then renamed
    into place) with its lookup file (``_lookupfile``), notes its call-id range in ``manifest``
    and returns the file's relative path."""

    def write(tbl: pa.Table, t: str) -> str:
        import pyarrow.parquet as pq

        tbl = tbl.sort_by(_SORT[t])
        rel = f"parquet/{t}/{new_call_id()}.parquet"
        out = adir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        replace_written(out, lambda tmp: pq.write_table(
            tbl, tmp, row_group_size=row_group_size, compression="zstd", write_statistics=True))
        write_lookup_for(adir, manifest, rel, t, key, tbl)
        # An empty file gets a range no id falls in, so lookups never open it.
        manifest.setdefault("ranges", {})[rel] = _id_range(tbl) or ["", ""]
        return rel

    return write


def _write_tables(tables: dict[str, pa.Table], manifest: dict[str, Any],
                  write: Callable[[pa.Table, str], str]) -> dict[str, str]:
    """Write one batch's tables; return table -> file written. An empty table is written only
    while no file of its kind is listed: plain SQL over the files (``read_parquet`` of
    ``intents/*.parquet``) needs one, even with no rows."""
    written: dict[str, str] = {}
    listed = manifest.get("files") or {}
    for t in TABLES:
        if tables[t].num_rows == 0 and listed.get(t):
            continue
        written[t] = write(tables[t], t)
    return written


def _elsewhere(resolved: Resolved, calls: pa.Table) -> Resolved:
    """The resolutions of calls that are not among ``calls`` (they were compacted earlier)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not resolved:
        return resolved
    ids = pa.array(list(resolved), pa.string())
    here = set(pc.filter(ids, pc.is_in(ids, value_set=calls["call_id"])).to_pylist())
    return {c: v for c, v in resolved.items() if c not in here}


def _backfill_outcomes(adir: Path, manifest: dict[str, Any],
                       write: Callable[[pa.Table, str], str]) -> bool:
    """Give the listed ``calls`` files written before the outcome columns existed those
    columns (from every listed resolution). True when a file was replaced."""
    import pyarrow.parquet as pq

    files = manifest.get("files") or {}
    lacking = False
    for rel in files.get("calls", []):
        try:
            lacking = "outcome" not in pq.read_schema(adir / rel).names
        except (OSError, ValueError):
            continue
        if lacking:
            break
    if not lacking:
        return False
    res = [pq.read_table(adir / rel) for rel in files.get("resolutions", [])
           if (adir / rel).exists()]
    return refresh_outcomes(adir, manifest, latest_resolutions(res), write, missing_only=True)


def _id_range(tbl: pa.Table) -> list[str] | None:
    """[smallest, largest] call id of a table (None when it has no call id)."""
    import pyarrow.compute as pc

    mm = pc.min_max(tbl["call_id"]).as_py()
    if mm["min"] is None or mm["max"] is None:
        return None
    return [str(mm["min"]), str(mm["max"])]


def _backfill_ranges(adir: Path, manifest: dict[str, Any]) -> bool:
    """Give every listed file without a call-id range one, from its Parquet statistics.

    A file whose statistics do not cover every row group stays without one: readers then
    scan it for every lookup, which is slower but never wrong. True when a range was added.
    """
    import pyarrow.parquet as pq

    ranges = manifest.setdefault("ranges", {})
    added = False
    for rels in (manifest.get("files") or {}).values():
        for rel in rels:
            if rel in ranges:
                continue
            try:
                md = pq.read_metadata(adir / rel)
            except (OSError, ValueError):  # gone, or not readable as Parquet: no range
                continue
            lo_hi = parquet_id_range(md)
            if lo_hi is not None:
                ranges[rel] = lo_hi
                added = True
    return added


def parquet_id_range(md: pq.FileMetaData) -> list[str] | None:
    """[smallest, largest] ``call_id`` from a Parquet file's row-group statistics, or None
    when some row group has no usable statistics (or the file has no rows)."""
    names = md.schema.names
    if "call_id" not in names:
        return None
    col = names.index("call_id")
    lo: str | None = None
    hi: str | None = None
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        if rg.num_rows == 0:
            continue
        st = rg.column(col).statistics
        if st is None or not st.has_min_max:
            return None
        a, b = st.min, st.max
        if isinstance(a, bytes):
            a, b = a.decode(), b.decode()
        if not isinstance(a, str) or not isinstance(b, str):
            return None
        lo = a if lo is None or a < lo else lo
        hi = b if hi is None or b > hi else hi
    if lo is None or hi is None:
        return None
    return [lo, hi]


def _remove_orphans(adir: Path, manifest: dict[str, Any]) -> None:
    drop_unlisted_lookups(adir, manifest)
    listed: set[str] = set()
    files = manifest.get("files") or {}
    assert isinstance(files, dict)
    for rels in files.values():
        listed.update(rels)
    for t in TABLES:
        d = adir / "parquet" / t
        if not d.is_dir():
            continue
        for p in d.iterdir():
            if p.suffix == ".parquet" and f"parquet/{t}/{p.name}" not in listed:
                p.unlink()
