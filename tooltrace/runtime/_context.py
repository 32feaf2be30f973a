"""What a running tool sees of its call: ``CallContext`` (deadline, cancel signal, the facts it
adds to its execute step, late steps, progress, nested calls), made current while the tool runs
(``current_context()``).

The runtime turns a deadline or a cancel request into a *signal* and waits a bounded grace period
for the tool to confirm it stopped; what happens then is decided by the registry's outcome rules
from the tool's ``effect`` (``tooltrace.pipeline._outcome``).
"""

from __future__ import annotations

import threading
import time
from _thread import LockType
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..exceptions import DeadlineExceeded, ToolCancelled
from ._executors import release_quietly

if TYPE_CHECKING:
    from ..model import ProgressMark, ToolCall, ToolResultEnvelope
    from ..policy import Workspace
    from ..redaction import ArtifactStore
    from ..sinks import OpenSpan
    from ..snapshots import FileSnapshot

#: Progress marks a call's record keeps: the first ones, and always the latest last.
MAX_MARKS = 16
#: Longest progress message kept (after redaction).
MESSAGE_CHARS = 200


class CallHost(Protocol):
    """What a context needs of the pipeline that runs its call: where progress goes, and how
    a tool's nested call is made."""

    @property
    def progress_interval_s(self) -> float:
        """The shortest time between two published progress reports of one call."""

    def report_progress(self, ctx: CallContext, seq: int, at_us: int, done: float,
                        total: float | None, message: str | None) -> None:
        """Keep one progress report on ``ctx`` and publish it."""

    def call_child(self, call: ToolCall, parent: CallContext) -> ToolResultEnvelope:
        """Run ``call`` as a nested call of ``parent`` (blocking)."""

    async def acall_child(self, call: ToolCall, parent: CallContext) -> ToolResultEnvelope:
        """Run ``call`` as a nested call of ``parent`` on the running event loop."""


def keep_marks(ctx: CallContext, mark: ProgressMark) -> None:
    """Add ``mark`` to the context's bounded list: the first ``MAX_MARKS - 1`` reports, then
    the latest in the last place."""
    marks = ctx.marks
    if marks is None:
        ctx.marks = [mark]
    elif len(marks) < MAX_MARKS:
        marks.append(mark)
    else:
        marks[-1] = mark

__all__ = ["CallContext"]


# Python subclasses of the compiled class are allowed (it is public API).
class CallContext:
    """What a running tool may know and use about its call.

    Tools that run long should watch it: ``check()`` raises ``ToolCancelled`` or
    ``DeadlineExceeded`` once the call was signalled (raising it *confirms* the stop), ``wait()``
    sleeps until a timeout or the signal, and ``on_cancel()`` registers a callback run when the
    signal arrives (``run_command`` kills its process tree there).
    """

    __slots__ = (
        "_callbacks",
        "_event",
        "_hub",
        "_late",
        "_pending",
        "_pnext",
        "_reason",
        "_stopped",
        "_wake",
        "artifacts",
        "background",
        "call_id",
        "deadline",
        "depth",
        "detail",
        "final_status",
        "has_returned",
        "marks",
        "mode",
        "parent_call_id",
        "reports",
        "run_id",
        "signalled_at",
        "snapshots",
        "span",
        "timeout_s",
        "tool",
        "traceparent",
        "workspace",
    )

    # Set by the first progress report (read only once ``reports`` is not 0).
    _pnext: float
    _pending: tuple[int, int, float, float | None, str | None] | None

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
        hub: CallHost | None = None,
        mode: str = "default",
        depth: int = 0,
        parent_call_id: str | None = None,
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
        # Set by the pipeline when the call has returned (``returned``; what cancel() waits for).
        #: True once the call has returned (the pipeline sets it; what ``cancel()`` waits for).
        self.has_returned = False
        #: The status the call returned with (set with ``has_returned``; None until then).
        self.final_status: Any = None
        #: ``time.monotonic()`` when the call was signalled (or marked), so the deadline and
        #: cancel-request steps carry the moment of the request, not of the confirmation.
        self.signalled_at: float | None = None
        self._hub = hub
        #: The mode the call runs in (a nested call runs in the same one).
        self.mode = mode
        #: 0 for a call from outside any tool, 1 for a call a tool made, and so on.
        self.depth = depth
        #: The call whose tool made this one (``call``/``acall``), or None.
        self.parent_call_id = parent_call_id
        #: The progress reports kept for the record (bounded; None until the first).
        self.marks: list[ProgressMark] | None = None
        #: How many progress reports the tool made (``progress``). The rate limit's fields
        #: (``_pnext``, ``_pending``) are set by the first report.
        self.reports = 0
        #: The call's span, made current around a nested call's start (set by the pipeline).
        self.span: OpenSpan | None = None
        #: The files the registry snapshotted before the call, by argument (set by the
        #: registry for a tool that declares ``writes``): a writer checks it replaces the
        #: very file that was snapshotted.
        self.snapshots: Mapping[str, FileSnapshot] | None = None

    def wake_on_signal(self, lock: LockType) -> None:
        """Release the held ``lock`` when the call is signalled: the pipeline waits on it
        while the tool runs on a worker, so the wait ends at once."""
        self._wake = lock

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

    # -- progress -------------------------------------------------------------------------------

    def progress(
        self, done: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Report progress: ``done`` of ``total`` (in any unit; ``total`` None when unknown)
        and what the tool is doing now (redacted, cut to 200 characters).

        Cheap to call often: reports closer together than the registry's
        ``progress_interval_s`` are held back, and only the latest is kept (it is published
        when the interval has passed, or when the call returns). A report that reaches
        ``total`` is published at once. Subscribers, the span, the record, a background
        job's status and an MCP client that asked for progress see the published ones.
        Raises ``TypeError``/``ValueError`` for a value that is not a finite, non-negative
        number (``total`` positive) or a message that is not text.
        """
        if type(done) is not int and type(done) is not float:
            _check_number("done", done)
        if not 0 <= done < _INF:
            raise ValueError("progress: done must be a finite number >= 0")
        if total is not None:
            if type(total) is not int and type(total) is not float:
                _check_number("total", total)
            if not 0 < total < _INF:
                raise ValueError("progress: total must be a finite number > 0")
        if message is not None and not isinstance(message, str):
            raise TypeError("progress: message must be a string or None")
        seq = self.reports
        self.reports = seq + 1
        at_us = time.time_ns() // 1000
        now = time.monotonic()
        if seq and now < self._pnext and (total is None or done < total):
            self._pending = (seq, at_us, done, total, message)
            return
        self._pending = None
        hub = self._hub
        self._pnext = now + (hub.progress_interval_s if hub is not None else 0.1)
        self._publish(seq, at_us, done, total, message)

    def flush_progress(self) -> None:
        """Publish the report the rate limit held back, if any (the registry calls this when
        the call returns)."""
        if not self.reports:  # no report yet: nothing held back
            return
        pending, self._pending = self._pending, None
        if pending is not None:
            self._publish(*pending)

    @property
    def last_progress(self) -> ProgressMark | None:
        """The latest progress report published (None before the first)."""
        return self.marks[-1] if self.marks else None

    def _publish(
        self, seq: int, at_us: int, done: float, total: float | None, message: str | None
    ) -> None:
        hub = self._hub
        if hub is not None:
            hub.report_progress(self, seq, at_us, done, total, message)
            return
        # A context made outside a registry: keep the mark, message redacted by the default.
        from ..model import ProgressMark
        from ..redaction import default_redactor

        text = default_redactor().redact_text(message)[:MESSAGE_CHARS] if message else None
        keep_marks(self, ProgressMark(seq, at_us, done, total, text))

    # -- nested calls -----------------------------------------------------------------------------

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> ToolResultEnvelope:
        """Call another tool through the whole pipeline, as a child of this call (blocking).

        The child is validated, policed, hooked, admitted, audited and traced like any call;
        it runs in this call's run and mode, records this call as its parent, its span is a
        child of this call's, its deadline is at most this call's remaining time, and it is
        cancelled with this call. It counts against the registry's ``max_depth``: deeper, it
        is refused (stage ``policy``, rule ``max_depth``). From an async tool use ``acall``.
        """
        host, call = self._child_call(name, arguments, timeout_s)
        return host.call_child(call, self)

    async def acall(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> ToolResultEnvelope:
        """``call`` on the running event loop (from an async tool)."""
        host, call = self._child_call(name, arguments, timeout_s)
        return await host.acall_child(call, self)

    def _child_call(
        self, name: str, arguments: Mapping[str, Any] | None, timeout_s: float | None
    ) -> tuple[CallHost, ToolCall]:
        from ..model import ToolCall

        if self._hub is None:
            raise RuntimeError("this context belongs to no registry: it cannot make calls")
        # The pipeline also caps the child's deadline at this call's remaining time.
        timeout = None if timeout_s is None else min(timeout_s, max(self.remaining(), 0.001))
        call = ToolCall(
            name,
            dict(arguments) if arguments is not None else {},
            run_id=self.run_id,
            mode=self.mode,
            timeout_s=timeout,
        )
        return self._hub, call

    def stop_with_parent(self, reason: str) -> None:
        """Signal this (nested) call because its parent was signalled (an ``on_cancel``
        callback of the parent's context)."""
        self.signal(reason)

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
_INF = float("inf")


def _check_number(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"progress: {name} must be a number, not {type(value).__name__}")


def _safe(cb: Callable[[str], None], reason: str) -> None:
    try:
        cb(reason)
    except Exception:
        pass
