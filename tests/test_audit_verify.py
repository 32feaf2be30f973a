"""`verify` catches an edited, deleted, reordered or inserted record, a truncated tail, a
deleted segment and a re-chained rewrite, and says where (segment file, line, seq)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from test_audit_support import workload

from tooltrace.cli import main
from tooltrace.telemetry.audit import AuditSink, verify
from tooltrace.telemetry.audit._format import chain_hash, seal_line, split_hash


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
