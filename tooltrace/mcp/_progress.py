"""Progress through the proxy: a ``tools/call`` made with a ``progressToken`` in its ``_meta``
goes upstream with that same token, and every ``notifications/progress`` the upstream sends for
it reaches the client as sent (the token, the numbers, an int stays an int; the message
redacted like everything else the proxy hands on). A tool of the registry that is not an
upstream's reports through ``ctx.progress``: the reports the registry publishes (redacted, at
most one per ``progress_interval_s``) reach the client the same way.

Each call that asked gets a ``ProgressStream``: a bounded queue and a task that writes it to
the client, in order. A client that reads slower than the upstream reports fills the queue;
only then are reports coalesced (the newest queued one is replaced by the one that arrives, so
the client still sees the latest), and each coalesced report is counted in
``tooltrace_mcp_progress_coalesced_total``. Nothing is held back by a clock.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..events import CallProgress, Subscription
    from ..registry import ToolRegistry

__all__ = ["ProgressRelay", "ProgressStream", "progress_token"]

log = logging.getLogger("tooltrace.mcp")

#: Reports queued per call before new ones are coalesced into the newest queued one.
QUEUE_SIZE = 256
#: How long the answer of a call waits for its queued reports to be written.
_DRAIN_S = 5.0


def progress_token(params: Mapping[str, Any] | None) -> str | int | None:
    """The ``progressToken`` of a request's ``_meta`` (a string or an integer), or None."""
    meta = (params or {}).get("_meta")
    token = meta.get("progressToken") if isinstance(meta, Mapping) else None
    if isinstance(token, bool) or not isinstance(token, str | int):
        return None
    return token


class _Wire:
    """A notification in wire form, for a session's ``send_notification`` (which dumps what
    it is given): the upstream's params are sent unchanged, not re-typed (a typed model would
    make every number a float)."""

    __slots__ = ("_data",)

    def __init__(self, method: str, params: Mapping[str, Any]) -> None:
        self._data = {"method": method, "params": dict(params)}

    def model_dump(self, **_kw: Any) -> dict[str, Any]:
        return self._data


class ProgressStream:
    """One call's progress to its client: ``put`` the upstream's params, ``close`` when the
    call answers (what is queued is written first, so no report follows the answer)."""

    def __init__(self, relay: ProgressRelay, session: Any, token: str | int,
                 request_id: Any) -> None:
        self.token = token
        self._relay = relay
        self._session = session
        self._request_id = None if request_id is None else str(request_id)
        self._queue: collections.deque[dict[str, Any]] = collections.deque()
        self._wake = asyncio.Event()
        self._closed = False
        #: Set once the call's upstream sends its progress here itself (``_carry``): the
        #: registry's reports of the call are then not sent too.
        self.direct = False
        self._task = asyncio.get_running_loop().create_task(self._write())

    def put(self, params: Mapping[str, Any]) -> None:
        """Queue one report (params as the upstream sent them, under the client's token)."""
        if self._closed:
            return
        report = {**params, "progressToken": self.token}
        note = report.get("message")
        if isinstance(note, str):
            report["message"] = self._relay.redact(note)
        if len(self._queue) >= QUEUE_SIZE:
            self._queue[-1] = report  # back-pressure: the newest report stands for both
            self._relay.coalesced_one()
        else:
            self._queue.append(report)
        self._wake.set()

    async def _write(self) -> None:
        while True:
            while self._queue:
                report = self._queue.popleft()
                try:
                    await self._session.send_notification(
                        _Wire("notifications/progress", report), self._request_id)
                except Exception:
                    self._relay.send_errors += 1
                    log.debug("mcp proxy: a progress notification could not be sent",
                              exc_info=True)
            if self._closed:
                return
            self._wake.clear()
            await self._wake.wait()

    def cancel(self) -> None:
        """Stop at once (the client cancelled the call: it expects nothing more of it)."""
        self._closed = True
        self._queue.clear()
        self._task.cancel()

    async def close(self) -> None:
        """Write what is queued (bounded: a stuck client must not hold the answer back)."""
        if self._task.done():
            return
        self._closed = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), _DRAIN_S)
        except (TimeoutError, asyncio.CancelledError):
            self._task.cancel()


class ProgressRelay:
    """The proxy's progress streams and their counters (one per front end)."""

    def __init__(self, registry: ToolRegistry) -> None:
        #: Notifications that could not be sent (the client went away): counted, not raised.
        self.send_errors = 0
        #: Reports coalesced under back-pressure (also ``tooltrace_mcp_progress_coalesced_total``).
        self.coalesced = 0
        self._registry = registry
        self._counter = _counter(registry)
        self._sub: Subscription | None = None
        self._calls: dict[str, ProgressStream] = {}

    def open(self, call_id: str, session: Any, token: str | int,
             request_id: Any) -> ProgressStream:
        """A stream of the progress of ``call_id`` to ``session`` under the client's ``token``
        (on the loop); ``forget(call_id)`` when the call answered."""
        if self._sub is None:
            self._sub = self._registry.subscribe(self._published, kinds=["progress"])
        stream = self._calls[call_id] = ProgressStream(self, session, token, request_id)
        return stream

    def forget(self, call_id: str) -> None:
        """Stop taking the registry's reports of ``call_id``."""
        self._calls.pop(call_id, None)

    def redact(self, text: str) -> str:
        """``text`` with the secrets the registry's redactor finds replaced."""
        return self._registry.redactor.redact_text(text)

    async def _published(self, ev: CallProgress) -> None:
        stream = self._calls.get(ev.call_id)
        if stream is None or stream.direct:
            return
        m = ev.mark
        report: dict[str, Any] = {"progress": m.done}
        if m.total is not None:
            report["total"] = m.total
        if m.message is not None:
            report["message"] = m.message
        stream.put(report)

    def coalesced_one(self) -> None:
        """Count one report coalesced into a newer one."""
        self.coalesced += 1
        if self._counter is not None:
            self._counter.inc()


def _counter(registry: ToolRegistry) -> Any:
    """``tooltrace_mcp_progress_coalesced_total`` in the registry's Prometheus registry (None
    without a metrics sink); one per Prometheus registry, shared by the proxies that use it."""
    from ..telemetry.metrics import MetricsSink

    sink = next((s for s in registry.sinks if isinstance(s, MetricsSink)), None)
    if sink is None:
        return None
    counter = _COUNTERS.get(sink.registry)
    if counter is None:
        from prometheus_client import Counter

        counter = _COUNTERS[sink.registry] = Counter(
            "tooltrace_mcp_progress_coalesced",
            "Progress notifications the MCP proxy coalesced into a newer one because the client "
            "read slower than the upstream reported.", registry=sink.registry)
    return counter


# Registering the counter twice in one Prometheus registry is an error: the one made for it.
_COUNTERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
