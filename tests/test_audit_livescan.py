"""Reads that do not depend on compaction: a lookup on segments not compacted yet reads only the
lines that hold the id (no DuckDB, memory that does not grow with the trail) and answers exactly
as the views do, nested calls included; segments written before a call existed are skipped; and
a backlog too large to copy into DuckDB is read from its files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support.audit import workload

from tooltrace.audit import TABLES, AuditStore, call_family, list_segments
from tooltrace.audit import _livejson as livejson
from tooltrace.audit import _livetables as livetables
from tooltrace.model import CallRecord, Step
from tooltrace.sinks import LateStep
from tooltrace.telemetry import AuditSink

ROOT = Path(__file__).resolve().parents[1]


def _nested(recs: list[CallRecord]) -> tuple[list[CallRecord], str, list[str]]:
    """``recs`` with the first made the parent of the next three (and the second of the
    fourth's child): (records, root id, its descendants' ids)."""
    root, a, b, c = recs[:4]
    steps = tuple(Step(s.seq, s.step, s.started_at_us, s.elapsed_us, s.decider, s.decision,
                       {"nested_calls": 3} if s.step == "execute" else s.detail)
                  for s in root.steps)
    if not any(s.step == "execute" for s in steps):
        steps += (Step(len(steps) + 1, "execute", root.started_at_us, 5, "tool", "returned",
                       {"nested_calls": 3}),)
    root = msgspec.structs.replace(root, steps=steps, elapsed_us=10_000_000)
    a = msgspec.structs.replace(a, parent_call_id=root.call_id, depth=1)
    b = msgspec.structs.replace(b, parent_call_id=root.call_id, depth=1)
    c = msgspec.structs.replace(c, parent_call_id=a.call_id, depth=2)
    # The children finish (and are written) before their parent, as they do.
    return [a, c, b, root, *recs[4:]], root.call_id, [a.call_id, b.call_id, c.call_id]


@pytest.fixture(scope="module")
def live_trail(tmp_path_factory: pytest.TempPathFactory) -> Any:
    home = tmp_path_factory.mktemp("live") / "home"
    sealed = AuditSink(home, segment_max_bytes=64 * 1024, compact=False, group_interval_ms=1)
    recs, root, kids = _nested(list(workload(400, seed=21)))
    for r in recs:
        sealed.emit(r)
    unknown = next(r for r in recs if r.status == "unknown")
    sealed.emit_late(LateStep(unknown.call_id, unknown.run_id, unknown.tool,
                              Step(1000, "resolved", unknown.started_at_us + 9, 3, "runtime",
                                   "ok", {"error_type": None})))
    sealed.shutdown()
    live = AuditSink(home, compact=False, group_interval_ms=1)
    more = list(workload(150, seed=22))
    for r in more:
        live.emit(r)
    assert live.flush(30.0)
    try:
        yield {"home": home, "ids": [r.call_id for r in recs + more], "root": root,
               "kids": kids, "unknown": unknown.call_id}
    finally:
        live.shutdown()


def test_every_lookup_on_segments_matches_the_views(live_trail: dict[str, Any]) -> None:
    home = live_trail["home"]
    with AuditStore(home) as direct:
        assert direct.segments >= 3 and direct.parquet_files == 0
        got = {cid: direct.call(cid) for cid in live_trail["ids"]}
        family = call_family(direct, got[live_trail["root"]])
        assert direct._db is None  # every answer came from the segment lines, no DuckDB
    with AuditStore(home) as views:
        for cid, d in got.items():
            want = views._call_via_views(cid, cid)
            assert (d.record, d.steps, d.intent) == (want.record, want.steps, want.intent), cid
    # The lines that only name the root (its children's) are not the root's.
    root = got[live_trail["root"]]
    assert root.record is not None and root.record["parent_call_id"] is None
    assert {s["seq"] for s in root.steps} == set(range(1, len(root.steps) + 1))
    assert sorted(c["call_id"] for c in family["descendants"]) == sorted(live_trail["kids"])
    assert [c["level"] for c in family["descendants"]].count(2) == 1
    unknown = got[live_trail["unknown"]]
    assert unknown.record is not None and unknown.record["outcome"] == "ok"
    assert unknown.record["resolved_at"] is not None


def test_a_prefix_is_found_in_the_segments(live_trail: dict[str, Any]) -> None:
    with AuditStore(live_trail["home"]) as s:
        for cid in (live_trail["ids"][0], live_trail["ids"][-1], live_trail["root"]):
            assert s.resolve_call_id(cid[:30].upper()) == cid
        assert s._db is None


def test_segments_written_before_a_call_existed_are_not_read(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sink = AuditSink(home, compact=False, group_interval_ms=1)
    (rec,) = list(workload(1, seed=3))
    sink.emit(rec)
    sink.shutdown()
    # A segment last written a day before the call's id was made, which claims the call too.
    forged = msgspec.json.decode(
        next(s for s in list_segments(home / "audit")).path.read_bytes().split(b"\n")[1])
    forged["tool"] = "forged"
    old = home / "audit" / "segments" / "old-writer.000001.jsonl"
    old.write_bytes(json.dumps(forged).encode() + b"\n")
    day_before = int(rec.call_id[:8] + rec.call_id[9:13], 16) / 1000 - 86_400
    os.utime(old, (day_before, day_before))
    with AuditStore(home) as s:
        d = s.call(rec.call_id)
        assert d.record is not None and d.record["tool"] == rec.tool
        # Everything is read for SQL: there the forged line is a second call with this id.
        assert s.sql("SELECT count(*) FROM tool_calls WHERE call_id = $c",
                     {"c": rec.call_id}).rows == [(2,)]


def test_a_backlog_too_large_to_copy_is_read_from_its_files(
        live_trail: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # The rows Python reads (of segments DuckDB cannot read as Python does: here all of them)
    # are copied while few, read from their file beyond.
    q = ("SELECT tool, outcome, count(*), round(sum(elapsed_ms), 3) FROM tool_calls"
         " GROUP BY ALL ORDER BY ALL")
    kinds_sql = ("SELECT table_name, table_type FROM information_schema.tables"
                 " WHERE table_name = '_live_calls'")
    with AuditStore(live_trail["home"]) as s:
        by_duckdb = s.sql(q).rows
    monkeypatch.setattr(livetables, "copy_segment", lambda *a, **k: False)
    monkeypatch.setattr(livejson.ParsedCache, "find", lambda *a, **k: {})
    with AuditStore(live_trail["home"]) as s:
        copied = s.sql(q).rows
        kinds = dict(s.con.execute(kinds_sql).fetchall())
    assert kinds == {"_live_calls": "BASE TABLE"} and copied == by_duckdb
    monkeypatch.setattr(livetables, "COPY_ROWS", 10)
    with AuditStore(live_trail["home"]) as s:
        assert s.sql(q).rows == copied
        kinds = dict(s.con.execute(kinds_sql).fetchall())
        assert s.counts()["steps"] > 10
    assert kinds == {"_live_calls": "VIEW"}


# The peak of this process alone: VmHWM (ru_maxrss would carry over the parent's peak from
# before the exec).
_RSS = """
import sys
from tooltrace.audit import AuditStore, explain
with AuditStore(sys.argv[1]) as s:
    for cid in sys.argv[2:]:
        assert explain(s.call(cid)).record is not None
    assert s._db is None
with open("/proc/self/status") as f:
    print(next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:")) // 1024)
"""


def _peak_mib(home: Path, ids: list[str]) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", _RSS, str(home), *ids], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return int(p.stdout.strip().splitlines()[-1])


def test_a_lookups_memory_does_not_grow_with_the_uncompacted_trail(tmp_path: Path) -> None:
    peaks = []
    for n in (12_000, 48_000):
        home = tmp_path / f"h{n}"
        sink = AuditSink(home, compact=False, group_interval_ms=1)
        ids = []
        for r in workload(n, seed=n):
            sink.emit(r)
            ids.append(r.call_id)
        sink.shutdown()
        peaks.append(_peak_mib(home, [ids[0], ids[n // 2], ids[-1]]))
    # Four times the segments (15 and 60 MiB, all of them read through for the first call), the
    # same memory: a piece of a segment at a time, and only the lines that hold the id parsed.
    assert peaks[1] - peaks[0] < 6, peaks


def test_a_query_copies_only_the_tables_it_reads(live_trail: dict[str, Any]) -> None:
    with AuditStore(live_trail["home"]) as s:
        n = s.sql("SELECT count(*) FROM tool_calls").rows[0][0]
        assert n == len(live_trail["ids"]) and s._live_loaded == {"calls", "resolutions"}
        steps = s.sql("SELECT count(*) FROM tool_call_steps").rows[0][0]
        assert steps > n and s._live_loaded == {"calls", "resolutions", "steps"}
    with AuditStore(live_trail["home"]) as s:
        # A name the store does not know (a CTE's is known; a view of one's own is not) reads
        # every table: the store cannot tell what it stands for.
        s.sql("WITH x AS (SELECT call_id FROM tool_calls) SELECT count(*) FROM x")
        assert s._live_loaded == {"calls", "resolutions"}
        s.sql("CREATE TEMP VIEW mine AS SELECT * FROM tool_call_steps")
        assert s.sql("SELECT count(*) FROM mine").rows == [(steps,)]
        assert s._live_loaded == set(TABLES)


_COMMANDS = """
import sys
from tooltrace.cli import main
for args in (["calls", "--limit", "20"], ["stats"], ["autopsy", sys.argv[2]]):
    try:
        main([*args, "--home", sys.argv[1]])
    except SystemExit as exc:
        assert not exc.code, (args, exc.code)
heavy = ("numpy", "pandas", "pyarrow")
print(sorted({m.split(".")[0] for m in sys.modules if m.startswith(heavy)}), file=sys.stderr)
"""


def test_calls_and_stats_import_neither_numpy_nor_pandas(live_trail: dict[str, Any]) -> None:
    # DuckDB's client imports numpy to bind a query parameter: 80 MiB more of memory.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", _COMMANDS, str(live_trail["home"]),
                        live_trail["ids"][7]], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1] == "[]", p.stderr
