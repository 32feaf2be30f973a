"""LlamaIndex: one tool call through the framework, bare and through tooltrace's adapter.

Two rows, measured in the same process with the variants interleaved round by round (each call
awaited on one event loop):

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
from collections.abc import Awaitable, Callable
from typing import Any

from bench._common import Table, machine, scratch
from bench.frameworks import interleaved, ratio_table

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


def measure(calls: int = 500, rounds: int = 7, agent_calls: int = 40) -> dict[str, float]:
    """Median µs per call of each variant: ``{tool_bare, tool_adapter, agent_bare,
    agent_adapter}`` (interleaved rounds, one warm-up round that checks every answer)."""
    from llama_index.core.tools import FunctionTool

    from tooltrace import ToolRegistry, tool
    from tooltrace.integrations.llamaindex import as_llamaindex_tools

    bare = FunctionTool.from_defaults(fn=add)
    home = scratch("fw-llamaindex-")
    reg = ToolRegistry(workspace=home, home=home)
    reg.register(tool()(add))
    (wrapped,) = as_llamaindex_tools(reg)
    loop = asyncio.new_event_loop()

    def on_loop(fn: Callable[[], Awaitable[Any]]) -> Callable[[], Any]:
        return lambda: loop.run_until_complete(fn())

    def check(name: str, out: Any) -> None:
        assert "3" in str(out), (name, out)

    try:
        return interleaved({
            "tool_bare": (on_loop(lambda: bare.acall(a=1, b=2)), calls),
            "tool_adapter": (on_loop(lambda: wrapped.acall(a=1, b=2)), calls),
            "agent_bare": (on_loop(_agent(bare)), agent_calls),
            "agent_adapter": (on_loop(_agent(wrapped)), agent_calls),
        }, rounds, check)
    finally:
        loop.close()
        reg.shutdown()


def table(figures: dict[str, float]) -> Table:
    """The figures as a bench table."""
    return ratio_table(FRAMEWORK, [("tool call", "tool"), ("agent run", "agent")], figures)


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
