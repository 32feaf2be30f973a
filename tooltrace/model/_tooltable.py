"""The tool table: every registered definition by name and source, the active one per name, and
the shadow report that says which is active and what it shadows.

Registration is explicit about where a tool came from (``source``) and its ``priority``: the
highest priority is active; two sources of one name at the same priority are an error, and so is
registering the same source twice. An override never widens permissions: the active definition
is policed as at least as powerful, as far-reaching and as hard to cancel as everything it
shadows.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..exceptions import DuplicateToolError, RegistrationError
from ._tool import Execution, FunctionTool, ToolDefinition
from ._validation import CompiledSchema, compile_schema

__all__ = ["Entry", "Resolution", "ToolTable", "Visibility", "make_entry"]


@dataclass(frozen=True, slots=True)
class Resolution:
    """One line of the shadow report: a name, its active definition and what it shadows."""

    name: str
    """The tool's name."""
    active_source: str
    """The source of the active definition (``builtin``, ``user``, ``mcp:<server>``, ...)."""
    active_priority: int
    """The active definition's priority (the highest wins)."""
    shadowed: tuple[tuple[str, int], ...]
    """The other definitions of the name as (source, priority), sorted."""
    capability: str
    """The active definition's capability."""
    effect: str
    """The active definition's effect."""
    narrowed: bool
    """Whether an override was narrowed so it never widens what the shadowed one may do."""


@dataclass(frozen=True, slots=True)
class Visibility:
    """The tools a mode exposes (stable order) and those it hides, with reasons."""

    mode: str
    """The mode asked about."""
    visible: tuple[ToolDefinition, ...]
    """The tools the mode exposes, sorted by name."""
    hidden: tuple[tuple[str, str], ...]
    """The tools it hides as (name, reason), sorted by name."""


@dataclass(slots=True)
class Entry:
    """One registered definition with its handler and compiled schema."""

    definition: ToolDefinition
    fn: Callable[..., Any]
    wants_ctx: bool
    is_async: bool
    schema: CompiledSchema
    # A plain function declared inline runs on the caller's thread (or loop) in both drivers,
    # so the pipeline runs it itself instead of yielding it to the driver.
    inline: bool = False

    def __post_init__(self) -> None:
        self.inline = not self.is_async and self.definition.execution is Execution.INLINE


def make_entry(
    tool: FunctionTool | ToolDefinition, handler: Callable[..., Any] | None = None
) -> Entry:
    """The entry for a ``@tool`` function, or a definition with its handler; the schema is
    checked against its metaschema and compiled (``RegistrationError`` if anything is wrong)."""
    if isinstance(tool, FunctionTool):
        if handler is not None:
            raise RegistrationError("pass either a @tool function or a definition + handler")
        definition, fn, wants_ctx = tool.definition, tool.fn, tool.wants_ctx
    elif isinstance(tool, ToolDefinition):
        if handler is None or not callable(handler):
            raise RegistrationError(f"tool {tool.name!r}: a callable handler is required")
        definition, fn = tool, handler
        wants_ctx = _wants_ctx(handler)
    else:
        raise RegistrationError("register() takes a @tool function or a ToolDefinition")
    schema = compile_schema(definition.parameters, tool=definition.name)
    return Entry(definition, fn, wants_ctx, inspect.iscoroutinefunction(fn), schema)


class ToolTable:
    """Registered entries by name and source; ``active`` holds the effective one per name (read
    without the lock: it is only ever updated one key at a time)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._by_name: dict[str, dict[str, Entry]] = {}
        self.active: dict[str, Entry] = {}

    def add(self, entry: Entry) -> None:
        """Register one source's definition (``DuplicateToolError``, ``RegistrationError``)."""
        definition = entry.definition
        with self._lock:
            by_source = self._by_name.get(definition.name, {})
            if definition.source in by_source:
                raise DuplicateToolError(
                    f"tool {definition.name!r} is already registered from source "
                    f"{definition.source!r}"
                )
            for other in by_source.values():
                if other.definition.priority == definition.priority:
                    raise RegistrationError(
                        f"tool {definition.name!r} from {definition.source!r} has the same "
                        f"priority ({definition.priority}) as the one from "
                        f"{other.definition.source!r}: give one a higher priority"
                    )
            new = dict(by_source)
            new[definition.source] = entry
            self._by_name[definition.name] = new
            self._refresh(definition.name)

    def remove(self, name: str, source: str) -> None:
        """Remove one source's definition of ``name`` (the next one becomes active)."""
        with self._lock:
            entries = self._by_name.get(name)
            if not entries or source not in entries:
                raise KeyError(f"no tool {name!r} from source {source!r}")
            rest = {k: v for k, v in entries.items() if k != source}
            if rest:
                self._by_name[name] = rest
                self._refresh(name)
            else:
                del self._by_name[name]
                del self.active[name]

    def _refresh(self, name: str) -> None:
        entries = self._by_name[name]
        top = max(entries.values(), key=lambda e: e.definition.priority)
        d = top.definition
        cap = max((e.definition.capability for e in entries.values()), key=lambda c: c.rank)
        eff = max((e.definition.effect for e in entries.values()), key=lambda c: c.rank)
        cancellable = all(e.definition.cancellable for e in entries.values())
        paths = tuple(
            dict.fromkeys(
                p
                for e in entries.values()
                for p in e.definition.path_params
                if p in d.parameters.get("properties", {})
            )
        )
        # A file any definition snapshots before writing stays snapshotted.
        writes = tuple(
            dict.fromkeys(p for e in entries.values() for p in e.definition.writes if p in paths)
        )
        if (cap, eff, cancellable, paths, writes) != (
            d.capability, d.effect, d.cancellable, d.path_params, d.writes
        ):
            d = dataclasses.replace(
                d,
                capability=cap,
                effect=eff,
                cancellable=cancellable,
                path_params=paths,
                writes=writes,
            )
            top = Entry(d, top.fn, top.wants_ctx, top.is_async, top.schema)
        self.active[name] = top

    def resolution(self) -> list[Resolution]:
        """The shadow report: every name, its active source and what it shadows (sorted)."""
        out = []
        with self._lock:
            for name in sorted(self._by_name):
                entries = self._by_name[name]
                act = self.active[name]
                shadowed = tuple(
                    sorted(
                        (
                            (s, e.definition.priority)
                            for s, e in entries.items()
                            if s != act.definition.source
                        ),
                        key=lambda x: (-x[1], x[0]),
                    )
                )
                orig = entries[act.definition.source].definition
                out.append(
                    Resolution(
                        name,
                        act.definition.source,
                        act.definition.priority,
                        shadowed,
                        act.definition.capability.value,
                        act.definition.effect.value,
                        orig != act.definition,
                    )
                )
        return out


def _wants_ctx(fn: Callable[..., Any]) -> bool:
    """Whether a handler takes the ``CallContext`` first (annotated so, or named ``ctx``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params:
        return False
    first = params[0]
    ann = first.annotation
    name = ann if isinstance(ann, str) else getattr(ann, "__name__", "")
    return name == "CallContext" or first.name == "ctx"
