"""The lookup files beside the compacted Parquet files: ``tooltrace autopsy`` answers from them
(and from the rows not compacted yet) without DuckDB, with exactly the report DuckDB gives;
``verify`` re-derives them from the Parquet; a damaged one is detected and read around; a
compaction killed while writing one loses nothing; older trails get them from ``compact``.

The trail: a real registry workload in strict mode (approvals, hooks, a late resolution), nested
calls, synthetic calls of every kind (cancelled, unknown, artifacts) compacted in two runs, then
calls left in sealed segments.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from support.audit import run_real_workload, workload

from tooltrace import CallContext, ToolCall, create_registry, tool
from tooltrace.audit import AuditStore, compact, verify
from tooltrace.audit._lookupfile import encode_lookup, lookup_rel
from tooltrace.audit._manifest import read_manifest, write_manifest
from tooltrace.cli import main
from tooltrace.telemetry import AuditSink

ROOT = Path(__file__).resolve().parents[1]


@tool()
def leaf(ctx: CallContext, n: int) -> int:
    """Doubles n."""
    return n * 2


@tool()
def parent(ctx: CallContext, n: int) -> int:
    """Calls leaf twice."""
    return int(ctx.call("leaf", {"n": n}).data) + int(ctx.call("leaf", {"n": n + 1}).data)


def _emit(home: Path, n: int, seed: int) -> list[str]:
    sink = AuditSink(home)
    ids = []
    for r in workload(n, seed=seed):
        sink.emit(r)
        ids.append(r.call_id)
    sink.shutdown()
    return ids


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("lookupfile")
    home, ws = base / "home", base / "ws"
    ws.mkdir()
    real = run_real_workload(home, ws, strict=True)
    reg = create_registry(ws, home=home, metrics=False, logging=False)
    reg.register(leaf)
    reg.register(parent)
    nested = reg.call(ToolCall("parent", {"n": 1})).call_id
    reg.shutdown()
    compact(home)
    synthetic = _emit(home, 200, seed=4)  # several blocks in one file
    compact(home)
    sealed = _emit(home, 20, seed=6)  # not compacted
    yield {"home": home, "real": real, "nested": nested, "synthetic": synthetic,
           "sealed": sealed}


def _ids(home: Path) -> list[str]:
    with AuditStore(home) as s:
        return [r[0] for r in s.sql("SELECT call_id FROM tool_calls UNION"
                                    " SELECT call_id FROM tool_call_intents ORDER BY 1").rows]


def _without_lookups(src: Path, dst: Path) -> Path:
    """A copy of the home as a tooltrace without lookup files would have left it."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.lock", "*.lookup"))
    adir = dst / "audit"
    m = read_manifest(adir)
    m.pop("lookups")
    write_manifest(adir, m)
    return dst


def _autopsy(home: Path, cid: str, *extra: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["autopsy", cid, "--home", str(home), *extra],
                             env={"COLUMNS": "200", "NO_COLOR": "1"})
    return res.exit_code, res.stdout, res.stderr


def test_every_report_is_the_same_with_and_without_lookup_files(
        trail: dict[str, Any], tmp_path: Path) -> None:
    home = trail["home"]
    old = _without_lookups(home, tmp_path / "old")
    every = _ids(home)
    assert set(trail["synthetic"]) | set(trail["sealed"]) <= set(every)
    # Every kind of the real workload (with its strict intents), the nested calls, every kind
    # of synthetic call (the first eleven: cancelled, unknown, artifacts ...), a spread of the
    # others and of the calls not compacted yet.
    real = set(trail["real"].values())
    nested = {c for c in every if c not in real and c not in trail["synthetic"]
              and c not in trail["sealed"]}
    syn = trail["synthetic"]
    ids = sorted(real | nested | set(syn[:11]) | set(syn[::25]) | {syn[-1]}
                 | set(trail["sealed"][::10]))
    assert real <= set(every) and trail["nested"] in nested
    with AuditStore(home) as s:
        shown = s.sql("SELECT DISTINCT status FROM tool_calls WHERE list_contains($ids, call_id)",
                      {"ids": ids}).rows
    assert {"ok", "cancelled", "unknown", "failed", "rejected"} <= {r[0] for r in shown}
    for cid in ids:
        for extra in ((), ("--json",)):
            new = _autopsy(home, cid, *extra)
            assert new == _autopsy(old, cid, *extra), (cid, extra)
            assert new[0] == 0 and cid in new[1] and new[2] == ""
    # Prefixes, ambiguous prefixes and unknown ids too.
    for p in (trail["synthetic"][5][:20], trail["sealed"][3][:24], ids[0][:4],
              "ffffffff-ffff", trail["nested"][:30]):
        assert _autopsy(home, p) == _autopsy(old, p), p


def test_the_facts_that_matter_come_from_the_lookup_files(trail: dict[str, Any]) -> None:
    home = trail["home"]
    _c, out, _e = _autopsy(home, trail["nested"], "--json")
    a = orjson.loads(out)
    assert [d["tool"] for d in a["family"]["descendants"]] == ["leaf", "leaf"]
    child = a["family"]["descendants"][0]["call_id"]
    up = orjson.loads(_autopsy(home, child, "--json")[1])
    assert [x["call_id"] for x in up["family"]["ancestors"]] == [trail["nested"]]
    late = orjson.loads(_autopsy(home, trail["real"]["unknown"], "--json")[1])
    assert late["resolution"] is not None and late["call"]["status"] == "unknown"
    approved = orjson.loads(_autopsy(home, trail["real"]["approved"], "--json")[1])
    assert approved["approvals"] and approved["approvals"][0]["approver"] == "alice"
    with AuditStore(home) as s:
        kinds = {r[0] for r in s.sql("SELECT status FROM tool_calls").rows}
        art = s.sql("SELECT call_id FROM tool_calls WHERE artifact_path IS NOT NULL").rows
    assert {"cancelled", "unknown", "ok", "failed"} <= kinds and art
    shown = orjson.loads(_autopsy(home, art[0][0], "--json")[1])
    assert shown["artifact"]["sha256"]


_PROBE = """
import sys
from tooltrace.cli import main
for cid in sys.argv[2:]:
    try:
        main(["autopsy", cid, "--home", sys.argv[1]])
    except SystemExit as e:
        assert not e.code, e.code
print(sorted(m for m in sys.modules if m.split(".")[0] in ("duckdb", "pyarrow", "hashlib")),
      file=sys.stderr)
"""


def test_the_command_does_not_import_duckdb(trail: dict[str, Any]) -> None:
    # Compacted calls (one with nested calls, one resolved later), a prefix, and a call that
    # is still in a sealed segment.
    ids = [trail["nested"], trail["real"]["unknown"], trail["synthetic"][150][:34],
           trail["sealed"][2]]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TOOLTRACE_HOME", None)
    p = subprocess.run([sys.executable, "-c", _PROBE, str(trail["home"]), *ids], env=env,
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1] == "[]", p.stderr
    assert p.stdout.count("─── call ") == len(ids)


def _copy(trail: dict[str, Any], dst: Path) -> Path:
    shutil.copytree(trail["home"], dst, ignore=shutil.ignore_patterns("*.lock"))
    return dst


def _lookup_of(home: Path, table: str, cid: str) -> Path:
    adir = home / "audit"
    m = read_manifest(adir)
    rel = next(r for r in m["files"][table] if m["ranges"][r][0] <= cid <= m["ranges"][r][1])
    return adir / lookup_rel(rel)


def _spoil_block(path: Path) -> None:
    data = bytearray(path.read_bytes())
    index = int.from_bytes(data[24:32], "little")  # the header's index offset
    data[index - 5] ^= 0x01  # inside the last block
    path.write_bytes(bytes(data))


def _spoil_index(path: Path) -> None:
    data = bytearray(path.read_bytes())
    # The last index entry's first id: point it past every id in the file.
    entry = 40 + 8 + 4 + 32
    data[len(data) - entry] = ord("f")
    path.write_bytes(bytes(data))


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _other_files(path: Path) -> None:
    other = next(p for p in path.parent.glob("*.lookup") if p != path)
    shutil.copyfile(other, path)


@pytest.mark.parametrize("spoil", [_spoil_block, _spoil_index, _cut, _other_files, os.unlink])
def test_a_damaged_lookup_file_fails_verify_and_autopsy_reads_the_parquet(
        trail: dict[str, Any], tmp_path: Path, spoil: Any) -> None:
    good = trail["home"]
    home = _copy(trail, tmp_path / "home")
    assert verify(home).ok and verify(home).lookups >= 6
    cid = trail["synthetic"][-1]  # in the last block of its file
    steps = _lookup_of(home, "steps", cid)
    spoil(steps)
    report = verify(home)
    assert not report.ok
    found = [f for f in report.findings if f.severity == "error"]
    assert [f.segment for f in found] == [str(steps.relative_to(home / "audit"))], found
    assert found[0].kind in ("edited", "deleted")
    code, out, err = _autopsy(home, cid)
    assert (code, out) == _autopsy(good, cid)[:2]
    assert "warning: lookup file not trusted" in err and "tooltrace verify" in err
    # Removing the bad file and compacting rebuilds it.
    if steps.exists():
        steps.unlink()
    compact(home)
    assert verify(home).ok
    assert _autopsy(home, cid) == _autopsy(good, cid)


def test_rederive_catches_a_lookup_file_rewritten_with_the_key(trail: dict[str, Any],
                                                               tmp_path: Path) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    home = _copy(trail, tmp_path / "home")
    cid = trail["synthetic"][42]
    path = _lookup_of(home, "calls", cid)
    rel = str(path.relative_to(home / "audit"))[: -len(".lookup")] + ".parquet"
    tbl = pq.read_table(home / "audit" / rel)
    forged = tbl.set_column(tbl.schema.get_field_index("tool"), "tool",
                            pc.if_else(pc.equal(tbl["call_id"], cid), "forged", tbl["tool"]))
    key = (home / "audit.key").read_bytes().strip()
    data = encode_lookup(forged, "calls", rel, key)
    assert data is not None
    path.write_bytes(data)
    # Written with the key, it passes the MAC check; re-derived from the Parquet, it fails.
    assert verify(home).ok
    report = verify(home, rederive=True)
    assert [f.segment for f in report.findings] == [str(path.relative_to(home / "audit"))]
    res = CliRunner().invoke(main, ["verify", "--rederive", "--home", str(home)])
    assert res.exit_code == 1 and "does not match its Parquet file" in res.stdout
    assert verify(trail["home"], rederive=True).ok


def test_without_the_key_the_parquet_is_read(trail: dict[str, Any], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    home = _copy(trail, tmp_path / "home")
    monkeypatch.delenv("TOOLTRACE_AUDIT_KEY", raising=False)
    (home / "audit.key").rename(tmp_path / "key-elsewhere")
    cid = trail["synthetic"][10]
    code, out, err = _autopsy(home, cid)
    assert (code, out) == _autopsy(trail["home"], cid)[:2]
    assert "no audit key" in err


def test_an_older_trail_gets_its_lookup_files_from_compact(trail: dict[str, Any],
                                                           tmp_path: Path) -> None:
    home = _without_lookups(trail["home"], tmp_path / "old")
    cid = trail["synthetic"][99]
    before = _autopsy(home, cid)
    assert before[2] == "" and not list((home / "audit").rglob("*.lookup"))
    compact(home)
    m = read_manifest(home / "audit")
    listed = {rel for t in ("calls", "steps", "intents", "resolutions")
              for rel in m["files"].get(t, [])}
    assert set(m["lookups"]) == listed
    assert all((home / "audit" / lookup_rel(rel)).exists() for rel in listed)
    assert verify(home).lookups == len(listed)
    assert _autopsy(home, cid) == before


_KILLED = """
import os, signal, sys
from tooltrace.audit import _lookupfile, compact

def write_half(path, data):
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data[: len(data) // 2])
        f.flush()
    os.kill(os.getpid(), signal.SIGKILL)

_lookupfile.replace_whole = write_half
compact(sys.argv[1])
"""


def test_kill_9_while_writing_a_lookup_file_loses_nothing(trail: dict[str, Any],
                                                          tmp_path: Path) -> None:
    home = _copy(trail, tmp_path / "home")
    before = read_manifest(home / "audit")
    cid = trail["sealed"][7]
    want = _autopsy(home, cid)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", _KILLED, str(home)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    # Killed after the Parquet file and before its lookup file was whole: the manifest did
    # not switch, the half-written file is only a temporary one, and readers see what they
    # saw before.
    assert read_manifest(home / "audit") == before
    lookups = {p.name for p in (home / "audit").rglob("*.lookup")}
    assert lookups == {p.name for p in trail["home"].joinpath("audit").rglob("*.lookup")}
    assert _autopsy(home, cid) == want
    assert verify(home).ok
    compact(home)
    assert _autopsy(home, cid) == want
    m = read_manifest(home / "audit")
    assert set(m["lookups"]) == {rel for t in ("calls", "steps", "intents", "resolutions")
                                 for rel in m["files"].get(t, [])}
    assert verify(home).ok



def test_a_range_read_runs_on_across_blocks(trail: dict[str, Any]) -> None:
    """A prefix or parent/children read whose range starts in one block and goes on into the
    next ones reads every row of the range and reports no damage."""
    import pyarrow.parquet as pq

    from tooltrace.audit._lookupfile import LookupFile, read_key

    home = trail["home"]
    synthetic = sorted(trail["synthetic"])
    path = _lookup_of(home, "calls", synthetic[0])
    rel = str(path.relative_to(home / "audit"))[: -len(".lookup")] + ".parquet"
    stored = sorted(pq.read_table(home / "audit" / rel, columns=["call_id"])["call_id"]
                    .to_pylist())
    assert len(stored) > 130  # at least three blocks of 64 calls
    key = read_key(home)
    assert key is not None
    lf = LookupFile(str(path), rel, "calls", key)
    try:
        lo, hi = stored[10], stored[-3]
        got = [r[lf.ci] for r in lf.between(lo, hi)]
    finally:
        lf.close()
    assert got == [c for c in stored if lo <= c < hi]
