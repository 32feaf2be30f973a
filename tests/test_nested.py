"""Nested calls: a tool calls another through its context (``ctx.call`` / ``ctx.acall``), and
the child runs the whole pipeline as a call of the same run, one level deeper, recorded with its
parent and shown under it by ``autopsy``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tooltrace import (
    CallContext,
    Policy,
    Stage,
    Status,
    ToolCall,
    ToolRegistry,
    create_registry,
    tool,
)
from tooltrace.audit._manifest import read_manifest, write_manifest
from tooltrace.policy import DenyNested


@tool()
def leaf(ctx: CallContext, n: int) -> int:
    """The innermost tool: doubles n."""
    return n * 2


@tool()
def middle(ctx: CallContext, n: int) -> int:
    """Calls leaf and adds one."""
    env = ctx.call("leaf", {"n": n})
    if not env.ok:
        raise RuntimeError(f"leaf refused: {env.summary}")
    return int(env.data) + 1


@tool()
def top(ctx: CallContext, n: int) -> int:
    """Calls middle twice."""
    a = ctx.call("middle", {"n": n})
    b = ctx.call("middle", {"n": n + 1})
    if not (a.ok and b.ok):
        raise RuntimeError("a nested call failed")
    return int(a.data) + int(b.data)


@tool()
async def atop(ctx: CallContext, n: int) -> int:
    """The async parent: calls middle through acall."""
    env = await ctx.acall("middle", {"n": n})
    return int(env.data) if env.ok else -1


def _registry(tmp_path: Path, **kw: Any) -> ToolRegistry:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", **kw)
    for t in (leaf, middle, top, atop):
        reg.register(t)
    return reg


def test_three_levels_record_parent_depth_run_and_mode(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    records = []
    sub = reg.subscribe(lambda ev: records.append(ev.record), kinds=["finished"])
    env = reg.call(ToolCall("top", {"n": 3}, run_id="run-a"))
    assert env.status is Status.OK and env.data == (7 + 9)
    assert sub.flush(5)
    reg.shutdown()
    by_tool: dict[str, list[Any]] = {}
    for r in records:
        by_tool.setdefault(r.tool, []).append(r)
    (t,) = by_tool["top"]
    assert (t.depth, t.parent_call_id) == (0, None)
    assert [m.parent_call_id for m in by_tool["middle"]] == [t.call_id, t.call_id]
    assert {m.depth for m in by_tool["middle"]} == {1}
    mids = {m.call_id for m in by_tool["middle"]}
    assert {lf.parent_call_id for lf in by_tool["leaf"]} == mids
    assert {lf.depth for lf in by_tool["leaf"]} == {2}
    assert {r.run_id for r in records} == {"run-a"}
    exec_step = next(s for s in t.steps if s.step == "execute")
    assert exec_step.detail is not None and exec_step.detail["nested_calls"] == 2


def test_acall_from_an_async_tool(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    env = asyncio.run(reg.acall(ToolCall("atop", {"n": 1})))
    reg.shutdown()
    assert env.status is Status.OK and env.data == 3


def test_max_depth_refuses_the_call_too_deep(tmp_path: Path) -> None:
    reg = _registry(tmp_path, max_depth=1)
    seen = []
    reg.subscribe(lambda ev: seen.append(ev.record), kinds=["finished"])
    env = reg.call(ToolCall("top", {"n": 1}))
    reg.shutdown()
    assert env.status is Status.FAILED  # top saw its child fail
    leaf_rec = next(r for r in seen if r.tool == "leaf")
    assert (leaf_rec.status, leaf_rec.reject_stage) == (Status.REJECTED, Stage.POLICY)
    assert leaf_rec.depth == 2 and not leaf_rec.execution_started
    step = next(s for s in leaf_rec.steps if s.step == "policy")
    assert (step.decider, step.decision) == ("policy:max_depth", "deny")
    assert "the maximum is 1" in leaf_rec.summary


def test_max_depth_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tooltrace import ConfigurationError

    monkeypatch.setenv("TOOLTRACE_MAX_DEPTH", "0")
    reg = _registry(tmp_path)
    assert reg.max_depth == 0
    assert reg.call(ToolCall("middle", {"n": 1})).status is Status.FAILED
    reg.shutdown()
    monkeypatch.setenv("TOOLTRACE_MAX_DEPTH", "deep")
    with pytest.raises(ConfigurationError, match="TOOLTRACE_MAX_DEPTH"):
        ToolRegistry(workspace=tmp_path)


def test_policy_matches_on_parent_tool_and_depth(tmp_path: Path) -> None:
    rule = DenyNested(parents=frozenset({"middle"}), tools=frozenset({"leaf"}))
    reg = _registry(tmp_path, policy=Policy([rule]))
    seen = []
    reg.subscribe(lambda ev: seen.append(ev.record), kinds=["finished"])
    assert reg.call(ToolCall("leaf", {"n": 1})).ok  # not nested: the rule has no opinion
    assert reg.call(ToolCall("middle", {"n": 1})).status is Status.FAILED
    reg.shutdown()
    refused = [r for r in seen if r.status is Status.REJECTED]
    assert [(r.tool, r.depth) for r in refused] == [("leaf", 1)]
    step = next(s for s in refused[0].steps if s.step == "policy")
    assert step.decider == "policy:deny_nested"
    assert "made by middle" in refused[0].summary


def test_child_deadline_is_capped_by_the_parent_and_cancel_reaches_it(tmp_path: Path) -> None:
    budget: list[float] = []

    @tool(timeout_s=30.0)
    def sleeper(ctx: CallContext) -> str:
        """Waits until told to stop."""
        budget.append(ctx.remaining())
        ctx.wait(30.0)
        ctx.check()
        return "woke"

    @tool(timeout_s=0.3)
    def impatient(ctx: CallContext) -> str:
        """Calls sleeper with little time left."""
        return str(ctx.call("sleeper").status)

    reg = _registry(tmp_path)
    reg.register(sleeper)
    reg.register(impatient)
    seen = []
    reg.subscribe(lambda ev: seen.append(ev.record), kinds=["finished"])
    reg.call(ToolCall("impatient", {}))
    reg.shutdown()
    child = next(r for r in seen if r.tool == "sleeper")
    # The child's deadline is the parent's (what is left of its 0.3 s), not its own 30 s, and
    # it stopped there: no wall-clock bound on how long that took on a busy host.
    assert len(budget) == 1 and budget[0] <= 0.3
    assert child.status in (Status.CANCELLED, Status.UNKNOWN, Status.FAILED)


def test_autopsy_shows_the_tree(tmp_path: Path) -> None:
    home = tmp_path / "home"
    reg = create_registry(tmp_path, home=home, metrics=False, logging=False)
    for t in (leaf, middle, top):
        reg.register(t)
    env = reg.call(ToolCall("top", {"n": 2}))
    assert env.ok
    reg.shutdown()
    cli = [str(Path(sys.executable).with_name("tooltrace")), "autopsy", "--home", str(home)]
    run = {**os.environ, "NO_COLOR": "1"}
    out = subprocess.run([*cli, env.call_id, "--json"], capture_output=True, text=True,
                         env=run, timeout=60)
    assert out.returncode == 0, out.stderr
    fam = json.loads(out.stdout)["family"]
    assert fam["ancestors"] == []
    tree = [(d["tool"], d["level"], d["depth"]) for d in fam["descendants"]]
    assert tree == [("middle", 1, 1), ("leaf", 2, 2), ("middle", 1, 1), ("leaf", 2, 2)]
    leaf_id = fam["descendants"][1]["call_id"]
    mid_id = fam["descendants"][0]["call_id"]
    out = subprocess.run([*cli, leaf_id, "--json"], capture_output=True, text=True, env=run,
                         timeout=60)
    a = json.loads(out.stdout)
    assert [u["call_id"] for u in a["family"]["ancestors"]] == [env.call_id, mid_id]
    assert a["call"]["parent_call_id"] == mid_id and a["call"]["depth"] == 2
    text = subprocess.run([*cli, mid_id], capture_output=True, text=True, env=run, timeout=60)
    assert text.returncode == 0, text.stderr
    assert f"parent               {env.call_id}  top (ok)" in text.stdout
    assert f"└ {leaf_id}  leaf (ok, depth 2)" in text.stdout


def test_spans_nest_under_the_parent_in_one_trace(tmp_path: Path) -> None:
    from support.otlp import OtlpHttpReceiver

    from tooltrace.telemetry import TracingSink

    with OtlpHttpReceiver() as rx:
        reg = _registry(tmp_path, sinks=[TracingSink(endpoint=rx.endpoint)])
        env = reg.call(ToolCall("top", {"n": 1}))
        reg.shutdown()
        spans = rx.wait_for(5)
    assert env.ok
    by_call = {s.attributes["gen_ai.tool.call.id"]: s for s in spans}
    top_span = by_call[env.call_id]
    assert top_span.parent_span_id is None
    assert {s.trace_id for s in spans} == {top_span.trace_id}
    for s in spans:
        parent = s.attributes.get("tooltrace.parent_call_id")
        if parent is None:
            continue
        assert s.parent_span_id == by_call[parent].span_id
        assert s.attributes["tooltrace.depth"] == by_call[parent].attributes.get(
            "tooltrace.depth", 0) + 1
    assert sorted(s.attributes.get("tooltrace.depth", 0) for s in spans) == [0, 1, 1, 2, 2]


def test_a_thread_tool_and_an_async_tool_nest_their_spans_too(tmp_path: Path) -> None:
    from support.otlp import OtlpHttpReceiver

    from tooltrace.telemetry import TracingSink

    @tool(execution="thread")
    def threaded(ctx: CallContext) -> int:
        """Calls leaf from a tool thread."""
        return int(ctx.call("leaf", {"n": 2}).data)

    with OtlpHttpReceiver() as rx:
        reg = _registry(tmp_path, sinks=[TracingSink(endpoint=rx.endpoint)])
        reg.register(threaded)
        a = reg.call(ToolCall("threaded", {}))
        b = reg.call(ToolCall("atop", {"n": 1}))  # async, on the registry's loop
        reg.shutdown()
        spans = rx.wait_for(5)
    assert a.ok and b.ok
    by_call = {s.attributes["gen_ai.tool.call.id"]: s for s in spans}
    for s in spans:
        parent = s.attributes.get("tooltrace.parent_call_id")
        if parent is not None:
            assert s.parent_span_id == by_call[parent].span_id
            assert s.trace_id == by_call[parent].trace_id


def test_a_trail_compacted_before_nesting_existed_still_reads(tmp_path: Path) -> None:
    # Parquet files written before tool_calls had parent_call_id, depth and progress: the
    # store reads them by name (those columns NULL) next to new rows that have them.
    import duckdb

    from tooltrace.audit import AuditStore, compact

    home = tmp_path / "home"
    reg = create_registry(tmp_path, home=home, metrics=False, logging=False)
    for t in (leaf, middle, top):
        reg.register(t)
    old = reg.call(ToolCall("leaf", {"n": 1}))
    reg.shutdown()
    result = compact(home, prune=True)
    calls_files = [p for p in (home / "audit").rglob("*.parquet") if "calls" in p.parts]
    assert calls_files and result is not None
    con = duckdb.connect()
    for f in calls_files:
        con.execute(f"COPY (SELECT * EXCLUDE (parent_call_id, depth, progress) FROM "
                    f"read_parquet('{f}')) TO '{f}.old' (FORMAT parquet)")
        os.replace(f"{f}.old", f)
    # That tooltrace wrote no lookup files either.
    m = read_manifest(home / "audit")
    del m["lookups"]
    write_manifest(home / "audit", m)
    reg = create_registry(tmp_path, home=home, metrics=False, logging=False)
    for t in (leaf, middle, top):
        reg.register(t)
    new = reg.call(ToolCall("middle", {"n": 1}))
    reg.shutdown()
    with AuditStore(home) as store:
        rows = store.sql("SELECT tool, depth, parent_call_id FROM tool_calls ORDER BY call_id"
                         ).rows
        assert store.call(old.call_id).record["depth"] is None
        assert store.call(new.call_id).record["depth"] == 0
    assert rows == [("leaf", None, None), ("middle", 0, None), ("leaf", 1, new.call_id)]
