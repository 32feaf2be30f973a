"""The one background batching worker every sink uses.

Modelled on the OpenTelemetry SDK's batch processor: ``submit`` never blocks and never raises
(a full queue drops the item and counts it), a daemon thread wakes when a batch is ready or an
interval passes, ``flush`` and ``shutdown`` take deadlines, and after ``fork`` the child gets a
fresh, empty worker instead of a dead thread and a held lock.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["BatchWorker"]

T = TypeVar("T")


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
    ) -> None:
        if max_queue < 1 or max_batch < 1 or interval_s <= 0:
            raise ValueError("max_queue, max_batch and interval_s must be positive")
        self.name = name
        self._export = export
        self._max_queue = max_queue
        self._max_batch = max_batch
        self._interval = interval_s
        self._on_error = on_error
        self.dropped = 0
        self.exported = 0
        self.export_errors = 0
        self._init_state()
        _WORKERS.add(self)

    def _init_state(self) -> None:
        self._queue: collections.deque[T] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._busy = False
        self._shutdown = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

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
                self._drain()
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _drain(self) -> None:
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
            self._cond.notify()
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.notify()
                self._cond.wait(min(left, 0.05))
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


_WORKERS: weakref.WeakSet[BatchWorker[Any]] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    for w in list(_WORKERS):
        w._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
