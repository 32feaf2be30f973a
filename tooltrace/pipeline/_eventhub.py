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
import collections
import inspect
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..events import EVENT_KINDS, CallFinished, CallProgress, CallStarted, CallStep
from ..model import CallRecord, ProgressMark, Step
from ._record import detached

if TYPE_CHECKING:
    from ..events import CallEvent
    from ..redaction import Redactor
    from ..runtime import CallContext

__all__ = ["EventHub", "Subscription"]

_START_LOCK = threading.Lock()


class Subscription:
    """One subscriber's stream of call events: its queue, its worker and its counters.

    Returned by ``registry.subscribe``; ``close()`` ends it (events still queued are handed
    over first, within the deadline).
    """

    def __init__(
        self,
        hub: EventHub,
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
