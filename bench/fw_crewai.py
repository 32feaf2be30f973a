"""CrewAI: one tool call through the framework, bare and through tooltrace.

Two rows, measured in the same process with the variants interleaved round by round:

- ``BaseTool.run``: the entry CrewAI calls for a native tool call, on a plain ``BaseTool``
  (``add``) against ``as_crewai_tools(registry)``'s tool for the same function registered with
  ``@tool`` (the registry's whole pipeline: validate, policy, admission, execute on a worker
  thread, redact; no telemetry sinks).
- ``Crew.kickoff``: a one-agent, one-task crew whose scripted model calls ``add`` once and then
  answers (what an application pays per tool-using task).

crewai lives in a venv of its own: ``.venv-crewai/bin/python -m bench.fw_crewai``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

from bench._common import Table, machine, scratch
from bench.frameworks import interleaved, ratio_table

__all__ = ["FRAMEWORK", "main", "measure", "table"]

FRAMEWORK = "crewai"
ROWS = (("tool call (BaseTool.run)", "tool"), ("crew run (Crew.kickoff)", "crew"))


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _quiet_crewai() -> None:
    """Nothing CrewAI does here may leave the machine or write to the real home."""
    home = tempfile.mkdtemp(prefix="tooltrace-bench-crewai-")
    os.environ.update(
        HOME=home,
        CREWAI_STORAGE_DIR=os.path.join(home, "storage"),
        CREWAI_DISABLE_TELEMETRY="true",
        CREWAI_DISABLE_TRACKING="true",
        CREWAI_TRACING_ENABLED="false",
    )


def _crew(tools: list[Any]) -> Callable[[], str]:
    from crewai import Agent, Crew, Task
    from crewai.llms.base_llm import BaseLLM

    turn = [{"id": "c1", "type": "function",
             "function": {"name": "add", "arguments": json.dumps({"a": 1, "b": 2})}}]

    class OneCall(BaseLLM):
        def call(self, messages: Any, tools: Any = None, *args: Any, **kwargs: Any) -> Any:
            last = messages[-1] if isinstance(messages, list) else {}
            if last.get("role") == "tool":
                return f"the sum is {last['content']}"
            return turn

        def supports_function_calling(self) -> bool:
            return True

    def once() -> str:
        agent = Agent(role="r", goal="g", backstory="b", llm=OneCall(model="one-call"),
                      tools=tools, verbose=False)
        task = Task(description="add 1 and 2", expected_output="the sum", agent=agent)
        return str(Crew(agents=[agent], tasks=[task]).kickoff().raw)

    return once


def measure(calls: int = 300, rounds: int = 7, crew_calls: int = 10) -> dict[str, float]:
    """Median µs per call: ``{tool_bare, tool_adapter, crew_bare, crew_adapter}``."""
    if importlib.util.find_spec("crewai") is None:  # before the environment is touched
        raise ImportError("crewai is not installed here (.venv-crewai has it)")
    _quiet_crewai()
    from crewai.tools import tool as crewai_tool

    from tooltrace import ToolRegistry, tool
    from tooltrace.integrations.crewai import as_crewai_tools

    home = scratch("fw-crewai-")
    reg = ToolRegistry(workspace=home, home=home)
    reg.register(tool()(add))
    bare = crewai_tool("add")(add)
    (wrapped,) = as_crewai_tools(reg)

    def check(name: str, out: Any) -> None:
        assert "3" in str(out), (name, out)

    try:
        return interleaved({
            "tool_bare": (lambda: bare.run(a=1, b=2), calls),
            "tool_adapter": (lambda: wrapped.run(a=1, b=2), calls),
            "crew_bare": (_crew([bare]), crew_calls),
            "crew_adapter": (_crew([wrapped]), crew_calls),
        }, rounds, check)
    finally:
        reg.shutdown()


def table(figures: dict[str, float]) -> Table:
    """The figures as a bench table."""
    return ratio_table(FRAMEWORK, ROWS, figures)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fw_crewai")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--crew-calls", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    print(machine())
    table(measure(args.calls, args.rounds, args.crew_calls)).print()


if __name__ == "__main__":
    main()
