"""What a client request carries across the proxy to the upstream, and back.

The front end names the client request it serves (``Carried``: the client's revision, its
params and ``_meta``, and its progress stream); the upstream connection's message streams are
wrapped (``carry_streams``) so that a ``tools/call``, ``prompts/get`` or ``resources/read`` the
proxy sends while serving it takes along, as the client sent them:

- its ``progressToken``: every ``notifications/progress`` the upstream sends under it goes to
  the client's progress stream as sent (``_progress``), never through a token of the proxy's;
- at the 2026-07-28 revision on both sides, the per-request ``_meta`` the client gave (its
  ``clientCapabilities``, limited to what the proxy can pass on: elicitation, sampling and
  roots; its ``logLevel``), and the ``inputResponses`` and ``requestState`` of a retried
  request.

An upstream's ``InputRequiredResult`` is not a result of the request: it is kept for the front
end (``Carried.interim``), which answers the client with it as sent, and the SDK and the
registry see a complete result that says input was required (the call's record says so).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._progress import ProgressStream

__all__ = [
    "CARRIED_METHODS",
    "Carried",
    "carried",
    "carry_streams",
    "is_modern",
    "serving",
]

#: The requests a client may retry with ``inputResponses`` (and that may ask for input).
CARRIED_METHODS = ("tools/call", "prompts/get", "resources/read")
_CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
_LOG_KEY = "io.modelcontextprotocol/logLevel"
#: The client capabilities the proxy can serve on the client's behalf.
_RELAYED_CAPS = ("elicitation", "sampling", "roots")
# What the SDK and the registry see in place of an InputRequiredResult.
_STAND_INS: dict[str, dict[str, Any]] = {
    "tools/call": {"content": [{"type": "text", "text": "input required"}]},
    "prompts/get": {"description": "input required", "messages": []},
    "resources/read": {"contents": []},
}


@functools.lru_cache(maxsize=16)
def is_modern(version: str | None) -> bool:
    """Whether ``version`` is a stateless revision (2026-07-28 and later)."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return version in MODERN_PROTOCOL_VERSIONS


@dataclass(slots=True, eq=False)
class Carried:
    """The client request being served: its revision, params and ``_meta``; the stream its
    progress goes to; the upstream's request for input, when it answered with one; and the
    record's progress callback of the call that forwards it."""

    version: str | None
    params: Mapping[str, Any]
    progress: ProgressStream | None = None
    interim: dict[str, Any] | None = None
    on_progress: Callable[[float, float | None, str | None], Any] | None = None
    #: ``inputResponses`` and ``requestState`` the proxy itself sends (a translated round).
    retry: tuple[Mapping[str, Any], str | None] | None = None

    @property
    def meta(self) -> Mapping[str, Any]:
        """The client's ``_meta`` of this request (empty when it sent none)."""
        meta = self.params.get("_meta")
        return meta if isinstance(meta, Mapping) else {}

    @property
    def modern(self) -> bool:
        """Whether the client speaks a stateless revision."""
        return is_modern(self.version)


_CARRIED: contextvars.ContextVar[Carried | None] = contextvars.ContextVar(
    "tooltrace_mcp_carried", default=None)


def carried() -> Carried | None:
    """The client request this task serves (set by the front end), or None."""
    return _CARRIED.get()


def serving(request: Carried) -> _Serving:
    """While the block runs, ``carried()`` is ``request`` (in tasks started in it too)."""
    return _Serving(request)


class _Serving:
    """``serving``'s block."""

    __slots__ = ("_request", "_token")

    def __init__(self, request: Carried) -> None:
        self._request = request

    def __enter__(self) -> Carried:
        self._token = _CARRIED.set(self._request)
        return self._request

    def __exit__(self, *_exc: object) -> None:
        _CARRIED.reset(self._token)


class _Routes:
    """One upstream connection's requests sent for a carried client request (by JSON-RPC id)
    and the progress tokens they go under."""

    def __init__(self, version: Callable[[], str | None]) -> None:
        self.version = version
        self.requests: dict[Any, tuple[str, Carried, Any]] = {}
        self.tokens: dict[Any, Carried] = {}
        self._minted = itertools.count(1)
        self._recording: set[asyncio.Future[Any]] = set()

    def outgoing(self, request: Any) -> Any:
        """The request as it goes upstream (``request`` itself when nothing is carried)."""
        c = _CARRIED.get()
        if c is None or request.method not in CARRIED_METHODS:
            return request
        params = dict(request.params or {})
        meta = dict(params.get("_meta") or {})
        token = None
        if c.progress is not None and request.method == "tools/call":
            token = c.progress.token
            if token in self.tokens:  # another call already uses it on this connection
                token = f"tooltrace-{next(self._minted)}"
            meta["progressToken"] = token
            self.tokens[token] = c
            c.progress.direct = True
        if is_modern(self.version()):
            if c.modern:
                caps = c.meta.get(_CAPS_KEY)
                if isinstance(caps, Mapping):
                    meta[_CAPS_KEY] = {k: v for k, v in caps.items() if k in _RELAYED_CAPS}
                if _LOG_KEY in c.meta:
                    meta[_LOG_KEY] = c.meta[_LOG_KEY]
            responses, state = c.retry if c.retry is not None else (
                c.params.get("inputResponses"), c.params.get("requestState"))
            if isinstance(responses, Mapping):
                params["inputResponses"] = dict(responses)
            if isinstance(state, str):
                params["requestState"] = state
        if meta:
            params["_meta"] = meta
        self.requests[request.id] = (request.method, c, token)
        return request.model_copy(update={"params": params})

    def forget(self, request_id: Any) -> None:
        """A request that will get no answer (cancelled): stop routing for it."""
        sent = self.requests.pop(request_id, None)
        if sent is not None and sent[2] is not None:
            self.tokens.pop(sent[2], None)

    def _record(self, on_progress: Callable[..., Any], params: Mapping[str, Any]) -> None:
        """The report for the call's record (the registry checks and rate-limits it)."""
        done, total, note = params.get("progress"), params.get("total"), params.get("message")
        if not isinstance(done, int | float) or isinstance(done, bool):
            return
        total = total if isinstance(total, int | float) and not isinstance(total, bool) else None
        got = on_progress(float(done), float(total) if total is not None else None,
                          note if isinstance(note, str) else None)
        if inspect.isawaitable(got):
            task = asyncio.ensure_future(got)
            self._recording.add(task)
            task.add_done_callback(self._recording.discard)

    def incoming(self, message: Any) -> Any:
        """The message as the SDK gets it; None when it was taken here (progress)."""
        method = getattr(message, "method", None)
        if method == "notifications/progress":
            params = message.params if isinstance(message.params, dict) else {}
            c = self.tokens.get(params.get("progressToken"))
            if c is None:
                return message
            if c.progress is not None:
                c.progress.put(params)
            if c.on_progress is not None:
                self._record(c.on_progress, params)
            return None
        if method is not None or not hasattr(message, "id"):
            return message
        result = getattr(message, "result", None)
        if isinstance(result, dict) and "resultType" not in result and is_modern(self.version()):
            # A result that does not say what it is, is complete (the reading the revision
            # gives older servers' results); the SDK's checks of the revision require it said.
            message = message.model_copy(update={"result": {**result, "resultType": "complete"}})
        sent = self.requests.pop(message.id, None)
        if sent is None:
            return message
        kind, c, token = sent
        if token is not None:
            self.tokens.pop(token, None)
        result = getattr(message, "result", None)
        if isinstance(result, dict) and result.get("resultType") == "input_required":
            c.interim = result
            stand_in = {**_STAND_INS[kind], "resultType": "complete"}
            return message.model_copy(update={"result": stand_in})
        return message




class _Read:
    """The SDK's read stream, with carried messages taken or rewritten (``_Routes``)."""

    def __init__(self, inner: Any, routes: _Routes) -> None:
        self._inner, self._routes = inner, routes

    async def __aenter__(self) -> _Read:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    def __aiter__(self) -> _Read:
        return self

    async def __anext__(self) -> Any:
        while True:
            item = await self._inner.__anext__()
            message = getattr(item, "message", None)
            if message is None:  # a transport exception: the SDK's to handle
                return item
            kept = self._routes.incoming(message)
            if kept is None:
                continue
            if kept is not message:
                item = type(item)(message=kept, metadata=item.metadata)
            return item

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message (the SDK reads it when there is one)."""
        return getattr(self._inner, "last_context", None)

    async def aclose(self) -> None:
        """Close the stream."""
        await self._inner.aclose()


class _Write:
    """The SDK's write stream, with carried requests rewritten (``_Routes``)."""

    def __init__(self, inner: Any, routes: _Routes) -> None:
        self._inner, self._routes = inner, routes

    async def __aenter__(self) -> _Write:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    async def send(self, item: Any) -> None:
        """Send one message (a carried request as it goes upstream)."""
        message = getattr(item, "message", None)
        method = getattr(message, "method", None)
        if method in CARRIED_METHODS and getattr(message, "id", None) is not None:
            out = self._routes.outgoing(message)
            if out is not message:
                item = type(item)(message=out, metadata=item.metadata)
        elif method == "notifications/cancelled":
            params = getattr(message, "params", None)
            if isinstance(params, dict):
                self._routes.forget(params.get("requestId"))
        await self._inner.send(item)

    async def aclose(self) -> None:
        """Close the stream."""
        await self._inner.aclose()


def carry_streams(read: Any, write: Any, version: Callable[[], str | None]) -> tuple[Any, Any]:
    """The connection's ``(read, write)`` streams, carrying client requests across;
    ``version()`` is the revision the connection speaks (once negotiated)."""
    routes = _Routes(version)
    return _Read(read, routes), _Write(write, routes)
