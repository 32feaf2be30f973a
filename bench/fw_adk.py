"""Google ADK: one tool call through the framework, bare and through tooltrace.

One row, measured in the same process with the variants interleaved round by round: an
``InMemoryRunner`` whose scripted model calls ``add`` once and then answers, with the plain
function as an ADK ``FunctionTool`` against ``as_adk_tools(registry)`` plus the
``TooltracePlugin`` (the registry's whole pipeline: validate, policy, admission, execute on a
worker thread, redact; no telemetry sinks). Each run is one ADK invocation on a fresh session:
what an application pays per tool-using turn.

google-adk lives in a venv of its own: ``.venv-adk/bin/python -m bench.fw_adk``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from collections.abc import AsyncGenerator, Callable
from typing import Any

from bench._common import Table, machine, scratch
from bench.frameworks import interleaved, ratio_table

__all__ = ["FRAMEWORK", "main", "measure", "table"]

FRAMEWORK = "google-adk"
ROWS = (("agent run (InMemoryRunner)", "agent"),)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _model() -> Any:
    """A model that calls ``add`` once, then answers with the tool's result."""
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=1, candidates_token_count=1, total_token_count=2
    )

    class OneCall(BaseLlm):
        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            last = llm_request.contents[-1].parts or []
            answered = [p.function_response for p in last if p.function_response]
            part = (
                types.Part.from_text(text=f"the sum is {answered[0].response}")
                if answered
                else types.Part(function_call=types.FunctionCall(
                    id="c1", name="add", args={"a": 1, "b": 2}))
            )
            yield LlmResponse(
                content=types.Content(role="model", parts=[part]), usage_metadata=usage
            )

    return OneCall(model="one-call")


def _runner(tools: list[Any], plugins: list[Any]) -> Callable[[], str]:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    agent = LlmAgent(name="bench", model=_model(), tools=tools)
    runner = InMemoryRunner(app=App(name="bench", root_agent=agent, plugins=plugins))
    msg = types.Content(role="user", parts=[types.Part.from_text(text="add 1 and 2")])
    loop = asyncio.new_event_loop()
    ids = itertools.count()

    async def once() -> str:
        session = await runner.session_service.create_session(
            app_name="bench", user_id="u", session_id=f"s{next(ids)}"
        )
        text = ""
        async for event in runner.run_async(user_id="u", session_id=session.id,
                                            new_message=msg):
            for part in (event.content.parts or []) if event.content else []:
                text += part.text or ""
        return text

    return lambda: loop.run_until_complete(once())


def measure(rounds: int = 7, agent_calls: int = 30) -> dict[str, float]:
    """Median µs per call: ``{agent_bare, agent_adapter}``."""
    from google.adk.tools import FunctionTool

    from tooltrace import ToolRegistry, tool
    from tooltrace.integrations.adk import TooltracePlugin, as_adk_tools

    home = scratch("fw-adk-")
    reg = ToolRegistry(workspace=home, home=home)
    reg.register(tool()(add))

    def check(name: str, out: Any) -> None:
        assert "3" in str(out), (name, out)

    try:
        return interleaved({
            "agent_bare": (_runner([FunctionTool(add)], []), agent_calls),
            "agent_adapter": (_runner(as_adk_tools(reg), [TooltracePlugin(reg)]), agent_calls),
        }, rounds, check)
    finally:
        reg.shutdown()


def table(figures: dict[str, float]) -> Table:
    """The figures as a bench table."""
    return ratio_table(FRAMEWORK, ROWS, figures)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fw_adk")
    ap.add_argument("--agent-calls", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    print(machine())
    table(measure(args.rounds, args.agent_calls)).print()


if __name__ == "__main__":
    main()
