"""Resumable streams on the proxy's HTTP front (2025-11-25 and later): every SSE stream
starts with a priming event (an id, no data) that tells the client how long to wait before it
reconnects (``retry``), and every message on it is kept here under an event id, so a client
whose stream broke reconnects with ``Last-Event-ID`` and gets what it missed.

Kept in memory and bounded: ``PER_STREAM`` events per stream, ``STREAMS`` streams (the least
recently written is forgotten first). A client that reconnects after its events were forgotten
gets nothing replayed, as from a server without an event store.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.streamable_http import EventCallback

__all__ = ["PER_STREAM", "RETRY_MS", "STREAMS", "event_store"]

#: Events kept per stream, and streams kept.
PER_STREAM = 256
STREAMS = 1024
#: How long a client waits before it reconnects a broken stream (the SSE ``retry`` field).
RETRY_MS = 1000


def event_store() -> Any:
    """A new bounded in-memory ``EventStore`` for the SDK's streamable HTTP front."""
    from mcp.server.streamable_http import EventMessage, EventStore

    class Events(EventStore):
        def __init__(self) -> None:
            self._streams: OrderedDict[str, deque[tuple[int, Any]]] = OrderedDict()
            self._seq = itertools.count(1)

        async def store_event(self, stream_id: str, message: Any) -> str:
            seq = next(self._seq)
            kept = self._streams.get(stream_id)
            if kept is None:
                kept = self._streams[stream_id] = deque(maxlen=PER_STREAM)
                while len(self._streams) > STREAMS:
                    self._streams.popitem(last=False)
            self._streams.move_to_end(stream_id)
            kept.append((seq, message))
            return f"{seq}:{stream_id}"

        async def replay_events_after(self, last_event_id: str,
                                      send_callback: EventCallback) -> str | None:
            seq_text, _, stream_id = last_event_id.partition(":")
            kept = self._streams.get(stream_id)
            if kept is None or not seq_text.isdigit():
                return None
            after = int(seq_text)
            for seq, message in list(kept):
                if seq > after and message is not None:  # a priming event holds no message
                    await send_callback(EventMessage(message, f"{seq}:{stream_id}"))
            return stream_id

    return Events()
