"""AuditSink: records land complete and queryable, under each fsync policy, across rotation,
with keyed checkpoints also when idle, late resolutions applied, and no exception ever raised
into a call."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import orjson
import pytest
from support.audit import make_record, workload
from support.runtime import wait_for

from tooltrace.audit import Ack, AuditStore, FsyncPolicy, verify
from tooltrace.model import Status, Step
from tooltrace.sinks import LateStep
from tooltrace.telemetry import AuditSink, DurableSink, Sink


def _segment_lines(home: Path) -> list[dict[str, object]]:
    out = []
    for p in sorted((home / "audit" / "segments").glob("*.jsonl")):
        out += [orjson.loads(x) for x in p.read_bytes().splitlines()]
    return out


def test_implements_the_sink_protocols(tmp_path: Path) -> None:
    sink = AuditSink(tmp_path, strict=True)
    assert isinstance(sink, Sink) and isinstance(sink, DurableSink)
    assert sink.name == "audit" and sink.strict
    assert not AuditSink(tmp_path).strict


def test_records_round_trip_into_tool_calls_and_steps(tmp_path: Path) -> None:
    recs = list(workload(600))
    sink = AuditSink(tmp_path)
    for r in recs:
        sink.emit(r)
    sink.shutdown()
    assert sink.dropped == 0 and sink.acked_records == 600
    with AuditStore(tmp_path) as store:
        assert store.counts() == {"calls": 600, "steps": sum(len(r.steps) for r in recs),
                                  "intents": 0}
        for r in (recs[0], recs[1], recs[8], recs[599]):
            d = store.call(r.call_id)
            assert d.record is not None
            row = d.record
            assert (row["tool"], row["status"], row["run_id"]) == (r.tool, r.status.value,
                                                                   r.run_id)
            assert row["reject_stage"] == (r.reject_stage.value if r.reject_stage else None)
            assert orjson.loads(row["args_redacted"]) == dict(r.args_redacted or {})
            assert row["elapsed_ms"] == pytest.approx(r.elapsed_us / 1000)
            assert row["execution_started"] is r.execution_started
            assert row["trace_id"] == r.trace_id
            assert [s["step"] for s in d.steps] == [s.step for s in r.steps]
            assert [s["decider"] for s in d.steps] == [s.decider for s in r.steps]
        off = recs[1]  # the workload's second record is an offload
        row = store.call(off.call_id).record
        assert off.artifact is not None and row is not None
        assert (row["artifact_path"], row["artifact_sha256"], row["artifact_chars"]) == (
            off.artifact.path, off.artifact.sha256, off.artifact.chars)
    assert verify(tmp_path).ok


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_each_fsync_policy_acknowledges_every_record(tmp_path: Path, policy: FsyncPolicy) -> None:
    acks: list[Ack] = []
    sink = AuditSink(tmp_path, fsync=policy, on_ack=acks.append)
    recs = list(workload(300))
    for r in recs:
        sink.emit(r)
    assert sink.flush(120)  # (record: one fsync per record, 300 of them)
    acked = [c for a in acks for c in a.call_ids]
    assert acked == [r.call_id for r in recs]
    seqs = [a.seq for a in acks]
    assert seqs == sorted(seqs) and sink.acked_seq == seqs[-1]
    if policy is FsyncPolicy.RECORD:
        assert all(len(a.call_ids) == 1 for a in acks)
    else:
        assert len(acks) < 300  # grouped: one write (and sync) per batch
    sink.shutdown()
    with AuditStore(tmp_path) as store:
        assert store.counts()["calls"] == 300


def test_fsync_policy_from_environment_and_bad_value(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLTRACE_AUDIT_FSYNC", "none")
    assert AuditSink(tmp_path).fsync is FsyncPolicy.NONE
    assert AuditSink(tmp_path, fsync="record").fsync is FsyncPolicy.RECORD
    monkeypatch.setenv("TOOLTRACE_AUDIT_FSYNC", "sometimes")
    from tooltrace.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="TOOLTRACE_AUDIT_FSYNC"):
        AuditSink(tmp_path)


def test_home_from_environment_and_key_file_is_private(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLTRACE_AUDIT_KEY", raising=False)
    monkeypatch.setenv("TOOLTRACE_HOME", str(tmp_path / "envhome"))
    sink = AuditSink()
    sink.emit(make_record(__import__("random").Random(1)))
    sink.shutdown()
    key = tmp_path / "envhome" / "audit.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert len(key.read_bytes().strip()) == 64
    assert list((tmp_path / "envhome" / "audit" / "segments").glob("*.jsonl"))


def test_rotation_seals_segments_and_chains_them(tmp_path: Path) -> None:
    sink = AuditSink(tmp_path, segment_max_bytes=40_000, group_max_records=16)
    recs = list(workload(400))
    for r in recs:
        sink.emit(r)
    sink.shutdown()
    segs = sorted((tmp_path / "audit" / "segments").glob("*.jsonl"))
    assert len(segs) > 5
    assert not any(".live." in p.name for p in segs)  # all sealed after shutdown
    lines = _segment_lines(tmp_path)
    seals = [x for x in lines if x["k"] == "seal"]
    assert len(seals) == len(segs) and seals[-1]["final"] is True
    assert all(s["final"] is False for s in seals[:-1])
    rep = verify(tmp_path)
    assert rep.ok and rep.segments == len(segs) and rep.records == 400, rep.findings
    with AuditStore(tmp_path) as store:
        assert store.counts()["calls"] == 400


def test_checkpoint_every_n_records_and_when_idle(tmp_path: Path) -> None:
    sink = AuditSink(tmp_path, checkpoint_every=100, checkpoint_interval_s=0.1)
    for r in workload(250):
        sink.emit(r)
    deadline = time.monotonic() + 30  # the opening and each batch wait for fsync
    # No flush: the idle timer must cover the last 50 records by itself.
    while time.monotonic() < deadline:
        lines = _segment_lines(tmp_path)
        if lines and lines[-1]["k"] == "ckpt" and sum(x["k"] == "c" for x in lines) == 250:
            break
        time.sleep(0.05)
    kinds = [x["k"] for x in _segment_lines(tmp_path)]
    assert kinds[-1] == "ckpt"
    assert kinds.count("ckpt") >= 3  # at 100, at 200, and the idle one after 250
    sink.shutdown()


def test_late_resolution_overrides_unknown(tmp_path: Path) -> None:
    import random

    rec = make_record(random.Random(3), kind="unknown")
    sink = AuditSink(tmp_path)
    sink.emit(rec)
    late = LateStep(rec.call_id, rec.run_id, rec.tool,
                    Step(1000, "resolved", rec.started_at_us + 900_000, 0, "runtime", "ok",
                         {"outcome": "ok"}))
    sink.emit_late(late)
    sink.shutdown()
    with AuditStore(tmp_path) as store:
        row = store.call(rec.call_id).record
        assert row is not None
        assert (row["outcome"], row["status"]) == ("ok", "unknown")
        assert row["resolved_at"] is not None
        steps = store.call(rec.call_id).steps
        assert steps[-1]["step"] == "resolved" and steps[-1]["decision"] == "ok"


def test_emit_never_raises_and_counts_what_it_could_not_write(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the home should be")
    sink = AuditSink(blocker)
    recs = list(workload(20))
    for r in recs:
        sink.emit(r)  # must not raise
    sink.flush(5)
    assert sink.dropped == 20 and sink.last_error is not None
    sink.shutdown()


def test_queue_full_drops_are_counted_not_blocking(tmp_path: Path) -> None:
    sink = AuditSink(tmp_path, max_queue=10, group_interval_ms=10_000, group_max_records=10_000)
    for r in workload(50):
        sink.emit(r)
    # No emit waited for room: the worker cannot drain before its 10 s group interval, so an
    # emit that blocked would still be blocked here, and nothing would have been dropped.
    assert sink.dropped == 40 and sink.depth == 10
    sink.shutdown()
    with AuditStore(tmp_path) as store:
        assert store.counts()["calls"] == 10


def test_threads_share_one_writer_chain(tmp_path: Path) -> None:
    sink = AuditSink(tmp_path, strict=True)
    recs = list(workload(400))

    def work(part: list[object]) -> None:
        for r in part:
            sink.emit(r)  # type: ignore[arg-type]

    threads = [threading.Thread(target=work, args=(recs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.shutdown()
    assert sink.dropped == 0
    rep = verify(tmp_path)
    assert rep.ok and rep.records == 400 and rep.writers == 1


def test_forked_child_writes_its_own_chain(tmp_path: Path) -> None:
    sink = AuditSink(tmp_path)
    recs = list(workload(40))
    for r in recs[:20]:
        sink.emit(r)
    sink.flush()
    pid = os.fork()
    if pid == 0:  # child
        try:
            for r in recs[20:30]:
                sink.emit(r)
            sink.shutdown()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    for r in recs[30:]:
        sink.emit(r)
    sink.shutdown()
    rep = verify(tmp_path)
    assert rep.ok and rep.writers == 2 and rep.records == 40, rep.findings
    with AuditStore(tmp_path) as store:
        assert store.counts()["calls"] == 40


def test_records_written_are_never_a_status_other_than_given(tmp_path: Path) -> None:
    import random

    rng = random.Random(5)
    sink = AuditSink(tmp_path)
    kinds = ["ok", "failed", "unknown", "cancelled", "params"]
    recs = [make_record(rng, kind=k) for k in kinds]
    for r in recs:
        sink.emit(r)
    sink.shutdown()
    with AuditStore(tmp_path) as store:
        got = dict(store.sql("SELECT call_id, status FROM tool_calls").rows)
    assert got == {r.call_id: r.status.value for r in recs}
    assert {Status(v) for v in got.values()} == {Status.OK, Status.FAILED, Status.UNKNOWN,
                                                Status.CANCELLED, Status.REJECTED}


def test_export_to_a_duckdb_file_with_uuid_ids(tmp_path: Path) -> None:
    import duckdb

    recs = list(workload(200))
    sink = AuditSink(tmp_path / "home")
    for r in recs:
        sink.emit(r)
    sink.shutdown()
    with AuditStore(tmp_path / "home") as store:
        counts = store.to_duckdb(tmp_path / "audit.duckdb")
    assert counts["tool_calls"] == 200
    assert counts["tool_call_steps"] == sum(len(r.steps) for r in recs)
    con = duckdb.connect(str(tmp_path / "audit.duckdb"), read_only=True)
    typ = con.execute("SELECT data_type FROM information_schema.columns WHERE "
                      "table_name = 'tool_calls' AND column_name = 'call_id'").fetchone()
    assert typ == ("UUID",)
    row = con.execute("SELECT tool, status FROM tool_calls WHERE call_id = $c",
                      {"c": recs[57].call_id}).fetchone()
    assert row == (recs[57].tool, recs[57].status.value)
    con.close()


def test_reader_follows_a_segment_sealed_after_listing(tmp_path: Path) -> None:
    from tooltrace.audit._segments import list_segments, read_segment

    sink = AuditSink(tmp_path)
    for r in workload(30):
        sink.emit(r)
    sink.flush()
    (live,) = list_segments(tmp_path / "audit")
    assert live.live
    sink.shutdown()  # seals: the live name is gone now
    seg = read_segment(live)
    assert seg is not None and not seg.info.live and not seg.alive
    assert sum(1 for _, o, _ in seg.lines if o["k"] == "c") == 30


def test_a_malformed_record_does_not_make_the_trail_unreadable(tmp_path: Path) -> None:
    import random

    import msgspec

    rng = random.Random(4)
    good = make_record(rng)
    # Records are not type-checked when built; a wrong type must still not poison readers.
    bad = msgspec.structs.replace(make_record(rng), call_id=5, run_id=["x"])  # type: ignore[arg-type]
    sink = AuditSink(tmp_path)
    sink.emit(good)
    sink.emit(bad)
    sink.shutdown()
    with AuditStore(tmp_path) as store:
        rows = dict(store.sql("SELECT call_id, run_id FROM tool_calls").rows)
    assert rows == {good.call_id: good.run_id, "5": '["x"]'}


def _wait_for_live_segment(home: Path) -> Path:
    live = wait_for(lambda: sorted((home / "audit" / "segments").glob("*.live.jsonl")), 30.0,
                    "a live segment")
    return Path(live[0])


def test_open_segment_opens_before_any_record_and_the_records_follow_its_header(
        tmp_path: Path) -> None:
    sink = AuditSink(tmp_path)
    sink.open_segment()
    seg = _wait_for_live_segment(tmp_path)
    assert [orjson.loads(x)["k"] for x in seg.read_bytes().splitlines()] == ["open"]
    recs = list(workload(20))
    for r in recs:
        sink.emit(r)
    sink.shutdown()
    # One segment: the records went into the one opened early, after its header.
    segs = sorted((tmp_path / "audit" / "segments").glob("*.jsonl"))
    assert [p.name for p in segs] == [seg.name.replace(".live.", ".")]
    kinds = [x["k"] for x in _segment_lines(tmp_path)]
    assert kinds[0] == "open" and kinds.count("c") == 20 and kinds[-1] == "seal"
    rep = verify(tmp_path)
    assert rep.ok and rep.records == 20, rep.findings
    with AuditStore(tmp_path) as store:
        assert store.counts()["calls"] == 20


def test_open_segment_then_shutdown_at_once_leaves_nothing_unsealed(tmp_path: Path) -> None:
    # Shutdown may come while the segment is still opening, or before it began: either way no
    # live segment is left behind and the trail verifies.
    for i in range(20):
        home = tmp_path / str(i)
        sink = AuditSink(home)
        sink.open_segment()
        if i % 2:
            time.sleep(0.001 * i)
        sink.shutdown()
        sink.open_segment()  # after shutdown: nothing more happens
        adir = home / "audit" / "segments"
        names = [p.name for p in adir.iterdir()] if adir.exists() else []
        assert not [n for n in names if ".live." in n or n.endswith(".tmp")], names
        rep = verify(home)
        assert rep.ok and rep.records == 0, rep.findings
        assert sink.last_error is None
