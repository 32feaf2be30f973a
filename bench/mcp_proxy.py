"""Section ``mcp``: what the MCP proxy adds to a ``tools/call`` round trip over stdio.

The official SDK client calls ``echo`` on the wire-level test server (``tests/mcp_servers/
toy.py``, which answers in microseconds) directly and through ``python -m tooltrace.mcp proxy``
in front of the same server, both over stdio, in turns (a batch direct, a batch through the
proxy, ...) so both see the same machine load. Printed: p50/p90/p99 of each, the difference of
the medians (the proxy's added time; the team's aim is at most 0.5 ms at p50) and the ratio.
The proxy runs with its default sinks (audit, logs at error level, metrics; no tracing).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import Table, percentile, scratch

__all__ = ["run"]

ROOT = Path(__file__).resolve().parent.parent
TOY = str(ROOT / "tests" / "mcp_servers" / "toy.py")


async def _measure(rounds: int, calls: int, warmup: int) -> dict[str, list[float]]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    home = scratch("mcp-bench-")
    env = {"PYTHONPATH": str(ROOT), "TOOLTRACE_LOG_LEVEL": "error", "TOY_TOOLS": "echo",
           "PATH": os.environ.get("PATH", "")}
    direct = StdioServerParameters(command=sys.executable, args=[TOY], env=env)
    proxied = StdioServerParameters(
        command=sys.executable, cwd=home, env=env,
        args=["-m", "tooltrace.mcp", "proxy", "--home", home, "--name", "toy", "--",
              sys.executable, TOY])
    out: dict[str, list[float]] = {"direct": [], "proxy": []}
    async with stdio_client(direct) as (r1, w1), ClientSession(r1, w1) as d, \
            stdio_client(proxied) as (r2, w2), ClientSession(r2, w2) as p:
        await d.initialize()
        await asyncio.wait_for(p.initialize(), 60)
        for s in (d, p):
            for _ in range(warmup):
                await s.call_tool("echo", {"text": "warm"})
        for _ in range(rounds):
            for key, s in (("direct", d), ("proxy", p)):
                times = out[key]
                for _ in range(calls):
                    t0 = time.perf_counter()
                    await s.call_tool("echo", {"text": "hello"})
                    times.append(time.perf_counter() - t0)
    return out


def run(rounds: int = 10, calls: int = 200, warmup: int = 200) -> dict[str, Any]:
    """Measure and print; return the figures (milliseconds)."""
    got = asyncio.run(_measure(rounds, calls, warmup))
    res: dict[str, Any] = {}
    table = Table(f"MCP tools/call round trip over stdio ({rounds} x {calls} calls each, "
                  "interleaved), ms", ["path", "p50", "p90", "p99"])
    for key in ("direct", "proxy"):
        v = sorted(x * 1000 for x in got[key])
        res[key] = {q: percentile(v, q) for q in (50, 90, 99)}
        table.add(key, res[key][50], res[key][90], res[key][99], digits=3)
    added = res["proxy"][50] - res["direct"][50]
    ratio = res["proxy"][50] / res["direct"][50]
    table.add("added by the proxy (p50)", added, None, None, digits=3)
    table.print()
    print(f"- proxy / direct at p50: {ratio:.2f}x; aim: at most 0.5 ms added "
          f"({'met' if added <= 0.5 else 'MISSED'})\n")
    res["added_p50_ms"] = added
    res["ratio_p50"] = ratio
    return res


if __name__ == "__main__":
    run(rounds=2, calls=50, warmup=20)
