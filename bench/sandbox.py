"""Section ``sandbox``: what the command sandbox costs one ``run_command``, next to the same call
unsandboxed in the same run.

Contenders, each ``run_command`` of ``true`` through ``ToolRegistry.call`` (telemetry off),
timed in interleaved rounds in one process:

- **off**: ``CommandConfig(sandbox="off")``, the reference: process start, output capture and
  the process-group reaping every command pays;
- **landlock**: the re-exec helper applies a Landlock ruleset, then execs the program;
- **bwrap**: bubblewrap sets up its namespaces (network refused);
- **bwrap, network allowed**: the same without a network namespace of its own;
- **bare subprocess**: ``subprocess.run(["true"])``, for scale.

Reported per contender: median milliseconds per call, the sandbox's share (the call minus the
``off`` call) and the ratio to ``off``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import Table, scratch

__all__ = ["run"]

_REFERENCE = "off (reference)"


def _contenders(tmp: Path) -> tuple[dict[str, Callable[[], object]], list[Any]]:
    from tooltrace import ToolCall, ToolRegistry
    from tooltrace.builtins import CommandConfig, register_command_tools

    ws = tmp / "ws"
    ws.mkdir()
    configs = {
        _REFERENCE: CommandConfig(sandbox="off"),
        "landlock": CommandConfig(sandbox="landlock"),
        "bwrap": CommandConfig(sandbox="bwrap"),
        "bwrap, network allowed": CommandConfig(sandbox="bwrap", network=True),
    }
    fns: dict[str, Callable[[], object]] = {}
    regs: list[Any] = []
    call = ToolCall("run_command", {"argv": ["true"]})
    for label, config in configs.items():
        reg = ToolRegistry(workspace=ws, home=tmp / "home")
        register_command_tools(reg, config)
        regs.append(reg)
        env = reg.call(call)
        if not env.ok or env.data["exit_code"] != 0:
            raise RuntimeError(f"{label}: the bench command did not run: {env.summary}")

        def one(r: Any = reg) -> object:
            return r.call(call)

        fns[label] = one
    fns["bare subprocess"] = lambda: subprocess.run(["true"], check=True)
    return fns, regs


def _rounds(fns: dict[str, Callable[[], object]], rounds: int, n: int) -> dict[str, float]:
    """Median over rounds of each contender's mean milliseconds per call (shuffled order)."""
    rng = random.Random(3)
    per: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm-up
        fn()
    for _ in range(rounds):
        order = list(fns)
        rng.shuffle(order)
        for k in order:
            t0 = time.perf_counter_ns()
            for _i in range(n):
                fns[k]()
            per[k].append((time.perf_counter_ns() - t0) / n / 1e6)
    return {k: statistics.median(v) for k, v in per.items()}


def run(*, rounds: int = 10, calls: int = 20) -> dict[str, Any]:
    """Measure, print the table and return the figures."""
    tmp = Path(scratch("sandbox-"))
    regs: list[Any] = []
    try:
        fns, regs = _contenders(tmp)
        ms = _rounds(fns, rounds, calls)
    finally:
        for r in regs:
            r.shutdown(timeout_s=5.0)
        shutil.rmtree(tmp, ignore_errors=True)
    ref = ms[_REFERENCE]
    t = Table("Command sandbox: run_command of `true`, per call",
              ["contender", "ms per call", "sandbox ms", "call / off"])
    out = []
    for name, value in ms.items():
        share = value - ref if name != "bare subprocess" else None
        t.add(name, value, "-" if share is None else share, value / ref, digits=2)
        out.append({"contender": name, "ms": value, "sandbox_ms": share, "vs_off": value / ref})
    t.print()
    return {"rounds": rounds, "calls": calls, "contenders": out}


def _main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sandbox")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=20)
    ns = ap.parse_args()
    run(rounds=ns.rounds, calls=ns.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
