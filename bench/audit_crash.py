"""Kill audit writers with SIGKILL at random moments, many times, and check the promises.

Each round starts ``--parallel`` writer processes (fresh interpreters running
``tests/support/audit.py writer``), lets them write for a random few tens of ms, kills
them, and collects the call ids each had acknowledged. At the end: every acknowledged record
must be queryable, every torn tail reported, quarantined and named by ``verify``, and
``verify`` must find no error. Prints the figures; exits 1 if a promise was broken.

    .venv/bin/python bench/audit_crash.py --rounds 200 --parallel 4
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.audit import acked_ids, collect, start_writer

from tooltrace.audit import AuditStore, load_key, recover_dead_segments, verify


def main() -> int:
    """Run the rounds and print what happened."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--min-ms", type=float, default=10)
    ap.add_argument("--max-ms", type=float, default=80)
    ap.add_argument("--fsync", choices=["grouped", "record", "none"], default="grouped")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--home", type=Path, default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    home = args.home or Path(tempfile.mkdtemp(prefix="tooltrace-crash-"))
    acked: set[str] = set()
    t0 = time.monotonic()
    for r in range(args.rounds):
        procs = [start_writer(home, args.fsync) for _ in range(args.parallel)]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(args.min_ms, args.max_ms) / 1000)
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            acked |= acked_ids(collect(p))
        if (r + 1) % 10 == 0:
            print(f"round {r + 1}/{args.rounds}: {len(acked)} acknowledged so far", flush=True)
    with AuditStore(home) as store:
        ids = {row[0] for row in store.sql("SELECT call_id FROM tool_calls").rows}
        torn_open = len([i for i in store.issues if "torn" in i.message])
    key = load_key(home, create=False)
    assert key is not None
    recover_dead_segments(home / "audit", key)
    rep = verify(home)
    quarantined = len(list((home / "audit" / "quarantine").glob("*.torn"))) if (
        home / "audit" / "quarantine").exists() else 0
    torn_named = len([f for f in rep.findings if f.kind == "torn"])
    lost = acked - ids
    errors = [f for f in rep.findings if f.severity == "error"]
    print(f"kills: {args.rounds * args.parallel}  acknowledged: {len(acked)}  "
          f"stored: {len(ids)}  lost: {len(lost)}")
    print(f"torn tails: {quarantined} quarantined ({torn_open} still open before the final "
          f"recovery), {torn_named} named by verify; verify errors: {len(errors)}; "
          f"{time.monotonic() - t0:.1f} s; home {home}")
    ok = not lost and not errors and torn_named == quarantined
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
