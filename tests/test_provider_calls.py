"""The registry speaks the model APIs' own shapes: tool lists, tool calls and tool results."""

from __future__ import annotations

import json
from pathlib import Path

from tooltrace import Status, ToolRegistry, tool
from tooltrace.integrations import providers


def _registry(tmp_path: Path) -> ToolRegistry:
    @tool(execution="inline")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    reg = ToolRegistry(workspace=tmp_path)
    reg.register(add)
    return reg


def test_tool_specs_are_the_visible_tools_in_each_format(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    for fmt in ("openai", "openai-responses", "anthropic", "gemini", "mcp"):
        specs = providers.tool_specs(reg, "default", fmt)
        assert specs == providers.tool_specs(reg, "default", fmt)  # type: ignore[arg-type]
        again = providers.tool_specs(reg, "default", fmt)  # type: ignore[arg-type]
        assert json.dumps(specs) == json.dumps(again)  # stable bytes
        assert len(specs) == len(reg.visible_tools("default").visible)
    assert providers.tool_specs(reg, format="openai")[0]["function"]["name"] == "add"
    reg.shutdown()


def test_a_provider_tool_call_runs_and_its_result_message_answers_it(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    openai_call = {"id": "call_1", "type": "function",
                   "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    env = providers.call_from(reg, openai_call)
    assert env.status is Status.OK and env.data == 5
    assert env.record.attributes["provider.tool_call_id"] == "call_1"
    want = {"role": "tool", "tool_call_id": "call_1", "content": "5"}
    assert providers.result_message(env) == want
    bad = providers.call_from(reg, {"type": "tool_use", "id": "toolu_1", "name": "add",
                         "input": {"a": "two", "b": 3}})
    assert bad.status is Status.REJECTED
    msg = providers.result_message(bad)
    assert msg["is_error"] is True and msg["tool_use_id"] == "toolu_1"
    assert msg["content"].startswith("Error:")
    reg.shutdown()
