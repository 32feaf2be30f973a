"""Runtime: the call context tools see, admission (concurrency caps and a bounded queue), and
the worker pools and event loop tools run on.

The tool layer, not the agent loop, knows each operation best: a tool's definition declares its
default timeout, whether it can be cancelled and whether it has side effects. The runtime turns a
deadline or a cancel request into a *signal* (``CallContext``) and waits a bounded grace period
for the tool to confirm it stopped; what happens then is decided by the registry from the tool's
``effect`` (see ``tooltrace.registry``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import queue
import threading
import time
from _thread import LockType
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from . import _build
from ._current import current_context
from .exceptions import DeadlineExceeded, ToolCancelled

if TYPE_CHECKING:
    from .paths import Workspace
    from .redaction import ArtifactStore

__all__ = ["Admission", "AdmissionResult", "CallContext", "current_context"]


# Python subclasses of the compiled class are allowed (it is public API).
@mypyc_attr(allow_interpreted_subclasses=True)
class CallContext:
    """What a running tool may know and use about its call.

    Tools that run long should watch it: ``check()`` raises ``ToolCancelled`` or
    ``DeadlineExceeded`` once the call was signalled (raising it *confirms* the stop), ``wait()``
    sleeps until a timeout or the signal, and ``on_cancel()`` registers a callback run when the
    signal arrives (``run_command`` kills its process tree there).
    """

    __slots__ = (
        "_callbacks",
        "_done",
        "_event",
        "_final",
        "_late",
        "_reason",
        "_stopped",
        "_wake",
        "artifacts",
        "background",
        "call_id",
        "deadline",
        "detail",
        "run_id",
        "signalled_at",
        "timeout_s",
        "tool",
        "traceparent",
        "workspace",
    )

    def __init__(
        self,
        call_id: str,
        run_id: str,
        tool: str,
        timeout_s: float,
        workspace: Workspace,
        artifacts: ArtifactStore,
        traceparent: str | None = None,
        background: bool = False,
        late: Callable[[str, str, str, str, str, Mapping[str, Any] | None], None] | None = None,
    ) -> None:
        self.call_id = call_id
        self.run_id = run_id
        self.tool = tool
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.workspace = workspace
        self.artifacts = artifacts
        self.traceparent = traceparent
        self.background = background
        #: Facts for the execute step (``set_detail``); made on first use, most calls add none.
        self.detail: dict[str, Any] | None = None
        # Signals are rare, so the event, the callback list and the lock are made lazily or
        # shared: a call that is never cancelled pays for none of them.
        self._event: threading.Event | None = None
        self._reason: str | None = None
        self._callbacks: list[Callable[[str], None]] | None = None
        self._stopped = False
        #: A held lock the registry waits on while the tool runs on a worker; the signal
        #: releases it, so the wait ends at once (set by the registry, None otherwise).
        self._wake: LockType | None = None
        self._late = late
        # Set by the registry when the call has returned (what cancel() waits for).
        self._done = False
        self._final: Any = None
        #: ``time.monotonic()`` when the call was signalled (or marked), so the deadline and
        #: cancel-request steps carry the moment of the request, not of the confirmation.
        self.signalled_at: float | None = None

    def start_clock(self) -> None:
        """Start the deadline now (at execution start, after admission)."""
        self.deadline = time.monotonic() + self.timeout_s

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    @property
    def signalled(self) -> bool:
        """True once the call was told to stop (cancel or deadline)."""
        return self._stopped

    @property
    def reason(self) -> str | None:
        """``"cancel"`` or ``"deadline"`` once signalled, else None."""
        return self._reason

    def check(self) -> None:
        """Raise ``ToolCancelled``/``DeadlineExceeded`` if the call should stop now."""
        if self._stopped:
            if self._reason == "cancel":
                raise ToolCancelled("the call was cancelled")
            raise DeadlineExceeded("the call's deadline passed")
        if time.monotonic() >= self.deadline:
            raise DeadlineExceeded("the call's deadline passed")

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s`` or until signalled; return True if signalled."""
        with _SIGNAL_LOCK:
            ev = self._event
            if ev is None:
                ev = self._event = threading.Event()
                if self._stopped:
                    ev.set()
        return ev.wait(max(0.0, min(timeout_s, self.remaining() + 0.001)))

    def on_cancel(self, callback: Callable[[str], None]) -> None:
        """Run ``callback(reason)`` when the call is signalled (at once if it already was)."""
        _SIGNAL_LOCK.acquire()  # not a with-block: every threaded call comes here
        try:
            if not self._stopped:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
            reason = self._reason or "cancel"
        finally:
            _SIGNAL_LOCK.release()
        _safe(callback, reason)

    def set_detail(self, key: str, value: Any) -> None:
        """Add a small, JSON-serialisable fact to the execute step (redacted before recording)."""
        if self.detail is None:
            self.detail = {}
        self.detail[key] = value

    def report_late(
        self, step: str, decision: str, detail: Mapping[str, Any] | None = None
    ) -> None:
        """Record a step after the call returned (a background job ending, a late resolution)."""
        if self._late is not None:
            # (call_id, run_id, tool, step, decision, detail): one callable serves every call.
            self._late(self.call_id, self.run_id, self.tool, step, decision, detail)

    def signal(self, reason: str) -> bool:
        """Tell the tool to stop; return False if it was already signalled."""
        with _SIGNAL_LOCK:
            if self._stopped:
                return False
            self._reason = reason
            self._stopped = True
            self.signalled_at = time.monotonic()
            if self._event is not None:
                self._event.set()
            callbacks, self._callbacks = self._callbacks or [], None
        if self._wake is not None:
            _release_quietly(self._wake)
        for cb in callbacks:
            _safe(cb, reason)
        return True

    def mark(self, reason: str) -> None:
        """Record that the call stopped waiting for ``reason`` without telling the tool
        (a tool that is not cancellable is never signalled)."""
        with _SIGNAL_LOCK:
            if not self._stopped:
                self._reason = reason
                self._stopped = True
                self.signalled_at = time.monotonic()


_SIGNAL_LOCK = threading.Lock()


def _release_quietly(lock: LockType) -> None:
    """Release a lock two parties may both release (the second release is a no-op)."""
    try:
        lock.release()
    except RuntimeError:
        pass


def _safe(cb: Callable[[str], None], reason: str) -> None:
    try:
        cb(reason)
    except Exception:
        pass


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    """Outcome of waiting for a concurrency slot."""

    admitted: bool
    waited_s: float
    reason: str  # "free", "queued", "queue_full", "timeout", "cancelled", "shutdown"


class _Waiter:
    __slots__ = ("admitted", "call_id", "cancelled", "event", "fut", "loop", "run_id", "tool")

    def __init__(self, tool: str, run_id: str, call_id: str = "") -> None:
        self.tool = tool
        self.run_id = run_id
        self.call_id = call_id
        self.admitted = False
        self.cancelled = False
        self.event: threading.Event | None = None
        self.fut: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def wake(self) -> None:
        if self.event is not None:
            self.event.set()
        elif self.fut is not None and self.loop is not None:
            fut = self.fut
            self.loop.call_soon_threadsafe(_resolve, fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Admission:
    """Concurrency caps (global and per tool) with one bounded FIFO queue, usable from threads
    and event loops alike. A slot is held until the tool really finishes, even if its caller was
    released at a deadline, so a hung tool shows as saturation instead of vanishing."""

    def __init__(self, global_cap: int, max_queue: int, tool_caps: Mapping[str, int] | None = None):
        if global_cap < 1 or max_queue < 0:
            raise ValueError("global_cap must be >= 1 and max_queue >= 0")
        self.global_cap = global_cap
        self.max_queue = max_queue
        self.tool_caps: dict[str, int] = dict(tool_caps or {})
        self._lock = threading.Lock()
        self._total = 0
        # A plain dict: Counter's Python-level __delitem__ showed up on the hot path.
        self._inflight: dict[str, int] = {}
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._closed = False

    def _fits(self, tool: str) -> bool:
        if self._total >= self.global_cap:
            return False
        cap = self.tool_caps.get(tool)
        return cap is None or self._inflight.get(tool, 0) < cap

    def _take(self, tool: str) -> None:
        self._total += 1
        self._inflight[tool] = self._inflight.get(tool, 0) + 1

    def _enqueue(
        self, tool: str, run_id: str, call_id: str = ""
    ) -> tuple[AdmissionResult | None, _Waiter | None]:
        """Under the lock: admit at once, refuse, or queue a waiter."""
        if self._closed:
            return AdmissionResult(False, 0.0, "shutdown"), None
        if not self._waiters and self._fits(tool):
            self._take(tool)
            return AdmissionResult(True, 0.0, "free"), None
        if len(self._waiters) >= self.max_queue:
            return AdmissionResult(False, 0.0, "queue_full"), None
        w = _Waiter(tool, run_id, call_id)
        self._waiters.append(w)
        return None, w

    def try_acquire(self, tool: str) -> bool:
        """Take a slot if one is free and nobody is queued (never waits)."""
        # _fits and _take, written out: this runs on every call. acquire()/release() in a
        # try/finally cost half of a with-block on a lock.
        lock = self._lock
        lock.acquire()
        try:
            if self._closed or self._waiters or self._total >= self.global_cap:
                return False
            inflight = self._inflight
            n = inflight.get(tool, 0)
            if self.tool_caps:
                cap = self.tool_caps.get(tool)
                if cap is not None and n >= cap:
                    return False
            self._total += 1
            inflight[tool] = n + 1
            return True
        finally:
            lock.release()

    def acquire(
        self, tool: str, run_id: str, timeout_s: float, call_id: str = ""
    ) -> AdmissionResult:
        """Wait (blocking) up to ``timeout_s`` for a slot."""
        with self._lock:
            res, w = self._enqueue(tool, run_id, call_id)
            if w is not None:
                w.event = threading.Event()
        if res is not None:
            return res
        assert w is not None and w.event is not None
        t0 = time.monotonic()
        w.event.wait(timeout_s)
        return self._settle(w, time.monotonic() - t0)

    async def acquire_async(
        self, tool: str, run_id: str, timeout_s: float, call_id: str = ""
    ) -> AdmissionResult:
        """Wait (on the running event loop) up to ``timeout_s`` for a slot."""
        loop = asyncio.get_running_loop()
        with self._lock:
            res, w = self._enqueue(tool, run_id, call_id)
            if w is not None:
                w.loop = loop
                w.fut = loop.create_future()
        if res is not None:
            return res
        assert w is not None and w.fut is not None
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(asyncio.shield(w.fut), timeout_s)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            with self._lock:
                w.cancelled = True
            self._settle(w, time.monotonic() - t0)
            raise
        return self._settle(w, time.monotonic() - t0)

    def _settle(self, w: _Waiter, waited: float) -> AdmissionResult:
        with self._lock:
            if w.admitted:
                if w.cancelled:
                    # Admitted and cancelled at the same moment: give the slot back.
                    self._release_locked(w.tool)
                    return AdmissionResult(False, waited, "cancelled")
                return AdmissionResult(True, waited, "queued")
            try:
                self._waiters.remove(w)
            except ValueError:
                pass
            if w.cancelled:
                return AdmissionResult(False, waited, "cancelled")
            return AdmissionResult(False, waited, "shutdown" if self._closed else "timeout")

    def release(self, tool: str) -> None:
        """Give a slot back and admit queued calls that now fit, in FIFO order."""
        lock = self._lock
        lock.acquire()
        try:
            if self._waiters:
                self._release_locked(tool)
                return
            self._total -= 1  # _release_locked with nobody waiting, written out
            inflight = self._inflight
            # Idle tools keep a 0 entry (tools are few): no delete and re-insert per call.
            n = inflight.get(tool, 0)
            inflight[tool] = n - 1 if n > 0 else 0
        finally:
            lock.release()

    def _release_locked(self, tool: str) -> None:
        self._total -= 1
        self._inflight[tool] = max(self._inflight.get(tool, 0) - 1, 0)
        if not self._waiters:
            return
        for w in list(self._waiters):
            if self._total >= self.global_cap:
                break
            if self._fits(w.tool):
                self._waiters.remove(w)
                self._take(w.tool)
                w.admitted = True
                w.wake()

    def cancel_run(self, run_id: str) -> int:
        """Refuse every queued call of ``run_id``; return how many were waiting."""
        n = 0
        with self._lock:
            for w in list(self._waiters):
                if w.run_id == run_id:
                    self._waiters.remove(w)
                    w.cancelled = True
                    w.wake()
                    n += 1
        return n

    def cancel_call(self, call_id: str) -> bool:
        """Refuse the queued call ``call_id``; False if it is not waiting."""
        with self._lock:
            for w in self._waiters:
                if call_id and w.call_id == call_id:
                    self._waiters.remove(w)
                    w.cancelled = True
                    w.wake()
                    return True
        return False

    def close(self) -> None:
        """Refuse new admissions and wake every waiter (shutdown)."""
        with self._lock:
            self._closed = True
            waiters, self._waiters = list(self._waiters), collections.deque()
        for w in waiters:
            w.wake()

    def inflight(self) -> dict[str, int]:
        """Calls holding a slot now, by tool."""
        with self._lock:
            return {tool: n for tool, n in self._inflight.items() if n}

    def queue_depth(self) -> dict[str, int]:
        """Calls waiting for a slot now, by tool."""
        with self._lock:
            return dict(collections.Counter(w.tool for w in self._waiters))


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

    def _call(self) -> None:
        try:
            self._value = self._fn(*self._args)
        except BaseException as exc:  # like a Future: the waiter decides what it means
            self._error = exc

    def _cancel(self) -> None:
        """Never ran (its pool shut down first)."""
        self._cancelled = True
        self._finish()

    def _finish(self) -> None:
        self._fn = self._args = None  # type: ignore[assignment]  # drop references early
        _JOB_LOCK.acquire()
        try:
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        finally:
            _JOB_LOCK.release()
        self._gate.release()
        if self._wake is not None:
            _release_quietly(self._wake)
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
        """True once the function returned or raised (or the job was cancelled)."""
        return self._done

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
            job._call()
            # Idle again *before* the submitter is woken: its next job then finds this worker
            # (no new thread), and nothing is left to do here but go back to waiting, which
            # frees the interpreter for the woken caller at once.
            lock.acquire()
            self._idle += 1
            lock.release()
            job._finish()
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
                job._cancel()
        for _ in range(n):
            self._queue.put(None)


_build.keep_docs(__name__, globals())
