"""Section ``whatif``: replay a million recorded calls against a candidate policy, and the
policy step's cost with a 50-rule policy file.

1. What-if: the trail is generated as ``autopsy`` does (compacted Parquet, 6 steps a call,
   principals on every call), then ``tooltrace policy test``'s path runs in process: open the
   store, group alike calls, decide each group again with a candidate file (a principal rule,
   an argument rule and a per-run limit) and count the limit's calls in start order. In the
   same run, the floor: DuckDB alone reading every call with its last policy step, each
   opening the store afresh. The two run in turns (``--repeats``, 3): the medians of their
   wall times and of their process CPU times (on a host other work keeps busy, CPU time moves
   less). Reported: calls/s, seconds per million, the ratio to the floor and the load average
   (one minute) before and after.
2. Policy step: ``Policy.evaluate`` per call, and a whole ``registry.call`` of a no-op tool
   (telemetry off, inline), with the default policy and with a 50-rule file compiled from TOML,
   in the same run (the default policy is the reference).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from bench._common import Table, scratch

__all__ = ["CANDIDATE", "TOOLS", "replay_trail", "run"]

TOOLS = tuple(f"tool_{i}" for i in range(8))
#: The candidate policy the trail is replayed against.
CANDIDATE = f"""
tools = {list(TOOLS)!r}

[[rules]]
id = "interns-no-tool-0-or-2"
tools = ["tool_0", "tool_2"]
principal = {{ roles = ["intern"] }}

[[rules]]
id = "no-value-7"
tools = ["tool_5"]
args = {{ x = "^value 7$" }}

[[limits]]
id = "calls-per-run"
per = "run"
max_calls = 900
"""


def _definitions() -> dict[str, Any]:
    from tooltrace import ToolDefinition

    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    return {n: ToolDefinition(name=n, description="bench tool", parameters=schema)
            for n in TOOLS}


def replay_trail(home: Path, policy_file: Path) -> tuple[dict[str, Any], float]:
    """``tooltrace policy test``'s work in process: (its JSON report, seconds)."""
    from tooltrace.audit import AuditStore
    from tooltrace.policy.file import load_policy, replay

    t0 = time.perf_counter()
    tools = _definitions()
    pf = load_policy(policy_file, tools=tools)
    store = AuditStore(home)
    try:
        result = replay(store.con, pf.compiled, tools)
    finally:
        store.close()
    return result.to_dict(), time.perf_counter() - t0


#: The floor: DuckDB reading every call with its last policy step, nothing else.
_FLOOR_QUERY = """
SELECT count(*), count(s.p) FROM tool_calls c
LEFT JOIN (SELECT call_id, arg_max(struct_pack(decider, decision, detail), seq) AS p
           FROM tool_call_steps WHERE step = 'policy' GROUP BY call_id) s
  ON s.call_id = c.call_id
"""


def _floor(home: Path) -> float:
    from tooltrace.audit import AuditStore

    t0 = time.perf_counter()
    store = AuditStore(home)
    try:
        store.con.execute(_FLOOR_QUERY).fetchall()
    finally:
        store.close()
    return time.perf_counter() - t0


def _fifty_rules(path: Path) -> Path:
    rules = "".join(
        f'\n[[rules]]\nid = "r{i}"\ntools = ["tool_{i % 8}"]\nargs = {{ x = "^blocked-{i}$" }}\n'
        for i in range(48))
    path.write_text(f"tools = {list(TOOLS)!r}\n[paths]\ndeny = ['**/.env']\n" + rules)
    return path


def _per_call_us(fn: Any, n: int, rounds: int = 5) -> float:
    meds = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _i in range(n):
            fn()
        meds.append((time.perf_counter_ns() - t0) / n / 1000)
    return statistics.median(meds)


def _policy_step(tmp: Path, n: int) -> list[tuple[str, int, float, float]]:
    from tooltrace import ToolCall, ToolRegistry
    from tooltrace.policy import Policy, PolicyRequest
    from tooltrace.policy.file import load_policy

    pf = load_policy(_fifty_rules(tmp / "fifty.toml"), tools=TOOLS)
    defs = _definitions()
    req = PolicyRequest(defs["tool_3"], {"x": "fine"}, "default", "run", "call")
    out = []
    for label, policy in (("default policy", Policy()), ("50-rule file", pf.compiled.policy)):
        ev = _per_call_us(lambda p=policy: p.evaluate(req), n)
        reg = ToolRegistry(workspace=tmp, home=tmp / "home", policy=policy)
        reg.register(defs["tool_3"], lambda x: x)
        call = ToolCall("tool_3", {"x": "fine"})
        full = _per_call_us(lambda r=reg, c=call: r.call(c), max(1, n // 10))
        reg.shutdown()
        out.append((label, len(policy.rules), ev, full))
    return out


def run(*, calls: int, step_calls: int = 20_000, repeats: int = 3) -> dict[str, Any]:
    """Both measurements; print their tables and return the figures."""
    from bench.autopsy import generate

    tmp = Path(scratch("whatif-"))
    try:
        home = tmp / "home"
        gen = generate(home, calls)
        cand = tmp / "candidate.toml"
        cand.write_text(CANDIDATE)
        load = os.getloadavg()[0]
        walls: dict[str, list[float]] = {"whatif": [], "floor": []}
        cpus: dict[str, list[float]] = {"whatif": [], "floor": []}
        for _ in range(repeats):
            c0 = time.process_time()
            walls["floor"].append(_floor(home))
            c1 = time.process_time()
            report, s = replay_trail(home, cand)
            walls["whatif"].append(s)
            cpus["floor"].append(c1 - c0)
            cpus["whatif"].append(time.process_time() - c1)
        seconds, floor = statistics.median(walls["whatif"]), statistics.median(walls["floor"])
        cpu, floor_cpu = statistics.median(cpus["whatif"]), statistics.median(cpus["floor"])
        t = Table(f"What-if: replay recorded calls against a candidate policy (median of "
                  f"{repeats}, in turns)",
                  ["path", "calls", "seconds", "CPU s", "calls/s", "s per million", "changed"])
        t.add("grouped (tooltrace policy test)", calls, seconds, cpu, calls / seconds,
              seconds * 1e6 / calls, report["changed"])
        t.add("DuckDB floor: read calls + policy step", calls, floor, floor_cpu,
              calls / floor, floor * 1e6 / calls, "")
        t.print()
        print(f"generated {calls} calls in {gen['seconds']:.1f} s; grouped takes"
              f" {seconds / floor:.2f}x the floor's time ({cpu / floor_cpu:.2f}x its CPU time);"
              f" undecidable {report['undecidable']}; load average {load:.1f} before,"
              f" {os.getloadavg()[0]:.1f} after")
        steps = _policy_step(tmp, step_calls)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    t2 = Table("Policy step: default policy vs a 50-rule policy file",
               ["policy", "rules", "evaluate us", "registry.call us", "evaluate / default"])
    base = steps[0][2]
    for label, n_rules, ev, full in steps:
        t2.add(label, n_rules, ev, full, ev / base, digits=2)
    t2.print()
    return {"calls": calls, "replay_seconds": seconds, "report": report,
            "floor_seconds": floor, "replay_cpu_seconds": cpu, "floor_cpu_seconds": floor_cpu,
            "repeats": repeats, "replay_seconds_all": walls["whatif"],
            "replay_cpu_seconds_all": cpus["whatif"], "floor_cpu_seconds_all": cpus["floor"],
            "floor_seconds_all": walls["floor"],
            "policy_step": [{"policy": s[0], "rules": s[1], "evaluate_us": s[2],
                             "call_us": s[3]} for s in steps]}


def _main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.whatif")
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--step-calls", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ns = ap.parse_args()
    run(calls=ns.calls, step_calls=ns.step_calls, repeats=ns.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
