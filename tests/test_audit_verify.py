"""`verify` catches an edited, deleted, reordered or inserted record, a truncated tail, a
deleted segment or writer and a re-chained rewrite, and says where (segment file, line, seq);
what a crash leaves stays a warning, what compaction and shipping remove on purpose is not
missing, and ``--expect`` catches what cannot be seen from inside the home."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from support.audit import workload
from support.components import extra, require_module

from tooltrace.audit import (
    compact,
    load_signer,
    recover_dead_segments,
    signing_key_path,
    verify,
)
from tooltrace.audit._format import chain_hash, load_key, seal_line, split_hash
from tooltrace.audit._manifest import read_digest
from tooltrace.audit._writer import SegmentWriter
from tooltrace.cli import main
from tooltrace.telemetry import AuditSink


@pytest.fixture
def home(tmp_path: Path) -> Path:
    sink = AuditSink(tmp_path, checkpoint_every=25, segment_max_bytes=60_000, group_max_records=8)
    for r in workload(120):
        sink.emit(r)
    sink.shutdown()
    assert verify(tmp_path).ok
    return tmp_path


def _segments(home: Path) -> list[Path]:
    return sorted((home / "audit" / "segments").glob("*.jsonl"))


def _lines(p: Path) -> list[bytes]:
    return p.read_bytes().splitlines(keepends=True)


def _errors(home: Path) -> list[tuple[str, str, int | None]]:
    rep = verify(home)
    return [(f.kind, f.segment, f.line) for f in rep.findings if f.severity == "error"]


def _call_line(lines: list[bytes], start: int = 5) -> int:
    """Index of the first call record at or after ``start``."""
    return next(i for i in range(start, len(lines)) if b'"k":"c"' in lines[i])


def test_clean_trail_verifies(home: Path) -> None:
    rep = verify(home)
    assert rep.ok and rep.records == 120 and rep.findings == []
    assert rep.segments == len(_segments(home)) > 1


def test_edited_record(home: Path) -> None:
    seg = _segments(home)[0]
    lines = _lines(seg)
    i = _call_line(lines)
    lines[i] = lines[i].replace(b'"status":"', b'"status":"x', 1)
    seg.write_bytes(b"".join(lines))
    assert _errors(home) == [("edited", seg.name, i + 1)]


def test_edited_record_with_its_hash_recomputed_is_still_caught(home: Path) -> None:
    seg = _segments(home)[0]
    lines = _lines(seg)
    i = _call_line(lines)
    body, _h = split_hash(lines[i].rstrip(b"\n"))  # type: ignore[misc]
    prev = split_hash(lines[i - 1].rstrip(b"\n"))[1]  # type: ignore[index]
    body = body.replace(b'"status":"', b'"status":"x', 1)
    lines[i] = seal_line(body, chain_hash(prev, body))
    seg.write_bytes(b"".join(lines))
    errs = _errors(home)
    # The edited line now chains; the next one no longer does.
    assert errs and errs[0][0] == "edited" and errs[0][2] == i + 2


def test_rewritten_chain_is_caught_by_the_keyed_checkpoint(home: Path) -> None:
    seg = _segments(home)[0]
    lines = _lines(seg)
    i = _call_line(lines)
    lines[i] = lines[i].replace(b'"status":"', b'"status":"x', 1)
    # Re-chain every following line the way someone without the key would.
    prev = split_hash(lines[i - 1].rstrip(b"\n"))[1]  # type: ignore[index]
    for j in range(i, len(lines)):
        body, _ = split_hash(lines[j].rstrip(b"\n"))  # type: ignore[misc]
        obj = orjson.loads(body)
        if "head" in obj:
            body = body.replace(obj["head"].encode(), prev.encode())
        h = chain_hash(prev, body)
        lines[j] = seal_line(body, h)
        prev = h
    seg.write_bytes(b"".join(lines))
    errs = _errors(home)
    in_seg = [e for e in errs if e[1] == seg.name]
    assert in_seg and all(k == "rewritten" for k, _, _ in in_seg)
    assert in_seg[0][2] is not None and in_seg[0][2] > i + 1
    # The next segment still chains from the original head, so it no longer links.
    assert [e[0] for e in errs if e[1] != seg.name] == ["edited"]


@pytest.mark.parametrize("forged", ["\u00e9" * 64, 12345, None, "0" * 64])
def test_a_checkpoint_whose_mac_is_forged_or_not_text_is_reported_not_fatal(
        home: Path, forged: object) -> None:
    """A checkpoint's MAC is compared in constant time; whatever its field holds (text that is
    not ASCII, a number, null, a wrong digest), verify reports the checkpoint rewritten."""
    seg = _segments(home)[0]
    lines = _lines(seg)
    i = next(j for j, ln in enumerate(lines) if b'"mac":"' in ln)
    prev = split_hash(lines[i - 1].rstrip(b"\n"))[1]  # type: ignore[index]
    for j in range(i, len(lines)):  # re-chained, as someone without the key would
        body, _ = split_hash(lines[j].rstrip(b"\n"))  # type: ignore[misc]
        if j == i:
            obj = orjson.loads(body)
            obj["mac"] = forged
            body = orjson.dumps(obj)
        h = chain_hash(prev, body)
        lines[j] = seal_line(body, h)
        prev = h
    seg.write_bytes(b"".join(lines))
    errs = [e for e in _errors(home) if e[1] == seg.name]
    assert errs and errs[0] == ("rewritten", seg.name, i + 1)


def test_deleted_record(home: Path) -> None:
    seg = _segments(home)[0]
    lines = _lines(seg)
    i = _call_line(lines)
    seq = orjson.loads(lines[i])["seq"]
    del lines[i]
    seg.write_bytes(b"".join(lines))
    rep = verify(home)
    errs = [f for f in rep.findings if f.severity == "error"]
    assert [(f.kind, f.segment, f.line) for f in errs] == [("deleted", seg.name, i + 1)]
    assert str(seq) in errs[0].message


def test_reordered_records(home: Path) -> None:
    seg = _segments(home)[0]
    lines = _lines(seg)
    i = _call_line(lines)
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    seg.write_bytes(b"".join(lines))
    errs = _errors(home)
    assert errs == [("reordered", seg.name, i + 1), ("reordered", seg.name, i + 2)]


def test_inserted_record(home: Path) -> None:
    seg = _segments(home)[0]
    lines = _lines(seg)
    i = _call_line(lines)
    lines.insert(i + 1, lines[i])  # a replayed copy of a genuine record
    seg.write_bytes(b"".join(lines))
    rep = verify(home)
    errs = [f for f in rep.findings if f.severity == "error"]
    assert errs[0].kind == "inserted" and errs[0].line == i + 2
    assert f"lines {i + 1} and {i + 2}" in errs[0].message


def test_truncated_tail_of_a_sealed_segment(home: Path) -> None:
    seg = _segments(home)[-1]
    lines = _lines(seg)
    seg.write_bytes(b"".join(lines[:-3]))  # cut on a line boundary: no torn bytes to see
    rep = verify(home)
    errs = [f for f in rep.findings if f.severity == "error"]
    assert [(f.kind, f.segment, f.line) for f in errs] == [("truncated", seg.name,
                                                            len(lines) - 3)]
    assert "without its seal" in errs[0].message


def test_truncated_mid_record(home: Path) -> None:
    seg = _segments(home)[-1]
    data = seg.read_bytes()
    seg.write_bytes(data[: len(data) - 500])
    kinds = {k for k, s, _ in _errors(home) if s == seg.name}
    assert kinds == {"torn", "truncated"}


def test_deleted_segment(home: Path) -> None:
    segs = _segments(home)
    assert len(segs) >= 3
    segs[1].unlink()
    errs = _errors(home)
    assert ("deleted", segs[1].name, None) in errs


def test_deleted_last_segment(home: Path) -> None:
    segs = _segments(home)
    segs[-1].unlink()
    errs = _errors(home)
    assert errs == [("deleted", segs[-1].name, None)]


def test_without_the_key_checkpoints_are_reported_unchecked(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / "audit.key").rename(home / "elsewhere.key")
    rep = verify(home)
    assert rep.ok and not rep.keyed
    assert any(f.kind == "nokey" for f in rep.findings)


def test_cli_verify_says_where_and_exits_1(home: Path) -> None:
    seg = _segments(home)[0]
    lines = _lines(seg)
    i = _call_line(lines)
    lines[i] = lines[i].replace(b'"tool":"', b'"tool":"z', 1)
    seg.write_bytes(b"".join(lines))
    res = CliRunner().invoke(main, ["verify", "--home", str(home)])
    assert res.exit_code == 1
    assert "FAILED" in res.output and "edited" in res.output and seg.name in res.output
    assert str(home) not in res.output
    js = CliRunner().invoke(main, ["verify", "--home", str(home), "--json"])
    data = orjson.loads(js.output)
    assert js.exit_code == 1 and data["ok"] is False
    assert data["findings"][0]["segment"] == seg.name and data["findings"][0]["line"] == i + 1


def test_cli_verify_clean_exits_0(home: Path) -> None:
    res = CliRunner().invoke(main, ["verify", "--home", str(home)])
    assert res.exit_code == 0 and res.output.startswith("OK:")
    missing = CliRunner().invoke(main, ["verify", "--home", str(home / "nope")])
    assert missing.exit_code == 1 and "no audit trail" in missing.output


# -- which segments and writers should exist: the digest ----------------------------------------


def _write(home: Path, n: int, *, seed: int = 7, seg_bytes: int = 60_000) -> str:
    """One writer process's worth of sealed segments; return its writer id."""
    sink = AuditSink(home, checkpoint_every=25, segment_max_bytes=seg_bytes, group_max_records=8)
    for r in workload(n, seed=seed):
        sink.emit(r)
    sink.shutdown()
    assert sink.writer_id is not None
    return sink.writer_id


def _mine(home: Path, writer: str) -> list[Path]:
    return [p for p in _segments(home) if p.name.startswith(writer + ".")]


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["verify", *args])
    return res.exit_code, res.output


def test_deleted_only_segment_of_one_of_two_writers_is_named(tmp_path: Path) -> None:
    first = _write(tmp_path, 20)
    _write(tmp_path, 20, seed=8)
    (seg,) = _mine(tmp_path, first)
    seg.unlink()
    rep = verify(tmp_path)
    assert not rep.ok and rep.writers == 2
    errs = [f for f in rep.findings if f.severity == "error"]
    assert [(f.kind, f.segment) for f in errs] == [("deleted", seg.name)]
    assert f"writer {first} is missing" in errs[0].message
    code, out = _cli("--home", str(tmp_path))
    assert code == 1 and out.startswith("FAILED: 2 writers, 1 segments") and first in out


def test_deleted_segment_between_two_is_named_with_what_the_digest_recorded(
        tmp_path: Path) -> None:
    w = _write(tmp_path, 120, seg_bytes=20_000)
    segs = _mine(tmp_path, w)
    assert len(segs) >= 3
    segs[1].unlink()
    errs = [f for f in verify(tmp_path).findings if f.severity == "error"]
    assert ("deleted", segs[1].name) in [(f.kind, f.segment) for f in errs]
    assert "the digest records it sealed" in next(
        f.message for f in errs if f.segment == segs[1].name)


def test_deleted_writer_fails_naming_it(tmp_path: Path) -> None:
    gone = _write(tmp_path, 120, seg_bytes=20_000)
    _write(tmp_path, 30, seed=8)
    segs = _mine(tmp_path, gone)
    assert len(segs) >= 3
    for p in segs:
        p.unlink()
    rep = verify(tmp_path)
    errs = [f for f in rep.findings if f.severity == "error"]
    assert [(f.kind, f.segment) for f in errs] == [("deleted", segs[0].name)]
    assert f"writer {gone} is missing" in errs[0].message
    assert f"1..{len(segs)}" in errs[0].message


def test_a_segment_the_digest_does_not_name_is_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLTRACE_AUDIT_KEY", "one key for both homes")
    # And one signing key: only the digest can tell the segment was not written here.
    load_signer(tmp_path / "keys", create=True)
    monkeypatch.setenv("TOOLTRACE_SIGNING_KEY", str(signing_key_path(tmp_path / "keys")))
    other = tmp_path / "other"
    w = _write(other, 20)
    home = tmp_path / "home"
    _write(home, 20, seed=8)
    shutil.copy(_mine(other, w)[0], home / "audit" / "segments")
    errs = [(f.kind, f.segment) for f in verify(home).findings if f.severity == "error"]
    assert errs == [("inserted", _mine(other, w)[0].name)]


def test_deleted_digest_fails(home: Path) -> None:
    (home / "audit" / "digest.jsonl").unlink()
    errs = _errors(home)
    assert errs == [("deleted", "digest.jsonl", None)]


def test_digest_entries_cannot_be_removed_or_forged_without_the_key(home: Path) -> None:
    digest = home / "audit" / "digest.jsonl"
    pristine = digest.read_bytes()
    lines = pristine.splitlines(keepends=True)
    assert len(lines) >= 4
    del lines[1]
    digest.write_bytes(b"".join(lines))
    assert _errors(home) == [("deleted", "digest.jsonl", 2)]
    # Hide a deleted segment behind a "pruned" entry chained correctly, without the key.
    digest.write_bytes(pristine)
    seg = _segments(home)[1]
    seg.unlink()
    last = pristine.splitlines()[-1]
    prev = split_hash(last)[1]  # type: ignore[index]
    obj = orjson.loads(last)
    body = orjson.dumps({"k": "pruned", "writer": obj["writer"], "n": 2, "after": "compacted",
                         "last_h": "0" * 64, "last_seq": 1, "final": False, "ts": obj["ts"],
                         "mac": "0" * 64, "seq": obj["seq"] + 1})
    digest.write_bytes(pristine + seal_line(body, chain_hash(prev, body)))
    # The forged entry is reported, and hides nothing.
    assert _errors(home) == [("rewritten", "digest.jsonl", len(pristine.splitlines()) + 1),
                             ("deleted", seg.name, None)]


def _kill(w: SegmentWriter) -> None:
    """What SIGKILL leaves: the writer's descriptor (and so its lock) gone, nothing sealed."""
    assert w._fd is not None
    os.close(w._fd)
    w._fd = None


def _writer(home: Path) -> SegmentWriter:
    key = load_key(home, create=True)
    assert key is not None
    return SegmentWriter(home / "audit", key, checkpoint_every=5)


def _append(w: SegmentWriter, n: int) -> None:
    recs = [orjson.dumps({"k": "c", "call_id": f"c{i}"}) for i in range(n)]
    with w.lock:
        w.append(recs, [f"c{i}" for i in range(n)], durable=True)


def test_killed_writer_leaves_warnings_only(tmp_path: Path) -> None:
    _write(tmp_path, 20)
    w = _writer(tmp_path)
    _append(w, 12)
    _kill(w)
    rep = verify(tmp_path)
    assert rep.ok, rep.findings
    assert [(f.severity, f.kind) for f in rep.findings] == [("warning", "unsealed")]
    key = load_key(tmp_path, create=False)
    assert key is not None
    recover_dead_segments(tmp_path / "audit", key)
    rep = verify(tmp_path)
    assert rep.ok and rep.findings == []
    assert read_digest(tmp_path / "audit").lines[-1].obj["reason"] == "recovered"


def test_killed_while_opening_a_segment_is_a_warning_and_recovery_finishes_it(
        tmp_path: Path) -> None:
    w = _writer(tmp_path)
    _append(w, 3)
    _kill(w)
    # As if killed between recording the segment in the digest and renaming it into view.
    live = _segments(tmp_path)[0]
    live.rename(live.with_name(f".{w.writer_id}.000001.tmp"))
    rep = verify(tmp_path)
    assert rep.ok and [(f.severity, f.kind) for f in rep.findings] == [("warning", "unsealed")]
    assert "while opening" in rep.findings[0].message
    key = load_key(tmp_path, create=False)
    assert key is not None
    (r,) = recover_dead_segments(tmp_path / "audit", key)
    assert r.segment == f"{w.writer_id}.000001.live.jsonl"
    rep = verify(tmp_path)
    assert rep.ok and rep.findings == [] and rep.records == 3


def test_killed_between_sealing_and_opening_the_next_is_a_warning(tmp_path: Path) -> None:
    w = _writer(tmp_path)
    _append(w, 3)
    with w.lock:
        w._seal(final=False)  # rotation's first half; the kill lands before the second
    rep = verify(tmp_path)
    assert rep.ok and [(f.severity, f.kind) for f in rep.findings] == [("warning", "unsealed")]
    assert "before opening the next" in rep.findings[0].message


def test_compacted_and_pruned_segments_are_not_missing(tmp_path: Path) -> None:
    a = _write(tmp_path, 120, seg_bytes=20_000)
    res = compact(tmp_path, prune=True)
    assert res.segments >= 3 and not _segments(tmp_path)
    b = _write(tmp_path, 40, seed=8)
    rep = verify(tmp_path)
    assert rep.ok and rep.findings == [] and rep.writers == 2, rep.findings
    fates = read_digest(tmp_path / "audit").fates()
    assert all(f.compacted and f.pruned for (w, _), f in fates.items() if w == a)
    assert not any(f.pruned for (w, _), f in fates.items() if w == b)
    # Compacted but kept: deleting it by hand is still a deletion.
    compact(tmp_path)
    _mine(tmp_path, b)[0].unlink()
    assert [k for k, _, _ in _errors(tmp_path)] == ["deleted"]


def test_shipped_and_pruned_segments_are_not_missing(tmp_path: Path) -> None:
    require_module("duckdb", extra("archive"))
    from tooltrace.archive import ship

    home = tmp_path / "home"
    _write(home, 120, seg_bytes=20_000)
    res = ship(home, str(tmp_path / "archive"), prune=True)
    assert res.pruned >= 3 and not _segments(home)
    _write(home, 20, seed=8)
    rep = verify(home)
    assert rep.ok and rep.findings == [], rep.findings
    assert all(f.shipped for f in read_digest(home / "audit").fates().values()
               if f.pruned)


def test_expect_holds_while_the_trail_grows_and_fails_on_a_rollback(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write(home, 20)
    code, out = _cli("--home", str(home))
    head = out.splitlines()[-1].removeprefix("head: ")
    assert code == 0 and head == verify(home).head and head.startswith("2:")
    digest = (home / "audit" / "digest.jsonl").read_bytes()
    newest = _write(home, 20, seed=8)
    assert verify(home, expect=head).ok
    code, out = _cli("--home", str(home), "--expect", head)
    assert code == 0
    later = verify(home).head
    # Roll the home back: the newest writer's segments and its digest entries go together.
    # From inside the home that looks like the earlier state ...
    for p in _mine(home, newest):
        p.unlink()
    (home / "audit" / "digest.jsonl").write_bytes(digest)
    assert verify(home).ok
    # ... but not to someone who kept the later head.
    rep = verify(home, expect=later)
    assert [(f.kind, f.segment) for f in rep.findings] == [("rolledback", "digest.jsonl")]
    code, out = _cli("--home", str(home), "--expect", later, "--json")
    data = orjson.loads(out)
    assert code == 1 and data["findings"][0]["kind"] == "rolledback"
    assert data["head"] == head


def test_expect_fails_on_another_home_a_removed_home_and_a_malformed_head(
        tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, 20)
    _write(b, 20, seed=8)
    head = verify(a).head
    rep = verify(b, expect=head)
    assert [(f.kind, f.seq) for f in rep.findings] == [("replaced", int(head.split(":")[0]))]
    shutil.rmtree(a)
    code, out = _cli("--home", str(a), "--expect", head)
    assert code == 1 and "no audit trail" in out
    code, out = _cli("--home", str(b), "--expect", "12:abc")
    assert code == 2 and "--expect" in out


def test_the_digest_genesis_is_the_hash_it_says() -> None:
    import hashlib

    from tooltrace.audit._manifest import DIGEST_GENESIS

    assert hashlib.sha256(b"tooltrace-digest-v1").hexdigest() == DIGEST_GENESIS
