"""A hand-written loop on a provider's API: one tool call, dispatched by hand and through
``tooltrace.integrations.providers``.

Rows, measured in the same process with the variants interleaved round by round; every variant
starts from an OpenAI Chat Completions ``tool_call`` dict (JSON-string arguments) and ends with
the ``{"role": "tool"}`` message to send back:

- bare: ``json.loads`` the arguments, call the function, ``json.dumps`` the result into the
  message (what a hand-written loop does, with no checks at all).
- with adapter: ``call_from(registry, tool_call)`` and ``result_message(envelope, "openai")``:
  the whole pipeline (validate, policy, admission, execute, redact; no telemetry sinks), the
  tool on a worker thread (``thread``, the default: its deadline is enforced) or on the
  caller's thread (``inline``).

Usage: ``python -m bench.fw_providers [--calls N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from bench._common import Table, machine, scratch
from bench.frameworks import interleaved, ratio_table

__all__ = ["FRAMEWORK", "main", "measure", "table"]

FRAMEWORK = "providers (hand-written loop, OpenAI format)"
ROWS = (("tool call, tool on a worker thread", "thread"),
        ("tool call, tool inline", "inline"))
TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _bare() -> dict[str, Any]:
    fn = TOOL_CALL["function"]
    assert isinstance(fn, dict)
    out = {"add": add}[fn["name"]](**json.loads(fn["arguments"]))
    return {"role": "tool", "tool_call_id": TOOL_CALL["id"], "content": json.dumps(out)}


def measure(calls: int = 3000, rounds: int = 7) -> dict[str, float]:
    """Median µs per call: ``{thread_bare, thread_adapter, inline_bare, inline_adapter}``."""
    from tooltrace import ToolRegistry, tool
    from tooltrace.integrations.providers import call_from, result_message

    home = scratch("fw-providers-")
    threaded = ToolRegistry(workspace=home, home=home)
    threaded.register(tool()(add))
    inline = ToolRegistry(workspace=home, home=home)
    inline.register(tool(execution="inline")(add))

    def check(name: str, out: dict[str, Any]) -> None:
        assert out["content"] == "3", name

    try:
        return interleaved({
            "thread_bare": (_bare, calls),
            "thread_adapter": (lambda: result_message(call_from(threaded, TOOL_CALL), "openai"),
                               calls),
            "inline_bare": (_bare, calls),
            "inline_adapter": (lambda: result_message(call_from(inline, TOOL_CALL), "openai"),
                               calls),
        }, rounds, check)
    finally:
        threaded.shutdown()
        inline.shutdown()


def table(figures: dict[str, float]) -> Table:
    """The figures as a bench table."""
    return ratio_table(FRAMEWORK, ROWS, figures)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fw_providers")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    print(machine())
    table(measure(args.calls, args.rounds)).print()


if __name__ == "__main__":
    main()
