"""Section ``tail``: the slowest calls of each contender, and what ran while they waited.

The contenders of the overhead section run in their own worker processes (``bench/_worker.py``
with ``--tail``), in interleaved rounds in a shuffled order. Each worker records when each call
started, every garbage collection (``gc.callbacks``) and every slice of background work (the
sinks' ``BatchWorker`` threads, the audit ticker, the SDK's batch span processor thread; see
``bench/_tailtrace.py``), so for the slowest 0.1% of calls the table says what share of their
time a collection or a background slice was running, and for every call over 1 ms what ran
meanwhile. A background slice's wall time includes any time its thread waited for the
interpreter; its thread CPU time does not.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench._common import Table, percentile
from bench._contenders import CONTENDERS, REFERENCE
from bench.overhead import Worker

__all__ = ["DEFAULT_CONTENDERS", "run"]

#: The contenders the tail section runs unless told otherwise.
DEFAULT_CONTENDERS = (
    REFERENCE,
    "tooltrace, telemetry off (inline)",
    "tooltrace, telemetry off (thread)",
    "tooltrace, everything on (inline)",
    "tooltrace, everything on (thread)",
    "tooltrace, everything on (inline, compaction off)",
    "tooltrace, everything on (thread, compaction off)",
)
#: A call slower than this counts as a long wait.
LONG_NS = 1_000_000


@dataclass
class _Call:
    ns: int
    gc_ns: int
    gen2_ns: int
    bg_ns: int
    bg_cpu: int
    preempted: int

    @property
    def held(self) -> int:
        """Background CPU during a call the kernel never preempted: how long the process's own
        threads kept the caller from the interpreter (0 when the machine took its CPU)."""
        return 0 if self.preempted else self.bg_cpu


@dataclass
class _Tail:
    name: str
    available: bool
    note: str = ""
    calls: list[_Call] = field(default_factory=list)
    # thread -> [slices, total CPU ns, longest wall ns, CPU ns of that one, longest CPU ns]
    threads: dict[str, list[int]] = field(default_factory=dict)
    slice_walls: list[int] = field(default_factory=list)
    slice_cpus: list[int] = field(default_factory=list)
    long_calls: Counter[str] = field(default_factory=Counter)
    long_threads: Counter[str] = field(default_factory=Counter)
    dropped: int | None = None


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _overlaps(starts: list[int], samples: list[int], spans: list[tuple[int, int]]) -> list[int]:
    """For each call (in start order), ns of it covered by the union of ``spans``."""
    u = _union(spans)
    out = [0] * len(starts)
    j = 0
    for i, (s, d) in enumerate(zip(starts, samples, strict=True)):
        e = s + d
        while j < len(u) and u[j][1] <= s:
            j += 1
        k, cov = j, 0
        while k < len(u) and u[k][0] < e:
            cov += min(e, u[k][1]) - max(s, u[k][0])
            k += 1
        out[i] = cov
    return out


def _absorb(t: _Tail, rep: dict[str, Any]) -> None:
    samples, starts = rep["samples"], rep["starts"]
    cols = rep["collections"]
    slices = rep["slices"]
    gc_cov = _overlaps(starts, samples, [(a, b) for _g, a, b in cols])
    gen2_cov = _overlaps(starts, samples, [(a, b) for g, a, b in cols if g == 2])
    bg_cov = _overlaps(starts, samples, [(a, b) for _n, a, b, _c in slices])
    for d, g, g2, b, c, r in zip(samples, gc_cov, gen2_cov, bg_cov, rep["bg_cpu"], rep["preempted"],
                                 strict=True):
        t.calls.append(_Call(d, g, g2, b, c, r))
    for name, a, b, cpu in slices:
        th = t.threads.setdefault(name, [0, 0, 0, 0, 0])
        th[0] += 1
        th[1] += cpu
        if b - a > th[2]:
            th[2], th[3] = b - a, cpu
        th[4] = max(th[4], cpu)
        t.slice_walls.append(b - a)
        t.slice_cpus.append(cpu)
    for s, d, g, g2, b in zip(starts, samples, gc_cov, gen2_cov, bg_cov, strict=True):
        if d <= LONG_NS:
            continue
        what = ("gen-2 collection" if g2 else "young collection" if g else "") + (
            " + background slice" if b and g else "background slice" if b else "")
        t.long_calls[what or "neither"] += 1
        e = s + d
        for name in {n for n, a, bb, _c in slices if a < e and bb > s}:
            t.long_threads[name] += 1
    t.dropped = rep["dropped"]


def run(*, rounds: int, calls: int, warmup: int, only: list[str] | None = None,
        seed: int = 2) -> dict[str, Any]:
    """Measure the tail of each contender; print the tables; return the figures."""
    wanted = [w.strip().lower() for w in only or () if w.strip()]
    names = [n for n in CONTENDERS if n == REFERENCE or (
        any(w in n.lower() for w in wanted) if wanted else n in DEFAULT_CONTENDERS)]
    workers: dict[str, Worker] = {}
    tails: dict[str, _Tail] = {}
    try:
        for n in names:
            workers[n] = Worker(n, sys.executable, tail=True)
        for n in names:
            try:
                hello = workers[n].read()
            except RuntimeError as exc:
                hello = {"ok": False, "reason": str(exc)}
            tails[n] = _Tail(n, bool(hello.get("ok")),
                             str(hello.get("note") or hello.get("reason") or ""))
            if not hello.get("ok"):
                workers.pop(n).close()
        live = [n for n in names if tails[n].available]
        for n in live:
            workers[n].send({"n": warmup})
            workers[n].read()
        rng = random.Random(seed)
        for _ in range(rounds):
            order = live[:]
            rng.shuffle(order)
            for n in order:
                workers[n].send({"n": calls})
                _absorb(tails[n], workers[n].read())
    finally:
        for w in workers.values():
            w.close()
    return _report(tails, names, rounds, calls)


def _share(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


def _report(tails: dict[str, _Tail], names: list[str], rounds: int, calls: int
            ) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": rounds, "calls_per_round": calls, "contenders": {}}
    ref = tails.get(REFERENCE)
    ref_p50 = ref_p99 = ref_p999 = None
    if ref is not None and ref.available and ref.calls:
        ref_ns = sorted(c.ns for c in ref.calls)
        ref_p50, ref_p99 = percentile(ref_ns, 50), percentile(ref_ns, 99)
        ref_p999 = percentile(ref_ns, 99.9)
    t = Table(
        f"Tail latency and what ran during the slowest calls ({rounds} interleaved rounds x "
        f"{calls} calls each)",
        ["contender", "p99 us", "p99.9 us", "max us", "p99.9 / reference p99.9",
         "worst 0.1%: GC share %", "worst 0.1%: gen-2 GC share %",
         "worst 0.1%: background slice share %", "worst 0.1%: background CPU share %",
         "worst 0.1%: preempted by the kernel %", "calls > 1 ms",
         "calls held > 1 ms by background CPU", "calls held > 4 ms", "longest hold us",
         "longest bg slice wall ms", "longest bg slice CPU ms", "dropped"],
    )
    t0 = Table("Tail against the reference (pooled over the rounds)",
               ["contender", "p50 us", "p50 / reference p50", "p99 us", "p99 / reference p99",
                "p99.9 us", "p99.9 / reference p99.9"])
    t2 = Table("Calls over 1 ms: what ran meanwhile",
               ["contender", "calls > 1 ms", "what overlapped them (calls)",
                "background threads seen (calls)"])
    t3 = Table("Background slices during the timed calls",
               ["contender", "thread", "slices", "CPU us per call", "longest wall ms",
                "its CPU ms", "longest CPU ms", "p99 slice wall ms", "p99 slice CPU ms"])
    for n in names:
        tl = tails[n]
        if not tl.available:
            t.add(n, *([None] * 15), f"not available: {tl.note}")
            out["contenders"][n] = {"available": False, "reason": tl.note}
            continue
        by_ns = sorted(tl.calls, key=lambda c: c.ns)
        ns = [c.ns for c in by_ns]
        worst = by_ns[len(by_ns) - max(1, len(by_ns) // 1000):]
        whole = sum(c.ns for c in worst)
        p999 = percentile(ns, 99.9)
        longest = max(tl.threads.values(), key=lambda th: th[2], default=[0, 0, 0, 0, 0])
        long_n = sum(tl.long_calls.values())
        p50, p99 = percentile(ns, 50), percentile(ns, 99)
        fig = {
            "available": True, "calls": len(ns), "p50_us": p50 / 1000, "p99_us": p99 / 1000,
            "p50_over_reference": p50 / ref_p50 if ref_p50 else None,
            "p99_over_reference": p99 / ref_p99 if ref_p99 else None,
            "p999_us": p999 / 1000, "max_us": ns[-1] / 1000,
            "p999_over_reference": p999 / ref_p999 if ref_p999 else None,
            "worst_gc_share_pct": _share(sum(c.gc_ns for c in worst), whole),
            "worst_gen2_share_pct": _share(sum(c.gen2_ns for c in worst), whole),
            "worst_background_share_pct": _share(sum(c.bg_ns for c in worst), whole),
            "worst_background_cpu_share_pct": _share(sum(c.bg_cpu for c in worst), whole),
            "calls_over_1ms": long_n,
            "worst_preempted_pct": _share(sum(1 for c in worst if c.preempted), len(worst)),
            "calls_held_over_1ms": sum(1 for c in tl.calls if c.held > LONG_NS),
            "calls_held_over_4ms": sum(1 for c in tl.calls if c.held > 4 * LONG_NS),
            "longest_hold_us": max(c.held for c in tl.calls) / 1000,
            "long_calls": dict(tl.long_calls),
            "long_threads": dict(tl.long_threads),
            "longest_slice_wall_ms": longest[2] / 1e6,
            "longest_slice_cpu_ms": max((th[4] for th in tl.threads.values()), default=0) / 1e6,
            "threads": {k: {"slices": v[0], "cpu_us_per_call": v[1] / 1000 / max(1, len(ns)),
                            "longest_wall_ms": v[2] / 1e6, "its_cpu_ms": v[3] / 1e6,
                            "longest_cpu_ms": v[4] / 1e6} for k, v in tl.threads.items()},
            "dropped": tl.dropped,
        }
        out["contenders"][n] = fig
        t.add(n, fig["p99_us"], fig["p999_us"], fig["max_us"], fig["p999_over_reference"],
              fig["worst_gc_share_pct"], fig["worst_gen2_share_pct"],
              fig["worst_background_share_pct"], fig["worst_background_cpu_share_pct"],
              fig["worst_preempted_pct"], long_n, fig["calls_held_over_1ms"],
              fig["calls_held_over_4ms"], fig["longest_hold_us"],
              fig["longest_slice_wall_ms"],
              fig["longest_slice_cpu_ms"], tl.dropped, digits=2)
        t0.add(n, fig["p50_us"], fig["p50_over_reference"], fig["p99_us"],
               fig["p99_over_reference"], fig["p999_us"], fig["p999_over_reference"], digits=2)
        what = ", ".join(f"{k} {v}" for k, v in tl.long_calls.most_common()) or "-"
        who = ", ".join(f"{k} {v}" for k, v in tl.long_threads.most_common()) or "-"
        t2.add(n, long_n, what, who)
        walls = sorted(tl.slice_walls)
        for name, th in sorted(tl.threads.items()):
            t3.add(n, name, th[0], th[1] / 1000 / max(1, len(ns)), th[2] / 1e6, th[3] / 1e6,
                   th[4] / 1e6, None, None, digits=2)
        if not walls:
            t3.add(n, "no background slice ran", 0, None, None, None, None, None, None)
        else:
            cpus = sorted(tl.slice_cpus)
            t3.add(n, "all background slices", len(walls), None, walls[-1] / 1e6, None,
                   cpus[-1] / 1e6, percentile(walls, 99) / 1e6, percentile(cpus, 99) / 1e6,
                   digits=2)
            fig["slice_p99_wall_ms"] = percentile(walls, 99) / 1e6
            fig["slice_p99_cpu_ms"] = percentile(cpus, 99) / 1e6
    t.print()
    t0.print()
    t2.print()
    t3.print()
    return out
