"""What a running tool sees of its call: ``CallContext`` (deadline, cancel signal, the facts it
adds to its execute step, late steps), made current while the tool runs (``current_context()``).

The runtime turns a deadline or a cancel request into a *signal* and waits a bounded grace period
for the tool to confirm it stopped; what happens then is decided by the registry's outcome rules
from the tool's ``effect`` (``tooltrace._outcome``).
"""

from __future__ import annotations

import threading
import time
from _thread import LockType
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from . import _build
from ._executors import release_quietly
from .exceptions import DeadlineExceeded, ToolCancelled

if TYPE_CHECKING:
    from .paths import Workspace
    from .redaction import ArtifactStore

__all__ = ["CallContext"]


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
            release_quietly(self._wake)
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


def _safe(cb: Callable[[str], None], reason: str) -> None:
    try:
        cb(reason)
    except Exception:
        pass


_build.keep_docs(__name__, globals())
