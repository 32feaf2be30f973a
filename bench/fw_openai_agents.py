"""OpenAI Agents SDK: one tool call through the framework, bare and through tooltrace's adapter.

Two rows, measured in the same process with the variants interleaved round by round:

- ``tool call``: ``await tool.on_invoke_tool(ctx, '{"a": 1, "b": 2}')`` on the SDK's
  ``function_tool(add)`` against ``as_function_tools(registry)`` with the same function
  registered (``@tool``: the whole pipeline runs, validate, policy, admission, execute on a
  worker thread, redact; no telemetry sinks). The SDK runs a sync function on a thread too.
- ``agent run``: ``Runner.run`` of an ``Agent`` on the SDK's ``ScriptedModel`` that makes that
  one call and answers (what an application pays per tool-using turn); the SDK's trace
  processors are replaced by none.

Usage: ``python -m bench.fw_openai_agents [--calls N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from bench._common import Table, machine, scratch
from bench.frameworks import interleaved, ratio_table

__all__ = ["FRAMEWORK", "main", "measure"]

FRAMEWORK = "openai-agents"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _agent(tool: Any) -> Callable[[], Awaitable[Any]]:
    from agents import Agent, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    async def run() -> Any:
        # A script is consumed by one run: a fresh one per run, for both variants alike.
        model = ScriptedModel([[function_call("add", {"a": 1, "b": 2}, call_id="c1")],
                               [assistant_message("the sum is 3")]])
        result = await Runner.run(Agent(name="bench", model=model, tools=[tool]), "add")
        return result.final_output

    return run


def _tool_call(tool: Any) -> Callable[[], Awaitable[Any]]:
    from agents.tool_context import ToolContext

    args = '{"a": 1, "b": 2}'

    async def call() -> Any:
        ctx = ToolContext(context=None, tool_name="add", tool_call_id="c1", tool_arguments=args)
        return await tool.on_invoke_tool(ctx, args)

    return call


def measure(calls: int = 500, rounds: int = 7, agent_calls: int = 40) -> dict[str, float]:
    """Median µs per call of each variant: ``{tool_bare, tool_adapter, agent_bare,
    agent_adapter}`` (interleaved rounds, one warm-up round that checks every answer)."""
    from agents import function_tool, set_trace_processors

    from tooltrace import ToolRegistry, tool
    from tooltrace.integrations.openai_agents import as_function_tools

    set_trace_processors([])
    bare = function_tool(add)
    home = scratch("fw-openai-agents-")
    reg = ToolRegistry(workspace=home, home=home)
    reg.register(tool()(add))
    (wrapped,) = as_function_tools(reg)
    variants: dict[str, tuple[Callable[[], Awaitable[Any]], int]] = {
        "tool_bare": (_tool_call(bare), calls),
        "tool_adapter": (_tool_call(wrapped), calls),
        "agent_bare": (_agent(bare), agent_calls),
        "agent_adapter": (_agent(wrapped), agent_calls),
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
    ap = argparse.ArgumentParser(prog="python -m bench.fw_openai_agents")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--agent-calls", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    print(machine())
    table(measure(args.calls, args.rounds, args.agent_calls)).print()


if __name__ == "__main__":
    main()
