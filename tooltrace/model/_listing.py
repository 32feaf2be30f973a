"""Tool groups and lazy schemas: the tool list of a mode with groups collapsed to one line each.

A tool's group is ``ToolDefinition.group_name`` (its own ``group``, else its MCP server). A
collapsed listing shows every ungrouped tool in full, each group as one line (name,
description, how many of its tools the mode shows) and the built-in ``load_tools`` tool, whose
call returns a group's full schemas; groups named in ``expand`` are shown in full. The same
registry, mode and ``expand`` always give the same listing, byte for byte: everything is sorted
by name, and nothing in it depends on time, hashing or registration order. Hidden tools come
with the mode's reason, and a group whose every tool is hidden comes with its reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ..exceptions import RegistrationError
from ._tool import ToolDefinition

if TYPE_CHECKING:
    from ._tooltable import Visibility


class Listed(Protocol):
    """What a listing is made from (a ``ToolRegistry``): the tools a mode shows, the active
    definitions, and what each group is for."""

    @property
    def group_descriptions(self) -> Mapping[str, str]:
        """The line each group is described by (``describe_group``)."""

    def visible_tools(self, mode: str = "default") -> Visibility:
        """Tools the mode exposes and the hidden ones with reasons."""

    def definition(self, name: str) -> ToolDefinition | None:
        """The active definition of ``name``, or None."""

__all__ = ["LOAD_TOOLS", "GroupLine", "Listed", "ToolListing", "group_members", "tool_listing"]

#: The name of the built-in tool that expands a collapsed group.
LOAD_TOOLS = "load_tools"
_DESCRIPTION_CHARS = 200


@dataclass(frozen=True, slots=True)
class GroupLine:
    """A collapsed group: the one line a model reads instead of its tools' schemas."""

    name: str
    """The group's name (what ``load_tools`` takes)."""
    description: str
    """What the group is for (``describe_group``, else the names of its tools)."""
    tools: int
    """How many of its tools the mode shows."""


@dataclass(frozen=True, slots=True)
class ToolListing:
    """The tools a mode shows, groups collapsed: see the module's documentation."""

    mode: str
    """The mode asked about."""
    tools: tuple[ToolDefinition, ...]
    """The tools shown in full, sorted by name (``load_tools`` as the model should see it,
    listing the collapsed groups, when there are any)."""
    groups: tuple[GroupLine, ...]
    """The collapsed groups, sorted by name."""
    hidden: tuple[tuple[str, str], ...]
    """The tools the mode hides as (name, reason), sorted by name."""
    hidden_groups: tuple[tuple[str, str], ...]
    """The groups whose every tool the mode hides, as (name, reason), sorted by name."""

    def to_dict(self) -> dict[str, Any]:
        """The listing as plain JSON values (tools as name, description, parameters)."""
        return {
            "mode": self.mode,
            "tools": [{"name": d.name, "description": d.description,
                       "parameters": plain(d.parameters)} for d in self.tools],
            "groups": [{"name": g.name, "description": g.description, "tools": g.tools}
                       for g in self.groups],
            "hidden": [{"name": n, "reason": r} for n, r in self.hidden],
            "hidden_groups": [{"name": n, "reason": r} for n, r in self.hidden_groups],
        }

    def to_json(self) -> bytes:
        """The listing's canonical JSON bytes (keys sorted): equal listings, equal bytes."""
        return orjson.dumps(self.to_dict(), option=orjson.OPT_SORT_KEYS)


def group_members(
    reg: Listed, group: str, mode: str
) -> tuple[list[ToolDefinition], list[tuple[str, str]]]:
    """The tools of ``group`` that ``mode`` shows and those it hides (name, reason), sorted."""
    vis = reg.visible_tools(mode)
    shown = [d for d in vis.visible if d.group_name == group]
    hidden = []
    for name, why in vis.hidden:
        d = reg.definition(name)
        if d is not None and d.group_name == group:
            hidden.append((name, why))
    return shown, hidden


def tool_listing(reg: Listed, mode: str, expand: Iterable[str] = ()) -> ToolListing:
    """The listing of ``mode`` with every group collapsed except those in ``expand``.

    ``RegistrationError`` when a group would be collapsed but ``load_tools`` is not registered
    or the mode hides it (the model could not open the group).
    """
    wanted = frozenset(expand)
    vis = reg.visible_tools(mode)
    by_group: dict[str, list[ToolDefinition]] = {}
    full: list[ToolDefinition] = []
    for d in vis.visible:
        g = d.group_name
        if g is None or g in wanted or d.name == LOAD_TOOLS:
            full.append(d)
        else:
            by_group.setdefault(g, []).append(d)
    hidden_by_group: dict[str, list[str]] = {}
    for name, why in vis.hidden:
        hd = reg.definition(name)
        if hd is not None and hd.group_name is not None:
            hidden_by_group.setdefault(hd.group_name, []).append(why)
    lines = tuple(
        GroupLine(g, _describe(reg, g, members), len(members))
        for g, members in sorted(by_group.items())
    )
    hidden_groups = tuple(
        (g, reasons[0] if len(set(reasons)) == 1 else "every tool of the group is hidden in "
         f"mode {mode!r}")
        for g, reasons in sorted(hidden_by_group.items())
        if g not in by_group and not any(d.group_name == g for d in full)
    )
    if lines:
        loader = next((d for d in full if d.name == LOAD_TOOLS), None)
        if loader is None:
            why = dict(vis.hidden).get(LOAD_TOOLS, "it is not registered")
            raise RegistrationError(
                f"mode {mode!r} has groups to collapse but no {LOAD_TOOLS} tool ({why}): "
                "register it (tooltrace.builtins.register_builtins) or expand every group"
            )
        full = [_loader_view(loader, lines) if d is loader else d for d in full]
    return ToolListing(mode, tuple(full), lines, vis.hidden, hidden_groups)


def _describe(reg: Listed, group: str, members: list[ToolDefinition]) -> str:
    text = reg.group_descriptions.get(group)
    if text is None:
        text = "Tools: " + ", ".join(d.name for d in members)
    return text if len(text) <= _DESCRIPTION_CHARS else text[: _DESCRIPTION_CHARS - 3] + "..."


def _loader_view(loader: ToolDefinition, lines: tuple[GroupLine, ...]) -> ToolDefinition:
    """``load_tools`` as the model sees it in this listing: the collapsed groups, one line
    each, in its description, and their names as the only values its argument takes."""
    text = loader.description + "\nGroups:\n" + "\n".join(
        f"- {g.name} ({g.tools} tool{'s' if g.tools != 1 else ''}): {g.description}"
        for g in lines
    )
    params = dict(loader.parameters)
    props = dict(params.get("properties", {}))
    props["group"] = {**dict(props.get("group", {})), "enum": [g.name for g in lines]}
    params["properties"] = props
    return dataclasses.replace(loader, description=text, parameters=params)


def plain(value: Any) -> Any:
    """A deep copy of a JSON-like value as plain dicts and lists (key order kept)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return [plain(v) for v in value]
    return value
