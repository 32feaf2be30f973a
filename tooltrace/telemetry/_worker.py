"""The one background batching worker every sink uses.

Modelled on the OpenTelemetry SDK's batch processor: ``submit`` never blocks and never raises
(a full queue drops the item and counts it), a daemon thread wakes when a batch is ready or an
interval passes, ``flush`` and ``shutdown`` take deadlines, and after ``fork`` the child gets a
fresh, empty worker instead of a dead thread and a held lock.

The worker shares the interpreter lock with the threads that make tool calls. A thread that
wants the lock waits up to the switch interval (5 ms by default) before it forces a switch, so
a batch worked through in one go keeps a caller waiting for whole intervals. The worker
therefore works in slices: the sinks walk a batch through ``paced``, and once a slice has run
for ``slice_s`` the worker sleeps for a moment (``PAUSE_S``), which hands the lock to whoever
waits for it. When the backlog grows past eight batches (or a quarter of the queue) the worker
stops pausing, so a busy process loses no records to make the tail short. Only one worker of
the process walks a batch at a time (``TURN_WAIT_S``), so when a slice ends the interpreter
goes back to the caller rather than to the next worker's slice.

While a tool call is in flight on a tool thread (``tooltrace._inflight``), the caller sleeps and
the interpreter looks free, but the tool thread and then the caller want it back within
microseconds: a worker does not start or continue a slice then. It waits, outside the
interpreter, until no call is in flight (between calls, or when the process is idle), for at
most ``YIELD_MAX_S`` at a time, and not at all once its backlog passes four batches (or an
eighth of the queue), during a flush or at shutdown.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, Generic, TypeVar

from .._inflight import calls_in_flight

__all__ = ["PAUSE_S", "SLICE_S", "TURN_WAIT_S", "YIELD_MAX_S", "BatchWorker", "on_fork_in_child"]

T = TypeVar("T")
U = TypeVar("U")

#: How long a worker runs before it hands the interpreter over (seconds; 0: never pauses).
SLICE_S: Final = 0.0005
#: How long it then sleeps: long enough for a thread that waited for the lock to wake and take
#: it (a sleep of 0 releases the lock, but the sleeper usually takes it back first).
PAUSE_S: Final = 0.00025
#: The longest a worker waits for its turn before it walks a batch without one (a turn is held
#: for one batch: while callers keep the interpreter busy, that can take a hundred ms or more).
#: A worker whose backlog is past its bound does not wait for the turn at all.
TURN_WAIT_S: Final = 1.0
_TURN_STEP_S: Final = 0.01
#: The longest a worker waits for tool calls in flight before it runs one slice anyway
#: (seconds; 0: it never waits for them). Calls back to back keep one in flight nearly all the
#: time: the worker then works one slice per this long, until its backlog passes its bound.
YIELD_MAX_S: Final = 0.02
# How often a waiting worker looks again: each look takes the interpreter for a moment, and a
# look that lands in a hand-off delays it.
_YIELD_STEP_S: Final = 0.001

# One worker of the process walks a batch at a time. The others wait for their turn on this
# lock, outside the interpreter, instead of queueing for the interpreter beside a caller: when
# a slice ends the caller gets the interpreter back, not the next worker's slice.
_TURN = threading.Lock()


class BatchWorker(Generic[T]):
    """Queue items and hand them to ``export`` in batches on a background thread.

    ``export`` receives a list of items and may raise: the error is counted in
    ``export_errors`` and passed to ``on_error`` (which itself must not raise), never to the
    submitter. Items are exported in submission order.
    """

    def __init__(
        self,
        name: str,
        export: Callable[[list[T]], None],
        *,
        max_queue: int = 65536,
        max_batch: int = 2048,
        interval_s: float = 0.2,
        on_error: Callable[[BaseException], None] | None = None,
        slice_s: float = SLICE_S,
        yield_max_s: float = YIELD_MAX_S,
    ) -> None:
        if max_queue < 1 or max_batch < 1 or interval_s <= 0:
            raise ValueError("max_queue, max_batch and interval_s must be positive")
        if slice_s < 0 or yield_max_s < 0:
            raise ValueError("slice_s and yield_max_s must not be negative")
        self.name = name
        self._export = export
        self._max_queue = max_queue
        self._max_batch = max_batch
        self._interval = interval_s
        self._on_error = on_error
        self._slice_s = slice_s
        # Past this backlog the worker works without pauses: catching up beats a short tail
        # (paused, a worker drains more slowly, most of all on a machine short of CPU).
        self._catch_up = max(1, min(max_queue // 4, 8 * max_batch))
        # Below this backlog the worker also waits for tool calls in flight (see _yield_to_calls).
        self._yield_bound = max(1, self._catch_up // 2)
        self._yield_max_s = yield_max_s
        self._forced = False  # this slice runs whatever is in flight (the wait ran out)
        self._slice_end = 0.0
        self.dropped = 0
        self.exported = 0
        self.export_errors = 0
        self._init_state()
        on_fork_in_child(self._after_fork_in_child)

    def _init_state(self) -> None:
        self._queue: collections.deque[T] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._busy = False
        self._flushing = 0  # flushes waiting: the worker does not wait for calls meanwhile
        self._shutdown = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._turn: threading.Lock | None = None  # the turn while this worker holds it

    # -- producer side (hot path) ------------------------------------------------------------

    def submit(self, item: T) -> bool:
        """Queue one item; return False (and count a drop) when full or shut down."""
        q = self._queue
        if self._shutdown or len(q) >= self._max_queue:
            self.dropped += 1
            return False
        q.append(item)
        if self._thread is None:
            self._start()
        # Wake the worker only when a full batch is waiting; otherwise it wakes on its timer.
        # This keeps the producer free of lock traffic on almost every call.
        if len(q) == self._max_batch:
            with self._cond:
                self._cond.notify()
        return True

    def submit_many(self, items: Sequence[T]) -> int:
        """Queue several items; return how many were accepted."""
        return sum(1 for item in items if self.submit(item))

    @property
    def depth(self) -> int:
        """Items waiting to be exported."""
        return len(self._queue)

    # -- worker side --------------------------------------------------------------------------

    def _start(self) -> None:
        with self._cond:
            if self._thread is None and not self._shutdown:
                t = threading.Thread(target=self._run, name=f"tooltrace-{self.name}", daemon=True)
                self._thread = t
                t.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                # Sleep until a full batch, a flush, shutdown or the interval (empty included).
                if not self._shutdown and len(self._queue) < self._max_batch:
                    self._cond.wait(self._interval)
                if self._shutdown and not self._queue:
                    self._cond.notify_all()
                    return
                self._busy = True
            try:
                self.drain()
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def paced(self, items: Iterable[U]) -> Iterator[U]:
        """``items`` one by one, in slices of ``slice_s``: how a sink walks a batch.

        The worker walks them holding the process's background turn, and between slices it
        ``pause``s, unless pausing is off or the backlog is past eight batches or a quarter of
        the queue (catching up then beats a short tail). While a tool call is in flight it
        pauses before the next item, and waits for the call (see ``_yield_to_calls``).
        """
        q, catch_up = self._queue, self._catch_up
        if not self._slice_s or len(q) >= catch_up:
            yield from items
            return
        clock = time.perf_counter
        bound = self._yield_bound if self._yield_max_s else 0
        self.take_turn()
        try:
            for item in items:
                now = clock()
                n = len(q)
                if n < catch_up and (now >= self._slice_end or (
                        n < bound and not self._forced and not self._flushing
                        and calls_in_flight(now))):
                    self.pause()
                yield item
        finally:
            self._give_turn()

    def pause(self) -> None:
        """Give up the interpreter for ``PAUSE_S`` (keeping the turn), then start a new slice.

        The other workers wait for the turn, not for the interpreter, so the one thread that
        can take it meanwhile is a caller. (Handing the turn over here let the next worker,
        awake and on a CPU, take the interpreter before the caller had woken up: slices of
        three workers then ran back to back for up to 11 ms.)
        """
        time.sleep(PAUSE_S)
        self._yield_to_calls()
        self._slice_end = time.perf_counter() + self._slice_s

    def _yield_to_calls(self) -> None:
        # Outside the interpreter while a tool call is in flight: between calls, or at idle,
        # the worker takes nobody's turn. Bounded by time, backlog and flushes, so records are
        # only ever delayed, never dropped, and a flush or shutdown still drains the queue.
        # A worker that waited its longest runs the next slice whatever is in flight (_forced).
        self._forced = False
        limit = self._yield_max_s
        if not limit:
            return
        clock, q, bound = time.perf_counter, self._queue, self._yield_bound
        now = clock()
        deadline = now + limit
        while (calls_in_flight(now) and len(q) < bound
               and not self._flushing and not self._shutdown):
            if now >= deadline:
                self._forced = True
                return
            time.sleep(_YIELD_STEP_S)
            now = clock()

    def take_turn(self) -> None:
        """Wait for the background turn (the workers of a process take turns), then start a
        slice of work."""
        # Waits in short steps: a worker whose backlog grows past its bound meanwhile goes
        # ahead without the turn rather than fall further behind.
        turn, clock = _TURN, time.perf_counter
        deadline = clock() + TURN_WAIT_S
        got = turn.acquire(timeout=_TURN_STEP_S)
        while not got and len(self._queue) < self._catch_up and clock() < deadline:
            got = turn.acquire(timeout=_TURN_STEP_S)
        self._turn = turn if got else None
        self._yield_to_calls()
        self._slice_end = clock() + self._slice_s

    def _give_turn(self) -> None:
        turn, self._turn = self._turn, None
        if turn is not None:
            turn.release()

    def drain(self) -> None:
        """Hand what is queued to the sink in batches, in slices of work that pause for the
        calls (the worker thread's body)."""
        q = self._queue
        while q:
            n = min(len(q), self._max_batch)
            batch = [q.popleft() for _ in range(n)]
            try:
                self._export(batch)
                self.exported += n
            except BaseException as exc:  # a sink never raises into anyone
                self.export_errors += 1
                if self._on_error is not None:
                    try:
                        self._on_error(exc)
                    except Exception:  # the error handler failed too
                        pass

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Export everything queued so far; return False if the deadline passed first."""
        deadline = time.monotonic() + timeout_s
        if self._thread is None:
            if not self._queue:
                return True
            self._start()
        with self._cond:
            self._flushing += 1
            try:
                self._cond.notify()
                while self._queue or self._busy:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.notify()
                    self._cond.wait(min(left, 0.05))
            finally:
                self._flushing -= 1
        return True

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Flush within the deadline, then stop the thread; later submits are dropped."""
        ok = self.flush(timeout_s)
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(max(0.0, timeout_s))
        return ok

    def _after_fork_in_child(self) -> None:
        # The parent's thread does not exist here and its lock may be held: start clean. Items
        # queued in the parent belong to the parent and are exported there.
        self._init_state()


# Bound methods to call in a forked child, in the order they were registered (a worker before
# the sink that made it). Weak: registering keeps no object alive.
_FORK_CALLBACKS: list[weakref.WeakMethod[Callable[[], None]]] = []
_FORK_LOCK = threading.Lock()


def on_fork_in_child(method: Callable[[], None]) -> None:
    """Call the bound ``method`` in the child after a ``fork`` (the object's threads and held
    locks do not exist there), for as long as its object lives."""
    with _FORK_LOCK:
        _FORK_CALLBACKS[:] = [r for r in _FORK_CALLBACKS if r() is not None]
        _FORK_CALLBACKS.append(weakref.WeakMethod(method))


def _reinit_after_fork() -> None:
    global _TURN, _FORK_LOCK
    _TURN = threading.Lock()  # another thread of the parent may have held it
    _FORK_LOCK = threading.Lock()
    for ref in list(_FORK_CALLBACKS):
        method = ref()
        if method is not None:
            method()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
