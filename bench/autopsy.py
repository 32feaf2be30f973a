"""Section ``autopsy``: find and render one call among millions.

The bench writes the audit trail itself, fast: N calls (6 steps each, like a real no-op call)
generated in DuckDB and written as Parquet with compaction's own schema, sort order, row-group
size and compression, one file per table per "compaction batch" (as many calls as 512 MiB of
segment lines hold), and registered in the compaction manifest. So ``AuditStore`` and
``tooltrace autopsy`` take their real path: manifest -> ``read_parquet`` over the listed
files -> min/max pruning on the time-ordered call id.

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
_STEPS = [
    (0, "resolve", "registry", "accept"),
    (1, "validate", "schema", "accept"),
    (2, "policy", "policy:default", "allow"),
    (3, "admission", "runtime", "accept"),
    (4, "execute", "tool", "returned"),
    (5, "redact", "redactor", "clean"),
]


_BASE_MS = 1_780_000_000_000  # 2026-05-28
_CALL_COLUMNS = f"""
    cid(i) AS call_id,
    'run-' || (i // 1000)::VARCHAR AS run_id,
    'tool_' || (i % 8)::VARCHAR AS tool,
    'user' AS source,
    CASE WHEN i % 50 = 7 THEN 'rejected' WHEN i % 97 = 3 THEN 'failed' ELSE 'ok' END AS status,
    CASE WHEN i % 50 = 7 THEN 'params' END AS reject_stage,
    'tool_' || (i % 8)::VARCHAR || ' succeeded (1 chars)' AS summary,
    CASE WHEN i % 97 = 3 THEN 'ValueError' END AS error_type,
    make_timestamp(({_BASE_MS} + i * 10) * 1000) AS started_at,
    0.05 + (i % 13) * 0.01 AS elapsed_ms,
    i % 50 <> 7 AS execution_started,
    md5('t' || i::VARCHAR) AS trace_id,
    substr(md5('s' || i::VARCHAR), 1, 16) AS span_id,
    NULL::VARCHAR AS parent_span_id,
    true AS trace_sampled,
    '{{"x":"value ' || (i % 1000)::VARCHAR || '"}}' AS args_redacted,
    'value ' || (i % 1000)::VARCHAR AS result_preview,
    NULL::VARCHAR AS artifact_path, NULL::VARCHAR AS artifact_sha256,
    NULL::BIGINT AS artifact_chars, NULL::BIGINT AS artifact_bytes,
    'default' AS mode, 'function' AS tool_type, false AS hook_modified,
    NULL::VARCHAR AS attributes,
    'bench-writer-' || (i % 4)::VARCHAR AS writer,
    'bench-writer.' || lpad((i // 100000)::VARCHAR, 6, '0') || '.jsonl' AS segment,
    (i % 100000)::BIGINT + 2 AS line,
    NULL::VARCHAR AS parent_call_id, 0::INTEGER AS depth, NULL::VARCHAR AS progress,
    'user-' || (i % 20)::VARCHAR AS principal_user, NULL::VARCHAR AS principal_agent,
    CASE WHEN i % 3 = 0 THEN 'acme' ELSE 'globex' END AS principal_tenant,
    CASE WHEN i % 10 = 0 THEN '["intern"]' ELSE '["dev"]' END AS principal_roles,
    'read' AS capability, 'none' AS effect
"""


def _table(rel: Any) -> Any:
    import pyarrow as pa

    tab = rel.arrow()
    return tab if isinstance(tab, pa.Table) else tab.read_all()


def _line_bytes() -> int:
    """Bytes of one audit segment line of a real no-op call (to size compaction batches)."""
    from bench.ingest import _template
    from tooltrace.audit._format import dumps, encode_call

    return len(dumps(encode_call(_template()))) + 80


def generate(
    home: Path, calls: int, *, per_file: int | None = None, with_ranges: bool = True,
    with_lookups: bool = True,
) -> dict[str, Any]:
    """Write ``calls`` calls as compacted Parquet (with lookup files unless ``with_lookups``
    is false) under ``home``; return what was written.

    ``with_ranges=False`` writes a manifest without per-file call-id ranges (as compaction did
    before it recorded them): lookups then read every file's footer."""
    import duckdb
    import pyarrow.parquet as pq

    from tooltrace.audit._format import load_key
    from tooltrace.audit._lookups import write_lookup_for
    from tooltrace.audit._manifest import write_manifest
    from tooltrace.audit._segments import audit_dir
    from tooltrace.audit._tables import schemas

    t0 = time.perf_counter()
    if per_file is None:
        per_file = max(1000, (512 * 1024 * 1024) // _line_bytes())
    adir = audit_dir(home)
    sch = schemas()
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = true")
    con.execute("SET enable_progress_bar = false")
    base_ms = _BASE_MS
    # Time-ordered UUIDv7 text: 48-bit ms timestamp, version 7, 12-bit counter, variant, random
    # tail; calls 10 ms apart, so ids sort in generation order.
    con.execute(f"CREATE MACRO hx(i) AS lpad(lower(to_hex({base_ms} + i * 10)), 12, '0')")
    con.execute(
        "CREATE MACRO cid(i) AS substr(hx(i), 1, 8) || '-' || substr(hx(i), 9, 4) || '-7' "
        "|| lpad(lower(to_hex(i % 4096)), 3, '0') || '-8' || substr(md5(i::VARCHAR), 1, 3) "
        "|| '-' || substr(md5(i::VARCHAR), 4, 12)"
    )
    steps_values = ", ".join(f"({s}, '{n}', '{d}', '{v}')" for s, n, d, v in _STEPS)
    files: dict[str, list[str]] = {"calls": [], "steps": []}
    ranges: dict[str, list[str]] = {}
    key = load_key(home, create=True)
    assert key is not None
    manifest: dict[str, Any] = {"version": 1, "segments": [], "files": files}
    file_no = 0
    for start in range(0, calls, per_file):
        n = min(per_file, calls - start)
        # Generated already in call-id order (ids grow with i): ORDER BY the integer is cheap.
        ctab = _table(con.sql(f"""
          SELECT {_CALL_COLUMNS}
          FROM range({start}, {start + n}) t(i) ORDER BY i
        """)).cast(sch["calls"])
        stab = _table(con.sql(f"""
          SELECT cid(i) AS call_id, s.seq::INTEGER AS seq, s.step,
                 make_timestamp(({base_ms} + i * 10) * 1000 + s.seq * 7) AS started_at,
                 0.002 AS elapsed_ms, s.decider, s.decision, NULL::VARCHAR AS detail
          FROM range({start}, {start + n}) t(i), (VALUES {steps_values}) s(seq, step, decider,
               decision)
          ORDER BY i, s.seq
        """)).cast(sch["steps"])
        # Same writer settings as compaction (sorted by call id, 16k-row groups, zstd).
        for t, tab in (("calls", ctab), ("steps", stab)):
            rel = f"parquet/{t}/bench-{file_no:05d}.parquet"
            out = adir / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(tab, out, row_group_size=16384, compression="zstd",
                           write_statistics=True)
            files[t].append(rel)
            # Sorted by call id: the file's range, as compaction records it.
            ranges[rel] = [tab["call_id"][0].as_py(), tab["call_id"][-1].as_py()]
            if with_lookups:  # and its lookup file, as compaction writes it
                write_lookup_for(adir, manifest, rel, t, key, tab)
        file_no += 1
    if with_ranges:
        manifest["ranges"] = ranges
    write_manifest(adir, manifest)
    con.close()
    size = sum(p.stat().st_size for p in (adir / "parquet").rglob("*.parquet"))
    lookups = sum(p.stat().st_size for p in (adir / "parquet").rglob("*.lookup"))
    return {"calls": calls, "steps": calls * len(_STEPS), "files_per_table": file_no,
            "calls_per_file": per_file, "bytes": size, "lookup_bytes": lookups,
            "seconds": time.perf_counter() - t0}


def _pick_ids(home: Path, k: int, seed: int = 7) -> list[str]:
    import duckdb

    from tooltrace.audit._manifest import read_manifest
    from tooltrace.audit._segments import audit_dir

    adir = audit_dir(home)
    files = [str(adir / f) for f in read_manifest(adir)["files"]["calls"]]
    con = duckdb.connect()
    n = con.execute("SELECT count(*) FROM read_parquet($f)", {"f": files}).fetchone()
    assert n is not None
    total = int(n[0])
    rng = random.Random(seed)
    offs = sorted({0, total // 2, total - 1, *(rng.randrange(total) for _ in range(k))})
    ids = []
    for o in offs:
        row = con.execute(
            "SELECT call_id FROM read_parquet($f) LIMIT 1 OFFSET $o", {"f": files, "o": o}
        ).fetchone()
        assert row is not None
        ids.append(str(row[0]))
    con.close()
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
