"""Every shipped post-mortem query, run over a real workload driven through the registry (and
again after compaction into Parquet, with the same answers)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.audit import run_real_workload, workload

from tooltrace.audit import AuditStore, compact
from tooltrace.audit._sqlfiles import find_sql, shipped_sql
from tooltrace.telemetry import AuditSink

REPO_QUERIES = Path(__file__).resolve().parents[1] / "queries"


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    base = tmp_path_factory.mktemp("q")
    (base / "ws").mkdir()
    ids = run_real_workload(base / "home", base / "ws")
    # Plus a busier synthetic background, so filters have something to filter out.
    sink = AuditSink(base / "home")
    for r in workload(300, seed=11):
        sink.emit(r)
    sink.shutdown()
    return base / "home", ids


@pytest.fixture(scope="module")
def store(trail: tuple[Path, dict[str, str]]) -> Iterator[AuditStore]:
    with AuditStore(trail[0]) as s:
        yield s


def run(store: AuditStore, name: str, **params: str) -> list[dict[str, Any]]:
    q = find_sql(name)
    assert q is not None, name
    return store.sql(q.text, q.bind(params)).dicts()


def test_at_least_eight_documented_queries_ship() -> None:
    files = shipped_sql()
    assert len(files) >= 8
    assert {f.name for f in files} >= {
        "rejections_by_stage", "latency_by_tool", "unknown_outcomes", "hook_modifications",
        "run_calls", "offloads", "slowest_calls", "policy_denials"}
    for f in files:
        assert f.question.endswith("?"), f.name
        used = set(re.findall(r"\$([A-Za-z_]\w*)", "\n".join(
            line.split("--")[0] for line in f.text.splitlines())))
        assert used == {p.name for p in f.params}, f.name  # every parameter documented
        assert (REPO_QUERIES / f"{f.name}.sql").read_text() == f.text


def test_rejections_by_tool_and_stage(store: AuditStore) -> None:
    rows = [r for r in run(store, "rejections_by_stage") if r["tool"] in
            ("read_text", "deploy", "search")]
    got = {(r["tool"], r["reject_stage"]): r["rejections"] for r in rows}
    assert got[("read_text", "params")] >= 1 and got[("read_text", "policy")] >= 1
    assert got[("deploy", "approval")] == 1 and got[("search", "hook")] == 1
    for r in rows:
        assert 0 < r["share"] <= 1 and r["rejections"] <= r["calls"]


def test_latency_per_tool_over_time(store: AuditStore) -> None:
    rows = run(store, "latency_by_tool", bucket="1 day")
    slow = [r for r in rows if r["tool"] == "slow_write"]
    assert len(slow) == 1 and slow[0]["p50_ms"] >= 150  # it ran into its 150 ms deadline
    for r in rows:
        assert r["p50_ms"] <= r["p95_ms"] <= r["max_ms"]
    total = sum(r["calls"] for r in rows)
    assert total == store.counts()["calls"]
    only_ok = run(store, "latency_by_tool", bucket="1 day", status="ok")
    assert sum(r["calls"] for r in only_ok) < total


def test_unknown_outcomes_and_their_late_resolution(store: AuditStore,
                                                    trail: tuple[Path, dict[str, str]]) -> None:
    rows = {r["call_id"]: r for r in run(store, "unknown_outcomes")}
    real = rows[trail[1]["unknown"]]
    assert real["tool"] == "slow_write" and real["outcome"] == "ok"
    assert real["resolved_at"] is not None and "resolved later as ok" in real["resolution_summary"]
    assert real["events"].startswith("execute:") and "deadline:" in real["events"]
    assert "stopped:unconfirmed" in real["events"] and real["events"].endswith("resolved:ok")
    # Rejected calls never started, so they are never here.
    assert trail[1]["policy"] not in rows


def test_hook_modifications_with_their_diffs(store: AuditStore,
                                             trail: tuple[Path, dict[str, str]]) -> None:
    rows = run(store, "hook_modifications", hook="cap_limit")
    mine = [r for r in rows if r["call_id"] == trail[1]["hook_modify"]]
    assert len(mine) == 1
    r = mine[0]
    assert (r["tool"], r["phase"], r["hook"], r["status"]) == ("search", "pre_hook",
                                                               "cap_limit", "ok")
    diff = orjson.loads(r["diff"])
    assert "limit" in orjson.dumps(diff).decode() and "50" in orjson.dumps(diff).decode()
    assert r["reason"] == "limit capped at 10"
    assert run(store, "hook_modifications", hook="no_such_hook") == []


def test_all_calls_of_one_run_in_order(store: AuditStore,
                                       trail: tuple[Path, dict[str, str]]) -> None:
    rows = run(store, "run_calls", run_id="run-real")
    assert [r["n"] for r in rows] == list(range(1, len(trail[1]) + 1))
    assert [r["call_id"] for r in rows] == list(trail[1].values())  # the order they ran in
    assert rows[0]["steps"].startswith("resolve:accept")
    with pytest.raises(ValueError, match="missing parameter run_id"):
        run(store, "run_calls")


def test_offloads_with_sizes(store: AuditStore, trail: tuple[Path, dict[str, str]]) -> None:
    rows = run(store, "offloads", tool="dump")
    assert [r["call_id"] for r in rows] == [trail[1]["offload"]]
    r = rows[0]
    assert r["artifact_chars"] == 75_000 and r["artifact_bytes"] == 75_000
    assert len(r["artifact_sha256"]) == 64 and r["artifact_path"].startswith("artifacts/")
    assert 0 < r["preview_chars"] < 75_000
    assert len(run(store, "offloads", limit="3")) == 3


def test_slowest_calls(store: AuditStore, trail: tuple[Path, dict[str, str]]) -> None:
    rows = run(store, "slowest_calls", limit="5", tool="slow_write")
    assert [r["call_id"] for r in rows] == [trail[1]["unknown"]]
    assert rows[0]["slowest_step"] == "execute"
    top = run(store, "slowest_calls", limit="10")
    assert len(top) == 10
    assert [r["elapsed_ms"] for r in top] == sorted((r["elapsed_ms"] for r in top), reverse=True)


def test_policy_denials_by_rule_and_approver(store: AuditStore) -> None:
    rows = run(store, "policy_denials")
    by = {(r["stage"], r["rule"], r["approver"]): r for r in rows}
    assert by[("policy", "path_scope", None)]["tools"] == ["read_text"]
    alice = by[("approval", "require_approval", "alice")]
    assert alice["denials"] == 1 and alice["tools"] == ["deploy"]
    assert alice["first_at"] <= alice["last_at"]


def test_tool_stats_match_the_recording_rule_definitions(store: AuditStore) -> None:
    rows = {r["tool"]: r for r in run(store, "tool_stats")}
    rt = rows["read_text"]
    n, params, policy, ok, offl = store.sql(
        "SELECT count(*), count(*) FILTER (WHERE reject_stage='params'), count(*) FILTER "
        "(WHERE reject_stage IN ('policy','approval')), count(*) FILTER (WHERE status='ok'), "
        "count(*) FILTER (WHERE status='ok' AND artifact_path IS NOT NULL) FROM tool_calls "
        "WHERE tool='read_text'").rows[0]
    assert rt["calls"] == n and rt["ok"] == ok
    assert rt["param_reject_ratio"] == pytest.approx(params / n, abs=1e-4)
    assert rt["policy_reject_ratio"] == pytest.approx(policy / n, abs=1e-4)
    assert rt["offload_ratio"] == pytest.approx(offl / ok if ok else 0, abs=1e-4)
    assert rows["dump"]["offload_ratio"] == 1.0
    assert rows["deploy"]["policy_reject_ratio"] > 0


def test_call_timeline(store: AuditStore, trail: tuple[Path, dict[str, str]]) -> None:
    rows = run(store, "call_timeline", call_id=trail[1]["hook_modify"])
    steps = [(r["step"], r["decision"]) for r in rows]
    assert steps[0] == ("resolve", "accept") and ("pre_hook", "modify") in steps
    assert steps.index(("pre_hook", "modify")) < steps.index(("execute", "returned"))
    offsets = [r["offset_ms"] for r in rows]
    assert offsets == sorted(offsets) and offsets[0] >= 0


def test_orphan_intents_empty_without_strict_mode(store: AuditStore) -> None:
    assert run(store, "orphan_intents") == []


def test_same_answers_from_parquet_after_compaction(trail: tuple[Path, dict[str, str]],
                                                   tmp_path: Path) -> None:
    home = tmp_path / "copy"
    shutil.copytree(trail[0], home)
    params = {"run_calls": {"run_id": "run-real"},
              "call_timeline": {"call_id": trail[1]["hook_modify"]}}

    def answers() -> dict[str, Any]:
        with AuditStore(home) as s:
            return {q.name: s.sql(q.text + "", q.bind(params.get(q.name, {}))).rows
                    for q in shipped_sql()}

    before = answers()
    res = compact(home, prune=True)
    assert res.calls == 311 and res.segments >= 2 and res.pruned
    assert not list((home / "audit" / "segments").glob("*.jsonl"))
    with AuditStore(home) as s:
        assert s.segments == 0 and s.parquet_files >= 2
    after = answers()
    # Row order of ties may differ between sources; compare as sorted lists.
    for name in before:
        assert sorted(map(repr, before[name])) == sorted(map(repr, after[name])), name
