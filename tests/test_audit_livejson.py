"""Sealed segments parsed by DuckDB (``_livejson``) give the rows Python's mapping
(``_tables.build_columns``) gives, for every record kind and every table; what DuckDB would
turn into other values goes to Python a segment at a time; and the views over a trail not
compacted match the same trail compacted."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support.audit import make_record, workload

from tooltrace.audit import TABLES, AuditStore, compact, list_segments
from tooltrace.audit import _livetables as livetables
from tooltrace.audit._livejson import ParsedCache, copy_segment
from tooltrace.model import Principal, ProgressMark, Step
from tooltrace.sinks import ApprovalRecord, LateStep
from tooltrace.telemetry import AuditSink

_VIEWS = {
    "tool_calls": "SELECT * FROM tool_calls",
    "tool_call_steps": "SELECT * FROM tool_call_steps",
    "tool_call_intents": "SELECT * FROM tool_call_intents",
    "approvals": "SELECT * FROM approvals",
}


def _every_kind(home: Path) -> dict[str, Any]:
    """A sealed trail with every record kind (calls of every outcome, nested, with principals,
    progress, attributes and artifacts; late steps, resolved and not; intents; approvals),
    in segments of 16 KiB. One call's arguments hold a control character, which DuckDB
    writes back as JSON differently: its segment is left to Python."""
    sink = AuditSink(home, segment_max_bytes=16 * 1024, compact=False, group_interval_ms=1)
    rng = random.Random(5)
    recs = list(workload(300, seed=31))
    who = Principal(user="ada", agent="planner", tenant="t1", roles=("dev", "ops"))
    for i, r in enumerate(recs):
        if i % 7 == 0:
            r = msgspec.structs.replace(
                r, principal=who, attributes={"transport": "stdio", "n": 3, "ok": True},
                progress=(ProgressMark(0, r.started_at_us + 5, 1.0, 4.0, "a quarter"),),
                capability="read", effect="none")
        if i % 11 == 1:
            r = msgspec.structs.replace(r, parent_call_id=recs[i - 1].call_id, depth=1)
        if i == 150:
            r = msgspec.structs.replace(r, args_redacted={"out": "\x1b[31mred\x1b[0m", "x": 1.5})
        sink.emit(r)
        if i % 40 == 39:
            assert sink.flush(30.0)  # a segment is sealed between two writes, not within one
    unknown = [r for r in recs if r.status == "unknown"]
    for n, r in enumerate(unknown):
        detail = {"error_type": "TimeoutError"} if n % 2 else {"error_type": None}
        sink.emit_late(LateStep(r.call_id, r.run_id, r.tool, Step(
            1000, "resolved", r.started_at_us + 9, 3, "runtime", "ok" if n % 2 else "failed",
            detail)))
        sink.emit_late(LateStep(r.call_id, r.run_id, r.tool, Step(
            1001, "note", r.started_at_us + 10, 1, "user", "continue", None)))
    for n in range(5):
        extra = make_record(rng, kind="approval")
        sink.write_intent(extra.call_id, extra.run_id, extra.tool, extra.started_at_us,
                          {"path": "src/a.py", "n": n})
        if n % 2:
            sink.emit(extra)
        sink.emit_approval(ApprovalRecord(
            approval_id=extra.call_id, call_id=extra.call_id, run_id=extra.run_id,
            tool=extra.tool, rule="ask_writes", approved=n != 3, who="ops@example.com",
            reason="looks fine", args_sha256="ab" * 32, at_us=extra.started_at_us + 3,
            expires_at_us=None if n % 2 else extra.started_at_us + 60_000_000,
            principal=who.to_dict() if n % 2 else None))
    sink.shutdown()
    return {"ids": [r.call_id for r in recs], "odd": recs[150].call_id}


@pytest.fixture(scope="module")
def sealed_trail(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("livejson") / "home"
    got = _every_kind(home)
    got["home"] = home
    return got


def _rows(store: AuditStore, t: str) -> list[tuple[Any, ...]]:
    store._load_live(frozenset(TABLES))
    return sorted(store.connection.execute(f"SELECT * FROM _live_{t}").fetchall(), key=repr)


def test_duckdb_parses_sealed_segments_into_the_rows_python_makes(
        sealed_trail: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    home = sealed_trail["home"]
    taken = _parsed(monkeypatch)
    with AuditStore(home) as s:
        by_duckdb = {t: _rows(s, t) for t in TABLES}
        assert s.issues == []
    segments = [i for i in list_segments(home / "audit") if not i.live]
    assert len(segments) >= 5 and not any(i.live for i in list_segments(home / "audit"))
    # Every segment but the one whose arguments hold a control character went to DuckDB.
    assert taken.count(False) == 1 and taken.count(True) == len(segments) - 1
    monkeypatch.setattr(livetables, "copy_segment", lambda *a, **k: False)
    monkeypatch.setattr(ParsedCache, "find", lambda *a, **k: {})  # what the first kept
    with AuditStore(home) as s:
        by_python = {t: _rows(s, t) for t in TABLES}
    for t in TABLES:
        assert by_python[t], t
        assert by_duckdb[t] == by_python[t], t


def test_the_views_over_sealed_segments_match_the_compacted_trail(
        sealed_trail: dict[str, Any], tmp_path: Path) -> None:
    with AuditStore(sealed_trail["home"]) as s:
        live = {v: sorted(s.sql(q).rows, key=repr) for v, q in _VIEWS.items()}
        stats = s.sql("SELECT tool, count(*), count(DISTINCT outcome), round(sum(elapsed_ms), 6)"
                      " FROM tool_calls GROUP BY ALL ORDER BY ALL").rows
    copy = tmp_path / "home"
    shutil.copytree(sealed_trail["home"], copy)
    compact(copy)
    with AuditStore(copy) as s:
        assert s.segments == 0
        for v, q in _VIEWS.items():
            assert sorted(s.sql(q).rows, key=repr) == live[v], v
        assert s.sql("SELECT tool, count(*), count(DISTINCT outcome), round(sum(elapsed_ms), 6)"
                     " FROM tool_calls GROUP BY ALL ORDER BY ALL").rows == stats


def test_a_segment_duckdb_cannot_read_as_python_does_goes_to_python(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sink = AuditSink(home, compact=False, group_interval_ms=1)
    for r in workload(40, seed=3):
        sink.emit(r)
    sink.shutdown()
    seg = next(i for i in list_segments(home / "audit") if not i.live)
    q = "SELECT * FROM tool_calls ORDER BY call_id"
    with AuditStore(home) as s:
        want = s.sql(q)
    data = seg.path.read_bytes()
    first = data.index(b"\n") + 1
    # An empty line and a line that is no record: DuckDB would skip the one and refuse the
    # other; Python numbers the lines as they are and reports both.
    seg.path.write_bytes(data[:first] + b"\n" + data[first:] + b"[1, 2]\n")
    with AuditStore(home) as s:
        got = s.sql(q).rows
        assert [i.line for i in s.issues] == [2, data.count(b"\n") + 2]
    at = want.columns.index("line")
    assert [r[:at] + r[at + 1:] for r in got] == [r[:at] + r[at + 1:] for r in want.rows]
    assert [r[at] for r in got] == [r[at] + 1 for r in want.rows]


def _parsed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Count the segments DuckDB parses from now on (each True when it could)."""
    taken: list[bool] = []

    def counted(*args: Any, **kw: Any) -> bool:
        taken.append(copy_segment(*args, **kw))
        return taken[-1]

    monkeypatch.setattr(livetables, "copy_segment", counted)
    return taken


def test_the_next_reader_reads_what_duckdb_parsed_and_compaction_takes_it_away(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    sink = AuditSink(home, segment_max_bytes=16 * 1024, compact=False, group_interval_ms=1)
    for i, r in enumerate(workload(120, seed=8)):
        sink.emit(r)
        if i % 30 == 29:
            assert sink.flush(30.0)
    sink.shutdown()
    q = "SELECT * FROM tool_calls ORDER BY call_id"
    taken = _parsed(monkeypatch)
    with AuditStore(home) as s:
        first = s.sql(q).rows
    sealed = len(list_segments(home / "audit"))
    assert taken == [True] * sealed
    cache = home / "audit" / "readcache"
    assert len(list(cache.glob("*.parquet"))) == sealed
    kept = sorted(cache.glob("*.parquet"))
    kept[0].write_bytes(kept[1].read_bytes())  # another segment's rows under this one's name
    taken.clear()
    with AuditStore(home) as s:
        assert s.sql(q).rows == first
    assert taken == [True]  # its MAC does not hold: that segment alone is parsed again
    assert len(list(cache.glob("*.parquet"))) == sealed
    taken.clear()
    with AuditStore(home) as s:
        assert s.sql(q).rows == first
        # The steps were not parsed yet: they are, and kept beside the others.
        assert s.sql("SELECT count(*) FROM tool_call_steps").rows[0][0] > 0
    assert taken == [True] * sealed
    assert len(list(cache.glob("*.parquet"))) == 2 * sealed
    taken.clear()
    with AuditStore(home) as s:  # every table: only those no reader kept yet are parsed
        assert s.counts()["calls"] == len(first)
    assert taken == [True] * sealed
    assert len(list(cache.glob("*.parquet"))) == 3 * sealed
    assert len(list(cache.glob("*.approvals+intents.*.parquet"))) == sealed
    taken.clear()
    with AuditStore(home) as before:
        assert before.sql(q).rows == first  # read from the cache
        compact(home)
        with AuditStore(home) as after:  # compaction took every segment: its files go
            assert after.sql(q).rows == first
            assert list(cache.glob("*.parquet")) == []
        # The first store's files are gone: it reads the trail afresh and asks again.
        assert before.sql(q).rows == first
    assert taken == []
