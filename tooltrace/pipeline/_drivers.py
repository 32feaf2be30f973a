"""The two drivers of the pipeline: each serves the operations it yields (``_stages``).

``serve`` is the blocking driver of ``ToolRegistry.call``: it waits on this thread. ``aserve`` is
the asyncio driver of ``ToolRegistry.acall``: it awaits on the running loop, and runs what would
block it (hooks, the approver, strict audit writes) on the hook threads. A hook gets at most its
``timeout_s``; one that overruns it keeps its thread, so the hook threads are renewed and a hung
hook cannot starve the healthy ones.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from ..exceptions import AuditUnavailableError
from ..model import ToolResultEnvelope
from ._authorize import Approve
from ._execute import Execute, execute_async, execute_blocking
from ._hooks import RunHook
from ._stages import Admit, Intent, Op, RawCall, pipeline

if TYPE_CHECKING:
    from ..runtime import CallContext
    from ._environment import Environment

__all__ = ["arun", "aserve", "boxed", "run", "serve"]


def boxed(
    env: Environment,
    raw: RawCall,
    box: list[ToolResultEnvelope],
    parent: CallContext | None = None,
) -> Generator[Op, Any, None]:
    """The blocking driver's pipeline: the envelope goes in ``box`` and the generator returns
    None, so ``next(gen, None)`` ends it without raising (most calls never yield at all)."""
    box.append((yield from pipeline(env, raw, True, parent)))


def run(env: Environment, raw: RawCall, parent: CallContext | None = None
        ) -> ToolResultEnvelope:
    """Drive one call's pipeline on this thread (``ToolRegistry.call``, and a nested call's)."""
    box: list[ToolResultEnvelope] = []
    gen = boxed(env, raw, box, parent)
    # next(gen, None) ends without raising when the generator returns None: most calls
    # (inline tools, no hooks or approval) never yield, and pay for no StopIteration.
    op = next(gen, None)
    while op is not None:
        try:
            op = gen.send(serve(env, op))
        except StopIteration:
            break
    return box[0]


async def arun(env: Environment, raw: RawCall, parent: CallContext | None = None
               ) -> ToolResultEnvelope:
    """Drive one call's pipeline on the running loop (``ToolRegistry.acall``, and a nested
    call's)."""
    gen = pipeline(env, raw, False, parent)
    try:
        op = next(gen)
        while True:
            op = gen.send(await aserve(env, op))
    except StopIteration as stop:
        envelope: ToolResultEnvelope = stop.value
        return envelope


def serve(env: Environment, op: Op) -> Any:
    """Carry out one operation on this thread; return what the pipeline receives."""
    if isinstance(op, Execute):
        return execute_blocking(env, op)
    if isinstance(op, Admit):
        return env.admission.acquire(op.tool, op.run_id, op.timeout_s, op.call_id)
    if isinstance(op, RunHook):
        fut = env.hook_threads.pool.submit(_guard, op.hook, op.view)
        try:
            res: tuple[str, Any] = fut.result(op.hook.timeout_s)
            return res
        except concurrent.futures.TimeoutError:
            env.hook_threads.renew()
            return "timeout", None
    if isinstance(op, Approve):
        assert env.approver is not None
        return _guard(env.approver, op.request)
    return _write_intent(op)


async def aserve(env: Environment, op: Op) -> Any:
    """Carry out one operation on the running loop; return what the pipeline receives."""
    loop = asyncio.get_running_loop()
    if isinstance(op, Execute):
        return await execute_async(env, op)
    if isinstance(op, Admit):
        return await env.admission.acquire_async(op.tool, op.run_id, op.timeout_s, op.call_id)
    pool = env.hook_threads.pool
    if isinstance(op, RunHook):
        fut = loop.run_in_executor(pool, _guard, op.hook, op.view)
        try:
            return await asyncio.wait_for(fut, op.hook.timeout_s)
        except TimeoutError:
            env.hook_threads.renew()
            return "timeout", None
    if isinstance(op, Approve):
        approver = env.approver
        assert approver is not None
        return await loop.run_in_executor(pool, _guard, approver, op.request)
    return await loop.run_in_executor(pool, _write_intent, op)


def _guard(fn: Callable[[Any], Any], arg: Any) -> tuple[str, Any]:
    """``("ok", fn(arg))``, or ``("error", exc)``: a hook or approver never raises into a call."""
    try:
        return "ok", fn(arg)
    except Exception as exc:
        return "error", exc


def _write_intent(op: Intent) -> BaseException | None:
    """The error that kept the intent from being durable, or None."""
    try:
        op.sink.write_intent(op.call_id, op.run_id, op.tool, op.started_at_us, op.args)
    except Exception as exc:
        if isinstance(exc, AuditUnavailableError):
            return exc
        return AuditUnavailableError(f"{type(exc).__name__}")
    return None
