"""Tool definitions: what a tool is, what it may do, and the ``@tool`` decorator.

A ``ToolDefinition`` is pure metadata the registry polices on: name, description, JSON Schema of
the arguments, capability, effect, cancellability, default timeout, where it came from and its
priority. The function that does the work is handed to the registry separately and is never
reachable through any public object of the registry.
"""

from __future__ import annotations

import enum
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..exceptions import RegistrationError

__all__ = [
    "Capability",
    "Effect",
    "Execution",
    "FunctionTool",
    "ToolDefinition",
    "ToolResult",
    "tool",
]

NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
#: Where a tool came from: shipped with tooltrace, the user's or the project's code, an MCP
#: server, or an agent framework's own tool adopted through an adapter.
SOURCE_RE = re.compile(
    r"^(builtin|user|project|mcp:[A-Za-z0-9._-]{1,64}|framework:[A-Za-z0-9._-]{1,64})$"
)


class Capability(enum.StrEnum):
    """What kind of access a tool needs. Ordered from least to most powerful."""

    READ = "read"
    WRITE = "write"
    NETWORK = "network"
    EXECUTE = "execute"

    @property
    def rank(self) -> int:
        """Position in the power order (used so an override never widens permissions)."""
        return _CAP_RANK[self]


class Effect(enum.StrEnum):
    """Does a call have side effects, and how far do they reach?"""

    NONE = "none"
    LOCAL = "local"
    EXTERNAL = "external"

    @property
    def rank(self) -> int:
        """Position in the reach order."""
        return _EFFECT_RANK[self]


_CAP_RANK = {Capability.READ: 0, Capability.WRITE: 1, Capability.NETWORK: 2, Capability.EXECUTE: 3}
_EFFECT_RANK = {Effect.NONE: 0, Effect.LOCAL: 1, Effect.EXTERNAL: 2}


class Execution(enum.StrEnum):
    """Where a synchronous tool runs.

    ``thread`` (the default) runs it on the registry's worker pool, so a deadline returns control
    to the caller even if the tool hangs. ``inline`` runs it on the caller's thread: for quick
    tools that finish well within their deadline or watch ``CallContext`` themselves; it saves the
    thread hand-off (tens of microseconds). Async tools always run as tasks.
    """

    THREAD = "thread"
    INLINE = "inline"


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """Everything the registry needs to know about a tool, except its code.

    Checked when made: a bad value raises ``RegistrationError``.
    """

    name: str
    """The name a model calls the tool by: 1 to 128 of ``A-Z a-z 0-9 . _ -``."""
    description: str
    """What the model reads about the tool (a record keeps its first 500 characters)."""
    parameters: Mapping[str, Any]
    """The JSON Schema of the arguments, an object schema: checked against its metaschema and
    compiled once when the tool is registered."""
    capability: Capability = Capability.READ
    """What kind of access the tool needs (``read`` < ``write`` < ``network`` < ``execute``):
    modes and policy rules decide on it."""
    effect: Effect = Effect.NONE
    """Whether a call has side effects and how far they reach (``none``, ``local``,
    ``external``): a side-effecting call whose end cannot be confirmed ends ``unknown``."""
    cancellable: bool = True
    """Whether the tool can be told to stop (an async one is cancelled) and confirm it did. At
    the deadline or on ``cancel`` any other tool is only waited for, then abandoned."""
    timeout_s: float = 30.0
    """The default deadline in seconds, in (0, 86400]; it starts when execution starts. A call
    may ask for another (``ToolCall.timeout_s``), capped by the operator's maximum."""
    source: str = "user"
    """Where the definition came from: ``builtin``, ``user``, ``project``, ``mcp:<server>`` or
    ``framework:<name>`` (a framework's own tool adopted through an adapter)."""
    priority: int = 0
    """Decides between definitions of one name from different sources: the highest is active,
    the others are shadowed; equal priorities are refused."""
    path_params: tuple[str, ...] = ()
    """The arguments that are workspace paths (each a property of ``parameters``): policy
    resolves them, symlinks followed, and checks they stay in the workspace before the tool
    runs."""
    execution: Execution = Execution.THREAD
    """Where a synchronous tool runs: ``thread`` (the worker pool, so a deadline returns control)
    or ``inline`` (the caller's thread); see [`Execution`][tooltrace.Execution]."""
    tool_type: str = "function"
    """The kind of tool, as the ``gen_ai.tool.type`` span attribute and the record name it:
    ``function``, ``extension`` or ``datastore``."""
    background: bool = False
    """Whether a call that asks for it (``ToolCall.background``) may return at once with a job
    id while the tool keeps running."""
    max_concurrency: int | None = None
    """The most calls of this tool that may run at once (``None``: no cap of its own); the
    registry's ``tool_concurrency`` overrides it, its global ``max_concurrency`` still
    applies."""
    group: str | None = None
    """The group the tool belongs to (a name like a tool's): a listing can collapse a group to
    one line that ``load_tools`` expands. A tool from ``mcp:<server>`` with no group of its
    own is in the group ``<server>`` (see ``group_name``)."""
    writes: tuple[str, ...] = ()
    """The path arguments whose files a call writes (each one of ``path_params``): before
    the tool runs, the registry keeps each file's previous content as a snapshot that
    ``tooltrace restore`` can put back."""
    listed: bool = True
    """Whether it is a tool: listings show it (``visible_tools``, ``tool_listing``, provider
    specs) and modes and broad policy rules decide its calls. ``False`` for a registry entry
    that is not a tool a model calls but is run through the registry to be policed and audited
    (an MCP server's sampling, elicitation and roots requests): no listing shows it, no mode
    hides it, and only policy rules that name it decide its calls."""
    latency_buckets: tuple[float, ...] | None = None
    """The upper bounds (seconds) of this tool's call duration histogram buckets, fitted to how
    long its calls take (``None``: the metrics sink's defaults, 1 ms to 10 min)."""

    @property
    def group_name(self) -> str | None:
        """The tool's effective group: its own, else its MCP server's name, else None."""
        if self.group is not None:
            return self.group
        if self.source.startswith("mcp:"):
            return self.source[4:]
        return None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise RegistrationError(
                f"tool name must match ^[A-Za-z0-9._-]{{1,128}}$, got {_short(self.name)!r}"
            )
        if not isinstance(self.source, str) or not SOURCE_RE.match(self.source):
            raise RegistrationError(
                f"tool {self.name!r}: source must be builtin, user, project, mcp:<server> or "
                "framework:<name>, "
                f"got {_short(self.source)!r}"
            )
        if not isinstance(self.description, str):
            raise RegistrationError(f"tool {self.name!r}: description must be a string")
        if not isinstance(self.parameters, Mapping):
            raise RegistrationError(f"tool {self.name!r}: parameters must be a JSON Schema object")
        try:
            object.__setattr__(self, "capability", Capability(self.capability))
            object.__setattr__(self, "effect", Effect(self.effect))
            object.__setattr__(self, "execution", Execution(self.execution))
        except ValueError as exc:
            raise RegistrationError(f"tool {self.name!r}: {exc}") from None
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int | float):
            raise RegistrationError(f"tool {self.name!r}: timeout_s must be a number")
        if not 0 < self.timeout_s <= 86400:
            raise RegistrationError(f"tool {self.name!r}: timeout_s must be in (0, 86400]")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise RegistrationError(f"tool {self.name!r}: priority must be an integer")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise RegistrationError(f"tool {self.name!r}: max_concurrency must be >= 1")
        if self.group is not None and (
            not isinstance(self.group, str) or not NAME_RE.match(self.group)
        ):
            raise RegistrationError(
                f"tool {self.name!r}: group must match ^[A-Za-z0-9._-]{{1,128}}$"
            )
        lb = self.latency_buckets
        if lb is not None and (not lb or not all(
                isinstance(b, int | float) and not isinstance(b, bool) and 0 < b < math.inf
                for b in lb)):
            raise RegistrationError(f"tool {self.name!r}: latency_buckets must be positive, "
                                    "finite numbers of seconds (at least one)")
        for p in self.writes:
            if p not in self.path_params:
                raise RegistrationError(
                    f"tool {self.name!r}: written argument {p!r} must be one of path_params"
                )
        props = self.parameters.get("properties", {})
        for p in self.path_params:
            if not isinstance(props, Mapping) or p not in props:
                raise RegistrationError(
                    f"tool {self.name!r}: path parameter {p!r} is not in the schema's properties"
                )


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool may return this instead of a bare value to give the envelope a readable summary."""

    data: Any
    """The result itself, as a bare return value would be (redacted, offloaded when long)."""
    summary: str | None = None
    """A readable sentence for the envelope (``None``: the registry writes one). It must not hold
    full host paths or raw output; it is redacted like everything else."""
    detail: Mapping[str, Any] | None = None
    """Extra facts for the execute step: small and JSON-serialisable."""


@dataclass(frozen=True, slots=True)
class FunctionTool:
    """A definition paired with its function, as made by ``@tool``; pass it to ``register``.

    Not callable: the only way to run the function is through a registry.
    """

    definition: ToolDefinition
    """The tool's metadata, checked and policed by the registry."""
    fn: Callable[..., Any] = field(repr=False)
    """The function (the registry runs it; called directly it bypasses every check)."""
    wants_ctx: bool = field(default=False, repr=False)
    """Whether the function takes the call's ``CallContext`` as its first parameter."""


_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    type(None): "null",
}


def _schema_for(annotation: Any) -> dict[str, Any]:
    """A JSON Schema fragment for a Python type annotation (the common, typed cases)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        base = _schema_for(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                base["description"] = extra
            elif isinstance(extra, Mapping):
                base.update(extra)
        return base
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema_for(a) for a in args]}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple):
        item = args[0] if args else Any
        return {"type": "array", "items": _schema_for(item)}
    if origin is dict or annotation is dict:
        schema: dict[str, Any] = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = _schema_for(args[1])
        return schema
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [m.value for m in annotation]}
    raise RegistrationError(f"cannot derive a JSON Schema for annotation {annotation!r}")


def _is_ctx(annotation: Any) -> bool:
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return name == "CallContext"


def function_schema(fn: Callable[..., Any]) -> tuple[dict[str, Any], bool]:
    """Derive ``(arguments schema, wants_ctx)`` from a typed function's signature."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise RegistrationError(f"cannot read type hints of {fn!r}: {exc}") from None
    props: dict[str, Any] = {}
    required: list[str] = []
    wants_ctx = False
    for i, (pname, param) in enumerate(inspect.signature(fn).parameters.items()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise RegistrationError(f"tool function {fn.__name__!r} must not take *args/**kwargs")
        ann = hints.get(pname, param.annotation)
        if _is_ctx(ann):
            if i != 0:
                # The registry hands the context over as the first positional argument.
                raise RegistrationError(
                    f"tool function {fn.__name__!r}: the CallContext parameter {pname!r} "
                    "must come first"
                )
            wants_ctx = True
            continue
        schema = _schema_for(ann)
        default = param.default
        if isinstance(default, enum.Enum):
            # The schema speaks JSON: an enum member's default is its value, as the model
            # would pass it (the member itself would not compile into a validator).
            default = default.value
        if default is inspect.Parameter.empty:
            required.append(pname)
        elif default is None or isinstance(default, str | int | float | bool):
            schema["default"] = default
        props[pname] = schema
    schema_out: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "additionalProperties": False,
    }
    if required:
        schema_out["required"] = required
    return schema_out, wants_ctx


@typing.overload
def tool(name: Callable[..., Any], /) -> FunctionTool: ...


@typing.overload
def tool(
    name: str | None = None,
    *,
    description: str | None = None,
    capability: Capability | str = Capability.READ,
    effect: Effect | str = Effect.NONE,
    cancellable: bool = True,
    timeout_s: float = 30.0,
    source: str = "user",
    priority: int = 0,
    path_params: tuple[str, ...] = (),
    execution: Execution | str = Execution.THREAD,
    background: bool = False,
    max_concurrency: int | None = None,
    parameters: Mapping[str, Any] | None = None,
    group: str | None = None,
    writes: tuple[str, ...] = (),
    latency_buckets: Iterable[float] | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    name: str | Callable[..., Any] | None = None,
    *,
    description: str | None = None,
    capability: Capability | str = Capability.READ,
    effect: Effect | str = Effect.NONE,
    cancellable: bool = True,
    timeout_s: float = 30.0,
    source: str = "user",
    priority: int = 0,
    path_params: tuple[str, ...] = (),
    execution: Execution | str = Execution.THREAD,
    background: bool = False,
    max_concurrency: int | None = None,
    parameters: Mapping[str, Any] | None = None,
    group: str | None = None,
    writes: tuple[str, ...] = (),
    latency_buckets: Iterable[float] | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Build a ``FunctionTool`` from a typed function: ``@tool`` with the defaults, or
    ``@tool(...)`` with options (``@tool()`` is the same as ``@tool``).

    The schema comes from the signature (a parameter annotated ``CallContext`` receives the call
    context and is not part of the schema) unless ``parameters`` is given; the description
    defaults to the docstring's first paragraph. ``group``, ``writes`` and
    ``latency_buckets`` are the definition's fields of those names (a group a listing can
    collapse; the path arguments whose files are snapshotted before each call; the tool's own
    call duration buckets).
    """

    if name is not None and not callable(name) and not isinstance(name, str):
        raise RegistrationError(
            f"@tool takes a tool name (a string) or decorates a function, not "
            f"{type(name).__name__}"
        )
    # Bare ``@tool``: the function itself comes in the place of the name.
    tool_name = name if isinstance(name, str) else None

    def wrap(fn: Callable[..., Any]) -> FunctionTool:
        if not callable(fn):
            raise RegistrationError(f"@tool decorates a function, not {type(fn).__name__}")
        schema, wants_ctx = function_schema(fn)
        doc = inspect.getdoc(fn) or ""
        definition = ToolDefinition(
            name=tool_name or fn.__name__,
            description=description if description is not None else doc.split("\n\n")[0],
            parameters=dict(parameters) if parameters is not None else schema,
            capability=Capability(capability),
            effect=Effect(effect),
            cancellable=cancellable,
            timeout_s=timeout_s,
            source=source,
            priority=priority,
            path_params=path_params,
            execution=Execution(execution),
            background=background,
            max_concurrency=max_concurrency,
            group=group,
            writes=tuple(writes),
            latency_buckets=None if latency_buckets is None else tuple(latency_buckets),
        )
        return FunctionTool(definition, fn, wants_ctx)

    return wrap(name) if callable(name) else wrap
