"""Check every writer's hash chain and keyed, signed checkpoints; say exactly where a record was
edited, deleted, reordered or inserted, and whether a segment lost its tail. Check the segment
digest (``_manifest``) and, against it, that no segment and no writer is missing: every segment
it names is on disk, or the digest says (keyed) that it was compacted or shipped and pruned.

Severity ``error`` is evidence of tampering or damage; ``warning`` is what a crash leaves behind
(a torn record, an unsealed segment of a dead writer, a writer that died while opening a segment
or between sealing one and opening the next) and is reported but not failed on.

Signatures (``_signing``) are what ``verify`` trusts: every checkpoint, seal, approval and
digest entry must carry one that verifies with a trusted public key (``Trust``); a line without
one is an error unless unsigned lines are allowed (a trail written before signatures), and with
no public key at all nothing can be vouched for. The HMAC is checked too when the audit key is
at hand; a copied trail verifies with the public key alone.

What cannot be seen from inside the home: the digest's newest entries removed together with
every segment they name (a rollback to an earlier state), the whole home removed or replaced by
an older copy, records after a crashed writer's last checkpoint removed from its unsealed
segment (a crash can end a segment there too), and anything done by someone who holds the
signing key, or who replaced it and the public key beside it. The head ``verify`` prints, kept
elsewhere and passed back as ``expect``, catches the first two; a public key kept elsewhere
(``--pubkey``) and the anchors (``_anchors``, kept under Object Lock) catch the rest.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._settings import resolve_home
from ._findings import Finding, VerifyReport
from ._format import chain_hash, checkpoint_mac, genesis_hash, load_key, mac_matches
from ._manifest import (
    DIGEST_GENESIS,
    Digest,
    SegmentFate,
    digest_path,
    parse_head,
    read_digest,
)
from ._segmentcheck import verify_segment
from ._segments import SegmentInfo, audit_dir, list_segments, locate_segment, writer_alive

if TYPE_CHECKING:
    from ._signing import PublicKey, Trust

__all__ = ["Finding", "VerifyReport", "trust_for", "verify", "verify_audit"]

DIGEST_NAME = digest_path(Path()).name


class _Fates:
    """The digest's word on each segment, read again when a segment is not where an earlier
    read put it (compaction may have pruned it meanwhile: the digest says so first)."""

    def __init__(self, adir: Path, key: bytes | None, digest: Digest,
                 trust: Trust | None) -> None:
        self._adir = adir
        self._key = key
        self._trust = trust
        self._size = 0
        self.by_segment: dict[tuple[str, int], SegmentFate] = {}
        self._take(digest)
        self.writers = {w for w, _ in self.by_segment}
        #: The highest segment number the digest names, per writer (as first read: segments
        #: opened since are not expected).
        self.top: dict[str, int] = {}
        for w, n in self.by_segment:
            self.top[w] = max(n, self.top.get(w, 0))

    def _take(self, digest: Digest) -> None:
        # An entry that was changed or forged says nothing about its segment (one that is in
        # place after a deleted entry, or moved, is still genuine).
        bad = {f.line for f in _digest_problems(digest, self._key, self._trust)
               if f.line is not None and f.kind in ("edited", "rewritten", "corrupt")}
        self._size = digest.size
        self.by_segment = digest.fates(skip=bad)

    def get(self, writer: str, n: int, *, fresh: bool = False) -> SegmentFate | None:
        """What the digest says about segment ``n`` of ``writer``; ``fresh``: re-read it first
        if it has grown."""
        if fresh:
            try:
                size = digest_path(self._adir).stat().st_size
            except FileNotFoundError:
                size = 0
            if size != self._size:
                self._take(read_digest(self._adir))
        return self.by_segment.get((writer, n))


def _digest_problems(digest: Digest, key: bytes | None, trust: Trust | None,
                     report: VerifyReport | None = None) -> list[Finding]:
    """What is wrong with the digest's own chain and its keyed, signed entries (``report``:
    count the signatures that verified there)."""
    from ._signing import digest_payload

    out: list[Finding] = []
    add = out.append
    keys = trust.keys if trust is not None else {}
    unsigned: list[int] = []
    for no, _raw in digest.bad:
        add(Finding("error", "corrupt", DIGEST_NAME, no, None,
                    "digest line is not a valid entry (edited?)"))
    prev, expected = DIGEST_GENESIS, 1
    for ln in digest.lines:
        if ln.seq is None:
            add(Finding("error", "corrupt", DIGEST_NAME, ln.no, None, "digest entry has no seq"))
        elif ln.seq > expected:
            rng = f"{expected}" if ln.seq == expected + 1 else f"{expected}..{ln.seq - 1}"
            add(Finding("error", "deleted", DIGEST_NAME, ln.no, ln.seq,
                        f"digest entry {rng} missing before this line: deleted"))
        elif ln.seq < expected:
            add(Finding("error", "inserted", DIGEST_NAME, ln.no, ln.seq,
                        f"digest entry {ln.seq} found after entry {expected - 1}: inserted or"
                        " moved"))
        elif chain_hash(prev, ln.body) != ln.h:
            add(Finding("error", "edited", DIGEST_NAME, ln.no, ln.seq,
                        "digest entry does not match the digest's hash chain: edited"))
        elif key is not None and not mac_matches(
                checkpoint_mac(key, ln.writer, ln.n, ln.seq, prev, ln.obj), ln.obj.get("mac")):
            add(Finding("error", "rewritten", DIGEST_NAME, ln.no, ln.seq,
                        "digest entry's keyed MAC does not match: written or re-chained"
                        " without the key"))
        elif keys and trust is not None:
            sig = ln.obj.get("sig")
            pk = keys.get(str(ln.obj.get("kid")))
            if sig is None:
                unsigned.append(ln.no)
            elif pk is None:
                add(Finding("error", "rewritten", DIGEST_NAME, ln.no, ln.seq,
                            f"digest entry is signed by key {str(ln.obj.get('kid'))[:16]}, not"
                            f" by the trusted key ({trust.describe()})"))
            elif not pk.verify(digest_payload(prev, ln.seq, ln.obj), sig):
                add(Finding("error", "rewritten", DIGEST_NAME, ln.no, ln.seq,
                            "digest entry's signature does not verify: written or re-chained"
                            " without the signing key"))
            elif report is not None:
                report.signatures += 1
        prev = ln.h
        if ln.seq is not None:
            expected = max(expected, ln.seq + 1)
    if unsigned and trust is not None:
        more = f" (and {len(unsigned) - 1} more)" if len(unsigned) > 1 else ""
        add(Finding("warning" if trust.allow_unsigned else "error", "unsigned", DIGEST_NAME,
                    unsigned[0], None, f"digest entry at line {unsigned[0]} carries no"
                    f" signature{more}: written before signatures, or stripped"))
    if digest.tail:
        last = digest.lines[-1].no if digest.lines else 0
        add(Finding("warning", "torn", DIGEST_NAME, last + 1, None,
                    f"torn entry ({len(digest.tail)} bytes after line {last}): a process stopped"
                    " while recording; the next entry cuts it off"))
    return out


def _check_expect(digest: Digest, expect: str, report: VerifyReport) -> None:
    """The digest must still hold the entry ``expect`` names, unchanged."""
    seq, h = parse_head(expect)
    if seq == 0:
        ok = h == DIGEST_GENESIS
        have = None
    else:
        have = next((ln for ln in digest.lines if ln.seq == seq), None)
        ok = have is not None and have.h == h
    if ok:
        return
    end = digest.head.partition(":")[0]
    if have is None and seq:
        msg = (f"the digest ends at entry {end}, before the expected head (entry {seq}): its"
               " newest entries were removed with their segments, or the home was replaced")
        kind = "rolledback"
    else:
        msg = (f"digest entry {seq} is not the expected head: the digest was rewritten or the"
               " home replaced")
        kind = "replaced"
    report.findings.append(Finding("error", kind, DIGEST_NAME, None, seq, msg))


def _span(ns: list[int]) -> str:
    if ns == list(range(ns[0], ns[-1] + 1)):
        return f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}..{ns[-1]}"
    return ", ".join(map(str, ns))


def _removed(fate: SegmentFate | None, in_archive: bool) -> bool:
    """True when the digest says the segment's file was removed on purpose."""
    if fate is None:
        return False
    # In an archive, a segment pruned after shipping must be found there.
    return fate.dropped or (fate.pruned is not None and not (in_archive and fate.shipped))


def _report_gone(writer: str, gone: list[int], whole: bool, fates: _Fates,
                 report: VerifyReport) -> None:
    """Segments the digest names that are neither here nor removed on purpose."""
    add = report.findings.append
    if whole:
        add(Finding("error", "deleted", f"{writer}.{gone[0]:06d}.jsonl", None, None,
                    f"writer {writer} is missing: the digest records its segment"
                    f"{'s' if len(gone) > 1 else ''} {_span(gone)}, none is left and none was"
                    " compacted or shipped and pruned: deleted"))
        return
    for n in gone:
        fate = fates.get(writer, n)
        what = "sealed" if fate is not None and fate.sealed else "opened"
        add(Finding("error", "deleted", f"{writer}.{n:06d}.jsonl", None, None,
                    f"segment {n} of writer {writer} is missing: the digest records it {what},"
                    " not compacted or shipped and pruned: deleted"))


def _verify_writer(adir: Path, key: bytes | None, writer: str, listed: list[SegmentInfo],
                   fates: _Fates, report: VerifyReport, *, recorded: bool,
                   in_archive: bool, trust: Trust | None) -> None:
    """Walk one writer's segments 1..n: those on disk by their chains, the others by what the
    digest says became of them. ``recorded``: every segment here must be named in the digest.
    """
    add = report.findings.append
    known = writer in fates.writers
    on_disk = {info.n: info for info in listed}
    top = max(max(on_disk, default=0), fates.top.get(writer, 0))
    prev: str | None = genesis_hash(writer)
    seq: int | None = 1
    last_obj: dict[str, Any] | None = None
    gone: list[int] = []
    there = 0  # segments found, being opened, or removed on purpose
    for n in range(1, top + 1):
        fate = fates.get(writer, n)
        info, opening = on_disk.get(n), False
        if info is None and known and not _removed(fate, in_archive):
            info, opening = locate_segment(adir, writer, n)  # moved on since the listing?
        if info is not None and opening:
            there += 1
            if not writer_alive(info.path):
                add(Finding("warning", "unsealed", f"{writer}.{n:06d}.jsonl", None, None,
                            "writer stopped while opening this segment (crash): it holds only"
                            f" its header, in {info.name}"))
            prev, seq, last_obj = None, None, None
            continue
        if info is not None:
            if recorded and (fate is None or fate.opened is None):
                fate = fates.get(writer, n, fresh=True)
                if fate is None or fate.opened is None:
                    add(Finding("error", "inserted", info.name, None, None,
                                "segment is not recorded in the digest: it was put here, or"
                                " the digest lost its newest entries"))
            before = len(report.findings)
            res = verify_segment(info, key, prev, seq, report, trust,
                                 foreign=in_archive and not known)
            if res is not None:
                there += 1
                prev, last_seq, last_obj = res
                seq = None if last_seq is None else last_seq + 1
                sealed = fate.sealed if fate is not None else None
                if (sealed is not None and not info.live and prev != sealed.get("last_h")
                        and not any(f.severity == "error" for f in report.findings[before:])):
                    add(Finding("error", "diverged", info.name, None, last_seq,
                                "segment does not end where the digest recorded its seal:"
                                " replaced"))
                continue
            if not known:
                continue  # gone since the listing; nothing says what it held
        if not known:
            add_missing(report, writer, n, next((i for i in listed if i.n > n), None))
        else:
            if not _removed(fate, in_archive):
                fate = fates.get(writer, n, fresh=True)  # pruned meanwhile?
            if fate is not None and _removed(fate, in_archive):
                there += 1
                if fate.pruned is not None:
                    last = fate.pruned.get("last_seq")
                    prev, seq = fate.pruned.get("last_h"), (
                        last + 1 if isinstance(last, int) else None)
                    last_obj = {"k": "seal", "final": fate.pruned.get("final")}
                # A dropped segment never held a record: the chain goes on from the one before.
                continue
            gone.append(n)
        prev, seq, last_obj = None, None, None
    if gone:
        _report_gone(writer, gone, not there, fates, report)
    if last_obj is not None and last_obj.get("k") == "seal" and last_obj.get("final") is False:
        _check_successor(adir, writer, top, known, report)


def _check_successor(adir: Path, writer: str, top: int, known: bool,
                     report: VerifyReport) -> None:
    """The writer's last segment says it continues: segment ``top + 1`` must exist."""
    add = report.findings.append
    nxt = f"{writer}.{top + 1:06d}.jsonl"
    if not known:
        add(Finding("error", "deleted", nxt, None, None,
                    f"segment {top + 1} of writer {writer} is missing (the previous one says"
                    " it continues): deleted"))
    elif locate_segment(adir, writer, top + 1)[0] is None:
        # The digest names no successor, and none is being opened: the writer died
        # between sealing this segment and opening the next (had it opened one, the
        # digest would say so).
        add(Finding("warning", "unsealed", nxt, None, None,
                    f"writer {writer} stopped after sealing segment {top} and before"
                    " opening the next (crash)"))


def verify_audit(adir: Path, key: bytes | None, *, expect: str | None = None,
                 in_archive: bool = False, rederive: bool = False,
                 trust: Trust | None = None) -> VerifyReport:
    """Verify every segment under ``adir`` (``<home>/audit``): its hash chain, keyed and signed
    checkpoints and signed approvals, and against the segment digest (``_manifest``), that
    every segment and writer the digest names is there, or was compacted or shipped and pruned
    on purpose.

    ``trust``: the public keys every signature must verify with (``Trust``; its
    ``allow_unsigned`` turns unsigned lines into warnings). Without keys in it nothing is
    vouched for by a signature: an error, or a warning when unsigned lines are allowed. None:
    signatures are not checked at all, which a warning says (the low-level use: ``verify``
    always passes a ``Trust``).

    ``expect`` is a head an earlier run printed (``report.head``): the digest must still hold
    that entry unchanged, which catches what cannot be seen from inside the home (its newest
    entries removed together with their segments, the whole home removed or replaced by an
    older copy). Raises ``ValueError`` when it is not a head.

    ``in_archive``: ``adir`` lays an archive's segments out beside the home's own
    (``verify_archive``): a segment pruned after it was shipped must be found there, and the
    segments of writers the home's digest does not name (other machines') are checked by
    their chains alone.

    The module docstring says what stays undetectable (with and without ``expect``).
    """
    report = VerifyReport(keyed=key is not None)
    _note_keys(report, key, trust)
    if expect is not None:
        parse_head(expect)
    listed = list_segments(adir)
    # Read after listing: a writer records a segment before it comes into view, so the
    # digest names every segment listed.
    digest = read_digest(adir)
    report.head = digest.head
    report.findings.extend(_digest_problems(digest, key, trust, report))
    fates = _Fates(adir, key, digest, trust)
    recorded = digest.exists and not in_archive
    if not digest.exists and listed and not in_archive:
        report.findings.append(Finding(
            "error", "deleted", DIGEST_NAME, None, None,
            f"the segment digest is missing while {len(listed)} segments are here: deleted"))
    by_writer: dict[str, list[SegmentInfo]] = collections.defaultdict(list)
    for info in listed:
        by_writer[info.writer].append(info)
    writers = sorted(set(by_writer) | fates.writers)
    report.writers = len(writers)
    for writer in writers:
        _verify_writer(adir, key, writer, by_writer.get(writer, []), fates, report,
                       recorded=recorded or writer in fates.writers, in_archive=in_archive,
                       trust=trust)
    if expect is not None:
        _check_expect(digest, expect, report)
    if key is not None and not in_archive:
        from ._lookupfile import check_lookups
        from ._manifest import read_manifest

        report.lookups, found = check_lookups(adir, read_manifest(adir), key,
                                              rederive=rederive)
        report.findings.extend(found)
    return report


def _note_keys(report: VerifyReport, key: bytes | None, trust: Trust | None) -> None:
    """Say up front what could not be checked for want of a key."""
    add = report.findings.append
    if trust is None:
        add(Finding("warning", "nosignatures", "-", None, None,
                    "signatures were not checked (no public key was given)"))
    elif not trust.keys:
        add(Finding("warning" if trust.allow_unsigned else "error", "nopubkey", "-", None, None,
                    "no public key: no signature was checked, so nothing in the trail is"
                    " vouched for (pass --pubkey, or --allow-unsigned for a trail written"
                    " before signatures)"))
    else:
        report.key_ids = sorted(trust.keys)
    if key is None:
        checked = " (signatures were)" if trust is not None and trust.keys else ""
        add(Finding("warning", "nokey", "-", None, None,
                    f"no audit key: the checkpoints' keyed MACs were not checked{checked}"))


def add_missing(report: VerifyReport, writer: str, n: int, after: SegmentInfo | None) -> None:
    """Record a segment file that should exist but does not."""
    found = f" (found {after.name})" if after is not None else ""
    report.findings.append(Finding(
        "error", "deleted", f"{writer}.{n:06d}.jsonl", None, None,
        f"segment {n} of writer {writer} is missing{found}: deleted"))


def trust_for(home: Path, pubkeys: Sequence[str | os.PathLike[str] | PublicKey] = (), *,
              allow_unsigned: bool = False) -> Trust:
    """The ``Trust`` ``verify`` uses: the given public keys (``PublicKey``, 64 hex digits or
    key files), else the home's own (``<key file>.pub``). Raises ``ConfigurationError`` for a
    public key that cannot be read."""
    from ._signing import PublicKey, Trust, load_public_key

    keys = [k if isinstance(k, PublicKey) else PublicKey.parse(k) for k in pubkeys]
    if not keys:
        own = load_public_key(home)
        keys = [own] if own is not None else []
    return Trust.of(keys, allow_unsigned=allow_unsigned)


def verify(home: str | os.PathLike[str] | None = None, *, expect: str | None = None,
           rederive: bool = False, pubkey: str | os.PathLike[str] | PublicKey | None = None,
           allow_unsigned: bool = False) -> VerifyReport:
    """Verify the audit trail of a tooltrace home (audit key from TOOLTRACE_AUDIT_KEY or the
    home, when there is one); ``expect``: a head an earlier run printed, which the digest must
    still hold; ``rederive``: re-derive every lookup file from its Parquet file (see
    ``verify_audit``); ``pubkey``: the public key signatures must verify with (default: the
    home's own; pass one kept elsewhere to catch a replaced key); ``allow_unsigned``: unsigned
    lines are warnings, not errors (a trail written before signatures)."""
    h = resolve_home(home)
    trust = trust_for(h, [pubkey] if pubkey is not None else [],
                      allow_unsigned=allow_unsigned)
    return verify_audit(audit_dir(h), load_key(h, create=False), expect=expect,
                        rederive=rederive, trust=trust)
