"""Checking a trail against its anchors, finding by finding: which lines of an anchors file are
anchors, which anchors are trusted, and the gap each kind of loss becomes (its writer, segments,
seqs, records and the message a reader acts on). The trails are real, written by the audit sink
and signed with the home's key; the anchors are the home's own or signed with it."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.forge import write_trail

from tooltrace.audit import (
    Finding,
    PublicKey,
    VerifyReport,
    append_digest,
    check_anchors,
    list_segments,
    load_key,
    load_public_key,
    load_signer,
    parse_anchors,
)

SOURCE = "kept.jsonl"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home of two writers, each over six small segments with a checkpoint and a seal."""
    home = tmp_path_factory.mktemp("made") / "home"
    write_trail(home, writers=2, n=80, seg_bytes=12_000)
    return home


@pytest.fixture
def home(made: Path, tmp_path: Path) -> Iterator[Path]:
    dst = tmp_path / "home"
    shutil.copytree(made, dst)
    yield dst


def _lines(home: Path) -> list[bytes]:
    return (home / "anchors" / "anchors.jsonl").read_bytes().splitlines(keepends=True)


def _anchors(home: Path, writer: str, segment: int | None = None) -> list[dict[str, Any]]:
    out = [orjson.loads(x) for x in _lines(home)]
    return sorted((a for a in out if a["writer"] == writer
                   and (segment is None or a["segment"] == segment)), key=lambda a: a["seq"])


def _writers(home: Path) -> list[str]:
    return sorted({i.writer for i in list_segments(home / "audit")})


def _segment(home: Path, writer: str, n: int) -> Path:
    (path,) = [i.path for i in list_segments(home / "audit") if (i.writer, i.n) == (writer, n)]
    return path


def _drop_last_line(path: Path) -> None:
    """Cut a segment's last line (its seal), as a crash or a hand would."""
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))


def _pub(home: Path) -> PublicKey:
    pub = load_public_key(home)
    assert pub is not None
    return pub


def _check(home: Path, data: bytes | None = None,
           keys: list[PublicKey] | None = None) -> VerifyReport:
    report = VerifyReport()
    parsed = parse_anchors(b"".join(_lines(home)) if data is None else data, SOURCE)
    check_anchors(home / "audit", parsed, [_pub(home)] if keys is None else keys, report)
    return report


def _sign(home: Path, writer: str, segment: int, seq: int, **fields: Any) -> bytes:
    """An anchor signed with the home's key, for whatever it says."""
    signer = load_signer(home, create=False)
    assert signer is not None
    a = signer.sign_line(writer, segment, seq, {"k": "ckpt", "ts": 1, **fields})
    return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) + b"\n"


def _gap(report: VerifyReport) -> dict[str, Any]:
    (gap,) = report.gaps
    d: dict[str, Any] = gap.to_dict()
    return d


# -- reading anchors -----------------------------------------------------------------------------


def test_an_anchor_reads_back_every_signed_field(home: Path) -> None:
    raw = _lines(home)[0]
    obj = orjson.loads(raw)
    (a,) = parse_anchors(raw, SOURCE).anchors
    assert a.to_dict() == {"writer": obj["writer"], "segment": obj["segment"], "seq": obj["seq"],
                           "records": obj["records"], "head": obj["head"], "ts": obj["ts"],
                           "k": obj["k"], "kid": obj["kid"], "source": SOURCE, "line": 1}
    assert a.sig == obj["sig"] and dict(a.fields) == {k: v for k, v in obj.items() if k != "sig"}
    assert _pub(home).verify(a.payload(), a.sig)


def test_lines_that_are_not_anchors_are_errors_naming_their_line(home: Path) -> None:
    good = _lines(home)[0]
    obj = orjson.loads(good)
    data = b"".join([good, b"\n", b"  \n", b"not json\n", b"[1, 2]\n",
                     orjson.dumps({**obj, "seq": True}) + b"\n", good])
    parsed = parse_anchors(data, SOURCE)
    assert [a.line for a in parsed.anchors] == [1, 7]
    assert parsed.bad == [(SOURCE, 4, "not JSON"), (SOURCE, 5, "not an object"),
                          (SOURCE, 6, "not a signed checkpoint head")]
    report = _check(home, data)
    assert [f for f in report.findings if f.kind == "corrupt"] == [
        Finding("error", "corrupt", SOURCE, 4, None, "anchor line is not JSON"),
        Finding("error", "corrupt", SOURCE, 5, None, "anchor line is not an object"),
        Finding("error", "corrupt", SOURCE, 6, None,
                "anchor line is not a signed checkpoint head")]
    assert report.anchors == 1  # the same anchor twice is one anchor


_MISSING = object()
_NOT_ANCHORS = ([(n, v) for n in ("writer", "head", "k", "kid", "sig")
                 for v in (_MISSING, None, 1, True, ["x"])]
                + [(n, v) for n in ("segment", "seq") for v in (_MISSING, None, "1", True, 1.0)])


@pytest.mark.parametrize(("name", "value"), _NOT_ANCHORS)
def test_an_anchor_lacking_a_signed_field_or_of_another_type_is_not_an_anchor(
        home: Path, name: str, value: Any) -> None:
    obj = orjson.loads(_lines(home)[0])
    if value is _MISSING:
        del obj[name]
    else:
        obj[name] = value
    parsed = parse_anchors(orjson.dumps(obj) + b"\n", SOURCE)
    assert parsed.anchors == [] and parsed.bad == [(SOURCE, 1, "not a signed checkpoint head")]


@pytest.mark.parametrize("value", [_MISSING, None, True, "3", 2.0])
def test_an_anchor_without_a_count_or_a_time_reads_them_as_unknown(
        home: Path, value: Any) -> None:
    obj = orjson.loads(_lines(home)[0])
    for name in ("records", "ts"):
        if value is _MISSING:
            del obj[name]
        else:
            obj[name] = value
    (a,) = parse_anchors(orjson.dumps(obj) + b"\n", SOURCE).anchors
    assert a.records is None and a.ts is None


def test_an_append_cut_short_is_a_warning_with_its_size_and_fails_nothing(home: Path) -> None:
    data = b"".join(_lines(home)) + b'{"writer":"w","se'
    parsed = parse_anchors(data, SOURCE)
    assert parsed.torn == [(SOURCE, 17)] and parsed.bad == []
    report = _check(home, data)
    assert report.ok and report.gaps == []
    assert report.findings == [Finding("warning", "torn", SOURCE, None, None,
                                       "17 bytes after the last complete anchor"
                                       " (an append cut short)")]
    assert parse_anchors(b"".join(_lines(home)), SOURCE).torn == []
    # A torn tail longer than what comes before it, or with nothing before it.
    assert parse_anchors(b"[]\n" + b"x" * 10, SOURCE).torn == [(SOURCE, 10)]
    assert parse_anchors(b'{"writer":', SOURCE).torn == [(SOURCE, 10)]


def test_anchors_read_from_several_sources_keep_every_source_and_its_problems(
        home: Path) -> None:
    lines = _lines(home)
    parsed = parse_anchors(lines[0] + b"[]\n" + b"{", "one")
    parsed.notes.append(("one", "not locked"))
    two = parse_anchors(lines[1] + b"null\n" + b"{}", "two")
    two.notes.append(("two", "deleted"))
    parsed.extend(two)
    assert [(a.source, a.line) for a in parsed.anchors] == [("one", 1), ("two", 1)]
    assert parsed.bad == [("one", 2, "not an object"), ("two", 2, "not an object")]
    assert parsed.torn == [("one", 1), ("two", 2)]
    assert parsed.notes == [("one", "not locked"), ("two", "deleted")]


def test_anchors_and_gaps_are_frozen_hashable_records(home: Path) -> None:
    (a,) = parse_anchors(_lines(home)[0], SOURCE).anchors
    (again,) = parse_anchors(_lines(home)[0], SOURCE).anchors
    assert again == a and {a, again} == {a}
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.seq = 1  # type: ignore[misc]
    _segment(home, _writers(home)[0], 1).unlink()
    gap = _check(home).gaps[0]
    assert {gap, gap} == {gap}
    with pytest.raises(dataclasses.FrozenInstanceError):
        gap.last_seq = 1  # type: ignore[misc]


# -- which anchors are trusted -------------------------------------------------------------------


def test_no_public_key_is_an_error_and_checks_nothing(home: Path) -> None:
    shutil.rmtree(home / "audit")
    report = _check(home, keys=[])
    assert report.anchor_checked and report.gaps == [] and report.anchors == 0
    assert report.findings == [Finding("error", "nokey", "-", None, None,
                                       "no public key: the anchors cannot be checked"
                                       " (pass --pubkey)")]


def test_an_anchor_signed_by_another_key_names_both_keys(home: Path, tmp_path: Path) -> None:
    other = load_signer(tmp_path / "other", create=True)
    assert other is not None
    w = _writers(home)[0]
    fields = {k: v for k, v in _anchors(home, w)[0].items()
              if k not in ("sig", "kid", "writer", "segment", "seq")}
    a = other.sign_line(w, 1, 10, fields)
    a["kid"] = a["kid"] * 4  # a key id as long as the line likes: only 16 digits are shown
    data = orjson.dumps(a) + b"\n" + b"".join(_lines(home))
    pub = _pub(home)
    keys = sorted([pub.kid, other.kid])
    report = _check(home, data, keys=[pub, other.public])
    assert report.findings == [Finding(
        "error", "untrusted", SOURCE, 1, 10,
        f"anchor of writer {w} segment 1 seq 10 is signed by key {other.kid}, not by the"
        f" trusted key ({keys[0]}, {keys[1]}): the home's signing key was replaced, or the"
        " anchors are another home's")]
    # The anchors after it still count.
    assert report.anchors == len(_lines(home)) and report.anchored_writers == 2
    assert report.gaps == []


def test_an_altered_anchor_is_forged_and_not_used(home: Path) -> None:
    w = _writers(home)[0]
    lines = _lines(home)
    a = _anchors(home, w)[0]
    no = next(i for i, x in enumerate(lines, start=1) if orjson.loads(x) == a)
    lines[no - 1] = orjson.dumps({**a, "records": a["records"] + 1}) + b"\n"
    report = _check(home, b"".join(lines))
    assert report.findings == [Finding(
        "error", "forged", SOURCE, no, a["seq"],
        f"anchor of writer {w} segment {a['segment']} seq {a['seq']} does not verify with key"
        f" {_pub(home).kid}: forged or altered")]
    assert report.gaps == [] and report.anchors == len(lines) - 1


@pytest.mark.parametrize("head", ["0" * 64, "f" * 64])  # sorting before or after the first
def test_two_anchors_vouching_for_different_chains_at_one_seq_are_a_fork(
        home: Path, head: str) -> None:
    w = _writers(home)[0]
    a = _anchors(home, w)[0]
    lines = _lines(home)
    no = next(i for i, x in enumerate(lines, start=1) if orjson.loads(x) == a)
    other = _sign(home, w, a["segment"], a["seq"], head=head, records=a["records"])
    lines.insert(no, other)
    report = _check(home, b"".join(lines))
    assert report.findings == [Finding(
        "error", "forked", SOURCE, no + 1, a["seq"],
        f"anchor of writer {w} segment {a['segment']} seq {a['seq']} and another anchor for"
        f" the same seq ({SOURCE} line {no}) vouch for different chains")]
    # The first one read stands, and the trail holds it; the anchors after still count.
    assert report.gaps == [] and report.anchors == len(lines) - 1


def test_every_trusted_anchor_is_counted_once_by_writer(home: Path) -> None:
    report = _check(home, b"".join(_lines(home) * 2))
    assert report.findings == [] and report.gaps == []
    assert report.anchors == len(_lines(home)) and report.anchored_writers == 2


# -- what is gone --------------------------------------------------------------------------------


_RECORDS = ("c", "i", "s", "a")


def _segments_of(home: Path, writer: str) -> list[int]:
    return [i.n for i in list_segments(home / "audit") if i.writer == writer]


def test_a_deleted_segment_between_kept_ones_names_its_seqs_and_records(home: Path) -> None:
    w = _writers(home)[0]
    assert len(_segments_of(home, w)) >= 4
    _segment(home, w, 2).unlink()
    first = _anchors(home, w, 1)[-1]["seq"] + 1
    last, records = _anchors(home, w, 2)[-1]["seq"], _anchors(home, w, 2)[-1]["records"]
    report = _check(home)
    msg = (f"writer {w}: segment 2 missing: anchored seq {first}..{last}, {records} records,"
           " not pruned on purpose: deleted")
    assert _gap(report) == {"writer": w, "kind": "deleted", "segments": [2], "first_seq": first,
                            "last_seq": last, "records": records, "message": msg}
    assert report.findings == [Finding("error", "deleted", f"{w}.000002.jsonl", None, last, msg)]


@pytest.mark.parametrize("row", [(3, 4), (4, 5)])  # a row ending at an even or an odd number
def test_segments_deleted_apart_are_gaps_apart_and_in_a_row_one_gap(
        home: Path, row: tuple[int, int]) -> None:
    w = _writers(home)[0]
    for n in (1, *row):
        _segment(home, w, n).unlink()
    report = _check(home)
    one, a, b = (_anchors(home, w, n)[-1] for n in (1, *row))
    assert [(g.kind, g.segments, g.first_seq, g.last_seq, g.records) for g in report.gaps] == [
        ("deleted", (1,), 1, one["seq"], one["records"]),
        ("deleted", row, _anchors(home, w, row[0] - 1)[-1]["seq"] + 1, b["seq"],
         a["records"] + b["records"])]
    assert f"segments {row[0]}..{row[1]} missing" in report.gaps[1].message
    assert [f.segment for f in report.findings] == [f"{w}.000001.jsonl",
                                                    f"{w}.{row[0]:06d}.jsonl"]


def test_segments_whose_anchors_follow_each_other_are_named_one_by_one(home: Path) -> None:
    # Segment 2's anchors are not in the file: 1 and 3 are one stretch of the anchors.
    w = _writers(home)[0]
    data = b"".join(x for x in _lines(home)
                    if (orjson.loads(x)["writer"], orjson.loads(x)["segment"]) != (w, 2))
    for n in (1, 3):
        _segment(home, w, n).unlink()
    one, three = (_anchors(home, w, n)[-1] for n in (1, 3))
    gap = _gap(_check(home, data))
    assert (gap["segments"], gap["first_seq"], gap["last_seq"], gap["records"]) == (
        [1, 3], 1, three["seq"], one["records"] + three["records"])
    assert gap["message"].startswith(f"writer {w}: segments 1, 3 missing: anchored seq 1..")


def test_a_gap_whose_start_the_anchors_do_not_say_is_named_through_its_last_seq(
        home: Path) -> None:
    w = _writers(home)[0]
    data = b"".join(x for x in _lines(home)
                    if (orjson.loads(x)["writer"], orjson.loads(x)["segment"]) == (w, 2))
    _segment(home, w, 2).unlink()
    last = _anchors(home, w, 2)[-1]
    gap = _gap(_check(home, data))
    assert (gap["first_seq"], gap["last_seq"]) == (None, last["seq"])
    assert gap["message"] == (f"writer {w}: segment 2 missing: anchored through seq"
                              f" {last['seq']}, {last['records']} records, not pruned on"
                              " purpose: deleted")


@pytest.mark.parametrize("gone", [0, 1])  # the writer named first or last
def test_a_writer_whose_every_segment_is_gone_is_missing_whole(home: Path, gone: int) -> None:
    w = _writers(home)[gone]
    other = _writers(home)[1 - gone]
    ns = _segments_of(home, w)
    for n in ns:
        _segment(home, w, n).unlink()
    # Another writer's segment pruned on purpose says nothing of this one.
    _prune(home, other, 1, _anchors(home, other, 1)[-1]["seq"])
    last = _anchors(home, w)[-1]["seq"]
    records = sum(_anchors(home, w, n)[-1]["records"] for n in ns)
    gap = _gap(_check(home))
    assert gap["message"] == (f"writer {w} is missing: anchored seq 1..{last} (segments"
                              f" 1..{ns[-1]}, {records} records), none of it is here")


def _prune(home: Path, writer: str, n: int, last_seq: Any, *, signed: bool = True,
           kind: str = "pruned", forged: bool = False) -> None:
    """Delete a segment and say so in the digest (``kind``), as shipping with --prune does
    (``forged``: naming the home's key under a signature it did not make)."""
    _segment(home, writer, n).unlink()
    key = load_key(home, create=False)
    assert key is not None
    entry = {"k": kind, "writer": writer, "n": n, "last_h": "0" * 64,
             "last_seq": last_seq, "final": False, "after": "shipped"}
    if forged:
        entry.update(kid=_pub(home).kid, sig="ab" * 64)
    append_digest(home / "audit", key, [entry],
                  signer=load_signer(home, create=False) if signed else None)


def test_a_segment_pruned_on_purpose_through_its_anchors_is_not_missing(home: Path) -> None:
    w = _writers(home)[0]
    _prune(home, w, 1, _anchors(home, w, 1)[-1]["seq"])
    report = _check(home)
    assert report.findings == [] and report.gaps == []


_NOT_PRUNED = ("opened", "sealed", "dropped", "compacted", "shipped")


@pytest.mark.parametrize("how", ["ended earlier", "unsigned", "forged", "no last seq",
                                 *_NOT_PRUNED])
def test_a_segment_pruned_short_of_its_anchors_or_unsigned_or_not_pruned_is_deleted(
        home: Path, how: str) -> None:
    w = _writers(home)[0]
    last = _anchors(home, w, 1)[-1]["seq"]
    # An entry of another kind says where the segment ended too, but not that it went.
    _prune(home, w, 1, {"ended earlier": last - 1, "no last seq": None}.get(how, last),
           signed=how not in ("unsigned", "forged"), forged=how == "forged",
           kind=how if how in _NOT_PRUNED else "pruned")
    gap = _gap(_check(home))
    assert (gap["kind"], gap["segments"], gap["last_seq"]) == ("deleted", [1], last)
    if how == "ended earlier":
        assert gap["first_seq"] == _anchors(home, w, 1)[-2]["seq"] + 1


def test_a_writer_with_a_segment_pruned_on_purpose_is_not_missing_whole(home: Path) -> None:
    w = _writers(home)[0]
    ns = _segments_of(home, w)
    _prune(home, w, 1, _anchors(home, w, 1)[-1]["seq"])
    for n in ns[1:]:
        _segment(home, w, n).unlink()
    gap = _gap(_check(home))
    assert gap["message"].startswith(f"writer {w}: segments 2..{ns[-1]} missing: anchored seq")
    assert gap["message"].endswith("not pruned on purpose: deleted")


def test_a_segment_cut_before_its_first_line_ends_is_a_cut_tail(home: Path) -> None:
    w = _writers(home)[0]
    n = 3
    path = _segment(home, w, n)
    path.write_bytes(path.read_bytes()[:40])
    first = _anchors(home, w, n - 1)[-1]["seq"] + 1
    mine = _anchors(home, w, n)
    last, records = mine[-1]["seq"], mine[-1]["records"]
    gap = _gap(_check(home))
    assert (gap["kind"], gap["first_seq"], gap["last_seq"], gap["records"]) == (
        "truncated", first, last, records)
    assert gap["message"] == (f"writer {w}: segment {n} holds no complete line; anchored"
                              f" through seq {last}: seq {first}..{last} missing, {records}"
                              " records: tail cut")


def test_a_tail_cut_just_before_its_seal_names_that_one_seq(home: Path) -> None:
    w = _writers(home)[0]
    n = 3
    _drop_last_line(_segment(home, w, n))
    seal = _anchors(home, w, n)[-1]
    assert seal["k"] == "seal"
    gap = _gap(_check(home))
    # Every record is still there: only the seal is gone.
    assert (gap["first_seq"], gap["last_seq"], gap["records"]) == (seal["seq"], seal["seq"], 0)
    assert gap["message"] == (f"writer {w}: segment {n} ends at seq {seal['seq'] - 1};"
                              f" anchored through seq {seal['seq']}: seq {seal['seq']} missing,"
                              " 0 records: tail cut")


@pytest.mark.parametrize("keep", [3, 4])  # a cut after an odd or an even seq
def test_a_cut_tail_counts_the_anchored_records_gone_never_below_none(
        home: Path, keep: int) -> None:
    w = _writers(home)[0]
    n = 3
    path = _segment(home, w, n)
    lines = path.read_bytes().splitlines(keepends=True)
    end = orjson.loads(lines[-1])["seq"]
    kept = [x for x in lines if orjson.loads(x)["k"] in _RECORDS][:keep]
    path.write_bytes(b"".join(lines[:lines.index(kept[-1]) + 1]))
    last = orjson.loads(kept[-1])["seq"]
    seal = _anchors(home, w, n)[-1]
    gap = _gap(_check(home, _sign(home, w, n, end, head="0" * 64, records=seal["records"])))
    assert (gap["first_seq"], gap["records"]) == (last + 1, seal["records"] - keep)
    for records in (1, None):  # fewer than are left; not said
        extra = {} if records is None else {"records": records}
        gap = _gap(_check(home, _sign(home, w, n, end, head="0" * 64, **extra)))
        assert gap["records"] == (0 if records is not None else None)
        assert ("records" in gap["message"]) is (records is not None)
    # At the seq of the last line left, a record: not cut there, rewritten.
    gap = _gap(_check(home, _sign(home, w, n, last, head="0" * 64, records=keep)))
    assert (gap["kind"], gap["last_seq"]) == ("rewritten", last)
    assert f"no checkpoint at seq {last} where one was anchored" in gap["message"]


def _seqs(path: Path, kinds: tuple[str, ...]) -> list[int]:
    return [o["seq"] for o in map(orjson.loads, path.read_bytes().splitlines()) if o["k"] in kinds]


@pytest.mark.parametrize("head", ["0" * 64, "f" * 64])  # sorting before or after the real one
def test_a_checkpoint_that_is_not_the_anchored_one_is_rewritten(home: Path, head: str) -> None:
    w = _writers(home)[0]
    a = _anchors(home, w, 2)[0]
    report = _check(home, _sign(home, w, 2, a["seq"], head=head, records=a["records"]))
    assert _gap(report) == {
        "writer": w, "kind": "rewritten", "segments": [2], "first_seq": None,
        "last_seq": a["seq"], "records": None,
        "message": f"writer {w}: segment 2, the checkpoint at seq {a['seq']} is not the anchored"
                   f" one: through seq {a['seq']} rewritten (re-chained or re-signed since it"
                   " was anchored)"}
    assert report.findings[0] == Finding("error", "rewritten", f"{w}.000002.jsonl", None,
                                         a["seq"], _gap(report)["message"])


def test_rewritten_anchors_in_a_row_are_one_gap_named_by_the_last(home: Path) -> None:
    w = _writers(home)[0]
    a = _anchors(home, w, 1)[0]
    rec = next(s for s in _seqs(_segment(home, w, 1), _RECORDS) if s > a["seq"])
    data = (_sign(home, w, 1, a["seq"], head="0" * 64, records=a["records"])
            + _sign(home, w, 1, rec, head="0" * 64, records=a["records"] + 1))
    assert _gap(_check(home, data))["message"] == (
        f"writer {w}: segment 1, no checkpoint at seq {rec} where one was anchored: seq"
        f" 1..{rec} rewritten (re-chained or re-signed since it was anchored)")


def test_a_rewritten_checkpoint_then_a_cut_tail_are_two_gaps(home: Path) -> None:
    w = _writers(home)[0]
    n = 3
    _drop_last_line(_segment(home, w, n))
    mine = _anchors(home, w, n)
    a, seal = mine[0], mine[-1]
    data = (_sign(home, w, n, a["seq"], head="0" * 64, records=a["records"])
            + orjson.dumps(seal) + b"\n")
    report = _check(home, data)
    assert [(g.kind, g.first_seq, g.last_seq) for g in report.gaps] == [
        ("rewritten", None, a["seq"]), ("truncated", seal["seq"], seal["seq"])]
    # A cut tail, then the next segment deleted: two gaps again.
    _segment(home, w, n + 1).unlink()
    nxt = _anchors(home, w, n + 1)
    data = b"".join(orjson.dumps(x) + b"\n" for x in [seal, *nxt])
    report = _check(home, data)
    assert [(g.kind, g.first_seq, g.last_seq) for g in report.gaps] == [
        ("truncated", seal["seq"], seal["seq"]), ("deleted", seal["seq"] + 1, nxt[-1]["seq"])]


def test_a_row_of_deleted_segments_after_a_rewritten_checkpoint_is_a_gap_of_its_own(
        home: Path) -> None:
    w = _writers(home)[0]
    a = _anchors(home, w, 1)[0]
    data = _sign(home, w, 1, a["seq"], head="0" * 64, records=a["records"]) + b"".join(
        x for x in _lines(home) if orjson.loads(x) != a)
    for n in (3, 4):
        _segment(home, w, n).unlink()
    report = _check(home, data)
    assert [(g.kind, g.segments) for g in report.gaps] == [("rewritten", (1,)),
                                                           ("deleted", (3, 4))]


def test_a_blank_or_spoiled_line_in_a_segment_hides_no_other_checkpoint(home: Path) -> None:
    w = _writers(home)[0]
    path = _segment(home, w, 1)
    lines = path.read_bytes().splitlines(keepends=True)
    ckpts = [i for i, x in enumerate(lines) if orjson.loads(x)["k"] == "ckpt"]
    spoiled = orjson.loads(lines[ckpts[0]])["seq"]
    lines[ckpts[0]] = b'{"k":"ckpt","seq":' + str(spoiled).encode() + b",\n"
    lines.insert(ckpts[0] + 2, b"\n")
    path.write_bytes(b"".join(lines))
    gap = _gap(_check(home))
    assert (gap["kind"], gap["first_seq"], gap["last_seq"]) == ("rewritten", 1, spoiled)


def test_a_spoiled_last_line_is_a_gap_at_the_anchored_seal(home: Path) -> None:
    w = _writers(home)[0]
    path = _segment(home, w, 3)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:-1], b"not a line of the trail\n"]))
    seal = _anchors(home, w, 3)[-1]
    gap = _gap(_check(home))
    assert (gap["segments"], gap["last_seq"]) == ([3], seal["seq"])


def test_a_one_seq_gap_far_into_a_trail_is_named_as_one_seq(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (w,) = write_trail(home, writers=1, n=300, seg_bytes=10_000_000)
    (info,) = list_segments(home / "audit")
    info.path.write_bytes(b"".join(info.path.read_bytes().splitlines(keepends=True)[:-1]))
    seal = _anchors(home, w)[-1]["seq"]
    assert seal > 256  # past the small numbers Python keeps one object of
    gap = _gap(_check(home))
    assert (gap["first_seq"], gap["last_seq"]) == (seal, seal)
    assert f"anchored through seq {seal}: seq {seal} missing, 0 records" in gap["message"]
