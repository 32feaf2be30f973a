"""Helpers for the framework adapters' tests: the tools they run and ``wait_for``. (A missing
framework is reported by ``support.components.require_module``.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from tooltrace import CallContext, OutcomeUnknown, ToolCancelled, tool


def wait_for(predicate: Callable[[], object], timeout_s: float = 5.0) -> None:
    """Poll ``predicate()`` until it is true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.005)
    raise AssertionError("condition not met in time")


#: A credential the redactor knows (an OpenAI key's shape): it must never reach a model.
SECRET = "sk-proj-" + "Zq8" * 16


@tool(execution="inline")
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool()
async def aadd(a: int, b: int) -> int:
    """Add two integers, asynchronously."""
    await asyncio.sleep(0)
    return a + b


@tool()
def leak(chars: int = 40_000) -> str:
    """Return a long text with a credential in it (redacted, then offloaded)."""
    return f"token={SECRET}\n" + "x" * chars


@tool()
def explode() -> str:
    """Raise with a credential in the exception text (which must not reach the model)."""
    raise RuntimeError(f"backend refused {SECRET}")


@tool(effect="local")
def unsure() -> str:
    """A side effect that was dispatched and cannot be confirmed."""
    raise OutcomeUnknown("connection lost after the write was sent")


#: Call ids of ``slow``/``wait`` calls that started, and of those whose stop was seen.
STARTED: list[str] = []
STOPPED: list[str] = []


@tool(timeout_s=60.0)
async def slow(ctx: CallContext, seconds: float) -> str:
    """Sleep (async, so a cancel lands in the sleep), noting the start and the stop."""
    STARTED.append(ctx.call_id)
    try:
        await asyncio.sleep(seconds)
    finally:
        STOPPED.append(ctx.call_id)
    return "slept"


@tool(timeout_s=60.0)
def wait(ctx: CallContext, seconds: float) -> str:
    """Wait on the call context (sync); confirm a cancel by raising ``ToolCancelled``."""
    STARTED.append(ctx.call_id)
    if ctx.wait(seconds):
        STOPPED.append(ctx.call_id)
        raise ToolCancelled("stopped on request")
    return "waited"
