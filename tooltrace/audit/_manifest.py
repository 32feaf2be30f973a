"""What the trail holds: the segment digest (every writer and segment, and what became of each)
and the compaction manifest (which segments are in Parquet, and which Parquet files are live).

**The digest** (``<home>/audit/digest.jsonl``) is the record the hash chains cannot keep: the
chains prove what is inside a segment, the digest which segments should exist. One line per
event, appended under an exclusive ``flock`` by whichever process caused it:

- ``opened``     a writer opened segment ``n`` (``n`` = 1 is the writer's start); recorded before
                 the segment comes into view, so a segment on disk that the digest does not
                 name was not written by a writer of this home.
- ``sealed``     the segment was sealed (by its writer, or by recovery after a crash), with the
                 hash and seq of its last line and whether it was the writer's last.
- ``dropped``    the segment was removed without records: its writer died before it could
                 write the header, or could not bring the segment into view.
- ``compacted``  its rows are in Parquet; ``shipped``: its rows are in the archive.
- ``pruned``     its file was deleted on purpose after ``compacted`` or ``shipped`` (``after``),
                 with the hash and seq of its last line, so ``verify`` still links the chain.

Every line is chained like a segment line (``h = sha256(prev_h + body)``, from a fixed genesis)
and carries a MAC over the previous hash and its own fields, keyed like the checkpoints, and a
signature by the home's signing key over the same (``_signing``): an entry cannot be edited,
removed from the middle, added or re-chained without the keys. The hash
of the last line, with its seq (``<seq>:<hash>``), is the *head*: a digest of every writer and
segment the home ever had, and, through the ``sealed`` entries, of every sealed segment's
contents. Entries are appended only when a segment opens or ends, never per record.

What the digest cannot show from inside the home: its newest entries removed together with
every segment they name (the home rolled back to an earlier state), the whole home removed or
replaced by an older copy, and anything done by someone who holds the key. ``tooltrace verify``
prints the head; kept outside the home and passed back as ``--expect``, it catches those too.

**The compaction manifest** (``<home>/audit/parquet/manifest.json``): readers trust only the
Parquet files it lists, so a compaction that dies half way leaves at worst an orphan file nobody
reads (and the next compaction removes), never a record counted twice.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .._files import fsync_path, replace_whole, write_all

if TYPE_CHECKING:
    from ._segments import ParsedSegment
    from ._signing import Signer

# The line format (``_format``) loads when the digest is first read or written: readers that
# only want the compaction manifest do not pay for the writer's encoders.

__all__ = [
    "COMPACTED",
    "DIGEST_GENESIS",
    "DROPPED",
    "OPENED",
    "PRUNED",
    "SEALED",
    "SHIPPED",
    "Digest",
    "DigestLine",
    "SegmentFate",
    "append_digest",
    "digest_entry",
    "digest_path",
    "last_line_end",
    "manifest_path",
    "parse_head",
    "read_digest",
    "read_manifest",
    "write_manifest",
]

# What the digest records of a segment (an entry's ``k``; see the module docstring).
OPENED = "opened"
SEALED = "sealed"
DROPPED = "dropped"
#: Digest entry kind: the segment's rows are in Parquet (``compact``).
COMPACTED = "compacted"
#: Digest entry kind: the segment's rows are in the archive (``tooltrace.archive.ship``).
SHIPPED = "shipped"
#: Digest entry kind: the segment's file was deleted on purpose, ``after`` one of the above.
PRUNED = "pruned"

#: The hash the digest's first line chains from.
#: (``sha256(b"tooltrace-digest-v1")``, spelled out: a reader need not load hashlib.)
DIGEST_GENESIS = "015c076465e457105997df7a7583871d88f10f7f4c6e42d2e0a900eb65c09634"
_DIGEST = "digest.jsonl"
# Digest lines are a few hundred bytes; reading this much back always holds the last one.
_TAIL_READ = 4096


# -- the digest --------------------------------------------------------------------------------


def digest_path(adir: Path) -> Path:
    """``<home>/audit/digest.jsonl``."""
    return adir / _DIGEST


def digest_entry(kind: str, seg: ParsedSegment, **extra: Any) -> dict[str, Any]:
    """A digest entry of ``kind`` (``COMPACTED``, ``SHIPPED``, ``PRUNED`` with ``after=``...)
    for ``seg``, carrying the hash, seq and ``final`` of its last line."""
    last: dict[str, Any] = seg.lines[-1][1] if seg.lines else {}
    seq = last.get("seq")
    return {"k": kind, "writer": seg.info.writer, "n": seg.info.n,
            "last_h": seg.last_hash, "last_seq": seq if isinstance(seq, int) else None,
            "final": bool(last.get("final")), **extra}


def _last_line(fd: int, size: int) -> tuple[int, bytes | None]:
    """(offset just past the last newline, the last complete line without it, or None)."""
    pos, buf = size, b""
    while pos > 0:
        step = min(_TAIL_READ, pos)
        pos -= step
        buf = os.pread(fd, step, pos) + buf
        end = buf.rfind(b"\n")
        if end < 0:
            continue
        start = buf.rfind(b"\n", 0, end)
        if start >= 0 or pos == 0:
            return pos + end + 1, buf[start + 1 : end]
    return 0, None


def last_line_end(fd: int, size: int) -> int:
    """The offset just past the last newline of the file open as ``fd`` (``size`` bytes):
    where an append-only file of lines ends once an append cut short is cut off."""
    return _last_line(fd, size)[0]


def _chain_state(line: bytes | None) -> tuple[str, int]:
    """(hash, seq) an entry after ``line`` chains from."""
    from ._format import chain_hash, split_hash

    if line is None:
        return DIGEST_GENESIS, 0
    sp = split_hash(line)
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        obj = None
    seq = obj.get("seq") if isinstance(obj, dict) else None
    # A last line someone spoiled is reported by ``verify``; appending still has to go on.
    return (sp[1] if sp else chain_hash(DIGEST_GENESIS, line),
            seq if isinstance(seq, int) else 0)


def append_digest(adir: Path, key: bytes, entries: Sequence[Mapping[str, Any]], *,
                  sync: bool = True, signer: Signer | None = None) -> str:
    """Append ``entries`` (each ``{"k": kind, "writer": ..., "n": ..., ...}``) to the digest,
    chained, keyed and (with ``signer``) signed; return the new head. Raises ``OSError`` when
    the disk refuses.

    Holds the digest's lock only while appending. Bytes after the last newline can only be
    an append cut short by a process that died holding the lock (nothing was acknowledged by
    them): they are cut off before the new entries go on.
    """
    from ._format import chain_hash, checkpoint_mac, dumps, seal_line

    path = digest_path(adir)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        good, last = _last_line(fd, size)
        if good < size:
            os.ftruncate(fd, good)
        prev, seq = _chain_state(last)
        ts = time.time_ns() // 1000
        out = []
        for entry in entries:
            seq += 1
            fields = {**entry, "ts": ts}
            if signer is not None:
                signer.sign_entry(prev, seq, fields)
            fields["mac"] = checkpoint_mac(key, str(entry["writer"]), int(entry["n"]), seq, prev,
                                           fields)
            fields["seq"] = seq
            body = dumps(fields)
            prev = chain_hash(prev, body)
            out.append(seal_line(body, prev))
        data = b"".join(out)
        write_all(fd, data)
        if sync:
            os.fsync(fd)
            if size == 0:
                fsync_path(adir)
        return f"{seq}:{prev}"
    finally:
        os.close(fd)  # drops the lock


def parse_head(text: str) -> tuple[int, str]:
    """``<seq>:<hash>`` as printed by ``verify``; raises ``ValueError`` for anything else."""
    seq, sep, h = text.strip().partition(":")
    if not sep or not seq.isdigit() or len(h) != 64 or h.strip("0123456789abcdef"):
        raise ValueError("a digest head is <seq>:<64 hex digits>, as `tooltrace verify` prints")
    return int(seq), h


@dataclass(frozen=True, slots=True)
class DigestLine:
    """One complete digest line: its number, parsed fields, body and hash."""

    no: int
    seq: int | None
    kind: str
    writer: str
    n: int
    h: str
    body: bytes
    obj: dict[str, Any]


@dataclass(slots=True)
class SegmentFate:
    """What the digest says about one segment (the entries' fields, where there are any)."""

    writer: str
    n: int
    opened: DigestLine | None = None
    sealed: dict[str, Any] | None = None
    pruned: dict[str, Any] | None = None
    dropped: bool = False
    compacted: bool = False
    shipped: bool = False


@dataclass(slots=True)
class Digest:
    """The digest as read: its complete lines, the lines that are not entries, a torn tail."""

    exists: bool
    size: int = 0
    lines: list[DigestLine] = field(default_factory=list)
    bad: list[tuple[int, bytes]] = field(default_factory=list)
    tail: bytes = b""

    @property
    def head(self) -> str:
        """``<seq>:<hash>`` of the last entry (``0:<genesis>`` before the first)."""
        if not self.lines:
            return f"0:{DIGEST_GENESIS}"
        last = self.lines[-1]
        return f"{last.seq if last.seq is not None else len(self.lines)}:{last.h}"

    def fates(self, skip: Collection[int] = ()) -> dict[tuple[str, int], SegmentFate]:
        """Every segment the digest names, by (writer, n), passing over the lines numbered in
        ``skip`` (entries that do not verify)."""
        out: dict[tuple[str, int], SegmentFate] = {}
        for ln in self.lines:
            if ln.no in skip:
                continue
            fate = out.get((ln.writer, ln.n))
            if fate is None:
                fate = out[(ln.writer, ln.n)] = SegmentFate(ln.writer, ln.n)
            if ln.kind == OPENED:
                fate.opened = fate.opened or ln
            elif ln.kind == SEALED:
                fate.sealed = ln.obj
            elif ln.kind == PRUNED:
                fate.pruned = ln.obj
            elif ln.kind == DROPPED:
                fate.dropped = True
            elif ln.kind == COMPACTED:
                fate.compacted = True
            elif ln.kind == SHIPPED:
                fate.shipped = True
        return out


def read_digest(adir: Path) -> Digest:
    """Read the digest (under a shared lock, so never half an append)."""
    from ._format import split_hash

    try:
        fd = os.open(digest_path(adir), os.O_RDONLY)
    except FileNotFoundError:
        return Digest(exists=False)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
    finally:
        os.close(fd)
    end = data.rfind(b"\n") + 1
    digest = Digest(exists=True, size=len(data), tail=data[end:])
    for no, raw in enumerate(data[:end].split(b"\n")[:-1], start=1):
        sp = split_hash(raw)
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
        if sp is None or not isinstance(obj, dict):
            digest.bad.append((no, raw))
            continue
        seq, n = obj.get("seq"), obj.get("n")
        digest.lines.append(DigestLine(
            no, seq if isinstance(seq, int) else None, str(obj.get("k")), str(obj.get("writer")),
            n if isinstance(n, int) else -1, sp[1], sp[0], obj))
    return digest


# -- the compaction manifest -------------------------------------------------------------------


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
    """Replace the manifest whole (``replace_whole``)."""
    path = manifest_path(adir)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_whole(path, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
