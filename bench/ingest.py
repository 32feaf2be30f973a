"""Section ``ingest``: how many audit records the writer sustains, and drops at a paced rate.

Three measurements, each in fresh processes:

1. Sustained writer throughput: W writer processes (real processes, each with its own
   ``AuditSink`` on one shared home, default settings: grouped fsync) emit prebuilt records of
   a real call as fast as the writer drains them (the producer waits when the queue is more than
   half full, so nothing is dropped and the figure is the writer's, not the queue's).
2. One core: the same with one process pinned to one CPU; records/s x steps per record is the
   step records/s figure.
3. Paced: (a) one ``AuditSink`` fed at a steady pace with no back-pressure, at the calls/s
   target, at half the rate measured in 2 and at that rate: the queue depth it reaches and its
   drops; (b) a registry with every sink on
   (default settings) called at 5,000 calls/s: each sink's peak queue depth and drops.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import Table, scratch

__all__ = ["run"]

ROOT = Path(__file__).resolve().parent.parent


def _template() -> Any:
    """The record of one real, successful call (what AuditSink.emit receives)."""
    from bench._contenders import DESCRIPTION, TOOL, noop
    from tooltrace import ToolCall, ToolRegistry, tool

    home = scratch("tooltrace-bench-")
    reg = ToolRegistry(workspace=home, home=home)
    reg.register(tool(TOOL, execution="inline", description=DESCRIPTION)(noop))
    env = reg.call(ToolCall(TOOL, {"x": "a"}))
    reg.shutdown(1.0)
    return env.record


def _records(n: int) -> list[Any]:
    import msgspec
    import uuid_utils

    tpl = _template()
    out = []
    for i in range(n):
        out.append(msgspec.structs.replace(
            tpl, call_id=str(uuid_utils.uuid7()), trace_id=f"{i + 1:032x}",
            span_id=f"{i + 1:016x}", trace_sampled=True,
        ))
    return out


def _wait_until(t: float) -> None:
    while True:
        left = t - time.time()
        if left <= 0:
            return
        time.sleep(min(left, 0.01))


# -- child processes ----------------------------------------------------------------------


def child_writer(home: str, n: int, start_at: float, pin: int | None) -> dict[str, Any]:
    """Emit ``n`` records through an AuditSink as fast as the writer drains them."""
    if pin is not None:
        os.sched_setaffinity(0, {pin})
    from tooltrace.telemetry import AuditSink

    recs = _records(n + 1)
    steps = len(recs[0].steps)
    sink = AuditSink(home)
    half = 65536 // 2
    # Open the segment (and make the key) before the clock starts: "sustained" is the steady
    # state, not the first fsyncs.
    sink.emit(recs.pop())
    sink.flush(30.0)
    _wait_until(start_at)
    wall0 = time.time()  # a late starter reports its real start
    c0 = time.process_time()
    t0 = time.perf_counter()
    emit = sink.emit
    for r in recs:
        emit(r)
        if sink.depth >= half:
            while sink.depth >= half // 2:
                time.sleep(0.0005)
    ok = sink.flush(120.0)
    t1 = time.perf_counter()
    c1 = time.process_time()
    res = {
        "records": sink.acked_records - 1, "dropped": sink.dropped, "flushed": ok,
        "seconds": t1 - t0, "cpu_s": c1 - c0, "steps_per_record": steps,
        "t0": wall0, "t1": wall0 + (t1 - t0), "error": sink.last_error,
    }
    sink.shutdown(30.0)
    return res


def child_paced_audit(home: str, rate: float, seconds: float) -> dict[str, Any]:
    """Feed one AuditSink at ``rate`` records/s with no back-pressure."""
    from tooltrace.telemetry import AuditSink

    n = int(rate * seconds)
    recs = _records(n)
    sink = AuditSink(home)
    peak, sent = 0, 0
    t0 = time.perf_counter()
    while sent < n:
        due = min(n, int((time.perf_counter() - t0) * rate) + 1)
        while sent < due:
            sink.emit(recs[sent])
            sent += 1
        d = sink.depth
        peak = max(peak, d)
        time.sleep(0.0005)
    elapsed = time.perf_counter() - t0
    sink.flush(120.0)
    res = {"rate": rate, "achieved": n / elapsed, "records": n, "peak_depth": peak,
           "dropped": sink.dropped, "acked": sink.acked_records}
    sink.shutdown(30.0)
    return res


def child_paced_registry(rate: float, seconds: float, execution: str) -> dict[str, Any]:
    """Call a registry with every sink on at ``rate`` calls/s; report each sink's peak/drops."""
    from bench._common import percentile
    from bench._contenders import TOOL, _registry
    from tooltrace import ToolCall

    c = _registry(execution, True)
    reg = c.extra["registry"]
    sinks = list(reg.sinks)
    peaks = {s.name: 0 for s in sinks}
    n = int(rate * seconds)
    lat: list[int] = []
    args = {"x": "a"}
    pc = time.perf_counter_ns
    sent = 0
    t0 = time.perf_counter()
    while sent < n:
        due = min(n, int((time.perf_counter() - t0) * rate) + 1)
        while sent < due:
            a = pc()
            reg.call(ToolCall(TOOL, args))
            lat.append(pc() - a)
            sent += 1
        for s in sinks:
            d = int(getattr(s, "depth", 0) or 0)
            if d > peaks[s.name]:
                peaks[s.name] = d
        time.sleep(0.0002)
    elapsed = time.perf_counter() - t0
    reg.flush(60.0)
    drops = {s.name: int(getattr(s, "dropped", 0) or 0) for s in sinks}
    exported = c.extra["exporter"].spans
    audit = next(s for s in sinks if s.name == "audit")
    acked = audit.acked_records
    c.close()
    lat.sort()
    return {"rate": rate, "achieved": n / elapsed, "calls": n, "peak_depth": peaks,
            "dropped": drops, "spans_exported": exported, "audit_acked": acked,
            "p50_us": percentile(lat, 50) / 1000, "p99_us": percentile(lat, 99) / 1000,
            "p999_us": percentile(lat, 99.9) / 1000}


# -- coordinator --------------------------------------------------------------------------


def _spawn(args: list[str]) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-m", "bench.ingest", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)


def _result(p: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"ingest child failed with exit code {p.returncode}")
    res: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return res


def _writers(n_proc: int, records: int, pin: int | None = None) -> dict[str, Any]:
    home = scratch("tooltrace-bench-ingest-")
    # Children build their records first; all start writing at the same moment.
    start = time.time() + 1.0 + 0.15 * records / 10_000
    procs = [
        _spawn(["writer", "--home", home, "--records", str(records), "--start-at", str(start)]
               + (["--pin", str(pin)] if pin is not None else []))
        for _ in range(n_proc)
    ]
    res = [_result(p) for p in procs]
    shutil.rmtree(home, ignore_errors=True)  # ~1 GB per million records: free it now
    wall = max(r["t1"] for r in res) - min(r["t0"] for r in res)
    total = sum(r["records"] for r in res)
    spr = res[0]["steps_per_record"]
    return {"writers": n_proc, "records": total, "wall_s": wall, "records_per_s": total / wall,
            "step_records_per_s": total * spr / wall, "steps_per_record": spr,
            "dropped": sum(r["dropped"] for r in res),
            "cpu_us_per_record": sum(r["cpu_s"] for r in res) / max(1, total) * 1e6,
            "errors": [r["error"] for r in res if r["error"]]}


def run(*, records: int, writers: list[int], paced_seconds: float, rate: float = 5000.0
        ) -> dict[str, Any]:
    """Run the three measurements; print two tables; return the figures."""
    out: dict[str, Any] = {"sustained": []}
    t = Table(
        f"Audit ingest: sustained writer throughput ({records} records per writer process, "
        "grouped fsync)",
        ["writer processes", "pinned to one core", "records/s", "step records/s",
         "steps/record", "CPU us/record", "dropped"],
    )
    one = _writers(1, records, pin=0)
    one["pinned"] = True
    out["one_core"] = one
    t.add(1, True, one["records_per_s"], one["step_records_per_s"], one["steps_per_record"],
          one["cpu_us_per_record"], one["dropped"], digits=0)
    for w in writers:
        r = _writers(w, records)
        out["sustained"].append(r)
        t.add(w, False, r["records_per_s"], r["step_records_per_s"], r["steps_per_record"],
              r["cpu_us_per_record"], r["dropped"], digits=0)
    t.print()

    sustained_rate = one["records_per_s"]
    # The sink fed at a steady pace (no back-pressure): at the calls/s target, at half the
    # sustained rate and at the full sustained rate.
    out["paced_audit"] = []
    for what, pace in ((f"{rate:,.0f}/s", rate), ("half the one-core rate", sustained_rate / 2),
                    ("the one-core rate", sustained_rate)):
        home = scratch("tooltrace-bench-ingest-")
        pa = _result(_spawn(["paced-audit", "--home", home, "--rate", str(pace),
                             "--seconds", str(paced_seconds)]))
        pa["what"] = what
        out["paced_audit"].append(pa)
        shutil.rmtree(home, ignore_errors=True)
    pr = _result(_spawn(["paced-registry", "--rate", str(rate), "--seconds",
                         str(paced_seconds), "--execution", "inline"]))
    out["paced_registry"] = pr
    t2 = Table(
        f"Queue depth and drops at a paced rate ({paced_seconds:g} s each, default settings)",
        ["what", "target rate/s", "achieved rate/s", "records or calls", "peak queue depth",
         "dropped", "notes"],
    )
    for pa in out["paced_audit"]:
        t2.add(f"AuditSink alone, at {pa['what']}", pa["rate"], pa["achieved"], pa["records"],
               pa["peak_depth"], pa["dropped"], f"{pa['acked']} acknowledged", digits=0)
    for name in ("tracing", "metrics", "logging", "audit"):
        if name not in pr["peak_depth"]:
            continue
        note = ""
        if name == "tracing":
            note = f"{pr['spans_exported']} spans exported"
        elif name == "audit":
            note = f"{pr['audit_acked']} acknowledged"
        elif name == "metrics":
            note = "inline, no queue"
        t2.add(f"registry, everything on: {name} sink", pr["rate"], pr["achieved"],
               pr["calls"], pr["peak_depth"][name], pr["dropped"][name], note, digits=0)
    t2.add("registry, everything on: call latency p50/p99/p99.9 us", pr["rate"], pr["achieved"],
           pr["calls"], None, None,
           f"{pr['p50_us']:.1f} / {pr['p99_us']:.1f} / {pr['p999_us']:.1f}", digits=0)
    t2.print()
    return out


def _main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ingest")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("writer")
    w.add_argument("--home", required=True)
    w.add_argument("--records", type=int, required=True)
    w.add_argument("--start-at", type=float, required=True)
    w.add_argument("--pin", type=int)
    a = sub.add_parser("paced-audit")
    a.add_argument("--home", required=True)
    a.add_argument("--rate", type=float, required=True)
    a.add_argument("--seconds", type=float, required=True)
    r = sub.add_parser("paced-registry")
    r.add_argument("--rate", type=float, required=True)
    r.add_argument("--seconds", type=float, required=True)
    r.add_argument("--execution", default="inline")
    ns = ap.parse_args()
    if ns.cmd == "writer":
        res = child_writer(ns.home, ns.records, ns.start_at, ns.pin)
    elif ns.cmd == "paced-audit":
        res = child_paced_audit(ns.home, ns.rate, ns.seconds)
    else:
        res = child_paced_registry(ns.rate, ns.seconds, ns.execution)
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
