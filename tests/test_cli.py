"""The CLI over a real audit trail: autopsy states the facts of every kind of call, list and
stats commands filter and agree with SQL, query runs files and text with parameters, exit codes
are 0 / 1 / 2, output never holds a secret or a host path, and `--help` stays light."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result
from support.audit import SECRET, make_record, run_real_workload

from tooltrace.cli import COMMANDS, main
from tooltrace.telemetry import AuditSink

TOOLTRACE = Path(sys.executable).parent / "tooltrace"


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    base = tmp_path_factory.mktemp("cli")
    (base / "ws").mkdir()
    return base / "home", run_real_workload(base / "home", base / "ws")


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    res = CliRunner().invoke(main, list(args), env=env)
    return res


def autopsy(trail: tuple[Path, dict[str, str]], kind: str, *extra: str) -> Result:
    home, ids = trail
    res = cli("autopsy", ids[kind], "--home", str(home), *extra)
    assert res.exit_code == 0, res.output
    assert str(home.parent) not in res.output  # never a host path
    assert SECRET not in res.output
    return res


def facts(res: Result) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in res.output.splitlines():
        if line[:20].strip() and not line.startswith(("─", "┏", "┃", "┡", "│", "└")):
            out.setdefault(line[:20].strip(), []).append(line[21:].strip())
    return out


def test_autopsy_ok_call(trail: tuple[Path, dict[str, str]]) -> None:
    f = facts(autopsy(trail, "ok"))
    assert f["tool"] == ["read_text  (source builtin, mode default)"]
    assert f["status"] == ["ok"] and f["run"] == ["run-real"]
    assert f["arguments"] == ['{"path":"notes/a.txt"}']
    assert f["schema (validate)"] == ["accept"]
    assert f["path"] == ["path -> notes/a.txt (within the workspace)"]
    assert f["policy"][0].startswith("allow (no rule objected")
    assert f["execution started"][0].startswith("yes, returned after ")
    assert "alpha" in f["result preview"][0]


def test_autopsy_parameter_reject(trail: tuple[Path, dict[str, str]]) -> None:
    f = facts(autopsy(trail, "params"))
    assert f["status"] == ["rejected at stage params"]
    assert f["schema (validate)"][0].startswith("reject: ") and "string" in f[
        "schema (validate)"][0]
    assert f["execution started"] == ["no (execution never started)"]


def test_autopsy_policy_deny(trail: tuple[Path, dict[str, str]]) -> None:
    f = facts(autopsy(trail, "policy"))
    assert f["status"] == ["rejected at stage policy"]
    assert f["policy"][0].startswith("deny by rule path_scope")
    assert f["path"] == ["path refused: outside_workspace"]
    assert f["execution started"] == ["no (execution never started)"]


def test_autopsy_approval(trail: tuple[Path, dict[str, str]]) -> None:
    denied = facts(autopsy(trail, "approval"))
    assert denied["policy"][0].startswith("ask by rule require_approval")
    (line,) = denied["approval"]
    assert re.fullmatch(r"deny by alice \(rule require_approval\): staging only"
                        r" \[arguments sha256 [0-9a-f]{12}\]", line), line
    assert denied["status"] == ["rejected at stage approval"]
    approved = facts(autopsy(trail, "approved"))
    assert approved["approval"][0].startswith("approve by alice")
    assert approved["status"] == ["ok"]


def test_autopsy_hook_modify_and_block(trail: tuple[Path, dict[str, str]]) -> None:
    mod = facts(autopsy(trail, "hook_modify"))
    (hook_line,) = [h for h in mod["hook"] if "cap_limit" in h]
    assert hook_line.startswith("pre cap_limit: modify (limit capped at 10) diff ")
    assert '"limit":[50,10]' in hook_line
    assert mod["schema (revalidate)"] == ["accept"]
    assert mod["arguments"] == ['{"query":"q","limit":50}']  # as the model gave them
    assert mod["arguments (final)"] == ['{"query":"q","limit":10}']  # as the tool got them
    blk = facts(autopsy(trail, "hook_block"))
    assert any(h.startswith("pre no_forbidden: block (this query is not allowed)")
               for h in blk["hook"])
    assert blk["status"] == ["rejected at stage hook"]


def test_autopsy_offload_failure_and_secret(trail: tuple[Path, dict[str, str]]) -> None:
    off = facts(autopsy(trail, "offload"))
    (art,) = off["artifact"]
    assert art.startswith("artifacts/") and "(75000 chars, sha256 " in art
    failed = facts(autopsy(trail, "failed"))
    assert failed["status"] == ["failed"] and failed["error type"] == ["FileNotFoundError"]
    assert failed["execution started"][0].startswith("yes, raised after ")
    sec = autopsy(trail, "secret", "--json")
    data = orjson.loads(sec.output)
    assert data["arguments"]["env"] == "staging" and data["arguments"]["token"] != SECRET


def test_autopsy_unknown_then_resolved(trail: tuple[Path, dict[str, str]]) -> None:
    f = facts(autopsy(trail, "unknown"))
    assert f["status"] == ["unknown"]  # what the call returned
    assert f["outcome"][0].startswith("ok (resolved later, at ")  # its final outcome
    assert f["deadline"][0].startswith("signal at +")
    assert f["stopped"][0].startswith("unconfirmed at +")  # it did not confirm it stopped
    assert any(r.startswith("ok at +") for r in f["resolved"])  # the late step
    assert f["resolution"][0].startswith("ok at ") and "resolved later as ok" in f[
        "resolution"][0]
    assert f["execution started"][0].startswith("yes, abandoned after ")
    assert f["error type"] == ["unconfirmed_deadline"]


def test_autopsy_json_has_every_step(trail: tuple[Path, dict[str, str]]) -> None:
    data = orjson.loads(autopsy(trail, "hook_modify", "--json").output)
    assert data["call"]["tool"] == "search" and data["execution_started"] is True
    steps = data["steps"]
    assert [s["step"] for s in steps][:4] == ["resolve", "validate", "policy", "pre_hook"]
    for s in steps:
        assert {"seq", "step", "started_at", "offset_ms", "elapsed_ms", "decider",
                "decision", "detail"} <= set(s)
        assert s["started_at"].endswith("Z")
    assert data["hooks"][0]["diff"] == {"changed": {"limit": [50, 10]}}


def test_autopsy_trace_link(tmp_path: Path) -> None:
    import random

    rec = make_record(random.Random(9), kind="ok")
    sink = AuditSink(tmp_path)
    sink.emit(rec)
    sink.shutdown()
    env = {"TOOLTRACE_TRACE_URL": "http://grafana.local/explore?trace={trace_id}"}
    res = cli("autopsy", rec.call_id, "--home", str(tmp_path), env=env)
    assert res.exit_code == 0
    assert f"http://grafana.local/explore?trace={rec.trace_id}" in res.output
    assert facts(res)["trace"][0].startswith(str(rec.trace_id))


def test_autopsy_prefix_ambiguity_and_unknown(trail: tuple[Path, dict[str, str]]) -> None:
    home, ids = trail
    cid = ids["failed"]
    unique = cli("autopsy", cid[:-6], "--home", str(home))
    assert unique.exit_code == 0 and cid in unique.output
    amb = cli("autopsy", cid[:4], "--home", str(home))
    assert amb.exit_code == 2 and "ambiguous" in amb.output
    missing = cli("autopsy", "ffffffff-ffff", "--home", str(home))
    assert missing.exit_code == 1 and "no call with id" in missing.output
    junk = cli("autopsy", "not-an-id!", "--home", str(home))
    assert junk.exit_code == 1
    nohome = cli("autopsy", cid, "--home", str(home.parent / "nothing-here"))
    assert nohome.exit_code == 1 and "no audit trail" in nohome.output
    assert str(home.parent) not in nohome.output
    usage = cli("autopsy")
    assert usage.exit_code == 2


def test_calls_filters(trail: tuple[Path, dict[str, str]]) -> None:
    home, ids = trail
    every = orjson.loads(cli("calls", "--home", str(home), "--json").output)
    assert {c["call_id"] for c in every} == set(ids.values())
    assert [c["call_id"] for c in every] == sorted(ids.values(), reverse=True)  # newest first
    rej = orjson.loads(cli("calls", "--home", str(home), "--status", "rejected", "--json").output)
    assert {c["call_id"] for c in rej} == {ids[k] for k in ("params", "policy", "approval",
                                                            "hook_block", "hook_modify")
                                           if k != "hook_modify"}
    deploy = orjson.loads(cli("calls", "--home", str(home), "--tool", "deploy", "--json").output)
    assert {c["tool"] for c in deploy} == {"deploy"} and len(deploy) == 3
    lim = orjson.loads(cli("calls", "--home", str(home), "--limit", "2", "--json").output)
    assert len(lim) == 2
    assert orjson.loads(cli("calls", "--home", str(home), "--run", "other", "--json").output) == []
    assert len(orjson.loads(cli("calls", "--home", str(home), "--since", "1h",
                                "--json").output)) == len(ids)
    future = cli("calls", "--home", str(home), "--since", "2999-01-01T00:00:00Z")
    assert future.exit_code == 0 and "no calls match" in future.output
    bad = cli("calls", "--home", str(home), "--since", "yesterday-ish")
    assert bad.exit_code == 2
    table = cli("calls", "--home", str(home), "--tool", "dump")
    # For people an id is its shortest prefix unique in the trail; --wide shows it whole.
    assert table.exit_code == 0 and ids["offload"][:13] in table.output
    assert ids["offload"] in cli("calls", "--home", str(home), "--tool", "dump", "--wide").output
    # No call of this trail names a principal: no empty user and agent columns.
    wide = cli("calls", "--home", str(home), "--wide")
    header = next(ln for ln in wide.output.splitlines() if "call_id" in ln)
    assert "tool" in header and "user" not in header and "agent" not in header


def test_stats(trail: tuple[Path, dict[str, str]]) -> None:
    home, _ = trail
    rows = {r["tool"]: r for r in orjson.loads(cli("stats", "--home", str(home),
                                                    "--json").output)}
    rt = rows["read_text"]
    assert (rt["calls"], rt["ok"]) == (3, 1)
    assert rt["param_reject_ratio"] == pytest.approx(1 / 3, abs=1e-4)
    assert rt["policy_reject_ratio"] == pytest.approx(1 / 3, abs=1e-4)
    assert rows["deploy"]["policy_reject_ratio"] == pytest.approx(1 / 3, abs=1e-4)
    assert rows["dump"]["offload_ratio"] == 1.0
    assert rows["slow_write"]["p95_ms"] >= rows["slow_write"]["p50_ms"] >= 150
    one = orjson.loads(cli("stats", "--home", str(home), "--tool", "dump", "--json").output)
    assert [r["tool"] for r in one] == ["dump"]
    human = cli("stats", "--home", str(home))
    assert human.exit_code == 0 and "params%" in human.output and "33.3%" in human.output
    assert rt["rejected"] == 2 and rt["hook_block_ratio"] == 0


def test_tools_shadow_report(tmp_path: Path) -> None:
    data = orjson.loads(cli("tools", "--home", str(tmp_path), "--json").output)
    names = {t["name"]: t for t in data["tools"]}
    assert names["read_text"]["source"] == "builtin" and names["read_text"]["visible"]
    human = cli("tools", "--home", str(tmp_path))
    assert human.exit_code == 0 and "read_text" in human.output


def test_query_names_files_text_and_parameters(trail: tuple[Path, dict[str, str]],
                                               tmp_path: Path) -> None:
    home, ids = trail
    listing = cli("query", "--list")
    assert listing.exit_code == 0 and "run_calls:" in listing.output and "$run_id" in (
        listing.output)
    named = orjson.loads(cli("query", "run_calls", "--param", "run_id=run-real", "--home",
                             str(home), "--json").output)
    assert [r["call_id"] for r in named] == list(ids.values())
    missing = cli("query", "run_calls", "--home", str(home))
    assert missing.exit_code == 2 and "missing parameter run_id" in missing.output
    unknown = cli("query", "offloads", "-p", "nope=1", "--home", str(home))
    assert unknown.exit_code == 2 and "unknown parameter" in unknown.output
    f = tmp_path / "mine.sql"
    f.write_text("-- Question: how many calls per status?\n"
                 "-- @param tool VARCHAR = NULL : only this tool\n"
                 "SELECT status, count(*) AS n FROM tool_calls\n"
                 "WHERE $tool IS NULL OR tool = $tool GROUP BY status ORDER BY status;\n")
    from_file = orjson.loads(cli("query", str(f), "-p", "tool=deploy", "--home", str(home),
                                 "--json").output)
    assert from_file == [{"status": "ok", "n": 2}, {"status": "rejected", "n": 1}]
    text = orjson.loads(cli("query", "SELECT count(*) AS n FROM tool_call_steps WHERE step = "
                            "'pre_hook' AND decision = 'modify'", "--home", str(home),
                            "--json").output)
    assert text == [{"n": 1}]
    bad = cli("query", "SELECT nope FROM tool_calls", "--home", str(home))
    assert bad.exit_code == 1 and "query failed" in bad.output
    assert str(home.parent) not in bad.output
    human = cli("query", "policy_denials", "--home", str(home))
    assert human.exit_code == 0 and "require_approval" in human.output and "alice" in (
        human.output)


def test_compact_then_autopsy_from_parquet(trail: tuple[Path, dict[str, str]],
                                           tmp_path: Path) -> None:
    import shutil

    home = tmp_path / "home"
    shutil.copytree(trail[0], home)
    res = cli("compact", "--home", str(home), "--prune", "--json")
    assert res.exit_code == 0
    data = orjson.loads(res.output)
    assert data["calls"] == len(trail[1]) and data["pruned"] is True
    assert all(not p.startswith("/") for p in data["files"])
    f = facts(cli("autopsy", trail[1]["unknown"], "--home", str(home)))
    assert f["status"] == ["unknown"]  # what the call returned
    assert f["outcome"][0].startswith("ok (resolved later, at ")  # its final outcome
    assert cli("verify", "--home", str(home)).exit_code == 0
    nothing = cli("compact", "--home", str(tmp_path / "nothing"))
    assert nothing.exit_code == 1 and not (tmp_path / "nothing").exists()


def test_help_is_lazy_and_lists_every_command() -> None:
    code = ("import sys; from click.testing import CliRunner; from tooltrace.cli import main;"
            "r = CliRunner().invoke(main, ['--help']); print(r.exit_code);"
            "print(r.output); print('duckdb' in sys.modules, 'pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60).stdout
    assert out.splitlines()[0] == "0"
    for name in COMMANDS:
        assert name in out
    assert out.rstrip().splitlines()[-1] == "False False"


def test_real_subprocess(trail: tuple[Path, dict[str, str]]) -> None:
    home, ids = trail
    env = {**os.environ, "NO_COLOR": "1", "TOOLTRACE_HOME": str(home)}
    ok = subprocess.run([str(TOOLTRACE), "autopsy", ids["approval"]], capture_output=True,
                        text=True, env=env, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "deny by alice" in ok.stdout and "\x1b[" not in ok.stdout
    assert str(home.parent) not in ok.stdout
    nf = subprocess.run([str(TOOLTRACE), "autopsy", "0123abcd"], capture_output=True,
                        text=True, env=env, timeout=60)
    assert nf.returncode == 1 and "no call with id" in nf.stderr
    usage = subprocess.run([str(TOOLTRACE), "calls", "--limit", "zero"], capture_output=True,
                           text=True, env=env, timeout=60)
    assert usage.returncode == 2
    js = subprocess.run([str(TOOLTRACE), "calls", "--json", "--status", "failed"],
                        capture_output=True, text=True, env=env, timeout=60)
    rows: list[dict[str, Any]] = orjson.loads(js.stdout)
    assert js.returncode == 0 and [r["call_id"] for r in rows] == [ids["failed"]]
