"""The adopt loop every framework adapter shares (``tooltrace.integrations._adopt``), on its own:
no framework, plain callables as the "framework tools"."""

from __future__ import annotations

import pytest

from tooltrace import Capability, Effect, RegistrationError, ToolCall, ToolRegistry
from tooltrace.integrations._adopt import Adopted, register_adopted

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def _read(name: str) -> Adopted:
    if name == "bad":
        raise RegistrationError("cannot adopt bad")
    own_deadline = 5.0 if name == "slow" else None
    return Adopted(name, f"the {name} tool", SCHEMA, lambda x: x * 2, timeout_s=own_deadline,
                   tool_type="extension" if name == "slow" else "function")


def test_each_tool_is_registered_with_the_callers_terms_and_its_own_deadline(
    registry: ToolRegistry,
) -> None:
    defs = register_adopted(registry, iter(["double", "slow"]), _read, capability="write",
                            effect="local", source="framework:test", timeout_s=12.0,
                            priority=3)
    assert [d.name for d in defs] == ["double", "slow"]
    double, slow = defs
    assert (double.capability, double.effect) == (Capability.WRITE, Effect.LOCAL)
    assert (double.source, double.priority, double.description) == (
        "framework:test", 3, "the double tool")
    assert (double.timeout_s, double.tool_type) == (12.0, "function")
    assert (slow.timeout_s, slow.tool_type) == (5.0, "extension")
    assert registry.definition("double") is double
    env = registry.call(ToolCall(name="double", arguments={"x": 21}, mode="default"))
    assert env.ok, env.summary
    assert env.data == 42


def test_a_tool_that_cannot_be_adopted_stops_there_and_the_ones_before_it_stay(
    registry: ToolRegistry,
) -> None:
    with pytest.raises(RegistrationError, match="cannot adopt bad"):
        register_adopted(registry, ["first", "bad", "after"], _read, capability="read",
                         effect="none", source="framework:test", timeout_s=30.0)
    assert registry.definition("first") is not None
    assert registry.definition("after") is None


def test_a_schema_the_registry_cannot_use_is_refused_by_register(
    registry: ToolRegistry,
) -> None:
    def read(name: str) -> Adopted:
        return Adopted(name, "d", {"type": "array"}, lambda: None)

    with pytest.raises(RegistrationError):
        register_adopted(registry, ["arr"], read, capability="read", effect="none",
                         source="framework:test", timeout_s=30.0)
    assert registry.definition("arr") is None
