"""The ``frameworks`` section: one tool call through each agent framework, bare and with
tooltrace's adapter, measured in the same run, with the ratio.

Each framework has its module, ``bench/fw_<name>.py``: ``FRAMEWORK`` (its name), ``measure()``
(median µs per call of each variant, ``{<row>_bare, <row>_adapter, ...}``) and
``table(figures)``; ``python -m bench.fw_<name>`` runs one alone. ``MODULES`` lists them; a
framework that is not installed is reported as such (google-adk and crewai live in venvs of
their own). ``interleaved`` and ``ratio_table`` are the measuring loop and the table they share.

Usage: ``python -m bench --sections frameworks [--quick]``.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench._common import Table

__all__ = ["MODULES", "interleaved", "ratio_table", "run"]

#: The per-framework modules, in the order their tables print.
MODULES: tuple[str, ...] = (
    "bench.fw_langchain",
    "bench.fw_providers",
    "bench.fw_pydantic_ai",
    "bench.fw_openai_agents",
    "bench.fw_llamaindex",
    "bench.fw_claude_agent_sdk",
    "bench.fw_adk",
    "bench.fw_crewai",
)


def interleaved(
    variants: Mapping[str, tuple[Callable[[], Any], int]],
    rounds: int,
    check: Callable[[str, Any], None] | None = None,
) -> dict[str, float]:
    """Median µs per call of each ``{name: (one call, calls per round)}``.

    Rounds interleave the variants, so drift (frequency scaling, a neighbour's load) hits all
    alike; round 0 warms up and hands each variant's result to ``check``.
    """
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(rounds + 1):
        for name, (fn, n) in variants.items():
            if not r:
                out = fn()
                if check is not None:
                    check(name, out)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            if r:
                samples[name].append((time.perf_counter() - t0) / n * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def ratio_table(framework: str, rows: Sequence[tuple[str, str]],
                figures: Mapping[str, float]) -> Table:
    """``rows`` of ``(label, key)``: ``figures[key + "_bare"]`` against ``key + "_adapter"``."""
    t = Table(f"framework: {framework} (µs per call, median of rounds)",
              ["what", "bare", "with adapter", "ratio"])
    for label, key in rows:
        b, a = figures[f"{key}_bare"], figures[f"{key}_adapter"]
        t.add(label, b, a, a / b, digits=1)
    return t


def run(*, quick: bool = False) -> dict[str, Any]:
    """Measure every installed framework; print a table each; return the figures by name."""
    out: dict[str, Any] = {}
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
            figures = mod.measure(rounds=2 if quick else 7)
        except ImportError as exc:  # the framework (or its adapter) is not installed here
            out[name] = {"available": False, "reason": f"{type(exc).__name__}: {exc}"}
            print(f"- {name}: not available ({exc})\n")
            continue
        out[mod.FRAMEWORK] = {"available": True, **figures}
        mod.table(figures).print()
    return out
