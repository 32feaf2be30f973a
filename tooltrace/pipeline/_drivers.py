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
    from ..registry import ToolRegistry
    from ..runtime import CallContext

__all__ = ["arun", "aserve", "boxed", "run", "serve"]


def boxed(
    reg: ToolRegistry,
    raw: RawCall,
    box: list[ToolResultEnvelope],
    parent: CallContext | None = None,
) -> Generator[Op, Any, None]:
    """The blocking driver's pipeline: the envelope goes in ``box`` and the generator returns
    None, so ``next(gen, None)`` ends it without raising (most calls never yield at all)."""
    box.append((yield from pipeline(reg, raw, True, parent)))


def run(reg: ToolRegistry, raw: RawCall, parent: CallContext | None = None
        ) -> ToolResultEnvelope:
    """Drive one call's pipeline on this thread (``ToolRegistry.call``, and a nested call's)."""
    box: list[ToolResultEnvelope] = []
    gen = boxed(reg, raw, box, parent)
    # next(gen, None) ends without raising when the generator returns None: most calls
    # (inline tools, no hooks or approval) never yield, and pay for no StopIteration.
    op = next(gen, None)
    while op is not None:
        try:
            op = gen.send(serve(reg, op))
        except StopIteration:
            break
    return box[0]


async def arun(reg: ToolRegistry, raw: RawCall, parent: CallContext | None = None
               ) -> ToolResultEnvelope:
    """Drive one call's pipeline on the running loop (``ToolRegistry.acall``, and a nested
    call's)."""
    gen = pipeline(reg, raw, False, parent)
    try:
        op = next(gen)
        while True:
            op = gen.send(await aserve(reg, op))
    except StopIteration as stop:
        env: ToolResultEnvelope = stop.value
        return env


def serve(reg: ToolRegistry, op: Op) -> Any:
    """Carry out one operation on this thread; return what the pipeline receives."""
    if isinstance(op, Execute):
        return execute_blocking(reg, op)
    if isinstance(op, Admit):
        return reg._admission.acquire(op.tool, op.run_id, op.timeout_s, op.call_id)
    if isinstance(op, RunHook):
        fut = reg._hook_threads.pool.submit(_guard, op.hook, op.view)
        try:
            res: tuple[str, Any] = fut.result(op.hook.timeout_s)
            return res
        except concurrent.futures.TimeoutError:
            reg._hook_threads.renew()
            return "timeout", None
    if isinstance(op, Approve):
        assert reg.approver is not None
        return _guard(reg.approver, op.request)
    return _write_intent(op)


async def aserve(reg: ToolRegistry, op: Op) -> Any:
    """Carry out one operation on the running loop; return what the pipeline receives."""
    loop = asyncio.get_running_loop()
    if isinstance(op, Execute):
        return await execute_async(reg, op)
    if isinstance(op, Admit):
        return await reg._admission.acquire_async(op.tool, op.run_id, op.timeout_s, op.call_id)
    pool = reg._hook_threads.pool
    if isinstance(op, RunHook):
        fut = loop.run_in_executor(pool, _guard, op.hook, op.view)
        try:
            return await asyncio.wait_for(fut, op.hook.timeout_s)
        except TimeoutError:
            reg._hook_threads.renew()
            return "timeout", None
    if isinstance(op, Approve):
        approver = reg.approver
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
