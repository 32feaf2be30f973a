"""Check every writer's hash chain and keyed checkpoints; say exactly where a record was
edited, deleted, reordered or inserted, and whether a segment lost its tail.

Severity ``error`` is evidence of tampering or damage; ``warning`` is what a crash leaves behind
(a torn record, an unsealed segment of a dead writer) and is reported but not failed on.
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._config import resolve_home
from ._format import chain_hash, checkpoint_mac, genesis_hash, load_key, split_hash
from ._manifest import read_manifest
from ._segments import SegmentInfo, audit_dir, list_segments, read_segment

__all__ = ["Finding", "VerifyReport", "verify", "verify_audit"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: where (segment file name, line number, seq) and what."""

    severity: str  # "error" | "warning"
    kind: str  # edited | deleted | reordered | inserted | truncated | torn | corrupt | ...
    segment: str
    line: int | None
    seq: int | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "severity": self.severity,
            "kind": self.kind,
            "segment": self.segment,
            "line": self.line,
            "seq": self.seq,
            "message": self.message,
        }


@dataclass(slots=True)
class VerifyReport:
    """What ``verify_audit`` checked and found."""

    writers: int = 0
    segments: int = 0
    records: int = 0
    checkpoints: int = 0
    keyed: bool = True
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing of severity ``error`` was found."""
        return not any(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "ok": self.ok,
            "writers": self.writers,
            "segments": self.segments,
            "records": self.records,
            "checkpoints": self.checkpoints,
            "keyed": self.keyed,
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass(slots=True)
class _Line:
    no: int
    seq: int | None
    kind: str
    h: str
    body: bytes
    obj: dict[str, Any]


def _classify_seqs(lines: list[_Line], first: int) -> dict[int, tuple[str, str]]:
    """Map line number -> (kind, message) for lines whose seq is out of place."""
    out: dict[int, tuple[str, str]] = {}
    seqd = [ln for ln in lines if ln.seq is not None]
    if not seqd:
        return out
    counts: collections.Counter[int] = collections.Counter(
        ln.seq for ln in seqd if ln.seq is not None
    )
    top = max(counts)
    missing = sorted(set(range(first, top + 1)) - set(counts))
    if not missing and all(c == 1 for c in counts.values()):
        # Every seq is there exactly once: anything out of place was moved.
        for idx, ln in enumerate(seqd):
            if ln.seq != first + idx:
                out[ln.no] = ("reordered", f"seq {ln.seq} found where seq {first + idx} belongs")
        return out
    first_line: dict[int, int] = {}
    expected = first
    for ln in seqd:
        s = ln.seq
        assert s is not None
        if s in first_line:
            out[ln.no] = ("inserted", f"seq {s} appears twice (lines {first_line[s]} and"
                          f" {ln.no}): a record was inserted")
            continue
        first_line[s] = ln.no
        gap = [m for m in missing if expected <= m < s]
        if gap:
            rng = f"{gap[0]}" if len(gap) == 1 else f"{gap[0]}..{gap[-1]}"
            out[ln.no] = ("deleted", f"seq {rng} missing before this line: deleted")
        elif s < expected:
            out[ln.no] = ("reordered", f"seq {s} found after seq {expected - 1}")
        expected = max(expected, s + 1)
    return out


def _verify_segment(
    info: SegmentInfo,
    key: bytes | None,
    prev: str | None,
    first_seq: int | None,
    report: VerifyReport,
) -> tuple[str | None, int | None, dict[str, Any] | None]:
    """Check one segment; return (last hash, last seq, last line object) for the next one."""
    add = report.findings.append
    name = info.name
    parsed = read_segment(info)
    if parsed is None:
        return prev, first_seq, None
    report.segments += 1
    for no, _raw in parsed.bad:
        add(Finding("error", "corrupt", name, no, None, "line is not a valid record (edited?)"))
    lines: list[_Line] = []
    for no, obj, raw in parsed.lines:
        sp = split_hash(raw)
        if sp is None:
            add(Finding("error", "corrupt", name, no, None, "line has no chain hash (edited?)"))
            continue
        seq = obj.get("seq")
        lines.append(_Line(no, seq if isinstance(seq, int) else None, str(obj.get("k")), sp[1],
                           sp[0], obj))
    if not lines:
        add(Finding("error", "truncated", name, None, None, "segment holds no records"))
        return prev, first_seq, None
    head = lines[0]
    if head.kind != "open" or head.obj.get("writer") != info.writer or head.obj.get(
        "segment"
    ) != info.n:
        add(Finding("error", "corrupt", name, head.no, head.seq,
                    "first line is not this segment's header"))
    if first_seq is None:
        first_seq = head.seq if head.seq is not None else 1
    seq_issues = _classify_seqs(lines, first_seq)
    for no, (kind, msg) in sorted(seq_issues.items()):
        seq = next(ln.seq for ln in lines if ln.no == no)
        add(Finding("error", kind, name, no, seq, msg))
    last_good_ckpt: int | None = None
    by_seq: dict[int, str] = {}
    for ln in lines:
        if ln.seq is not None:
            by_seq.setdefault(ln.seq, ln.h)
    for i, ln in enumerate(lines):
        # Chain from the line that *should* precede this one (by seq), so a moved line is
        # reported once as moved rather than as an edit of its neighbours.
        if i == 0:
            before = prev
        elif ln.seq is not None and ln.seq - 1 in by_seq:
            before = by_seq[ln.seq - 1]
        else:
            before = lines[i - 1].h
        if before is not None and chain_hash(before, ln.body) != ln.h and ln.no not in seq_issues:
            # The seq is where it belongs, so this line (or its predecessor) was changed.
            add(Finding("error", "edited", name, ln.no, ln.seq,
                        "record does not match the hash chain: edited"))
        if ln.kind in ("ckpt", "seal"):
            report.checkpoints += 1
            if key is not None and ln.seq is not None:
                mac = checkpoint_mac(key, info.writer, info.n, ln.seq, str(ln.obj.get("head")),
                                     ln.obj)
                if mac != ln.obj.get("mac") or ln.obj.get("head") != before:
                    since = "the segment start" if last_good_ckpt is None else (
                        f"line {last_good_ckpt}")
                    add(Finding("error", "rewritten", name, ln.no, ln.seq,
                                f"keyed checkpoint does not match: records between {since} and"
                                f" line {ln.no} were altered and re-chained"))
                else:
                    last_good_ckpt = ln.no
        else:
            if ln.kind != "open":
                report.records += 1
    last = lines[-1]
    if last.kind == "seal" and last.obj.get("reason") == "recovered" and last.obj.get("torn_bytes"):
        add(Finding("warning", "torn", name, last.no, last.seq,
                    f"writer crashed mid-write: {last.obj.get('torn_bytes')} torn bytes set aside"
                    f" in {', '.join(last.obj.get('quarantine') or [])}"))
    if parsed.tail and not parsed.alive:
        sev = "error" if not info.live else "warning"
        add(Finding(sev, "torn", name, last.no + 1, None,
                    f"torn record ({len(parsed.tail)} bytes after line {last.no}, byte offset"
                    f" {parsed.tail_offset}): incomplete write"))
    if not info.live and last.kind != "seal":
        add(Finding("error", "truncated", name, last.no, last.seq,
                    f"sealed segment ends at line {last.no} (seq {last.seq}) without its seal:"
                    " tail truncated"))
    elif info.live and not parsed.alive:
        uncovered = sum(
            1 for ln in lines if last_good_ckpt is None or ln.no > last_good_ckpt
        ) if last.kind not in ("ckpt", "seal") else 0
        add(Finding("warning", "unsealed", name, last.no, last.seq,
                    f"writer stopped without sealing (crash); {uncovered} records after the last"
                    " checkpoint are not covered by one"))
    return last.h, last.seq, last.obj


def verify_audit(adir: Path, key: bytes | None) -> VerifyReport:
    """Verify every segment under ``adir`` (``<home>/audit``)."""
    report = VerifyReport(keyed=key is not None)
    if key is None:
        report.findings.append(Finding("warning", "nokey", "-", None, None,
                                       "no audit key: checkpoints were not checked"))
    manifest = read_manifest(adir)
    pruned: dict[tuple[str, int], dict[str, Any]] = {
        (s["writer"], s["n"]): s for s in manifest.get("segments", []) if s.get("pruned")
    }
    by_writer: dict[str, list[SegmentInfo]] = collections.defaultdict(list)
    for info in list_segments(adir):
        by_writer[info.writer].append(info)
    report.writers = len(by_writer)
    for writer, segs in sorted(by_writer.items()):
        prev: str | None = genesis_hash(writer)
        seq: int | None = 1
        expect_n = 1
        last_obj: dict[str, Any] | None = None
        for info in segs:
            while expect_n < info.n:
                p = pruned.get((writer, expect_n))
                if p is not None:
                    prev, seq, last_obj = p["last_h"], p["last_seq"] + 1, {"final": p["final"]}
                else:
                    add_missing(report, writer, expect_n, info)
                    prev, seq = None, None
                expect_n += 1
            prev, last_seq, last_obj = _verify_segment(info, key, prev, seq, report)
            seq = None if last_seq is None else last_seq + 1
            expect_n = info.n + 1
        if last_obj is not None and last_obj.get("k") == "seal" and last_obj.get("final") is False:
            report.findings.append(Finding(
                "error", "deleted", f"{writer}.{expect_n:06d}.jsonl", None, None,
                f"segment {expect_n} of writer {writer} is missing (the previous one says it"
                " continues): deleted"))
    return report


def add_missing(report: VerifyReport, writer: str, n: int, after: SegmentInfo) -> None:
    """Record a segment file that should exist but does not."""
    report.findings.append(Finding(
        "error", "deleted", f"{writer}.{n:06d}.jsonl", None, None,
        f"segment {n} of writer {writer} is missing (found {after.name}): deleted"))


def verify(home: str | os.PathLike[str] | None = None) -> VerifyReport:
    """Verify the audit trail of a tooltrace home (key from TOOLTRACE_AUDIT_KEY or the home)."""
    h = resolve_home(home)
    return verify_audit(audit_dir(h), load_key(h, create=False))
