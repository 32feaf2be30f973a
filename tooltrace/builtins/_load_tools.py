"""``load_tools``: the full schemas of a tool group that a listing collapsed to one line.

It is a tool like any other (policed, audited): a model that read a group's line calls it with
the group's name and gets the schemas of the group's tools that its mode shows, in the same
stable order and bytes as an expanded listing (``ToolRegistry.tool_listing``).
"""

from __future__ import annotations

from typing import Annotated

from ..model import Capability, Effect, Execution, FunctionTool, ToolResult, tool
from ..registry import ToolRegistry
from ..runtime import CallContext

__all__ = ["build_load_tools"]


class UnknownGroupError(LookupError):
    """No group of that name is shown in the call's mode (the message says why)."""


def build_load_tools(registry: ToolRegistry) -> FunctionTool:
    """The ``load_tools`` tool, reading the groups of ``registry``."""

    @tool("load_tools", capability=Capability.READ, effect=Effect.NONE, timeout_s=5.0,
          source="builtin", execution=Execution.INLINE)
    def load_tools(
        ctx: CallContext,
        group: Annotated[str, "The name of a tool group listed in this tool's description"],
    ) -> ToolResult:
        """Load the full schemas of a tool group, so its tools can be called."""
        listing = registry.tool_listing(ctx.mode, expand=(group,))
        tools = [t for t in listing.to_dict()["tools"]
                 if (d := registry.definition(t["name"])) is not None and d.group_name == group]
        if not tools:
            hidden = dict(listing.hidden_groups)
            if group in hidden:
                raise UnknownGroupError(f"group {group!r} is hidden: {hidden[group]}")
            known = ", ".join(g.name for g in registry.tool_listing(ctx.mode).groups)
            raise UnknownGroupError(f"no group {group!r} in this mode (groups: {known or 'none'})")
        ctx.set_detail("group", group)
        ctx.set_detail("tools", len(tools))
        return ToolResult({"group": group, "tools": tools},
                          summary=f"loaded {len(tools)} tool schemas of group {group}")

    return load_tools
