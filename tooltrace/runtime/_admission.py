"""Admission: concurrency caps (global and per tool) with one bounded FIFO queue, for threads and
event loops alike."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from ._executors import resolve_future

__all__ = ["Admission", "AdmissionResult"]


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
            self.loop.call_soon_threadsafe(resolve_future, fut)


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
