"""Section ``overhead``: per-call cost around a no-op tool, side by side with the reference.

Every contender runs in its own worker process (``bench/_worker.py``); the coordinator asks
them for rounds of N timed calls in a shuffled order each round, so slow drifts of the machine
hit all of them alike. Only one worker runs at a time. After each round the worker flushes its
deferred work (spans, log lines, audit records) outside the timed loop; the CPU that flush and
the background threads burn is counted in "CPU/call", which is process CPU time over the round
divided by N.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import Table, percentile, scratch
from bench._contenders import CONTENDERS, OPT_IN, PEERS, REFERENCE

__all__ = ["BASELINE_MARK", "Result", "Worker", "baseline_tree", "bench_only_path", "run"]

ROOT = Path(__file__).resolve().parent.parent
#: Appended to a contender's name for its run from the ``--baseline`` checkout.
BASELINE_MARK = " [baseline]"


@dataclass
class Result:
    """What one contender measured over all rounds."""

    name: str
    available: bool
    note: str = ""
    samples: list[int] = field(default_factory=list)
    cpu_total_ns: int = 0
    cpu_loop_ns: int = 0
    wall_ns: int = 0
    calls: int = 0
    dropped: int | None = None
    exported: int | None = None
    round_p50: list[float] = field(default_factory=list)
    tooltrace: str | None = None

    def p(self, q: float) -> float:
        """Percentile of per-call time, microseconds."""
        return percentile(self.sorted, q) / 1000.0

    @property
    def sorted(self) -> list[int]:
        s = getattr(self, "_sorted", None)
        if s is None or len(s) != len(self.samples):
            s = sorted(self.samples)
            self._sorted = s
        return s

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures."""
        if not self.available:
            return {"name": self.name, "available": False, "reason": self.note}
        n = max(1, self.calls)
        return {
            "name": self.name, "available": True, "note": self.note, "calls": self.calls,
            "p50_us": self.p(50), "p99_us": self.p(99), "p999_us": self.p(99.9),
            "cpu_per_call_us": self.cpu_total_ns / n / 1000.0,
            "cpu_call_loop_per_call_us": self.cpu_loop_ns / n / 1000.0,
            "calls_per_s": self.calls / (self.wall_ns / 1e9) if self.wall_ns else None,
            "dropped": self.dropped, "exported_spans": self.exported,
            "round_p50_us": self.round_p50, "tooltrace": self.tooltrace,
        }


def baseline_tree(spec: str) -> Path:
    """The tree a ``--baseline`` names: a directory holding ``tooltrace/`` as it is, else a
    git revision of this repository, whose ``tooltrace/`` is extracted into the run's scratch
    space (``git archive``: no worktree is registered, nothing in the checkout changes)."""
    given = Path(spec)
    if given.is_dir():
        # Without one, the workers would silently import this checkout's tooltrace instead.
        if not (given / "tooltrace" / "__init__.py").is_file():
            raise SystemExit(f"--baseline {spec}: no tooltrace/ in it (a checkout's root?)")
        return given.resolve()
    git = ["git", "-C", str(ROOT)]
    rev = subprocess.run([*git, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}"],
                         capture_output=True, text=True)
    if rev.returncode != 0:
        raise SystemExit(f"--baseline {spec}: neither a directory nor a git revision here")
    tree = Path(scratch("tooltrace-bench-baseline-"))
    archive = subprocess.run([*git, "archive", "--format=tar", rev.stdout.strip(), "tooltrace"],
                             capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def bench_only_path() -> str:
    """A directory holding only ``bench`` (a link to this checkout's): as a worker's working
    directory it runs this checkout's contenders against the ``tooltrace`` of another tree
    on ``PYTHONPATH`` (a ``--baseline``), so both trees are driven by the same code."""
    d = Path(scratch("tooltrace-bench-path-"))  # removed with the run's scratch directory
    (d / "bench").symlink_to(ROOT / "bench", target_is_directory=True)
    return str(d)


class Worker:
    """One contender's process (``bench/_worker.py``), running this checkout's ``tooltrace``
    or, with ``tree``, the ``tooltrace`` of that tree (a ``--baseline``) driven by this
    checkout's contenders; ``tail`` starts it in the tail section's recording mode."""

    def __init__(self, name: str, python: str, tree: str | None = None, *,
                 tail: bool = False) -> None:
        self.name = name
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        env = dict(os.environ)
        if tree is None:
            cwd = path = str(ROOT)
        else:
            # ``python -m`` puts the working directory first on ``sys.path``: there, only
            # ``bench`` is found; ``tooltrace`` comes from the tree.
            cwd = bench_only_path()
            path = cwd + os.pathsep + tree
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
        # Peers must not reach any network: no endpoints, no API keys, no SDK telemetry.
        for k in list(env):
            if k.startswith(("OTEL_EXPORTER_OTLP", "TRACELOOP_", "LOGFIRE_")):
                del env[k]
        env["OTEL_SDK_DISABLED"] = "false"
        self.proc = subprocess.Popen(
            [python, "-m", "bench._worker", name, *(["--tail"] if tail else [])], cwd=cwd,
            env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
        )

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            self.log.seek(0)
            tail = self.log.read().decode(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"worker exited ({self.proc.returncode}): {' / '.join(tail)}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send({"close": True})
                self.proc.wait(30)
        except Exception:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


def run(
    *, rounds: int, calls: int, warmup: int, python: str | None = None,
    only: list[str] | None = None, seed: int = 1, baseline: Path | None = None,
) -> dict[str, Any]:
    """Measure every contender; print the table; return the figures. ``baseline``: another
    tree (``baseline_tree``) whose tooltrace the same contenders also drive, beside this
    checkout's, so a change is measured against what it changes in the same rounds."""
    # Names hold commas, so a selection is a list of case-insensitive substrings of them.
    wanted = [w.strip().lower() for w in only or () if w.strip()]
    names = [
        n for n in CONTENDERS
        if n == REFERENCE or (any(w in n.lower() for w in wanted) if wanted
                              else n not in OPT_IN)
    ]
    py = python or sys.executable
    workers: dict[str, Worker] = {}
    results: dict[str, Result] = {}
    # Worker name -> the contender it runs (a baseline's runs the same one from another tree).
    runs = {n: n for n in names}
    if baseline is not None:
        tree = str(Path(baseline).resolve())
        for n in [n for n in names if n.startswith("tooltrace")]:
            runs[n + BASELINE_MARK] = n
            names.insert(names.index(n) + 1, n + BASELINE_MARK)
    try:
        # Start all at once (imports overlap), then read each one's ready line.
        for n in names:
            if runs[n] != n:
                workers[n] = Worker(runs[n], py, tree)
            else:
                workers[n] = Worker(n, py)
        for n in names:
            try:
                hello = workers[n].read()
            except RuntimeError as exc:
                hello = {"ok": False, "reason": str(exc)}
            if hello.get("ok"):
                results[n] = Result(n, True, hello.get("note", ""),
                                    tooltrace=hello.get("tooltrace"))
            else:
                results[n] = Result(n, False, str(hello.get("reason", "?")))
                workers.pop(n).close()
        live = [n for n in names if results[n].available]
        for n in live:
            workers[n].send({"n": warmup})
            workers[n].read()
        rng = random.Random(seed)
        for _ in range(rounds):
            order = live[:]
            rng.shuffle(order)
            for n in order:
                w = workers[n]
                w.send({"n": calls})
                rep = w.read()
                r = results[n]
                r.samples.extend(rep["samples"])
                r.round_p50.append(percentile(sorted(rep["samples"]), 50) / 1000.0)
                r.cpu_total_ns += rep["cpu_total_ns"]
                r.cpu_loop_ns += rep["cpu_loop_ns"]
                r.wall_ns += rep["wall_ns"]
                r.calls += calls
                r.dropped = rep["dropped"]
                r.exported = rep["exported"]
    finally:
        for w in workers.values():
            w.close()
    return _report(results, names, rounds, calls)


def _report(results: dict[str, Result], names: list[str], rounds: int, calls: int
            ) -> dict[str, Any]:
    ref = results.get(REFERENCE)
    bare = results.get("bare function call")
    ref_p50 = ref.p(50) if ref and ref.available else None
    ref_cpu = ref.cpu_total_ns / ref.calls if ref and ref.available and ref.calls else None
    bare_p50 = bare.p(50) if bare and bare.available else 0.0
    t = Table(
        f"Per-call cost around a no-op tool ({rounds} interleaved rounds x {calls} calls each)",
        ["contender", "p50 us", "p99 us", "p99.9 us", "p50 overhead us", "p50 / reference",
         "per-round p50 / reference (median)", "CPU/call us", "CPU / reference", "notes"],
    )
    out: dict[str, Any] = {"rounds": rounds, "calls_per_round": calls, "contenders": {}}
    for n in names:
        r = results[n]
        out["contenders"][n] = r.summary()
        if not r.available:
            t.add(n, None, None, None, None, None, None, None, None, f"not available: {r.note}")
            continue
        p50 = r.p(50)
        cpu = r.cpu_total_ns / max(1, r.calls)
        ratio = p50 / ref_p50 if ref_p50 else None
        cratio = cpu / ref_cpu if ref_cpu else None
        # Per-round ratios against the reference (each round runs every contender back to
        # back): robust to the machine's speed drifting between rounds.
        round_ratio: float | None = None
        if ref and ref.available and ref.round_p50 and n != REFERENCE:
            rr = sorted(a / b for a, b in zip(r.round_p50, ref.round_p50, strict=False) if b)
            if rr:
                round_ratio = percentile(rr, 50)
                out["contenders"][n]["round_ratio_median"] = round_ratio
        elif n == REFERENCE:
            round_ratio = 1.0
        notes = r.note
        if r.dropped:
            notes += f"; {r.dropped} telemetry records dropped"
        if r.exported is not None:
            notes += f"; {r.exported} spans exported"
        t.add(n, p50, r.p(99), r.p(99.9), p50 - bare_p50, ratio, round_ratio, cpu / 1000.0,
              cratio, notes, digits=2)
    t.print()
    out["reference_p50_us"] = ref_p50
    return out


def peers_available(result: dict[str, Any]) -> list[str]:
    """Names of the peers that ran."""
    c = result.get("contenders", {})
    return [p for p in PEERS if c.get(p, {}).get("available")]
