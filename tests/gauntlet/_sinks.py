"""Where the gauntlet looks for leaks: the raw bytes each sink produced.

``home_blobs`` gathers every file a tooltrace home holds (segments, quarantine, Parquet decoded
to rows, artifacts). The OTLP request bodies come from ``support.otlp.OtlpHttpReceiver`` with
``keep_bodies=True``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import orjson


def parquet_rows(path: Path) -> bytes:
    """A Parquet file's rows as JSON lines (its raw bytes are compressed)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    return b"\n".join(orjson.dumps(r, default=str) for r in rows)


def home_blobs(home: Path) -> Iterator[tuple[str, bytes]]:
    """(label, bytes) for every file under a tooltrace home; Parquet also as decoded rows.

    ``snapshots/`` is left out: it holds copies of workspace files as they were before a call
    wrote them (and their paths), which an exact restore needs, in an owner-only folder that
    ``snapshot_folder_is_owner_only`` checks. Everything shown from it is redacted."""
    for dirpath, _dirs, files in os.walk(home):
        if Path(dirpath).relative_to(home).parts[:1] == ("snapshots",):
            continue
        for name in sorted(files):
            p = Path(dirpath) / name
            rel = str(p.relative_to(home))
            data = p.read_bytes()
            yield rel, data
            if name.endswith(".parquet"):
                yield rel + " (rows)", parquet_rows(p)


def snapshot_folder_is_owner_only(home: Path) -> bool:
    """Whether ``<home>/snapshots`` (if there) is a folder only its owner can enter, and every
    file under it only its owner can read."""
    root = home / "snapshots"
    if not root.exists():
        return True
    files = [p for p in root.rglob("*") if p.is_file()]
    return root.stat().st_mode & 0o077 == 0 and all(p.stat().st_mode & 0o077 == 0 for p in files)
