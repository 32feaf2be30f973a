"""Crash: audit writer processes killed with SIGKILL at random moments while writing flat out
(thousands of records a second), 10 kills in CI and 200 with ``TOOLTRACE_LONG=1``.

Checked after every kill round and again after compaction: no acknowledged record is lost, no
record appears twice, and every torn tail is reported by the reader, quarantined by recovery
and reported by ``verify``. A SIGKILL rarely lands inside one ``write()``, so a third of the dead
segments additionally get the first bytes of a record appended, as a kill mid-write leaves them.

This complements ``tests/test_audit_crash.py`` (50 kills, acknowledged records kept) with the
duplicate count, the write rate, the ground truth of torn tails, and the long run; it reuses
that suite's writer process (``tests/support/audit.py``).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import time
from pathlib import Path

import orjson
import pytest
from support.audit import acked_ids, start_writer

from tooltrace.audit import AuditStore, compact, recover_dead_segments, verify
from tooltrace.audit._format import load_key
from tooltrace.audit._segments import list_segments

from ._figures import LONG, record, size

KILLS = size(10, 200)
PARALLEL = 2
POLICIES = ("grouped", "none", "record")


def _round(home: Path, rng: random.Random, fsync: str) -> tuple[set[str], list[float]]:
    procs = [start_writer(home, fsync) for _ in range(PARALLEL)]
    ready: list[float] = []
    first: list[bytes] = []
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline() == b"ready\n"
        ready.append(time.monotonic())
    for p in procs:
        # Killed only once it is writing: its first acknowledged id (whatever the machine's load).
        assert p.stdout is not None
        first.append(p.stdout.readline())
    time.sleep(rng.uniform(0.05, 0.4))
    acked: set[str] = set()
    rates: list[float] = []
    for p, t_ready, head in zip(procs, ready, first, strict=True):
        time.sleep(rng.uniform(0, 0.02))
        p.send_signal(signal.SIGKILL)
        alive = time.monotonic() - t_ready
        out, _ = p.communicate(timeout=60)
        assert p.returncode == -signal.SIGKILL
        ids = acked_ids(head + out)
        # It was writing when killed: a writer writes until it is killed, and had acknowledged
        # records by then (how many a second is a figure, below, not a pass mark).
        assert ids, "a writer was killed before it acknowledged anything"
        acked |= ids
        rates.append(len(ids) / alive)
    return acked, rates


def _tear(seg: Path, rng: random.Random) -> int:
    """Append the first bytes of a copy of the segment's last record (a kill mid-write)."""
    data = seg.read_bytes()
    body = data.rstrip(b"\n")
    last = body[body.rfind(b"\n") + 1 :]
    part = last[: rng.randint(1, max(1, len(last) - 1))]
    with open(seg, "ab") as fh:
        fh.write(part)
    return len(part)


def _ids(home: Path) -> tuple[dict[str, int], set[str]]:
    with AuditStore(home) as store:
        rows = store.sql("SELECT call_id, count(*) FROM tool_calls GROUP BY call_id").rows
        torn = {i.segment for i in store.issues if "torn" in i.message}
    return {r[0]: int(r[1]) for r in rows}, torn


@pytest.mark.timeout(3600 if LONG else 300)
def test_sigkill_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("TOOLTRACE_CRASH_SEED", "4242")))
    home = tmp_path
    adir = home / "audit"
    acked: set[str] = set()
    rates: list[float] = []
    torn_truth: dict[str, int] = {}
    reported: set[str] = set()
    rounds = KILLS // PARALLEL
    checked: set[str] = set()
    for i in range(rounds):
        got, r = _round(home, rng, POLICIES[i % len(POLICIES)])
        acked |= got
        rates += r
        # This round's dead segments (earlier rounds' were sealed by this round's writers,
        # which recover crashed writers' segments when they start).
        dead = [s for s in list_segments(adir) if s.live and s.name not in checked]
        assert len(dead) == PARALLEL
        for s in dead:
            checked.add(s.name)
            tail = s.path.read_bytes()
            if not tail.endswith(b"\n"):  # a kill that really landed mid-write
                torn_truth[s.name] = len(tail) - tail.rfind(b"\n") - 1
            elif rng.random() < 1 / 3:
                torn_truth[s.name] = _tear(s.path, rng)
        # The reader reports exactly the torn tails of segments not yet recovered.
        _counts, torn_seen = _ids(home)
        pending = {s.name for s in list_segments(adir) if s.live}
        assert torn_seen == {n for n in torn_truth if n in pending}, torn_seen
        reported |= torn_seen

    counts, _ = _ids(home)
    lost = acked - set(counts)
    dup = {k: v for k, v in counts.items() if v > 1}
    assert not lost, f"{len(lost)} acknowledged records lost"
    assert not dup, list(dup.items())[:5]

    key = load_key(home, create=False)
    assert key is not None
    recover_dead_segments(adir, key)
    assert not [s for s in list_segments(adir) if s.live]
    # Every torn tail was set aside in quarantine with a report naming its segment ...
    reports = [orjson.loads(p.read_bytes()) for p in (adir / "quarantine").glob("*.json")]
    quarantined = {str(r["segment"]).replace(".live.jsonl", ".jsonl"): int(r["bytes"])
                   for r in reports}
    truth = {n.replace(".live.jsonl", ".jsonl"): b for n, b in torn_truth.items()}
    assert quarantined == truth, (set(quarantined) ^ set(truth))
    # ... and verify names each one, with no error anywhere.
    rep = verify(home)
    assert rep.ok, [f for f in rep.findings if f.severity == "error"][:5]
    torn_verify = {f.segment for f in rep.findings if f.kind == "torn"}
    assert torn_verify == set(truth), (torn_verify ^ set(truth))

    res = compact(home)
    counts_after, torn_after = _ids(home)
    assert not torn_after
    assert acked <= set(counts_after) and set(counts_after) == set(counts)
    assert all(v == 1 for v in counts_after.values())
    # The writers compact sealed segments in the background: this compaction takes the rest,
    # and between them every record is counted once (above).
    assert res.calls <= len(counts)
    record(
        "crash (SIGKILL)",
        kills=rounds * PARALLEL,
        acked=len(acked),
        records_on_disk=len(counts),
        lost=len(lost),
        duplicated=len(dup),
        torn_tails=len(torn_truth),
        torn_reported_by_reader=len(reported),
        torn_named_by_verify=len(torn_verify),
        median_write_rate_per_s=round(statistics.median(rates)),
        min_write_rate_per_s=round(min(rates)),
    )
