"""One call among a million archived calls, over S3: ``tooltrace autopsy --archive`` finds it,
and the bytes DuckDB reads (its EXPLAIN ANALYZE HTTP statistics) are a small fraction of a
full scan, because the archive stores call ids as sorted strings whose row-group min/max prune
the lookup. The same lookup on the Parquet UUID type reads far more: that is why the archive
keeps the string. chDB (embedded ClickHouse) counts and finds the same calls.

The million calls are generated in bulk by DuckDB in the archive's own layout (the columns of
``tool_calls`` and ``tool_call_steps``, hive ``day=`` folders, one file per day sorted by call
id, 16k-row groups), with time-ordered (UUIDv7-shaped) ids that match their start times.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from support.archive import ACCESS_KEY, SECRET_KEY, MotoS3, Postgres

from tooltrace.archive import ArchiveStore
from tooltrace.archive._connect import connect, parse_target
from tooltrace.archive._ship import _Lake
from tooltrace.audit._tables import schemas
from tooltrace.cli import main

DAYS = ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04")
PER_DAY = 262_144  # 4 days: 1,048,576 calls, 2 steps each


def _calls_sql(day_idx: int, day: str) -> str:
    # A time-ordered id: 48-bit millisecond time, version 7, random bits from a hash.
    ms, h = "ms", "h"
    cid = (f"printf('%08x-%04x-7%03x-%04x-%012x', {ms} // 65536, {ms} % 65536, {h} % 4096,"
           f" 32768 + ({h} // 4096) % 16384, ({h} // 67108864) % 281474976710656)")
    cols = schemas()["calls"].names
    exprs = {
        "call_id": cid,
        "run_id": "'run-' || (i % 1000)",
        "tool": "['read_text', 'write_text', 'run_command', 'git_status'][1 + i % 4]",
        "source": "'builtin'",
        "status": "CASE WHEN i % 10 = 0 THEN 'rejected' ELSE 'ok' END",
        "reject_stage": "CASE WHEN i % 10 = 0 THEN 'policy' END",
        "summary": "CASE WHEN i % 10 = 0 THEN 'denied by policy' ELSE 'ok' END",
        "error_type": "NULL::VARCHAR",
        "started_at": f"make_timestamp({ms} * 1000)",
        "elapsed_ms": "(i % 997) / 10.0",
        "execution_started": "i % 10 <> 0",
        "trace_id": "md5(h::VARCHAR)",
        "span_id": "left(md5(ms::VARCHAR), 16)",
        "parent_span_id": "NULL::VARCHAR",
        "trace_sampled": "true",
        "args_redacted": "'{\"path\": \"src/x.py\"}'",
        "result_preview": "'42 lines'",
        "artifact_path": "NULL::VARCHAR", "artifact_sha256": "NULL::VARCHAR",
        "artifact_chars": "NULL::BIGINT", "artifact_bytes": "NULL::BIGINT",
        "mode": "'default'", "tool_type": "'function'", "hook_modified": "false",
        "attributes": "NULL::VARCHAR", "writer": "'bulk'", "segment": f"'bulk.{day_idx:06d}'",
        "line": "i + 1",
        "parent_call_id": "NULL::VARCHAR", "depth": "0::INTEGER", "progress": "NULL::VARCHAR",
        "principal_user": "NULL::VARCHAR", "principal_agent": "NULL::VARCHAR",
        "principal_tenant": "NULL::VARCHAR", "principal_roles": "NULL::VARCHAR",
        "capability": "'read'", "effect": "'none'",
    }
    return ("SELECT " + ", ".join(f"{exprs[c]} AS {c}" for c in cols)
            + f" FROM (SELECT i, epoch_ms(DATE '{day}') + i * 329 AS ms,"
              f" hash(i + {day_idx * PER_DAY}) AS h FROM range({PER_DAY}) t(i))")


def _steps_sql() -> str:
    # unnest keeps the calls' order (call id, then seq): no sort needed.
    return ("SELECT call_id, seq::INTEGER AS seq, CASE seq WHEN 1 THEN 'validate'"
            " ELSE 'execute' END AS step, started_at + to_microseconds(seq * 10) AS started_at,"
            " 0.25 AS elapsed_ms, CASE seq WHEN 1 THEN 'schema' ELSE 'tool' END AS decider,"
            " 'accept' AS decision, NULL::VARCHAR AS detail"
            " FROM (SELECT *, unnest([1, 2]) AS seq FROM _day)")


@pytest.fixture(scope="module")
def archive(servers: tuple[MotoS3, Postgres]) -> Iterator[dict[str, Any]]:
    """A million calls (and two million steps) on S3 in the archive layout, both as plain
    Parquet and in a DuckLake catalog on PostgreSQL; one day also with the UUID type."""
    s3, pg = servers
    bucket = s3.bucket("scale")
    uri = f"s3://{bucket}/audit"
    lake = "ducklake:postgres:" + pg.createdb("scale")
    mp = pytest.MonkeyPatch()
    for k, v in s3.env().items():
        mp.setenv(k, v)
    # The shipper's own DuckLake connection: catalog, tables and options as ship makes them.
    backend = _Lake(parse_target(lake), f"s3://{bucket}/lake/")
    con = backend.con
    opts = "FORMAT parquet, COMPRESSION snappy, ROW_GROUP_SIZE 16384"
    picks = []
    for i, day in enumerate(DAYS):
        con.execute(f"CREATE OR REPLACE TEMP TABLE _day AS {_calls_sql(i, day)} ORDER BY call_id")
        con.execute(f"COPY _day TO '{uri}/calls/day={day}/bulk.parquet' ({opts})")
        con.execute(f"CREATE OR REPLACE TEMP TABLE _steps AS {_steps_sql()}")
        con.execute(f"COPY _steps TO '{uri}/steps/day={day}/bulk.parquet' ({opts})")
        con.execute("INSERT INTO lake.calls SELECT *, started_at::DATE AS day FROM _day")
        con.execute("INSERT INTO lake.steps SELECT *, started_at::DATE AS day FROM _steps")
        row = con.execute("SELECT call_id FROM _day LIMIT 1 OFFSET 100000").fetchone()
        assert row is not None
        picks.append(row[0])
        if i == 1:
            con.execute(f"COPY (SELECT * REPLACE (call_id::UUID AS call_id) FROM _day)"
                        f" TO 's3://{bucket}/uuid/calls.parquet' ({opts})")
            con.execute(f"COPY _day TO 's3://{bucket}/varchar/calls.parquet' ({opts})")
    backend.close()
    yield {"uri": uri, "lake": lake, "bucket": bucket, "picks": picks, "endpoint": s3.endpoint,
           "s3": s3}
    mp.undo()


def s3_client(archive: dict[str, Any]) -> Any:
    """A boto3 client of the archive's S3 server."""
    return archive["s3"].client()


_IN = re.compile(r"in:\s*([\d.]+)\s*(bytes|KiB|MiB|GiB)")
_UNIT = {"bytes": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def _bytes_in(con: Any, sql: str, params: dict[str, Any] | None = None) -> int:
    """Bytes DuckDB fetched over HTTP for one query (EXPLAIN ANALYZE's HTTPFS stats)."""
    plan = "\n".join(str(r[1]) for r in con.execute("EXPLAIN ANALYZE " + sql, params).fetchall())
    m = _IN.search(plan)
    assert m, plan[:2000]
    return int(float(m[1]) * _UNIT[m[2]])


@pytest.mark.parametrize("target", ["parquet", "ducklake"])
def test_autopsy_finds_one_call_among_a_million_over_s3_reading_a_small_fraction(
    archive: dict[str, Any], target: str,
) -> None:
    uri = archive["uri"] if target == "parquet" else archive["lake"]
    pick = archive["picks"][2]
    res = CliRunner().invoke(main, ["autopsy", pick[:24], "--archive", uri, "--json"])
    assert res.exit_code == 0, res.output
    data = orjson.loads(res.output)
    assert data["call_id"] == pick
    assert [s["step"] for s in data["steps"]] == ["validate", "execute"]
    assert data["call"]["tool"] in ("read_text", "write_text", "run_command", "git_status")
    text = CliRunner().invoke(main, ["autopsy", pick, "--archive", uri])
    assert text.exit_code == 0 and pick in text.output
    missing = CliRunner().invoke(main, ["autopsy", "0000", "--archive", uri])
    assert missing.exit_code == 1
    recent = CliRunner().invoke(main, ["calls", "--archive", uri, "--limit", "3", "--json"])
    assert recent.exit_code == 0 and len(orjson.loads(recent.output)) == 3

    with ArchiveStore(uri) as store:
        con = store.con
        # Measure cold: no object data cached from an earlier query.
        con.execute("SET enable_external_file_cache = false")
        assert store.counts()["calls"] == len(DAYS) * PER_DAY
        lookup = (_bytes_in(con, "SELECT * FROM tool_calls WHERE call_id = $c", {"c": pick})
                  + _bytes_in(con, "SELECT * FROM tool_call_steps WHERE call_id = $c",
                              {"c": pick}))
    # A full scan reads every byte of every calls and steps file.
    prefix = "audit/" if target == "parquet" else "lake/"
    listing = s3_client(archive).list_objects_v2(Bucket=archive["bucket"], Prefix=prefix)
    full = sum(o["Size"] for o in listing["Contents"])
    print(f"{target}: lookup read {lookup} bytes of {full} ({lookup / full:.4%})")
    assert full > 20 * 1024 * 1024
    assert lookup * 30 < full, (lookup, full)


def test_string_call_ids_prune_row_groups_where_the_uuid_type_does_not(
    archive: dict[str, Any],
) -> None:
    bucket, pick = archive["bucket"], archive["picks"][1]
    con = connect(parse_target(f"s3://{bucket}/x"))
    con.execute("SET enable_external_file_cache = false")
    try:
        cols = "SELECT call_id, tool, status FROM"
        as_str = _bytes_in(con, f"{cols} 's3://{bucket}/varchar/calls.parquet'"
                                " WHERE call_id = $c", {"c": pick})
        as_uuid = _bytes_in(con, f"{cols} 's3://{bucket}/uuid/calls.parquet'"
                                 " WHERE call_id = $c::UUID", {"c": pick})
        found = con.execute(f"SELECT count(*) FROM 's3://{bucket}/uuid/calls.parquet'"
                            " WHERE call_id = $c::UUID", {"c": pick}).fetchone()
    finally:
        con.close()
    assert found == (1,)
    print(f"one lookup read {as_str} bytes (string) vs {as_uuid} bytes (UUID)")
    assert as_str * 4 < as_uuid, (as_str, as_uuid)


def test_chdb_counts_and_finds_the_same_calls(archive: dict[str, Any]) -> None:
    import chdb

    src = (f"s3('{archive['endpoint']}/{archive['bucket']}/audit/calls/**/*.parquet',"
           f" '{ACCESS_KEY}', '{SECRET_KEY}', 'Parquet')")
    out = chdb.query(f"SELECT count(), uniqExact(call_id), min(day), max(day) FROM {src}"
                     " SETTINGS use_hive_partitioning = 1", "JSONCompact")
    row = orjson.loads(str(out))["data"][0]
    assert [int(row[0]), int(row[1])] == [len(DAYS) * PER_DAY] * 2
    assert [str(row[2]), str(row[3])] == [DAYS[0], DAYS[-1]]
    for pick in archive["picks"]:
        got = chdb.query(f"SELECT call_id, day FROM {src} WHERE call_id = '{pick}'"
                         " SETTINGS use_hive_partitioning = 1", "JSONCompact")
        rows = orjson.loads(str(got))["data"]
        assert len(rows) == 1 and rows[0][0] == pick
