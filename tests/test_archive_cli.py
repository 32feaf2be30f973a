"""Every CLI reader against the archive (``--archive`` / ``TOOLTRACE_ARCHIVE``): the same
answers as over the local home, ``verify --archive`` across shipped and local segments, and
no secret in the output when the archive cannot be reached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from support.archive import SECRET_KEY
from support.otlp import closed_port
from test_archive import _fill

from tooltrace.archive import ship
from tooltrace.cli import main


def _json(args: list[str]) -> object:
    res = CliRunner().invoke(main, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return orjson.loads(res.output)


def test_readers_over_the_archive_answer_as_over_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLTRACE_ARCHIVE", raising=False)
    home = tmp_path / "home"
    archive = str(tmp_path / "archive")
    ids = _fill(home, 400, seed=5)
    assert ship(home, archive).calls == len(ids)
    loc, arc = ["--home", str(home)], ["--archive", archive]
    pick = ids[123]
    a = _json(["autopsy", pick[:28], *arc])
    b = _json(["autopsy", pick, *loc])
    assert isinstance(a, dict) and isinstance(b, dict)
    assert a["call_id"] == pick and a["steps"] == b["steps"] and a["result"] == b["result"]
    assert _json(["calls", "--limit", "20", *arc]) == _json(["calls", "--limit", "20", *loc])
    assert _json(["calls", "--status", "rejected", *arc]) == _json(
        ["calls", "--status", "rejected", *loc])
    assert _json(["stats", *arc]) == _json(["stats", *loc])
    assert _json(["query", "rejections_by_stage", *arc]) == _json(
        ["query", "rejections_by_stage", *loc])
    # TOOLTRACE_ARCHIVE stands in for --archive.
    monkeypatch.setenv("TOOLTRACE_ARCHIVE", archive)
    assert _json(["query", "SELECT count(*) AS n FROM tool_calls"]) == [{"n": len(ids)}]
    monkeypatch.delenv("TOOLTRACE_ARCHIVE")
    missing = CliRunner().invoke(main, ["autopsy", "ffffffff", *arc])
    assert missing.exit_code == 1
    # A query over a Parquet archive on this machine reads it and writes nothing.
    out = tmp_path / "copied.csv"
    copy = CliRunner().invoke(main, ["query", f"COPY tool_calls TO '{out}'", *arc])
    assert copy.exit_code == 1 and "query failed" in copy.output and not out.exists()


def test_verify_archive_spans_shipped_and_local_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLTRACE_ARCHIVE", raising=False)
    home = tmp_path / "home"
    archive = str(tmp_path / "archive")
    _fill(home, 300, seed=8)
    shipped = ship(home, archive, prune=True)
    _fill(home, 100, seed=9)
    data = _json(["verify", "--home", str(home), "--archive", archive])
    assert isinstance(data, dict) and data["ok"] and data["keyed"]
    local = len(list((home / "audit" / "segments").glob("*.jsonl")))
    assert data["segments"] == len(shipped.shipped) + local
    # Delete a shipped segment's chain from the archive: verify names the gap.
    victim = shipped.shipped[0].segment
    (tmp_path / "archive" / "lines" / f"{victim}.parquet").unlink()
    res = CliRunner().invoke(main, ["verify", "--home", str(home), "--archive", archive,
                                    "--json"])
    assert res.exit_code == 1
    found = orjson.loads(res.output)["findings"]
    assert any(f["kind"] == "deleted" and f["segment"] == f"{victim}.jsonl" for f in found)


def test_readers_keep_secrets_out_when_the_archive_is_unreachable(tmp_path: Path) -> None:
    pg_pw = "reader-pg-Pa55-91"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "AKIAARCHIVETEST00001",
           "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "PGPASSWORD": pg_pw, "PGCONNECT_TIMEOUT": "2",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}"}
    env.pop("TOOLTRACE_ARCHIVE", None)
    exe = str(Path(sys.executable).parent / "tooltrace")
    lake = (f"ducklake:postgres:dbname=x host=127.0.0.1 port={closed_port()} user=u"
            f" password={pg_pw}")
    for args in (["calls", "--archive", "s3://nowhere/a"],
                 ["autopsy", "01a2", "--archive", lake],
                 ["verify", "--home", str(tmp_path), "--archive", lake]):
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("error: cannot")
        for secret in (SECRET_KEY, pg_pw):
            assert secret not in proc.stdout + proc.stderr
