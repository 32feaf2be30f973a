"""Run the reliability and security gauntlet at its long sizes and print the figures.

Usage (from the repository root)::

    .venv/bin/python -m bench.gauntlet                 # every item, long sizes (about an hour)
    .venv/bin/python -m bench.gauntlet --only canaries,tamper
    .venv/bin/python -m bench.gauntlet soak --minutes 30 [--rate 500]

Items: canaries (10,000 canaries, plus the benign corpus of 100,000 lines), paths (the
adversarial table and 100,000 swap-race iterations through the registry), crash (200 SIGKILLs),
tamper (1,000 mutations), faults (5,000 calls under every fault), soak (``TOOLTRACE_SOAK_MINUTES``,
default 10), input (5,000 fuzzed calls, a 100 MB call, 2,000 CLI invocations), evidence (the
agent against its own record: the same size either way). Each item is the
test of ``tests/gauntlet`` of the same name run with ``TOOLTRACE_LONG=1``; the figures each test
records are printed as one table at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ITEMS: dict[str, list[str]] = {
    "canaries": ["test_canaries.py", "test_encoded_secrets.py", "test_benign.py"],
    "paths": ["test_paths_registry.py"],
    "crash": ["test_crash.py"],
    "tamper": ["test_tamper.py"],
    "faults": ["test_faults.py"],
    "soak": ["test_soak.py"],
    "input": ["test_bad_input.py"],
    "evidence": ["test_evidence.py"],
}


def _print_figures(path: Path) -> None:
    if not path.exists():
        print("no figures were recorded")
        return
    print("\n### gauntlet figures (long sizes)\n")
    print("| item | figures |")
    print("|---|---|")
    for line in path.read_text().splitlines():
        d: dict[str, Any] = json.loads(line)
        name = d.pop("name")
        d.pop("at", None)
        d.pop("long", None)
        print(f"| {name} | " + ", ".join(f"{k}={v}" for k, v in d.items()) + " |")


def _run_items(items: list[str], extra: list[str]) -> int:
    figures = Path(tempfile.mkdtemp(prefix="gauntlet-")) / "figures.jsonl"
    env = dict(os.environ, TOOLTRACE_LONG="1", TOOLTRACE_GAUNTLET_FIGURES=str(figures))
    codes: dict[str, int] = {}
    t0 = time.monotonic()
    for item in items:
        # One process per item: memory figures (soak RSS, peak RSS) must not start from what
        # an earlier item left in the same process.
        files = [str(ROOT / "tests" / "gauntlet" / f) for f in ITEMS[item]]
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files, *extra]
        print(f"== {item}", flush=True)
        codes[item] = subprocess.call(cmd, cwd=ROOT, env=env)
    print(f"\n{len(items)} items in {time.monotonic() - t0:.0f} s; pytest exit codes: "
          + ", ".join(f"{k}={v}" for k, v in codes.items()))
    _print_figures(figures)
    return max(codes.values(), default=0)


def _soak(minutes: float, rate: float) -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    from gauntlet._soak import run_soak

    with tempfile.TemporaryDirectory(prefix="gauntlet-soak-") as tmp:
        f = run_soak(minutes * 60, rate, Path(tmp), progress=lambda s: print(s, flush=True))
    print("\n### soak\n")
    print("| figure | value |")
    print("|---|---|")
    for k, v in f.items():
        print(f"| {k} | {v} |")
    ok = (all(v == 0 for v in f["drops"].values())
          and f["spans_received"] == f["calls"] + f["warmup_calls"]
          and f["rss_growth_pct"] < 5.0)
    print("\nverdict:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gauntlet", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", default="run", choices=["run", "soak"])
    ap.add_argument("--only", help=f"comma-separated items from {', '.join(ITEMS)}")
    ap.add_argument("--minutes", type=float, default=10.0, help="soak length (soak command)")
    ap.add_argument("--rate", type=float, default=500.0, help="soak calls per second")
    args, extra = ap.parse_known_args(argv)
    if args.command == "soak":
        return _soak(args.minutes, args.rate)
    items = [x.strip() for x in args.only.split(",")] if args.only else list(ITEMS)
    unknown = [x for x in items if x not in ITEMS]
    if unknown:
        ap.error(f"unknown items: {', '.join(unknown)}")
    return _run_items(items, extra)


if __name__ == "__main__":
    raise SystemExit(main())
