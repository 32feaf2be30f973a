"""What-if: a trail written by the demo, replayed against a tightening and a loosening policy;
observe mode counted by a real Prometheus scrape."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from tooltrace import create_registry
from tooltrace.audit import AuditStore
from tooltrace.cli import main
from tooltrace.demo import run_demo
from tooltrace.model import ToolCall
from tooltrace.telemetry.metrics import MetricsSink, serve_metrics

TIGHT = """
[approval]
tools = ["write_text"]

[[rules]]
id = "no-notes-reads"
tools = ["read_text"]
paths = ["notes/**"]

[[rules]]
id = "no-python"
tools = ["run_command"]
args = { argv = "^python" }
"""
LOOSE = "[builtin.denied_command]\nenabled = false\n"


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("whatif") / "home"
    run_demo(home=home)
    return home


def _test(trail: Path, tmp_path: Path, text: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    f = tmp_path / "candidate.toml"
    f.write_text(text)
    res = CliRunner().invoke(main, ["policy", "test", str(f), "--home", str(trail), "--since",
                                    "7d", "--tools", "tooltrace.demo:DEMO_TOOLS", "--json"])
    return res.exit_code, orjson.loads(res.output)


def _groups(d: dict, key: str) -> list[tuple[str, str, str, str, int]]:  # type: ignore[type-arg]
    return [(c["tool"], c["rule"], c["before"], c["after"], c["count"]) for c in d[key]]


def test_a_tightening_policy_reports_what_it_would_deny(trail: Path, tmp_path: Path) -> None:
    code, d = _test(trail, tmp_path, TIGHT)
    assert code == 1
    with AuditStore(trail) as store:
        calls = store.sql("SELECT count(*) FROM tool_calls").rows[0][0]
        decided = store.sql(
            "SELECT count(DISTINCT call_id) FROM tool_call_steps WHERE step = 'policy'"
            " AND decider NOT IN ('policy:path_scope', 'policy:hook_scope')").rows[0][0]
    assert (d["calls"], d["replayed"]) == (calls, decided)
    assert (d["changed"], d["undecidable"]) == (3, 1)
    assert _groups(d, "changes") == [
        ("read_text", "no-notes-reads", "allow", "deny", 2),
        ("run_command", "no-python", "allow", "deny", 1),
    ]
    # The demo's echo of a fake key is stored redacted: the argument rule cannot say.
    assert _groups(d, "undecidable_calls") == [
        ("run_command", "no-python", "allow", "undecidable", 1)]
    assert all(len(c["examples"]) == c["count"] for c in d["changes"])


def test_a_loosening_policy_reports_what_it_would_allow(trail: Path, tmp_path: Path) -> None:
    code, d = _test(trail, tmp_path, LOOSE)
    assert code == 1
    assert (d["changed"], d["undecidable"]) == (3, 0)
    assert _groups(d, "changes") == [
        ("run_command", "denied_command", "deny", "allow", 1),
        ("write_text", "writes_need_approval", "ask", "allow", 2),
    ]


def test_the_demo_policy_itself_changes_nothing(trail: Path, tmp_path: Path) -> None:
    same = '[approval]\ntools = ["write_text"]\n'
    code, d = _test(trail, tmp_path, same)
    # Only the rule's name differs (approval, not writes_need_approval): no decision changes.
    assert (code, d["changed"], d["undecidable"]) == (0, 0, 0)


def test_observed_decisions_are_counted_by_a_real_prometheus_scrape(tmp_path: Path) -> None:
    from support.prom import Prometheus

    f = tmp_path / "p.toml"
    f.write_text('[[rules]]\nid = "no-echo"\ntools = ["run_command"]\n'
                 'args = { argv = "^echo" }\nmode = "observe"\n')
    sink = MetricsSink()
    ws = tmp_path / "ws"
    ws.mkdir()
    reg = create_registry(ws, home=tmp_path / "h", policy_file=f, metrics=False,
                          logging=False, audit=False, extra_sinks=(sink,))
    try:
        for i in range(5):
            assert reg.call(ToolCall("run_command", {"argv": ["echo", str(i)]})).ok
        assert reg.call(ToolCall("run_command", {"argv": ["true"]})).ok
        with serve_metrics(0, registry=sink) as srv, Prometheus([f"127.0.0.1:{srv.port}"]) as prom:
            prom.wait_for_up()
            q = ('sum(tooltrace_policy_observed_total{tool="run_command",rule="no-echo",'
                 'decision="observe_deny"})')
            prom.wait_until(q, lambda v: v == 5)
            assert prom.value('count(tooltrace_policy_observed_total)') == 1
    finally:
        reg.shutdown()


def test_the_bench_trail_replays_to_the_counts_its_rules_imply(tmp_path: Path) -> None:
    from bench.autopsy import generate
    from bench.whatif import CANDIDATE, replay_trail

    n = 3000
    generate(tmp_path / "home", n)
    cand = tmp_path / "candidate.toml"
    cand.write_text(CANDIDATE)
    report, _seconds = replay_trail(tmp_path / "home", cand)
    # The generator's principals, tools and arguments, decided by hand in call order.
    expect: dict[str, int] = {}
    per_run: dict[int, int] = {}
    for i in range(n):
        tool, intern = i % 8, i % 10 == 0
        if intern and tool in (0, 2):
            rule = "interns-no-tool-0-or-2"
        elif tool == 5 and i % 1000 == 7:
            rule = "no-value-7"
        elif per_run.get(i // 1000, 0) >= 900:
            rule = "calls-per-run"
        else:
            per_run[i // 1000] = per_run.get(i // 1000, 0) + 1
            continue
        expect[rule] = expect.get(rule, 0) + 1
    got: dict[str, int] = {}
    for c in report["changes"]:
        got[c["rule"]] = got.get(c["rule"], 0) + c["count"]
    assert got == expect
    assert report["calls"] == report["replayed"] == n
    # A limit per minute is counted call by call in Python, not in SQL: with one that never
    # denies, every count and example is the same.
    roomy = cand.with_name("roomy.toml")
    roomy.write_text(CANDIDATE + '[[limits]]\nid = "roomy"\nper = "principal"\n'
                                 "per_minute = 1000000\n")
    assert replay_trail(tmp_path / "home", roomy)[0] == report
    # Lowered below the rate, it denies every call the rules let through but the first 3 of
    # each principal (user-N at acme or globex): the trail spans 30 s, calls 10 ms apart.
    roomy.write_text(roomy.read_text().replace("1000000", "3"))
    tight = replay_trail(tmp_path / "home", roomy)[0]
    assert sum(c["count"] for c in tight["changes"] if c["rule"] == "roomy") == n - sum(
        expect.values()) - 3 * len({(i % 20, i % 3 == 0) for i in range(n)})


def test_the_archive_replays_like_the_home(trail: Path, tmp_path: Path) -> None:
    from tooltrace.archive import ship

    archive = tmp_path / "archive"
    assert ship(trail, str(archive)).shipped
    f = tmp_path / "candidate.toml"
    f.write_text(TIGHT)
    args = ["policy", "test", str(f), "--tools", "tooltrace.demo:DEMO_TOOLS", "--json"]
    from_home = CliRunner().invoke(main, [*args, "--home", str(trail)])
    from_archive = CliRunner().invoke(main, [*args, "--archive", str(archive)])
    assert from_archive.exit_code == from_home.exit_code == 1
    home_d, arch_d = orjson.loads(from_home.output), orjson.loads(from_archive.output)
    assert arch_d["changes"] == home_d["changes"] and arch_d["changed"] == 3
