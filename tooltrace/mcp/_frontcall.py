"""``tools/call`` from a stdio client without the SDK's server dispatch on the way.

For every request the SDK's server parses the line into a pydantic message, hops it through a
memory stream to its dispatcher, starts a task, builds a context and session, validates the
params twice, validates and dumps the result and hops the answer back to the writer. A
``FrontCalls`` takes a ``tools/call`` line as the stdio reader splits it (``_stdio``,
``_lines``) instead, once the SDK has seen the client's ``initialize`` and
``notifications/initialized``: it checks the params with the SDK's own validators (a request
they refuse goes to the SDK, which answers it as it always did), runs the server's own
middleware (the SERVER span) and ``tools/call`` handler in a task of its own, shapes the result
with the SDK's per-version serialiser and writes the SDK's JSON-RPC envelope as one line on the
transport the SDK's messages go out on. ``notifications/cancelled`` naming one of its requests
cancels the call by tooltrace's cancel contract (the handler says how, ``FRONT_CANCEL``; the
task itself is cancelled only before the handler has said) and no answer is sent. The progress
of a call that asked for it (a ``progressToken``) is written the same way (``FRONT_PROGRESS``),
so it cannot follow the answer. Server-to-client requests made during a call (sampling,
elicitation, roots) go out on the session the SDK built for the client's
``notifications/initialized``: over stdio every message shares one pipe, so no request id is
needed to route them. Everything else is the SDK's.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import logging
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import orjson

from ._lines import jsonrpc_message

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

__all__ = ["FRONT_CANCEL", "FRONT_PROGRESS", "FrontCalls"]

log = logging.getLogger("tooltrace.mcp")

Write = Callable[[bytes], Coroutine[Any, Any, None]]

#: Where the progress of the ``tools/call`` this task serves goes, when the fast path serves it:
#: an object with the SDK session's ``send_progress_notification`` (None elsewhere).
FRONT_PROGRESS: ContextVar[Any] = ContextVar("tooltrace_front_progress", default=None)
#: Where the handler of the ``tools/call`` this task serves, on the fast path, puts how to cancel
#: its call (None elsewhere). With one there, a client's cancel or the end of stdin runs it
#: instead of cancelling the task: the call ends by tooltrace's cancel contract and its record
#: is complete, with no task of its own needed to shield it from the cancel.
FRONT_CANCEL: ContextVar[list[Callable[[], object]] | None] = ContextVar(
    "tooltrace_front_cancel", default=None)

_CALL = b'"tools/call"'
_CANCEL = b'"notifications/cancelled"'


class FrontCalls:
    """The ``tools/call`` requests a stdio client sent that the proxy serves itself.

    ``attach`` puts it on the server it serves calls for (its middleware remembers the
    initialized session); the stdio reader offers every line to ``take`` and calls ``aclose``
    when reading ends.
    """

    def __init__(self) -> None:
        self._server: Server[Any] | None = None
        self._ctx: Any = None  # the context of the client's notifications/initialized
        self._write: Write | None = None
        self._context: contextvars.Context | None = None
        self._calls: dict[Any, _Call] = {}
        self._cancelled: set[Any] = set()
        #: ``tools/call`` requests served here rather than by the SDK's server.
        self.calls = 0

    def attach(self, server: Server[Any]) -> None:
        """Serve ``tools/call`` with ``server``'s middleware and handler."""
        self._server = server
        server.middleware.append(self._capture)

    async def _capture(self, ctx: Any, call_next: Any) -> Any:
        # Server middleware: remember the session once the client is initialized.
        result = await call_next(ctx)
        if ctx.method == "notifications/initialized" and ctx.request_id is None:
            from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

            if str(ctx.protocol_version) in HANDSHAKE_PROTOCOL_VERSIONS:
                self._ctx = ctx
        return result

    def bind(self, write: Write) -> None:
        """Answers go out through ``write`` (one whole line at a time, on the transport the
        SDK's messages go out on). The calls' tasks start in a copy of the context this is
        called in (the stdio reader offers lines from the event loop's callbacks)."""
        self._write = write
        self._context = contextvars.copy_context()

    # -- the reader's side -----------------------------------------------------------------

    def take(self, line: bytes) -> bool:
        """Serve ``line`` here if it is a ``tools/call`` this path can answer as the SDK would,
        or a cancel of one of its requests; False leaves it to the SDK."""
        if self._ctx is None or self._write is None:
            return False
        msg = jsonrpc_message(line, _CALL, _CANCEL)
        if msg is None:
            return False
        method = msg.get("method")
        if method == "notifications/cancelled" and "id" not in msg:
            return self._cancel(msg.get("params"))
        rid = msg.get("id")
        if method != "tools/call" or not _request_id(rid):
            return False
        key = _key(rid)
        return key not in self._calls and self._start(rid, key, msg.get("params"))

    def _cancel(self, params: Any) -> bool:
        rid = params.get("requestId") if isinstance(params, dict) else None
        key = _key(rid) if _request_id(rid) else None
        call = self._calls.get(key)
        if call is None:
            return False
        self._cancelled.add(key)
        if call.cancel:
            call.cancel[0]()
        else:
            call.task.cancel()
        return True

    def _start(self, rid: Any, key: Any, params: Any) -> bool:
        methods = _sdk().methods
        if not isinstance(params, dict):
            return False  # the SDK answers a malformed request
        version = str(self._ctx.protocol_version)
        server = self._server
        assert server is not None
        entry = server.get_request_handler("tools/call")
        if entry is None or "tools/call" in server.cache_hints:
            return False
        try:  # the SDK's checks, in its order; a refusal is the SDK's to word
            if not _plain(params):  # (a name and arguments alone pass the first at any version)
                methods.validate_client_request("tools/call", version, params)
            typed = entry.params_type.model_validate(params, by_name=False)
        except Exception:
            return False
        # The SDK reads _meta as RequestParams does: the same field as the typed params'.
        meta = getattr(typed, "meta", None) if "_meta" in params else None
        ctx = dataclasses.replace(self._ctx, method="tools/call", params=params, request_id=rid,
                                  meta=meta)
        cancel: list[Callable[[], object]] = []
        task = asyncio.get_running_loop().create_task(
            self._serve(ctx, key, server.middleware, entry.handler, typed, cancel),
            context=self._context.copy() if self._context is not None else None)
        self._calls[key] = _Call(task, rid, cancel)
        task.add_done_callback(lambda _t: self._forget(key))
        self.calls += 1
        return True

    def _forget(self, key: Any) -> None:
        self._calls.pop(key, None)
        self._cancelled.discard(key)

    # -- one call --------------------------------------------------------------------------

    async def _serve(self, ctx: Any, key: Any, middlewares: list[Any], handler: Any,
                     typed: Any, cancel: list[Callable[[], object]]) -> None:
        sdk = _sdk()
        mt, methods = sdk.types, sdk.methods

        version = str(ctx.protocol_version)
        FRONT_PROGRESS.set(self)  # this task's: the call's progress goes out as its answer does
        FRONT_CANCEL.set(cancel)

        async def inner(c: Any) -> Any:
            result = await handler(c, typed)
            if isinstance(result, mt.ErrorData):
                from mcp.shared.exceptions import MCPError

                raise MCPError.from_error_data(result)
            # A mapping is a result already in wire form (the upstream's, handed on); the
            # SDK's runner takes one the same way.
            dumped = (dict(result) if isinstance(result, dict) else
                      result.model_dump(by_alias=True, mode="json", exclude_none=True)
                      if result is not None else {})
            try:
                return methods.serialize_server_result("tools/call", version, dumped)
            except sdk.ValidationError:
                log.error("mcp proxy: a tools/call result did not fit the protocol's shape")
                from mcp.shared.exceptions import MCPError

                raise MCPError(code=sdk.INTERNAL_ERROR,
                               message="Handler returned an invalid result") from None

        call = inner
        for middleware in reversed(middlewares):
            call = _bind(middleware, call)
        rid = ctx.request_id  # answered as sent; cancels find it by key (_key), as the SDK's do
        message: Any
        try:
            result = await call(ctx)
            message = _response(rid, result)
        except asyncio.CancelledError:
            if key in self._cancelled:  # the client cancelled it: no answer (as the SDK)
                return
            await self._send(_connection_closed(rid))
            raise
        except Exception as exc:
            error = sdk.handler_exception_to_error_data(exc)
            if error is None:  # the handler maps its own failures; this is the proxy's bug
                log.error("mcp proxy: internal error answering a call", exc_info=True)
                error = mt.ErrorData(code=sdk.INTERNAL_ERROR, message="Internal error")
            message = mt.JSONRPCError(jsonrpc="2.0", id=rid, error=error)
        if key in self._cancelled:  # cancelled (or answered when stdin ended): no answer
            return
        await self._send(message)

    async def send_progress_notification(
            self, progress_token: str | int, progress: float, total: float | None = None,
            message: str | None = None, related_request_id: str | None = None) -> None:
        """A call's ``notifications/progress``, built and written as the SDK's session would,
        on the transport its answer goes out on (so it cannot follow the answer)."""
        import mcp.types as mt

        note = mt.ProgressNotification(params=mt.ProgressNotificationParams(
            progress_token=progress_token, progress=progress, total=total, message=message))
        data = note.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self._send(mt.JSONRPCNotification(jsonrpc="2.0", method=data["method"],
                                                params=data["params"]))

    async def send_notification(self, notification: Any,
                                related_request_id: str | None = None) -> None:
        """A notification about the call (its wire form from ``notification.model_dump``),
        written as the SDK's session would send it, on the transport its answer goes out on."""
        import mcp.types as mt

        data = notification.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self._send(mt.JSONRPCNotification(jsonrpc="2.0", method=data["method"],
                                                params=data.get("params")))

    async def _send(self, message: Any) -> None:
        assert self._write is not None
        data = (message if isinstance(message, bytes) else
                message.model_dump_json(by_alias=True, exclude_unset=True).encode())
        try:
            await self._write(data + b"\n")
        except Exception:
            log.debug("mcp proxy: an answer could not be written (the client is gone)")

    async def aclose(self) -> None:
        """Reading ended: calls still running end as the SDK's do (``CONNECTION_CLOSED``).

        A call whose handler said how to cancel it is answered at once and cancelled by
        tooltrace's contract; it finishes its record on its own (``FRONT_CANCEL``)."""
        waited = []
        for key, call in list(self._calls.items()):
            if not call.cancel:
                call.task.cancel()
                waited.append(call.task)
            elif key not in self._cancelled:
                self._cancelled.add(key)
                call.cancel[0]()
                await self._send(_connection_closed(call.rid))
        if waited:
            await asyncio.gather(*waited, return_exceptions=True)


@dataclasses.dataclass(slots=True)
class _Call:
    """One ``tools/call`` served here: its task, its request id as sent, and how to cancel it
    (filled by its handler through ``FRONT_CANCEL``; empty: cancel the task)."""

    task: asyncio.Task[None]
    rid: Any
    cancel: list[Callable[[], object]]


def _connection_closed(rid: Any) -> Any:
    """The SDK's answer to a request still running when the connection ended."""
    sdk = _sdk()
    return sdk.types.JSONRPCError(jsonrpc="2.0", id=rid, error=sdk.types.ErrorData(
        code=sdk.CONNECTION_CLOSED, message="Connection closed"))


def _response(rid: Any, result: dict[str, Any]) -> Any:
    """The JSON-RPC answer carrying ``result`` (already in its JSON shape), as the bytes the
    SDK's writer makes of a ``JSONRPCResponse``; the model itself for what orjson cannot
    encode (an integer beyond 64 bits)."""
    try:
        return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result})
    except TypeError:
        import mcp.types as mt

        return mt.JSONRPCResponse(jsonrpc="2.0", id=rid, result=result)


def _bind(middleware: Any, call_next: Any) -> Any:
    async def call(ctx: Any) -> Any:
        return await middleware(ctx, call_next)

    return call


def _key(rid: Any) -> Any:
    """The id a request is known by in flight: ``"7"`` and ``7`` are one request, as for the
    SDK's server (a client may echo an integer id as text in its cancel)."""
    return _coerce()(rid)


@functools.cache
def _sdk() -> Any:
    """The SDK's names a call on this path uses, imported once (``tooltrace.mcp`` itself
    imports none of the SDK; an import statement in the call's path costs on every call)."""
    import types

    import mcp.types as mt
    from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
    from mcp_types import methods
    from mcp_types.jsonrpc import CONNECTION_CLOSED, INTERNAL_ERROR
    from pydantic import ValidationError

    return types.SimpleNamespace(
        types=mt, methods=methods, ValidationError=ValidationError,
        handler_exception_to_error_data=handler_exception_to_error_data,
        CONNECTION_CLOSED=CONNECTION_CLOSED, INTERNAL_ERROR=INTERNAL_ERROR)


@functools.cache
def _coerce() -> Callable[[Any], Any]:
    from mcp.shared.dispatcher import coerce_request_id

    return coerce_request_id


_PLAIN_KEYS = frozenset(("name", "arguments"))


def _plain(params: dict[str, Any]) -> bool:
    """Whether ``params`` are a tool's name and a JSON object of arguments (or none) and
    nothing else: what every handshake-era revision's ``CallToolRequestParams`` accepts."""
    args = params.get("arguments")
    return (params.keys() <= _PLAIN_KEYS and type(params.get("name")) is str
            and (args is None or type(args) is dict))


def _request_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))

