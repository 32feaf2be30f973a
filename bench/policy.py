"""Section ``policy``: the policy step's cost per call, with a 50-rule TOML policy file and with
the equivalent Cedar policy set, in the same run as a call with no policy and the hand-rolled
reference.

Contenders, each a no-op tool called through ``ToolRegistry.call`` (inline, telemetry off),
timed in interleaved rounds in one process:

- **no policy**: ``Policy([])`` (no rules; modes only);
- **default policy**: the built-in command and private-network rules;
- **50-rule TOML file**: the built-in rules, a ``[paths]`` deny and 48 argument rules
  (``args = { x = "^blocked-<i>$" }`` on ``tool_<i % 8>``);
- **50-rule Cedar set**: the built-in rules and 49 Cedar forbids saying the same
  (``context.args.x == "blocked-<i>"``, ``context.path like "*.env"``);
- **reference**: one OpenTelemetry SDK span with the attributes and step events tooltrace
  records, a counter and a histogram (``bench/_contenders.py``).

Every call has a new argument value (``x = "fine-<n>"``), so no contender answers from a cache
of earlier answers; one more row calls the Cedar set with the same arguments every time, where
the Cedar rule reuses its earlier answer. Reported per contender: median microseconds per call,
the policy step's share (the call minus the no-policy call), ``Policy.evaluate`` alone, and
the ratio to the reference.
"""

from __future__ import annotations

import argparse
import itertools
import random
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from bench._common import Table, scratch

__all__ = ["cedar_fifty", "run", "toml_fifty"]

TOOLS = tuple(f"tool_{i}" for i in range(8))
_ARGS = {"x": "fine"}
_REPEATED = "50-rule Cedar set, same arguments each call"


def toml_fifty() -> str:
    """The 50-rule TOML policy file."""
    rules = "".join(
        f'\n[[rules]]\nid = "r{i}"\ntools = ["tool_{i % 8}"]\nargs = {{ x = "^blocked-{i}$" }}\n'
        for i in range(48))
    return f"tools = {list(TOOLS)!r}\n[paths]\ndeny = ['**/.env']\n" + rules


def cedar_fifty() -> str:
    """The same rules as Cedar policies."""
    out = ['@id("env")\nforbid (principal, action, resource)\n'
           'when { context has path && context.path like "*.env" };\n']
    out += [f'@id("r{i}")\nforbid (principal, action == Tooltrace::Action::"tool_{i % 8}",'
            f' resource)\nwhen {{ context.args has x && context.args.x == "blocked-{i}" }};\n'
            for i in range(48)]
    return "\n".join(out)


def _definitions() -> dict[str, Any]:
    from tooltrace import Execution, ToolDefinition

    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    return {n: ToolDefinition(name=n, description="bench tool", parameters=schema,
                              execution=Execution.INLINE) for n in TOOLS}


def _policies(tmp: Path) -> dict[str, Any]:
    from tooltrace.policy import Policy
    from tooltrace.policy.file import load_policy

    defs = _definitions()
    (tmp / "fifty.toml").write_text(toml_fifty())
    (tmp / "fifty.cedar").write_text(cedar_fifty())
    toml = load_policy(tmp / "fifty.toml", tools=defs).compiled.policy
    cedar = load_policy(tmp / "fifty.cedar", tools=defs).compiled.policy
    return {"no policy": Policy([]), "default policy": Policy(), "50-rule TOML file": toml,
            "50-rule Cedar set": cedar}


def _contenders(tmp: Path) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    from bench._contenders import REFERENCE, build
    from tooltrace import ToolCall, ToolRegistry
    from tooltrace.policy import PolicyRequest

    defs = _definitions()
    tool = defs["tool_3"]
    n = itertools.count()
    calls: dict[str, Any] = {}
    evaluate: dict[str, Any] = {}
    regs = []
    policies = _policies(tmp)
    policies[_REPEATED] = policies["50-rule Cedar set"]
    for label, policy in policies.items():
        reg = ToolRegistry(workspace=tmp, home=tmp / "home", policy=policy)
        reg.register(tool, lambda x: x)
        regs.append(reg)
        env = reg.call(ToolCall("tool_3", _ARGS))
        if not env.ok:
            raise RuntimeError(f"{label}: the bench call was refused: {env.summary}")
        if label == _REPEATED:
            same = ToolCall("tool_3", _ARGS)
            req = PolicyRequest(tool, _ARGS, "default", "run", "call")
            calls[label] = lambda r=reg, c=same: r.call(c)
            evaluate[label] = lambda p=policy, q=req: p.evaluate(q)
            continue
        calls[label] = lambda r=reg: r.call(ToolCall("tool_3", {"x": f"fine-{next(n)}"}))
        evaluate[label] = lambda p=policy: p.evaluate(PolicyRequest(
            tool, {"x": f"fine-{next(n)}"}, "default", "run", "call"))
    ref = build(REFERENCE)
    calls["reference: SDK span + counter + histogram"] = ref.call
    return calls, evaluate, [*regs, ref]


def _rounds(fns: dict[str, Any], rounds: int, n: int, seed: int) -> dict[str, float]:
    """Median over rounds of each function's mean microseconds per call (shuffled order)."""
    rng = random.Random(seed)
    per: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm-up
        for _ in range(max(1, n // 5)):
            fn()
    for _ in range(rounds):
        order = list(fns)
        rng.shuffle(order)
        for k in order:
            fn = fns[k]
            t0 = time.perf_counter_ns()
            for _i in range(n):
                fn()
            per[k].append((time.perf_counter_ns() - t0) / n / 1000)
    return {k: statistics.median(v) for k, v in per.items()}


def run(*, rounds: int = 15, calls: int = 2000) -> dict[str, Any]:
    """Measure, print the table and return the figures."""
    tmp = Path(scratch("policy-"))
    closers: list[Any] = []
    try:
        fns, evals, closers = _contenders(tmp)
        call_us = _rounds(fns, rounds, calls, seed=1)
        eval_us = _rounds(evals, rounds, calls * 2, seed=2)
    finally:
        for c in closers:
            (getattr(c, "shutdown", None) or c.close)()
        shutil.rmtree(tmp, ignore_errors=True)
    ref_name = next(k for k in call_us if k.startswith("reference"))
    ref, bare = call_us[ref_name], call_us["no policy"]
    t = Table("Policy step: no policy, default, a 50-rule TOML file, the same rules in Cedar",
              ["contender", "call us", "policy step us", "evaluate us", "call / reference"])
    out = []
    for name, us in call_us.items():
        ev = evals.get(name)
        step = us - bare if ev is not None else None
        evaluate = eval_us.get(name)
        t.add(name, us, "-" if step is None else step, "-" if evaluate is None else evaluate,
              us / ref, digits=2)
        out.append({"contender": name, "call_us": us, "policy_step_us": step,
                    "evaluate_us": evaluate, "vs_reference": us / ref})
    t.print()
    return {"rounds": rounds, "calls": calls, "contenders": out}


def _main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.policy")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ns = ap.parse_args()
    run(rounds=ns.rounds, calls=ns.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
