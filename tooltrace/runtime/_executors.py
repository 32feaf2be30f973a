"""Where tools run: the tool threads (``ToolThreads`` and their ``Job``), the background event
loop for async tools called from threads (``LoopThread``), and plain pools (hooks, approvers).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from _thread import LockType
from collections.abc import Callable
from typing import Any

from .._inflight import MARKS

__all__ = [
    "Job",
    "LoopThread",
    "RenewablePool",
    "ToolThreads",
    "make_pool",
    "release_quietly",
    "resolve_future",
]


def release_quietly(lock: LockType) -> None:
    """Release a lock two parties may both release (the second release is a no-op)."""
    try:
        lock.release()
    except RuntimeError:
        pass


def resolve_future(fut: asyncio.Future[Any]) -> None:
    """Wake whoever awaits ``fut`` (on its loop), unless it is done already."""
    if not fut.done():
        fut.set_result(None)


class LoopThread:
    """One background event loop, for running async tools from synchronous callers."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started on first use."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                t = threading.Thread(target=loop.run_forever, name="tooltrace-loop", daemon=True)
                t.start()
                self._loop = loop
            return self._loop

    def stop(self) -> None:
        """Stop the loop (tasks still running are abandoned)."""
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop = None


def make_pool(size: int, prefix: str) -> concurrent.futures.ThreadPoolExecutor:
    """A worker pool whose threads are created on demand."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=size, thread_name_prefix=prefix)


class RenewablePool:
    """Threads for hooks, approvers and strict audit writes (``pool``), renewed on request: a
    hook that overran its limit still holds a thread, so later hooks get a fresh pool and a
    hung hook cannot starve healthy ones (its thread ends when it returns)."""

    def __init__(self, size: int, prefix: str) -> None:
        self._size = size
        self._prefix = prefix
        self._lock = threading.Lock()
        self.pool = make_pool(size, prefix)

    def renew(self) -> None:
        """Give later work a fresh pool; the old one ends once its threads are done."""
        with self._lock:
            old, self.pool = self.pool, make_pool(self._size, self._prefix)
        old.shutdown(wait=False)

    def shutdown(self) -> None:
        """Refuse new work and drop what is queued (running work is not waited for)."""
        self.pool.shutdown(wait=False, cancel_futures=True)


_clock = time.perf_counter

_JOB_LOCK = threading.Lock()  # guards every job's callback list (held for a few bytecodes)


class Job:
    """One function run on a ``ToolThreads`` worker; the subset of ``concurrent.futures.Future``
    the registry uses (``done``, ``cancelled``, ``exception``, ``result``,
    ``add_done_callback``), without a ``Condition`` per job."""

    __slots__ = (
        "_args",
        "_callbacks",
        "_cancelled",
        "_done",
        "_error",
        "_fn",
        "_gate",
        "_value",
        "_wake",
    )

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], wake: LockType | None = None
    ) -> None:
        self._fn = fn
        self._args = args
        self._done = False
        self._cancelled = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Job], Any]] | None = None
        # Held until the job is done: result(timeout) waits on it with one C call.
        self._gate = threading.Lock()
        self._gate.acquire()
        # A lock the submitter holds and waits on; released (once) when the job is done. The
        # submitter may release it too (a cancel), so a second release is ignored.
        self._wake = wake

    def run(self) -> None:
        """Run the function on this (worker) thread, keeping its value or error."""
        try:
            self._value = self._fn(*self._args)
        except BaseException as exc:  # like a Future: the waiter decides what it means
            self._error = exc

    def drop(self) -> None:
        """Never ran (its pool shut down first)."""
        self._cancelled = True
        self.finish()

    def finish(self) -> None:
        """Mark the job done and wake whoever waits on it."""
        self._fn = self._args = None  # type: ignore[assignment]  # drop references early
        _JOB_LOCK.acquire()
        try:
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        finally:
            _JOB_LOCK.release()
        self._gate.release()
        if self._wake is not None:
            release_quietly(self._wake)
        for cb in callbacks or ():
            try:
                cb(self)
            except Exception:
                pass

    def add_done_callback(self, fn: Callable[[Job], Any]) -> None:
        """Call ``fn(job)`` when done (at once, on this thread, if it already is)."""
        _JOB_LOCK.acquire()
        try:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        finally:
            _JOB_LOCK.release()
        try:
            fn(self)
        except Exception:
            pass

    def done(self) -> bool:
        """True once the function returned or raised (or the job was cancelled).

        A caller that sees its job done is awake again: the call is no longer in flight for
        the background workers (``tooltrace._inflight``)."""
        if self._done:
            MARKS.start = 0.0
            return True
        return False

    def cancelled(self) -> bool:
        """True if the pool shut down before the job started."""
        return self._cancelled

    def exception(self) -> BaseException | None:
        """What the function raised (None if it returned; only meaningful once done)."""
        return self._error

    def result(self, timeout: float | None = None) -> Any:
        """Wait up to ``timeout`` seconds; return the value or raise what the function raised
        (``concurrent.futures.TimeoutError`` if not done, ``CancelledError`` if cancelled)."""
        if not self._done:
            wait = -1.0 if timeout is None else min(max(timeout, 0.0), threading.TIMEOUT_MAX)
            if self._gate.acquire(True, wait):
                self._gate.release()  # let other waiters through too
        if not self._done:
            raise concurrent.futures.TimeoutError()
        MARKS.start = 0.0  # its caller is awake (see done)
        if self._cancelled:
            raise concurrent.futures.CancelledError()
        if self._error is not None:
            raise self._error
        return self._value


class ToolThreads:
    """Threads for tools declared ``execution="thread"``, created on demand up to ``size``.

    Lighter than a ``ThreadPoolExecutor`` on the call path: a ``SimpleQueue`` hand-off and a bare
    lock per job, so a worker goes back to waiting (and frees the interpreter for the caller)
    as soon as the tool returns. Workers live as long as the pool.
    """

    def __init__(self, size: int, prefix: str) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self._size = size
        self._prefix = prefix
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any, wake: LockType | None = None) -> Job:
        """Queue ``fn(*args)``; ``RuntimeError`` after shutdown (the job never starts).

        ``wake``, a held lock, is released when the job is done: a caller blocked on it wakes
        with one C call, no callback."""
        job = Job(fn, args, wake)
        start = False
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise RuntimeError("cannot run a tool: the registry's tool threads are shut down")
            if self._idle:
                self._idle -= 1  # an idle worker takes it
            elif self._threads < self._size:
                self._threads += 1
                start = True
        finally:
            lock.release()
        # Background workers stay out of the interpreter while a job is in flight (_inflight).
        MARKS.start = _clock()
        self._queue.put(job)
        if start:
            name = f"{self._prefix}_{self._threads - 1}"
            threading.Thread(target=self._work, name=name, daemon=True).start()
        return job

    def _work(self) -> None:
        get = self._queue.get
        lock = self._lock
        while True:
            job = get()
            if job is None:
                return
            job.run()
            # Idle again *before* the submitter is woken: its next job then finds this worker
            # (no new thread), and nothing is left to do here but go back to waiting, which
            # frees the interpreter for the woken caller at once.
            lock.acquire()
            self._idle += 1
            lock.release()
            job.finish()
            del job

    def shutdown(self) -> None:
        """Refuse new jobs, cancel queued ones, let workers end after their current job."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            n = self._threads
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.drop()
        for _ in range(n):
            self._queue.put(None)
