"""Policy types kept in Python (``tooltrace.policy`` is compiled): a msgspec record with class
options and a runtime-checkable protocol, which the compiled build could not keep as they are.
Import them from ``tooltrace.policy``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from ..model import Principal, ToolDefinition

if TYPE_CHECKING:
    from ._rules import PolicyDecision

__all__ = ["PolicyRequest", "Rule"]


class PolicyRequest(msgspec.Struct, frozen=True):
    """What rules see: the tool, its validated arguments, the mode, the run and, for a nested
    call, its depth and parent tool."""

    tool: ToolDefinition
    """The active definition of the called tool."""
    arguments: Mapping[str, Any]
    """The arguments after schema validation (raw: rules see what the tool would get)."""
    mode: str
    """The call's mode (``default``, ``plan``, ...)."""
    run_id: str
    """The run the call belongs to."""
    call_id: str
    """The call's id."""
    resolved_paths: Mapping[str, str] = msgspec.field(default_factory=dict)
    """Each path argument resolved by the workspace policy, workspace-relative (POSIX)."""
    depth: int = 0
    """How deeply the call is nested: 0 for a call from outside any tool, 1 for a call a tool
    made through its context (``ctx.call``), and so on."""
    parent_tool: str | None = None
    """The tool whose call made this one, or ``None`` for a call from outside any tool."""
    principal: Principal | None = None
    """Who the call acts for (``None``: nobody named)."""


@runtime_checkable
class Rule(Protocol):
    """A named policy rule."""

    @property
    def name(self) -> str:
        """The rule's name, as it appears in decisions (``policy:<name>``)."""

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        """Return a verdict, or None for no opinion."""
