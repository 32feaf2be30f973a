"""Looking one call up: the compaction manifest's per-file call-id ranges, lookups that read only
the files whose range holds the id (plus the rows not compacted yet), the same answers as the
views, and a reader that imports neither pyarrow nor pandas.

The trail: a real registry workload in strict mode (intents, a late resolution) compacted into
one set of Parquet files, synthetic calls compacted into a second set, sealed segments not yet
compacted, and a writer still alive with flushed records in its live segment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest
from support.audit import run_real_workload, workload

from tooltrace.audit import AmbiguousCallId, AuditStore, CallNotFound, compact, explain
from tooltrace.audit._lookupfile import lookup_rel
from tooltrace.audit._manifest import read_manifest, write_manifest
from tooltrace.telemetry import AuditSink

ROOT = Path(__file__).resolve().parents[1]


def _emit(home: Path, n: int, seed: int, *, shutdown: bool = True) -> tuple[AuditSink, list[str]]:
    sink = AuditSink(home)
    ids = []
    for r in workload(n, seed=seed):
        sink.emit(r)
        ids.append(r.call_id)
    if shutdown:
        sink.shutdown()
    else:
        assert sink.flush(10.0)
    return sink, ids


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("lookup")
    home, ws = base / "home", base / "ws"
    ws.mkdir()
    real = run_real_workload(home, ws, strict=True)
    first = compact(home)
    _s, second_ids = _emit(home, 150, seed=3)
    second = compact(home)
    _s, sealed_ids = _emit(home, 40, seed=5)  # sealed, not compacted
    live_sink, live_ids = _emit(home, 30, seed=9, shutdown=False)  # its writer is alive
    try:
        yield {"home": home, "real": real, "first": first, "second": second,
               "second_ids": second_ids, "sealed_ids": sealed_ids, "live_ids": live_ids}
    finally:
        live_sink.shutdown()


@pytest.fixture(scope="module")
def store(trail: dict[str, Any]) -> Iterator[AuditStore]:
    with AuditStore(trail["home"]) as s:
        yield s


def _ids_in(path: Path) -> list[str]:
    con = duckdb.connect()
    try:
        return [r[0] for r in con.execute(
            "SELECT call_id FROM read_parquet($p) WHERE call_id IS NOT NULL ORDER BY call_id",
            {"p": str(path)}).fetchall()]
    finally:
        con.close()


def _holding(home: Path, cid: str) -> set[str]:
    """Files (absolute) whose recorded range holds ``cid``."""
    m = read_manifest(home / "audit")
    return {str(home / "audit" / rel) for rel, (lo, hi) in m["ranges"].items() if lo <= cid <= hi}


def test_compaction_records_each_files_call_id_range(trail: dict[str, Any]) -> None:
    home = trail["home"]
    m = read_manifest(home / "audit")
    listed = [rel for rels in m["files"].values() for rel in rels]
    assert len(listed) >= 6  # calls, steps and intents/resolutions, from two compactions
    assert set(m["ranges"]) == set(listed)
    for rel in listed:
        ids = _ids_in(home / "audit" / rel)
        assert m["ranges"][rel] == [ids[0], ids[-1]], rel
    # The second compaction's calls come strictly after the first's: disjoint ranges.
    (a,), (b,) = ([f for f in r.files if "/calls/" in f] for r in (trail["first"],
                                                                     trail["second"]))
    assert m["ranges"][a][1] < m["ranges"][b][0]


def test_every_lookup_matches_the_views(store: AuditStore, trail: dict[str, Any]) -> None:
    ids = [r[0] for r in store.sql(
        "SELECT call_id FROM tool_calls UNION SELECT call_id FROM tool_call_intents").rows]
    expected = len(trail["second_ids"]) + len(trail["sealed_ids"]) + len(trail["live_ids"])
    assert len(ids) >= expected + len(trail["real"])
    assert store.segments >= 2  # the sealed segment and the live one
    for cid in ids:
        got = store.call(cid)
        want = store._call_via_views(cid, cid)
        assert got.record == want.record, cid
        assert got.steps == want.steps, cid
        assert got.intent == want.intent, cid
        assert got.record is not None or got.intent is not None
    # The late resolution and the strict intents arrived through the direct path too.
    unknown = store.call(trail["real"]["unknown"])
    assert unknown.record is not None and unknown.record["resolved_at"] is not None
    assert unknown.record["status"] == "unknown" and unknown.record["outcome"] != "unknown"
    ok = store.call(trail["real"]["ok"])
    assert ok.intent is not None and ok.intent["orphaned"] is False


def test_a_lookup_reads_only_the_files_whose_range_holds_the_id(
        store: AuditStore, trail: dict[str, Any]) -> None:
    home = trail["home"]
    cid = trail["second_ids"][75]
    detail = store.call(cid)
    assert detail.record is not None and detail.record["call_id"] == cid
    assert store.lookup_files and set(store.lookup_files) <= _holding(home, cid)
    assert not set(store.lookup_files) & set(
        str(home / "audit" / f) for f in trail["first"].files)
    # Rows not compacted yet are read from the copies made at open: no Parquet file at all.
    for cid in (trail["sealed_ids"][3], trail["live_ids"][-1]):
        assert store.call(cid).record is not None
        assert store.lookup_files == []


def test_files_outside_the_range_are_never_opened(trail: dict[str, Any], tmp_path: Path) -> None:
    home = tmp_path / "copy"
    shutil.copytree(trail["home"], home, ignore=shutil.ignore_patterns("*.lock"))
    with AuditStore(home) as s:
        # Pull the first compaction's files away after the store listed them: a lookup that
        # opened one of them would fail.
        for rel in trail["first"].files:
            os.rename(home / "audit" / rel, home / "audit" / (rel + ".away"))
            lookup = home / "audit" / lookup_rel(rel)
            if lookup.exists():
                os.rename(lookup, lookup.with_name(lookup.name + ".away"))
        cid = trail["second_ids"][10]
        assert s.call(cid).record is not None
        assert s.call(cid[:32]).call_id == cid  # a prefix is pruned the same way
        with pytest.raises(duckdb.IOException):
            s.call(trail["real"]["ok"])


def test_prefixes_across_compacted_sealed_and_live_rows(
        store: AuditStore, trail: dict[str, Any]) -> None:
    for cid in (trail["real"]["policy"], trail["second_ids"][-1], trail["sealed_ids"][0],
                trail["live_ids"][0]):
        assert store.call(cid[:30].upper()).call_id == cid
        assert store.resolve_call_id(cid[:33]) == cid
    # Every call id starts with its 48-bit millisecond clock: a short prefix matches many.
    with pytest.raises(AmbiguousCallId) as err:
        store.call(trail["second_ids"][0][:4])
    assert len(err.value.matches) == 5
    with pytest.raises(CallNotFound):
        store.call("ffffffff-ffff-7fff-bfff-ffffffffffff")
    with pytest.raises(CallNotFound):
        store.call("not-a-call-id; DROP TABLE x")


def test_a_manifest_without_ranges_reads_every_file_then_compaction_adds_them(
        trail: dict[str, Any], tmp_path: Path) -> None:
    home = tmp_path / "old"
    shutil.copytree(trail["home"], home, ignore=shutil.ignore_patterns("*.lock", "*.live.jsonl"))
    adir = home / "audit"
    m = read_manifest(adir)
    ranges = m.pop("ranges")
    write_manifest(adir, m)
    cid = trail["second_ids"][20]
    with AuditStore(home) as s:
        want = s._call_via_views(cid, cid)
        got = s.call(cid)
        assert got.record == want.record and got.steps == want.steps
        everything = {str(adir / rel) for rels in m["files"].values() for rel in rels}
        calls_and_steps = {p for p in everything if "/calls/" in p or "/steps/" in p}
        assert calls_and_steps <= set(s.lookup_files)
    compact(home)
    after = read_manifest(adir)["ranges"]
    assert {rel: after[rel] for rel in ranges} == ranges  # from the Parquet statistics
    with AuditStore(home) as s:
        s.call(cid)
        assert set(s.lookup_files) <= _holding(home, cid)


def test_files_compacted_before_a_column_existed_read_it_as_null(
        trail: dict[str, Any], tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    home = tmp_path / "older"
    shutil.copytree(trail["home"], home, ignore=shutil.ignore_patterns("*.lock", "*.live.jsonl"))
    adir = home / "audit"
    # The second compaction's calls and steps as an older tooltrace wrote them: without a
    # column that came later.
    for rel, col in ((f, "principal_roles") for f in trail["second"].files if "/calls/" in f):
        pq.write_table(pq.read_table(adir / rel).drop_columns([col]), adir / rel)
    for rel in (f for f in trail["second"].files if "/steps/" in f):
        pq.write_table(pq.read_table(adir / rel).drop_columns(["detail"]), adir / rel)
    m = read_manifest(adir)
    del m["lookups"]  # that tooltrace wrote no lookup files either
    write_manifest(adir, m)
    cid = trail["second_ids"][30]
    with AuditStore(home) as s:
        got = s.call(cid)
        want = s._call_via_views(cid, cid)
    assert got.record is not None and got.record == want.record
    assert got.record["principal_roles"] is None and got.record["tool"]
    assert got.steps == want.steps and got.steps
    assert all(st["detail"] is None for st in got.steps)


def test_malformed_values_in_a_segment_become_null_not_an_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    seg = home / "audit" / "segments"
    seg.mkdir(parents=True)
    cid = "019e7044-8800-7000-8cfc-d208495d565e"
    lines = [
        {"k": "c", "call_id": cid, "tool": {"not": "text"}, "status": "ok",
         "started_at_us": "yesterday", "elapsed_us": 1500, "artifact": {"chars": "many"},
         "args_redacted": {"q": "x"}, "mode": 7,
         "steps": [[1, "execute", 1780000000000000, 250, "tool", "ok", {"n": 1}],
                   [2**40, "redact", 1780000000000300, 10, "redactor", "clean"]]},
    ]
    (seg / "w1.000001.jsonl").write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in lines))
    with AuditStore(home) as s:
        d = s.call(cid)
        assert d.record is not None
        assert d.record["tool"] == '{"not":"text"}' and d.record["mode"] == "7"
        assert d.record["started_at"] is None and d.record["artifact_chars"] is None
        assert d.record["elapsed_ms"] == 1.5
        assert orjson.loads(d.record["args_redacted"]) == {"q": "x"}
        assert [(st["seq"], st["step"]) for st in d.steps] == [(1, "execute"), (None, "redact")]
        assert s.sql("SELECT count(*) FROM tool_call_steps").rows == [(2,)]


_PROBE = """
import sys, orjson
from tooltrace.audit import AuditStore, explain
with AuditStore(sys.argv[1]) as s:
    a = explain(s.call(sys.argv[2]))
    assert a.call_id == sys.argv[2]
    orjson.dumps(a.to_dict(), default=str)
    print(s.segments, s.parquet_files)
heavy = ("pyarrow", "pandas", "numpy", "opentelemetry", "tooltrace.registry", "tooltrace.registry",
         "msgspec", "hashlib")
print(sorted({m.split(".")[0] if not m.startswith("tooltrace") else m
              for m in sys.modules if m.startswith(heavy)}))
"""

_CLI_PROBE = """
import sys
from tooltrace.cli import main
try:
    main(["autopsy", sys.argv[2], "--home", sys.argv[1]])
except SystemExit as e:
    assert not e.code, e.code
heavy = ("pyarrow", "pandas", "numpy", "opentelemetry", "tooltrace.registry", "tooltrace.registry",
         "msgspec", "hashlib")
print(sorted({m.split(".")[0] if not m.startswith("tooltrace") else m
              for m in sys.modules if m.startswith(heavy)}), file=sys.stderr)
"""


def _probe(code: str, home: Path, cid: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TOOLTRACE_HOME", None)
    p = subprocess.run([sys.executable, "-c", code, str(home), cid], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def test_the_reader_imports_neither_pyarrow_nor_pandas(trail: dict[str, Any],
                                                        tmp_path: Path) -> None:
    # With rows not compacted yet (sealed and live segments) ...
    cid = trail["live_ids"][2]
    out = _probe(_PROBE, trail["home"], cid).stdout.splitlines()
    assert out[0].split()[0] != "0" and out[1] == "[]", out
    # ... and on a fully compacted home, in process and through the command.
    home = tmp_path / "compacted"
    shutil.copytree(trail["home"], home, ignore=shutil.ignore_patterns("*.lock", "*.live.jsonl"))
    compact(home, prune=True)
    cid = trail["sealed_ids"][1]
    out = _probe(_PROBE, home, cid).stdout.splitlines()
    assert out[0].split()[0] == "0" and out[1] == "[]", out
    p = _probe(_CLI_PROBE, home, cid)
    assert cid in p.stdout and p.stderr.strip().splitlines()[-1] == "[]", p.stderr
    # The explain step of the same lookup works from a fresh store too.
    with AuditStore(home) as s:
        assert explain(s.call(cid)).record is not None
