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

import asyncio
import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .model import CallRecord, ProgressMark, Step

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


class Feed(Protocol):
    """What feeds a subscription (the registry's event hub)."""

    def remove(self, sub: Subscription) -> None:
        """Stop handing events to ``sub``."""

    def prepare(self, ev: CallEvent) -> CallEvent:
        """An event as a subscriber may see it (a step's detail redacted)."""


_START_LOCK = threading.Lock()


class Subscription:
    """One subscriber's stream of call events: its queue, its worker and its counters.

    Returned by ``registry.subscribe``; ``close()`` ends it (events still queued are handed
    over first, within the deadline).
    """

    def __init__(
        self,
        hub: Feed,
        fn: Callable[[CallEvent], Any],
        kinds: frozenset[str],
        max_queue: int,
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        self._hub = hub
        self._fn = fn
        #: The kinds of event this subscriber gets.
        self.kinds = kinds
        #: Most events waiting at once; one more is dropped.
        self.max_queue = max_queue
        #: Events dropped because the queue was full (the subscriber was too slow).
        self.dropped = 0
        #: Events handed to the subscriber.
        self.delivered = 0
        #: Times the subscriber raised (each counted, never passed on).
        self.errors = 0
        self._queue: collections.deque[CallEvent] = collections.deque()
        self._closed = False
        self._loop = loop
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        if loop is None:
            # The thread starts with the first event: a registry whose subscriber never gets
            # one (no tool reports progress) keeps no thread for it.
            self._wake = threading.Event()
        else:
            self._awake = asyncio.Event()
            self._task = loop.create_task(self._run_task())

    @property
    def pending(self) -> int:
        """Events queued and not yet handed over."""
        return len(self._queue)

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

    def offer(self, event: CallEvent) -> None:
        """Queue one event (never blocks, never raises; a full queue drops it)."""
        q = self._queue
        # Under the lock, "the queue was empty" and "the worker went idle" agree, so the one
        # producer that makes the queue non-empty wakes the worker (calls on many threads).
        with self._lock:
            if self._closed or len(q) >= self.max_queue:
                self.dropped += 1
                return
            q.append(event)
            if len(q) != 1:
                return
            self._idle.clear()
        self._poke()

    def _poke(self) -> None:
        if self._loop is None:
            if self._thread is None and not self._closed:
                self._start_thread()
            self._wake.set()
            return
        try:
            self._loop.call_soon_threadsafe(self._awake.set)
        except RuntimeError:  # the subscriber's loop is closed: nobody will take these
            with self._lock:
                self.dropped += len(self._queue)
                self._queue.clear()
                self._idle.set()

    def _start_thread(self) -> None:
        with _START_LOCK:
            if self._thread is None:
                t = threading.Thread(target=self._run_thread, name="tooltrace-subscriber",
                                     daemon=True)
                t.start()
                self._thread = t

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until every queued event was handed over; False if the deadline came first.
        (An async subscriber's loop must be running elsewhere for this to finish.)"""
        return self._idle.wait(timeout_s)

    def close(self, timeout_s: float = 1.0) -> None:
        """Unsubscribe: no new events; those queued are handed over within ``timeout_s``."""
        if self._closed:
            return
        self._closed = True
        self._hub.remove(self)
        self._idle.wait(timeout_s)
        if self._loop is None:
            self._wake.set()
        else:
            self._poke()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _next(self) -> CallEvent | None:
        q = self._queue
        with self._lock:
            if not q:
                self._idle.set()
                return None
            ev = q.popleft()
        return self._hub.prepare(ev)

    def _run_thread(self) -> None:
        fn, wake = self._fn, self._wake
        while True:
            wake.wait(0.5)
            wake.clear()
            while (ev := self._next()) is not None:
                try:
                    fn(ev)
                    self.delivered += 1
                except Exception:
                    self.errors += 1
            if self._closed and not self._queue:
                self._idle.set()
                return

    async def _run_task(self) -> None:
        fn, awake = self._fn, self._awake
        while True:
            await awake.wait()
            awake.clear()
            while (ev := self._next()) is not None:
                try:
                    await fn(ev)
                    self.delivered += 1
                except Exception:
                    self.errors += 1
            if self._closed and not self._queue:
                self._idle.set()
                return
