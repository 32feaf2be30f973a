"""The audit archive's plain Parquet target on a real S3 server (moto on loopback) and on a
local directory: exactly-once shipping, readers that match the local trail, verification that
spans shipped and local records, the background shipper, and secrets kept out of errors."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from support.archive import SECRET_KEY, MotoS3
from support.audit import workload
from support.otlp import closed_port

from tooltrace import ToolCall, ToolRegistry, tool
from tooltrace.archive import (
    ArchiveError,
    ArchiveShipper,
    ArchiveStore,
    parse_target,
    ship,
    verify_archive,
)
from tooltrace.archive._connect import s3_secret_sql, scrub
from tooltrace.audit import AuditStore
from tooltrace.audit._sqlfiles import find_sql
from tooltrace.audit._verify import verify_audit
from tooltrace.exceptions import ConfigurationError
from tooltrace.model import Step
from tooltrace.telemetry import AuditSink


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    server = MotoS3().start()
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = s3.env()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@dataclass(frozen=True)
class _Late:
    call_id: str
    run_id: str
    tool: str
    step: Step


def _fill(home: Path, n: int, *, seed: int = 7, seg_bytes: int = 40_000) -> list[str]:
    """Write ``n`` calls (every kind, plus one late resolution) into ``home``; sealed."""
    sink = AuditSink(home, segment_max_bytes=seg_bytes, group_interval_ms=1)
    ids = []
    for rec in workload(n, seed=seed):
        sink.emit(rec)
        ids.append(rec.call_id)
        if rec.status == "unknown" and len(ids) < 20:
            at = rec.started_at_us + rec.elapsed_us + 1000
            sink.emit_late(_Late(rec.call_id, rec.run_id, rec.tool,
                                 Step(99, "resolved", at, 0, "runtime", "ok", None)))
        if len(ids) % 100 == 0:
            # Segments rotate between batches: flushing makes batches (and so several sealed
            # segments) however fast the writer drains its queue.
            sink.flush()
    sink.shutdown()
    return ids


def test_archive_uris_parse_to_targets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    t = parse_target("ducklake:postgres:dbname=a host=127.0.0.1")
    assert (t.kind, t.location) == ("ducklake", "ducklake:postgres:dbname=a host=127.0.0.1")
    assert parse_target("s3://bucket/a/b/").location == "s3://bucket/a/b"
    assert parse_target("s3a://bucket/x").location == "s3://bucket/x"
    assert parse_target(f"file://{tmp_path}/arch").location == str(tmp_path / "arch")
    assert parse_target(str(tmp_path)).kind == "parquet"
    assert not parse_target(str(tmp_path)).remote
    monkeypatch.setenv("TOOLTRACE_ARCHIVE", "s3://from-env/p")
    assert parse_target(None).location == "s3://from-env/p"
    monkeypatch.delenv("TOOLTRACE_ARCHIVE")
    for bad in ("", "ducklake:", "s3:///nobucket", "ftp://user:pw@host/x"):
        with pytest.raises(ConfigurationError) as info:
            parse_target(bad)
        assert "pw@" not in str(info.value)


def test_scrub_removes_every_secret_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "AbCdEf0123456789secret")
    monkeypatch.setenv("PGPASSWORD", "pg-env-pass-42")
    text = ("host=x password=hunter2 user=u; postgresql://u:pw-in-url@h/db; "
            "KEY_ID 'AKIA1' SECRET 'AbCdEf0123456789secret' and pg-env-pass-42; "
            "password='quoted pass'")
    out = scrub(text)
    for secret in ("hunter2", "pw-in-url", "AbCdEf0123456789secret", "pg-env-pass-42",
                   "quoted pass", "AKIA1"):
        assert secret not in out
    assert "host=x" in out and "postgresql://u:***@h/db" in out


def test_s3_secret_comes_from_the_environment() -> None:
    sql = s3_secret_sql({"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "S'X",
                         "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                         "AWS_DEFAULT_REGION": "eu-west-1"})
    assert sql is not None
    assert "KEY_ID 'AK'" in sql and "SECRET 'S''X'" in sql and "REGION 'eu-west-1'" in sql
    assert "ENDPOINT '127.0.0.1:9000'" in sql and "USE_SSL false" in sql
    assert "URL_STYLE 'path'" in sql
    # Nothing in the environment: DuckDB's own (persistent) secrets apply.
    assert s3_secret_sql({}) is None
    https = s3_secret_sql({"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "S",
                           "AWS_ENDPOINT_URL_S3": "https://s3.example:443"})
    assert https is not None and "USE_SSL true" in https


def test_ship_to_s3_parquet_exactly_once_and_readers_match_local(
    s3: MotoS3, s3_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    ids = _fill(home, 900)
    bucket = s3.bucket("plain-one")
    uri = f"s3://{bucket}/audit"
    first = ship(home, uri)
    assert first.calls == len(ids) and first.already == 0 and len(first.shipped) >= 3
    again = ship(home, uri)
    assert again.shipped == () and again.already == len(first.shipped)

    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket)["Contents"]]
    seg_keys = {e.segment for e in first.shipped}
    assert {k.rsplit("/", 1)[-1][:-5] for k in keys if k.startswith("audit/_shipped/")} == \
        seg_keys
    calls_keys = [k for k in keys if k.startswith("audit/calls/day=")]
    assert calls_keys and all(k.endswith(".parquet") for k in calls_keys)

    # The call id is a plain string column (row groups prune by min/max), sorted per file.
    obj = s3.client().get_object(Bucket=bucket, Key=calls_keys[0])["Body"].read()
    local = tmp_path / "one.parquet"
    local.write_bytes(obj)
    pf = pq.ParquetFile(local)
    assert str(pf.schema_arrow.field("call_id").type) == "string"
    assert pf.metadata.schema.column(0).logical_type.type == "STRING"
    col = pf.read(columns=["call_id"])["call_id"].to_pylist()
    assert col == sorted(col) and "day" not in pf.schema_arrow.names

    with AuditStore(home) as loc, ArchiveStore(uri) as arc:
        assert arc.counts() == loc.counts()
        q = find_sql("tool_stats")
        assert q is not None
        assert arc.sql(q.text, q.bind({})).rows == loc.sql(q.text, q.bind({})).rows
        ids_arc = {r[0] for r in arc.sql("SELECT call_id FROM tool_calls").rows}
        assert ids_arc == set(ids)
        resolved = arc.sql("SELECT count(*) FROM tool_calls WHERE resolved_at IS NOT NULL")
        assert resolved.rows[0][0] >= 1
        pick = ids[len(ids) // 2]
        a, b = arc.call(pick[:30]), loc.call(pick)
        assert a.call_id == pick and a.record == b.record and a.steps == b.steps
        days = arc.con.execute(
            f"SELECT DISTINCT day FROM read_parquet('{uri}/calls/*/*.parquet',"
            " hive_partitioning = true)").fetchall()
        assert len(days) >= 1


def test_reship_after_a_crash_between_data_and_marker_adds_nothing(
    s3: MotoS3, s3_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    ids = _fill(home, 600, seed=11)
    bucket = s3.bucket("plain-crash")
    uri = f"s3://{bucket}/a"
    res = ship(home, uri)
    # As if the shipper died after writing two segments' Parquet but before their markers.
    lost = [e.segment for e in res.shipped[:2]]
    for seg in lost:
        s3.client().delete_object(Bucket=bucket, Key=f"a/_shipped/{seg}.json")
    again = ship(home, uri)
    assert sorted(e.segment for e in again.shipped) == sorted(lost)
    with ArchiveStore(uri) as arc:
        n, distinct = arc.sql("SELECT count(*), count(DISTINCT call_id) FROM tool_calls").rows[0]
        steps = arc.counts()["steps"]
    with AuditStore(home) as loc:
        assert steps == loc.counts()["steps"]
    assert n == distinct == len(ids)


def test_verify_spans_shipped_and_local_segments_and_finds_archive_edits(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    archive = tmp_path / "archive"
    shipped_ids = _fill(home, 500, seed=3)
    res = ship(home, str(archive), prune=True)
    assert res.pruned == len(res.shipped) >= 2
    assert not any(p.name.endswith(".jsonl") and ".live" not in p.name
                   for p in (home / "audit" / "segments").iterdir())
    local_ids = _fill(home, 200, seed=4)  # a new writer, not shipped yet

    # The local trail alone still verifies: pruned segments keep their chain heads.
    assert verify_audit(home / "audit", (home / "audit.key").read_bytes().strip()).ok
    with AuditStore(home) as loc:
        got = {r[0] for r in loc.sql("SELECT call_id FROM tool_calls").rows}
    assert got == set(local_ids)
    with ArchiveStore(str(archive)) as arc:
        assert {r[0] for r in arc.sql("SELECT call_id FROM tool_calls").rows} == set(
            shipped_ids)

    report = verify_archive(str(archive), home)
    assert report.ok, [f.to_dict() for f in report.findings]
    assert report.segments == len(res.shipped) + len(
        list((home / "audit" / "segments").glob("*.jsonl")))
    assert report.records >= len(shipped_ids) + len(local_ids)

    # Edit one shipped record in the archive: verify names its segment and line.
    target = max(res.shipped, key=lambda e: e.calls).segment
    path = archive / "lines" / f"{target}.parquet"
    tbl = pq.read_table(path)
    lines = tbl["line"].to_pylist()
    idx = next(i for i, ln in enumerate(lines) if '"k":"c"' in ln)
    lines[idx] = lines[idx].replace('"status":"', '"status":"x', 1)
    import pyarrow as pa

    pq.write_table(tbl.set_column(tbl.schema.get_field_index("line"), "line",
                                  pa.array(lines, pa.string())), path)
    bad = verify_archive(str(archive), home)
    assert not bad.ok
    edited = [f for f in bad.findings if f.kind == "edited"]
    assert edited and edited[0].segment == f"{target}.jsonl"
    assert edited[0].line == tbl["line_no"][idx].as_py()


def test_background_shipper_after_the_audit_sink_ships_everything_at_shutdown(
    tmp_path: Path, workspace: Path
) -> None:
    home = tmp_path / "home"
    archive = tmp_path / "archive"

    @tool(capability="read")
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    audit = AuditSink(home, segment_max_bytes=4_000, group_interval_ms=1)
    shipper = ArchiveShipper(home, str(archive), interval_s=0.2)
    reg = ToolRegistry(workspace=workspace, home=home, sinks=[audit, shipper])
    reg.register(echo)
    envs = [reg.call(ToolCall(name="echo", arguments={"text": f"t{i}"})) for i in range(60)]
    reg.shutdown(timeout_s=10)
    assert shipper.errors == 0 and shipper.shipped_segments >= 2
    with ArchiveStore(str(archive)) as arc:
        got = {r[0] for r in arc.sql("SELECT call_id FROM tool_calls").rows}
    assert got == {e.call_id for e in envs}


def _assert_clean(text: str, *secrets: str) -> None:
    for s in secrets:
        assert s not in text, f"secret leaked: {text[:300]}"


def test_secrets_stay_out_of_errors_and_cli_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    _fill(home, 50)
    pg_pw = "pg-Pa55word-in-uri-77"
    env_pw = "pg-env-Pa55word-88"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAARCHIVETEST00001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("PGPASSWORD", env_pw)
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "2")
    lake = (f"ducklake:postgres:dbname=x host=127.0.0.1 port={closed_port()} user=postgres"
            f" password={pg_pw}")
    monkeypatch.setenv("TOOLTRACE_ARCHIVE_DATA_PATH", "s3://nowhere/lake/")
    for uri in ("s3://nowhere/audit", lake):
        with pytest.raises(ArchiveError) as info:
            ship(home, uri)
        text = str(info.value) + repr(info.value) + "".join(
            traceback.format_exception(info.value))
        _assert_clean(text, SECRET_KEY, pg_pw, env_pw)
        assert "archive" in str(info.value)
        with pytest.raises(ArchiveError) as info2:
            ArchiveStore(uri)
        _assert_clean(str(info2.value) + "".join(traceback.format_exception(info2.value)),
                      SECRET_KEY, pg_pw, env_pw)
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "tooltrace"), "audit", "ship", "--home", str(home),
             "--archive", uri], capture_output=True, text=True, timeout=120,
            env={**os.environ, "TOOLTRACE_LOG_LEVEL": "debug"})
        assert proc.returncode == 1, proc.stderr
        assert "error:" in proc.stderr
        _assert_clean(proc.stdout + proc.stderr, SECRET_KEY, pg_pw, env_pw)


def test_ship_without_a_trail_or_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLTRACE_ARCHIVE", raising=False)
    with pytest.raises(ConfigurationError):
        ship(tmp_path / "home", None)
    res = ship(tmp_path / "nothing-here", str(tmp_path / "arch"))
    assert res.shipped == () and res.already == 0


def test_ship_follow_keeps_shipping_until_sigterm(tmp_path: Path) -> None:
    home = tmp_path / "home"
    archive = tmp_path / "archive"
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "tooltrace"), "audit", "ship", "--follow",
         "--interval", "0.2", "--home", str(home), "--archive", str(archive)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ids = _fill(home, 300, seed=21, seg_bytes=20_000)
        sealed = {p.name[: -len(".jsonl")] for p in (home / "audit" / "segments").iterdir()
                  if p.name.endswith(".jsonl") and ".live" not in p.name}
        deadline = time.monotonic() + 60
        shipped: set[str] = set()
        while time.monotonic() < deadline and shipped != sealed:
            marks = archive / "_shipped"
            shipped = {p.stem for p in marks.glob("*.json")} if marks.is_dir() else set()
            time.sleep(0.05)
        assert shipped == sealed
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "shipped" in out
    with ArchiveStore(str(archive)) as arc:
        assert sorted(r[0] for r in arc.sql("SELECT call_id FROM tool_calls").rows) == sorted(ids)


def test_ship_cli_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from tooltrace.cli import main

    monkeypatch.delenv("TOOLTRACE_ARCHIVE", raising=False)
    _fill(tmp_path / "home", 5)
    res = CliRunner().invoke(main, ["audit", "ship", "--home", str(tmp_path / "home")])
    assert res.exit_code == 2 and "TOOLTRACE_ARCHIVE" in res.output
    res = CliRunner().invoke(main, ["audit", "ship", "--home", str(tmp_path / "home"),
                                    "--archive", "ftp://host/x"])
    assert res.exit_code == 2 and "unsupported archive URI" in res.output
    res = CliRunner().invoke(main, ["audit", "ship", "--home", str(tmp_path / "home"),
                                    "--archive", str(tmp_path / "arch"), "--json"])
    assert res.exit_code == 0
    data = orjson.loads(res.output)
    assert data["calls"] == 5 and data["segments"] >= 1


def test_a_segment_spanning_midnight_lands_in_both_day_partitions(tmp_path: Path) -> None:
    from support.audit import make_record

    home = tmp_path / "home"
    archive = tmp_path / "archive"
    midnight_us = 1_798_761_600_000_000  # 2027-01-01T00:00:00Z
    rng = random.Random(2)
    recs = [make_record(rng, kind="ok", t0=midnight_us + d) for d in
            (-2_000_000, -1_000, 0, 5_000_000)]
    sink = AuditSink(home)
    for r in recs:
        sink.emit(r)
    sink.shutdown()
    res = ship(home, str(archive))
    assert res.calls == 4
    before = list((archive / "calls" / "day=2026-12-31").glob("*.parquet"))
    after = list((archive / "calls" / "day=2027-01-01").glob("*.parquet"))
    assert len(before) == len(after) == 1
    assert pq.read_table(before[0]).num_rows == 2 and pq.read_table(after[0]).num_rows == 2
    with ArchiveStore(str(archive)) as arc:
        got = arc.sql("SELECT call_id FROM tool_calls ORDER BY started_at").rows
    assert [r[0] for r in got] == [r.call_id for r in recs]
