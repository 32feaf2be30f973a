"""Set aside what a crashed writer left half-written, and seal its segment.

A writer killed mid-write can leave a torn last record (bytes after the last newline). Recovery
runs only on segments whose writer is provably dead (their flock is free): the torn bytes are
copied to ``quarantine/`` with a JSON report, the segment is cut back to its last complete line,
and a ``seal`` line (reason ``recovered``, keyed and signed like any checkpoint, chained like
any line) records how many bytes were set aside and where (its signed head goes to the anchors
file); the segment digest records the seal too. A
segment whose writer died after recording it in the digest but before bringing it into view is
brought into view and sealed the same way. Nothing a writer acknowledged is touched: an
acknowledged record is always a complete line.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from ._format import RECORD_PREFIXES, chain_hash, checkpoint_mac, dumps, seal_line, split_hash
from ._manifest import DROPPED, SEALED, append_digest, read_digest
from ._segments import SegmentInfo, list_opening, list_segments, locked_if_dead, segment_name

if TYPE_CHECKING:
    from ._signing import Signer

__all__ = ["Recovered", "recover_dead_segments"]


@dataclass(frozen=True, slots=True)
class Recovered:
    """One crashed writer's segment that was sealed; ``quarantined`` names the torn-bytes file."""

    segment: str
    lines: int
    torn_bytes: int
    quarantined: str | None


def _records_in(data: bytes) -> int:
    """How many record lines (calls, intents, late steps, approvals) ``data`` holds."""
    return sum(1 for ln in data.split(b"\n") if ln.startswith(RECORD_PREFIXES))


def _last_good(data: bytes) -> tuple[int, dict[str, object] | None, int]:
    """(length of the valid prefix, last valid line object, number of valid lines).

    A writer appends in order, so only the end can be torn: bytes after the last newline,
    and (defensively) complete-looking trailing lines that do not parse as records.
    """
    good = data.rfind(b"\n") + 1
    count = data.count(b"\n", 0, good)
    while good:
        start = data.rfind(b"\n", 0, good - 1) + 1
        raw = data[start : good - 1]
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and split_hash(raw) is not None:
            return good, obj, count
        good = start
        count -= 1
    return 0, None, 0


def _recover_one(info: SegmentInfo, adir: Path, key: bytes, fd: int,
                 signer: Signer | None) -> Recovered | None:
    data = info.path.read_bytes()
    good, last, count = _last_good(data)
    torn = data[good:]
    quarantined: str | None = None
    if torn:
        qdir = adir / "quarantine"
        qdir.mkdir(parents=True, exist_ok=True)
        base = f"{info.path.name}.{good}"
        (qdir / f"{base}.torn").write_bytes(torn)
        report = {
            "segment": info.path.name,
            "offset": good,
            "bytes": len(torn),
            "after_line": count,
            "reason": "torn record after a writer stopped mid-write",
            "quarantined_at_us": time.time_ns() // 1000,
        }
        (qdir / f"{base}.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        quarantined = f"quarantine/{base}.torn"
        os.ftruncate(fd, good)
    # A recoverer killed between setting bytes aside and sealing leaves quarantine files the
    # segment does not mention yet: claim them too, so the seal accounts for every torn byte.
    qdir = adir / "quarantine"
    names = sorted(p.name for p in qdir.glob(f"{info.path.name}.*.torn")) if qdir.is_dir() else []
    torn_total = sum((qdir / n).stat().st_size for n in names)
    if names:
        quarantined = f"quarantine/{names[-1]}"
    sealed_name = info.path.with_name(segment_name(info.writer, info.n, live=False))
    if last is not None and last.get("k") == "seal":
        # Sealed already by a recoverer that died before the rename.
        os.rename(info.path, sealed_name)
        _record_seal(adir, key, info, data[:good], last, signer)
        return Recovered(info.path.name, count, torn_total, quarantined)
    if last is None:
        # Not even a header survived: there is no chain to seal. Keep the (empty) evidence
        # under quarantine and remove the segment, saying so in the digest first.
        append_digest(adir, key, [{"k": DROPPED, "writer": info.writer, "n": info.n,
                            "reason": "no header"}], signer=signer)
        os.unlink(info.path)
        return Recovered(info.path.name, 0, len(torn), quarantined)
    raw_last = data[:good].rstrip(b"\n").rsplit(b"\n", 1)[-1]
    split = split_hash(raw_last)
    assert split is not None
    prev = split[1]
    seq = int(last.get("seq", 0)) + 1  # type: ignore[call-overload]
    fields: dict[str, Any] = {
        "k": "seal",
        "ts": time.time_ns() // 1000,
        "head": prev,
        "records": _records_in(data[:good]),
        "reason": "recovered",
        "final": True,
        "torn_bytes": torn_total,
        "quarantine": [f"quarantine/{n}" for n in names] or None,
        "seq": seq,
    }
    anchor = signer.sign_line(info.writer, info.n, seq, fields) if signer is not None else None
    fields["mac"] = checkpoint_mac(key, info.writer, info.n, seq, prev, fields)
    body = dumps(fields)
    line = seal_line(body, chain_hash(prev, body))
    os.lseek(fd, 0, os.SEEK_END)
    os.write(fd, line)
    os.fsync(fd)
    if anchor is not None and signer is not None and signer.anchors is not None:
        signer.anchors.try_append([anchor], sync=True)
    os.rename(info.path, sealed_name)
    _record_seal(adir, key, info, line, fields, signer)
    return Recovered(info.path.name, count, torn_total, quarantined)


def _record_seal(adir: Path, key: bytes, info: SegmentInfo, through_seal: bytes,
                 seal: dict[str, object], signer: Signer | None) -> None:
    """Record a recovered seal in the digest; ``through_seal`` ends with the seal line."""
    sp = split_hash(through_seal.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    append_digest(adir, key, [{"k": SEALED, "writer": info.writer, "n": info.n,
                        "last_h": sp[1] if sp else None, "last_seq": seal.get("seq"),
                        "final": bool(seal.get("final")), "reason": "recovered"}],
                  signer=signer)


def _bring_into_view(adir: Path) -> None:
    """Rename segments whose writer died between recording them in the digest and renaming
    them into view; an opening the digest does not name was never a segment and stays."""
    opening = list_opening(adir)
    if not opening:
        return
    opened = {k for k, f in read_digest(adir).fates().items() if f.opened and not f.dropped}
    for info in opening:
        if (info.writer, info.n) not in opened:
            continue
        with locked_if_dead(info.path) as fd:
            if fd is None or not info.path.exists():
                continue
            live = info.path.with_name(segment_name(info.writer, info.n, live=True))
            os.rename(info.path, live)


def recover_dead_segments(adir: Path, key: bytes,
                          signer: Signer | Literal["home"] | None = "home") -> list[Recovered]:
    """Seal every live segment whose writer has died; return what was done. ``signer`` signs
    the seals and anchors them: by default the home's (``adir`` is ``<home>/audit``), when it
    has a key; None seals them unsigned."""
    from ._signing import resolve_signer

    signer = resolve_signer(signer, adir, create=False)
    out: list[Recovered] = []
    _bring_into_view(adir)
    for info in list_segments(adir):
        if not info.live:
            continue
        with locked_if_dead(info.path) as fd:
            if fd is None or not info.path.exists():
                continue
            rec = _recover_one(info, adir, key, fd, signer)
            if rec is not None:
                out.append(rec)
    return out
