"""The runtime contract: deadlines, admission (caps, FIFO queue, timeouts), cancellation and the
status each outcome ends in, for sync and async tools and callers, under randomised load."""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import os
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.runtime import live_with_marker, wait_for

from tooltrace import (
    CallContext,
    Effect,
    Stage,
    Status,
    ToolCall,
    ToolRegistry,
    ToolResultEnvelope,
    tool,
)
from tooltrace._ids import new_call_id
from tooltrace.builtins import CommandConfig, register_command_tools
from tooltrace.testing import RecordingSink


@tool("coop_sleep", effect=Effect.NONE, timeout_s=5.0)
def coop_sleep(ctx: CallContext, seconds: float) -> str:
    """Sleep, stopping as soon as the call is signalled (read-only)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if ctx.wait(left):
            ctx.check()
    return "slept"


@tool("ignore_sleep", effect=Effect.NONE, timeout_s=5.0)
def ignore_sleep(seconds: float) -> str:
    """Sleep and ignore every signal (read-only, so it can be abandoned)."""
    time.sleep(seconds)
    return "slept"


@tool("stubborn_write", effect=Effect.LOCAL, timeout_s=5.0)
def stubborn_write(seconds: float) -> str:
    """A side-effecting tool that ignores every signal until it is done."""
    time.sleep(seconds)
    return "written"


@tool("async_sleep", effect=Effect.NONE, timeout_s=5.0)
async def async_sleep(seconds: float) -> str:
    """Sleep on the event loop (cancelled by task cancellation)."""
    await asyncio.sleep(seconds)
    return "slept"


@tool("sync_add", effect=Effect.NONE)
def sync_add(ctx: CallContext, a: int, b: int) -> dict[str, Any]:
    """Add two numbers on a worker thread."""
    return {"sum": a + b, "thread": threading.current_thread().name, "call_id": ctx.call_id}


@tool("async_add", effect=Effect.NONE)
async def async_add(ctx: CallContext, a: int, b: int) -> dict[str, Any]:
    """Add two numbers on an event loop."""
    await asyncio.sleep(0)
    return {"sum": a + b, "thread": threading.current_thread().name, "call_id": ctx.call_id}


TEST_TOOLS = (coop_sleep, ignore_sleep, stubborn_write, async_sleep, sync_add, async_add)


def make_registry(tmp_path: Path, sink: RecordingSink, **kwargs: Any) -> ToolRegistry:
    kwargs.setdefault("cancel_grace_s", 0.1)
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / ".home", sinks=[sink], **kwargs)
    for t in TEST_TOOLS:
        reg.register(t)
    return reg


@pytest.fixture
def reg(tmp_path: Path, sink: RecordingSink) -> Any:
    r = make_registry(tmp_path, sink)
    yield r
    r.shutdown(2.0)


@pytest.fixture
def patient_reg(tmp_path: Path, sink: RecordingSink) -> Any:
    """A registry whose 1 s grace a busy host cannot outrun: a cooperative tool told to stop
    confirms it, however late its thread wakes (``reg``'s 0.1 s is for the abandonment tests)."""
    r = make_registry(tmp_path, sink, cancel_grace_s=1.0)
    yield r
    r.shutdown(2.0)


def _step(env: ToolResultEnvelope, name: str) -> Any:
    return next(s for s in env.steps if s.step == name)


def _in_background(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    return t, out


# -- deadlines ---------------------------------------------------------------------------------


def test_deadline_default_override_and_operator_cap(tmp_path: Path, sink: RecordingSink) -> None:
    # A grace a busy host cannot outrun: the tool confirms it stopped, however late it wakes.
    reg = make_registry(tmp_path, sink, max_timeout_s=0.3, cancel_grace_s=1.0)
    try:
        env = reg.call(ToolCall("coop_sleep", {"seconds": 0.01}))
        assert env.status is Status.OK
        assert _step(env, "execute").detail["timeout_s"] == 5.0  # the tool's default
        env = reg.call(ToolCall("coop_sleep", {"seconds": 0.01}, timeout_s=0.2))
        assert _step(env, "execute").detail["timeout_s"] == 0.2  # the call's override
        t0 = time.monotonic()
        env = reg.call(ToolCall("coop_sleep", {"seconds": 10}, timeout_s=100))
        took = time.monotonic() - t0
        assert env.status is Status.FAILED and env.record.error_type == "timeout"
        assert _step(env, "execute").detail["timeout_s"] == 0.3  # capped by the operator
        adm = _step(env, "admission").detail
        assert adm["timeout_requested_s"] == 100 and adm["timeout_s"] == 0.3
        # The capped deadline is met, not the requested one: it fired at 0.3 s (never before),
        # and the tool confirmed it stopped (it would otherwise sleep 10 s and end ok).
        ex, dl, stop = (_step(env, n) for n in ("execute", "deadline", "stopped"))
        assert dl.started_at_us - ex.started_at_us >= 300_000 - 1_000 and took >= 0.3
        assert dl.decision == "signal" and stop.decision == "confirmed"
        assert ex.started_at_us < dl.started_at_us <= stop.started_at_us
        assert [s.step for s in env.steps if s.step in ("deadline", "stopped")] == [
            "deadline", "stopped"]
    finally:
        reg.shutdown(2.0)


def test_deadline_on_a_read_only_tool_that_ignores_it_fails(reg: ToolRegistry) -> None:
    env = reg.call(ToolCall("ignore_sleep", {"seconds": 2.0}, timeout_s=0.1))
    assert env.status is Status.FAILED
    assert env.record.error_type == "timeout"
    assert "abandoned" in env.summary
    assert _step(env, "stopped").decision == "unconfirmed"


def test_deadline_on_a_side_effecting_tool_that_cannot_confirm_is_unknown(
    reg: ToolRegistry, sink: RecordingSink
) -> None:
    env = reg.call(ToolCall("stubborn_write", {"seconds": 2.0}, timeout_s=0.1))
    assert env.status is Status.UNKNOWN
    assert env.record.error_type == "unconfirmed_deadline"
    assert env.retry.requires_inspection and not env.retry.allowed
    assert env.call_id in env.summary  # the handle to resolve it later
    st = reg.status(env.call_id)
    assert st is not None and st.status is Status.UNKNOWN
    wait_for(lambda: reg.status(env.call_id).resolved is not None, 10.0, "late resolution")
    assert reg.status(env.call_id).resolved is Status.OK
    (late,) = sink.late
    assert (late.call_id, late.step.step, late.step.decision) == (env.call_id, "resolved", "ok")
    assert len(sink.by_id(env.call_id)) == 1


# -- cancellation ------------------------------------------------------------------------------


def test_cancel_of_a_read_only_call_is_cancelled(
    patient_reg: ToolRegistry, sink: RecordingSink
) -> None:
    reg = patient_reg
    t, out = _in_background(lambda: reg.call(ToolCall("coop_sleep", {"seconds": 10},
                                                      run_id="run-c")))
    wait_for(lambda: reg.inflight().get("coop_sleep"), 5.0, "the call to start")
    result = reg.cancel("run-c")
    t.join(5)
    (env,) = out
    assert result == {env.call_id: Status.CANCELLED}
    assert env.status is Status.CANCELLED
    assert env.record.error_type == "cancelled"
    names = [s.step for s in env.steps]
    # "cancel requested" and "cancelled" are two different steps, in that order.
    assert names.index("cancel_requested") < names.index("cancelled")
    assert _step(env, "cancelled").decision == "confirmed"
    assert _step(env, "execute").decision == "raised"
    # The run admits nothing more.
    env2 = reg.call(ToolCall("coop_sleep", {"seconds": 0}, run_id="run-c"))
    assert env2.status is Status.REJECTED and env2.reject_stage is Stage.CANCEL
    assert not env2.record.execution_started
    assert len(sink.by_id(env.call_id)) == 1


@tool("slow_to_stop", effect=Effect.LOCAL, timeout_s=5.0)
def slow_to_stop(ctx: CallContext) -> str:
    """Notices the signal at once but needs 150 ms to wind down before confirming."""
    ctx.wait(10)
    time.sleep(0.15)
    ctx.check()
    return "finished"


def test_cancel_requested_and_cancelled_carry_their_own_times(tmp_path: Path,
                                                              sink: RecordingSink) -> None:
    reg = make_registry(tmp_path, sink, cancel_grace_s=1.0)
    reg.register(slow_to_stop)
    try:
        cid = new_call_id()
        # A deadline far off: the cancel, not the deadline, ends this call on any host.
        t, out = _in_background(lambda: reg.call(ToolCall("slow_to_stop", {}, call_id=cid,
                                                          timeout_s=30)))
        wait_for(lambda: reg.inflight().get("slow_to_stop"), 5.0, "the call to start")
        asked_us = time.time_ns() // 1000
        assert reg.cancel_call(cid) is Status.CANCELLED
        t.join(5)
        env = out[0]
        req, done = _step(env, "cancel_requested"), _step(env, "cancelled")
        # The request is stamped when it was made (while cancel_call ran, before the tool
        # wound down), the confirmation when it came (after the tool's 150 ms wind-down).
        assert asked_us <= req.started_at_us
        assert done.started_at_us - req.started_at_us >= 140_000
        # A deadline step likewise marks the deadline, not the moment the tool gave up.
        env = reg.call(ToolCall("slow_to_stop", {}, timeout_s=0.1))
        assert env.status is Status.FAILED and env.record.error_type == "timeout"
        ex, dl, stop = (_step(env, n) for n in ("execute", "deadline", "stopped"))
        assert dl.started_at_us - ex.started_at_us >= 100_000 - 1_000
        assert stop.started_at_us - dl.started_at_us >= 140_000
    finally:
        reg.shutdown(2.0)


def test_cancel_of_a_read_only_call_that_ignores_it_is_abandoned(reg: ToolRegistry) -> None:
    cid = new_call_id()
    t, out = _in_background(lambda: reg.call(ToolCall("ignore_sleep", {"seconds": 2.5},
                                                      call_id=cid)))
    wait_for(lambda: reg.inflight().get("ignore_sleep"), 5.0, "the call to start")
    assert reg.cancel_call(cid) is Status.CANCELLED
    t.join(5)
    (env,) = out
    assert env.status is Status.CANCELLED
    assert "abandoned" in env.summary
    # Its slot stays taken until the thread really ends.
    assert reg.inflight().get("ignore_sleep") == 1
    wait_for(lambda: not reg.inflight().get("ignore_sleep"), 10.0, "the slot to be released")


def test_unconfirmed_cancel_of_a_side_effecting_call_is_unknown_then_resolved(
    reg: ToolRegistry, sink: RecordingSink
) -> None:
    cid = new_call_id()
    t, out = _in_background(lambda: reg.call(ToolCall("stubborn_write", {"seconds": 2.5},
                                                      call_id=cid)))
    wait_for(lambda: reg.inflight().get("stubborn_write"), 5.0, "the call to start")
    assert reg.cancel_call(cid) is Status.UNKNOWN
    t.join(5)
    (env,) = out
    assert env.status is Status.UNKNOWN
    assert env.record.error_type == "unconfirmed_cancel"
    assert [s.decision for s in env.steps if s.step == "stopped"] == ["unconfirmed"]
    assert "cancel_requested" in [s.step for s in env.steps]
    st = reg.status(cid)
    assert st is not None and st.status is Status.UNKNOWN and st.resolved is None
    assert not [x for x in sink.late if x.call_id == cid]  # not resolved yet
    wait_for(lambda: reg.status(cid).resolved is not None, 10.0, "late resolution")
    assert reg.status(cid).resolved is Status.OK  # it finished its write after all
    (late,) = [x for x in sink.late if x.call_id == cid]
    assert late.step.step == "resolved" and late.step.decision == "ok"
    assert late.tool == "stubborn_write"
    assert len(sink.by_id(cid)) == 1


def test_cancelling_a_run_refuses_its_queued_calls(tmp_path: Path, sink: RecordingSink) -> None:
    reg = make_registry(tmp_path, sink, max_concurrency=1, max_queue=4, admission_timeout_s=10)
    try:
        t1, out1 = _in_background(lambda: reg.call(ToolCall("coop_sleep", {"seconds": 10},
                                                            run_id="run-q")))
        wait_for(lambda: reg.inflight().get("coop_sleep"), 5.0, "the first call to run")
        t2, out2 = _in_background(lambda: reg.call(ToolCall("coop_sleep", {"seconds": 10},
                                                            run_id="run-q")))
        wait_for(lambda: reg.queue_depth().get("coop_sleep"), 5.0, "the second call to queue")
        reg.cancel("run-q")
        t1.join(5)
        t2.join(5)
        assert out1[0].status is Status.CANCELLED
        assert out2[0].status is Status.REJECTED
        assert out2[0].reject_stage is Stage.CANCEL
        assert _step(out2[0], "admission").detail["reason"] == "cancelled"
    finally:
        reg.shutdown(2.0)


def test_cancel_call_refuses_a_queued_call(tmp_path: Path, sink: RecordingSink) -> None:
    reg = make_registry(tmp_path, sink, max_concurrency=1, max_queue=4, admission_timeout_s=10)
    release = threading.Event()

    @tool("held", effect=Effect.NONE, timeout_s=30.0)
    def held() -> str:
        """Hold the only slot until the test releases it."""
        release.wait(30)
        return "released"

    reg.register(held)
    try:
        t1, out1 = _in_background(lambda: reg.call(ToolCall("held", {})))
        wait_for(lambda: reg.inflight().get("held"), 5.0, "the first call to run")
        cid = new_call_id()
        t2, out2 = _in_background(lambda: reg.call(ToolCall("held", {}, call_id=cid)))
        wait_for(lambda: reg.queue_depth().get("held"), 5.0, "the second call to queue")
        assert reg.cancel_call(cid) is Status.REJECTED
        t2.join(5)
        # Refused at once, not when a slot frees: the first call still holds the only slot.
        assert out2 and t1.is_alive() and not out1
        env = out2[0]
        assert env.status is Status.REJECTED and env.reject_stage is Stage.CANCEL
        assert _step(env, "admission").detail["reason"] == "cancelled"
        assert not env.record.execution_started
        release.set()
        t1.join(5)
        assert out1[0].status is Status.OK  # the other call of the run is untouched
    finally:
        release.set()
        reg.shutdown(2.0)


# -- admission ---------------------------------------------------------------------------------


def _gate_registry(tmp_path: Path, sink: RecordingSink, **kwargs: Any) -> tuple[
        ToolRegistry, list[int], threading.Semaphore]:
    started: list[int] = []
    gate = threading.Semaphore(0)

    @tool("gate", effect=Effect.NONE, timeout_s=30.0)
    def gate_tool(i: int) -> int:
        """Record the start order, then wait for the test to open the gate."""
        started.append(i)
        gate.acquire(timeout=20)
        return i

    reg = make_registry(tmp_path, sink, **kwargs)
    reg.register(gate_tool)
    return reg, started, gate


def test_admission_cap_queue_and_fifo(tmp_path: Path, sink: RecordingSink) -> None:
    reg, started, gate = _gate_registry(tmp_path, sink, max_concurrency=2, max_queue=3,
                                        admission_timeout_s=20)
    results: dict[int, ToolResultEnvelope] = {}
    threads = []
    try:
        for i in range(10):
            def run(i: int = i) -> None:
                results[i] = reg.call(ToolCall("gate", {"i": i}))
            t = threading.Thread(target=run)
            t.start()
            threads.append(t)
            # Wait until call i has reached its admission decision, so arrival order is known.
            if i < 2:
                wait_for(lambda i=i: len(started) == i + 1, 5.0, f"call {i} to run")
            elif i < 5:
                wait_for(lambda i=i: reg.queue_depth().get("gate") == i - 1, 5.0,
                         f"call {i} to queue")
            else:
                wait_for(lambda i=i: i in results, 5.0, f"call {i} to be refused")
        # 2 run, 3 wait, 5 were refused at once because the queue was full.
        assert reg.inflight() == {"gate": 2}
        assert reg.queue_depth() == {"gate": 3}
        for i in range(5, 10):
            env = results[i]
            assert env.status is Status.REJECTED and env.reject_stage is Stage.ADMISSION
            adm = _step(env, "admission")
            assert adm.decision == "reject"
            assert adm.detail["reason"] == "queue_full"
            assert adm.detail["waited_ms"] == 0
            assert env.retry.allowed and env.retry.after_ms > 0
        # Free one slot at a time: the waiters are admitted in arrival order.
        for n in range(3, 6):
            gate.release()
            wait_for(lambda n=n: len(started) == n, 5.0, "the next waiter to be admitted")
            assert reg.inflight() == {"gate": 2}
        assert started == [0, 1, 2, 3, 4]
        for _ in range(2):
            gate.release()
        for t in threads:
            t.join(10)
        for i in range(5):
            env = results[i]
            assert env.status is Status.OK and env.data == i
            adm = _step(env, "admission")
            assert adm.detail["reason"] == ("free" if i < 2 else "queued")
            if i >= 2:
                # The queue wait is a step of its own, with its duration.
                assert adm.detail["waited_ms"] > 0 and adm.elapsed_us > 0
        assert len(sink.records) == 10
    finally:
        for _ in range(10):
            gate.release()
        reg.shutdown(2.0)


def test_admission_timeout_expires(tmp_path: Path, sink: RecordingSink) -> None:
    # Long enough for both waiters to queue and the third call to find the queue full before
    # the first waiter gives up, on a busy host too.
    reg, started, gate = _gate_registry(tmp_path, sink, max_concurrency=1, max_queue=2,
                                        admission_timeout_s=2.0)
    try:
        holder, hold_out = _in_background(lambda: reg.call(ToolCall("gate", {"i": 0})))
        wait_for(lambda: started == [0], 5.0, "the holder to run")
        waiters = [_in_background(lambda i=i: reg.call(ToolCall("gate", {"i": i})))
                   for i in (1, 2)]
        wait_for(lambda: reg.queue_depth().get("gate") == 2, 5.0, "two waiters")
        full = reg.call(ToolCall("gate", {"i": 3}))
        assert _step(full, "admission").detail["reason"] == "queue_full"
        for t, _ in waiters:
            t.join(5)
        for _, out in waiters:
            env = out[0]
            assert env.status is Status.REJECTED and env.reject_stage is Stage.ADMISSION
            adm = _step(env, "admission")
            assert adm.detail["reason"] == "timeout"
            assert adm.detail["waited_ms"] >= 1990  # its 2 s admission timeout, not less
            assert not env.record.execution_started
        # They gave up on their timeout, not because a slot freed: the holder still runs.
        assert started == [0] and holder.is_alive() and not hold_out
        gate.release()
        holder.join(5)
        assert hold_out[0].status is Status.OK
    finally:
        gate.release()
        reg.shutdown(2.0)


def test_admission_from_an_event_loop(tmp_path: Path, sink: RecordingSink) -> None:
    reg = make_registry(tmp_path, sink, max_concurrency=2, max_queue=3, admission_timeout_s=10)

    async def main() -> list[ToolResultEnvelope]:
        calls = [reg.acall(ToolCall("async_sleep", {"seconds": 0.15})) for _ in range(10)]
        return list(await asyncio.gather(*calls))

    try:
        envs = asyncio.run(main())
        reasons = [_step(e, "admission").detail["reason"] for e in envs]
        assert reasons == ["free"] * 2 + ["queued"] * 3 + ["queue_full"] * 5
        assert [e.status for e in envs] == [Status.OK] * 5 + [Status.REJECTED] * 5
    finally:
        reg.shutdown(2.0)


# -- sync and async, callers and tools ---------------------------------------------------------


@pytest.mark.parametrize("tool_name", ["sync_add", "async_add"])
def test_sync_and_async_callers_with_sync_and_async_tools(reg: ToolRegistry, sink: RecordingSink,
                                                          tool_name: str) -> None:
    env = reg.call(ToolCall(tool_name, {"a": 2, "b": 3}))
    assert env.status is Status.OK and env.data["sum"] == 5
    assert env.data["call_id"] == env.call_id

    async def main() -> ToolResultEnvelope:
        return await reg.acall(ToolCall(tool_name, {"a": 4, "b": 5}))

    aenv = asyncio.run(main())
    assert aenv.status is Status.OK and aenv.data["sum"] == 9
    # Both drivers record the same pipeline.
    assert [s.step for s in env.steps] == [s.step for s in aenv.steps]
    assert len(sink.records) == 2


@pytest.mark.parametrize("tool_name", ["coop_sleep", "async_sleep"])
def test_deadline_and_cancel_from_sync_and_async_callers(patient_reg: ToolRegistry,
                                                         tool_name: str) -> None:
    reg = patient_reg
    env = reg.call(ToolCall(tool_name, {"seconds": 5}, timeout_s=0.1))
    assert env.status is Status.FAILED and env.record.error_type == "timeout"

    async def deadline() -> ToolResultEnvelope:
        return await reg.acall(ToolCall(tool_name, {"seconds": 5}, timeout_s=0.1))

    aenv = asyncio.run(deadline())
    assert aenv.status is Status.FAILED and aenv.record.error_type == "timeout"

    async def cancelled() -> ToolResultEnvelope:
        cid = new_call_id()
        task = asyncio.ensure_future(reg.acall(ToolCall(tool_name, {"seconds": 5}, call_id=cid)))
        while not reg.inflight().get(tool_name):
            await asyncio.sleep(0.005)
        # cancel_call waits (blocking) for the outcome: run it off the loop.
        st = await asyncio.get_running_loop().run_in_executor(None, reg.cancel_call, cid)
        assert st is Status.CANCELLED
        return await task

    cenv = asyncio.run(cancelled())
    assert cenv.status is Status.CANCELLED
    names = [s.step for s in cenv.steps]
    assert "cancel_requested" in names and "cancelled" in names


def test_an_async_tool_stopped_before_it_started_gives_its_slot_back(
    reg: ToolRegistry,
) -> None:
    """A blocking caller's async tool whose deadline passes before the registry's loop gets to
    start it: the call times out at its deadline and the admission slot comes back."""
    loop = reg.environment.loop.loop()
    for _ in range(3):
        loop.call_soon_threadsafe(time.sleep, 0.3)  # the loop is busy: the tool cannot start
        env = reg.call(ToolCall("async_sleep", {"seconds": 0}, timeout_s=0.05))
        assert env.status is Status.FAILED and env.record.error_type == "timeout"
        assert _step(env, "execute").decision == "raised"  # cancelled, not abandoned
        wait_for(lambda: not reg.inflight(), 5.0, "the slot to come back")
    # And one that runs normally afterwards still works and gives its slot back too.
    assert reg.call(ToolCall("async_sleep", {"seconds": 0})).status is Status.OK
    wait_for(lambda: not reg.inflight(), 5.0, "the slot to come back")


def _acall_cancelled_before_its_task_runs(reg: ToolRegistry) -> ToolResultEnvelope:
    cid = new_call_id()
    made: list[object] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        if not made:  # the tool's task: the cancel lands before it ever runs
            reg.cancel_call(cid, wait=False)
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kw)

    async def main() -> ToolResultEnvelope:
        asyncio.get_running_loop().set_task_factory(factory)
        return await reg.acall(ToolCall("async_sleep", {"seconds": 0}, call_id=cid))

    env = asyncio.run(main())
    assert made  # the tool's task was made (asyncio.run makes more as it closes)
    return env


def test_an_async_tool_cancelled_before_its_task_ran_gives_its_slot_back(
    reg: ToolRegistry,
) -> None:
    """On an event loop, a cancel that lands after the tool's task is made but before it first
    runs: the task never runs the tool, the call is cancelled and the slot comes back."""
    for _ in range(3):
        env = _acall_cancelled_before_its_task_runs(reg)
        assert env.status is Status.CANCELLED, env.summary
        wait_for(lambda: not reg.inflight(), 5.0, "the slot to come back")


# -- randomised load ---------------------------------------------------------------------------


def test_randomised_cancels_and_deadlines_under_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """1,000 calls from threads and an event loop, a third cancelled at random moments, all under
    short deadlines: one record per call, no orphan process, a bounded deadline overrun."""
    marker = os.urandom(8).hex()
    monkeypatch.setenv("TT_TEST_MARK", marker)
    fds_before = len(os.listdir("/proc/self/fd"))
    grace = 0.1
    sink = RecordingSink()
    reg = make_registry(tmp_path, sink, cancel_grace_s=grace, max_concurrency=48,
                        max_queue=2000, admission_timeout_s=60)
    register_command_tools(reg, CommandConfig(kill_grace_s=0.05))
    rng = random.Random(20261202)
    kinds = ["coop_sleep", "ignore_sleep", "stubborn_write", "async_sleep", "run_command"]
    plan: list[tuple[ToolCall, float | None]] = []
    for _ in range(1000):
        kind = rng.choice(kinds)
        seconds = round(rng.uniform(0.0, 0.25), 3)
        args: dict[str, Any] = (
            {"argv": ["sleep", f"{seconds}"]} if kind == "run_command" else {"seconds": seconds})
        timeout = round(rng.uniform(0.02, 0.3), 3)
        call = ToolCall(kind, args, call_id=new_call_id(), timeout_s=timeout)
        cancel_after = rng.uniform(0.0, 0.25) if rng.random() < 0.35 else None
        plan.append((call, cancel_after))

    cancels: list[tuple[float, str]] = []
    cancel_lock = threading.Lock()
    stop = threading.Event()

    def canceller() -> None:
        while not stop.is_set() or cancels:
            with cancel_lock:
                due = cancels[0][0] if cancels else None
                if due is not None and due <= time.monotonic():
                    _, cid = heapq.heappop(cancels)
                else:
                    cid = None
            if cid is not None:
                reg.cancel_call(cid, wait=False)
            else:
                time.sleep(0.002)

    def schedule(call: ToolCall, after: float | None) -> None:
        if after is not None:
            with cancel_lock:
                heapq.heappush(cancels, (time.monotonic() + after, call.call_id or ""))

    def sync_call(item: tuple[ToolCall, float | None]) -> ToolResultEnvelope:
        schedule(*item)
        return reg.call(item[0])

    async def async_calls(items: list[tuple[ToolCall, float | None]]) -> list[ToolResultEnvelope]:
        sem = asyncio.Semaphore(24)

        async def one(item: tuple[ToolCall, float | None]) -> ToolResultEnvelope:
            async with sem:
                schedule(*item)
                return await reg.acall(item[0])

        return list(await asyncio.gather(*(one(i) for i in items)))

    t0 = time.monotonic()
    ct = threading.Thread(target=canceller, daemon=True)
    ct.start()
    envs: list[ToolResultEnvelope] = []
    try:
        aout: list[list[ToolResultEnvelope]] = []
        at = threading.Thread(target=lambda: aout.append(asyncio.run(async_calls(plan[500:]))))
        at.start()
        with concurrent.futures.ThreadPoolExecutor(24) as pool:
            envs.extend(pool.map(sync_call, plan[:500]))
        at.join(120)
        envs.extend(aout[0])
        stop.set()
        ct.join(10)
        # Abandoned calls end in their own time; wait until no slot is held.
        wait_for(lambda: not reg.inflight(), 30.0, "every abandoned call to end")
        wall = time.monotonic() - t0

        # Exactly one final record per call, and one envelope per planned call.
        ids = [c.call_id for c, _ in plan]
        assert [e.call_id for e in envs] == ids
        counts: dict[str, int] = {}
        for r in sink.records:
            counts[r.call_id] = counts.get(r.call_id, 0) + 1
        assert set(counts) == set(ids) and set(counts.values()) == {1}

        allowed = {
            "coop_sleep": {Status.OK, Status.FAILED, Status.CANCELLED},
            "async_sleep": {Status.OK, Status.FAILED, Status.CANCELLED},
            "ignore_sleep": {Status.OK, Status.FAILED, Status.CANCELLED},
            "stubborn_write": {Status.OK, Status.UNKNOWN},
            "run_command": {Status.OK, Status.FAILED, Status.CANCELLED, Status.UNKNOWN},
        }
        tally: dict[tuple[str, str], int] = {}
        overruns: list[float] = []
        for env in envs:
            if env.status is Status.REJECTED:
                # A cancel that lands while the call waits for a slot refuses it there.
                assert env.reject_stage is Stage.CANCEL, env.summary
                assert not env.record.execution_started
            else:
                assert env.status in allowed[env.tool], (env.tool, env.status, env.summary)
            if env.status is Status.FAILED:
                assert env.record.error_type == "timeout", env.summary
            key = (env.tool, env.status.value)
            tally[key] = tally.get(key, 0) + 1
            names = [s.step for s in env.steps]
            if "deadline" in names:
                # The deadline signalled the tool, then the call recorded how it stopped
                # (confirmed, or unconfirmed and abandoned after the grace).
                assert "stopped" in names[names.index("deadline"):], names
                ex = _step(env, "execute")
                deadline_us = ex.started_at_us + ex.detail["timeout_s"] * 1e6
                end_us = env.record.started_at_us + env.record.elapsed_us
                overruns.append((end_us - deadline_us) / 1e6)
            if env.status is Status.UNKNOWN:
                st = reg.status(env.call_id)
                assert st is not None and st.resolved is not None
                late = [x for x in sink.late if x.call_id == env.call_id]
                assert [x.step.step for x in late] == ["resolved"]
        # Every kind of outcome the contract allows actually happened.
        seen = {s for (_, s) in tally}
        assert {"ok", "failed", "cancelled", "unknown"} <= seen, tally
        assert overruns, "no call hit its deadline"
        worst = max(overruns)
        p99 = statistics.quantiles(overruns, n=100)[98] if len(overruns) >= 100 else worst
        # Bounded by the documented grace (cancel_grace_s, after which a tool that ignores the
        # signal is abandoned) plus a generous 0.9 s for scheduling on a small, loaded machine.
        assert worst < grace + 0.9, worst
        orphans = live_with_marker(marker)
        assert not orphans, f"orphan processes: {orphans}"
        # Pipes, pidfds and selectors of ~200 commands are all closed (a few fds belong to the
        # registry's own loop and pools).
        fds_after = len(os.listdir("/proc/self/fd"))
        assert fds_after - fds_before < 20, (fds_before, fds_after)
        with capsys.disabled():
            print(f"\nruntime stress: {len(envs)} calls in {wall:.1f} s, grace {grace} s; "
                  f"deadline overrun max {worst * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
                  f"median {statistics.median(overruns) * 1000:.0f} ms over {len(overruns)} "
                  f"deadline hits; outcomes {sorted(tally.items())}; orphans 0")
    finally:
        stop.set()
        reg.shutdown(5.0)


def test_tool_threads_run_jobs_like_futures_and_cancel_queued_ones_at_shutdown() -> None:
    import concurrent.futures

    from tooltrace.runtime import ToolThreads

    pool = ToolThreads(1, "test-tool")
    gate = threading.Event()
    seen: list[str] = []

    def slow() -> str:
        gate.wait(5)
        return "slow"

    def boom() -> None:
        raise ValueError("boom")

    first = pool.submit(slow)
    queued = pool.submit(lambda: "never")  # one thread: waits behind `first`
    first.add_done_callback(lambda j: seen.append(f"done:{j.result()}"))
    with pytest.raises(concurrent.futures.TimeoutError):
        first.result(0.05)
    assert not first.done() and seen == []
    gate.set()
    assert first.result(5) == "slow" and seen == ["done:slow"]
    assert queued.result(5) == "never"
    failed = pool.submit(boom)
    with pytest.raises(ValueError, match="boom"):
        failed.result(5)
    assert isinstance(failed.exception(), ValueError) and not failed.cancelled()
    late: list[bool] = []
    failed.add_done_callback(lambda j: late.append(j.done()))  # already done: runs at once
    assert late == [True]

    gate.clear()
    started = threading.Event()

    def slow_started() -> str:
        started.set()
        return slow()

    blocker = pool.submit(slow_started)
    assert started.wait(5)  # running, so shutdown cannot cancel it
    waiting = pool.submit(lambda: "queued")
    pool.shutdown()
    assert waiting.cancelled() and waiting.done()
    with pytest.raises(concurrent.futures.CancelledError):
        waiting.result(0)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(lambda: None)
    gate.set()
    assert blocker.result(5) == "slow"  # the running job still finishes


def test_tool_threads_start_workers_on_demand_up_to_their_size() -> None:
    from tooltrace.runtime import ToolThreads

    pool = ToolThreads(3, "test-size")
    gate = threading.Event()
    jobs = [pool.submit(gate.wait, 5) for _ in range(5)]
    time.sleep(0.1)
    names = {t.name for t in threading.enumerate() if t.name.startswith("test-size_")}
    assert len(names) == 3  # capped; the other two jobs wait in the queue
    gate.set()
    assert all(j.result(5) is True for j in jobs)
    # Finished workers are reused: sequential jobs start no new thread.
    for _ in range(20):
        pool.submit(lambda: None).result(5)
    assert len({t.name for t in threading.enumerate() if t.name.startswith("test-size_")}) == 3
    pool.shutdown()


def test_tool_threads_wake_lock_released_by_job_or_signal() -> None:
    """A job submitted with a held `wake` lock releases it when done, and a call's signal
    releases the call's wake lock too (a cancel must end the caller's wait at once); either
    party may come second without error."""
    import _thread
    import tempfile

    from tooltrace import ArtifactStore, Workspace
    from tooltrace.runtime import ToolThreads

    pool = ToolThreads(1, "test-wake")
    gate = threading.Event()
    wake = _thread.allocate_lock()
    wake.acquire()
    job = pool.submit(gate.wait, 5, wake=wake)
    assert not wake.acquire(True, 0.05)  # still running: nobody released it
    gate.set()
    assert wake.acquire(True, 5) and job.result(5) is True

    ws = Workspace(tempfile.mkdtemp())
    ctx = CallContext("c-wake", "r", "t", 30.0, ws, ArtifactStore(Path(tempfile.mkdtemp())))
    held = _thread.allocate_lock()
    held.acquire()
    ctx._wake = held
    gate.clear()
    job = pool.submit(gate.wait, 5, wake=held)
    threading.Timer(0.05, ctx.signal, ("cancel",)).start()
    assert held.acquire(True, 5)  # woken by the signal...
    assert not job.done()  # ...not by the job's end: it still waits on the gate
    gate.set()
    assert job.result(5) is True  # the job's own release of the free lock is ignored
    assert not held.locked()
    pool.shutdown()
