"""Check one segment: its hash chain, the order of its sequence numbers, its keyed
checkpoints, and how it ends (sealed, torn by a crash, or cut short)."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

from ._findings import Finding, VerifyReport
from ._format import chain_hash, checkpoint_mac, mac_matches, split_hash
from ._segments import ParsedSegment, SegmentInfo, read_segment

__all__ = ["verify_segment"]


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


def verify_segment(
    info: SegmentInfo,
    key: bytes | None,
    prev: str | None,
    first_seq: int | None,
    report: VerifyReport,
) -> tuple[str | None, int | None, dict[str, Any] | None] | None:
    """Check one segment; return (last hash, last seq, last line object) for the next one, or
    None if the file went away before it could be read."""
    add = report.findings.append
    name = info.name
    parsed = read_segment(info)
    if parsed is None:
        return None
    report.segments += 1
    lines = _chained_lines(parsed, name, report)
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
    last_good_ckpt = _check_chain(info, key, prev, lines, seq_issues, report)
    _check_ending(info, parsed, lines, last_good_ckpt, report)
    last = lines[-1]
    return last.h, last.seq, last.obj


def _chained_lines(parsed: ParsedSegment, name: str, report: VerifyReport) -> list[_Line]:
    """The segment's records with their chain hashes; lines that are not records are findings."""
    add = report.findings.append
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
    return lines


def _check_chain(
    info: SegmentInfo,
    key: bytes | None,
    prev: str | None,
    lines: list[_Line],
    seq_issues: dict[int, tuple[str, str]],
    report: VerifyReport,
) -> int | None:
    """Check each line against the hash chain and each checkpoint against its keyed MAC;
    count records and checkpoints. Return the line of the last checkpoint that matched."""
    add = report.findings.append
    name = info.name
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
                if not mac_matches(mac, ln.obj.get("mac")) or ln.obj.get("head") != before:
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
    return last_good_ckpt


def _check_ending(
    info: SegmentInfo,
    parsed: ParsedSegment,
    lines: list[_Line],
    last_good_ckpt: int | None,
    report: VerifyReport,
) -> None:
    """How the segment ends: a recovered seal, a torn record, a missing seal, no seal yet."""
    add = report.findings.append
    name = info.name
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
