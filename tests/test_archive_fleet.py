"""A fleet shipping to one archive: four agent processes on four "machines" (separate homes
and working directories) write audit trails, then ship them at the same time to a DuckLake
archive (catalog in a real PostgreSQL 15, data on S3 served by moto, both on loopback). Every
acknowledged record lands exactly once, and a ship killed with SIGKILL mid-way and re-run
duplicates nothing -- for the DuckLake target and for the plain Parquet target."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.archive import MotoS3, Postgres

from tooltrace.archive import ArchiveStore, verify_archive

TESTS = Path(__file__).resolve().parent
TOOLTRACE = str(Path(sys.executable).parent / "tooltrace")
#: One checkpoint key for the whole fleet, so one verify checks every machine's checkpoints.
FLEET_KEY = "fleet-checkpoint-key-5b1e"


def _env(s3: MotoS3, cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TOOLTRACE_", "AWS_", "PG"))}
    env.update(s3.env())
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["HOME"] = str(cwd)
    env["TOOLTRACE_HOME"] = str(cwd / ".tooltrace")
    env["TOOLTRACE_AUDIT_KEY"] = FLEET_KEY
    return env


def _machine(root: Path, name: str) -> Path:
    cwd = root / name
    cwd.mkdir()
    return cwd


def _write(s3: MotoS3, cwds: list[Path], n: int, seg_bytes: int) -> dict[Path, list[str]]:
    """Run one writer process per machine at once; return each machine's acked call ids."""
    procs = [subprocess.Popen(
        [sys.executable, str(TESTS / "support" / "archive.py"), "writer", str(c / ".tooltrace"),
         str(n), str(seg_bytes)], cwd=c, env=_env(s3, c), stdout=subprocess.PIPE, text=True)
        for c in cwds]
    out: dict[Path, list[str]] = {}
    for c, p in zip(cwds, procs, strict=True):
        stdout, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        lines = stdout.split()
        assert lines[-2:] == ["done", "0"], "a writer dropped records"
        out[c] = lines[:-2]
        assert len(out[c]) == n
    return out


def _ship_cmd(archive: str, *extra: str) -> list[str]:
    return [TOOLTRACE, "audit", "ship", "--archive", archive, "--json", *extra]


def _check_exactly_once(archive: str, s3: MotoS3, expected: set[str]) -> None:
    with ArchiveStore(archive) as arc:
        ids = [r[0] for r in arc.sql("SELECT call_id FROM _all_calls").rows]
        dup_steps = arc.sql("SELECT count(*) FROM (SELECT call_id, seq, step FROM"
                            " _all_steps GROUP BY ALL HAVING count(*) > 1)").rows[0][0]
    assert len(ids) == len(set(ids)) == len(expected)
    assert set(ids) == expected
    assert dup_steps == 0


def test_four_machines_ship_concurrently_to_ducklake_exactly_once(
    servers: tuple[MotoS3, Postgres], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3, pg = servers
    bucket = s3.bucket("fleet-lake")
    archive = "ducklake:postgres:" + pg.createdb("fleet")
    cwds = [_machine(tmp_path, f"host{i}") for i in range(4)]
    acked = _write(s3, cwds, 700, 30_000)

    procs = [subprocess.Popen(
        _ship_cmd(archive, "--data-path", f"s3://{bucket}/lake/", "--segments-per-commit", "8"),
        cwd=c, env=_env(s3, c), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c in cwds]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert sum(r["calls"] for r in results) == 4 * 700
    assert all(r["segments"] >= 4 for r in results)
    expected = {cid for ids in acked.values() for cid in ids}
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    _check_exactly_once(archive, s3, expected)
    # One verify checks all four machines' chains and keyed checkpoints in the archive.
    monkeypatch.setenv("TOOLTRACE_AUDIT_KEY", FLEET_KEY)
    report = verify_archive(archive, cwds[0] / ".tooltrace")
    assert report.ok, [f.to_dict() for f in report.findings][:5]
    assert report.keyed and report.writers == 4 and report.records >= 4 * 700
    # The data went to S3 as Parquet, not into the catalog.
    keys = s3.client().list_objects_v2(Bucket=bucket, Prefix="lake/").get("KeyCount", 0)
    assert keys > 0
    # Running every ship again changes nothing.
    reruns = [subprocess.Popen(_ship_cmd(archive), cwd=c, env=_env(s3, c),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for c in cwds]
    for p in reruns:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out)["segments"] == 0


def _kill_mid_ship(cmd: list[str], cwd: Path, env: dict[str, str], landed: object,
                   total: int) -> int:
    """Start a ship, SIGKILL it once at least two segments landed; return how many had."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    n = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            n = landed()  # type: ignore[operator]
            if n >= 2:
                break
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    after = int(landed())  # type: ignore[operator]
    assert proc.returncode == -signal.SIGKILL
    assert 2 <= after < total, f"the kill did not land mid-way ({after} of {total})"
    return after


@pytest.mark.parametrize("target", ["ducklake", "parquet"])
def test_ship_killed_mid_way_and_rerun_duplicates_nothing(
    servers: tuple[MotoS3, Postgres], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    target: str,
) -> None:
    s3, pg = servers
    bucket = s3.bucket(f"kill-{target}")
    cwd = _machine(tmp_path, "host")
    ids = _write(s3, [cwd], 1200, 12_000)[cwd]
    segs = len(list((cwd / ".tooltrace" / "audit" / "segments").glob("*.jsonl")))
    assert segs >= 15
    env = _env(s3, cwd)
    if target == "ducklake":
        db = f"kill_{os.getpid()}"
        archive = "ducklake:postgres:" + pg.createdb(db)
        cmd = _ship_cmd(archive, "--data-path", f"s3://{bucket}/lake/",
                        "--segments-per-commit", "1")
        # Each DuckLake commit is one catalog snapshot: count the ship ledger's rows there.

        def landed() -> int:
            out = pg.psql(db, "SELECT count(*) FROM ducklake_data_file f JOIN ducklake_table t"
                              " USING (table_id) WHERE t.table_name = 'ship_ledger'")
            return int(out.strip() or 0) if out else 0
    else:
        archive = f"s3://{bucket}/plain"
        cmd = _ship_cmd(archive)

        def landed() -> int:
            r = s3.client().list_objects_v2(Bucket=bucket, Prefix="plain/_shipped/")
            return int(r.get("KeyCount", 0))

    _kill_mid_ship(cmd, cwd, env, landed, segs)
    rerun = subprocess.run(_ship_cmd(archive), cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    res = json.loads(rerun.stdout)
    assert res["already_shipped"] + res["segments"] == segs
    assert res["segments"] >= 1
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    _check_exactly_once(archive, s3, set(ids))
    if target == "ducklake":
        with ArchiveStore(archive) as arc:
            rows = arc.sql("SELECT count(*), count(DISTINCT segment) FROM lake.ship_ledger").rows
        assert rows == [(segs, segs)]
    else:
        assert landed() == segs
