"""Tool definitions: where a tool came from, and where its CallContext parameter stands."""

from __future__ import annotations

import pytest

from tooltrace import CallContext, RegistrationError, ToolDefinition, tool


@pytest.mark.parametrize(
    "source", ["builtin", "user", "project", "mcp:git", "framework:langchain"]
)
def test_a_tool_names_where_it_came_from(source: str) -> None:
    d = ToolDefinition(name="t", description="d", parameters={"type": "object"}, source=source)
    assert d.source == source


@pytest.mark.parametrize("source", ["", "framework:", "langchain", "mcp:a b", "framework:x/y"])
def test_an_unknown_source_is_refused(source: str) -> None:
    with pytest.raises(RegistrationError, match="source must be"):
        ToolDefinition(name="t", description="d", parameters={"type": "object"}, source=source)


def test_the_call_context_must_come_first() -> None:
    def late(x: int, ctx: CallContext) -> int:
        """Takes its context second."""
        return x

    with pytest.raises(RegistrationError, match="CallContext parameter 'ctx' must come first"):
        tool()(late)

    @tool()
    def early(ctx: CallContext, x: int) -> int:
        """Takes its context first."""
        return x

    assert early.definition.parameters["properties"] == {"x": {"type": "integer"}}
