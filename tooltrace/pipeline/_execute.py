"""The execute stage: run the tool where its definition says, with its span and ``CallContext``
current, and wait for it under its deadline.

A plain tool declared inline runs on the caller's thread (both drivers); a synchronous tool runs
on the tool threads; an async tool runs as a task, on the caller's loop (``acall``) or on the
registry's loop thread (``call``). The slot the call took at admission is given back when the
tool really ends, also when its caller stopped waiting for it.

The deadline wait is written once (``deadline_wait``): it yields how long to sleep and decides
everything else (signal at the deadline, cancel what can be cancelled, wait the grace, abandon a
tool that does not confirm it stopped and record its late end). The blocking driver sleeps on a
lock, the asyncio driver on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..model import Entry, Status, StepName
from ..runtime import CURRENT_CONTEXT, CallContext, Job, release_quietly, resolve_future
from ._outcome import Outcome, error_type, resolved_status

if TYPE_CHECKING:
    from _thread import LockType

    from ..sinks import OpenSpan
    from ._environment import Environment

__all__ = [
    "GRACE",
    "Execute",
    "deadline_wait",
    "execute_async",
    "execute_blocking",
    "execute_inline",
]

_Future = concurrent.futures.Future[Any] | asyncio.Future[Any] | Job
_allocate_lock = threading.Lock
_TIMEOUT_MAX = threading.TIMEOUT_MAX
#: What ``deadline_wait`` yields for the grace (any other sleep it asks for is positive).
GRACE = -1.0


@dataclass(slots=True)
class Execute:
    """Run the tool (the operation the pipeline yields to its driver for execution)."""

    entry: Entry
    ctx: CallContext
    arguments: dict[str, Any]
    span: OpenSpan | None
    grace_s: float


def execute_inline(
    env: Environment, e: Entry, ctx: CallContext, args: dict[str, Any], span: OpenSpan | None
) -> Outcome:
    """Run a plain inline tool on this thread (both drivers: it is the caller's)."""
    token = span.attach() if span is not None else None
    ctx_token = CURRENT_CONTEXT.set(ctx)
    try:
        # No start_clock(): the context was made just now, its deadline counts from then.
        try:
            out = Outcome("returned", e.fn(ctx, **args) if e.wants_ctx else e.fn(**args))
        except Exception as exc:
            out = Outcome("raised", None, exc)
        finally:
            env.admission.release(e.definition.name)
        if ctx.signalled_at is not None:  # signalled (or marked) while it ran
            out.signal = ctx.reason
            out.signal_at = ctx.signalled_at or time.monotonic()
        elif out.kind == "returned":
            late = time.monotonic() - ctx.deadline
            if late > 0:
                ctx.set_detail("deadline_overrun_ms", round(late * 1000, 3))
        return out
    finally:
        CURRENT_CONTEXT.reset(ctx_token)
        if span is not None:
            span.detach(token)


def execute_blocking(env: Environment, op: Execute) -> Outcome:
    """Run the tool off this thread and wait for it here (the driver of ``call()``)."""
    e, ctx = op.entry, op.ctx
    tool = e.definition.name
    token = op.span.attach() if op.span is not None else None
    ctx_token = CURRENT_CONTEXT.set(ctx)
    try:
        ctx.start_clock()
        # The caller sleeps on a bare lock that is released when the tool is done and by a
        # signal (the context releases it): one C call to wait, no callbacks on the way.
        wake = _allocate_lock()
        wake.acquire()
        ctx.wake_on_signal(wake)
        fut: concurrent.futures.Future[Any] | Job
        cancel: Callable[[], object] | None = None
        if e.is_async:
            cfut = _start_on_loop(
                env.loop.loop(), _invoke(op), functools.partial(_release, env, tool)
            )
            cfut.add_done_callback(lambda _f: release_quietly(wake))
            fut, cancel = cfut, cfut.cancel
        else:
            try:
                fut = _submit(env, op, wake)
            except RuntimeError as exc:  # the pool is shut down: the tool never started
                env.admission.release(tool)
                return Outcome("raised", None, exc)
        box: list[Outcome] = []
        wait = deadline_wait(env, op, fut, cancel, box)
        # next(wait, None) ends without raising when the wait is over (no StopIteration).
        s = next(wait, None)
        while s is not None:
            if s > 0.0:
                wake.acquire(True, s if s < _TIMEOUT_MAX else _TIMEOUT_MAX)
            else:  # the grace
                with contextlib.suppress(BaseException):
                    fut.result(op.grace_s)
            s = next(wait, None)
        return box[0]
    finally:
        CURRENT_CONTEXT.reset(ctx_token)
        if op.span is not None:
            op.span.detach(token)


async def execute_async(env: Environment, op: Execute) -> Outcome:
    """Run the tool and await it on the running loop (the driver of ``acall()``)."""
    e, ctx = op.entry, op.ctx
    tool = e.definition.name
    loop = asyncio.get_running_loop()
    token = op.span.attach() if op.span is not None else None
    ctx_token = CURRENT_CONTEXT.set(ctx)
    try:
        ctx.start_clock()
        fut: asyncio.Future[Any]
        if e.is_async:
            # The slot is given back when the task is done, which a task cancelled before
            # it ever ran also is (a finally in its coroutine would never run then).
            fut = loop.create_task(_invoke(op)())
            fut.add_done_callback(functools.partial(_release, env, tool))
        else:
            fut = loop.create_future()
            try:
                job = _submit(env, op)
            except RuntimeError as exc:  # shut down: the tool never started
                env.admission.release(tool)
                fut.set_exception(exc)
            else:
                job.add_done_callback(functools.partial(_to_loop, loop, fut))
    finally:
        CURRENT_CONTEXT.reset(ctx_token)
        if op.span is not None:
            op.span.detach(token)
    wake = loop.create_future()

    def poke(_reason: str) -> None:
        loop.call_soon_threadsafe(resolve_future, wake)

    ctx.on_cancel(poke)
    box: list[Outcome] = []
    wait = deadline_wait(env, op, fut, fut.cancel if e.is_async else None, box)
    s = next(wait, None)
    while s is not None:
        if s > 0.0:
            try:
                await _first(loop, fut, wake, s)
            except asyncio.CancelledError:
                # The caller's task was cancelled: that is a cancel request for this call.
                _signal(ctx, op, "cancel")
        else:  # the grace
            await asyncio.wait({fut}, timeout=op.grace_s)
        s = next(wait, None)
    return box[0]


async def _first(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any],
                 wake: asyncio.Future[Any], timeout: float) -> None:
    """Sleep until ``fut`` or ``wake`` is done or ``timeout`` seconds pass: ``asyncio.wait``
    with ``FIRST_COMPLETED`` for two futures, without the sets it builds on every call (this
    wait is on every async call's path). Cancelled as ``asyncio.wait`` is: the waiter is."""
    waiter = loop.create_future()

    def done(_f: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(timeout, done)
    fut.add_done_callback(done)
    wake.add_done_callback(done)
    try:
        await waiter
    finally:
        timer.cancel()
        fut.remove_done_callback(done)
        wake.remove_done_callback(done)


def deadline_wait(
    env: Environment,
    op: Execute,
    fut: _Future,
    cancel: Callable[[], object] | None,
    box: list[Outcome],
) -> Iterator[float]:
    """The wait for a running tool, for both drivers: yields how long to sleep, and puts the
    outcome in ``box`` when the wait is over.

    A driver sleeps until the tool ends, the call is signalled or that many seconds pass;
    ``GRACE`` asks for the grace: a sleep until the tool ends or ``op.grace_s`` passes. At the
    deadline the tool is signalled (told to stop if it is cancellable); once signalled, a
    cancellable async tool is cancelled (``cancel``) and has the grace to confirm it stopped.
    A tool that does not is abandoned: its slot stays taken until it ends, and its end is
    recorded then, as a late step.
    """
    ctx = op.ctx
    while not fut.done():
        if ctx.signalled:
            break
        left = ctx.deadline - time.monotonic()
        if left <= 0:
            _signal(ctx, op, "deadline")
            break
        yield left
    if not fut.done():
        if cancel is not None and op.entry.definition.cancellable:
            cancel()
        signal_at = ctx.signalled_at or time.monotonic()
        yield GRACE
        if not fut.done():
            _on_late_done(env, fut, ctx)
            box.append(Outcome("abandoned", signal=ctx.reason, signal_at=signal_at))
            return
    box.append(_outcome_of(fut, ctx))


def _signal(ctx: CallContext, op: Execute, reason: str) -> None:
    if op.entry.definition.cancellable:
        ctx.signal(reason)
    else:
        # Not cancellable: the tool is not told, but the call stops waiting after the grace.
        ctx.mark(reason)


def _outcome_of(fut: _Future, ctx: CallContext) -> Outcome:
    """How the finished tool ended, and whether it had been told to stop."""
    sig = ctx.reason if ctx.signalled else None
    sig_at = (ctx.signalled_at or time.monotonic()) if sig else None
    if fut.cancelled():
        return Outcome("raised", None, asyncio.CancelledError(), sig, sig_at)
    exc = fut.exception()
    if exc is not None:
        return Outcome("raised", None, exc, sig, sig_at)
    return Outcome("returned", fut.result(), None, sig, sig_at)


def _on_late_done(env: Environment, fut: _Future, ctx: CallContext) -> None:
    """When an abandoned tool finally ends, record how (status table and a late step)."""

    def done(f: Any) -> None:
        try:
            out = _outcome_of(f, ctx)
            resolved = resolved_status(out.kind, out.error)
            detail: dict[str, Any] = {"outcome": resolved.value}
            if out.error is not None and resolved is Status.FAILED:
                detail["error_type"] = error_type(out.error)
            env.book.statuses.resolve(ctx.call_id, resolved)
            env.emit_late(
                ctx.call_id, ctx.run_id, ctx.tool, StepName.RESOLVED, resolved.value, detail
            )
        except Exception:
            env.emitter.errors += 1

    fut.add_done_callback(done)


def _invoke(op: Execute) -> Callable[[], Any]:
    e, ctx, args = op.entry, op.ctx, op.arguments
    fn = e.fn
    return (lambda: fn(ctx, **args)) if e.wants_ctx else (lambda: fn(**args))


def _submit(env: Environment, op: Execute, wake: LockType | None = None) -> Job:
    """Queue a synchronous tool on the tool threads, in a copy of this thread's context (the
    call's span and ``CallContext`` stay current inside the tool); ``wake`` is released
    when it ends. ``RuntimeError`` once the threads are shut down."""
    e = op.entry
    return env.pool.submit(
        contextvars.copy_context().run,
        _run_tool,
        e.fn,
        op.ctx,
        op.arguments,
        e.wants_ctx,
        env.admission.release,
        e.definition.name,
        wake=wake,
    )


def _run_tool(
    fn: Callable[..., Any],
    ctx: CallContext,
    args: dict[str, Any],
    wants_ctx: bool,
    release: Callable[[str], None],
    tool: str,
) -> Any:
    """A synchronous tool on a worker thread; its admission slot is given back when it ends."""
    try:
        return fn(ctx, **args) if wants_ctx else fn(**args)
    finally:
        release(tool)


def _release(env: Environment, tool: str, _done: object = None) -> None:
    """Give an async tool's admission slot back (a done callback of its task)."""
    env.admission.release(tool)


def _start_on_loop(
    loop: asyncio.AbstractEventLoop,
    invoke: Callable[[], Any],
    on_done: Callable[[object], None],
) -> concurrent.futures.Future[Any]:
    """Run an async tool on the registry's loop from another thread, like
    ``asyncio.run_coroutine_threadsafe``, except that ``on_done`` runs exactly once when the
    tool is over: when its task is done, or at once if the call was cancelled before the task
    was made (then the tool never runs). Cancelling the returned future cancels the task."""
    cfut: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def settle(task: asyncio.Task[Any]) -> None:
        try:
            if task.cancelled():
                cfut.cancel()
            elif task.exception() is not None:
                cfut.set_exception(task.exception())
            else:
                cfut.set_result(task.result())
        except concurrent.futures.InvalidStateError:
            pass  # the caller cancelled it meanwhile

    def start() -> None:
        if cfut.cancelled():
            on_done(None)
            return
        task = loop.create_task(invoke())
        task.add_done_callback(on_done)
        task.add_done_callback(settle)

        def cancel(f: concurrent.futures.Future[Any]) -> None:
            if f.cancelled():
                with contextlib.suppress(RuntimeError):  # the loop closed: nothing to cancel
                    loop.call_soon_threadsafe(task.cancel)

        cfut.add_done_callback(cancel)

    try:
        loop.call_soon_threadsafe(start)
    except RuntimeError as exc:  # the loop is closed (shutdown): the tool never runs
        on_done(None)
        cfut.set_exception(exc)
    return cfut


def _to_loop(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], job: Job) -> None:
    """Carry a finished tool job's outcome to the asyncio future its caller awaits."""
    try:
        loop.call_soon_threadsafe(_copy_job, fut, job)
    except RuntimeError:
        pass  # the loop is closed: nobody awaits it any more


def _copy_job(fut: asyncio.Future[Any], job: Job) -> None:
    if fut.done():
        return
    if job.cancelled():
        fut.cancel()
    elif job.exception() is not None:
        fut.set_exception(job.exception())  # type: ignore[arg-type]
    else:
        fut.set_result(job.result(0))
