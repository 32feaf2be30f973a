"""The benchmarks still run: every section in its tiny mode prints its table with real numbers.

This is not a speed test (figures from a tiny run mean nothing); it keeps ``bench/`` from
rotting as the code it measures changes: contenders still build, spans still reach the
exporter, the audit writer still acknowledges records, the generated audit trail is still
found by ``tooltrace autopsy``, and the memory child still reports.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.components import extra, require_binary, require_module

ROOT = Path(__file__).resolve().parent.parent

TABLES = {
    "Per-call cost around a no-op tool": [
        "contender", "p50 us", "p99 us", "p99.9 us", "p50 overhead us", "p50 / reference",
        "per-round p50 / reference (median)", "CPU/call us", "CPU / reference", "notes",
    ],
    "Tail latency and what ran during the slowest calls": [
        "contender", "p99 us", "p99.9 us", "max us", "p99.9 / reference p99.9",
        "worst 0.1%: GC share %", "worst 0.1%: gen-2 GC share %",
        "worst 0.1%: background slice share %", "worst 0.1%: background CPU share %",
        "worst 0.1%: preempted by the kernel %", "calls > 1 ms",
        "calls held > 1 ms by background CPU", "calls held > 4 ms", "longest hold us",
        "longest bg slice wall ms", "longest bg slice CPU ms", "dropped",
    ],
    "Background slices during the timed calls": [
        "contender", "thread", "slices", "CPU us per call", "longest wall ms", "its CPU ms",
        "longest CPU ms", "p99 slice wall ms", "p99 slice CPU ms",
    ],
    "Audit ingest: sustained writer throughput": [
        "writer processes", "pinned to one core", "records/s", "step records/s", "steps/record",
        "CPU us/record", "dropped",
    ],
    "Queue depth and drops at a paced rate": [
        "what", "target rate/s", "achieved rate/s", "records or calls", "peak queue depth",
        "dropped", "notes",
    ],
    "Autopsy: find and render one call": [
        "calls", "generate s", "disk MiB", "files/table", "store open ms", "first lookup ms",
        "warm lookup p50 ms", "warm lookup max ms", "warm lookup CPU ms", "prefix lookup ms",
        "command ms (p50)", "floor ms (p50)", "command / floor", "command CPU ms",
        "floor CPU ms", "CPU command / floor",
    ],
    "The live trail: 5,000 calls written at 5,000 calls/s": [
        "command", "live ms", "live MiB", "compacted ms", "compacted MiB", "live / compacted",
        "compaction off ms", "compaction off MiB",
    ],
    "Memory: RSS with everything on": [
        "calls", "RSS MiB", "growth vs first checkpoint %", "elapsed s",
        "pymalloc arenas / live MiB", "malloc used / free MiB", "peak queue",
    ],
    "Targets": ["target", "measured", "verdict"],
}

# Contenders that must run in any install (the peers may be "not available").
CORE = [
    "bare function call",
    "bare two-thread hand-off",
    "tooltrace, everything on (inline, compaction off)",
    "tooltrace, everything on (thread, compaction off)",
    "tooltrace, telemetry off (inline)",
    "tooltrace, telemetry off (thread)",
    "tooltrace, everything on (inline)",
    "tooltrace, everything on (thread)",
    "reference: SDK span + counter + histogram",
]


Tables = dict[str, tuple[list[str], list[list[str]]]]
Run = tuple[Tables, dict[str, Any]]


def _tables(text: str) -> Tables:
    out: Tables = {}
    for block in text.split("### ")[1:]:
        lines = block.strip().splitlines()
        title = lines[0].strip()
        rows = [
            [c.strip() for c in ln.strip().strip("|").split("|")]
            for ln in lines[1:]
            if ln.startswith("|") and not ln.startswith("|-")
        ]
        out[title] = (rows[0], rows[1:])
    return out


def _num(cell: str) -> float:
    v = float(cell.replace(",", ""))
    assert math.isfinite(v), cell
    return v


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The TMPDIR the bench (and every process it starts) makes its temporary homes in."""
    return tmp_path_factory.mktemp("bench-tmp")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, scratch: Path) -> Run:
    out = tmp_path_factory.mktemp("bench") / "figures.json"
    env = dict(os.environ, TMPDIR=str(scratch))
    env.pop("TOOLTRACE_HOME", None)
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--rounds", "1", "--round-calls", "200",
         "--paced-seconds", "0.3", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return _tables(p.stdout), json.loads(out.read_text())


def _find(tables: Tables, prefix: str) -> tuple[list[str], list[list[str]]]:
    hits = [v for k, v in tables.items() if k.startswith(prefix)]
    assert len(hits) == 1, f"expected one table titled {prefix!r}, got {list(tables)}"
    return hits[0]


def test_every_table_prints_its_columns(run: Run) -> None:
    tables, _ = run
    for prefix, columns in TABLES.items():
        header, rows = _find(tables, prefix)
        assert header == columns, prefix
        assert rows, f"{prefix}: no rows"


def test_overhead_rows_are_measured(run: Run) -> None:
    tables, figures = run
    header, rows = _find(tables, "Per-call cost around a no-op tool")
    by_name = {r[0]: dict(zip(header, r, strict=True)) for r in rows}
    for name in CORE:
        row = by_name[name]
        for col in ("p50 us", "p99 us", "p99.9 us", "CPU/call us"):
            assert _num(row[col]) > 0, (name, col)
        assert _num(row["p50 / reference"]) >= 0
        assert _num(row["per-round p50 / reference (median)"]) >= 0
    ref = by_name["reference: SDK span + counter + histogram"]
    assert _num(ref["p50 / reference"]) == 1.0
    assert _num(ref["per-round p50 / reference (median)"]) == 1.0
    # The per-round ratio is the median of one ratio per round: with a single round it is that
    # round's p50 over the reference's, as in the JSON figures.
    for name in CORE:
        if name != "reference: SDK span + counter + histogram":
            got = figures["overhead"]["contenders"][name]["round_ratio_median"]
            assert abs(_num(by_name[name]["per-round p50 / reference (median)"]) - got) < 0.01
    # The opt-in rows run only when named.
    assert not [n for n in by_name if n.startswith("tooltrace, telemetry off (inline), ")]
    # A registry call does real work: it cannot be as cheap as a bare function call.
    bare = _num(by_name["bare function call"]["p50 us"])
    assert _num(by_name["tooltrace, telemetry off (inline)"]["p50 us"]) > bare
    for name, row in by_name.items():
        if name not in CORE:
            assert row["p50 us"] != "-" or row["notes"].startswith("not available: "), name
    c = figures["overhead"]["contenders"]
    calls = 100 + 200 + 1  # warm-up, one round, the set-up check call
    for mode in ("inline", "thread"):
        full = c[f"tooltrace, everything on ({mode})"]
        # Every call's span really reached the exporter, and no sink dropped anything.
        assert full["exported_spans"] == calls, full
        assert full["dropped"] == 0


def test_overhead_runs_a_baseline_revision_beside_this_checkout(tmp_path: Path) -> None:
    """``--baseline REV`` extracts that revision's tooltrace and runs each tooltrace contender
    on it too, in the same rounds, driven by this checkout's contenders."""
    out = tmp_path / "figures.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TOOLTRACE_HOME", None)
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sections", "overhead", "--rounds", "1",
         "--round-calls", "50", "--warmup", "20", "--contenders", "everything on (inline)",
         "--baseline", "HEAD", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    _header, rows = _find(_tables(p.stdout), "Per-call cost around a no-op tool")
    assert [r[0] for r in rows] == [
        "tooltrace, everything on (inline)", "tooltrace, everything on (inline) [baseline]",
        "reference: SDK span + counter + histogram"]
    c = json.loads(out.read_text())["overhead"]["contenders"]
    mine, base = c["tooltrace, everything on (inline)"], c[
        "tooltrace, everything on (inline) [baseline]"]
    for fig in (mine, base):
        assert fig["p50_us"] > 0 and fig["exported_spans"] == 20 + 50 + 1 and fig["dropped"] == 0
    assert Path(mine["tooltrace"]) == ROOT / "tooltrace" / "__init__.py"
    assert not Path(base["tooltrace"]).is_relative_to(ROOT)
    assert list(tmp_path.glob("tooltrace-bench-run-*")) == []  # the extracted tree is gone


def test_a_baseline_that_is_neither_a_directory_nor_a_revision_is_refused(
    tmp_path: Path,
) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sections", "overhead", "--baseline",
         "no-such-revision-here"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert p.returncode != 0
    assert "--baseline no-such-revision-here: neither a directory nor a git revision" in p.stderr
    assert "### Per-call cost" not in p.stdout


def test_tail_rows_are_measured(run: Run) -> None:
    tables, figures = run
    header, rows = _find(tables, "Tail latency and what ran during the slowest calls")
    by_name = {r[0]: dict(zip(header, r, strict=True)) for r in rows}
    tail = figures["tail"]["contenders"]
    for name in ("reference: SDK span + counter + histogram",
                 "tooltrace, everything on (inline)", "tooltrace, everything on (thread)",
                 "tooltrace, everything on (inline, compaction off)"):
        row = by_name[name]
        p99, p999, top = (_num(row[c]) for c in ("p99 us", "p99.9 us", "max us"))
        assert 0 < p99 <= p999 <= top, (name, row)
        for col in header[5:10]:
            # Background CPU is summed over the process's threads, which may run on every core
            # at once (and is read just outside each call's own clock readings).
            top_share = 100 * (os.cpu_count() or 1) + 5 if "CPU share" in col else 100
            assert 0 <= _num(row[col]) <= top_share, (name, col)
        assert tail[name]["calls"] == 300
    assert _num(by_name["reference: SDK span + counter + histogram"]["p99.9 / reference p99.9"]) \
        == 1.0
    for mode in ("inline", "thread"):
        fig = tail[f"tooltrace, everything on ({mode})"]
        assert fig["dropped"] == 0
        # Each background slice seen while the calls were timed is recorded with its thread
        # CPU time, which cannot exceed its wall time.
        for t in fig["threads"].values():
            assert t["slices"] >= 1 and t["its_cpu_ms"] <= t["longest_wall_ms"] + 0.01
    _header, rows = _find(tables, "Background slices during the timed calls")
    assert {r[0] for r in rows} >= set(by_name) - {"bare function call"}


def test_ingest_acknowledges_every_record(run: Run) -> None:
    tables, figures = run
    header, rows = _find(tables, "Audit ingest: sustained writer throughput")
    for r in rows:
        row = dict(zip(header, r, strict=True))
        assert _num(row["records/s"]) > 0
        assert _num(row["step records/s"]) == pytest.approx(
            _num(row["records/s"]) * _num(row["steps/record"]), rel=0.01, abs=6)
        assert row["dropped"] == "0"
    ing = figures["ingest"]
    assert ing["one_core"]["records"] == 2000
    # At 5,000/s and at half the measured rate nothing may be lost; at the full rate, whatever
    # was not dropped was acknowledged.
    for pa in ing["paced_audit"]:
        assert pa["acked"] + pa["dropped"] == pa["records"], pa
    assert ing["paced_audit"][0]["dropped"] == 0
    pr = ing["paced_registry"]
    assert pr["audit_acked"] == pr["calls"] + 1
    header, rows = _find(tables, "Queue depth and drops at a paced rate")
    assert any(r[0].endswith("audit sink") for r in rows)
    for r in rows:
        _num(r[2])


def test_autopsy_finds_calls_in_generated_trail(run: Run) -> None:
    tables, figures = run
    header, rows = _find(tables, "Autopsy: find and render one call")
    row = dict(zip(header, rows[0], strict=True))
    assert row["calls"] == "5000"
    for col in header[1:]:
        assert _num(row[col]) >= 0, col
    size = figures["autopsy"]["sizes"][0]
    assert size["generate"]["calls"] == 5000
    assert size["lookup"]["heavy_modules"] == []  # the reader loads neither pyarrow nor pandas
    assert size["lookup"]["lookups"] >= 3


def test_live_times_each_command_live_compacted_and_with_compaction_off(run: Run) -> None:
    tables, figures = run
    header, rows = _find(tables, "The live trail: 5,000 calls")
    assert [r[0] for r in rows] == ["autopsy first", "autopsy middle", "autopsy last",
                                    "calls --limit 20", "stats", "floor"]
    for r in rows:
        for col in header[1:]:
            assert _num(r[header.index(col)]) > 0, (r[0], col)
    size = figures["live"]["sizes"][0]
    assert size["writer"]["calls"] == 5000 and size["writer"]["dropped"] == 0
    assert size["caught_up"]["caught_up"]
    compacted = size["state_compacted"]
    assert compacted["compacted"] == compacted["segments"] - 1  # all but the next's live one
    assert size["state_off"]["compacted"] == 0


def test_memory_reports_each_checkpoint(run: Run) -> None:
    tables, figures = run
    _header, rows = _find(tables, "Memory: RSS with everything on")
    assert [r[0] for r in rows] == ["200", "2000"]
    for r in rows:
        assert _num(r[1]) > 10  # MiB: a Python process with the sinks loaded
        # Where the memory is: pymalloc arenas hold at least the live objects' bytes.
        arenas, live = (float(x) for x in r[4].split(" / "))
        assert arenas >= live > 1
    assert figures["memory"]["dropped"] == {"metrics": 0, "logging": 0, "audit": 0,
                                            "tracing": 0}


def test_targets_table_has_a_verdict_per_target(run: Run) -> None:
    tables, _ = run
    _header, rows = _find(tables, "Targets")
    verdicts = {r[2].split(" ")[0] for r in rows}
    assert verdicts <= {"met", "MISSED", "not"}
    assert len(rows) >= 8


def test_run_leaves_no_temporary_homes(run: Run, scratch: Path) -> None:
    # Audit trails of a full run are gigabytes: every home the bench made must be gone.
    assert list(scratch.iterdir()) == []


def test_profile_section_reports_sinks_and_the_collector(tmp_path: Path) -> None:
    """`--sections profile` (not in the default run) prints the call-path profile, each sink's
    cost, and the garbage collector's share with everything on, with figures that add up."""
    out = tmp_path / "figures.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TOOLTRACE_HOME", None)
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sections", "profile", "--profile-calls",
         "3000", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    tables = _tables(p.stdout)
    _header, sinks = _find(tables, "Sink cost per record")
    assert {r[0] for r in sinks} == {"tracing", "metrics", "logging", "audit"}
    header, rows = _find(tables, "Cyclic garbage collection, everything on")
    assert header == ["generation", "collections", "calls per collection", "ms each (mean)",
                      "us per call"]
    by_gen = {r[0]: r for r in rows}
    assert list(by_gen) == ["gen0", "gen1", "gen2", "all"]
    gc_fig = json.loads(out.read_text())["profile_gc"]
    # 3,000 calls with every sink on leave records and spans waiting in queues: the young
    # generation is collected at least once, and the totals are the sum of the generations.
    assert gc_fig["gen0"]["collections"] >= 1 and gc_fig["cpu_us_per_call"] > 0
    assert int(by_gen["all"][1]) == sum(gc_fig[f"gen{g}"]["collections"] for g in range(3))
    total = sum(gc_fig[f"gen{g}"]["us_per_call"] for g in range(3))
    assert abs(_num(by_gen["all"][4]) - total) < 0.02


def test_policy_section_measures_toml_and_cedar_beside_the_reference(tmp_path: Path) -> None:
    """`--sections policy` (not in the default run) times the same call with no policy, the
    default policy, a 50-rule TOML file and the same rules in Cedar, beside the reference."""
    require_module("cedarpy", extra("cedar"))
    out = tmp_path / "figures.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TOOLTRACE_HOME", None)
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sections", "policy", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    header, rows = _find(_tables(p.stdout), "Policy step")
    assert header == ["contender", "call us", "policy step us", "evaluate us",
                      "call / reference"]
    assert [r[0] for r in rows] == ["no policy", "default policy", "50-rule TOML file",
                                    "50-rule Cedar set",
                                    "50-rule Cedar set, same arguments each call",
                                    "reference: SDK span + counter + histogram"]
    figs = {c["contender"]: c for c in json.loads(out.read_text())["policy"]["contenders"]}
    assert all(c["call_us"] > 0 for c in figs.values())
    assert figs["50-rule Cedar set"]["evaluate_us"] > 0
    assert figs["reference: SDK span + counter + histogram"]["vs_reference"] == 1.0


def test_mcp_section_measures_the_proxy_beside_a_relay_and_an_sdk_passthrough(
    tmp_path: Path,
) -> None:
    """`--sections mcp` (not in the default run) times a tools/call directly and through the
    line relay, the SDK-only passthrough and tooltrace's proxy (on its default loop and on the
    standard library's, and from a ``--baseline`` tree: a copy of this one's), each a real
    stdio process."""
    out = tmp_path / "figures.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TOOLTRACE_HOME", None)
    base = tmp_path / "base"
    shutil.copytree(ROOT / "tooltrace", base / "tooltrace",
                    ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sections", "mcp", "--json", str(out),
         "--baseline", str(base)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    header, rows = _find(_tables(p.stdout), "MCP tools/call round trip over stdio")
    assert header == ["path", "p50", "p90", "p99", "added at p50", "front process CPU per call"]
    assert [r[0] for r in rows] == ["direct", "relay", "sdk", "proxy", "proxy asyncio",
                                    "proxy [baseline]"]
    assert "- proxy / direct at p50: " in p.stdout
    assert "proxy against proxy [baseline] in the same rounds: p50 " in p.stdout
    for r in rows:
        assert 0 < _num(r[1]) <= _num(r[2]) <= _num(r[3])
    fig = json.loads(out.read_text())["mcp"]
    assert fig["added_p50_ms"] == pytest.approx(fig["proxy"]["50"] - fig["direct"]["50"])
    for key in ("proxy asyncio", "proxy [baseline]"):
        assert fig[key]["50"] > 0 and fig[key]["cpu_ms"] > 0


def test_mcp_instructions_count_what_one_call_costs_the_relay_and_the_proxy(
    tmp_path: Path,
) -> None:
    """``--mcp-instructions relay,proxy`` runs both under callgrind twice (few and many calls)
    and prints the instructions one call costs each: the proxy, which runs the whole pipeline,
    more than the relay, which copies lines."""
    require_binary("valgrind", "apt install valgrind")
    out = tmp_path / "figures.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TOOLTRACE_HOME", None)
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sections", "mcp", "--json", str(out),
         "--mcp-instructions", "relay,proxy"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    header, rows = _find(_tables(p.stdout), "MCP tools/call, CPU instructions per call")
    assert header == ["path", "instructions per call", "in the main thread", "over relay"]
    assert [r[0] for r in rows] == ["relay", "proxy"]
    figs = json.loads(out.read_text())["mcp_instructions"]
    fig, main = figs["per_call"], figs["main_thread"]
    assert 10_000 < fig["relay"] < fig["proxy"]
    assert _num(rows[1][3]) == pytest.approx(fig["proxy"] - fig["relay"], abs=1)
    # The relay does everything in its main thread; the proxy's sink workers run in threads of
    # their own, so its main thread does less than all of it.
    assert main["relay"] == pytest.approx(fig["relay"], rel=0.05)
    assert 0 < main["proxy"] < fig["proxy"]


def test_mcp_instructions_name_only_contenders_there_are() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sections", "mcp", "--mcp-instructions",
         "relay,nosuch"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "--mcp-instructions: no contender nosuch here (there are: relay, sdk, proxy)" in p.stderr
    assert "### MCP tools/call round trip" not in p.stdout  # refused before anything ran
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sections", "overhead", "--mcp-instructions"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--mcp-instructions is part of the mcp section" in p.stderr


def test_a_baseline_directory_without_tooltrace_is_refused(tmp_path: Path) -> None:
    for section in ("mcp", "overhead"):
        p = subprocess.run(
            [sys.executable, "-m", "bench", "--quick", "--sections", section, "--baseline",
             str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert p.returncode != 0
        assert f"--baseline {tmp_path}: no tooltrace/ in it" in p.stderr
        assert "### " not in p.stdout  # refused before anything ran


def test_sandbox_section_measures_each_backend_beside_the_unsandboxed_command(
    tmp_path: Path,
) -> None:
    """`--sections sandbox` (not in the default run) times one run_command with the sandbox
    off (the reference), in Landlock and in bubblewrap."""
    out = tmp_path / "figures.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TOOLTRACE_HOME", None)
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sections", "sandbox", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    header, rows = _find(_tables(p.stdout), "Command sandbox")
    assert header == ["contender", "ms per call", "sandbox ms", "call / off"]
    assert [r[0] for r in rows] == ["off (reference)", "landlock", "bwrap",
                                    "bwrap, network allowed", "bare subprocess"]
    figs = {c["contender"]: c for c in json.loads(out.read_text())["sandbox"]["contenders"]}
    assert all(c["ms"] > 0 for c in figs.values())
    assert figs["off (reference)"]["vs_off"] == 1.0
