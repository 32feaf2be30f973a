"""Each rule of `verify`'s check of one segment has a tamper only it catches, and says what it
found in words a reader can act on: which seqs are missing (one, or a run), which seq stands
where another belongs or what it follows, the header that is not the segment's, a line that is
no record or has no chain hash or no seq, a checkpoint or an approval naming another chain head
(with either key alone), key ids cut to 16 characters, unsigned lines and another machine's
signatures counted per segment, how a segment ends (a line after its seal, a torn tail, a
crash just after a checkpoint) and the quarantine file a recovered seal names; lines of a kind
verify does not know are counted and chained, and claims of torn bytes are believed only from a
recovery's seal."""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.audit import workload
from support.forge import reforge, write_trail

from tooltrace.audit import (
    load_key,
    load_public_key,
    load_signer,
    recover_dead_segments,
    trust_for,
    verify,
    verify_audit,
)
from tooltrace.audit._format import chain_hash, seal_line, split_hash
from tooltrace.telemetry import AuditSink


@pytest.fixture(autouse=True)
def _own_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOLTRACE_AUDIT_KEY", "TOOLTRACE_SIGNING_KEY", "TOOLTRACE_HOME"):
        monkeypatch.delenv(name, raising=False)


def _trail(home: Path, n: int = 120, *, seg_bytes: int = 60_000, seed: int = 7) -> str:
    """One writer's sealed segments, checked clean; return the writer id."""
    sink = AuditSink(home, checkpoint_every=25, segment_max_bytes=seg_bytes, group_max_records=8)
    for r in workload(n, seed=seed):
        sink.emit(r)
    sink.shutdown()
    assert sink.writer_id is not None
    rep = verify(home)
    assert rep.ok and rep.findings == [], rep.findings
    return sink.writer_id


def _segments(home: Path) -> list[Path]:
    return sorted((home / "audit" / "segments").glob("*.jsonl"))


def _read(seg: Path) -> list[bytes]:
    return seg.read_bytes().splitlines()


def _write(seg: Path, lines: list[bytes]) -> None:
    seg.write_bytes(b"".join(ln + b"\n" for ln in lines))


def _seq(line: bytes) -> int:
    seq = orjson.loads(line)["seq"]
    assert isinstance(seq, int)
    return seq


def _is_call(line: bytes) -> bool:
    return line.startswith(b'{"k":"c"')


def _rechain(lines: list[bytes], start: int) -> None:
    """Re-make the chain hashes from ``start`` on, as someone without the key would."""
    prev = split_hash(lines[start - 1])[1]  # type: ignore[index]
    for j in range(start, len(lines)):
        sp = split_hash(lines[j])
        body = sp[0] if sp is not None else lines[j]
        prev = chain_hash(prev, body)
        lines[j] = seal_line(body, prev).rstrip(b"\n")


def _found(home: Path, seg: Path) -> list[tuple[str, str, int | None, str]]:
    return [(f.severity, f.kind, f.line, f.message) for f in verify(home).findings
            if f.segment == seg.name]


def _errors(home: Path, seg: Path) -> list[tuple[str, int | None, str]]:
    return [(k, line, msg) for sev, k, line, msg in _found(home, seg) if sev == "error"]


# -- the order of the seqs ------------------------------------------------------------------------


def test_the_record_just_before_a_seal_deleted_is_named_missing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _trail(home)
    # A segment whose seal has an odd seq: the seq before it is even.
    seg = next(s for s in _segments(home) if _seq(_read(s)[-1]) % 2 == 1)
    lines = _read(seg)
    assert lines[-1].startswith(b'{"k":"seal"') and _is_call(lines[-2])
    gone = _seq(lines[-2])
    del lines[-2]
    _write(seg, lines)
    errs = _errors(home, seg)
    assert errs[0] == ("deleted", len(lines), f"seq {gone} missing before this line: deleted")
    assert [k for k, _, _ in errs[1:]] == ["rewritten"]  # the seal covers the deleted record


def test_records_deleted_in_a_run_are_named_as_one_range_and_a_single_one_alone(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    _trail(home)
    seg = _segments(home)[0]
    lines = _read(seg)
    assert all(_is_call(ln) for ln in lines[4:9] + lines[14:17])
    run = [_seq(ln) for ln in lines[5:8]]
    single = _seq(lines[15])
    del lines[15]
    del lines[5:8]
    _write(seg, lines)
    assert _errors(home, seg) == [
        ("deleted", 6, f"seq {run[0]}..{run[-1]} missing before this line: deleted"),
        ("deleted", 13, f"seq {single} missing before this line: deleted"),
    ]


def test_a_replayed_record_does_not_hide_a_deletion_after_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _trail(home)
    seg = _segments(home)[0]
    lines = _read(seg)
    assert all(_is_call(ln) for ln in lines[4:20])
    gone = _seq(lines[15])
    del lines[15]
    lines.insert(6, lines[5])  # a genuine record written again
    _write(seg, lines)
    errs = _errors(home, seg)
    assert [(k, line) for k, line, _ in errs] == [("inserted", 7), ("deleted", 17)]
    assert errs[1][2] == f"seq {gone} missing before this line: deleted"


def test_records_swapped_late_in_a_long_segment_say_which_seq_belongs_there(
        tmp_path: Path) -> None:
    """Seqs past 256 (where Python stops sharing small int objects) verify clean, and a swap
    there names, for each of the two lines, the seq found and the seq that belongs there."""
    home = tmp_path / "home"
    _trail(home, 300, seg_bytes=10_000_000)
    (seg,) = _segments(home)
    lines = _read(seg)
    assert _seq(lines[0]) == 1 and len(lines) > 300
    i = next(j for j in range(256, len(lines) - 2)
             if _is_call(lines[j]) and _is_call(lines[j + 1]))
    a, b = _seq(lines[i]), _seq(lines[i + 1])
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    _write(seg, lines)
    rep = verify(home)
    assert [(f.kind, f.line, f.seq, f.message) for f in rep.findings] == [
        ("reordered", i + 1, b, f"seq {b} found where seq {a} belongs"),
        ("reordered", i + 2, a, f"seq {a} found where seq {b} belongs"),
    ]


def test_a_record_moved_back_in_a_segment_with_a_gap_names_the_seq_it_follows(
        tmp_path: Path) -> None:
    """With a record also deleted, the seqs cannot be matched one to one: the line that went
    backwards is named after the highest seq seen before it, and the gap on its own."""
    home = tmp_path / "home"
    _trail(home)
    seg = _segments(home)[0]
    lines = _read(seg)
    assert all(_is_call(ln) for ln in lines[8:18])
    a, b = _seq(lines[9]), _seq(lines[10])
    assert b == a + 1 and b % 2 == 1  # an odd seq jumped to
    gone = _seq(lines[15])
    del lines[15]
    lines[9], lines[10] = lines[10], lines[9]
    _write(seg, lines)
    assert _errors(home, seg) == [
        ("reordered", 11, f"seq {a} found after seq {b}"),
        ("deleted", 16, f"seq {gone} missing before this line: deleted"),
    ]


def test_a_record_replayed_from_an_earlier_segment_says_which_seq_belongs_there(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    _trail(home)
    first, later = _segments(home)[:2]
    replay = next(ln for ln in _read(first)[5:] if _is_call(ln))
    lines = _read(later)
    start = _seq(lines[0])
    lines.insert(10, replay)
    _write(later, lines)
    errs = _errors(home, later)
    assert errs[0] == ("reordered", 11, f"seq {_seq(replay)} found where seq {start + 10} belongs")
    assert {k for k, _, _ in errs} == {"reordered"}
    assert _errors(home, first) == []


# -- the segment's header -------------------------------------------------------------------------


@pytest.mark.parametrize("change", [
    "earlier writer", "later writer", "earlier segment", "later segment", "kind before",
    "kind after"])
def test_a_first_line_that_is_not_this_segments_header_is_named(
        tmp_path: Path, change: str) -> None:
    """A header naming another writer (one sorting before this one and one after it), an
    earlier or a later segment number, or a first line of another kind (sorting before "open"
    or after it), is not this segment's header."""
    home = tmp_path / "home"
    _trail(home)
    seg = _segments(home)[1]
    lines = _read(seg)
    body, h = split_hash(lines[0])  # type: ignore[misc]
    head = orjson.loads(body)
    assert head["k"] == "open"
    if change.endswith("writer"):
        head["writer"] = "0-earlier" if change == "earlier writer" else "z-later"
    elif change.endswith("segment"):
        head["segment"] = 1 if change == "earlier segment" else 3
    else:
        head["k"] = "ckpt" if change == "kind before" else "seal"
    new = orjson.dumps(head)
    lines[0] = seal_line(new, h).rstrip(b"\n")  # its old hash: the edit itself shows too
    _write(seg, lines)
    errs = _errors(home, seg)
    assert ("corrupt", 1, "first line is not this segment's header") in errs


def test_a_writers_segments_past_the_256th_verify_clean(tmp_path: Path) -> None:
    """Segment numbers past 256, where Python stops sharing small int objects."""
    home = tmp_path / "home"
    sink = AuditSink(home, checkpoint_every=25, segment_max_bytes=1, group_max_records=1,
                     fsync="none")
    for r in workload(260):
        sink.emit(r)
    sink.shutdown()
    rep = verify(home)
    assert rep.ok and rep.findings == [], rep.findings[:3]
    assert rep.segments > 256 and rep.records == 260


def test_a_header_without_its_seq_after_a_deleted_segment_counts_from_the_first_seq(
        tmp_path: Path) -> None:
    """Nothing says where the segment's seqs start (its predecessor is gone, its header has no
    seq): every seq from the writer's first, 1, up to its first record is missing."""
    home = tmp_path / "home"
    _trail(home)
    first, second = _segments(home)[:2]
    first.unlink()
    lines = _read(second)
    body, h = split_hash(lines[0])  # type: ignore[misc]
    head = orjson.loads(body)
    header_seq = head.pop("seq")
    lines[0] = seal_line(orjson.dumps(head), h).rstrip(b"\n")  # its hash kept: the next chains
    _write(second, lines)
    assert _errors(home, second) == [
        ("deleted", 2, f"seq 1..{header_seq} missing before this line: deleted")]


# -- lines verify cannot read as records ----------------------------------------------------------


def _two_calls_in_a_row(lines: list[bytes]) -> int:
    """The index of a call line (past the first few) that another call line follows."""
    return next(j for j in range(5, len(lines)) if _is_call(lines[j]) and _is_call(lines[j + 1]))


def test_a_line_that_is_not_a_record_is_named_and_its_seq_missing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _trail(home)
    seg = _segments(home)[0]
    lines = _read(seg)
    i = _two_calls_in_a_row(lines)
    gone = _seq(lines[i])
    lines[i] = b"this line was overwritten"
    _write(seg, lines)
    assert _errors(home, seg) == [
        ("corrupt", i + 1, "line is not a valid record (edited?)"),
        ("deleted", i + 2, f"seq {gone} missing before this line: deleted"),
    ]


def test_a_line_without_its_chain_hash_does_not_hide_the_lines_after_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _trail(home)
    seg = _segments(home)[0]
    lines = _read(seg)
    i = _two_calls_in_a_row(lines)
    gone = _seq(lines[i])
    lines[i] = split_hash(lines[i])[0]  # type: ignore[index]
    _write(seg, lines)
    rep = verify(home)
    assert [(f.kind, f.line, f.message) for f in rep.findings if f.segment == seg.name] == [
        ("corrupt", i + 1, "line has no chain hash (edited?)"),
        ("deleted", i + 2, f"seq {gone} missing before this line: deleted"),
    ]
    assert rep.records == 119


def test_a_checkpoint_stripped_of_its_seq_does_not_stop_the_check_of_the_lines_after_it(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    _trail(home)
    clean = verify(home)
    seg = _segments(home)[0]
    lines = _read(seg)
    ckpts = [j for j, ln in enumerate(lines) if ln.startswith((b'{"k":"ckpt"', b'{"k":"seal"'))]
    assert len(ckpts) >= 2
    i = ckpts[0]
    body = split_hash(lines[i])[0]  # type: ignore[index]
    obj = orjson.loads(body)
    gone = obj.pop("seq")
    lines[i] = orjson.dumps(obj)
    _rechain(lines, i)
    _write(seg, lines)
    rep = verify(home)
    found = [(f.kind, f.line) for f in rep.findings if f.segment == seg.name]
    assert found == [("deleted", i + 2)] + [("rewritten", c + 1) for c in ckpts[1:]]
    assert f"seq {gone} missing" in rep.findings[0].message
    assert (rep.records, rep.checkpoints) == (clean.records, clean.checkpoints)
    # Every checkpoint and seal of the trail is counted once.
    on_disk = sum(1 for p in _segments(home) for ln in _read(p)
                  if ln.startswith((b'{"k":"ckpt"', b'{"k":"seal"')))
    assert clean.checkpoints == on_disk


# -- signatures by another machine's key ----------------------------------------------------------


def test_another_machines_signatures_in_an_archive_are_counted_per_key_and_segment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its segments checked beside this home's (as ``verify --archive`` lays them out), with
    only this home's public key: each segment gets one warning per key its lines name, with
    the number of lines that key signed there; a key id is shown by its first 16 characters,
    however long the line's field."""
    monkeypatch.setenv("TOOLTRACE_AUDIT_KEY", "one audit key for the fleet")
    here, there = tmp_path / "here", tmp_path / "there"
    write_trail(here, writers=1, n=40)
    write_trail(there, writers=1, n=60)
    key = load_key(there, create=False)
    assert key is not None
    long_kid = "f" * 200
    first_approval: list[int] = []

    def edit(writer: str, seq: int, obj: dict[str, object]) -> dict[str, object]:
        if obj["k"] == "a" and not first_approval:
            first_approval.append(seq)
            obj["kid"] = long_kid
        return obj

    reforge(there, key, None, edit)  # chains and MACs made again; signatures left as they were
    theirs = _segments(there)
    assert len(theirs) >= 2
    expected = []
    for seg in theirs:
        kids = collections.Counter(o["kid"] for o in map(orjson.loads, _read(seg)) if "sig" in o)
        assert kids and all(n >= 2 for k, n in kids.items() if k != long_kid)
        for kid, n in sorted(kids.items()):
            shown = "f" * 16 if kid == long_kid else kid
            assert len(shown) == 16
            expected.append(("warning", "unverified", seg.name,
                             f"{n} signatures by key {shown} (another machine's) not checked:"
                             " pass its public key to check them"))
        shutil.copy(seg, here / "audit" / "segments")
    assert sum(1 for e in expected if "f" * 16 in e[3]) == 1
    rep = verify_audit(here / "audit", key, in_archive=True, trust=trust_for(here))
    assert [(f.severity, f.kind, f.segment, f.message) for f in rep.findings] == expected
    assert rep.ok


def test_a_line_naming_an_untrusted_key_shows_its_first_16_characters(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_trail(home, writers=1, n=40)
    key = load_key(home, create=False)
    pub = load_public_key(home)
    assert key is not None and pub is not None
    target: list[int] = []

    def edit(writer: str, seq: int, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["k"] == "a" and not target:
            target.append(seq)
            obj["kid"] = "f" * 200
        return obj

    reforge(home, key, None, edit)
    forged = [(f.seq, f.message) for f in verify(home).findings if f.kind == "forged"]
    # (the approvals after it no longer hold either: each signature covers the head before it)
    assert forged[0] == (target[0], f"approval does not hold (signed by key {'f' * 16}, not by"
                                    f" the trusted key ({pub.kid})): altered or forged")


def test_unsigned_lines_are_reported_once_per_segment_with_how_many_more(
        tmp_path: Path) -> None:
    """Signatures stripped from a whole trail, its chains and MACs made again with the audit
    key: each segment names its first unsigned line and counts the others."""
    home = tmp_path / "home"
    write_trail(home, writers=1, n=60)
    key = load_key(home, create=False)
    assert key is not None
    reforge(home, key, None, _unsigned)
    expected = []
    counts = []
    for seg in _segments(home):
        signed = [(no, o["k"]) for no, o in enumerate(map(orjson.loads, _read(seg)), start=1)
                  if o["k"] in ("ckpt", "seal", "a")]
        no, kind = signed[0]
        counts.append(len(signed))
        expected.append((seg.name, no, f"{kind} line at line {no} carries no signature (and"
                         f" {len(signed) - 1} more in this segment): written before signatures,"
                         " or stripped"))
    assert any(n % 2 == 0 for n in counts) and all(n > 2 for n in counts)
    rep = verify(home)
    assert [(f.segment, f.line, f.message) for f in rep.findings
            if f.kind == "unsigned" and f.segment != "digest.jsonl"] == expected


@pytest.mark.parametrize("order", ["before", "after"])
def test_an_approval_that_names_another_chain_head_is_forged_however_the_heads_compare(
        tmp_path: Path, order: str) -> None:
    """The record before an approval altered and the chain made again, the approval's body (and
    so its signature) left as it was: the approval names a head the chain no longer has. The
    alteration is chosen so the new head sorts before (or after) the one the approval names."""
    home = tmp_path / "home"
    write_trail(home, writers=1, n=40)
    seg, no = next((p, j) for p in _segments(home) for j, ln in enumerate(_read(p))
                   if ln.startswith(b'{"k":"a"') and _is_call(_read(p)[j - 1]))
    lines = _read(seg)
    named = orjson.loads(split_hash(lines[no])[0])["head"]  # type: ignore[index]
    prev = split_hash(lines[no - 2])[1]  # type: ignore[index]
    body = split_hash(lines[no - 1])[0]  # type: ignore[index]
    for k in range(1000):
        altered = body.replace(b'"status":"', f'"status":"{k}'.encode(), 1)
        if (chain_hash(prev, altered) < named) == (order == "before"):
            break
    lines[no - 1] = altered
    _rechain(lines, no - 1)
    _write(seg, lines)
    rep = verify(home)
    forged = [(f.line, f.message) for f in rep.findings if f.kind == "forged"]
    assert forged[0] == (no + 1, "approval does not hold (it covers another chain head): altered"
                                 " or forged")


# -- how a segment ends ---------------------------------------------------------------------------


# -- lines of a kind verify does not know, and claims only some lines may make -------------------


def _resigned(home: Path, edit: Callable[[str, int, dict[str, Any]], dict[str, Any]]) -> None:
    """Rewrite the trail with ``edit`` and make every chain, MAC, signature and digest entry
    hold again with the home's own keys (what a later version of the writer could write)."""
    key = load_key(home, create=False)
    signer = load_signer(home, create=False)
    assert key is not None and signer is not None
    reforge(home, key, signer, edit)


def test_a_record_of_a_kind_verify_does_not_know_is_counted_not_taken_for_an_approval(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    _trail(home)
    target = _seq(next(ln for ln in _read(_segments(home)[0])[5:] if _is_call(ln)))

    def edit(writer: str, seq: int, obj: dict[str, Any]) -> dict[str, Any]:
        if seq == target:
            obj["k"] = "X"  # sorts before "a"
        return obj

    _resigned(home, edit)
    rep = verify(home)
    assert rep.ok and rep.findings == [] and rep.records == 120


@pytest.mark.parametrize("kind", ["c", "x"])
def test_a_line_chained_on_after_the_seal_is_reported_whatever_its_kind(
        tmp_path: Path, kind: str) -> None:
    """Anyone can extend a hash chain: a line added after a sealed segment's seal, chained and
    numbered on, means the segment no longer ends with its seal (a record, or a line of a kind
    verify does not know, "x", sorting after "seal")."""
    home = tmp_path / "home"
    _trail(home)
    seg = _segments(home)[-1]
    lines = _read(seg)
    last = split_hash(lines[-1])[1]  # type: ignore[index]
    seq = _seq(lines[-1]) + 1
    body = orjson.dumps({"k": kind, "call_id": "added", "seq": seq})
    lines.append(seal_line(body, chain_hash(last, body)).rstrip(b"\n"))
    _write(seg, lines)
    assert _errors(home, seg) == [
        ("truncated", len(lines), f"sealed segment ends at line {len(lines)} (seq {seq}) without"
                                  " its seal: tail truncated")]


@pytest.mark.parametrize("where", [
    "a writer's closing seal", "a rotation's seals", "a crashed writer's last record",
    "a crashed writer's last line of a kind verify does not know"])
def test_only_a_recoverys_seal_is_believed_about_torn_bytes(tmp_path: Path, where: str) -> None:
    """A seal that a recovery did not write ("close" sorts before "recovered", "rotate" after
    it), or a last line that is no seal (a record, or a kind "x" sorting after "seal"), which
    claims torn bytes: verify warns of no torn record (the trail signed whole again, so that
    this claim is all that differs)."""
    home = tmp_path / "home"
    _trail(home)
    live = _crashed(home, 12, 5)
    lines = _read(live)
    assert _is_call(lines[-1])
    crashed = live.name.split(".")[0]
    end = _seq(lines[-1])
    claim = {"reason": "recovered", "torn_bytes": 7, "quarantine": ["quarantine/x.torn"]}

    def edit(writer: str, seq: int, obj: dict[str, Any]) -> dict[str, Any]:
        if where == "a writer's closing seal" and obj.get("reason") == "close":
            obj.update(claim, reason="close")
        elif where == "a rotation's seals" and obj.get("reason") == "rotate":
            obj.update(claim, reason="rotate")
        elif writer == crashed and seq == end and where.startswith("a crashed writer's"):
            obj.update(claim)
            if where.endswith("does not know"):
                obj["k"] = "x"
        return obj

    _resigned(home, edit)
    assert b'"torn_bytes":7' in b"".join(p.read_bytes() for p in _segments(home))
    rep = verify(home)
    assert rep.ok and [f.kind for f in rep.findings] == ["unsealed"], rep.findings


_CRASHING_WRITER = textwrap.dedent("""
    import os, sys, time
    from support.audit import workload
    from tooltrace.telemetry import AuditSink

    n, every = int(sys.argv[2]), int(sys.argv[3])
    # No checkpoint on a timer: they fall every `every` records, whatever the machine's load.
    sink = AuditSink(sys.argv[1], checkpoint_every=every, checkpoint_interval_s=3600,
                     group_max_records=4)
    for r in workload(n):
        sink.emit(r)
    end = time.monotonic() + 60
    while sink.acked_records < n and time.monotonic() < end:  # on disk, not sealed
        time.sleep(0.001)
    os._exit(0 if sink.acked_records == n else 3)  # a crash: no seal, no digest entry
""")


def _crashed(home: Path, n: int, every: int) -> Path:
    """The live segment a writer process left when it died after writing ``n`` records."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", _CRASHING_WRITER, str(home), str(n), str(every)],
                   env=env, check=True, timeout=120)
    (seg,) = sorted((home / "audit" / "segments").glob("*.live.jsonl"))
    return seg


def _unsigned(writer: str, seq: int, obj: dict[str, Any]) -> dict[str, Any]:
    obj.pop("sig", None)
    obj.pop("kid", None)
    return obj


@pytest.mark.parametrize("keys", ["the audit key only", "the public key only"])
@pytest.mark.parametrize("where", ["before the first checkpoint", "after it"])
def test_with_either_key_alone_a_forged_record_fails_the_heads_of_the_checkpoints_after_it(
        tmp_path: Path, keys: str, where: str) -> None:
    """A record forged in a crashed writer's segment and the chain re-made, the checkpoints'
    bodies left as they were: with the audit key alone (a trail written before signatures) or
    the public key alone (a copy checked elsewhere), each checkpoint from the forged record on
    names a head the chain no longer has, and says since which checkpoint that still held."""
    home = tmp_path / "home"
    seg = _crashed(home, 45, 10)
    if keys == "the audit key only":
        key = load_key(home, create=False)
        assert key is not None
        reforge(home, key, None, _unsigned)
        shutil.rmtree(home / "keys")
    else:
        (home / "audit.key").rename(tmp_path / "audit.key")
    rep = verify(home, allow_unsigned=True)
    assert rep.ok and [f.kind for f in rep.findings if f.segment == seg.name] == ["unsealed"]
    lines = _read(seg)
    ckpts = [j for j, ln in enumerate(lines) if ln.startswith(b'{"k":"ckpt"')]
    assert len(ckpts) >= 3
    lo, hi = (1, ckpts[0]) if where == "before the first checkpoint" else (
        ckpts[0] + 1, ckpts[1])
    i = next(j for j in range(lo, hi) if _is_call(lines[j]))
    lines[i] = lines[i].replace(b'"status":"', b'"status":"x', 1)
    _rechain(lines, i)
    _write(seg, lines)
    rep = verify(home, allow_unsigned=True)
    since, bad = ("the segment start", ckpts) if where == "before the first checkpoint" else (
        f"line {ckpts[0] + 1}", ckpts[1:])
    assert [(f.kind, f.line, f.message) for f in rep.findings if f.severity == "error"] == [
        ("rewritten", c + 1, "checkpoint does not hold (it covers another chain head): records"
                             f" between {since} and line {c + 1} were altered and re-chained")
        for c in bad]


def test_a_writer_that_stopped_just_after_a_checkpoint_leaves_no_record_uncovered(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    seg = _crashed(home, 45, 10)
    lines = _read(seg)
    ckpts = [j for j, ln in enumerate(lines) if ln.startswith(b'{"k":"ckpt"')]
    _write(seg, lines[: ckpts[-1] + 1])  # as if it died right after writing the checkpoint
    (found,) = verify(home).findings
    assert (found.kind, found.line) == ("unsealed", ckpts[-1] + 1)
    assert found.message == ("writer stopped without sealing (crash); 0 records after the last"
                             " checkpoint are not covered by one")


def test_a_recovered_seal_names_the_file_its_torn_bytes_were_set_aside_in(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    seg = _crashed(home, 12, 5)
    whole = seg.stat().st_size
    last = len(_read(seg))
    with seg.open("ab") as f:
        f.write(b'{"k":"c","call_id":"half a rec')  # the record the writer was writing
    torn = [(f.severity, f.line, f.message) for f in verify(home).findings if f.kind == "torn"]
    assert torn == [("warning", last + 1, f"torn record (30 bytes after line {last}, byte"
                                          f" offset {whole}): incomplete write")]
    key = load_key(home, create=False)
    assert key is not None
    (r,) = recover_dead_segments(home / "audit", key)
    assert r.torn_bytes == 30 and r.quarantined is not None
    rep = verify(home)
    assert rep.ok
    assert [(f.severity, f.kind, f.message) for f in rep.findings] == [
        ("warning", "torn", f"writer crashed mid-write: 30 torn bytes set aside in"
                            f" {r.quarantined}")]
