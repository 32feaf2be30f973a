"""A trail's lookup files (``_lookupfile``): written by compaction, built for trails compacted
before they existed, and checked by ``verify`` against the Parquet files they copy.

The compaction manifest lists, under ``lookups``, the Parquet files that have one. A file not
listed there (a trail from before lookup files, or one whose ids do not fit) is read with DuckDB,
as before. Lookup files stay in the home: shipping and the archive carry the segments and
Parquet only, and an archive is read with DuckDB.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._files import replace_whole
from ._findings import Finding
from ._lookupfile import (
    LOOKUP_TABLES,
    SUFFIX,
    LookupDamaged,
    LookupFile,
    encode_lookup,
    lookup_rel,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["backfill_lookups", "check_lookups", "drop_unlisted_lookups", "write_lookup_for"]


def write_lookup_for(adir: Path, manifest: dict[str, Any], rel: str, t: str, key: bytes,
                     tbl: pa.Table) -> bool:
    """Write the lookup file of the Parquet file ``rel`` (table ``t``, rows ``tbl`` sorted by
    call id) and list it in ``manifest``; False when the table keeps none."""
    if t not in LOOKUP_TABLES:
        return False
    data = encode_lookup(tbl, t, rel, key)
    if data is None:
        return False
    replace_whole(adir / lookup_rel(rel), data)
    listed = manifest.setdefault("lookups", [])
    if rel not in listed:
        listed.append(rel)
    return True


def _read_sorted(path: Path) -> pa.Table:
    import pyarrow.parquet as pq

    tbl = pq.read_table(path)
    if "call_id" in tbl.column_names:
        tbl = tbl.sort_by([("call_id", "ascending")])
    return tbl


def backfill_lookups(adir: Path, manifest: dict[str, Any], key: bytes) -> bool:
    """Give every listed file of a lookup table that has no lookup file one (a trail compacted
    before they existed, or a lookup file removed). True when one was written."""
    files = manifest.get("files") or {}
    listed = set(manifest.get("lookups") or ())
    added = False
    for t in LOOKUP_TABLES:
        for rel in files.get(t, []):
            if rel in listed and (adir / lookup_rel(rel)).exists():
                continue
            try:
                tbl = _read_sorted(adir / rel)
            except (OSError, ValueError):  # gone, or not readable as Parquet
                continue
            added |= write_lookup_for(adir, manifest, rel, t, key, tbl)
    return added


def drop_unlisted_lookups(adir: Path, manifest: dict[str, Any]) -> None:
    """Forget (in ``manifest``) and remove the lookup files of Parquet files no longer listed
    (replaced by a compaction that rewrote them, or left by one that died)."""
    files = manifest.get("files") or {}
    live = {rel for t in LOOKUP_TABLES for rel in files.get(t, [])}
    if "lookups" in manifest:
        manifest["lookups"] = [rel for rel in manifest["lookups"] if rel in live]
    keep = {lookup_rel(rel) for rel in manifest.get("lookups") or ()}
    for t in LOOKUP_TABLES:
        d = adir / "parquet" / t
        if not d.is_dir():
            continue
        for p in d.iterdir():
            if p.name.endswith(SUFFIX) and f"parquet/{t}/{p.name}" not in keep:
                p.unlink()


def check_lookups(adir: Path, manifest: dict[str, Any], key: bytes, *,
                  rederive: bool = False) -> tuple[int, list[Finding]]:
    """Check each listed lookup file: (files checked, findings). By default every block's
    keyed MAC, the index's order and that the file is whole (what anyone without the key
    cannot forge; about a second per GB); with ``rederive``, also re-derive it from its
    Parquet file and compare them byte for byte (as long as compaction took to write it).
    A lookup file that fails is an error (``edited``), one that is gone too (``deleted``);
    its Parquet file stays the record of truth."""
    files = manifest.get("files") or {}
    table_of = {rel: t for t in LOOKUP_TABLES for rel in files.get(t, [])}
    out: list[Finding] = []
    checked = 0
    for rel in manifest.get("lookups") or ():
        t = table_of.get(rel)
        if t is None:
            continue
        name = lookup_rel(rel)
        path = adir / name
        if not path.exists():
            out.append(Finding("error", "deleted", name, None, None,
                               "lookup file listed in the manifest is missing: deleted"
                               " (autopsy reads the Parquet file instead)"))
            continue
        checked += 1
        why = _damage(adir, rel, t, key, rederive)
        if why is not None:
            out.append(Finding("error", "edited", name, None, None,
                               f"lookup file {why} (edited, cut short or replaced; autopsy"
                               " reads the Parquet file instead): remove it and run"
                               " `tooltrace compact` to rebuild it"))
    return checked, out


def _damage(adir: Path, rel: str, t: str, key: bytes, rederive: bool) -> str | None:
    """What is wrong with the lookup file of ``rel``, or None."""
    path = adir / lookup_rel(rel)
    try:
        lf = LookupFile(str(path), rel, t, key)
    except (OSError, LookupDamaged):
        return "is not whole"
    try:
        lf.check()
    except LookupDamaged:
        return "does not match its MACs"
    finally:
        lf.close()
    if not rederive:
        return None
    try:
        want = encode_lookup(_read_sorted(adir / rel), t, rel, key)
    except (OSError, ValueError):
        return None  # the Parquet file itself is unreadable: not this check's finding
    if want != path.read_bytes():
        return "does not match its Parquet file"
    return None
