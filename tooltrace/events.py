"""Call events: what a subscriber (a TUI, a web UI, an MCP front end) sees of calls as they run.

``registry.subscribe(fn)`` gives ``fn`` a stream of four kinds of event, each a frozen record:

- ``CallStarted``   the tool is about to run (after every check and admission passed);
- ``CallStep``      a pipeline step was recorded (its detail already redacted);
- ``CallProgress``  the tool reported progress (``CallContext.progress``; rate-limited);
- ``CallFinished``  the call ended, with its finished, redacted ``CallRecord`` (refusals too).

A call refused before it ran has no ``CallStarted``: its steps, then ``CallFinished``.
``fn`` may be a plain function (called on a thread of its subscription) or a coroutine function
(awaited on the event loop that was running when it subscribed). Each subscription has a bounded
queue: when a subscriber is slower than the calls, events are dropped and counted
(``Subscription.dropped``), and a subscriber that raises is counted (``errors``); neither ever
reaches a call. With no subscriber the registry makes no event at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .model import CallRecord, ProgressMark, Step

if TYPE_CHECKING:
    from .pipeline import Subscription

__all__ = [
    "EVENT_KINDS",
    "CallEvent",
    "CallFinished",
    "CallProgress",
    "CallStarted",
    "CallStep",
    "EventKind",
    "ProgressMark",
    "Subscription",
]

#: The kinds a subscriber may ask for (``registry.subscribe(fn, kinds=...)``).
EventKind = Literal["started", "step", "progress", "finished"]
#: Every kind, in the order a call goes through them.
EVENT_KINDS: tuple[EventKind, ...] = ("started", "step", "progress", "finished")


@dataclass(frozen=True, slots=True)
class CallStarted:
    """A call's tool is about to run."""

    call_id: str
    """The call's id."""
    run_id: str
    """The run it belongs to."""
    tool: str
    """The tool's name."""
    at_us: int
    """When execution began, in microseconds since the Unix epoch."""
    mode: str
    """The mode the call runs in."""
    parent_call_id: str | None
    """The call whose tool made this one (``ctx.call``), or ``None``."""
    depth: int
    """0 for a call from outside any tool, 1 for a call a tool made, and so on."""
    kind: Literal["started"] = "started"
    """Always ``"started"``."""


@dataclass(frozen=True, slots=True)
class CallStep:
    """A pipeline step of a running (or just refused) call."""

    call_id: str
    """The call's id."""
    run_id: str
    """The run it belongs to."""
    tool: str
    """The tool's name (``_unregistered`` until the call's tool is resolved)."""
    step: Step
    """The step, its detail redacted."""
    kind: Literal["step"] = "step"
    """Always ``"step"``."""


@dataclass(frozen=True, slots=True)
class CallProgress:
    """A tool reported progress (at most one event per call per rate-limit interval, and
    always the last report before the call returns)."""

    call_id: str
    """The call's id."""
    run_id: str
    """The run it belongs to."""
    tool: str
    """The tool's name."""
    mark: ProgressMark
    """What was reported: ``done``, ``total``, a redacted ``message``, when, its number."""
    kind: Literal["progress"] = "progress"
    """Always ``"progress"``."""


@dataclass(frozen=True, slots=True)
class CallFinished:
    """A call ended (any status); ``record`` is what every sink received."""

    record: CallRecord
    """The finished, redacted record."""
    kind: Literal["finished"] = "finished"
    """Always ``"finished"``."""

    @property
    def call_id(self) -> str:
        """The call's id."""
        return self.record.call_id


#: Any call event.
CallEvent = CallStarted | CallStep | CallProgress | CallFinished


def __getattr__(name: str) -> Any:
    # Subscription lives with the hub that feeds it (which imports the event types above).
    if name == "Subscription":
        from .pipeline import Subscription

        return Subscription
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
