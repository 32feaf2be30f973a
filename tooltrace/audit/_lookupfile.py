"""The lookup file beside each compacted Parquet file: one call's rows found without DuckDB.

DuckDB decodes Parquet a whole row group at a time (16,384 rows of every column), which is most
of a lookup by call id at millions of calls. So compaction writes, next to each ``calls``,
``steps``, ``intents`` and ``resolutions`` file, ``<name>.lookup``: the same rows, sorted by
call id, in small zlib-compressed blocks of ``CALLS_PER_BLOCK`` calls (a call's rows never span
two blocks), behind a sorted array of each block's first call id. A lookup maps the file,
binary-searches the array and decompresses one block.

Layout (little-endian)::

    header   magic "TTLOOK1\n", block count (u32), id width (u32), rows (u64), index offset (u64)
    blocks   zlib(orjson([column, ...])): the block's rows column by column, the table's stored
             columns (``COLUMNS``) in order, timestamps as integer microseconds
    index    per block: its first call id (``ID_WIDTH`` bytes, NUL-padded), offset (u64),
             length (u32), MAC (32 bytes)

The Parquet file stays the record of truth; a lookup file is a second copy of it, so it is
tamper-evident twice over. Each block carries a keyed BLAKE2b MAC (the audit key) over the
Parquet file's name, the table, the block's number and the block count, the range of call ids
the block answers for (from its first id to the next block's) and its bytes: a reader that
finds a block whose MAC does not match, an id outside the range it lands in, or a file cut
short raises ``LookupDamaged`` and the store reads the Parquet instead. ``tooltrace verify``
re-derives every lookup file from its Parquet file and compares them byte for byte.

BLAKE2b comes from ``_blake2`` directly when it can, and MACs are compared in constant time by
``_operator._compare_digest`` (what ``hmac.compare_digest`` is): ``hashlib`` and ``hmac`` load
OpenSSL first, which costs more than a lookup. Interpreters without those builtin modules use
``hashlib`` and ``hmac``.

A trail's lookup files are written by compaction, built for trails compacted before they
existed, and checked by ``verify`` against the Parquet files they copy.

The compaction manifest lists, under ``lookups``, the Parquet files that have one. A file not
listed there (a trail from before lookup files, or one whose ids do not fit) is read with DuckDB,
as before. Lookup files stay in the home: shipping and the archive carry the segments and
Parquet only, and an archive is read with DuckDB.
"""

from __future__ import annotations

import datetime as dt
import mmap
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .._settings import audit_key
from ._tables import COLUMNS

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter without the builtin module
    from hashlib import blake2b
try:
    from _operator import _compare_digest as _same_mac
except ImportError:  # pragma: no cover - an interpreter without the builtin module
    from hmac import compare_digest as _same_mac  # type: ignore[no-redef]
from .._files import replace_whole
from ._findings import Finding

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CALLS_PER_BLOCK",
    "ID_WIDTH",
    "LOOKUP_TABLES",
    "SUFFIX",
    "LookupDamaged",
    "LookupFile",
    "backfill_lookups",
    "check_lookups",
    "drop_unlisted_lookups",
    "encode_lookup",
    "lookup_rel",
    "read_key",
    "row_values",
    "write_lookup_for",
]


#: The tables that get a lookup file (what ``autopsy`` reads; approvals are listed elsewhere).
LOOKUP_TABLES = ("calls", "steps", "intents", "resolutions")
#: Calls per compressed block: larger blocks compress better, smaller ones decode faster.
CALLS_PER_BLOCK = 64
#: Bytes kept for a block's first call id; a file with a longer id gets no lookup file.
ID_WIDTH = 40
#: A lookup file's name is its Parquet file's with this suffix instead of ``.parquet``.
SUFFIX = ".lookup"
_MAGIC = b"TTLOOK1\n"
_HEAD = struct.Struct("<8sIIQQ")
_ENTRY = struct.Struct(f"<{ID_WIDTH}sQI32s")
_PERSON = b"tt-lookup-v1"
_LEVEL = 1
_GROUP = 512
_EPOCH = dt.datetime(1970, 1, 1)
_KEY_FILE = "audit.key"


class LookupDamaged(Exception):
    """A lookup file is not what compaction wrote (edited, cut short, or not authentic): read
    the Parquet file instead and run ``tooltrace verify``."""


def lookup_rel(parquet_rel: str) -> str:
    """The lookup file of a Parquet file (same directory, ``SUFFIX``)."""
    stem = parquet_rel[:-8] if parquet_rel.endswith(".parquet") else parquet_rel
    return stem + SUFFIX


def read_key(home: Path) -> bytes | None:
    """The audit key, as ``load_key(home, create=False)`` finds it (without loading the
    writer's line format): ``TOOLTRACE_AUDIT_KEY`` > ``<home>/audit.key`` > None."""
    env = audit_key()
    if env is not None:
        return env
    try:
        return (home / _KEY_FILE).read_bytes().strip()
    except FileNotFoundError:
        return None


def _mac(key: bytes, rel: str, t: str, no: int, n: int, start: str, end: str,
         blob: bytes) -> bytes:
    # BLAKE2b keys are at most 64 bytes; the audit key is hashed down to 32 first.
    k = blake2b(key, digest_size=32, person=_PERSON).digest()
    h = blake2b(key=k, digest_size=32, person=_PERSON)
    h.update(orjson.dumps([rel, t, no, n, start, end]))
    h.update(blob)
    return h.digest()


def _columns(tbl: pa.Table, t: str, lo: int, hi: int) -> list[list[Any]]:
    """Rows ``lo:hi`` of the table, column by column (stored columns, timestamps as integer
    microseconds); a column the table lacks reads as None, as ``read_by_name`` does."""
    import pyarrow as pa

    part = tbl.slice(lo, hi - lo)
    out: list[list[Any]] = []
    for c, kind in COLUMNS[t]:
        if c not in tbl.column_names:
            out.append([None] * (hi - lo))
            continue
        col = part[c]
        out.append((col.cast(pa.int64()) if kind == "ts" else col).to_pylist())
    return out


def _block_starts(ids: pa.ChunkedArray) -> list[int] | None:
    """The row where each block begins (every ``CALLS_PER_BLOCK``-th new call id), or None
    when the ids are not in order."""
    import pyarrow.compute as pc

    n = len(ids)
    if n < 2:
        return [0] if n else []
    a, b = ids.slice(0, n - 1), ids.slice(1)
    if not pc.all(pc.less_equal(a, b)).as_py():
        return None
    new = pc.indices_nonzero(pc.not_equal(a, b)).to_pylist()
    return [0, *(i + 1 for i in new[CALLS_PER_BLOCK - 1::CALLS_PER_BLOCK])]


def _representable(tbl: pa.Table, t: str) -> bool:
    """Whether every value survives the JSON of a block unchanged (orjson writes NaN and
    infinities as null, so a table holding one keeps no lookup file)."""
    import pyarrow.compute as pc

    for c, kind in COLUMNS[t]:
        if kind == "f64" and c in tbl.column_names:
            col = tbl[c]
            if col.null_count < len(col) and not pc.all(pc.is_finite(col)).as_py():
                return False
    return True


def encode_lookup(tbl: pa.Table, t: str, rel: str, key: bytes) -> bytes | None:
    """The lookup file of ``tbl`` (table ``t``, written as ``rel``, sorted by call id), or
    None when it cannot hold it (an id longer than ``ID_WIDTH`` bytes, ids out of order, a
    non-finite number). Rows without a call id are left out: no lookup finds them."""
    import pyarrow.compute as pc

    if not _representable(tbl, t):
        return None
    tbl = tbl.filter(pc.is_valid(tbl["call_id"]))
    starts = _block_starts(tbl["call_id"])
    if starts is None:
        return None
    ends = [*starts[1:], tbl.num_rows]
    blocks: list[bytes] = []
    firsts: list[str] = []
    # Converted to Python a few hundred blocks at a time, so memory stays bounded.
    for g in range(0, len(starts), _GROUP):
        lo, hi = starts[g], ends[min(g + _GROUP, len(starts)) - 1]
        cols = _columns(tbl, t, lo, hi)
        ci = [c for c, _k in COLUMNS[t]].index("call_id")
        for a, b in zip(starts[g:g + _GROUP], ends[g:g + _GROUP], strict=True):
            first = cols[ci][a - lo]
            if len(first.encode()) > ID_WIDTH or "\x00" in first:
                return None
            firsts.append(first)
            blocks.append(zlib.compress(orjson.dumps([c[a - lo:b - lo] for c in cols]),
                                        _LEVEL))
    return _assemble(blocks, firsts, t, rel, key, tbl.num_rows)


def _assemble(blocks: list[bytes], firsts: list[str], t: str, rel: str, key: bytes,
              rows: int) -> bytes:
    n = len(blocks)
    off = _HEAD.size
    index = []
    for no, blob in enumerate(blocks):
        start = "" if no == 0 else firsts[no]
        end = firsts[no + 1] if no + 1 < n else ""
        mac = _mac(key, rel, t, no, n, start, end, blob)
        index.append(_ENTRY.pack(firsts[no].encode(), off, len(blob), mac))
        off += len(blob)
    head = _HEAD.pack(_MAGIC, n, ID_WIDTH, rows, off)
    return b"".join([head, *blocks, *index])


def row_values(t: str, row: list[Any]) -> tuple[Any, ...]:
    """A row as stored in a block, with its timestamps as the naive UTC datetimes DuckDB
    returns for them."""
    out = list(row)
    for i, (_c, kind) in enumerate(COLUMNS[t]):
        if kind == "ts" and out[i] is not None:
            out[i] = _EPOCH + dt.timedelta(microseconds=out[i])
    return tuple(out)


class LookupFile:
    """One lookup file, mapped; raises ``LookupDamaged`` when it is not what compaction wrote
    for the Parquet file ``rel`` of table ``t`` (with the audit key ``key``)."""

    def __init__(self, path: str, rel: str, t: str, key: bytes) -> None:
        self.path = path
        self._rel, self._t, self._key = rel, t, key
        #: Where the call id is in a row.
        self.ci = [c for c, _k in COLUMNS[t]].index("call_id")
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _HEAD.size:
                raise LookupDamaged(f"{rel}: lookup file cut short ({size} bytes)")
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        magic, self._n, width, _rows, self._index = _HEAD.unpack_from(self._map, 0)
        if (magic != _MAGIC or width != ID_WIDTH
                or self._index + self._n * _ENTRY.size != size):
            self._map.close()
            raise LookupDamaged(f"{rel}: lookup file is not whole (edited or cut short)")

    def close(self) -> None:
        """Unmap the file."""
        self._map.close()

    def _first(self, no: int) -> str:
        raw = self._map[self._index + no * _ENTRY.size:self._index + no * _ENTRY.size
                        + ID_WIDTH]
        return raw.rstrip(b"\x00").decode("utf-8", "replace")

    def _block_of(self, cid: str) -> int:
        """The block that answers for ``cid``: the last whose first id is <= it (block 0
        answers for every id before its first)."""
        lo, hi = 0, self._n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._first(mid) <= cid:
                lo = mid
            else:
                hi = mid
        return lo

    def _verified(self, no: int, start: str, end: str) -> bytes:
        """Block ``no``'s bytes, checked against its MAC (``start``/``end``: the range of
        ids the index says it answers for)."""
        _first, off, length, mac = _ENTRY.unpack_from(self._map,
                                                      self._index + no * _ENTRY.size)
        if off + length > self._index or off < _HEAD.size:
            raise LookupDamaged(f"{self._rel}: block {no} lies outside the file")
        blob = self._map[off:off + length]
        if not _same_mac(_mac(self._key, self._rel, self._t, no, self._n, start, end, blob), mac):
            raise LookupDamaged(f"{self._rel}: block {no} does not match its MAC (edited, or"
                                " not written with this trail's key)")
        return blob

    def _block(self, no: int) -> tuple[list[list[Any]], str, str]:
        """Block ``no``'s columns and the range of ids it answers for, checked against its
        MAC."""
        start = "" if no == 0 else self._first(no)
        end = self._first(no + 1) if no + 1 < self._n else ""
        try:
            cols = orjson.loads(zlib.decompress(self._verified(no, start, end)))
        except (zlib.error, ValueError):
            raise LookupDamaged(f"{self._rel}: block {no} cannot be read") from None
        if not isinstance(cols, list) or len(cols) != len(COLUMNS[self._t]):
            raise LookupDamaged(f"{self._rel}: block {no} holds no rows")
        return cols, start, end

    def check(self) -> None:
        """Check every block's MAC and the index's order without decompressing anything
        (``verify``); raises ``LookupDamaged``."""
        firsts = [self._first(no) for no in range(self._n)]
        if firsts != sorted(firsts) or len(set(firsts)) != len(firsts):
            raise LookupDamaged(f"{self._rel}: the index is out of order (edited)")
        for no in range(self._n):
            self._verified(no, "" if no == 0 else firsts[no],
                           firsts[no + 1] if no + 1 < self._n else "")

    def rows(self, cid: str) -> list[tuple[Any, ...]]:
        """Every row of the call ``cid`` (stored columns, timestamps as datetimes)."""
        if self._n == 0:
            return []
        no = self._block_of(cid)
        cols, start, end = self._block(no)
        if cid < start or (end and cid >= end):
            raise LookupDamaged(f"{self._rel}: the index sends {cid} to a block that does not"
                                " answer for it (edited)")
        return [row_values(self._t, [c[i] for c in cols])
                for i, x in enumerate(cols[self.ci]) if x == cid]

    def between(self, lo: str, hi_excl: str) -> Iterator[tuple[Any, ...]]:
        """The rows whose call id is in ``[lo, hi_excl)``, in call-id order."""
        if self._n == 0:
            return
        no = first = self._block_of(lo)
        while no < self._n:
            cols, start, end = self._block(no)
            if no == first and lo < start:  # the search sent ``lo`` to a block after it
                raise LookupDamaged(f"{self._rel}: the index is out of order (edited)")
            for i, cid in enumerate(cols[self.ci]):
                if isinstance(cid, str) and lo <= cid < hi_excl:
                    yield row_values(self._t, [c[i] for c in cols])
            if not end or end >= hi_excl:
                return
            no += 1


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
