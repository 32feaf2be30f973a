"""Compaction nobody has to run: a writer starts a compactor process when sealed segments wait, the
next writer of a home does it for what a dead one left, a compactor killed at any moment never
counts a call twice nor loses one, small files are merged, a store that listed a file merged away
reads afresh, the backlog each writer reports (and its metrics), and rolling by age. A compactor
runs idle while compaction keeps up and at the writer's priority once it is behind (an idle one
is replaced, and one at the writer's priority makes way for an idle one once caught up); one past
its memory bound exits after its pass and the writer starts the next."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import orjson
import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from support.audit import acked_ids, collect, start_writer, workload
from support.runtime import wait_for

from tooltrace._settings import audit_compact
from tooltrace.audit import (
    AuditStore,
    BackgroundCompaction,
    compact,
    list_segments,
    load_key,
    read_digest,
    verify,
)
from tooltrace.audit._autocompact import waiting
from tooltrace.audit._lookupfile import lookup_rel
from tooltrace.audit._manifest import read_manifest
from tooltrace.audit._merge import FANIN
from tooltrace.audit._writer import SegmentWriter
from tooltrace.cli import main
from tooltrace.exceptions import ConfigurationError
from tooltrace.telemetry import AuditSink
from tooltrace.telemetry.metrics import MetricsSink

ROOT = Path(__file__).resolve().parents[1]


def _write(home: Path, n: int, *, seed: int = 7, seg_bytes: int = 64 * 1024,
           compact_: bool = False) -> list[str]:
    sink = AuditSink(home, segment_max_bytes=seg_bytes, compact=compact_, group_interval_ms=1)
    ids = []
    for r in workload(n, seed=seed):
        sink.emit(r)
        ids.append(r.call_id)
    sink.shutdown()
    return ids


def _compacted(home: Path) -> set[str]:
    return {s["name"] for s in read_manifest(home / "audit").get("segments", [])}


def _sealed(home: Path) -> set[str]:
    return {s.name for s in list_segments(home / "audit") if not s.live}


def _live_bytes(home: Path) -> int:
    size = 0
    for s in list_segments(home / "audit"):
        if s.live:
            try:
                size += s.path.stat().st_size
            except FileNotFoundError:
                continue
    return size


def _counts(home: Path) -> tuple[int, int]:
    with AuditStore(home) as s:
        (row,) = s.sql("SELECT count(*), count(DISTINCT call_id) FROM tool_calls").rows
    return int(row[0]), int(row[1])


def _compactor(home: Path, key: bytes) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "tooltrace.audit._autocompact", "--home",
                          str(home), "--poll-s", "0.05", "--idle-exit-s", "0.2"],
                         stdin=subprocess.PIPE, env=env)
    assert p.stdin is not None
    p.stdin.write(key + b"\n")
    p.stdin.close()
    return p


def test_a_writer_compacts_its_sealed_segments_in_the_background(tmp_path: Path) -> None:
    sink = AuditSink(tmp_path, segment_max_bytes=256 * 1024, group_interval_ms=1)
    assert sink.compact  # on unless turned off
    ids = []
    for r in workload(9000, seed=11):  # about 12 MiB: past the 8 MiB that makes it due
        sink.emit(r)
        ids.append(r.call_id)
    assert sink.flush(60.0)
    try:
        wait_for(lambda: _sealed(tmp_path) and _sealed(tmp_path) <= _compacted(tmp_path), 180.0,
                 "the background compaction of every sealed segment")
        assert sink.compaction is not None and sink.compaction.started >= 1
        assert sink.compaction.wait(60.0) and sink.compaction.failures == 0
    finally:
        sink.shutdown()
    assert _counts(tmp_path) == (len(ids), len(ids))
    digest = read_digest(tmp_path / "audit")
    assert sum(1 for ln in digest.lines if ln.kind == "compacted") == len(_compacted(tmp_path))
    rep = verify(tmp_path)
    assert rep.ok, [f for f in rep.findings if f.severity == "error"]
    with AuditStore(tmp_path) as s:
        assert s.segments == len(_sealed(tmp_path) - _compacted(tmp_path))  # the final one
        for cid in (ids[0], ids[4500], ids[-1]):
            assert s.call(cid).record is not None


def test_off_starts_no_compactor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLTRACE_AUDIT_COMPACT", "off")
    assert not audit_compact() and audit_compact(True)
    sink = AuditSink(tmp_path, segment_max_bytes=64 * 1024, group_interval_ms=1)
    for r in workload(8000, seed=2):
        sink.emit(r)
    assert sink.flush(60.0)
    assert not sink.compact and sink.compaction is None
    sink.shutdown()
    assert _sealed(tmp_path) and not _compacted(tmp_path)
    monkeypatch.setenv("TOOLTRACE_AUDIT_COMPACT", "sometimes")
    with pytest.raises(ConfigurationError, match="TOOLTRACE_AUDIT_COMPACT"):
        AuditSink(tmp_path)
    monkeypatch.setenv("TOOLTRACE_AUDIT_COMPACT", "auto")
    assert AuditSink(tmp_path).compact and not AuditSink(tmp_path, compact=False).compact


def test_the_next_writer_compacts_what_a_dead_writer_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLTRACE_AUDIT_COMPACT", "off")  # the writer that dies compacts nothing
    p = start_writer(tmp_path)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(collect(p)))  # keeps the pipe drained
    reader.start()
    wait_for(lambda: _sealed(tmp_path) and _live_bytes(tmp_path) > 100_000, 120.0,
             "a sealed segment (16 MiB) and records in the next")
    p.send_signal(signal.SIGKILL)
    reader.join(60)
    acked = acked_ids(out[0])
    assert acked and not _compacted(tmp_path)
    monkeypatch.delenv("TOOLTRACE_AUDIT_COMPACT")
    nxt = AuditSink(tmp_path)
    nxt.open_segment()  # opens the home: recovery, then compaction at once, no record needed
    try:
        wait_for(lambda: {s.name for s in list_segments(tmp_path / "audit") if not s.live
                          and not s.name.startswith(str(nxt.writer_id))} <= _compacted(tmp_path),
                 180.0, "the dead writer's segments compacted")
        assert nxt.recovered  # its live segment was sealed first, then compacted with the rest
    finally:
        nxt.shutdown()
    with AuditStore(tmp_path) as s:
        rows = s.sql("SELECT call_id, count(*) FROM tool_calls GROUP BY call_id").rows
    assert acked <= {r[0] for r in rows} and all(r[1] == 1 for r in rows)
    assert verify(tmp_path).ok


def test_a_compactor_killed_at_any_moment_never_counts_a_call_twice(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("TOOLTRACE_CRASH_SEED", "34")))
    key = load_key(tmp_path, create=True)
    assert key is not None
    sink = AuditSink(tmp_path, segment_max_bytes=32 * 1024, compact=False, group_interval_ms=1)
    ids: list[str] = []
    stop = threading.Event()

    def write() -> None:
        records = itertools.chain.from_iterable(workload(1000, seed=i) for i in itertools.count())
        while not stop.is_set():
            for _ in range(20):
                r = next(records)
                sink.emit(r)
                ids.append(r.call_id)
            time.sleep(0.01)

    writer = threading.Thread(target=write)
    writer.start()
    kills = 0
    try:
        for _ in range(12):
            p = _compactor(tmp_path, key)
            time.sleep(rng.uniform(0.05, 1.5))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                kills += 1
            p.wait(60)
            total, distinct = _counts(tmp_path)
            assert total == distinct  # whatever moment it died at
    finally:
        stop.set()
        writer.join()
        sink.shutdown()
    assert kills >= 3
    p = _compactor(tmp_path, key)
    assert p.wait(120) == 0
    res = compact(tmp_path)
    assert not res.busy
    assert _sealed(tmp_path) <= _compacted(tmp_path)
    assert _counts(tmp_path) == (len(ids), len(ids))
    files = read_manifest(tmp_path / "audit")["files"]
    assert 1 <= len(files["calls"]) < FANIN  # small files were merged along the way
    on_disk = {f"parquet/calls/{p.name}" for p in (tmp_path / "audit" / "parquet" / "calls")
               .glob("*.parquet")}
    assert on_disk == set(files["calls"])  # what a killed one left behind was removed
    rep = verify(tmp_path)
    assert rep.ok, [f for f in rep.findings if f.severity == "error"]


def test_merging_keeps_every_row_once_and_plain_sql_agrees(tmp_path: Path) -> None:
    ids: list[str] = []
    for i in range(FANIN + 1):
        ids += _write(tmp_path, 40, seed=100 + i)
        res = compact(tmp_path, merge=False)
        assert res.merged == 0
    adir = tmp_path / "audit"
    before = read_manifest(adir)["files"]["calls"]
    assert len(before) == FANIN + 1
    out = CliRunner().invoke(main, ["compact", "--home", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    assert orjson.loads(out.output)["merged"] >= FANIN + 1  # the command merges too
    m = read_manifest(adir)
    assert len(m["files"]["calls"]) == 1 and m["files"]["calls"][0] not in before
    (rel,) = m["files"]["calls"]
    assert rel in m["lookups"] and (adir / lookup_rel(rel)).exists()
    assert set(m["ranges"]) == {r for rels in m["files"].values() for r in rels}
    for old in before:  # the merged files and their lookup files are gone
        assert not (adir / old).exists() and not (adir / lookup_rel(old)).exists()
    con = duckdb.connect()
    (row,) = con.execute("SELECT count(*), count(DISTINCT call_id) FROM read_parquet($p)",
                         {"p": str(adir / "parquet" / "calls" / "*.parquet")}).fetchall()
    assert row == (len(ids), len(ids))
    with AuditStore(tmp_path) as s:
        for cid in ids[::37]:
            assert s.call(cid).record == s._call_via_views(cid, cid).record
    rep = verify(tmp_path)
    assert rep.ok and rep.lookups >= 2, [f for f in rep.findings if f.severity == "error"]


def test_a_store_that_listed_a_file_merged_away_reads_afresh(tmp_path: Path) -> None:
    ids: list[str] = []
    for i in range(FANIN):
        ids += _write(tmp_path, 20, seed=200 + i)
        compact(tmp_path, merge=False)
    with AuditStore(tmp_path) as s:
        assert s.call(ids[0]).record is not None  # it listed the small files
        ids += _write(tmp_path, 20, seed=300)
        assert compact(tmp_path).merged >= FANIN
        # The files it listed are gone; it reads the trail afresh, once, and sees the new calls.
        assert s.sql("SELECT count(*) FROM tool_calls").rows == [(len(ids),)]
        assert s.call(ids[5]).record is not None and s.call(ids[-1]).record is not None


def test_a_busy_compaction_returns_at_once(tmp_path: Path) -> None:
    _write(tmp_path, 30)
    fd = os.open(tmp_path / "audit" / "compact.lock", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        res = compact(tmp_path, wait=False)
        assert res.busy and res.segments == 0 and not _compacted(tmp_path)
    finally:
        os.close(fd)
    assert compact(tmp_path, wait=False).segments == 1


def test_nothing_due_starts_nothing(tmp_path: Path) -> None:
    _write(tmp_path, 30)  # one small segment, sealed a moment ago
    key = _key(tmp_path)
    bg = BackgroundCompaction(tmp_path, key)
    assert not bg.poke(force=True) and bg.started == 0
    eager = BackgroundCompaction(tmp_path, key, after_s=0.0, poll_s=0.05, idle_exit_s=0.2)
    assert eager.poke(force=True) and eager.running
    assert eager.wait(120.0) and not eager.poke(force=True)  # done: nothing due any more
    assert eager.failures == 0 and _sealed(tmp_path) <= _compacted(tmp_path)


def test_the_backlog_counts_what_is_not_compacted(tmp_path: Path) -> None:
    sink = AuditSink(tmp_path, segment_max_bytes=32 * 1024, compact=False, group_interval_ms=1)
    metrics = MetricsSink()
    metrics.watch(sink)
    try:
        assert sink.compaction_backlog.calls == 0
        recs = list(workload(300, seed=9))
        for r in recs:
            sink.emit(r)
        assert sink.flush(30.0)  # flush also takes the ticker's look
        b = sink.compaction_backlog
        holding = [s for s in list_segments(tmp_path / "audit")
                   if b'\n{"k":"c"' in s.path.read_bytes()]  # not a successor with no call yet
        assert b.calls == 300 and b.oldest_age_s > 0
        assert b.bytes == sum(s.path.stat().st_size for s in holding)
        text = generate_latest(metrics.registry).decode()
        assert "tooltrace_audit_compaction_backlog_calls 300.0" in text
        assert f"tooltrace_audit_compaction_backlog_bytes {float(b.bytes)}" in text
        compact(tmp_path)  # takes every sealed segment: what is left is the live one
        for r in workload(5, seed=10):
            sink.emit(r)
        assert sink.flush(30.0)
        live = next(s for s in list_segments(tmp_path / "audit") if s.live)
        after = sink.compaction_backlog
        assert after.calls == 5 and after.bytes == live.path.stat().st_size
    finally:
        sink.shutdown()


def test_a_segment_rolls_by_age_only_once_it_holds_a_record(tmp_path: Path) -> None:
    adir = tmp_path / "audit"
    w = SegmentWriter(adir, b"k" * 32, max_age_s=0.01, signer=None)
    w.open()
    time.sleep(0.05)
    w.tick()
    assert w.segment == 1  # idle and empty: not sealed
    w.append([{"k": "c", "call_id": "x", "steps": []}], ["x"], durable=False)
    time.sleep(0.05)
    w.tick()
    assert w.segment == 2 and [s.n for s in list_segments(adir) if not s.live] == [1]
    w.close()



def test_what_waits_is_urgent_once_old_or_large(tmp_path: Path) -> None:
    _write(tmp_path, 300, seg_bytes=32 * 1024)
    adir = tmp_path / "audit"
    now = time.time()
    w = waiting(adir, now=now)
    assert w.segments == len(_sealed(tmp_path)) >= 2 and w.bytes > 0
    assert w.due(min_bytes=1) and not w.due(min_bytes=w.bytes + 1, after_s=60.0)
    assert not w.urgent(after_s=60.0, min_bytes=w.bytes + 1)
    assert w.urgent(after_s=60.0, min_bytes=w.bytes)  # large enough
    old = waiting(adir, now=now + 61.0)
    assert old.oldest_s > 60.0 and old.urgent(after_s=60.0, min_bytes=w.bytes + 1)  # old enough
    compact(tmp_path)
    assert waiting(adir) == waiting(adir, now=now + 1e6) and waiting(adir).segments == 0
    assert not waiting(adir, now=now + 1e6).urgent(after_s=0.0, min_bytes=0)


def test_an_idle_compactor_is_replaced_by_one_at_the_writers_priority_once_behind(
        tmp_path: Path) -> None:
    ids = _write(tmp_path, 300, seg_bytes=32 * 1024)
    key = _key(tmp_path)
    first = waiting(tmp_path / "audit")
    # A compactor that, after its first pass, looks again only a minute later: what is sealed
    # meanwhile waits for it.
    bg = BackgroundCompaction(tmp_path, key, min_bytes=1, urgent_bytes=2 * first.bytes,
                              poll_s=60.0, idle_exit_s=120.0)
    started: list[int] = []
    try:
        assert bg.poke(force=True) and bg.priority == "idle"
        assert bg.pid is not None
        started.append(bg.pid)
        assert os.sched_getscheduler(bg.pid) == os.SCHED_IDLE
        wait_for(lambda: _sealed(tmp_path) <= _compacted(tmp_path), 180.0, "its first pass")
        assert not bg.poke(force=True)  # nothing waits: it keeps running, idle
        ids += _write(tmp_path, 900, seed=8, seg_bytes=32 * 1024)
        assert waiting(tmp_path / "audit").bytes >= 2 * first.bytes  # behind now
        assert bg.poke(force=True)
        assert bg.escalated == 1 and bg.priority == "normal" and bg.pid is not None
        started.append(bg.pid)
        assert not _alive(started[0])
        assert os.sched_getscheduler(bg.pid) == os.sched_getscheduler(0)  # the writer's own
        wait_for(lambda: _sealed(tmp_path) <= _compacted(tmp_path), 180.0,
                 "the compactor at the writer's priority")
        assert bg.failures == 0 and bg.started == 2
    finally:
        _stop(bg, started)
    assert _counts(tmp_path) == (len(ids), len(ids))
    rep = verify(tmp_path)
    assert rep.ok, [f for f in rep.findings if f.severity == "error"]


def test_a_compactor_at_the_writers_priority_makes_way_for_an_idle_one_once_caught_up(
        tmp_path: Path) -> None:
    ids = _write(tmp_path, 300, seg_bytes=32 * 1024)
    key = _key(tmp_path)
    behind = waiting(tmp_path / "audit")
    bg = BackgroundCompaction(tmp_path, key, min_bytes=1, urgent_bytes=behind.bytes,
                              poll_s=0.05, idle_exit_s=120.0, normal_for_s=0.0)
    started: list[int] = []
    try:
        assert bg.poke(force=True) and bg.priority == "normal" and bg.pid is not None
        started.append(bg.pid)

        def gone() -> bool:
            bg.poke()
            return not bg.running

        wait_for(gone, 180.0, "the compactor at the writer's priority to catch up and exit")
        assert bg.caught_up == 1 and bg.failures == 0 and bg.started == 1
        assert _sealed(tmp_path) <= _compacted(tmp_path)
        ids += _write(tmp_path, 20, seed=9)  # a little, below the bound: the next one is idle
        assert bg.poke(force=True) and bg.priority == "idle" and bg.pid is not None
        started.append(bg.pid)
        assert os.sched_getscheduler(bg.pid) == os.SCHED_IDLE
        wait_for(lambda: _sealed(tmp_path) <= _compacted(tmp_path), 180.0, "the idle one")
    finally:
        _stop(bg, started)
    assert _counts(tmp_path) == (len(ids), len(ids))


def test_a_compactor_past_its_memory_bound_is_replaced_and_takes_each_call_once(
        tmp_path: Path) -> None:
    ids: list[str] = []
    for i in range(4):  # each writer seals its segment as it shuts down
        ids += _write(tmp_path, 100, seed=20 + i)
    sealed = _sealed(tmp_path)
    assert len(sealed) >= 4
    key = _key(tmp_path)
    # Every compactor is over a bound of one byte after its pass of one segment: it exits, and
    # the writer's next look starts the next one.
    bg = BackgroundCompaction(tmp_path, key, min_bytes=1, poll_s=0.05, idle_exit_s=0.2,
                              pass_bytes=1, max_rss_bytes=1)
    assert bg.poke(force=True)

    def done() -> bool:
        bg.poke()
        return sealed <= _compacted(tmp_path) and not bg.running

    wait_for(done, 300.0, "every segment compacted by compactors that retire")
    assert bg.failures == 0 and bg.started == bg.retired == len(sealed)
    assert _counts(tmp_path) == (len(ids), len(ids))
    digest = read_digest(tmp_path / "audit")
    taken = [(ln.writer, ln.n) for ln in digest.lines if ln.kind == "compacted"]
    assert len(taken) == len(set(taken)) == len(sealed)
    rep = verify(tmp_path)
    assert rep.ok, [f for f in rep.findings if f.severity == "error"]


def _key(home: Path) -> bytes:
    """The home's audit key, which the writers made."""
    key = load_key(home, create=False)
    assert key is not None
    return key


def _stop(bg: BackgroundCompaction, started: list[int]) -> None:
    """Stop every compactor a test started (each is safe to stop at any moment)."""
    for pid in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    bg.wait(60.0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
