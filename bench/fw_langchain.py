"""LangChain / LangGraph: one tool call through the framework, bare and through tooltrace.

Two rows, measured in the same process with the variants interleaved round by round:

- ``ToolNode``: LangGraph's ``ToolNode`` (alone in a graph) running one tool call (``add``)
  against ``tool_node(registry)`` with the same function registered (``@tool``): the
  middleware's ``wrap_tool_call`` runs the whole pipeline (validate, policy, admission, execute
  on a worker thread, redact; no telemetry sinks). ``ToolNode`` runs each call on a thread of
  its own executor in both.
- ``create_agent``: an agent whose scripted model makes that one call and answers, with the
  tool given to ``create_agent`` against ``TooltraceMiddleware(registry)`` (what an
  application pays per tool-using turn).

Usage: ``python -m bench.fw_langchain [--calls N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from bench._common import Table, machine, scratch
from bench.frameworks import interleaved, ratio_table

__all__ = ["FRAMEWORK", "main", "measure", "table"]

FRAMEWORK = "langchain"
ROWS = (("tool call (ToolNode)", "tool"), ("agent run (create_agent)", "agent"))


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _model() -> Any:
    """A chat model that calls ``add`` once, then answers with the tool's result."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class OneCall(GenericFakeChatModel):
        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
            last = messages[-1]
            msg = (AIMessage(f"the sum is {last.content}") if isinstance(last, ToolMessage)
                   else AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2},
                                                   "id": "c1"}]))
            return ChatResult(generations=[ChatGeneration(message=msg)])

    return OneCall(messages=iter(()))


def _graph(node: Any) -> Any:
    """A graph holding only the tool node (a ``ToolNode`` runs inside a graph's runtime)."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    g = StateGraph(MessagesState)
    g.add_node("tools", node)
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    return g.compile()


def measure(calls: int = 300, rounds: int = 7, agent_calls: int = 30) -> dict[str, float]:
    """Median µs per call: ``{tool_bare, tool_adapter, agent_bare, agent_adapter}``."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import StructuredTool
    from langgraph.prebuilt import ToolNode

    from tooltrace import ToolRegistry, tool
    from tooltrace.integrations.langchain import TooltraceMiddleware, tool_node

    home = scratch("fw-langchain-")
    reg = ToolRegistry(workspace=home, home=home)
    reg.register(tool()(add))
    call = {"messages": [AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2},
                                                    "id": "c1"}])]}
    ask = {"messages": [("user", "add 1 and 2")]}
    bare_node = _graph(ToolNode([StructuredTool.from_function(add)]))
    wrapped_node = _graph(tool_node(reg))
    bare_agent = create_agent(_model(), tools=[StructuredTool.from_function(add)])
    wrapped_agent = create_agent(_model(), middleware=[TooltraceMiddleware(reg)])

    def check(name: str, out: Any) -> None:
        assert "3" in str(out["messages"][-1].content), name

    try:
        return interleaved({
            "tool_bare": (lambda: bare_node.invoke(call), calls),
            "tool_adapter": (lambda: wrapped_node.invoke(call), calls),
            "agent_bare": (lambda: bare_agent.invoke(ask), agent_calls),
            "agent_adapter": (lambda: wrapped_agent.invoke(ask), agent_calls),
        }, rounds, check)
    finally:
        reg.shutdown()


def table(figures: dict[str, float]) -> Table:
    """The figures as a bench table."""
    return ratio_table(FRAMEWORK, ROWS, figures)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fw_langchain")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--agent-calls", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    print(machine())
    table(measure(args.calls, args.rounds, args.agent_calls)).print()


if __name__ == "__main__":
    main()
