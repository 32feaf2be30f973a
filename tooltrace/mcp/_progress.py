"""Progress to MCP clients: a call made with a ``progressToken`` in its ``_meta`` gets
``notifications/progress`` for every progress report its tool publishes (``ctx.progress``).

One subscription to the registry's ``progress`` events serves every session; it is made on the
first call that asks (on the server's event loop) and looks each event's call id up among the
calls that asked. A call that did not ask costs nothing more than a dictionary lookup in that
subscriber, and a server whose clients never ask has no subscription at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..events import CallProgress, Subscription
    from ..registry import ToolRegistry

__all__ = ["ProgressRelay", "progress_token"]

log = logging.getLogger("tooltrace.mcp")


def progress_token(params: Mapping[str, Any] | None) -> str | int | None:
    """The ``progressToken`` of a request's ``_meta`` (a string or an integer), or None."""
    meta = (params or {}).get("_meta")
    token = meta.get("progressToken") if isinstance(meta, Mapping) else None
    if isinstance(token, bool) or not isinstance(token, str | int):
        return None
    return token


@dataclass(frozen=True, slots=True)
class _Asked:
    session: Any
    token: str | int
    request_id: str | None


class ProgressRelay:
    """Sends the progress of the calls that asked for it to their clients."""

    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry
        self._sub: Subscription | None = None
        self._asked: dict[str, _Asked] = {}
        #: Notifications that could not be sent (the client went away): counted, not raised.
        self.send_errors = 0

    def watch(self, call_id: str, session: Any, token: str | int, request_id: Any) -> None:
        """Relay the progress of ``call_id`` to ``session`` under ``token`` (call on the loop)."""
        if self._sub is None:
            self._sub = self._registry.subscribe(self._relay, kinds=["progress"])
        rid = None if request_id is None else str(request_id)
        self._asked[call_id] = _Asked(session, token, rid)

    async def forget(self, call_id: str) -> None:
        """The call returned: send what is still queued for it, then stop relaying."""
        sub = self._sub
        for _ in range(50):  # bounded: a stuck client must not hold the answer back
            if sub is None or not sub.pending:
                break
            await asyncio.sleep(0.002)
        self._asked.pop(call_id, None)

    async def _relay(self, ev: CallProgress) -> None:
        asked = self._asked.get(ev.call_id)
        if asked is None:
            return
        m = ev.mark
        try:
            await asked.session.send_progress_notification(
                asked.token, m.done, m.total, m.message, related_request_id=asked.request_id)
        except Exception:
            self.send_errors += 1
            log.debug("mcp proxy: a progress notification could not be sent", exc_info=True)
