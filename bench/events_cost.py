"""Section ``events``: what call events and progress, snapshots before writes, nested calls and
tool groups cost a call that uses none of them, measured on this checkout's code.

For each configuration (telemetry off and everything on, inline and thread) the no-op tool's
registry runs in several variants, each in its own worker (``bench._contenders``): as shipped;
with its call path recompiled and nothing removed; the same without one feature's call-path code
(``bench._stripped`` takes it out: the hub's checks, the snapshot stage's, the parent's
bookkeeping); without all three; and with the tool in a group. Workers take turns in shuffled,
interleaved rounds, so the machine's drift hits them alike, and each round gives each worker a
p50. A feature's cost is the median over rounds of the per-round p50 difference (recompiled
minus recompiled without it), with the interquartile range of those differences as its band.
The run's own noise is the same figure for two contenders running identical code (as shipped
against recompiled, nothing removed: A/A). A difference is "not measurable" when its band
includes 0 or it is no larger than that noise. Next to it: tooltrace's own overhead (as shipped
minus a bare function call, same run), and the same difference in process CPU time per call
(the timed loop's, background threads included), which the time the machine gives to other
processes does not inflate. Two more rows show what a subscriber costs when there is
one (telemetry off, inline): one that only wants progress (no tool reports any) and one that
gets every event.

Every worker runs the Python source of this checkout (the compiled call path cannot be
recompiled without a feature); no git is needed.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from typing import Any

from bench._common import Table, percentile
from bench._contenders import EVENT_CONFIGS, EVENT_VARIANTS, event_contender
from bench._stripped import FEATURES
from bench.overhead import ROOT, Worker

__all__ = ["run"]

_BARE = "bare function call"
_SHIPPED, _CONTROL = "as shipped", "recompiled, nothing removed"
_SUBSCRIBED = {
    "idle progress subscriber": "tooltrace, telemetry off (inline), idle progress subscriber",
    "subscriber of every event":
        "tooltrace, telemetry off (inline), subscriber of every event",
}
_SUB_CONFIG = "telemetry off (inline)"
#: (row label, the contender with it, the one without it) of each configuration's table rows.
_PAIRS = (
    ("A/A: as shipped vs recompiled, nothing removed", _SHIPPED, _CONTROL),
    (FEATURES["events"], _CONTROL, "without call events and progress"),
    (FEATURES["snapshots"], _CONTROL, "without snapshots before writes"),
    (FEATURES["nested"], _CONTROL, "without nested calls"),
    ("all three together", _CONTROL, "without all three"),
    ("tool groups: tool in a group vs none", "tool in a group", _SHIPPED),
)
COLUMNS = ["configuration", "compared", "with p50 us", "without p50 us",
           "difference ns (median of rounds)", "IQR of round differences ns", "A/A noise ns",
           "tooltrace overhead us", "difference / overhead", "verdict",
           "CPU/call difference ns (median; IQR)"]


@dataclass
class _Row:
    key: str
    available: bool = True
    note: str = ""
    samples: list[int] = field(default_factory=list)
    rounds: list[float] = field(default_factory=list)  # per-round p50, ns
    cpu: list[float] = field(default_factory=list)  # per-round process CPU per timed call, ns

    def p50_us(self) -> float:
        return percentile(sorted(self.samples), 50) / 1000.0 if self.samples else float("nan")


def _names(configs: list[str]) -> list[str]:
    names = [_BARE]
    for cfg in configs:
        names += [event_contender(cfg, v) for v in EVENT_VARIANTS]
    if _SUB_CONFIG in configs:
        names += list(_SUBSCRIBED.values())
    return names


def run(*, rounds: int, calls: int, warmup: int, configs: list[str] | None = None,
        seed: int = 3) -> dict[str, Any]:
    """Measure; print the table; return the figures. ``configs``: substrings of the
    configurations' names (all four by default)."""
    wanted = [c.strip().lower() for c in configs or () if c.strip()]
    chosen = [c for c in EVENT_CONFIGS if not wanted or any(w in c for w in wanted)]
    names = _names(chosen)
    workers: dict[str, Worker] = {}
    rows = {n: _Row(n) for n in names}
    try:
        # Python source for all (path given): never the compiled wheel the overhead section
        # may use. Started at once, so their imports overlap.
        for n in names:
            workers[n] = Worker(n, sys.executable, str(ROOT), str(ROOT))
        for n in names:
            try:
                hello = workers[n].read()
            except RuntimeError as exc:
                hello = {"ok": False, "reason": str(exc)}
            if not hello.get("ok"):
                rows[n].available, rows[n].note = False, str(hello.get("reason", "?"))
                workers.pop(n).close()
        for w in workers.values():
            w.send({"n": warmup})
            w.read()
        rng = random.Random(seed)
        for _ in range(rounds):
            order = list(workers)
            rng.shuffle(order)
            for n in order:
                workers[n].send({"n": calls})
                rep = workers[n].read()
                samples = rep["samples"]
                rows[n].samples.extend(samples)
                rows[n].rounds.append(percentile(sorted(samples), 50))
                rows[n].cpu.append(rep["cpu_loop_ns"] / max(1, len(samples)))
    finally:
        for w in workers.values():
            w.close()
    return _report(rows, chosen, rounds, calls)


def _band(with_: _Row, without: _Row, cpu: bool = False) -> tuple[float, float, float] | None:
    """(median, 25th, 75th percentile) of the per-round p50 differences, ns (``cpu``: of the
    per-round CPU per call, which time the machine gave to other processes does not touch)."""
    if not (with_.available and without.available and with_.rounds):
        return None
    a, b = (with_.cpu, without.cpu) if cpu else (with_.rounds, without.rounds)
    d = sorted(x - y for x, y in zip(a, b, strict=True))
    return percentile(d, 50), percentile(d, 25), percentile(d, 75)


def verdict(band: tuple[float, float, float], noise: float) -> str:
    """The verdict on a difference's ``band`` (median, 25th, 75th percentile of the per-round
    differences, ns): not measurable when the band includes 0 or the median is within
    ``noise``."""
    med, lo, hi = band
    if lo <= 0.0 <= hi:
        return "not measurable (its band includes 0)"
    if abs(med) <= noise:
        return f"not measurable (within the A/A noise of {noise:.0f} ns)"
    return f"measurable: {med:+.0f} ns"


def _report(rows: dict[str, _Row], configs: list[str], rounds: int, calls: int
            ) -> dict[str, Any]:
    bare = rows[_BARE]
    t = Table(
        f"Features unused: what they cost a call ({rounds} interleaved rounds x {calls} calls, "
        "Python source)", COLUMNS)
    out: dict[str, Any] = {"rounds": rounds, "calls_per_round": calls, "configs": {}}
    for cfg in configs:
        r = {v: rows[event_contender(cfg, v)] for v in EVENT_VARIANTS}
        shipped = r[_SHIPPED]
        overhead_us = shipped.p50_us() - bare.p50_us()
        aa = _band(r[_SHIPPED], r[_CONTROL])
        noise = max(abs(aa[1]), abs(aa[2])) if aa else float("nan")
        figures: dict[str, Any] = {"overhead_us": overhead_us, "noise_ns": noise, "rows": {}}
        pairs = [(label, r[a], r[b]) for label, a, b in _PAIRS]
        if cfg == _SUB_CONFIG:
            pairs += [(f"{label} vs none", rows[name], shipped)
                      for label, name in _SUBSCRIBED.items()]
        for label, with_, without in pairs:
            band = _band(with_, without)
            if band is None:
                why = with_.note if not with_.available else without.note
                t.add(cfg, label, None, None, None, None, None, None, None,
                      f"not measured: {why}", None)
                figures["rows"][label] = {"available": False, "reason": why}
                continue
            med, lo, hi = band
            is_aa = with_ is shipped and without is r[_CONTROL]
            v = f"the run's noise: {noise:.0f} ns" if is_aa else verdict(band, noise)
            share = med / (overhead_us * 1000.0) if overhead_us > 0 else None
            c_med, c_lo, c_hi = _band(with_, without, cpu=True) or (0.0, 0.0, 0.0)
            t.add(cfg, label, with_.p50_us(), without.p50_us(), f"{med:.0f}",
                  f"{lo:.0f} .. {hi:.0f}", f"{noise:.0f}", overhead_us,
                  None if share is None else f"{share:.3f}", v,
                  f"{c_med:.0f} ({c_lo:.0f} .. {c_hi:.0f})", digits=2)
            figures["rows"][label] = {
                "available": True, "with_p50_us": with_.p50_us(),
                "without_p50_us": without.p50_us(), "diff_ns_median": med, "diff_ns_q25": lo,
                "diff_ns_q75": hi, "share_of_overhead": share, "verdict": v,
                "cpu_diff_ns_median": c_med, "cpu_diff_ns_q25": c_lo, "cpu_diff_ns_q75": c_hi,
                "measurable": v.startswith("measurable")}
        out["configs"][cfg] = figures
    t.print()
    return out
