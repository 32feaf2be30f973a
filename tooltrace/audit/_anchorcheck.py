"""Checking a trail against its anchors (``_anchors`` writes them).

``check_anchors`` proves the trail still holds every anchored record: each anchor must verify
with the public key, and its checkpoint must still be in its segment at its seq with the same
head and signature (the chain, which ``verify`` checks, then vouches for every line before
it). A deleted trail or writer, a deleted segment, a cut tail and a rewritten stretch (even
re-chained with the audit key and re-signed with a fresh key) each become an ``AnchorGap``
naming the writer and the seqs that are gone. A segment the digest says was compacted or
shipped and pruned on purpose, in an entry signed by the same key, is not missing.

Reading and checking are apart from writing so that a writer (every process that records
calls) does not load them: the anchors file is read by ``verify``, ``tooltrace audit
ship-anchors`` and the archive.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ._findings import Finding, VerifyReport
from ._format import RECORD_PREFIXES
from ._manifest import DIGEST_GENESIS, PRUNED, read_digest
from ._segments import list_segments
from ._signing import PublicKey, digest_payload, line_payload

if TYPE_CHECKING:
    from ._segments import SegmentInfo

__all__ = ["Anchor", "AnchorGap", "ParsedAnchors", "check_anchors", "parse_anchors"]


@dataclass(frozen=True, slots=True)
class Anchor:
    """One signed checkpoint head, as read from ``source`` (line ``line``)."""

    writer: str
    segment: int
    seq: int
    records: int | None
    head: str
    ts: int | None
    kind: str
    kid: str
    sig: str
    source: str
    line: int
    #: Every signed field (what the signature covers, with ``writer``, ``segment``, ``seq``).
    fields: Mapping[str, Any] = field(compare=False)

    def payload(self) -> bytes:
        """The bytes the signature covers."""
        return line_payload(self.writer, self.segment, self.seq, self.fields)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"writer": self.writer, "segment": self.segment, "seq": self.seq,
                "records": self.records, "head": self.head, "ts": self.ts, "k": self.kind,
                "kid": self.kid, "source": self.source, "line": self.line}


@dataclass(slots=True)
class ParsedAnchors:
    """The anchors read from one or more sources, and the lines that were not anchors."""

    anchors: list[Anchor] = field(default_factory=list)
    #: (source, line number, why) of each line that is not an anchor.
    bad: list[tuple[str, int, str]] = field(default_factory=list)
    #: (source, bytes) of an append cut short at the end of a source.
    torn: list[tuple[str, int]] = field(default_factory=list)
    #: (source, warning) about a source itself (an object without a lock, say).
    notes: list[tuple[str, str]] = field(default_factory=list)

    def extend(self, other: ParsedAnchors) -> None:
        """Add another source's anchors and problems."""
        self.anchors += other.anchors
        self.bad += other.bad
        self.torn += other.torn
        self.notes += other.notes


def _str(obj: Mapping[str, Any], name: str) -> str | None:
    v = obj.get(name)
    return v if isinstance(v, str) else None


def _int(obj: Mapping[str, Any], name: str) -> int | None:
    v = obj.get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def parse_anchors(data: bytes, source: str) -> ParsedAnchors:
    """The anchors in ``data`` (one JSON object a line), read from ``source``."""
    out = ParsedAnchors()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        out.torn.append((source, len(data) - end))
    for no, raw in enumerate(data[:end].split(b"\n")[:-1], start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            out.bad.append((source, no, "not JSON"))
            continue
        if not isinstance(obj, dict):
            out.bad.append((source, no, "not an object"))
            continue
        writer, head, kind, kid, sig = (_str(obj, n) for n in ("writer", "head", "k", "kid",
                                                               "sig"))
        segment, seq = _int(obj, "segment"), _int(obj, "seq")
        if (writer is None or head is None or kind is None or kid is None or sig is None
                or segment is None or seq is None):
            out.bad.append((source, no, "not a signed checkpoint head"))
            continue
        fields = {k: v for k, v in obj.items() if k != "sig"}
        out.anchors.append(Anchor(writer, segment, seq, _int(obj, "records"), head,
                                  _int(obj, "ts"), kind, kid, sig, source, no, fields))
    return out


@dataclass(frozen=True, slots=True)
class AnchorGap:
    """Anchored records the trail no longer holds (or holds rewritten), for one writer.

    ``kind``: ``deleted`` (the segments, or the whole writer, are gone), ``truncated`` (a
    segment ends before its anchored checkpoint) or ``rewritten`` (the checkpoint at the
    anchored seq is not the anchored one). ``first_seq`` is None when the anchors do not say
    where the gap starts; ``records`` how many anchored records are gone, where known.
    """

    writer: str
    kind: str
    segments: tuple[int, ...]
    first_seq: int | None
    last_seq: int
    records: int | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"writer": self.writer, "kind": self.kind, "segments": list(self.segments),
                "first_seq": self.first_seq, "last_seq": self.last_seq,
                "records": self.records, "message": self.message}


_CKPT_PREFIXES = (b'{"k":"ckpt"', b'{"k":"seal"')


@dataclass(slots=True)
class _Scan:
    """A segment's checkpoints (seq -> their head and signature), its last seq and how many
    records it holds."""

    ckpts: dict[int, tuple[object, object]]
    last_seq: int | None
    records: int


def _scan(info: SegmentInfo) -> _Scan | None:
    """Read only what the anchors need from a segment: its checkpoint lines, its last seq,
    and how many records it holds."""
    try:
        data = info.path.read_bytes()
    except FileNotFoundError:
        return None
    end = data.rfind(b"\n") + 1
    ckpts: dict[int, tuple[object, object]] = {}
    records = 0
    last: bytes | None = None
    for raw in data[:end].split(b"\n")[:-1]:
        if not raw:
            continue
        last = raw
        if raw.startswith(RECORD_PREFIXES):
            records += 1
        elif raw.startswith(_CKPT_PREFIXES):
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            seq = obj.get("seq") if isinstance(obj, dict) else None
            if isinstance(seq, int):
                ckpts[seq] = (obj.get("head"), obj.get("sig"))
    last_seq = None
    if last is not None:
        try:
            obj = orjson.loads(last)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("seq"), int):
            last_seq = obj["seq"]
    return _Scan(ckpts, last_seq, records)


def _pruned_heads(adir: Path, trusted: Mapping[str, PublicKey]) -> dict[tuple[str, int], int]:
    """Segments the digest says were pruned on purpose, in entries signed by a trusted key:
    (writer, n) -> the seq the segment ended at."""
    out: dict[tuple[str, int], int] = {}
    prev = DIGEST_GENESIS
    for ln in read_digest(adir).lines:
        obj = ln.obj
        if ln.kind == PRUNED and ln.seq is not None:
            pk = trusted.get(str(obj.get("kid")))
            last = obj.get("last_seq")
            if (pk is not None and isinstance(last, int)
                    and pk.verify(digest_payload(prev, ln.seq, obj), obj.get("sig"))):
                out[(ln.writer, ln.n)] = last
        prev = ln.h
    return out


def _span(first: int | None, last: int) -> str:
    if first is None:
        return f"through seq {last}"
    return f"seq {first}" if first == last else f"seq {first}..{last}"


def _segs(ns: Iterable[int]) -> str:
    ns = sorted(set(ns))
    if len(ns) == 1:
        return f"segment {ns[0]}"
    if ns == list(range(ns[0], ns[-1] + 1)):
        return f"segments {ns[0]}..{ns[-1]}"
    return "segments " + ", ".join(map(str, ns))


@dataclass(slots=True)
class _Open:
    """A gap being gathered: anchors in a row that fail the same way."""

    kind: str
    first: int | None
    last: int
    detail: str
    #: Segment number -> anchored records gone from it (None: not known).
    records: dict[int, int | None]

    @property
    def total(self) -> int | None:
        vals = list(self.records.values())
        return None if any(v is None for v in vals) else sum(v or 0 for v in vals)


def _trusted_anchors(parsed: ParsedAnchors, trusted: Mapping[str, PublicKey],
                     report: VerifyReport) -> list[Anchor]:
    """The anchors whose signature verifies with a trusted key; the others are findings."""
    add = report.findings.append
    for source, no, why in parsed.bad:
        add(Finding("error", "corrupt", source, no, None, f"anchor line is {why}"))
    for source, n in parsed.torn:
        add(Finding("warning", "torn", source, None, None,
                    f"{n} bytes after the last complete anchor (an append cut short)"))
    for source, note in parsed.notes:
        add(Finding("warning", "unlocked", source, None, None, note))
    good: dict[tuple[str, int], Anchor] = {}
    keys = ", ".join(sorted(trusted)) or "none"
    for a in parsed.anchors:
        where = f"anchor of writer {a.writer} segment {a.segment} seq {a.seq}"
        pk = trusted.get(a.kid)
        if pk is None:
            add(Finding("error", "untrusted", a.source, a.line, a.seq,
                        f"{where} is signed by key {a.kid[:16]}, not by the trusted key"
                        f" ({keys}): the home's signing key was replaced, or the anchors are"
                        " another home's"))
            continue
        if not pk.verify(a.payload(), a.sig):
            add(Finding("error", "forged", a.source, a.line, a.seq,
                        f"{where} does not verify with key {pk.kid}: forged or altered"))
            continue
        seen = good.get((a.writer, a.seq))
        if seen is not None and (seen.head, seen.sig) != (a.head, a.sig):
            add(Finding("error", "forked", a.source, a.line, a.seq,
                        f"{where} and another anchor for the same seq ({seen.source} line"
                        f" {seen.line}) vouch for different chains"))
            continue
        good[(a.writer, a.seq)] = a
    report.anchors = len(good)
    return sorted(good.values(), key=lambda a: (a.writer, a.seq))


def check_anchors(adir: Path, parsed: ParsedAnchors, public: Sequence[PublicKey],
                  report: VerifyReport) -> None:
    """Check the trail under ``adir`` against ``parsed`` anchors: every anchor must verify with
    one of the ``public`` keys, and the trail must still hold its checkpoint (so every record
    before it). Adds findings and ``report.gaps``."""
    report.anchor_checked = True
    trusted = {pk.kid: pk for pk in public}
    if not trusted:
        report.findings.append(Finding(
            "error", "nokey", "-", None, None,
            "no public key: the anchors cannot be checked (pass --pubkey)"))
        return
    anchors = _trusted_anchors(parsed, trusted, report)
    by_writer: dict[str, list[Anchor]] = collections.defaultdict(list)
    for a in anchors:
        by_writer[a.writer].append(a)
    report.anchored_writers = len(by_writer)
    if not by_writer:
        return
    on_disk: dict[tuple[str, int], SegmentInfo] = {
        (s.writer, s.n): s for s in list_segments(adir)}
    pruned = _pruned_heads(adir, trusted)
    for writer, mine in sorted(by_writer.items()):
        _check_writer(writer, mine, on_disk, pruned, report)


def _check_writer(writer: str, anchors: list[Anchor],
                  on_disk: Mapping[tuple[str, int], SegmentInfo],
                  pruned: Mapping[tuple[str, int], int], report: VerifyReport) -> None:
    scans: dict[int, _Scan | None] = {}
    present = any(w == writer for w, _ in on_disk) or any(w == writer for w, _ in pruned)
    gaps: list[_Open] = []
    prev: Anchor | None = None
    prev_failed = False
    for a in anchors:
        n = a.segment
        if n not in scans:
            info = on_disk.get((writer, n))
            scans[n] = _scan(info) if info is not None else None
        scan = scans[n]
        # Where a gap ending at this anchor starts: after the anchor before it (a writer's
        # first segment starts at seq 1; otherwise, without an earlier anchor, unknown).
        start = prev.seq + 1 if prev is not None else (1 if n == 1 else None)
        kind: str | None = None
        first, gone, detail = start, a.records, ""
        if scan is None:
            end = pruned.get((writer, n))
            if end is None or end < a.seq:
                kind = "deleted"
        elif a.seq in scan.ckpts:
            if scan.ckpts[a.seq] != (a.head, a.sig):
                kind, gone = "rewritten", None
                detail = f"the checkpoint at seq {a.seq} is not the anchored one"
        elif scan.last_seq is None or scan.last_seq < a.seq:
            kind = "truncated"
            if scan.last_seq is not None:
                first = scan.last_seq + 1
            gone = None if a.records is None else max(0, a.records - scan.records)
            detail = (f"segment {n} ends at seq {scan.last_seq}" if scan.last_seq is not None
                      else f"segment {n} holds no complete line")
        else:
            kind, gone = "rewritten", None
            detail = f"no checkpoint at seq {a.seq} where one was anchored"
        prev = a
        if kind is None:
            prev_failed = False
            continue
        if prev_failed and gaps[-1].kind == kind:
            g = gaps[-1]
            g.last = a.seq
            g.detail = detail or g.detail
        else:
            g = _Open(kind, first, a.seq, detail, {})
            gaps.append(g)
        # A segment's later anchors count its records so far: the newest counts them all.
        g.records[n] = gone
        prev_failed = True
    for g in gaps:
        _report_gap(writer, g, present, report)


def _report_gap(writer: str, g: _Open, present: bool, report: VerifyReport) -> None:
    span = _span(g.first, g.last)
    total = g.total
    recs = f", {total} records" if total is not None else ""
    segments = sorted(g.records)
    if g.kind == "deleted" and not present:
        msg = (f"writer {writer} is missing: anchored {span} ({_segs(segments)}{recs}),"
               " none of it is here")
    elif g.kind == "deleted":
        msg = (f"writer {writer}: {_segs(segments)} missing: anchored {span}{recs}, not"
               " pruned on purpose: deleted")
    elif g.kind == "truncated":
        msg = (f"writer {writer}: {g.detail}; anchored through seq {g.last}: {span} missing"
               f"{recs}: tail cut")
    else:
        msg = (f"writer {writer}: {_segs(segments)}, {g.detail}: {span} rewritten (re-chained"
               " or re-signed since it was anchored)")
    report.gaps.append(AnchorGap(writer, g.kind, tuple(segments), g.first, g.last, total, msg))
    report.findings.append(Finding("error", g.kind, f"{writer}.{segments[0]:06d}.jsonl", None,
                                   g.last, msg))
