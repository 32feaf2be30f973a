"""``calls --limit N`` over segments not compacted yet reads them newest first and stops once it
has N calls newer than anything an unread segment can hold (a segment last written at ``t``
holds no UUIDv7 id made after ``t`` plus the clock skew): it reads the newest segments only,
answers even when an old segment is unreadable, and lists what the compacted trail lists."""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from support.audit import make_record

from tooltrace.audit import AuditStore, compact, list_segments
from tooltrace.cli import main
from tooltrace.model import Step
from tooltrace.sinks import LateStep
from tooltrace.telemetry import AuditSink

HOUR = 3600.0
CALLS = 30  # per writer session, each an hour after the last


def _id_at(ms: int, rng: random.Random) -> str:
    """A UUIDv7 made at ``ms`` (Unix milliseconds)."""
    t = f"{ms:012x}"
    r = f"{rng.getrandbits(74):019x}"
    return f"{t[:8]}-{t[8:]}-7{r[:3]}-{8 + rng.getrandbits(2):x}{r[3:6]}-{r[6:18]}"


@pytest.fixture(scope="module")
def hourly(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Six writer sessions an hour apart, each one sealed segment last written when its calls
    ended; the newest session resolves a call of the oldest that returned unknown."""
    home = tmp_path_factory.mktemp("newest") / "home"
    rng = random.Random(11)
    start = time.time() - 6 * HOUR
    adir = home / "audit"
    unknown: Any = None
    for session in range(6):
        at = start + session * HOUR
        before = {s.path for s in list_segments(adir)} if adir.exists() else set()
        sink = AuditSink(home, compact=False, group_interval_ms=1)
        for i in range(CALLS):
            ms = int(at * 1000) + i * 10
            kind = "unknown" if session == i == 0 else None
            rec = make_record(rng, run_id=f"s{session}", kind=kind, t0=ms * 1000)
            rec = msgspec.structs.replace(rec, call_id=_id_at(ms, rng))
            if kind:
                unknown = rec
            sink.emit(rec)
        if session == 5:
            assert unknown is not None
            sink.emit_late(LateStep(unknown.call_id, unknown.run_id, unknown.tool, Step(
                99, "resolved", int(at * 1_000_000), 3, "runtime", "ok", None)))
        sink.shutdown()
        for seg in list_segments(adir):
            if seg.path not in before:
                os.utime(seg.path, (at + 5, at + 5))
    copy = home.parent / "compacted"
    shutil.copytree(home, copy)
    compact(copy)
    return {"home": home, "compacted": copy, "unknown": unknown.call_id}


def _calls(home: Path, **kw: Any) -> tuple[list[tuple[Any, ...]], int, int]:
    with AuditStore(home) as s:
        rows = s.calls(**kw).rows
        return rows, s.segments_read, s.segments


@pytest.mark.parametrize("kw", [
    {"limit": 20}, {"limit": CALLS}, {"limit": 5, "tool": "read_text"},
    {"limit": 3, "status": "ok"}, {"limit": 5, "run_id": "s2"}, {"limit": 100},
    {"limit": 5, "outcome": "ok", "status": "unknown"},
])
def test_newest_calls_list_what_the_compacted_trail_lists(hourly: dict[str, Any],
                                                          kw: dict[str, Any]) -> None:
    want, _r, none = _calls(hourly["compacted"], **kw)
    assert none == 0 and want
    got, _read, segments = _calls(hourly["home"], **kw)
    assert got == want
    assert segments == 6


def test_the_newest_n_read_only_the_newest_segments(hourly: dict[str, Any]) -> None:
    _rows, read, segments = _calls(hourly["home"], limit=20)
    assert (read, segments) == (1, 6)
    # More than the newest session holds: the next segment is read too, no more.
    _rows, read, _s = _calls(hourly["home"], limit=CALLS + 1)
    assert read == 2
    # Filtered: twice as many segments each round, newest first, until enough match (the
    # third newest session's calls are in the third round's segments).
    rows, read, _s = _calls(hourly["home"], limit=5, run_id="s3")
    assert read == 4 and {r[2] for r in rows} == {"s3"}


def test_calls_answers_when_an_old_segment_is_unreadable(hourly: dict[str, Any],
                                                         tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(hourly["home"], home)
    want = CliRunner().invoke(main, ["calls", "--limit", "10", "--home", str(hourly["compacted"])])
    assert want.exit_code == 0, want.output
    oldest = min(list_segments(home / "audit"), key=lambda s: s.path.stat().st_mtime)
    st = oldest.path.stat()
    # A directory where the oldest segment was: reading it fails.
    oldest.path.unlink()
    oldest.path.mkdir()
    os.utime(oldest.path, (st.st_atime, st.st_mtime))
    whole = CliRunner().invoke(main, ["stats", "--home", str(home)])
    assert whole.exit_code != 0
    got = CliRunner().invoke(main, ["calls", "--limit", "10", "--home", str(home)])
    assert got.exit_code == 0, got.output
    # The same calls, shown with the same shortest unique prefixes.
    assert got.output == want.output


def test_a_segment_gone_since_the_store_opened_is_passed_over(hourly: dict[str, Any],
                                                              tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(hourly["home"], home)
    want, _r, _n = _calls(hourly["compacted"], limit=20)
    with AuditStore(home) as s:
        oldest = min(list_segments(home / "audit"), key=lambda i: i.path.stat().st_mtime)
        oldest.path.unlink()  # pruned meanwhile, say
        assert s.calls(limit=20).rows == want
        assert s.segments_read == 2  # the one gone (nothing in it now), then the newest
