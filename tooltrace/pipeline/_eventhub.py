"""The registry's event hub: who subscribed to which call events, and the bounded queue and
worker that carry events to each subscriber (``tooltrace.events`` describes the events).

The call path asks the hub only whether anyone listens (one tuple per kind, empty when nobody
does), so a registry without subscribers makes no event. An event is appended to each
subscription's bounded queue (a full queue drops it and counts the drop) and a worker hands it
over: a thread for a plain function, a task on the subscriber's event loop for a coroutine
function. Step details are redacted on that worker, off the call path. A subscriber that raises
is counted, never heard of by a call; one that is slow only loses its own events.

Progress reports (``CallContext.progress``) reach the call's environment, which redacts and
bounds the message and keeps a bounded list of marks on the call's context (the record and the
span get them); the hub publishes a ``CallProgress`` to the subscribers of that kind.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..events import (
    EVENT_KINDS,
    CallFinished,
    CallProgress,
    CallStarted,
    CallStep,
    Subscription,
)
from ..model import CallRecord, ProgressMark, Step
from ._record import detached

if TYPE_CHECKING:
    from ..events import CallEvent
    from ..redaction import Redactor
    from ..runtime import CallContext

__all__ = ["EventHub"]

class EventHub:
    """The subscriptions of one registry, by kind, and the progress reports of its calls."""

    __slots__ = ("_subs", "finished", "progress", "progress_interval_s", "redactor", "started",
                 "step")

    def __init__(self, redactor: Redactor, progress_interval_s: float) -> None:
        if progress_interval_s < 0:
            raise ValueError("progress_interval_s must not be negative")
        #: Redacts step details on the subscribers' workers (the registry's redactor).
        self.redactor = redactor
        #: Shortest time between two progress reports of one call that are published.
        self.progress_interval_s = progress_interval_s
        self._subs: tuple[Subscription, ...] = ()
        #: Subscriptions of each kind (empty tuples when nobody listens: what the call path asks).
        self.started: tuple[Subscription, ...] = ()
        self.step: tuple[Subscription, ...] = ()
        self.progress: tuple[Subscription, ...] = ()
        self.finished: tuple[Subscription, ...] = ()

    def subscribe(
        self,
        fn: Callable[[CallEvent], Any],
        kinds: Iterable[str] | None = None,
        max_queue: int = 1024,
    ) -> Subscription:
        """Start a subscription (see ``ToolRegistry.subscribe``)."""
        if not callable(fn):
            raise TypeError("subscribe needs a function or a coroutine function")
        wanted = frozenset(EVENT_KINDS if kinds is None else kinds)
        unknown = wanted - set(EVENT_KINDS)
        if unknown or not wanted:
            raise ValueError(f"kinds must be some of {', '.join(EVENT_KINDS)}; "
                             f"got {sorted(unknown) or 'none'}")
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        loop = None
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
                type(fn).__call__):
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise TypeError("an async subscriber must subscribe from a running event loop "
                                "(its events are awaited there)") from None
        sub = Subscription(self, fn, wanted, max_queue, loop)
        self._subs = (*self._subs, sub)
        self._index()
        return sub

    def remove(self, sub: Subscription) -> None:
        """Stop handing events to ``sub`` (its ``close`` calls this)."""
        self._subs = tuple(s for s in self._subs if s is not sub)
        self._index()

    def _index(self) -> None:
        subs = self._subs
        self.started = tuple(s for s in subs if "started" in s.kinds)
        self.step = tuple(s for s in subs if "step" in s.kinds)
        self.progress = tuple(s for s in subs if "progress" in s.kinds)
        self.finished = tuple(s for s in subs if "finished" in s.kinds)

    def close(self, timeout_s: float) -> None:
        """Close every subscription (queued events handed over within the deadline)."""
        deadline = time.monotonic() + timeout_s
        for sub in self._subs:
            sub.close(max(0.0, deadline - time.monotonic()))

    # -- what the call path publishes (only when someone listens) ----------------------------

    @staticmethod
    def _offer(subs: tuple[Subscription, ...], ev: CallEvent) -> None:
        for s in subs:
            s.offer(ev)

    def call_started(self, ctx: CallContext) -> None:
        """Publish that ``ctx``'s tool is about to run."""
        self._offer(self.started, CallStarted(
            ctx.call_id, ctx.run_id, ctx.tool, time.time_ns() // 1000, ctx.mode,
            ctx.parent_call_id, ctx.depth))

    def call_step(self, call_id: str, run_id: str, tool: str, step: Step) -> None:
        """Publish a step (its detail is redacted on the subscriber's worker)."""
        self._offer(self.step, CallStep(call_id, run_id, tool, step))

    def call_finished(self, record: CallRecord) -> None:
        """Publish a finished record."""
        self._offer(self.finished, CallFinished(record))

    def prepare(self, ev: CallEvent) -> CallEvent:
        """An event as a subscriber may see it: a step's detail redacted (on the worker)."""
        if type(ev) is CallStep and ev.step.detail:
            try:
                red = detached(self.redactor.redact(ev.step.detail)[0])
            except Exception:
                red = {"_redaction_error": True}
            return CallStep(ev.call_id, ev.run_id, ev.tool, ev.step._replace(detail=red))
        return ev

    def call_progress(self, ctx: CallContext, mark: ProgressMark) -> None:
        """Publish a progress report the pipeline kept on ``ctx``."""
        self._offer(self.progress, CallProgress(ctx.call_id, ctx.run_id, ctx.tool, mark))
