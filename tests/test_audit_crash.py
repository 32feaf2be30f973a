"""Writers killed with SIGKILL at random moments lose nothing they acknowledged; torn tails are
reported, set aside in quarantine and sealed, never silently dropped or half-read.

``bench/audit_crash.py`` runs the same loop (with freshly started interpreters) for as many
rounds as you like.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

from support.audit import acked_ids, collect, fork_writer, start_writer
from support.runtime import wait_for

from tooltrace.audit import AuditStore, recover_dead_segments, verify
from tooltrace.audit._format import load_key
from tooltrace.audit._segments import list_segments

KILLS = 60
PARALLEL = 3


def test_sigkill_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("TOOLTRACE_CRASH_SEED", "20261202")))
    home, acks = tmp_path / "home", tmp_path / "acks"
    acks.mkdir()
    writers, waited = 0, 0
    for i in range(KILLS // PARALLEL):
        fsync = "none" if i % 3 == 2 else "grouped"
        files = [acks / f"{i}-{j}" for j in range(PARALLEL)]
        pids = [fork_writer(home, f, fsync) for f in files]
        for pid, f in zip(pids, files, strict=True):
            # Most are killed once they acknowledged a random number of records (a count, not
            # a time: a disk slow to sync delays the acknowledgements, not the test's outcome);
            # one in six at once, while it may still be opening its segment.
            least = 0 if rng.random() < 1 / 6 else rng.randint(25, 60)
            if least:  # (the writer created its file before fork_writer returned)
                wait_for(lambda f=f, n=least: len(acked_ids(f.read_bytes())) >= n, 60.0,
                         f"{least} acknowledged records")
            waited += least > 0
            time.sleep(rng.uniform(0, 0.005))  # then a random moment of its writing
            os.kill(pid, signal.SIGKILL)
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        writers += PARALLEL
    acked: set[str] = set()
    for f in acks.iterdir():
        acked |= acked_ids(f.read_bytes())
    assert len(acked) > 1000  # the writers really wrote before dying
    adir = home / "audit"
    # Every killed writer that acknowledged a record left a segment behind.
    assert writers == KILLS
    assert waited <= len({s.writer for s in list_segments(adir)}) <= KILLS

    # Readers see every acknowledged record, and report (never read) torn tails of the
    # segments still left unsealed (writers started later have sealed the others already).
    with AuditStore(home) as store:
        ids = {r[0] for r in store.sql("SELECT call_id FROM tool_calls").rows}
        torn_reported = {i.segment for i in store.issues if "torn" in i.message}
    assert acked <= ids, f"{len(acked - ids)} acknowledged records lost"

    key = load_key(home, create=False)
    assert key is not None
    recovered = recover_dead_segments(adir, key)
    assert {r.segment for r in recovered if r.torn_bytes} == torn_reported
    assert not [s for s in list_segments(adir) if s.live]
    quarantine = sorted((adir / "quarantine").glob("*.torn")) if (
        adir / "quarantine").exists() else []
    rep = verify(home)
    assert rep.ok, [f for f in rep.findings if f.severity == "error"]
    torn_findings = [f for f in rep.findings if f.kind == "torn"]
    # Every torn tail was set aside with a report, and verify names each one.
    assert len(torn_findings) == len(quarantine)
    for q in quarantine:
        assert q.with_suffix(".json").exists() and not q.read_bytes().endswith(b"\n")
    with AuditStore(home) as store:
        after = {r[0] for r in store.sql("SELECT call_id FROM tool_calls").rows}
        assert not store.issues
    assert acked <= after and after == ids


def test_a_torn_tail_is_reported_quarantined_and_sealed(tmp_path: Path) -> None:
    p = start_writer(tmp_path, "grouped")
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    deadline = time.monotonic() + 20
    while not list_segments(tmp_path / "audit") and time.monotonic() < deadline:
        time.sleep(0.01)  # until the writer has opened its segment
    time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    out = collect(p)
    acked = acked_ids(out)
    (seg,) = list_segments(tmp_path / "audit")
    full = seg.path.read_bytes()
    # The kill may itself have torn the last write: keep whole lines only, so the tail below
    # is the one torn record this test plants.
    whole = full[: full.rfind(b"\n") + 1]
    cut = whole.rstrip(b"\n").rfind(b"\n") + 1
    partial = whole[cut : cut + 40]
    seg.path.write_bytes(whole + partial)  # plus a record the writer was half way through
    with AuditStore(tmp_path) as store:
        (issue,) = store.issues
        assert issue.segment == seg.name and "torn record (40 bytes)" in issue.message
        ids = {r[0] for r in store.sql("SELECT call_id FROM tool_calls").rows}
    assert acked <= ids
    rep = verify(tmp_path)
    assert rep.ok and any(f.kind == "torn" and f.segment == seg.name for f in rep.findings)
    key = load_key(tmp_path, create=False)
    assert key is not None
    (r,) = recover_dead_segments(tmp_path / "audit", key)
    assert r.torn_bytes == 40 and r.quarantined is not None
    assert (tmp_path / "audit" / r.quarantined).read_bytes() == partial
    report = (tmp_path / "audit" / r.quarantined).with_suffix(".json").read_bytes()
    assert seg.name.encode() in report
    rep = verify(tmp_path)
    torn = [f for f in rep.findings if f.kind == "torn"]
    assert rep.ok and len(torn) == 1 and "40 torn bytes" in torn[0].message
