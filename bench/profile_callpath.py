"""Section ``profile``: where the microseconds of one registry call go (cProfile).

Profiles ``ToolRegistry.call`` of the no-op tool with telemetry off (no sinks, no tracer), the
path whose target is <= 10 us, and prints the functions with the most own time, as
microseconds per call. cProfile's own cost inflates every figure (roughly 2-3x here); read
the shares, not the absolute numbers.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from pathlib import Path
from typing import Any

from bench._common import Table, scratch
from bench._contenders import DESCRIPTION, TOOL, noop

__all__ = ["run"]


def run(*, calls: int, execution: str = "inline", top: int = 25, full: bool = False
        ) -> dict[str, Any]:
    """Profile ``calls`` registry calls; print the hottest functions; return them."""
    from tooltrace import ToolCall, ToolRegistry, tool

    home = scratch("tooltrace-bench-")
    if full:
        from bench._contenders import _registry

        c = _registry(execution, True)
        reg = c.extra["registry"]
    else:
        reg = ToolRegistry(workspace=home, home=home)
        reg.register(tool(TOOL, execution=execution, description=DESCRIPTION)(noop))
    args = {"x": "a"}
    for _ in range(min(2000, calls)):
        reg.call(ToolCall(TOOL, args))
    t0 = time.perf_counter()
    for _ in range(calls):
        reg.call(ToolCall(TOOL, args))
    plain_us = (time.perf_counter() - t0) / calls * 1e6
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        reg.call(ToolCall(TOOL, args))
    prof.disable()
    reg.shutdown(5.0)
    st = pstats.Stats(prof)
    total = sum(v[2] for v in st.stats.values())  # type: ignore[attr-defined]
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        rows.append((tt, ct, nc, f"{_short(file)}:{line}({fn})"))
    rows.sort(reverse=True)
    what = "everything on" if full else "telemetry off"
    t = Table(
        f"Registry call path profile, {what}, {execution} ({calls} calls; unprofiled "
        f"{plain_us:.1f} us/call)",
        ["function", "calls/call", "own us/call", "own %", "cumulative us/call"],
    )
    out = []
    for tt, ct, nc, name in rows[:top]:
        t.add(name, nc / calls, tt / calls * 1e6, 100.0 * tt / total if total else 0.0,
              ct / calls * 1e6, digits=2)
        out.append({"function": name, "own_us": tt / calls * 1e6, "cum_us": ct / calls * 1e6,
                    "calls_per_call": nc / calls})
    t.print()
    return {"unprofiled_us_per_call": plain_us, "functions": out}


def _short(file: str) -> str:
    if file.startswith("~") or file.startswith("<"):
        return file
    p = Path(file)
    parts = p.parts
    if "tooltrace" in parts:
        return "/".join(parts[parts.index("tooltrace"):])
    return p.name
