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
import threading
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
    SegmentInfo,
    append_digest,
    audit_dir,
    digest_entry,
    list_segments,
    load_key,
    load_signer,
    read_digest,
    read_segment,
    recover_dead_segments,
)
from ..model import CallRecord
from ._backends import _Lake as _Lake
from ._backends import open_backend
from ._connect import ArchiveError, first_line, parse_target
from ._layout import LedgerEntry, ledger_entry, segment_key

if TYPE_CHECKING:
    from ..audit import Signer

__all__ = ["ArchiveShipper", "ShipResult", "ship"]


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




@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _prune(adir: Path, key: bytes, segs: Sequence[ParsedSegment], signer: Signer | None) -> int:
    """Delete shipped segment files, recording first in the digest that they were shipped and
    removed on purpose (with their chain heads, so ``verify`` still links what follows)."""
    with _locked(adir / "compact.lock"):
        append_digest(adir, key, [digest_entry(PRUNED, p, after=SHIPPED) for p in segs],
                      signer=signer)
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
    signer = load_signer(h, create=False)
    recovered = [r.segment for r in recover_dead_segments(adir, key, signer)] if key else []
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
            backend = open_backend(target, data_path)
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
                    append_digest(adir, key, [digest_entry(SHIPPED, p) for p in mine],
                                  signer=signer)
                    if prune:
                        pruned += _prune(adir, key, mine, signer)
            if prune and key is not None:
                pruned += _prune_shipped_earlier(adir, key, sealed, done, fates, signer)
        finally:
            backend.close()
    return ShipResult(target.display(), tuple(shipped), len(sealed) - len(todo), live,
                      tuple(lost), tuple(recovered), pruned)


def _prune_shipped_earlier(adir: Path, key: bytes, sealed: Sequence[SegmentInfo], done: set[str],
                           fates: Mapping[tuple[str, int], SegmentFate],
                           signer: Signer | None) -> int:
    """Prune the segments an earlier run shipped (killed before it pruned), recording first
    those the digest does not yet say were shipped."""
    old = [p for p in (read_segment(s) for s in sealed
                       if segment_key(s.writer, s.n) in done) if p and p.lines]
    unrecorded = [p for p in old if not _recorded_shipped(fates, p)]
    if unrecorded:
        append_digest(adir, key, [digest_entry(SHIPPED, p) for p in unrecorded], signer=signer)
    if old:
        return _prune(adir, key, old, signer)
    return 0


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
