"""Adopting a framework's tools: the one loop behind every adapter's ``adopt``.

An adapter reads each of its framework's tools as an ``Adopted`` (name, description, schema
and the function the registry runs); ``register_adopted`` makes each a ``ToolDefinition`` with
the caller's capability, effect, source, priority and deadline and registers it. Tools are read
and registered one at a time, in order: a tool that cannot be adopted raises there, and the
ones before it stay registered. No framework is imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..model import Capability, Effect, ToolDefinition

if TYPE_CHECKING:
    from ..registry import ToolRegistry

__all__ = ["Adopted", "register_adopted"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Adopted:
    """One framework tool as the registry takes it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """The JSON Schema the framework shows the model (the registry checks and compiles it)."""
    handler: Callable[..., Any]
    """What the registry runs in its execute step: the framework's own way to run the tool."""
    timeout_s: float | None = None
    """The tool's own deadline, if the framework gives it one; None: ``adopt``'s ``timeout_s``."""
    tool_type: str = "function"
    """As ``ToolDefinition.tool_type``."""


def register_adopted(
    registry: ToolRegistry,
    tools: Iterable[T],
    read: Callable[[T], Adopted],
    *,
    capability: Capability | str,
    effect: Effect | str,
    source: str,
    timeout_s: float,
    priority: int = 0,
) -> list[ToolDefinition]:
    """Register each of ``tools`` as ``read`` gives it; return the definitions, in order.

    ``capability``, ``effect``, ``source`` and ``priority`` apply to every tool; ``timeout_s``
    to every tool that has no deadline of its own. ``read`` raises ``RegistrationError`` for a
    tool that cannot be adopted; ``register`` raises it for a schema it cannot use.
    """
    out = []
    for tool in tools:
        adopted = read(tool)
        definition = ToolDefinition(
            name=adopted.name,
            description=adopted.description,
            parameters=adopted.parameters,
            capability=Capability(capability),
            effect=Effect(effect),
            timeout_s=timeout_s if adopted.timeout_s is None else adopted.timeout_s,
            source=source,
            priority=priority,
            tool_type=adopted.tool_type,
        )
        out.append(registry.register(definition, adopted.handler))
    return out
