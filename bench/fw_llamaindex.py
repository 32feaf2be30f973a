"""LlamaIndex: one tool call through the framework, bare and through tooltrace's adapter.

Two rows, measured in the same process with the variants interleaved round by round:

- ``tool call``: ``await tool.acall(a=1, b=2)`` on a ``FunctionTool`` against the same function
  registered in a registry (``@tool``) and wrapped by ``as_llamaindex_tools`` (the whole
  pipeline runs: validate, policy, admission, execute on a worker thread, redact; no
  telemetry sinks). Both run the function on a thread.
- ``agent run``: a ``FunctionAgent`` on ``MockFunctionCallingLLM`` that makes that one call and
  answers (what an application pays per tool-using turn).

Usage: ``python -m bench.fw_llamaindex [--calls N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench._common import Table, machine, scratch

__all__ = ["FRAMEWORK", "main", "measure"]

FRAMEWORK = "llamaindex"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _agent(tool: Any) -> Callable[[], Awaitable[Any]]:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ToolCallBlock
    from llama_index.core.llms import ChatMessage, MessageRole
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    def script(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        results = [m.content or "" for m in messages if m.role == MessageRole.TOOL]
        if results:
            return ChatMessage(role="assistant", content=f"the sum is {results[-1]}")
        return ChatMessage(role="assistant", blocks=[
            ToolCallBlock(tool_call_id="c1", tool_name="add", tool_kwargs={"a": 1, "b": 2})])

    agent = FunctionAgent(tools=[tool], llm=MockFunctionCallingLLM(response_generator=script))

    async def run() -> Any:
        return await agent.run(user_msg="add")

    return run


async def _per_call_us(fn: Callable[[], Awaitable[Any]], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        await fn()
    return (time.perf_counter() - t0) / calls * 1e6


def measure(calls: int = 500, rounds: int = 7, agent_calls: int = 40) -> dict[str, float]:
    """Median µs per call of each variant: ``{tool_bare, tool_adapter, agent_bare,
    agent_adapter}`` (interleaved rounds, one warm-up round first)."""
    from llama_index.core.tools import FunctionTool

    from tooltrace import ToolRegistry, tool
    from tooltrace.integrations.llamaindex import as_llamaindex_tools

    bare = FunctionTool.from_defaults(fn=add)
    home = scratch("fw-llamaindex-")
    reg = ToolRegistry(workspace=home, home=home)
    reg.register(tool()(add))
    (wrapped,) = as_llamaindex_tools(reg)
    variants: dict[str, tuple[Callable[[], Awaitable[Any]], int]] = {
        "tool_bare": (lambda: bare.acall(a=1, b=2), calls),
        "tool_adapter": (lambda: wrapped.acall(a=1, b=2), calls),
        "agent_bare": (_agent(bare), agent_calls),
        "agent_adapter": (_agent(wrapped), agent_calls),
    }
    samples: dict[str, list[float]] = {k: [] for k in variants}

    async def go() -> None:
        for r in range(rounds + 1):
            for name, (fn, n) in variants.items():
                if not r:  # round 0 warms up, and checks every variant gets the answer
                    assert "3" in str(await fn()), name
                us = await _per_call_us(fn, n)
                if r:
                    samples[name].append(us)

    try:
        asyncio.run(go())
    finally:
        reg.shutdown()
    return {k: statistics.median(v) for k, v in samples.items()}


def table(figures: dict[str, float]) -> Table:
    """The figures as a bench table."""
    t = Table(f"framework: {FRAMEWORK} (µs per call, median of rounds)",
              ["what", "bare", "with adapter", "ratio"])
    for what in ("tool", "agent"):
        b, a = figures[f"{what}_bare"], figures[f"{what}_adapter"]
        t.add("tool call" if what == "tool" else "agent run", b, a, a / b, digits=1)
    return t


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fw_llamaindex")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--agent-calls", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    print(machine())
    table(measure(args.calls, args.rounds, args.agent_calls)).print()


if __name__ == "__main__":
    main()
