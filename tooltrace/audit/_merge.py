"""Merging small compacted files into larger ones.

Compaction writes one file per table per batch. Background compaction takes segments as they are
sealed, a few MiB at a time, so a busy trail would collect small files by the thousand, and
every query reads each one's footer. So once a table has ``FANIN`` small files (below half its
target size), the smallest of them (as many as fit in the target) are read, sorted by call id
again and written as one file, with its lookup file and call-id range, by compaction's own
writer; the manifest switch that lists the new file drops the old ones (readers see one or the
others, never both), and compaction then removes them. Files of half the target or more are
left alone, so a row is rewritten about once on its way to a file of that size; the memory a
merge needs is bounded by the target.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._manifest import write_manifest

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FANIN", "TARGET_ROWS", "merge_small_files"]

#: Small files (below half the target) a table gathers before they are merged.
FANIN = 8
#: Rows of a file that is not small (steps: about six per call).
TARGET_ROWS = {"calls": 131_072, "steps": 786_432, "intents": 131_072,
               "resolutions": 131_072, "approvals": 131_072}


def _rows(path: Path) -> int | None:
    import pyarrow.parquet as pq

    try:
        return int(pq.read_metadata(path).num_rows)
    except (OSError, ValueError):  # gone, or not readable as Parquet: left as it is
        return None


def merge_small_files(adir: Path, manifest: dict[str, Any],
                      write: Callable[[pa.Table, str], str]) -> list[str]:
    """Merge the small files of each table of ``manifest`` (``write`` stores a table and
    returns its relative path, as compaction's writer does); switch the manifest once if any
    were merged. Returns the files merged away (compaction removes them)."""
    files: dict[str, list[str]] = manifest.get("files") or {}
    gone: list[str] = []
    for t, target in TARGET_ROWS.items():
        listed = files.get(t) or []
        sized = [(n, rel) for rel in listed if (n := _rows(adir / rel)) is not None]
        # Half the target: a merged file is never small again (had a file of 87% of it
        # counted, every pass merged the newest files into it and out again: each row was
        # rewritten two or three times, 2026-12-06).
        small = sorted((n, rel) for n, rel in sized if n < target // 2)
        if len(small) < FANIN:
            continue
        pick: list[str] = []
        total = 0
        for n, rel in small:
            if pick and total + n > target:
                break
            pick.append(rel)
            total += n
        if len(pick) < 2:
            continue
        new = write(_read_all(adir, pick), t)
        keep = [rel for rel in listed if rel not in pick]
        files[t] = [*keep, new]
        ranges = manifest.get("ranges") or {}
        lookups = manifest.get("lookups")
        for rel in pick:
            ranges.pop(rel, None)
            if lookups is not None and rel in lookups:
                lookups.remove(rel)
        gone.extend(pick)
    if gone:
        write_manifest(adir, manifest)
    return gone


def _read_all(adir: Path, rels: list[str]) -> pa.Table:
    """The rows of every file, one table (a column one of them lacks reads as null)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa.concat_tables([pq.read_table(adir / rel) for rel in rels],
                            promote_options="default")
