"""Check one segment: its hash chain, the order of its sequence numbers, its keyed and signed
checkpoints, its signed approvals, and how it ends (sealed, torn by a crash, or cut short)."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._findings import Finding, VerifyReport
from ._format import chain_hash, checkpoint_mac, mac_matches, split_hash
from ._segments import ParsedSegment, SegmentInfo, read_segment

if TYPE_CHECKING:
    from ._signing import Trust

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
    trust: Trust | None = None,
    *,
    foreign: bool = False,
) -> tuple[str | None, int | None, dict[str, Any] | None] | None:
    """Check one segment; return (last hash, last seq, last line object) for the next one, or
    None if the file went away before it could be read.

    ``trust``: the public keys signatures must verify with (None or no keys: signatures are
    not checked). ``foreign``: the segment is another machine's (in an archive), so a
    signature by a key not trusted here is a warning, not an error."""
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
    last_good_ckpt = _check_chain(info, key, prev, lines, seq_issues, report,
                                  _Signatures(info, trust, foreign, report))
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


class _Signatures:
    """Checks the signed lines of one segment and gathers what it cannot check."""

    def __init__(self, info: SegmentInfo, trust: Trust | None, foreign: bool,
                 report: VerifyReport) -> None:
        self.info = info
        self.trust = trust if trust is not None and trust.keys else None
        self.foreign = foreign
        self.report = report
        self.unsigned: list[_Line] = []
        self.unverified: dict[str, int] = {}

    def problem(self, ln: _Line) -> str | None:
        """Why the line's signature does not hold (None: it verifies, or is not checked)."""
        trust = self.trust
        if trust is None or ln.seq is None:
            return None
        sig = ln.obj.get("sig")
        if sig is None:
            self.unsigned.append(ln)
            return None
        from ._signing import line_payload

        kid = str(ln.obj.get("kid"))
        pk = trust.keys.get(kid)
        if pk is None:
            if self.foreign:
                self.unverified[kid] = self.unverified.get(kid, 0) + 1
                return None
            return f"signed by key {kid[:16]}, not by the trusted key ({trust.describe()})"
        if not pk.verify(line_payload(self.info.writer, self.info.n, ln.seq, ln.obj), sig):
            return f"its signature does not verify with key {pk.kid}"
        self.report.signatures += 1
        return None

    def finish(self) -> None:
        """Report the unsigned lines and the signatures by keys not given, once per segment."""
        add = self.report.findings.append
        name = self.info.name
        if self.unsigned and self.trust is not None:
            first = self.unsigned[0]
            more = len(self.unsigned) - 1
            sev = "warning" if self.trust.allow_unsigned else "error"
            add(Finding(sev, "unsigned", name, first.no, first.seq,
                        f"{first.kind} line at line {first.no} carries no signature"
                        + (f" (and {more} more in this segment)" if more else "")
                        + ": written before signatures, or stripped"))
        for kid, n in sorted(self.unverified.items()):
            add(Finding("warning", "unverified", name, None, None,
                        f"{n} signatures by key {kid[:16]} (another machine's) not checked:"
                        " pass its public key to check them"))


def _check_chain(
    info: SegmentInfo,
    key: bytes | None,
    prev: str | None,
    lines: list[_Line],
    seq_issues: dict[int, tuple[str, str]],
    report: VerifyReport,
    sigs: _Signatures,
) -> int | None:
    """Check each line against the hash chain, each checkpoint against its keyed MAC and its
    signature, each approval against its signature; count records and checkpoints. Return the
    line of the last checkpoint that matched."""
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
        edited = (before is not None and chain_hash(before, ln.body) != ln.h
                  and ln.no not in seq_issues)
        if edited:
            # The seq is where it belongs, so this line (or its predecessor) was changed.
            add(Finding("error", "edited", name, ln.no, ln.seq,
                        "record does not match the hash chain: edited"))
        if ln.kind in ("ckpt", "seal"):
            report.checkpoints += 1
            if ln.seq is None:
                continue
            why: list[str] = []
            if key is not None and not mac_matches(
                    checkpoint_mac(key, info.writer, info.n, ln.seq, str(ln.obj.get("head")),
                                   ln.obj), ln.obj.get("mac")):
                why.append("its keyed MAC does not match")
            if (key is not None or sigs.trust is not None) and ln.obj.get("head") != before:
                why.append("it covers another chain head")
            bad_sig = sigs.problem(ln)
            if bad_sig:
                why.append(bad_sig)
            if why:
                since = "the segment start" if last_good_ckpt is None else (
                    f"line {last_good_ckpt}")
                add(Finding("error", "rewritten", name, ln.no, ln.seq,
                            f"checkpoint does not hold ({'; '.join(why)}): records between"
                            f" {since} and line {ln.no} were altered and re-chained"))
            elif key is not None or sigs.trust is not None:
                last_good_ckpt = ln.no
        else:
            if ln.kind != "open":
                report.records += 1
            if ln.kind == "a":
                bad_sig = sigs.problem(ln)
                if bad_sig is None and sigs.trust is not None and "sig" in ln.obj and (
                        ln.obj.get("head") != before):
                    bad_sig = "it covers another chain head"
                if bad_sig and not edited:  # an edit that does not chain is reported as such
                    add(Finding("error", "forged", name, ln.no, ln.seq,
                                f"approval does not hold ({bad_sig}): altered or forged"))
    sigs.finish()
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
