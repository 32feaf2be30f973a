"""Section ``startup``: what a process pays before its first call.

Every figure is taken in a fresh interpreter (``python -c``), so nothing is warm but the files
the operating system caches; the probes run interleaved, one of each per round, and each row
is the median over the rounds:

- ``import tooltrace``: the import statement alone, timed inside the child;
- the libraries the default sinks use: importing exactly the third-party modules that
  ``create_registry`` loads beyond those a bare ``ToolRegistry`` with the built-in tools loads
  (found by a calibration child), the floor ``create_registry`` cannot go below;
- ``create_registry`` + ``shutdown``: after ``import tooltrace``, with a fresh home each time
  (built-in tools, metrics, logs to /dev/null, the audit trail);
- registering N tools (10, 100, 1,000): after ``import tooltrace`` and ``ToolRegistry()``,
  ``@tool`` on N typed functions (three shapes of schema) and ``register`` for each;
- the first and the second call of one of those tools: the first compiles its validator.

The last two run in two configurations: the sinks with no OTLP endpoint (metrics, logs, audit)
and every default sink (an ``OTEL_EXPORTER_OTLP_ENDPOINT`` on a closed loopback port adds the
span sink and its exporter; nothing is exported, so nothing is sent).

The targets: registering 100 tools costs at most 1.5x ``import tooltrace``, and
``create_registry`` + ``shutdown`` at most 1.5x importing the sinks' libraries, both as whole
processes (interpreter start to exit, what a short-lived agent process pays) and in process.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from bench._common import Table, scratch

__all__ = ["CONFIGS", "run"]

#: The sink configurations ``create_registry`` is measured in, with the environment each adds.
#: The endpoint is a closed loopback port: a registry that makes no call exports nothing.
CONFIGS: dict[str, dict[str, str]] = {
    "metrics, logs, audit": {},
    "every default sink (spans too)": {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_TRACES_SAMPLER": "always_on"},
}

_IMPORT = """
import time
t0 = time.perf_counter()
import tooltrace
print(time.perf_counter() - t0)
"""

_CALIBRATE = """
import json, sys
import tooltrace
from tooltrace import ToolRegistry
from tooltrace.builtins import register_builtins

def third_party():
    # Not the shims a compiled extension registers for itself (_cython_3_3_1): no spec, and
    # importing its parent brings it anyway.
    return {m for m, mod in list(sys.modules.items())
            if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "tooltrace"
            and not m.startswith("_") and getattr(mod, "__spec__", None) is not None}

# What the registry and the built-ins load with no sink; then what the default sinks add.
register_builtins(ToolRegistry(workspace=sys.argv[1])).shutdown()
core = third_party()
registry = tooltrace.create_registry(workspace=sys.argv[1], home=sys.argv[2],
                                     log_stream=open("/dev/null", "w"))
registry.shutdown()
print(json.dumps(sorted(third_party() - core)))
"""

_LIBRARIES = """
import importlib, json, sys, time
modules = json.loads(sys.argv[1])
t0 = time.perf_counter()
for m in modules:
    importlib.import_module(m)
print(time.perf_counter() - t0)
"""

_CREATE = """
import sys, time
import tooltrace
log = open("/dev/null", "w")
t0 = time.perf_counter()
registry = tooltrace.create_registry(workspace=sys.argv[1], home=sys.argv[2], log_stream=log)
registry.shutdown()
print(time.perf_counter() - t0)
"""

_REGISTER = """
import json, sys, time
from typing import Annotated, Literal
import tooltrace
from tooltrace import CallContext, ToolCall, ToolRegistry, tool

n = int(sys.argv[2])
registry = ToolRegistry(workspace=sys.argv[1])

def make(i):
    shape = i % 3
    if shape == 0:
        def fn(ctx: CallContext, path: str, limit: int = 100) -> str:
            return path
    elif shape == 1:
        def fn(query: Annotated[str, "what to look for"], mode: Literal["fast", "deep"] = "fast",
               tags: list[str] | None = None) -> str:
            return query
    else:
        def fn(a: float, b: float, note: str | None = None) -> float:
            return a + b
    fn.__name__ = f"tool_{i}"
    fn.__doc__ = f"Tool number {i}: does one small thing."
    return fn

functions = [make(i) for i in range(n)]
t0 = time.perf_counter()
for fn in functions:
    registry.register(tool(fn))
elapsed = time.perf_counter() - t0
t1 = time.perf_counter()
first = registry.call(ToolCall("tool_1", {"query": "q", "tags": ["x"]}))
t2 = time.perf_counter()
second = registry.call(ToolCall("tool_1", {"query": "r", "tags": ["y"]}))
t3 = time.perf_counter()
assert first.status == "ok" and second.status == "ok", (first.summary, second.summary)
registry.shutdown()
print(json.dumps([elapsed, t2 - t1, t3 - t2]))
"""


def _child(code: str, *args: str, pycache: Path,
           extra_env: dict[str, str] | None = None) -> tuple[Any, float]:
    """What the probe printed, and the whole process's wall time (start to exit).

    The child runs in the scratch directory beside ``pycache``, not in the checkout: ``python
    -c`` puts its working directory first on ``sys.path``, where the checkout's sources would
    shadow the tooltrace the interpreter has installed (a wheel, say)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OTEL_") and k != "TOOLTRACE_HOME"}
    env.update(extra_env or {})
    # Bytecode as an installed package has it (pip compiles it at install): written once, by
    # the warm-up round, to a cache of this run's own, and read by every later child.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=pycache.parent,
                       capture_output=True, text=True, timeout=300, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"startup probe failed: {p.stderr[-1500:]}")
    return json.loads(p.stdout.strip().splitlines()[-1]), wall


def run(rounds: int = 15, sizes: tuple[int, ...] = (10, 100, 1000)) -> dict[str, Any]:
    """Measure the startup probes over ``rounds`` interleaved rounds (after one warm-up round
    that is not counted); print the table."""
    base = Path(scratch("tooltrace-bench-startup-"))
    workspace = base / "ws"
    workspace.mkdir()
    pycache = base / "pycache"
    modules = {c: _child(_CALIBRATE, str(workspace), str(base / "calibrate-home"),
                         pycache=pycache, extra_env=env)[0] for c, env in CONFIGS.items()}
    configs = list(CONFIGS)
    probes = ["import", "python"] + [f"{k} {c}" for c in configs for k in ("libraries", "create")]
    for n in sizes:
        probes += [f"register {n}", f"first call {n}", f"second call {n}"]
    samples: dict[str, list[float]] = {k: [] for k in probes}
    walls: dict[str, list[float]] = {k: [] for k in probes if not k.startswith(
        ("register", "first", "second"))}
    for r in range(rounds + 1):
        got: dict[str, float] = {}
        wall: dict[str, float] = {}
        got["import"], wall["import"] = _child(_IMPORT, pycache=pycache)
        got["python"], wall["python"] = _child("print(0)", pycache=pycache)
        for c, env in CONFIGS.items():
            got[f"libraries {c}"], wall[f"libraries {c}"] = _child(
                _LIBRARIES, json.dumps(modules[c]), pycache=pycache, extra_env=env)
            got[f"create {c}"], wall[f"create {c}"] = _child(
                _CREATE, str(workspace), str(base / f"home-{r}-{configs.index(c)}"),
                pycache=pycache, extra_env=env)
        for n in sizes:
            (reg, first, second), _ = _child(_REGISTER, str(workspace), str(n), pycache=pycache)
            got.update({f"register {n}": reg, f"first call {n}": first,
                        f"second call {n}": second})
        if r > 0:  # round 0 warms the bytecode cache and the page cache
            for k, v in got.items():
                samples[k].append(v)
            for k, v in wall.items():
                walls[k].append(v)
    med = {k: statistics.median(v) * 1000.0 for k, v in samples.items() if k != "python"}
    proc = {k: statistics.median(v) * 1000.0 for k, v in walls.items()}
    # The two probes of a ratio run next to each other in every round: the median of the
    # per-round ratios is steadier than the ratio of medians on a host whose speed drifts.
    ratios = {c: {"process": statistics.median(
        a / b for a, b in zip(walls[f"create {c}"], walls[f"libraries {c}"], strict=True)),
        "in_process": statistics.median(
        a / b for a, b in zip(samples[f"create {c}"], samples[f"libraries {c}"], strict=True))}
        for c in configs}
    if "register 100" in samples:
        ratios["register 100"] = {"in_process": statistics.median(
            a / b for a, b in zip(samples["register 100"], samples["import"], strict=True))}
    imp = med["import"]
    t = Table("Startup: import, create_registry, registering tools",
              ["what", "in process ms", "per tool us", "/ import tooltrace",
               "/ its sinks' libraries", "whole process ms",
               "whole process / its sinks' libraries"])
    t.add("python -c 'print(0)' (the interpreter alone)", "-", "-", "-", "-", proc["python"],
          "-", digits=2)
    t.add("import tooltrace", imp, "-", 1.0, "-", proc["import"], "-", digits=2)
    for c in configs:
        libs, create = med[f"libraries {c}"], med[f"create {c}"]
        plibs, pcreate = proc[f"libraries {c}"], proc[f"create {c}"]
        t.add(f"{c}: import the sinks' libraries ({len(modules[c])} modules)", libs, "-",
              libs / imp, 1.0, plibs, 1.0, digits=2)
        t.add(f"{c}: import tooltrace, create_registry + shutdown (in process: the last two)",
              create, "-", create / imp, create / libs, pcreate, pcreate / plibs, digits=2)
    for n in sizes:
        reg = med[f"register {n}"]
        t.add(f"@tool + register, {n:,} tools", reg, reg * 1000.0 / n, reg / imp, "-", "-",
              "-", digits=2)
    big = max(sizes)
    t.add(f"first call of a registered tool (compiles its validator; of {big:,})",
          med[f"first call {big}"], "-", "-", "-", "-", "-", digits=2)
    t.add(f"second call of that tool (of {big:,})", med[f"second call {big}"], "-", "-", "-",
          "-", "-", digits=2)
    t.print()
    return {"rounds": rounds, "sizes": list(sizes), "configs": configs, "sink_modules": modules,
            "median_ms": med, "process_median_ms": proc, "round_ratio_median": ratios,
            "samples_s": samples,
            "process_samples_s": walls}
