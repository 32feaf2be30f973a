"""Run the benchmarks and print their tables.

Usage (from the repository root)::

    .venv/bin/python -m bench                      # all sections, documented sizes
    .venv/bin/python -m bench --quick              # every section, tiny sizes (seconds)
    .venv/bin/python -m bench --sections overhead,profile
    .venv-bench/bin/python -m bench                # the same, with the peers installed

Sections: ``overhead`` (per-call cost vs a hand-rolled reference and peers), ``tail`` (p99,
p99.9 and max per contender, and what ran during the slowest calls), ``ingest`` (audit
writer throughput, queue depth and drops at a paced rate), ``autopsy`` (find one call among
1M/10M), ``live`` (``autopsy``, ``calls`` and ``stats`` on a live trail of 100k and 1M calls
written at 5,000 calls/s, after background compaction caught up, and with it off, against the
``import duckdb`` floor; the compaction backlog while writing), ``memory`` (RSS growth over many
calls), ``profile`` (where a registry call's time
goes; not in the default set), ``whatif`` (replay 1M recorded calls against a candidate
policy file, and the policy step with a 50-rule file; not in the default set), ``policy`` (the
policy step per call with a 50-rule TOML file and the same rules in Cedar, against no policy
and the reference; not in the default set), ``startup`` (``import tooltrace``,
``create_registry`` + ``shutdown`` and registering 10, 100 and 1,000 tools, each in a fresh
process, against importing the libraries the default sinks use),
``frameworks`` (one tool call through each agent framework, bare
and with tooltrace's adapter; not in the default set), ``sandbox`` (one ``run_command`` with
the sandbox off, in Landlock and in bubblewrap; not in the default set). The last table
compares each figure with its target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import SCRATCH_ENV, Table, machine

__all__ = ["main"]

SECTIONS = ("overhead", "tail", "ingest", "autopsy", "live", "memory", "profile",
            "frameworks", "mcp", "whatif", "policy", "startup", "sandbox")
DEFAULT_SECTIONS = ("overhead", "tail", "ingest", "autopsy", "live", "memory", "startup")


def _ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description="tooltrace benchmarks: per-call overhead, audit ingest, autopsy, memory.",
    )
    ap.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                    help=f"comma-separated, from {', '.join(SECTIONS)} (default: "
                    f"{','.join(DEFAULT_SECTIONS)})")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes everywhere (a smoke run; figures are not meaningful)")
    g = ap.add_argument_group("overhead")
    g.add_argument("--rounds", type=int, help="interleaved rounds (default 20; quick 2)")
    g.add_argument("--round-calls", type=int,
                   help="calls per contender per round (default 2500; quick 200)")
    g.add_argument("--warmup", type=int, help="warm-up calls per contender (default 2000)")
    g.add_argument("--contenders",
                   help="comma-separated substrings of contender names, e.g. 'bare,(inline)' "
                   "(the reference always runs; the subscriber and tool-group rows run only "
                   "when named, e.g. 'subscriber,group')")
    g.add_argument("--baseline", metavar="REV_OR_DIR",
                   help="a git revision of this repository (e.g. main, HEAD~3) or a directory "
                   "holding a tooltrace/ tree: each tooltrace contender of the overhead "
                   "section, and the proxy of the mcp section, also runs that tooltrace, "
                   "driven by this checkout's bench, in the same rounds, as '<name> [baseline]'")
    g = ap.add_argument_group("tail")
    g.add_argument("--tail-rounds", type=int, help="interleaved rounds (default 12; quick 1)")
    g.add_argument("--tail-calls", type=int,
                   help="calls per contender per round (default 2500; quick 300)")
    g.add_argument("--tail-contenders",
                   help="comma-separated substrings of contender names (default: the reference, "
                   "tooltrace telemetry off and everything on, inline and thread)")
    g = ap.add_argument_group("ingest")
    g.add_argument("--ingest-records", type=int,
                   help="records per writer process (default 200000; quick 2000)")
    g.add_argument("--writers", help="writer process counts (default 1,2,4; quick 2)")
    g.add_argument("--paced-seconds", type=float, help="paced runs' length (default 10; quick 0.5)")
    g.add_argument("--rate", type=float, default=5000.0, help="paced call rate (default 5000)")
    g = ap.add_argument_group("autopsy")
    g.add_argument("--autopsy-rows",
                   help="calls to generate, comma-separated (default 1000000; e.g. "
                   "1000000,10000000; quick 5000)")
    g.add_argument("--autopsy-repeats", type=int, help="whole-command runs (default 7)")
    g.add_argument("--autopsy-trails", type=Path,
                   help="keep the generated trails in this directory and reuse them in later "
                   "runs (default: generate each run in scratch space, removed after)")
    g = ap.add_argument_group("live")
    g.add_argument("--live-sizes",
                   help="calls in each live trail, comma-separated (default 100000,1000000; "
                   "quick 5000)")
    g.add_argument("--live-rate", type=float,
                   help="calls/s the live trails are written at; 0: as fast as it goes "
                   "(default 5000)")
    g.add_argument("--live-repeats", type=int, help="runs of each command (default 5; quick 1)")
    g.add_argument("--live-off-max", type=int,
                   help="largest trail also read with background compaction off (default "
                   "100000)")
    g = ap.add_argument_group("memory")
    g.add_argument("--calls", type=int, help="calls in the memory run (default 1000000)")
    g.add_argument("--memory-base", type=int,
                   help="first checkpoint, the growth baseline (default 10000)")
    g = ap.add_argument_group("startup")
    g.add_argument("--startup-rounds", type=int,
                   help="fresh-process rounds of every startup probe, after one warm-up round "
                   "(default 15; quick 1)")
    g.add_argument("--startup-tools",
                   help="tool counts to register (default 10,100,1000; quick 10,100)")
    g = ap.add_argument_group("profile")
    g.add_argument("--profile-calls", type=int, help="profiled calls (default 20000)")
    g.add_argument("--profile-full", action="store_true",
                   help="profile the everything-on registry instead of telemetry off")
    g = ap.add_argument_group("mcp")
    g.add_argument("--mcp-instructions", nargs="?", const="all", metavar="CONTENDERS",
                   help="also count the CPU instructions per call of each contender that is a "
                   "process of its own (relay, sdk, proxy, ...; or a comma-separated list of "
                   "them) under valgrind's callgrind: minutes, and steady where times drift")
    ap.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    return ap


def _pick(v: Any, default: Any, quick: Any, is_quick: bool) -> Any:
    if v is not None:
        return v
    return quick if is_quick else default


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections; 0 when they all ran (targets missed are reported, not fatal)."""
    ns = _parser().parse_args(argv)
    sections = [s.strip() for s in ns.sections.split(",") if s.strip()]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        _parser().error(f"unknown section(s): {', '.join(bad)}")
    if ns.mcp_instructions and "mcp" not in sections:
        _parser().error("--mcp-instructions is part of the mcp section: add --sections mcp")
    q = ns.quick
    load = os.getloadavg()
    print(f"# tooltrace bench ({'quick' if q else 'full'} run)\n")
    print(f"- machine: {machine()}")
    print(f"- python: {sys.executable}")
    print(f"- load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"- started: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\n")
    sys.stdout.flush()
    results: dict[str, Any] = {"machine": machine(), "python": sys.executable,
                               "load_start": load, "quick": q}
    # Every temporary home (audit trails of millions of records) lives under one directory
    # that child processes inherit through the environment and that is removed at the end.
    scratch_dir = tempfile.mkdtemp(prefix="tooltrace-bench-run-")
    os.environ[SCRATCH_ENV] = scratch_dir
    try:
        if ns.baseline is not None:
            from bench.overhead import baseline_tree

            tree = baseline_tree(ns.baseline)
            print(f"- baseline: {ns.baseline} ({tree})\n")
            results["baseline"] = ns.baseline
            ns.baseline = tree
        _sections(ns, sections, results)
    finally:
        os.environ.pop(SCRATCH_ENV, None)
        shutil.rmtree(scratch_dir, ignore_errors=True)
    if ns.json is not None:
        ns.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


def _sections(ns: argparse.Namespace, sections: list[str], results: dict[str, Any]) -> None:
    q = ns.quick
    t0 = time.perf_counter()
    if "overhead" in sections:
        from bench import overhead

        only = ns.contenders.split(",") if ns.contenders else None
        results["overhead"] = overhead.run(
            rounds=_pick(ns.rounds, 20, 2, q), calls=_pick(ns.round_calls, 2500, 200, q),
            warmup=_pick(ns.warmup, 2000, 100, q), only=only, baseline=ns.baseline)
    if "tail" in sections:
        from bench import tail

        results["tail"] = tail.run(
            rounds=_pick(ns.tail_rounds, 12, 1, q), calls=_pick(ns.tail_calls, 2500, 300, q),
            warmup=_pick(ns.warmup, 2000, 100, q),
            only=ns.tail_contenders.split(",") if ns.tail_contenders else None)
    if "ingest" in sections:
        from bench import ingest

        results["ingest"] = ingest.run(
            records=_pick(ns.ingest_records, 200_000, 2000, q),
            writers=_ints(_pick(ns.writers, "1,2,4", "2", q)),
            paced_seconds=_pick(ns.paced_seconds, 10.0, 0.5, q), rate=ns.rate)
    if "autopsy" in sections:
        from bench import autopsy

        results["autopsy"] = autopsy.run(
            rows=_ints(_pick(ns.autopsy_rows, "1000000", "5000", q)),
            repeats=_pick(ns.autopsy_repeats, 7, 1, q), trails=ns.autopsy_trails)
    if "live" in sections:
        from bench import live

        results["live"] = live.run(
            sizes=_ints(_pick(ns.live_sizes, "100000,1000000", "5000", q)),
            rate=_pick(ns.live_rate, 5000.0, 5000.0, q),
            repeats=_pick(ns.live_repeats, 5, 1, q),
            off_max=_pick(ns.live_off_max, 100_000, 5000, q))
    if "memory" in sections:
        from bench import memory

        results["memory"] = memory.run(calls=_pick(ns.calls, 1_000_000, 2000, q),
                                       base=_pick(ns.memory_base, 10_000, 200, q))
    if "startup" in sections:
        from bench import startup

        results["startup"] = startup.run(
            rounds=_pick(ns.startup_rounds, 15, 1, q),
            sizes=tuple(_ints(_pick(ns.startup_tools, "10,100,1000", "10,100", q))))
    if "whatif" in sections:
        from bench import whatif

        results["whatif"] = whatif.run(calls=_pick(None, 1_000_000, 3000, q),
                                       step_calls=_pick(None, 20_000, 500, q))
    if "sandbox" in sections:
        from bench import sandbox

        results["sandbox"] = sandbox.run(rounds=_pick(None, 10, 1, q), calls=_pick(None, 20, 3, q))
    if "policy" in sections:
        from bench import policy

        results["policy"] = policy.run(rounds=_pick(None, 15, 2, q),
                                       calls=_pick(None, 2000, 200, q))
    if "profile" in sections:
        from bench import profile_callpath, profile_sinks

        results["profile"] = profile_callpath.run(
            calls=_pick(ns.profile_calls, 20_000, 500, q), full=ns.profile_full)
        results["profile_sinks"] = profile_sinks.run(
            records=_pick(ns.profile_calls, 20_000, 500, q))
        # After the sink profiles have returned, so their records are garbage already.
        results["profile_gc"] = profile_sinks.gc_cost(_pick(ns.profile_calls, 20_000, 500, q))
    if "mcp" in sections:
        from bench import mcp_instructions, mcp_proxy

        instructions_of = None if ns.mcp_instructions in (None, "all") else {
            c.strip() for c in ns.mcp_instructions.split(",") if c.strip()}
        if ns.mcp_instructions:
            mcp_instructions.check(instructions_of, ns.baseline)

        results["mcp"] = mcp_proxy.run(rounds=_pick(None, 10, 2, q), calls=_pick(None, 200, 50, q),
                                       warmup=_pick(None, 200, 20, q), baseline=ns.baseline)
        if ns.mcp_instructions:
            results["mcp_instructions"] = mcp_instructions.run(
                few=_pick(None, 50, 5, q), many=_pick(None, 550, 25, q), baseline=ns.baseline,
                only=instructions_of)
    if "frameworks" in sections:
        from bench import frameworks

        results["frameworks"] = frameworks.run(quick=q)
    _targets(results)
    load = os.getloadavg()
    results["load_end"] = load
    print(f"- load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"total {time.perf_counter() - t0:.0f} s")


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "MISSED")


def _live_and_settled(t: Table, r: dict[str, Any]) -> None:
    """The live trail's aims, what background compaction costs the calls, and the two aims
    stated against a part measured in the same run (the bare hand-off, the SDK passthrough)."""
    from bench.live import targets

    lv = r.get("live")
    for target, measured, ok in targets(lv) if lv else ():
        t.add(target, measured, _verdict(ok))
    for sect, q, key in (("overhead", "p50", "p50_us"), ("tail", "p99.9", "p999_us")):
        c = (r.get(sect) or {}).get("contenders", {})
        for mode in ("inline", "thread"):
            on = c.get(f"tooltrace, everything on ({mode})", {})
            off = c.get(f"tooltrace, everything on ({mode}, compaction off)", {})
            if on.get("available") and off.get("available") and on.get(key) and off.get(key):
                ratio = on[key] / off[key]
                t.add(f"background compaction moves the {q} at most 5% ({mode})",
                      f"{ratio:.3f}x ({on[key]:.1f} vs {off[key]:.1f} us off)",
                      _verdict(ratio <= 1.05))
    c = (r.get("overhead") or {}).get("contenders", {})
    bare = c.get("bare function call", {})
    # The aim's own reference (hand-offs back to back), and the same hand-off with the caller
    # busy between two as it is between two calls (the worker's CPU then goes idle).
    for ref, how in (("bare two-thread hand-off", "a bare two-thread hand-off"),
                     ("bare two-thread hand-off, spaced as calls",
                      "the bare hand-off spaced as calls")):
        hand = c.get(ref, {})
        if not (hand.get("available") and bare.get("available")):
            continue
        one = hand["p50_us"] - bare["p50_us"]
        for what in ("telemetry off", "everything on"):
            th = c.get(f"tooltrace, {what} (thread)", {})
            il = c.get(f"tooltrace, {what} (inline)", {})
            if th.get("available") and il.get("available"):
                extra = th["p50_us"] - il["p50_us"]
                t.add(f"{what}: thread p50 - inline p50 <= 1.3x {how}",
                      f"{extra:.1f} us vs hand-off {one:.1f} us = {extra / one:.2f}x",
                      _verdict(extra <= 1.3 * one))
    mcp = r.get("mcp")
    if mcp and mcp.get("added_over_sdk_added") is not None:
        t.add("MCP proxy: added p50 <= 0.5x what the SDK's passthrough adds",
              f"{mcp['added_p50_ms']:.3f} vs {mcp['sdk_added_p50_ms']:.3f} ms = "
              f"{mcp['added_over_sdk_added']:.2f}x", _verdict(mcp["added_over_sdk_added"] <= 0.5))


def _targets(r: dict[str, Any]) -> None:
    t = Table("Targets", ["target", "measured", "verdict"])
    oh = r.get("overhead")
    if oh:
        c = oh["contenders"]
        ref = c.get("reference: SDK span + counter + histogram", {})
        bare = c.get("bare function call", {})
        for mode in ("inline", "thread"):
            full = c.get(f"tooltrace, everything on ({mode})", {})
            if full.get("available") and ref.get("available"):
                ratio = full["p50_us"] / ref["p50_us"]
                per_round = full.get("round_ratio_median")
                rounds = "" if per_round is None else f"; per-round median {per_round:.2f}x"
                t.add(f"everything on ({mode}): p50 <= 1.5x reference",
                      f"{ratio:.2f}x ({full['p50_us']:.1f} vs {ref['p50_us']:.1f} us{rounds})",
                      _verdict(ratio <= 1.5))
            ol = c.get("OpenLLMetry @tool", {})
            if full.get("available"):
                if ol.get("available"):
                    t.add(f"everything on ({mode}): p50 below OpenLLMetry @tool",
                          f"{full['p50_us']:.1f} vs {ol['p50_us']:.1f} us",
                          _verdict(full["p50_us"] < ol["p50_us"]))
                else:
                    t.add(f"everything on ({mode}): p50 below OpenLLMetry @tool",
                          f"OpenLLMetry not available: {ol.get('reason', '?')}",
                          _verdict(None))
            off = c.get(f"tooltrace, telemetry off ({mode})", {})
            if off.get("available"):
                over = off["p50_us"] - bare.get("p50_us", 0.0)
                t.add(f"telemetry off ({mode}): p50 overhead <= 10 us", f"{over:.1f} us",
                      _verdict(over <= 10.0))
    tl = r.get("tail")
    if tl:
        for mode in ("inline", "thread"):
            full = tl["contenders"].get(f"tooltrace, everything on ({mode})", {})
            ratio = full.get("p999_over_reference")
            if full.get("available") and ratio is not None:
                t.add(f"everything on ({mode}): p99.9 <= reference p99.9",
                      f"{ratio:.2f}x ({full['p999_us']:.0f} us; worst 0.1%: background "
                      f"{full['worst_background_share_pct']:.0f}%, GC "
                      f"{full['worst_gc_share_pct']:.0f}% of their time)",
                      _verdict(ratio <= 1.0))
        full = tl["contenders"].get("tooltrace, everything on (thread)", {})
        if full.get("available") and full.get("p99_over_reference") is not None:
            t.add("everything on (thread): p99 <= reference p99",
                  f"{full['p99_over_reference']:.2f}x ({full['p99_us']:.0f} us)",
                  _verdict(full["p99_over_reference"] <= 1.0))
            # The thread path's p50 is held to the hand-off it needs (``_live_and_settled``).
    ing = r.get("ingest")
    if ing:
        one = ing["one_core"]
        t.add("audit ingest >= 200,000 step records/s on one core",
              f"{one['step_records_per_s']:,.0f} ({one['records_per_s']:,.0f} records/s x "
              f"{one['steps_per_record']} steps)", _verdict(one["step_records_per_s"] >= 200_000))
        pr = ing["paced_registry"]
        drops = sum(pr["dropped"].values())
        reached = pr["achieved"] >= 0.95 * pr["rate"]
        t.add(f"zero drops at {pr['rate']:,.0f} calls/s (paced, everything on)",
              f"{drops} dropped at {pr['achieved']:,.0f} calls/s achieved",
              _verdict(drops == 0 and reached) if reached or drops else
              f"MISSED (rate not reached; {drops} dropped)")
    au = r.get("autopsy")
    if au and au["sizes"]:
        big = max(au["sizes"], key=lambda s: s["rows"])
        lk = big["lookup"]
        at = f" at {big['rows']:,} calls"
        ok: bool | None = lk["warm_p50_ms"] <= 5.0
        note = "" if big["rows"] >= 10_000_000 else " (target is at 10M: run --autopsy-rows)"
        t.add("autopsy lookup in process <= 5 ms at 10M",
              f"warm p50 {lk['warm_p50_ms']:.1f} ms, first {lk['first_ms']:.1f} ms{at}{note}",
              _verdict(ok))
        t.add("whole `tooltrace autopsy` command <= 1.3x floor",
              f"{big['command_ms']:.0f} ms vs floor {big['floor_ms']:.0f} ms = "
              f"{big['ratio']:.1f}x (CPU {big['command_cpu_ms']:.0f} vs "
              f"{big['floor_cpu_ms']:.0f} ms){at}", _verdict(big["ratio"] <= 1.3))
    _live_and_settled(t, r)
    mem = r.get("memory")
    if mem:
        pts = mem["points"]
        t.add("RSS growth 10k -> 1M calls <= 10%",
              f"{mem['growth_pct']:.1f}% ({pts[0]['calls']:,} -> {pts[-1]['calls']:,} calls: "
              f"{pts[0]['rss_mib']:.1f} -> {pts[-1]['rss_mib']:.1f} MiB)",
              _verdict(mem["growth_pct"] <= 10.0))
    st = r.get("startup")
    if st:
        med, proc, rr = st["median_ms"], st["process_median_ms"], st["round_ratio_median"]
        if "register 100" in med:
            ratio = rr["register 100"]["in_process"]
            t.add("registering 100 tools <= 1.5x import tooltrace",
                  f"per-round median {ratio:.2f}x ({med['register 100']:.1f} vs "
                  f"{med['import']:.1f} ms)", _verdict(ratio <= 1.5))
        for c in st["configs"]:
            ratio = rr[c]["process"]
            t.add(f"create_registry + shutdown <= 1.5x importing its sinks' libraries ({c})",
                  f"whole processes, per-round median {ratio:.2f}x (medians "
                  f"{proc[f'create {c}']:.0f} vs {proc[f'libraries {c}']:.0f} ms); in process "
                  f"{rr[c]['in_process']:.2f}x", _verdict(ratio <= 1.5))
    if t.rows:
        t.print()
    r["targets"] = [dict(zip(t.columns, row, strict=True)) for row in t.rows]
