"""Claude Agent SDK: one tool call through the framework, bare and through tooltrace's adapter.

Each sample is a whole ``query()`` turn against the fake CLI of the adapter's tests (it plays
Claude Code's side of the control protocol in-process, so no model and no subprocess): the SDK's
initialize handshake, the prompt, one tool use, the result. Variants, interleaved round by round
in the same process:

- ``built-in tool``: a Bash use the CLI runs; bare = no hooks; with the adapter = the
  ``PreToolUse`` decision and the ``PostToolUse`` completion through the registry (and the
  ``Stop`` hook). ``built-in tool, no-op hooks as bare`` compares the adapter with the same three
  hooks doing nothing: the control protocol's round trips are then on both sides.
- ``in-process MCP tool``: bare = the SDK's ``create_sdk_mcp_server`` with an ``@tool``; with the
  adapter = the same function registered and served by ``ClaudeAgentAdapter.mcp_server``.

Usage: ``python -m bench.fw_claude_agent_sdk [--turns N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench._common import Table, machine, scratch
from bench.frameworks import interleaved, ratio_table

__all__ = ["FRAMEWORK", "main", "measure"]

FRAMEWORK = "claude-agent-sdk"

# The fake CLI is the tests' (one copy of the protocol's CLI side).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _turn(options: Any, use: Callable[[], Any]) -> Callable[[], Awaitable[dict[str, Any]]]:
    from claude_agent_sdk import query
    from support.claude_fake_cli import FakeCli  # type: ignore[import-not-found]

    async def run() -> dict[str, Any]:
        cli = FakeCli([[use()]])
        async for _ in query(prompt="go", options=options, transport=cli):
            pass
        seen: dict[str, Any] = cli.seen
        return seen

    return run


async def _noop(input_data: Any, tool_use_id: str | None, context: Any) -> Any:
    return {}


def measure(turns: int = 30, rounds: int = 7) -> dict[str, float]:
    """Median µs per turn of each variant: ``{builtin_bare, builtin_adapter,
    builtin_noop_bare, builtin_noop_adapter, mcp_bare, mcp_adapter}`` (interleaved rounds, one
    warm-up round that checks every variant ran its tool)."""
    import claude_agent_sdk as sdk
    from support.claude_fake_cli import Use  # type: ignore[import-not-found]

    from tooltrace import ToolRegistry, tool
    from tooltrace.integrations.claude_agent_sdk import ClaudeAgentAdapter

    @sdk.tool("add", "Add two integers", {"a": int, "b": int})
    async def sdk_add(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": str(args["a"] + args["b"])}]}

    @tool()
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    home = scratch("fw-claude-")
    reg = ToolRegistry(workspace=home, home=home)
    reg.register(add)
    adapter = ClaudeAgentAdapter(reg)
    adapter.register_builtins(["Bash"])
    out = {"stdout": "hi", "stderr": "", "interrupted": False}

    def bash() -> Any:
        return Use("Bash", {"command": "echo hi"}, run=lambda i: out)

    bare = sdk.ClaudeAgentOptions(
        mcp_servers={"bare": sdk.create_sdk_mcp_server("bare", tools=[sdk_add])})
    noop = sdk.ClaudeAgentOptions(hooks={
        event: [sdk.HookMatcher(hooks=[_noop])] for event in ("PreToolUse", "PostToolUse",
                                                             "Stop")})
    variants = {
        "builtin_bare": _turn(sdk.ClaudeAgentOptions(), bash),
        "builtin_noop": _turn(noop, bash),
        "builtin_adapter": _turn(adapter.options(), bash),
        "mcp_bare": _turn(bare, lambda: Use("add", {"a": 1, "b": 2}, server="bare")),
        "mcp_adapter": _turn(adapter.options(),
                             lambda: Use("add", {"a": 1, "b": 2}, server="tooltrace")),
    }
    loop = asyncio.new_event_loop()

    def check(name: str, seen: Any) -> None:
        (result,) = seen.values()  # every variant really ran its tool
        assert "hi" in str(result) or "3" in str(result), (name, result)

    def on_loop(fn: Callable[[], Awaitable[Any]]) -> Callable[[], Any]:
        return lambda: loop.run_until_complete(fn())

    try:
        figures = interleaved({k: (on_loop(fn), turns) for k, fn in variants.items()},
                              rounds, check)
    finally:
        loop.close()
        reg.shutdown()
    # The adapter against no-op hooks: the same figure, under the key of its own row.
    return {**figures, "builtin_noop_bare": figures.pop("builtin_noop"),
            "builtin_noop_adapter": figures["builtin_adapter"]}


def table(figures: dict[str, float]) -> Table:
    """The figures as a bench table (µs per ``query()`` turn with one tool use)."""
    return ratio_table(FRAMEWORK, [("built-in tool", "builtin"),
                                   ("built-in tool, no-op hooks as bare", "builtin_noop"),
                                   ("in-process MCP tool", "mcp")], figures)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fw_claude_agent_sdk")
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    print(machine())
    table(measure(args.turns, args.rounds)).print()


if __name__ == "__main__":
    main()
