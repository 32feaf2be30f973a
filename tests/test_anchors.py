"""Anchors: every signed checkpoint head goes to `<home>/anchors/anchors.jsonl`, `tooltrace audit
ship-anchors` puts them on S3 (moto on loopback) under a COMPLIANCE Object Lock that refuses
deletion, and `verify --anchors` proves the trail still holds every anchored record: a deleted
trail, a deleted writer, a cut tail and a trail rewritten and re-sealed (with the audit key,
or re-signed with a fresh key) each fail naming the writer and seqs that are gone."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from support.archive import SECRET_KEY, MotoS3
from support.components import require_binary
from support.forge import install_key, reforge, write_trail

from tooltrace.audit import (
    AnchorLog,
    anchors_path,
    list_segments,
    load_key,
    load_public_key,
    load_signer,
    parse_anchors,
    verify,
)
from tooltrace.audit._anchors import PendingAnchors
from tooltrace.cli import main

TOOLTRACE = str(Path(sys.executable).parent / "tooltrace")


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    server = MotoS3().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _env(s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOLTRACE_AUDIT_KEY", "TOOLTRACE_SIGNING_KEY", "TOOLTRACE_HOME",
                 "TOOLTRACE_ANCHORS", "TOOLTRACE_ANCHOR_RETENTION_DAYS", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)


_buckets = iter(range(1_000_000))


def _locked_bucket(s3: MotoS3) -> str:
    name = f"anchors-{next(_buckets)}"
    s3.client().create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


@pytest.fixture
def trail(tmp_path: Path) -> dict[str, Any]:
    """A home of three writers; its anchors also kept in a copy outside it."""
    home = tmp_path / "home"
    writers = write_trail(home, writers=3, n=60)
    kept = tmp_path / "kept-anchors.jsonl"
    shutil.copy(home / "anchors" / "anchors.jsonl", kept)
    pub = load_public_key(home)
    assert pub is not None
    return {"home": home, "writers": writers, "kept": kept, "pub": pub}


def _verify(home: Path, *args: str) -> tuple[int, dict[str, Any]]:
    res = CliRunner().invoke(main, ["verify", "--home", str(home), "--json", *args])
    return res.exit_code, orjson.loads(res.stdout)


def _gaps(rep: dict[str, Any]) -> list[tuple[str, str, int | None, int]]:
    return [(g["writer"], g["kind"], g["first_seq"], g["last_seq"])
            for g in rep["anchors"]["gaps"]]


def _segments(home: Path, writer: str) -> list[Path]:
    return [i.path for i in list_segments(home / "audit") if i.writer == writer]


def _last_seq(path: Path) -> int:
    seq: int = orjson.loads(path.read_bytes().splitlines()[-1])["seq"]
    return seq


def _anchored(kept: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for line in kept.read_bytes().splitlines():
        a = orjson.loads(line)
        out.setdefault(a["writer"], []).append(a)
    return out


def test_every_signed_checkpoint_is_anchored_and_an_untouched_trail_passes(
        trail: dict[str, Any]) -> None:
    home, kept = trail["home"], trail["kept"]
    heads = [(info.writer, info.n, o["seq"], o["head"], o["sig"])
             for info in list_segments(home / "audit")
             for o in map(orjson.loads, info.path.read_bytes().splitlines())
             if o["k"] in ("ckpt", "seal")]
    anchors = parse_anchors(kept.read_bytes(), kept.name).anchors
    assert sorted((a.writer, a.segment, a.seq, a.head, a.sig) for a in anchors) == sorted(heads)
    assert {a.kind for a in anchors} == {"ckpt", "seal"}
    assert all(a.kid == trail["pub"].kid and a.records is not None for a in anchors)
    code, rep = _verify(home, "--anchors", str(kept))
    assert code == 0, rep["findings"]
    assert rep["anchors"] == {"anchors": len(heads), "writers": 3, "gaps": []}
    text = CliRunner().invoke(main, ["verify", "--home", str(home), "--anchors", str(kept)])
    assert text.exit_code == 0
    assert f"anchors: {len(heads)} anchors of 3 writers checked" in text.output
    assert "every anchored record is here" in text.output


def test_a_deleted_trail_fails_naming_every_writer_and_its_seqs(trail: dict[str, Any]) -> None:
    home, kept = trail["home"], trail["kept"]
    top = {w: max(a["seq"] for a in mine) for w, mine in _anchored(kept).items()}
    shutil.rmtree(home / "audit")
    code, rep = _verify(home, "--anchors", str(kept))
    assert code == 1
    assert sorted(_gaps(rep)) == sorted((w, "deleted", 1, s) for w, s in top.items())
    for g in rep["anchors"]["gaps"]:
        assert g["message"].startswith(f"writer {g['writer']} is missing")
    # The whole home gone (its keys too): the public key kept elsewhere still checks.
    shutil.rmtree(home)
    code, rep = _verify(home, "--anchors", str(kept), "--pubkey", trail["pub"].hex)
    assert code == 1 and len(_gaps(rep)) == 3
    text = CliRunner().invoke(main, ["verify", "--home", str(home), "--anchors", str(kept),
                                     "--pubkey", trail["pub"].hex, "--wide"]).output
    for w, s in top.items():
        assert w in text and f"1..{s}" in text


def test_a_deleted_writer_fails_naming_that_writer(trail: dict[str, Any]) -> None:
    home, kept = trail["home"], trail["kept"]
    gone = trail["writers"][1]
    segs = _segments(home, gone)
    assert len(segs) >= 2
    records = sum(1 for p in segs for ln in p.read_bytes().splitlines()
                  if orjson.loads(ln)["k"] in ("c", "a"))
    for p in segs:
        p.unlink()
    code, rep = _verify(home, "--anchors", str(kept))
    assert code == 1
    top = max(a["seq"] for a in _anchored(kept)[gone])
    assert _gaps(rep) == [(gone, "deleted", 1, top)]
    gap = rep["anchors"]["gaps"][0]
    assert gap["segments"] == list(range(1, len(segs) + 1)) and gap["records"] == records


def test_a_cut_tail_fails_with_the_seqs_it_took(trail: dict[str, Any]) -> None:
    home, kept = trail["home"], trail["kept"]
    writer = trail["writers"][0]
    last = _segments(home, writer)[-1]
    lines = last.read_bytes().splitlines(keepends=True)
    keep = len(lines) // 2
    last.write_bytes(b"".join(lines[:keep]))
    survived = orjson.loads(lines[keep - 1])["seq"]
    code, rep = _verify(home, "--anchors", str(kept))
    assert code == 1
    top = max(a["seq"] for a in _anchored(kept)[writer])
    assert _gaps(rep) == [(writer, "truncated", survived + 1, top)]
    assert f"seq {survived + 1}..{top} missing" in rep["anchors"]["gaps"][0]["message"]


def _edit_one(writer: str, seq: int) -> Any:
    def edit(w: str, s: int, obj: dict[str, Any]) -> dict[str, Any]:
        if w == writer and s == seq:
            obj["summary"] = "nothing to see"
        return obj
    return edit


def test_a_trail_rewritten_and_resealed_with_the_audit_key_fails(trail: dict[str, Any]) -> None:
    home, kept = trail["home"], trail["kept"]
    writer = trail["writers"][2]
    key = load_key(home, create=False)
    assert key is not None
    first = _segments(home, writer)[0]
    seq = next(o["seq"] for o in map(orjson.loads, first.read_bytes().splitlines())
               if o["k"] == "c" and o["seq"] > 15)
    reforge(home, key, None, _edit_one(writer, seq))
    code, rep = _verify(home, "--anchors", str(kept))
    assert code == 1
    (gap,) = [g for g in rep["anchors"]["gaps"] if g["writer"] == writer]
    assert gap["kind"] == "rewritten" and gap["first_seq"] <= seq <= gap["last_seq"]
    assert [g for g in rep["anchors"]["gaps"] if g["writer"] != writer] == []


def test_a_trail_resigned_with_a_fresh_key_passes_alone_and_fails_against_locked_anchors(
        trail: dict[str, Any], s3: MotoS3, tmp_path: Path) -> None:
    home = trail["home"]
    bucket = _locked_bucket(s3)
    res = CliRunner().invoke(main, ["audit", "ship-anchors", "--home", str(home), "--to",
                                    f"s3://{bucket}/h1", "--json"])
    assert res.exit_code == 0, res.output
    writer = trail["writers"][0]
    key = load_key(home, create=False)
    attacker = load_signer(tmp_path / "attacker", create=True)
    assert key is not None and attacker is not None
    seq = 5
    reforge(home, key, attacker, _edit_one(writer, seq))
    install_key(home, tmp_path / "attacker")
    (home / "anchors" / "anchors.jsonl").unlink()  # the local anchors go too
    # From inside the home the forgery is perfect.
    rep = verify(home)
    assert rep.ok, rep.findings
    # The anchors under Object Lock were signed by the original key: not the home's now.
    code, got = _verify(home, "--anchors", f"s3://{bucket}/h1")
    assert code == 1
    assert {f["kind"] for f in got["findings"] if f["severity"] == "error"} == {"untrusted"}
    # With the original public key kept elsewhere: what was rewritten, by writer and seq.
    code, got = _verify(home, "--anchors", f"s3://{bucket}/h1", "--pubkey", trail["pub"].hex)
    assert code == 1
    gaps = {g["writer"]: g for g in got["anchors"]["gaps"]}
    assert set(gaps) == set(trail["writers"])  # every writer was re-signed
    assert gaps[writer]["kind"] == "rewritten" and gaps[writer]["first_seq"] == 1
    assert gaps[writer]["first_seq"] <= seq <= gaps[writer]["last_seq"]


def test_ship_anchors_locks_each_batch_once_and_verify_reads_them_back(
        trail: dict[str, Any], s3: MotoS3, tmp_path: Path) -> None:
    home = trail["home"]
    bucket = _locked_bucket(s3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLTRACE_")}
    env.update(TOOLTRACE_ANCHORS=f"s3://{bucket}/fleet/h1", TOOLTRACE_ANCHOR_RETENTION_DAYS="3")

    def ship() -> dict[str, Any]:
        p = subprocess.run([TOOLTRACE, "audit", "ship-anchors", "--home", str(home), "--json"],
                           capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        assert SECRET_KEY not in p.stdout + p.stderr
        out: dict[str, Any] = orjson.loads(p.stdout)
        return out

    first = ship()
    n = len(parse_anchors(trail["kept"].read_bytes(), "x").anchors)
    assert first["anchors"] == n and len(first["objects"]) == 1
    assert ship()["objects"] == []  # nothing new: nothing put
    write_trail(home, writers=1, n=20)  # a fourth writer, more anchors
    second = ship()
    assert len(second["objects"]) == 1 and second["anchors"] > 0
    c = s3.client()
    versions = c.list_object_versions(Bucket=bucket, Prefix="fleet/h1/")["Versions"]
    assert sorted(v["Key"] for v in versions) == sorted(first["objects"] + second["objects"])
    now = dt.datetime.now(dt.UTC)
    for v in versions:
        head = c.head_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
        assert head["ObjectLockMode"] == "COMPLIANCE"
        until = head["ObjectLockRetainUntilDate"]
        assert dt.timedelta(days=2, hours=23) < until - now <= dt.timedelta(days=3)
        # The lock holds: not even the owner deletes that version before its date.
        with pytest.raises(c.exceptions.ClientError, match="AccessDenied"):
            c.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
    # A plain delete only hides an object behind a marker; verify still reads it, and says so.
    c.delete_object(Bucket=bucket, Key=first["objects"][0])
    code, rep = _verify(home, "--anchors", f"s3://{bucket}/fleet/h1")
    assert code == 0, rep["findings"]
    assert rep["anchors"]["writers"] == 4
    notes = [f for f in rep["findings"] if f["kind"] == "unlocked"]
    assert len(notes) == 1 and "delete marker" in notes[0]["message"]
    # And against them the deleted writer shows.
    for p in _segments(home, trail["writers"][0]):
        p.unlink()
    code, rep = _verify(home, "--anchors", f"s3://{bucket}/fleet/h1")
    assert code == 1 and [g[0] for g in _gaps(rep)] == [trail["writers"][0]]


def test_ship_anchors_refuses_a_bucket_without_object_lock_and_a_rewritten_local_file(
        trail: dict[str, Any], s3: MotoS3) -> None:
    home = trail["home"]
    plain = s3.bucket("anchors-unlocked")
    res = CliRunner().invoke(main, ["audit", "ship-anchors", "--home", str(home), "--to",
                                    f"s3://{plain}/x"])
    assert res.exit_code == 1 and "Object Lock" in res.output and SECRET_KEY not in res.output
    bucket = _locked_bucket(s3)
    args = ["audit", "ship-anchors", "--home", str(home), "--to", f"s3://{bucket}/x"]
    assert CliRunner().invoke(main, args).exit_code == 0
    # A run killed after its put and before it recorded it puts nothing twice ...
    (home / "anchors" / "shipped.json").unlink()
    res = CliRunner().invoke(main, [*args, "--json"])
    assert res.exit_code == 0 and orjson.loads(res.stdout)["already"] == 1
    # ... and other bytes under the same name mean the local file was rewritten.
    (home / "anchors" / "shipped.json").unlink()
    local = home / "anchors" / "anchors.jsonl"
    local.write_bytes(local.read_bytes().replace(b'"k":"ckpt"', b'"k":"CKPT"', 1))
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1 and "rewritten" in res.output
    # A target that is not s3:// is a usage error.
    assert CliRunner().invoke(main, [*args[:-1], "/tmp/somewhere"]).exit_code == 2
    assert CliRunner().invoke(main, args[:4]).exit_code == 2  # no target at all


def test_unreadable_anchors_are_a_usage_error_and_bad_anchors_are_findings(
        trail: dict[str, Any], tmp_path: Path) -> None:
    home, kept = trail["home"], trail["kept"]
    res = CliRunner().invoke(main, ["verify", "--home", str(home), "--anchors",
                                    str(tmp_path / "none.jsonl")])
    assert res.exit_code == 2 and "cannot read the anchors" in res.output
    res = CliRunner().invoke(main, ["verify", "--home", str(home), "--anchors",
                                    "s3://no-such-bucket-here/p"])
    assert res.exit_code == 2 and SECRET_KEY not in res.output
    lines = kept.read_bytes().splitlines(keepends=True)
    forged = orjson.loads(lines[0])
    forged["records"] += 1
    lines[0] = orjson.dumps(forged) + b"\n"
    lines.insert(1, b"not json\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"".join(lines) + b'{"writer":')
    code, rep = _verify(home, "--anchors", str(bad))
    assert code == 1
    found = {(f["kind"], f["line"]) for f in rep["findings"]}
    assert ("forged", 1) in found and ("corrupt", 2) in found
    assert ("torn", None) in found and rep["anchors"]["gaps"] == []


def test_the_anchors_file_cuts_a_torn_append_before_the_next(tmp_path: Path) -> None:
    log = AnchorLog(tmp_path / "anchors" / "anchors.jsonl")
    log.append([{"writer": "w", "seq": 1}], sync=True)
    with open(log.path, "ab") as f:
        f.write(b'{"writer":"w","se')  # a crash mid-append
    log.append([{"writer": "w", "seq": 2}], sync=True)
    assert [orjson.loads(x)["seq"] for x in log.path.read_bytes().splitlines()] == [1, 2]
    assert log.try_append([{"x": 1}], sync=False) and log.errors == 0
    (tmp_path / "file").write_text("a file where the directory should be")
    blocked = AnchorLog(tmp_path / "file" / "anchors.jsonl")
    assert not blocked.try_append([{"x": 1}], sync=False) and blocked.errors == 1


def test_anchors_are_canonical_lines_in_a_file_made_with_its_directories(tmp_path: Path) -> None:
    log = AnchorLog(anchors_path(tmp_path / "new-home"))
    assert log.path == tmp_path / "new-home" / "anchors" / "anchors.jsonl"
    log.append([], sync=True)  # nothing to say: no file, not even its directory
    assert not (tmp_path / "new-home").exists()
    log.append([{"writer": "w", "seq": 2, "head": "h", "ids": {1: "x"}}, {"seq": 3, "k": "seal"}],
               sync=True)
    assert log.path.read_bytes() == (b'{"head":"h","ids":{"1":"x"},"seq":2,"writer":"w"}\n'
                                     b'{"k":"seal","seq":3}\n')
    umask = os.umask(0o022)
    os.umask(umask)
    assert log.path.stat().st_mode & 0o777 == 0o644 & ~umask
    log.append([{"seq": 4}], sync=False)
    assert log.path.read_bytes().endswith(b'\n{"seq":4}\n')


_APPENDS = """
import sys
from pathlib import Path
from tooltrace.audit import AnchorLog
log = AnchorLog(Path(sys.argv[1]))
log.append([{"seq": 1}], sync=True)
log.append([{"seq": 2}], sync=True)
log.append([{"seq": 3}], sync=False)
"""


def test_a_synced_append_reaches_the_disk_and_so_does_a_new_files_name(tmp_path: Path) -> None:
    strace = require_binary("strace", "apt-get install -y --no-install-recommends strace")
    path = tmp_path / "anchors" / "anchors.jsonl"
    trace = tmp_path / "trace"
    subprocess.run([strace, "-f", "-qq", "-e", "trace=openat,fsync", "-o", str(trace),
                    sys.executable, "-c", _APPENDS, str(path)], check=True, timeout=120)
    opened: dict[tuple[str, int], str] = {}
    synced = []
    for line in trace.read_text().splitlines():
        pid, _, call = line.partition(" ")
        if m := re.match(r'openat\(\w+, "([^"]*)", .*\) = (\d+)$', call.strip()):
            opened[(pid, int(m[2]))] = m[1]
        elif m := re.match(r"fsync\((\d+)\)", call.strip()):
            synced.append(opened[(pid, int(m[1]))])
    # The first append makes the file: its directory entry is synced too; the last, unsynced.
    assert synced == [str(path), str(path.parent), str(path)]
    assert [orjson.loads(x)["seq"] for x in path.read_bytes().splitlines()] == [1, 2, 3]


def test_whether_an_append_is_synced_is_always_said_by_name(tmp_path: Path) -> None:
    log = AnchorLog(tmp_path / "anchors.jsonl")
    pending = PendingAnchors(log)
    with pytest.raises(TypeError):
        log.append([{"seq": 1}], True)  # type: ignore[misc]
    with pytest.raises(TypeError):
        log.try_append([{"seq": 1}], True)  # type: ignore[misc]
    with pytest.raises(TypeError):
        pending.flush(True)  # type: ignore[misc]
    log.append(anchors=[{"seq": 1}], sync=False)
    assert log.try_append(anchors=[{"seq": 2}], sync=False)
    pending.add(anchor={"seq": 3})
    pending.flush(sync=False)
    assert [orjson.loads(x)["seq"] for x in log.path.read_bytes().splitlines()] == [1, 2, 3]


def test_every_failed_append_is_counted_and_none_raises(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a file where the directory should be")
    blocked = AnchorLog(tmp_path / "file" / "anchors.jsonl")
    with pytest.raises(OSError):
        blocked.append([{"x": 1}], sync=True)
    assert [blocked.try_append([{"x": 1}], sync=True) for _ in range(3)] == [False] * 3
    assert blocked.errors == 3


def test_held_anchors_go_out_once_their_lines_are_kept_and_never_after_a_rollback(
        tmp_path: Path) -> None:
    log = AnchorLog(tmp_path / "anchors.jsonl")
    pending = PendingAnchors(log)
    for seq in (10, 20, 21, 30):
        pending.add({"writer": "w", "seq": seq})
    pending.drop_after(20)  # the write of 21 and 30 was rolled back
    assert not log.path.exists()  # nothing before a flush
    pending.flush(sync=True)
    pending.flush(sync=True)  # nothing held any more: nothing twice
    pending.add({"writer": "w", "seq": 22})
    pending.flush(sync=False)
    assert [orjson.loads(x)["seq"] for x in log.path.read_bytes().splitlines()] == [10, 20, 22]
    # A writer without a signing key holds none; a disk that refuses loses them, quietly.
    unsigned = PendingAnchors(None)
    unsigned.add({"seq": 1})
    unsigned.flush(sync=True)
    (tmp_path / "file").write_text("not a directory")
    blocked = AnchorLog(tmp_path / "file" / "anchors.jsonl")
    refused = PendingAnchors(blocked)
    refused.add({"seq": 1})
    refused.flush(sync=True)
    refused.flush(sync=True)
    assert blocked.errors == 1


def test_audit_ship_ships_the_anchors_first_when_a_target_is_set(
        trail: dict[str, Any], s3: MotoS3, tmp_path: Path) -> None:
    home = trail["home"]
    bucket = _locked_bucket(s3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLTRACE_")}
    env["TOOLTRACE_ANCHORS"] = f"s3://{bucket}/h"
    p = subprocess.run([TOOLTRACE, "audit", "ship", "--archive", str(tmp_path / "archive"),
                        "--home", str(home), "--prune", "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    out = orjson.loads(p.stdout)
    n = len(parse_anchors(trail["kept"].read_bytes(), "x").anchors)
    assert out["anchors"]["anchors"] == n and out["calls"] > 0
    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket, Prefix="h/")["Contents"]]
    assert keys == out["anchors"]["objects"]
    # The pruned segments are vouched for by their signed digest entries, the rest by anchors.
    code, rep = _verify(home, "--anchors", f"s3://{bucket}/h")
    assert code == 0, rep["findings"]
    # Without a target the anchors stay local and nothing is said of them.
    del env["TOOLTRACE_ANCHORS"]
    p = subprocess.run([TOOLTRACE, "audit", "ship", "--archive", str(tmp_path / "archive"),
                        "--home", str(home), "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and orjson.loads(p.stdout)["anchors"] is None, p.stderr
