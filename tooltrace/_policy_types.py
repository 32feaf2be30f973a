"""Policy types kept in Python (``tooltrace.policy`` is compiled): a msgspec record with class
options and a runtime-checkable protocol, which the compiled build could not keep as they are.
Import them from ``tooltrace.policy``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from .tool import ToolDefinition

if TYPE_CHECKING:
    from .policy import PolicyDecision

__all__ = ["PolicyRequest", "Rule"]


class PolicyRequest(msgspec.Struct, frozen=True):
    """What rules see: the tool, its validated arguments, the mode and the run."""

    tool: ToolDefinition
    arguments: Mapping[str, Any]
    mode: str
    run_id: str
    call_id: str
    resolved_paths: Mapping[str, str] = msgspec.field(default_factory=dict)


@runtime_checkable
class Rule(Protocol):
    """A named policy rule."""

    @property
    def name(self) -> str:
        """The rule's name, as it appears in decisions (``policy:<name>``)."""

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        """Return a verdict, or None for no opinion."""
