"""Call events and progress: ``registry.subscribe`` (sync and async subscribers, bounded and
isolated from calls) and ``ctx.progress`` (rate-limited, redacted, bounded on the record and the
span)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from support.otlp import OtlpHttpReceiver

from tooltrace import CallContext, Status, ToolCall, ToolRegistry, tool
from tooltrace.events import CallFinished, CallProgress, CallStarted, CallStep
from tooltrace.telemetry import TracingSink

SECRET = "sk-" + "a1b2c3d4" * 5


@tool()
def counter(ctx: CallContext, n: int) -> int:
    """Reports progress n times, each with a message that holds a secret."""
    for i in range(n):
        ctx.progress(i + 1, n, f"item {i} key={SECRET}")
    return n


@tool()
def nothing() -> str:
    """Returns at once."""
    return "ok"


def _registry(tmp_path: Path, **kw: Any) -> ToolRegistry:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", **kw)
    reg.register(counter)
    reg.register(nothing)
    return reg


def test_a_subscriber_sees_started_steps_progress_finished(tmp_path: Path) -> None:
    reg = _registry(tmp_path, progress_interval_s=0.0)
    events: list[Any] = []
    sub = reg.subscribe(events.append)
    env = reg.call(ToolCall("counter", {"n": 3}))
    assert sub.flush(5)
    reg.shutdown()
    kinds = [e.kind for e in events]
    assert kinds[0] == "step" and kinds[-1] == "finished"
    assert kinds.count("started") == 1 and kinds.count("progress") == 3
    assert kinds.index("started") < kinds.index("progress")
    started = next(e for e in events if isinstance(e, CallStarted))
    assert (started.call_id, started.tool, started.depth) == (env.call_id, "counter", 0)
    steps = [e.step.step for e in events if isinstance(e, CallStep)]
    assert steps == [s.step for s in env.steps]
    prog = [e.mark for e in events if isinstance(e, CallProgress)]
    assert [(m.done, m.total) for m in prog] == [(1, 3), (2, 3), (3, 3)]
    assert all(SECRET not in (m.message or "") and "REDACTED" in (m.message or "")
               for m in prog)
    fin = events[-1]
    assert isinstance(fin, CallFinished) and fin.record is env.record
    assert sub.delivered == len(events) and sub.dropped == 0 and sub.errors == 0


def test_step_details_reach_subscribers_redacted(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    steps: list[CallStep] = []
    sub = reg.subscribe(steps.append, kinds=["step"])
    reg.call(ToolCall("counter", {"n": "not a number " + SECRET}))  # refused: schema
    assert sub.flush(5)
    reg.shutdown()
    assert steps and all(SECRET not in repr(s.step.detail) for s in steps)


def test_only_the_kinds_asked_for(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    got: list[Any] = []
    sub = reg.subscribe(got.append, kinds={"finished"})
    reg.call(ToolCall("nothing", {}))
    reg.call(ToolCall("missing", {}))  # refused: a finished event all the same
    assert sub.flush(5)
    reg.shutdown()
    assert [(e.kind, e.record.status) for e in got] == [
        ("finished", Status.OK), ("finished", Status.REJECTED)]
    with pytest.raises(ValueError, match="kinds"):
        reg.subscribe(got.append, kinds=["begun"])


def test_a_raising_subscriber_is_counted_and_breaks_nothing(tmp_path: Path) -> None:
    reg = _registry(tmp_path)

    def boom(_ev: Any) -> None:
        raise RuntimeError("subscriber bug")

    bad = reg.subscribe(boom)
    good: list[Any] = []
    ok = reg.subscribe(good.append, kinds=["finished"])
    envs = [reg.call(ToolCall("nothing", {})) for _ in range(5)]
    assert bad.flush(5) and ok.flush(5)
    reg.shutdown()
    assert all(e.ok for e in envs)
    assert bad.errors >= 5 and bad.delivered == 0
    assert len(good) == 5


def test_a_stuck_subscriber_loses_its_own_events_only(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    release = threading.Event()
    stuck = reg.subscribe(lambda _ev: release.wait(), kinds=["finished"], max_queue=4)
    envs = [reg.call(ToolCall("nothing", {})) for _ in range(50)]
    # Every call returned while the subscriber was blocked: nothing waits for it.
    assert all(e.ok for e in envs)
    assert stuck.dropped >= 50 - 4 - 1
    release.set()
    assert stuck.flush(5)
    reg.shutdown()
    assert stuck.delivered + stuck.dropped == 50


def test_an_async_subscriber_runs_on_its_loop(tmp_path: Path) -> None:
    reg = _registry(tmp_path, progress_interval_s=0.0)
    got: list[Any] = []
    loops: set[int] = set()

    async def on_event(ev: Any) -> None:
        loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0)
        got.append(ev)

    async def main() -> int:
        sub = reg.subscribe(on_event, kinds=["progress", "finished"])
        env = await reg.acall(ToolCall("counter", {"n": 2}))
        while sub.delivered < 3:
            await asyncio.sleep(0.01)
        sub.close()
        assert env.ok
        return id(asyncio.get_running_loop())

    loop_id = asyncio.run(main())
    reg.shutdown()
    assert loops == {loop_id}
    assert [e.kind for e in got] == ["progress", "progress", "finished"]
    with pytest.raises(TypeError, match="running event loop"):
        reg.subscribe(on_event)


def test_progress_is_rate_limited_and_bounded(tmp_path: Path) -> None:
    reg = _registry(tmp_path, progress_interval_s=3600.0)
    got: list[CallProgress] = []
    sub = reg.subscribe(got.append, kinds=["progress"])
    env = reg.call(ToolCall("counter", {"n": 10_000}))
    assert sub.flush(5)
    reg.shutdown()
    # The first report, then the last (at total: published at once).
    assert [(m.mark.seq, m.mark.done) for m in got] == [(0, 1), (9_999, 10_000)]
    marks = env.record.progress
    assert [m.seq for m in marks] == [0, 9_999]


def test_the_record_keeps_at_most_sixteen_marks_the_latest_last(tmp_path: Path) -> None:
    @tool()
    def chatty(ctx: CallContext) -> None:
        """Reports 100 times, with no total."""
        for i in range(100):
            ctx.progress(i, message="x" * 1000)

    reg = _registry(tmp_path, progress_interval_s=0.0)
    reg.register(chatty)
    env = reg.call(ToolCall("chatty", {}))
    reg.shutdown()
    marks = env.record.progress
    assert len(marks) == 16
    assert [m.seq for m in marks] == [*range(15), 99]
    assert all(m.total is None and len(m.message or "") == 200 for m in marks)


@pytest.mark.parametrize("args", [("1",), (-1,), (float("nan"),), (1, 0), (True,), (1, None, 3)])
def test_bad_progress_is_a_typed_error(args: tuple[Any, ...]) -> None:
    ctx = CallContext("c", "r", "t", 5.0, None, None)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match="progress"):
        ctx.progress(*args)


def test_progress_events_on_the_span(tmp_path: Path) -> None:
    with OtlpHttpReceiver() as rx:
        sink = TracingSink(endpoint=rx.endpoint)
        reg = _registry(tmp_path, sinks=[sink], progress_interval_s=0.0)
        reg.call(ToolCall("counter", {"n": 40}))
        reg.shutdown()
        (span,) = rx.wait_for(1)
    prog = [e for e in span.events if e.name == "tooltrace.progress"]
    assert len(prog) == 16  # bounded
    assert prog[-1].attributes["tooltrace.progress.done"] == 40
    assert prog[-1].attributes["tooltrace.progress.total"] == 40
    assert all(SECRET not in str(e.attributes) for e in prog)


def test_calls_on_many_threads_lose_no_event(tmp_path: Path) -> None:
    # Producers race to make the queue non-empty: exactly one must wake the worker, every time.
    reg = _registry(tmp_path)
    got: list[Any] = []
    seen_sync: list[Any] = []

    async def on_event(ev: Any) -> None:
        got.append(ev)

    async def main() -> None:
        sub = reg.subscribe(on_event, kinds=["finished"], max_queue=100_000)
        sync = reg.subscribe(seen_sync.append, kinds=["finished"], max_queue=100_000)

        def burst() -> None:
            for _ in range(50):
                reg.call(ToolCall("nothing", {}))

        threads = [threading.Thread(target=burst) for _ in range(8)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            await asyncio.sleep(0.01)
        for _ in range(1000):  # a deadline for a failure, not a timing
            if sub.delivered == 400:
                break
            await asyncio.sleep(0.01)
        assert sync.flush(10)
        assert (sub.delivered, sub.dropped, sync.delivered, sync.dropped) == (400, 0, 400, 0)

    asyncio.run(main())
    reg.shutdown()
    assert len(got) == 400 and len(seen_sync) == 400
