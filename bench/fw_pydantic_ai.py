"""Pydantic AI: one tool call through the framework, bare and through tooltrace's adapter.

Two rows, measured in the same process with the variants interleaved round by round:

- ``tool call``: ``toolset.call_tool("add", {"a": 1, "b": 2}, ctx, tool)`` on a
  ``FunctionToolset`` holding the plain function, against ``as_toolset(registry)`` with the
  same function registered (``@tool``: the whole pipeline runs, validate, policy, admission,
  execute on a worker thread, redact; no telemetry sinks). Both run the function on a thread.
- ``agent run``: an ``Agent`` on ``FunctionModel`` that makes that one call and answers, with
  the function as a plain tool against ``capabilities=[Tooltrace(registry)]`` (what an
  application pays per tool-using turn).

Usage: ``python -m bench.fw_pydantic_ai [--calls N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from bench._common import Table, machine, scratch
from bench.frameworks import interleaved, ratio_table

__all__ = ["FRAMEWORK", "main", "measure"]

FRAMEWORK = "pydantic-ai"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _script(messages: list[Any], info: Any) -> Any:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart

    last = messages[-1]
    if isinstance(last, ModelRequest) and any(
        getattr(p, "tool_call_id", None) for p in last.parts
    ):
        return ModelResponse(parts=[TextPart(f"the sum is {last.parts[0].content}")])
    return ModelResponse(parts=[ToolCallPart("add", {"a": 1, "b": 2}, tool_call_id="c1")])


def _agent(**kwargs: Any) -> Callable[[], Awaitable[Any]]:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    agent = Agent(FunctionModel(_script), **kwargs)

    async def run() -> Any:
        return (await agent.run("add")).output

    return run


def _tool_call(toolset: Any) -> Callable[[], Awaitable[Any]]:
    from pydantic_ai import RunContext
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import RunUsage

    ctx = RunContext(deps=None, model=FunctionModel(_script), usage=RunUsage(),
                     tool_call_id="c1", tool_name="add")
    tools: dict[str, Any] = {}

    async def call() -> Any:
        if not tools:
            tools.update(await toolset.get_tools(ctx))
        return await toolset.call_tool("add", {"a": 1, "b": 2}, ctx, tools["add"])

    return call


def measure(calls: int = 500, rounds: int = 7, agent_calls: int = 40) -> dict[str, float]:
    """Median µs per call of each variant: ``{tool_bare, tool_adapter, agent_bare,
    agent_adapter}`` (interleaved rounds, one warm-up round that checks every answer)."""
    from pydantic_ai.toolsets import FunctionToolset

    from tooltrace import ToolRegistry, tool
    from tooltrace.integrations.pydantic_ai import Tooltrace, as_toolset

    home = scratch("fw-pydantic-ai-")
    reg = ToolRegistry(workspace=home, home=home)
    reg.register(tool()(add))
    variants: dict[str, tuple[Callable[[], Awaitable[Any]], int]] = {
        "tool_bare": (_tool_call(FunctionToolset([add])), calls),
        "tool_adapter": (_tool_call(as_toolset(reg)), calls),
        "agent_bare": (_agent(tools=[add]), agent_calls),
        "agent_adapter": (_agent(capabilities=[Tooltrace(reg)]), agent_calls),
    }
    loop = asyncio.new_event_loop()

    def on_loop(fn: Callable[[], Awaitable[Any]]) -> Callable[[], Any]:
        return lambda: loop.run_until_complete(fn())

    def check(name: str, out: Any) -> None:
        assert "3" in str(out), (name, out)

    try:
        return interleaved(
            {name: (on_loop(fn), n) for name, (fn, n) in variants.items()}, rounds, check
        )
    finally:
        loop.close()
        reg.shutdown()


def table(figures: dict[str, float]) -> Table:
    """The figures as a bench table."""
    return ratio_table(FRAMEWORK, [("tool call", "tool"), ("agent run", "agent")], figures)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fw_pydantic_ai")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--agent-calls", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    print(machine())
    table(measure(args.calls, args.rounds, args.agent_calls)).print()


if __name__ == "__main__":
    main()
