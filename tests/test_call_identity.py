"""A call id is an identity across processes: a caller-supplied id that the trail already holds
(recorded by an earlier process, live or compacted) is refused before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import uuid_utils
from support.trail import CountingTrail, assert_ids_were_minted

from tooltrace import Stage, Status, ToolCall, ToolRegistry, tool
from tooltrace.audit import compact, recorded
from tooltrace.builtins import register_builtins
from tooltrace.integrations import providers
from tooltrace.integrations.adapter import make_call
from tooltrace.pipeline._book import StatusTable
from tooltrace.telemetry import AuditSink

_EARLIER = textwrap.dedent("""
    import json, sys
    from tooltrace import ToolCall, ToolRegistry
    from tooltrace.builtins import register_builtins
    from tooltrace.telemetry import AuditSink
    home, ws, cid = sys.argv[1:4]
    reg = register_builtins(ToolRegistry(workspace=ws, sinks=[AuditSink(home=home)]))
    env = reg.call(ToolCall("write_text", {"path": "a.txt", "text": "first"}, call_id=cid))
    reg.shutdown()
    print(json.dumps({"status": env.status.value, "call_id": env.call_id}))
""")


def _record_in_earlier_process(home: Path, ws: Path, cid: str) -> None:
    out = subprocess.run([sys.executable, "-c", _EARLIER, str(home), str(ws), cid],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"status": "ok", "call_id": cid}


def _registry(home: Path, ws: Path) -> ToolRegistry:
    return register_builtins(ToolRegistry(workspace=ws, sinks=[AuditSink(home=home)]))


def _assert_refused(reg: ToolRegistry, ws: Path, cid: str, reason: str) -> None:
    env = reg.call(ToolCall("write_text", {"path": "a.txt", "text": "second"}, call_id=cid))
    assert env.status is Status.REJECTED and env.reject_stage is Stage.PARAMS, env.summary
    assert env.call_id != cid
    assert env.steps[0].detail == {"reason": reason, "call_id": cid.lower()}
    assert (ws / "a.txt").read_text() == "first"  # nothing ran


@pytest.mark.parametrize("kind", ["uuid7", "uuid4"])
def test_an_id_recorded_by_an_earlier_process_is_refused(tmp_path: Path, kind: str) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    cid = str(uuid_utils.uuid7()) if kind == "uuid7" else str(uuid.uuid4())
    _record_in_earlier_process(home, ws, cid)
    reg = _registry(home, ws)
    try:
        _assert_refused(reg, ws, cid, "duplicate_call_id")
        # Upper case is the same id.
        _assert_refused(reg, ws, cid.upper(), "duplicate_call_id")
        fresh = str(uuid_utils.uuid7())
        ok = reg.call(ToolCall("write_text", {"path": "b.txt", "text": "x"}, call_id=fresh))
        assert ok.status is Status.OK and ok.call_id == fresh
    finally:
        reg.shutdown()


def test_an_id_only_in_compacted_parquet_is_refused(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    cid = str(uuid_utils.uuid7())
    _record_in_earlier_process(home, ws, cid)
    result = compact(home, prune=True)
    assert result.segments >= 1
    assert not list((home / "audit" / "segments").glob("*.jsonl"))  # only Parquet holds it
    assert recorded(home / "audit", cid)
    reg = _registry(home, ws)
    try:
        _assert_refused(reg, ws, cid, "duplicate_call_id")
    finally:
        reg.shutdown()


def test_an_unreadable_trail_refuses_a_supplied_id_and_not_a_call_without_one(
    tmp_path: Path,
) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    cid = str(uuid_utils.uuid7())
    _record_in_earlier_process(home, ws, cid)
    compact(home, prune=True)
    for f in (home / "audit" / "parquet" / "calls").glob("*.parquet"):
        f.write_bytes(b"not parquet at all")
    reg = _registry(home, ws)
    try:
        # The damaged file's range holds the id: the answer is unknown, so the id is not used.
        _assert_refused(reg, ws, cid, "call_id_unverifiable")
        env = reg.call(ToolCall("write_text", {"path": "b.txt", "text": "x"}))
        assert env.status is Status.OK
    finally:
        reg.shutdown()


def test_an_id_quoted_inside_another_calls_arguments_is_not_taken_for_a_record(
    tmp_path: Path,
) -> None:
    """The look-up matches a record's own id at the start of its line, nothing else."""

    @tool(effect="none")
    def note(payload: dict[str, str], text: str) -> str:
        """Keep a note."""
        return text

    home = tmp_path / "home"
    cid = str(uuid_utils.uuid7())
    reg = ToolRegistry(workspace=tmp_path, sinks=[AuditSink(home=home)])
    reg.register(note)
    quoted = {"k": "c", "call_id": cid}
    env = reg.call(ToolCall("note", {"payload": quoted, "text": '\n{"k":"c","call_id":"' + cid}))
    assert env.status is Status.OK
    reg.shutdown()
    assert cid in (next((home / "audit" / "segments").glob("*.jsonl"))).read_text()
    assert not recorded(home / "audit", cid)
    reg = ToolRegistry(workspace=tmp_path, sinks=[AuditSink(home=home)])
    reg.register(note)
    try:
        env = reg.call(ToolCall("note", {"payload": {}, "text": "x"}, call_id=cid))
        assert env.status is Status.OK and env.call_id == cid
    finally:
        reg.shutdown()


def test_the_status_table_says_which_ids_it_may_have_forgotten() -> None:
    ids = sorted(str(uuid_utils.uuid7()) for _ in range(4))
    table = StatusTable(claimed=2)
    assert table.forgotten == ""
    assert table.claim(ids[1], ()) and table.claim(ids[0], ())
    assert table.forgotten == ""
    assert table.claim(ids[2], ())  # lets ids[1] go
    assert table.forgotten == ids[1]
    assert table.claim(str(uuid.uuid4()), ())  # lets ids[0] go: older, the mark stays
    assert table.forgotten == ids[1]
    assert table.claim(ids[3], ())  # lets ids[2] go
    assert table.forgotten == ids[2]
    # A UUID that is not a UUIDv7 carries no time and never moves the mark.
    table = StatusTable(claimed=1)
    other = "ffffffff-ffff-4fff-bfff-ffffffffffff"
    assert table.claim(other, ()) and table.claim(ids[0], ())
    assert table.forgotten == ""


def test_an_id_the_registry_minted_is_taken_without_a_trail_look_up(tmp_path: Path) -> None:
    """``new_call_id`` names a call before it runs (the MCP proxy does, to pass a client's
    cancel on) without paying a search of the trail, which a fresh process otherwise does for
    every supplied id in its first minutes."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    sink = CountingTrail(home=home)
    reg = register_builtins(ToolRegistry(workspace=ws, sinks=[sink]))
    try:
        minted = reg.new_call_id()
        env = reg.call(ToolCall("write_text", {"path": "a.txt", "text": "x"}, call_id=minted))
        assert env.status is Status.OK and env.call_id == minted
        assert sink.lookups == 0
        # Minted once, vouched for once: used again it is a duplicate like any other id.
        again = reg.call(ToolCall("write_text", {"path": "b.txt", "text": "y"}, call_id=minted))
        assert again.status is Status.REJECTED and again.reject_stage is Stage.PARAMS
        assert again.steps[0].detail == {"reason": "duplicate_call_id", "call_id": minted}
        # An id made elsewhere just now is still looked up (an earlier process may hold it).
        other = str(uuid_utils.uuid7())
        env = reg.call(ToolCall("write_text", {"path": "c.txt", "text": "z"}, call_id=other))
        assert env.status is Status.OK and sink.lookups == 1
    finally:
        reg.shutdown()


def test_the_status_table_vouches_for_a_minted_id_once_and_forgets_the_oldest() -> None:
    table = StatusTable(minted=2)
    first, second, third = table.mint(), table.mint(), table.mint()
    assert len({first, second, third}) == 3 and all(i[14] == "7" for i in (first, second))
    assert not table.vouched(first)  # let go: the oldest of three, with room for two
    assert table.vouched(second) and table.vouched(third)
    assert not table.vouched(second)
    assert not table.vouched(str(uuid_utils.uuid7()))


def test_adapters_name_their_calls_with_ids_the_registry_made(tmp_path: Path) -> None:
    """``make_call`` (every framework adapter's) and a provider's tool call (``call_from``)
    take ``registry.new_call_id()``: a fresh process never searches its trail for them."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    trail = CountingTrail(home=home)
    reg = register_builtins(ToolRegistry(workspace=ws, sinks=[trail]))
    try:
        call = make_call(reg, "write_text", {"path": "a.txt", "text": "x"}, integration="t",
                         provider_id="p-1", mode="default")
        env = reg.call(call)
        assert env.status is Status.OK and env.call_id == call.call_id
        raw = {"id": "call_1", "type": "function",
               "function": {"name": "write_text", "arguments": '{"path": "b.txt", "text": "y"}'}}
        env = providers.call_from(reg, raw)
        assert env.status is Status.OK and env.call_id != "call_1"
        assert_ids_were_minted(reg, trail, "write_text", {"path": "c.txt", "text": "z"})
    finally:
        reg.shutdown()
