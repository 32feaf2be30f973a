"""Hooks: code that runs before (``pre``) or after (``post``) a tool and may intervene.

A hook sees a redacted view of the call and answers continue, warn, block or modify. Its answer
is untrusted like model output: modified arguments are validated and authorised again, and a hook
can only narrow: it cannot change the tool, switch the mode or widen a path's scope. Each hook
declares whether it is ``required`` (a crash or timeout blocks the call: fail closed) or optional
(a crash or timeout becomes a warn step and the call continues: fail open), and a time limit.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

__all__ = [
    "FunctionHook",
    "Hook",
    "HookAction",
    "HookDecision",
    "HookView",
    "by_phase",
    "hook",
]


class HookAction(enum.StrEnum):
    """What a hook decided."""

    CONTINUE = "continue"
    WARN = "warn"
    BLOCK = "block"
    MODIFY = "modify"


@dataclass(frozen=True, slots=True)
class HookDecision:
    """A hook's answer: made with ``proceed``, ``warn``, ``block`` or ``modify``."""

    action: HookAction
    """What the hook decided: continue, warn, block or modify."""
    reason: str = ""
    """Why, in a sentence: redacted, cut to 300 characters and kept in the hook's step (and in
    the summary of a call it blocks)."""
    arguments: Mapping[str, Any] | None = None
    """A pre-hook's modification: the arguments to run with instead. They are validated and
    authorised again."""
    result: Any = None
    """A post-hook's modification: the result to return instead (redacted again)."""
    tool: str | None = None
    """Never honoured: set to another tool's name, the call is blocked (a hook cannot swap the
    tool)."""
    mode: str | None = None
    """Never honoured: set to another mode, the call is blocked (a hook cannot switch mode)."""
    annotations: Mapping[str, Any] | None = None
    """A post-hook's notes on the result, redacted into its step."""

    @classmethod
    def proceed(cls, reason: str = "") -> HookDecision:
        """Let the call continue."""
        return cls(HookAction.CONTINUE, reason)

    @classmethod
    def warn(cls, reason: str) -> HookDecision:
        """Let the call continue, recording a warning."""
        return cls(HookAction.WARN, reason)

    @classmethod
    def block(cls, reason: str) -> HookDecision:
        """Stop the call (pre) or withhold its result (post)."""
        return cls(HookAction.BLOCK, reason)

    @classmethod
    def modify(
        cls, *, arguments: Mapping[str, Any] | None = None, result: Any = None, reason: str = ""
    ) -> HookDecision:
        """Replace the arguments (pre) or the result (post)."""
        return cls(HookAction.MODIFY, reason, arguments=arguments, result=result)


class HookView(msgspec.Struct, frozen=True):
    """What a hook sees: the redacted call (and, for post-hooks, the redacted result)."""

    call_id: str
    """The call's id."""
    run_id: str
    """The run the call belongs to."""
    tool: str
    """The tool's name."""
    source: str
    """Where the tool's definition came from (``builtin``, ``user``, ``mcp:<server>`` ...)."""
    capability: str
    """The tool's capability (``read``, ``write``, ``network``, ``execute``)."""
    effect: str
    """The tool's effect (``none``, ``local``, ``external``)."""
    mode: str
    """The mode the call runs in."""
    arguments: Mapping[str, Any]
    """The call's arguments, redacted (after an earlier pre-hook's modification, if any)."""
    phase: Literal["pre", "post"] = "pre"
    """``pre`` before execution, ``post`` on the finished call."""
    status: str | None = None
    """Post-hooks: the call's status so far (``ok``, ``failed`` ...); ``None`` for pre-hooks."""
    result: Any = None
    """Post-hooks: the redacted result (``None`` unless the call succeeded)."""


@runtime_checkable
class Hook(Protocol):
    """A pre- or post-hook."""

    @property
    def name(self) -> str:
        """The hook's name (deciders read ``hook:<name>``)."""

    @property
    def phase(self) -> Literal["pre", "post"]:
        """``pre`` (before execution) or ``post`` (on the redacted result)."""

    @property
    def required(self) -> bool:
        """True: a crash or timeout blocks the call (fail closed); False: it warns."""

    @property
    def timeout_s(self) -> float:
        """How long the hook may take."""

    def applies_to(self, tool: str) -> bool:
        """Whether the hook runs for calls of ``tool``."""

    def __call__(self, view: HookView) -> HookDecision:
        """Decide."""


@dataclass(frozen=True, slots=True)
class FunctionHook:
    """A hook made from a function ``(HookView) -> HookDecision | None`` (None = continue)."""

    fn: Callable[[HookView], HookDecision | None] = field(repr=False)
    """The function that decides; returning ``None`` means continue."""
    name: str
    """The hook's name (deciders read ``hook:<name>``)."""
    phase: Literal["pre", "post"] = "pre"
    """``pre`` (before execution) or ``post`` (on the redacted result)."""
    required: bool = False
    """True: a crash or timeout blocks the call (fail closed); False: it warns (fail open)."""
    timeout_s: float = 2.0
    """How long the hook may take, in seconds (positive)."""
    tools: frozenset[str] | None = None
    """The tools whose calls the hook runs for (``None``: every tool)."""

    def __post_init__(self) -> None:
        if self.phase not in ("pre", "post"):
            raise ValueError("hook phase must be 'pre' or 'post'")
        if not self.timeout_s > 0:
            raise ValueError("hook timeout_s must be positive")

    def applies_to(self, tool: str) -> bool:
        """Whether the hook runs for calls of ``tool``."""
        return self.tools is None or tool in self.tools

    def __call__(self, view: HookView) -> HookDecision:
        out = self.fn(view)
        if out is None:
            return HookDecision.proceed()
        if not isinstance(out, HookDecision):
            raise TypeError(f"hook {self.name!r} returned {type(out).__name__}, not HookDecision")
        return out


def hook(
    name: str | None = None,
    *,
    phase: Literal["pre", "post"] = "pre",
    required: bool = False,
    timeout_s: float = 2.0,
    tools: frozenset[str] | set[str] | None = None,
) -> Callable[[Callable[[HookView], HookDecision | None]], FunctionHook]:
    """Decorator: make a ``FunctionHook`` from a function."""

    def wrap(fn: Callable[[HookView], HookDecision | None]) -> FunctionHook:
        return FunctionHook(
            fn,
            name or fn.__name__,
            phase,
            required,
            timeout_s,
            frozenset(tools) if tools is not None else None,
        )

    return wrap


def by_phase(hooks: tuple[Hook, ...]) -> tuple[tuple[Hook, ...], tuple[Hook, ...]]:
    """(pre-hooks, post-hooks), each in the order given; ValueError for any other phase."""
    for h in hooks:
        if h.phase not in ("pre", "post"):
            raise ValueError(f"hook {h.name!r}: phase must be 'pre' or 'post'")
    return tuple(h for h in hooks if h.phase == "pre"), tuple(h for h in hooks if h.phase == "post")
