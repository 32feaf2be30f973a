"""Several writer processes at once, for a few seconds: none blocks another, every
acknowledged record is queryable, and a reader running meanwhile sees a consistent trail."""

from __future__ import annotations

from pathlib import Path

from support.audit import acked_ids, collect, start_writer

from tooltrace.audit import AuditStore, verify

WRITERS = 4
SECONDS = 2.0


def test_concurrent_writer_processes(tmp_path: Path) -> None:
    procs = [start_writer(tmp_path, "grouped", SECONDS) for _ in range(WRITERS)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    # Read while they write: live segments are read up to their last complete line, and an
    # in-flight tail of a live writer is not mistaken for a torn one. Wait for the event the
    # read needs (two writers have acknowledged a record), not for a guessed time.
    early: dict[int, bytes] = {}
    for p in procs[:2]:
        assert p.stdout is not None
        got = b""
        while len(acked_ids(got)) == 0:
            line = p.stdout.readline()
            assert line, "a writer stopped before acknowledging anything"
            got += line
        early[id(p)] = got
    with AuditStore(tmp_path) as store:
        during = store.counts()["calls"]
        assert not store.issues
        live = {r[0] for r in store.sql("SELECT DISTINCT writer FROM tool_calls").rows}
    assert during > 0 and len(live) >= 2  # several writers were live while it read
    acked: set[str] = set()
    for p in procs:
        out = early.get(id(p), b"") + collect(p)
        assert p.returncode == 0
        assert out.rstrip().endswith(b"done 0")  # no drops in any writer
        acked |= acked_ids(out)
    assert len(acked) >= during
    with AuditStore(tmp_path) as store:
        ids = {r[0] for r in store.sql("SELECT call_id FROM tool_calls").rows}
        per_writer = dict(store.sql(
            "SELECT writer, count(*) FROM tool_calls GROUP BY writer").rows)
    assert acked <= ids and len(ids) == len(acked)
    assert len(per_writer) == WRITERS and min(per_writer.values()) > 100
    rep = verify(tmp_path)
    assert rep.ok and rep.writers == WRITERS and rep.records == len(acked)
