"""Plain SQL over a compacted trail: every shipped query, run by plain DuckDB in a process that
imports nothing of tooltrace, over ``read_parquet`` views of the compacted files, gives the
answers of ``tooltrace query``, including a call's final outcome when its resolution was
compacted after the call itself."""

from __future__ import annotations

import datetime as dt
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from support.audit import make_record, run_real_workload

from tooltrace.audit import compact
from tooltrace.audit._sqlfiles import shipped_sql
from tooltrace.cli import main
from tooltrace.model import Step
from tooltrace.sinks import LateStep
from tooltrace.telemetry import AuditSink

#: The views of docs/audit/queries.md ("Plain SQL over the compacted files"), verbatim.
VIEWS = """
CREATE VIEW tool_calls AS
  SELECT * FROM read_parquet('{p}/calls/*.parquet', union_by_name = true);
CREATE VIEW tool_call_steps AS SELECT * FROM read_parquet('{p}/steps/*.parquet');
CREATE VIEW tool_call_intents AS SELECT * FROM read_parquet('{p}/intents/*.parquet');
"""

_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")

#: Runs in a fresh interpreter: plain DuckDB only; fails if tooltrace was imported.
PLAIN = """
import datetime as dt, json, sys
import duckdb
spec = json.load(sys.stdin)
con = duckdb.connect()
con.execute(spec["views"])
def norm(v):
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    return v
out = {}
for name, (sql, params) in spec["queries"].items():
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    out[name] = [dict(zip(cols, map(norm, r))) for r in cur.fetchall()]
assert not [m for m in sys.modules if m.startswith("tooltrace")]
print(json.dumps(out, default=str))
"""


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], str]:
    base = tmp_path_factory.mktemp("plain")
    (base / "ws").mkdir()
    home = base / "home"
    ids = run_real_workload(home, base / "ws")  # an unknown call resolved in the same batch
    # ... and one whose resolution reaches the trail only after its call was compacted.
    rec = make_record(random.Random(5), kind="unknown", run_id="run-late")
    sink = AuditSink(home)
    sink.emit(rec)
    sink.shutdown()
    assert compact(home).calls == len(ids) + 1
    sink = AuditSink(home)
    sink.emit_late(LateStep(rec.call_id, rec.run_id, rec.tool, Step(
        1000, "resolved", rec.started_at_us + 900_000, 0, "runtime", "failed", None)))
    sink.shutdown()
    compact(home, prune=True)
    return home, ids, rec.call_id


def _params(ids: dict[str, str]) -> dict[str, dict[str, str]]:
    return {"run_calls": {"run_id": "run-real"}, "call_timeline": {"call_id": ids["unknown"]}}


def test_compaction_writes_outcomes_and_an_empty_intents_table(
        compacted: tuple[Path, dict[str, str], str]) -> None:
    home, ids, late_id = compacted
    pdir = home / "audit" / "parquet"
    calls = pq.read_table(list((pdir / "calls").glob("*.parquet"))).to_pylist()
    by_id = {r["call_id"]: r for r in calls}
    assert len(by_id) == len(calls) == len(ids) + 1  # the rewritten file replaced the old one
    same = by_id[ids["unknown"]]
    assert (same["status"], same["outcome"]) == ("unknown", "ok") and same["resolved_at"]
    late = by_id[late_id]
    assert (late["status"], late["outcome"]) == ("unknown", "failed")
    assert "resolved later as failed" in late["resolution_summary"]
    assert by_id[ids["policy"]]["outcome"] == "rejected" and by_id[ids["ok"]]["outcome"] == "ok"
    intents = list((pdir / "intents").glob("*.parquet"))
    assert intents and sum(pq.read_metadata(f).num_rows for f in intents) == 0


def test_every_shipped_query_runs_on_plain_duckdb_with_the_same_answers(
        compacted: tuple[Path, dict[str, str], str]) -> None:
    home, ids, late_id = compacted
    given = _params(ids)
    queries = {q.name: (q.text, q.bind(given.get(q.name, {}))) for q in shipped_sql()}
    spec = {"views": VIEWS.format(p=home / "audit" / "parquet"), "queries": queries}
    proc = subprocess.run([sys.executable, "-c", PLAIN], input=orjson.dumps(spec),
                          capture_output=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    plain: dict[str, list[dict[str, Any]]] = orjson.loads(proc.stdout)
    assert set(plain) == {q.name for q in shipped_sql()}
    for name in plain:
        args = ["query", name, "--home", str(home), "--json"]
        for k, v in given.get(name, {}).items():
            args += ["-p", f"{k}={v}"]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, (name, res.output)
        ours = orjson.loads(res.output)
        assert sorted(map(_canon, ours)) == sorted(map(_canon, plain[name])), name
    unknown = {r["call_id"]: r for r in plain["unknown_outcomes"]}
    assert unknown[late_id]["outcome"] == "failed" and unknown[ids["unknown"]]["outcome"] == "ok"
    stats = {r["tool"]: r for r in plain["tool_stats"]}
    assert (stats["slow_write"]["unknown"], stats["slow_write"]["outcome_ok"]) == (1, 1)


def _canon(row: dict[str, Any]) -> str:
    """A row as comparable text: JSON columns parsed, floats rounded, times as text."""
    out = {}
    for k, v in row.items():
        if isinstance(v, str) and v[:1] in "[{":
            try:
                v = orjson.loads(v)
            except orjson.JSONDecodeError:
                pass
        if isinstance(v, float):
            v = round(v, 6)
        if isinstance(v, str) and _ISO.match(v):  # 19:00:00Z and 19:00:00.000000Z agree
            v = dt.datetime.fromisoformat(v[:-1]).isoformat()
        out[k] = v
    return orjson.dumps(out, option=orjson.OPT_SORT_KEYS).decode()


def test_files_from_before_the_outcome_columns_get_them(
        compacted: tuple[Path, dict[str, str], str], tmp_path: Path) -> None:
    import shutil

    home = tmp_path / "home"
    shutil.copytree(compacted[0], home)
    ids, late_id = compacted[1], compacted[2]
    cdir = home / "audit" / "parquet" / "calls"
    for f in cdir.glob("*.parquet"):  # as an older tooltrace wrote them
        tbl = pq.read_table(f)
        pq.write_table(tbl.drop_columns(["outcome", "resolved_at", "resolution_summary"]), f)
    compact(home)  # nothing new to compact: it only backfills
    rows = {r["call_id"]: r for f in cdir.glob("*.parquet")
            for r in pq.read_table(f).to_pylist()}
    assert len(rows) == len(ids) + 1
    assert rows[ids["unknown"]]["outcome"] == "ok" and rows[late_id]["outcome"] == "failed"
    assert rows[ids["params"]]["outcome"] == "rejected"
