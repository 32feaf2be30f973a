"""Section ``events``: what progress events, subscribers and nested calls cost a call that uses
none of them.

The same contenders (a no-op inline tool through the registry, telemetry off and everything
on) run from two trees of tooltrace, extracted with ``git archive``: the commit that brought
these features (``FEATURE``) and its parent (``--events-baseline``); so the difference is theirs
alone, not that of other changes since. Workers take turns in shuffled, interleaved rounds, so
the machine's drift hits both alike; the figure is the median over rounds of the per-round p50
ratio, and the p50 difference next to tooltrace's own overhead over a bare function call
measured in the same run. Three more rows run this checkout: the same registry with no
subscriber, with an idle one (progress only, and no tool reports any) and with one that gets
every event (what a subscriber costs when there is one).
"""

from __future__ import annotations

import random
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import Table, percentile, scratch
from bench.overhead import ROOT, Worker, bench_only_path

__all__ = ["BASELINE", "FEATURE", "run"]

#: The commit that brought progress events, subscribers and nested calls to the call path.
FEATURE = "473b1a4"
#: Its parent: tooltrace just before them.
BASELINE = "d9c1c0e"
_PAIRS = ("tooltrace, telemetry off (inline)", "tooltrace, everything on (inline)")
_EXTRA = ("tooltrace, telemetry off (inline), idle progress subscriber",
          "tooltrace, telemetry off (inline), subscriber of every event")
_BARE = "bare function call"


@dataclass
class _Row:
    key: str
    samples: list[int] = field(default_factory=list)
    rounds: list[float] = field(default_factory=list)

    def p50(self) -> float:
        return percentile(sorted(self.samples), 50) / 1000.0 if self.samples else float("nan")


def _baseline_tree(rev: str) -> str | None:
    """A directory holding the baseline's ``tooltrace`` package, or None if git cannot give it."""
    d = Path(scratch("tooltrace-bench-baseline-"))
    with tempfile.TemporaryFile() as tar:
        r = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "tooltrace"],
                           stdout=tar, stderr=subprocess.PIPE, check=False)
        if r.returncode != 0:
            return None
        tar.seek(0)
        with tarfile.open(fileobj=tar) as tf:
            tf.extractall(d, filter="data")
    return str(d)


def run(*, rounds: int, calls: int, warmup: int, baseline: str = BASELINE,
        seed: int = 3) -> dict[str, Any]:
    """Measure; print the table; return the figures."""
    trees = {"base": _baseline_tree(baseline), "with": _baseline_tree(FEATURE)}
    if None in trees.values():
        t = Table("Call events and nested calls: cost when unused", ["what", "note"])
        t.add("trees", f"git revisions {baseline} and {FEATURE} are not both in this checkout")
        t.print()
        return {"available": False, "baseline": baseline}
    only_bench = bench_only_path()
    specs: dict[str, tuple[str, str | None, str | None]] = {_BARE: (_BARE, None, None)}
    for name in _PAIRS:
        for side, tree in trees.items():
            specs[f"{side}|{name}"] = (name, f"{tree}:{only_bench}", only_bench)
    for name in (_PAIRS[0], *_EXTRA):
        specs[f"now|{name}"] = (name, None, None)
    workers: dict[str, Worker] = {}
    rows = {k: _Row(k) for k in specs}
    try:
        for key, (name, path, cwd) in specs.items():
            # Python source on both sides (the baseline tree is source): never the compiled
            # wheel the overhead section may use.
            workers[key] = Worker(name, sys.executable, path or str(ROOT), cwd or str(ROOT))
        for key, w in workers.items():
            hello = w.read()
            if not hello.get("ok"):
                raise RuntimeError(f"{key}: {hello.get('reason')}")
            w.send({"n": warmup})
            w.read()
        rng = random.Random(seed)
        for _ in range(rounds):
            order = list(workers)
            rng.shuffle(order)
            for key in order:
                workers[key].send({"n": calls})
                rep = workers[key].read()
                rows[key].samples.extend(rep["samples"])
                rows[key].rounds.append(percentile(sorted(rep["samples"]), 50) / 1000.0)
    finally:
        for w in workers.values():
            w.close()
    return _report(rows, baseline, rounds, calls)


def _round_ratio(a: _Row, b: _Row) -> float:
    rr = sorted(x / y for x, y in zip(a.rounds, b.rounds, strict=False) if y)
    return percentile(rr, 50) if rr else float("nan")


def _report(rows: dict[str, _Row], baseline: str, rounds: int, calls: int) -> dict[str, Any]:
    bare = rows[_BARE].p50()
    t = Table(
        f"Call events and nested calls: cost when unused ({FEATURE} vs its parent {baseline}, "
        f"{rounds} interleaved rounds x {calls} calls)",
        ["contender", "without p50 us", "with p50 us", "with / without (per-round median)",
         "p50 difference us", "tooltrace overhead us", "difference / overhead"],
    )
    out: dict[str, Any] = {"available": True, "baseline": baseline, "feature": FEATURE,
                           "rows": {}}
    for name in _PAIRS:
        now, base = rows[f"with|{name}"], rows[f"base|{name}"]
        diff = now.p50() - base.p50()
        overhead = now.p50() - bare
        ratio = _round_ratio(now, base)
        t.add(name, base.p50(), now.p50(), ratio, diff, overhead,
              diff / overhead if overhead > 0 else None, digits=3)
        out["rows"][name] = {"baseline_p50_us": base.p50(), "now_p50_us": now.p50(),
                             "round_ratio_median": ratio, "diff_us": diff,
                             "overhead_us": overhead}
    plain = rows[f"now|{_PAIRS[0]}"]
    for name in _EXTRA:
        r = rows[f"now|{name}"]
        ratio = _round_ratio(r, plain)
        diff = r.p50() - plain.p50()
        t.add(name + " (this checkout, vs no subscriber)", plain.p50(), r.p50(), ratio, diff,
              plain.p50() - bare, None, digits=3)
        out["rows"][name] = {"now_p50_us": r.p50(), "vs_no_subscriber_ratio": ratio,
                             "diff_us": diff}
    t.print()
    return out
