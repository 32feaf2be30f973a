"""Section ``autopsy``: find and render one call among millions.

The bench writes the audit trail through the public API: N synthetic calls (8 tools, runs of
1,000 calls, principals on every call, the six steps of a real no-op call; ``_record``) emitted
through an ``AuditSink`` and moved into Parquet by ``tooltrace.audit.compact`` as they are
written, so the trail is laid out as compaction lays out any trail (its files, lookup files and
manifest). ``AuditStore`` and ``tooltrace autopsy`` then take their real path.

Measured:
- in process: ``AuditStore(home)`` open, then ``store.call(id)`` + ``explain(...)`` +
  ``to_dict()`` as JSON (find and render) for ids spread over the data (first lookup in a fresh
  process, then warm lookups), wall and CPU time of the process;
- the whole command ``tooltrace autopsy <id> --home H`` (a new process each time, human output)
  against the floor ``python -c "import duckdb; duckdb.connect().sql('select 1')"``, run in
  turns (command, floor, command, ...) so both see the same machine load; wall time and the
  child's CPU time (user + system), which other work on the machine disturbs less.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import Table, scratch

__all__ = ["generate", "run"]

ROOT = Path(__file__).resolve().parent.parent
_BASE_MS = 1_780_000_000_000  # 2026-05-28
#: Calls emitted between two compactions: their segments (about 1.5 KB a call) are the most
#: disk the generator holds beyond the Parquet files.
_CHUNK = 250_000


def _call_id(i: int) -> str:
    """Call ``i``'s id: UUIDv7 text whose 48-bit timestamp is the call's start (calls 10 ms
    apart), a 12-bit counter and a tail hashed from ``i``, so ids sort in generation order."""
    ms = f"{_BASE_MS + i * 10:012x}"
    h = hashlib.md5(str(i).encode()).hexdigest()
    return f"{ms[:8]}-{ms[8:]}-7{i % 4096:03x}-8{h[:3]}-{h[3:15]}"


def _record(tpl: Any, i: int) -> Any:
    """Call ``i`` of the synthetic trail, from the record of a real call: 8 tools, runs of 1,000
    calls, 20 users in two tenants (every tenth call an intern's), 1 in 50 rejected and 1 in 97
    failed, the same six steps as a real no-op call."""
    from msgspec.structs import replace

    from tooltrace import Principal, Stage, Status

    start_us = (_BASE_MS + i * 10) * 1000
    rejected, failed = i % 50 == 7, i % 97 == 3
    tool = f"tool_{i % 8}"
    value = f"value {i % 1000}"
    steps = tuple(replace(s, started_at_us=start_us + s.seq * 7, elapsed_us=2)
                  for s in tpl.steps)
    return replace(
        tpl, call_id=_call_id(i), run_id=f"run-{i // 1000}", tool=tool,
        status=Status.REJECTED if rejected else Status.FAILED if failed else Status.OK,
        reject_stage=Stage.PARAMS if rejected else None,
        summary=f"{tool} succeeded (1 chars)", error_type="ValueError" if failed else None,
        started_at_us=start_us, elapsed_us=50 + (i % 13) * 10, execution_started=not rejected,
        args_redacted={"x": value}, result_preview=value, steps=steps,
        trace_id=hashlib.md5(f"t{i}".encode()).hexdigest(),
        span_id=hashlib.md5(f"s{i}".encode()).hexdigest()[:16], trace_sampled=True,
        principal=Principal(user=f"user-{i % 20}",
                            tenant="acme" if i % 3 == 0 else "globex",
                            roles=("intern",) if i % 10 == 0 else ("dev",)),
    )


def generate(home: Path, calls: int) -> dict[str, Any]:
    """Write ``calls`` synthetic calls (``_record``) into ``home``'s audit trail and compact
    them into Parquet, all through the public API: an ``AuditSink`` writes the segments and
    ``tooltrace.audit.compact`` moves them into Parquet (with its lookup files and manifest),
    every ``_CHUNK`` calls and once more after the sink's shutdown sealed the last segment."""
    from bench.ingest import _template
    from tooltrace.audit import audit_dir, compact
    from tooltrace.telemetry import AuditSink

    t0 = time.perf_counter()
    tpl = _template()
    sink = AuditSink(home, fsync="none", compact=False)
    half = 65536 // 2
    try:
        for i in range(calls):
            sink.emit(_record(tpl, i))
            # Wait for the writer rather than let the queue drop records.
            if sink.depth >= half:
                while sink.depth >= half // 2:
                    time.sleep(0.0005)
            if (i + 1) % _CHUNK == 0:
                sink.flush(120.0)
                compact(home, prune=True)
        sink.flush(120.0)
        if sink.dropped or sink.acked_records != calls:
            raise RuntimeError(f"the audit sink kept {sink.acked_records} of {calls} calls "
                               f"({sink.dropped} dropped; {sink.last_error})")
    finally:
        sink.shutdown(120.0)
    compact(home, prune=True)
    parquet = audit_dir(home) / "parquet"
    size = sum(p.stat().st_size for p in parquet.rglob("*.parquet"))
    lookups = sum(p.stat().st_size for p in parquet.rglob("*.lookup"))
    return {"calls": calls, "steps": calls * len(tpl.steps),
            "files_per_table": len(list((parquet / "calls").glob("*.parquet"))),
            "bytes": size, "lookup_bytes": lookups, "seconds": time.perf_counter() - t0}


def _pick_ids(home: Path, k: int, seed: int = 7) -> list[str]:
    from tooltrace.audit import AuditStore

    store = AuditStore(home)
    try:
        n = store.con.execute("SELECT count(*) FROM tool_calls").fetchone()
        assert n is not None
        total = int(n[0])
        rng = random.Random(seed)
        offs = sorted({0, total // 2, total - 1, *(rng.randrange(total) for _ in range(k))})
        ids = []
        for o in offs:
            row = store.con.execute(
                "SELECT call_id FROM tool_calls ORDER BY call_id LIMIT 1 OFFSET $o", {"o": o}
            ).fetchone()
            assert row is not None
            ids.append(str(row[0]))
    finally:
        store.close()
    rng.shuffle(ids)
    return ids


def child_lookup(home: str, ids: list[str]) -> dict[str, Any]:
    """In a fresh process: open the store, find and render each id; times in ms."""
    import orjson

    t0 = time.perf_counter()
    from tooltrace.audit import AuditStore, explain

    t1 = time.perf_counter()
    store = AuditStore(home)
    t2 = time.perf_counter()
    times = []
    cpu = []
    for cid in ids:
        a = time.perf_counter()
        c = time.process_time()
        detail = store.call(cid)
        rendered = orjson.dumps(explain(detail).to_dict(), default=str)
        times.append((time.perf_counter() - a) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        if detail.record is None or detail.record["call_id"] != cid or len(detail.steps) != 6:
            raise RuntimeError(f"lookup of {cid} returned the wrong call")
        if cid.encode() not in rendered:
            raise RuntimeError("rendered autopsy does not name its call")
    prefix = ids[0][:13]
    a = time.perf_counter()
    store.call(prefix)
    prefix_ms = (time.perf_counter() - a) * 1000
    store.close()
    warm = sorted(times[1:]) or times
    heavy = sorted(m for m in ("pyarrow", "pandas", "numpy") if m in sys.modules)
    return {"import_ms": (t1 - t0) * 1000, "open_ms": (t2 - t1) * 1000,
            "first_ms": times[0], "warm_p50_ms": statistics.median(warm),
            "warm_max_ms": max(warm), "warm_cpu_p50_ms": statistics.median(cpu[1:] or cpu),
            "lookups": len(ids), "prefix_ms": prefix_ms, "heavy_modules": heavy}


def _timed(
    cmd: list[str], env: dict[str, str]
) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall ms, CPU ms (user + system of the child) and the finished process."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    a = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = (time.perf_counter() - a) * 1000
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000
    return wall, cpu, p


def _trail(trails: Path | None, n: int) -> tuple[Path, dict[str, Any] | None]:
    """Where the ``n``-call trail lives, and what generated it when it is already there.

    Without ``trails`` the trail is a fresh scratch directory (removed after). With it, the
    trail is ``trails/calls-<n>``, generated once and read by later runs: the 10M-call one
    takes minutes to write."""
    if trails is None:
        return Path(scratch(f"tooltrace-bench-autopsy-{n}-")), None
    home = trails / f"calls-{n}"
    info = home / "bench-generated.json"
    if info.exists():
        kept: dict[str, Any] = json.loads(info.read_text())
        return home, dict(kept, seconds=0.0, reused=True)
    shutil.rmtree(home, ignore_errors=True)  # a generation that did not finish
    home.mkdir(parents=True)
    return home, None


def run(*, rows: list[int], repeats: int, trails: Path | None = None) -> dict[str, Any]:
    """Generate each size, look calls up in process and by command; print a table.

    ``trails``: a directory that keeps the generated trails between runs (``_trail``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TOOLTRACE_HOME", None)
    cli = str(Path(sys.executable).with_name("tooltrace"))
    floor_cmd = [sys.executable, "-c", "import duckdb; duckdb.connect().sql('select 1')"]
    out: dict[str, Any] = {"sizes": []}
    t = Table(
        "Autopsy: find and render one call (compacted Parquet, warm page cache)",
        ["calls", "generate s", "disk MiB", "files/table", "store open ms",
         "first lookup ms", "warm lookup p50 ms", "warm lookup max ms", "warm lookup CPU ms",
         "prefix lookup ms", "command ms (p50)", "floor ms (p50)", "command / floor",
         "command CPU ms", "floor CPU ms", "CPU command / floor"],
    )
    floors: list[float] = []
    for n in rows:
        home, gen = _trail(trails, n)
        try:
            if gen is None:
                gen = generate(home, n)
                if trails is not None:
                    (home / "bench-generated.json").write_text(json.dumps(gen))
            ids = _pick_ids(home, 8)
            p = subprocess.run(
                [sys.executable, "-m", "bench.autopsy", "lookup", "--home", str(home),
                 "--ids", ",".join(ids)], env=env, capture_output=True, text=True, cwd=ROOT)
            if p.returncode != 0:
                raise RuntimeError(f"lookup child failed: {p.stderr.strip()[-500:]}")
            look = json.loads(p.stdout.strip().splitlines()[-1])
            cmd_times: list[float] = []
            cmd_cpu: list[float] = []
            size_floors: list[float] = []
            floor_cpu: list[float] = []
            for i in range(repeats):
                ms, cpu, cp = _timed(
                    [cli, "autopsy", ids[i % len(ids)], "--home", str(home)], env)
                if cp.returncode != 0 or ids[i % len(ids)] not in cp.stdout:
                    raise RuntimeError(f"tooltrace autopsy failed: {cp.stderr.strip()[-300:]}")
                cmd_times.append(ms)
                cmd_cpu.append(cpu)
                ms, cpu, _p = _timed(floor_cmd, env)
                size_floors.append(ms)
                floor_cpu.append(cpu)
            floors += size_floors
            floor = statistics.median(size_floors)
            cmd = statistics.median(cmd_times)
            c_cpu, f_cpu = statistics.median(cmd_cpu), statistics.median(floor_cpu)
            res = {"rows": n, "generate": gen, "lookup": look, "command_ms": cmd,
                   "command_ms_all": cmd_times, "floor_ms": floor, "ratio": cmd / floor,
                   "floor_ms_all": size_floors, "command_cpu_ms": c_cpu,
                   "floor_cpu_ms": f_cpu, "cpu_ratio": c_cpu / f_cpu if f_cpu else None}
            out["sizes"].append(res)
            t.add(n, gen["seconds"], gen["bytes"] / 2**20, gen["files_per_table"],
                  look["open_ms"], look["first_ms"], look["warm_p50_ms"], look["warm_max_ms"],
                  look["warm_cpu_p50_ms"], look["prefix_ms"], cmd, floor, cmd / floor,
                  c_cpu, f_cpu, c_cpu / f_cpu if f_cpu else 0.0, digits=1)
        finally:
            if trails is None:
                shutil.rmtree(home, ignore_errors=True)
    out["floor_ms_all"] = floors
    t.print()
    return out


def _main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.autopsy")
    sub = ap.add_subparsers(dest="cmd", required=True)
    lk = sub.add_parser("lookup")
    lk.add_argument("--home", required=True)
    lk.add_argument("--ids", required=True)
    g = sub.add_parser("generate", help="write a synthetic audit trail (for manual runs)")
    g.add_argument("--home", required=True)
    g.add_argument("--calls", type=int, required=True)
    ns = ap.parse_args()
    if ns.cmd == "lookup":
        res = child_lookup(ns.home, ns.ids.split(","))
    else:
        res = generate(Path(ns.home), ns.calls)
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
