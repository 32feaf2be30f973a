"""Tool definitions: where a tool came from, where its CallContext parameter stands, and the
``@tool`` decorator with and without parentheses."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

import pytest

from tooltrace import (
    CallContext,
    FunctionTool,
    RegistrationError,
    ToolCall,
    ToolDefinition,
    ToolRegistry,
    tool,
)


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


def test_bare_tool_and_tool_with_empty_parentheses_build_the_same_tool(tmp_path: Path) -> None:
    @tool
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    @tool()
    def whisper(text: str) -> str:
        """Lower-case the text."""
        return text.lower()

    @tool("yell")
    def loud(text: str) -> str:
        """Upper-case the text, by another name."""
        return text.upper()

    assert isinstance(shout, FunctionTool) and isinstance(whisper, FunctionTool)
    assert shout.definition.name == "shout" and loud.definition.name == "yell"
    assert shout.definition.description == "Upper-case the text."
    assert shout.definition.parameters == whisper.definition.parameters
    plain = dataclasses.replace(shout.definition, name="whisper",
                                description="Lower-case the text.")
    assert plain == whisper.definition
    registry = ToolRegistry(workspace=tmp_path)
    try:
        for t in (shout, whisper, loud):
            registry.register(t)
        assert registry.call(ToolCall("shout", {"text": "hi"})).data == "HI"
        assert registry.call(ToolCall("whisper", {"text": "HI"})).data == "hi"
        assert registry.call(ToolCall("yell", {"text": "hi"})).data == "HI"
    finally:
        registry.shutdown()


@pytest.mark.parametrize("bad", [3, b"name", ("t",)])
def test_tool_refuses_a_name_that_is_neither_a_string_nor_a_function(bad: object) -> None:
    with pytest.raises(RegistrationError, match="takes a tool name"):
        tool(bad)  # type: ignore[call-overload]


def test_tool_refuses_to_decorate_what_is_not_a_function() -> None:
    with pytest.raises(RegistrationError, match="decorates a function"):
        tool()(42)  # type: ignore[arg-type]


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


def test_an_enum_default_becomes_its_value_in_the_schema(tmp_path: Path) -> None:
    @tool
    def paint(colour: Colour = Colour.BLUE) -> str:
        """Paint in one colour."""
        return str(colour)

    prop = paint.definition.parameters["properties"]["colour"]
    assert prop == {"enum": ["red", "blue"], "default": "blue"}
    assert type(prop["default"]) is str
    registry = ToolRegistry(workspace=tmp_path)
    try:
        registry.register(paint)
        assert registry.call(ToolCall("paint", {})).data == "blue"
    finally:
        registry.shutdown()
