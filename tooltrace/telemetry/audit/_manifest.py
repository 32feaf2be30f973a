"""The compaction manifest: which segments are in Parquet, and which Parquet files are live.

Readers trust only the Parquet files the manifest lists, so a compaction that dies half way
leaves at worst an orphan file nobody reads (and the next compaction removes), never a record
counted twice.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

__all__ = ["manifest_path", "read_manifest", "write_manifest"]


def manifest_path(adir: Path) -> Path:
    """``<home>/audit/parquet/manifest.json``."""
    return adir / "parquet" / "manifest.json"


def read_manifest(adir: Path) -> dict[str, Any]:
    """The manifest, or an empty one."""
    try:
        data = orjson.loads(manifest_path(adir).read_bytes())
    except FileNotFoundError:
        return {"version": 1, "segments": [], "files": {}}
    if not isinstance(data, dict):
        return {"version": 1, "segments": [], "files": {}}
    return data


def write_manifest(adir: Path, manifest: dict[str, Any]) -> None:
    """Replace the manifest atomically (write aside, fsync, rename)."""
    path = manifest_path(adir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".manifest.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
