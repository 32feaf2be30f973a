"""Section ``mcp``: what the MCP proxy adds to a ``tools/call`` round trip over stdio.

The official SDK client calls ``echo`` on the wire-level test server (``tests/mcp_servers/
toy.py``, which answers in microseconds) directly, and through four proxies in front of the
same server, all over stdio, in turns (a batch each, round after round) so all see the same
machine load:

- ``relay``: a process that only copies lines both ways (``bench/_mcp_relays.py``): the floor of
  any proxy that is a process of its own;
- ``sdk``: a passthrough built on the MCP Python SDK as shipped (low-level ``Server`` over
  ``stdio_server``, ``ClientSession`` over ``stdio_client``), no tooltrace in it: the least a
  proxy built on the SDK does;
- ``proxy``: ``python -m tooltrace.mcp proxy`` with its default sinks (audit, logs at error level;
  no tracing, no metrics endpoint), on its default event loop (uvloop when installed), from this
  checkout;
- ``proxy asyncio``: the same with ``--loop asyncio``, the standard library's event loop;
- ``proxy [baseline]`` (with ``--baseline``): the same command run with another tree's
  ``tooltrace``, in the same rounds, so a change to the proxy is measured against what it
  replaces.

Printed: p50/p90/p99 of each, what each adds to ``direct`` at p50, the aim (what the proxy adds
at most half what the SDK's own passthrough adds, ``sdk``, in the same rounds; the former
absolute aim of 0.5 ms is printed beside it), and the CPU each front process used per call (from
``/proc``; the upstream's is not in it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import Table, percentile, scratch
from bench.overhead import BASELINE_MARK

__all__ = ["CONTENDERS", "TOY", "commands", "pythonpath", "run"]

ROOT = Path(__file__).resolve().parent.parent
TOY = str(ROOT / "tests" / "mcp_servers" / "toy.py")
#: The contenders in the order they are measured and printed.
CONTENDERS = ("direct", "relay", "sdk", "proxy", "proxy asyncio")


def commands(home: str, baseline: Path | None, *,
             upstream: list[str] | None = None) -> dict[str, list[str]]:
    """Each contender's command line, in the order measured. ``upstream``: how the proxies are
    given the toy server (default ``--name toy -- <toy>``; a ``--config FILE`` instead leaves
    out the proxy on the standard library's loop, which only the timing table compares)."""
    toy = [sys.executable, TOY]
    args = upstream or ["--name", "toy", "--", *toy]
    proxy = ["-m", "tooltrace.mcp", "proxy", "--home", home]
    main = [sys.executable, *proxy]
    out = {
        "direct": toy,
        "relay": [sys.executable, "-m", "bench._mcp_relays", "relay", "--", *toy],
        "sdk": [sys.executable, "-m", "bench._mcp_relays", "sdk", "--", *toy],
        "proxy": [*main, *args],
    }
    if upstream is None:
        out["proxy asyncio"] = [*main, "--loop", "asyncio", *args]
    if baseline is not None:
        out["proxy" + BASELINE_MARK] = [sys.executable, *proxy, *args]
    return out


def pythonpath(key: str, baseline: Path | None) -> str:
    """``PYTHONPATH`` of a contender: the baseline's tree, else this checkout."""
    if key.endswith(BASELINE_MARK):
        return str(Path(baseline or ".").resolve())
    return str(ROOT)


def _children() -> dict[int, bytes]:
    """This process's child processes and their command lines (empty off Linux)."""
    out: dict[int, bytes] = {}
    me = str(os.getpid())
    with contextlib.suppress(OSError):
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError):
                with open(f"/proc/{p}/stat") as f:
                    if f.read().rsplit(") ", 1)[1].split()[1] != me:
                        continue
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    out[int(p)] = f.read()
    return out


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (NaN when unknown)."""
    if pid is None:
        return float("nan")
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(rounds: int, calls: int, warmup: int, baseline: Path | None
                   ) -> tuple[dict[str, list[float]], dict[str, float]]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    home = scratch("mcp-bench-")  # also every process's working directory: not the checkout
    env = {"TOOLTRACE_LOG_LEVEL": "error", "TOY_TOOLS": "echo", "PATH": os.environ.get("PATH", "")}
    contenders = commands(home, baseline)
    times: dict[str, list[float]] = {k: [] for k in contenders}
    cpu: dict[str, float] = {}
    async with contextlib.AsyncExitStack() as stack:
        sessions: dict[str, Any] = {}
        pids: dict[str, int | None] = {}
        for key, cmd in contenders.items():
            before = set(_children())
            params = StdioServerParameters(
                command=cmd[0], args=cmd[1:],
                env={**env, "PYTHONPATH": pythonpath(key, baseline)}, cwd=home)
            r, w = await stack.enter_async_context(stdio_client(params))
            s = await stack.enter_async_context(ClientSession(r, w))
            await asyncio.wait_for(s.initialize(), 60)
            sessions[key] = s
            new = set(_children()) - before
            pids[key] = new.pop() if len(new) == 1 else None
        for s in sessions.values():
            for _ in range(warmup):
                await s.call_tool("echo", {"text": "warm"})
        used = {k: 0.0 for k in contenders}
        for _ in range(rounds):
            for key, s in sessions.items():
                out = times[key]
                c0 = _cpu_s(pids[key])
                for _ in range(calls):
                    t0 = time.perf_counter()
                    await s.call_tool("echo", {"text": "hello"})
                    out.append(time.perf_counter() - t0)
                used[key] += _cpu_s(pids[key]) - c0
        cpu = {k: used[k] / (rounds * calls) for k in contenders}
    return times, cpu


def run(rounds: int = 10, calls: int = 200, warmup: int = 200,
        baseline: Path | None = None) -> dict[str, Any]:
    """Measure and print; return the figures (milliseconds). ``baseline``: another checkout,
    whose proxy runs in the same rounds as ``proxy [baseline]``."""
    if baseline is not None and not (Path(baseline) / "tooltrace" / "mcp").is_dir():
        raise SystemExit(f"--baseline {baseline}: no tooltrace/mcp in it (a checkout's root?)")
    got, cpu = asyncio.run(_measure(rounds, calls, warmup, baseline))
    res: dict[str, Any] = {}
    table = Table(f"MCP tools/call round trip over stdio ({rounds} x {calls} calls each, "
                  "interleaved), ms", ["path", "p50", "p90", "p99", "added at p50",
                                       "front process CPU per call"])
    for key in got:
        v = sorted(x * 1000 for x in got[key])
        res[key] = {q: percentile(v, q) for q in (50, 90, 99)}
        res[key]["cpu_ms"] = cpu[key] * 1000
    direct = res["direct"][50]
    for key in got:
        r = res[key]
        table.add(key, r[50], r[90], r[99], None if key == "direct" else r[50] - direct,
                  r["cpu_ms"], digits=3)
    table.print()
    added = res["proxy"][50] - direct
    over_sdk = res["proxy"][50] - res["sdk"][50]
    sdk_added = res["sdk"][50] - direct
    relative = added / sdk_added if sdk_added > 0 else None
    print(f"- aim: the proxy adds at most 0.5x what the SDK's passthrough adds at p50: "
          f"{added:.3f} ms vs {sdk_added:.3f} ms = "
          + (f"{relative:.2f}x ({'met' if relative <= 0.5 else 'MISSED'})" if relative is not None
             else "not measurable (the SDK passthrough added nothing)"))
    print(f"- proxy / direct at p50: {res['proxy'][50] / direct:.2f}x; aim: at most "
          f"0.5 ms added ({'met' if added <= 0.5 else 'MISSED'}); of the {added:.3f} ms, "
          f"{res['relay'][50] - direct:.3f} ms is one more process (relay), "
          f"{res['sdk'][50] - res['relay'][50]:.3f} ms the SDK's server and client (sdk - relay), "
          f"{over_sdk:.3f} ms tooltrace's pipeline and proxy (proxy - sdk)\n")
    base = res.get("proxy" + BASELINE_MARK)
    if base is not None:
        print(f"- proxy against proxy{BASELINE_MARK} in the same rounds: p50 "
              f"{res['proxy'][50] - base[50]:+.3f} ms, CPU per call "
              f"{res['proxy']['cpu_ms'] - base['cpu_ms']:+.3f} ms\n")
    res["added_p50_ms"] = added
    res["ratio_p50"] = res["proxy"][50] / direct
    res["over_sdk_p50_ms"] = over_sdk
    res["sdk_added_p50_ms"] = sdk_added
    res["added_over_sdk_added"] = relative
    return res


if __name__ == "__main__":
    run(rounds=2, calls=50, warmup=20)
