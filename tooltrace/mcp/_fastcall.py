"""``tools/call`` to a stdio upstream without the SDK's ``ClientSession`` on the way.

The SDK client turns each request into a pydantic model, a memory-stream hop to its writer, an
OpenTelemetry span, a pending-request stream and a response hop back through its dispatcher:
about half of what the SDK cost a proxied call (``docs/performance/analysis.md``). A
``FastCalls`` owns a second id space on the same connection: its requests carry string ids
``"tt-<n>"``, which never collide with the SDK's integer ids, and are written as JSON-RPC lines
next to the SDK's. The connection's reader hands every line to ``route`` first: the answer to a
fast-path request, and a progress notification for one, are taken here (found by id, parsed
once); every other line goes on to the SDK's ``ClientSession`` as before, so initialization,
listings, notifications and the server's own requests (sampling, elicitation, roots) are the
SDK's, and a server-to-client request made during a fast-path call still reaches the client.

What the upstream sees is what the SDK sent: the same request (with ``progressToken`` in
``_meta`` set to the request id), and ``notifications/cancelled`` with reason ``caller
cancelled`` when the caller gives up. What the caller gets is what the SDK gave: the result
checked against the negotiated protocol version and the tool's output schema (by the
session), an error answer as ``MCPError``, and ``MCPError`` ``CONNECTION_CLOSED`` when the
connection ends first.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import orjson

from ._lines import jsonrpc_message

if TYPE_CHECKING:
    import mcp.types as mt
    from mcp import ClientSession

__all__ = ["FAST_ID_PREFIX", "FastCalls"]

log = logging.getLogger("tooltrace.mcp")

#: How a fast-path request id starts (the SDK's own request ids are integers).
FAST_ID_PREFIX = "tt-"
_MARK = b'"' + FAST_ID_PREFIX.encode()
_CONNECTION_CLOSED = -32000

Progress = Callable[[float, float | None, str | None], Coroutine[Any, Any, None]]
Send = Callable[[bytes], Coroutine[Any, Any, None]]


@dataclass(slots=True)
class _Pending:
    answer: asyncio.Future[dict[str, Any]]
    progress: Progress | None


class FastCalls:
    """The fast-path requests in flight on one upstream connection.

    ``send(line)`` writes one line (with its newline) to the server's stdin, next to the SDK's
    writes (each line is one write, so the two never interleave within a line).
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._pending: dict[str, _Pending] = {}
        self._next = 0
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Requests sent on the fast path on this connection.
        self.calls = 0

    @staticmethod
    def serves(version: str | None) -> bool:
        """Whether a connection at protocol ``version`` can take fast-path calls: the
        handshake-era versions, whose ``tools/call`` result is a plain ``CallToolResult``."""
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        return version in HANDSHAKE_PROTOCOL_VERSIONS

    # -- the reader's side -----------------------------------------------------------------

    def route(self, line: bytes) -> bool:
        """Take ``line`` if it answers a fast-path request or reports its progress; False
        leaves it to the SDK (everything else, and anything malformed)."""
        msg = jsonrpc_message(line, _MARK) if self._pending else None
        if msg is None:
            return False
        if "method" in msg:
            return self._progress(msg)
        pending = self._pending.get(msg.get("id"))  # type: ignore[arg-type]
        if pending is None or not _answer(msg):
            return False  # the SDK's reader judges it (a malformed answer breaks the connection)
        if not pending.answer.done():
            pending.answer.set_result(msg)
        return True

    def _progress(self, msg: dict[str, Any]) -> bool:
        params = msg.get("params")
        if msg.get("method") != "notifications/progress" or not isinstance(params, dict):
            return False
        token = params.get("progressToken")
        pending = self._pending.get(token) if isinstance(token, str) else None
        if pending is None:
            return False
        done, total, message = params.get("progress"), params.get("total"), params.get("message")
        if pending.progress is not None and _number(done) and (total is None or _number(total)):
            task = asyncio.get_running_loop().create_task(pending.progress(
                float(done), None if total is None else float(total),  # type: ignore[arg-type]
                message if isinstance(message, str) else None))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return True

    def close(self) -> None:
        """The connection ended: every request in flight fails as the SDK's would."""
        from mcp.shared.exceptions import MCPError

        self._closed = True
        for pending in self._pending.values():
            if not pending.answer.done():
                pending.answer.set_exception(
                    MCPError(code=_CONNECTION_CLOSED, message="Connection closed"))

    # -- the caller's side -----------------------------------------------------------------

    async def call(self, session: ClientSession, version: str, name: str,
                   arguments: Mapping[str, Any], *, meta: Mapping[str, Any] | None,
                   progress: Progress | None) -> mt.CallToolResult:
        """Send one ``tools/call`` and return its checked result (``MCPError`` for an error
        answer or a closed connection; a cancel is passed on to the server)."""
        import anyio
        from mcp.shared.exceptions import MCPError

        if self._closed:
            raise MCPError(code=_CONNECTION_CLOSED, message="Connection closed")
        self._next += 1
        rid = f"{FAST_ID_PREFIX}{self._next}"
        out_meta = dict(meta or {})
        if progress is not None:
            out_meta["progressToken"] = rid  # as the SDK does: the request id is the token
        params: dict[str, Any] = {"name": name, "arguments": dict(arguments)}
        if out_meta:
            params["_meta"] = out_meta
        answer = asyncio.get_running_loop().create_future()
        self._pending[rid] = _Pending(answer, progress)
        written = False
        try:
            line = _dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
            written = True  # a cancelled write may still have gone out: it counts as sent
            try:
                await self._send(line)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                # The server is gone: the SDK's answer for a request it could not write.
                raise MCPError(code=_CONNECTION_CLOSED, message="Connection closed") from None
            self.calls += 1
            msg = await answer
        except asyncio.CancelledError:
            if written and not self._closed:
                self._cancel_upstream(rid)
            raise
        finally:
            self._pending.pop(rid, None)
        error = msg.get("error")
        if error is not None:
            raise _error(error)
        return await _result(session, version, name, msg["result"])

    def _cancel_upstream(self, rid: str) -> None:
        note = _dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": rid, "reason": "caller cancelled"}})
        task = asyncio.get_running_loop().create_task(self._send(note))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_swallow)


def _answer(msg: dict[str, Any]) -> bool:
    """Whether ``msg`` is a well-formed JSON-RPC answer: a result object or an error."""
    if ("result" in msg) == ("error" in msg):
        return False
    if "result" in msg:
        return isinstance(msg["result"], dict)
    err = msg["error"]
    return isinstance(err, dict) and _integer(err.get("code")) and isinstance(
        err.get("message"), str)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _swallow(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("mcp upstream: a cancel could not be sent (the connection is gone)")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj) + b"\n"
    except TypeError:  # an integer beyond 64 bits, which JSON itself allows
        return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def _error(error: Any) -> Exception:
    from mcp.shared.exceptions import MCPError
    from mcp.types import ErrorData

    try:
        data = ErrorData.model_validate(error)
    except ValueError:
        return ValueError("an error answer that is not JSON-RPC")
    return MCPError(code=data.code, message=data.message, data=data.data)


@cache
def _later_fields(version: str) -> frozenset[str]:
    """Result keys only a revision newer than ``version`` declares (dropped, as the SDK
    does, so they cannot trip a later revision's constraints)."""
    from mcp_types import methods
    from mcp_types.version import KNOWN_PROTOCOL_VERSIONS

    current = methods.SERVER_RESULTS.get(("tools/call", version))
    if current is None or version not in KNOWN_PROTOCOL_VERSIONS:
        return frozenset()
    later: set[str] = set()
    for revision in KNOWN_PROTOCOL_VERSIONS[KNOWN_PROTOCOL_VERSIONS.index(version) + 1:]:
        row = methods.SERVER_RESULTS.get(("tools/call", revision))
        if row is not None:
            later |= _wire_fields(row)
    return frozenset(later - _wire_fields(current))


def _wire_fields(model: Any) -> set[str]:
    from typing import get_args

    from pydantic import BaseModel

    members = get_args(model) or (model,)
    out: set[str] = set()
    for m in members:
        if isinstance(m, type) and issubclass(m, BaseModel):
            out |= {f.alias or n for n, f in m.model_fields.items()}
    return out


@cache
def _surface(version: str) -> Any:
    """The protocol revision's ``tools/call`` result as a pydantic ``TypeAdapter`` (None when
    the revision declares none), as ``methods.validate_server_result`` checks it."""
    from mcp_types import methods
    from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
    from pydantic import TypeAdapter

    if version not in KNOWN_PROTOCOL_VERSIONS:
        raise ValueError(f"version must be a known protocol version, got {version!r}")
    model = methods.SERVER_RESULTS.get(("tools/call", version))
    return None if model is None else TypeAdapter(model)  # type: ignore[arg-type]


async def _result(session: ClientSession, version: str, name: str, raw: Any
                  ) -> mt.CallToolResult:
    """The SDK client's checks of a ``tools/call`` result, in its order."""
    import mcp.types as mt

    if not isinstance(raw, dict):
        raise ValueError("a tools/call result that is not an object")
    surface = _surface(version)
    if surface is not None:  # validate_server_result's check, without the dump it throws away
        surface.validate_python(raw, by_name=False)
    if not (foreign := _later_fields(version)).isdisjoint(raw):
        raw = {k: v for k, v in raw.items() if k not in foreign}
    result = mt.CallToolResult.model_validate(raw, by_name=False)
    if not result.is_error:
        await session.validate_tool_result(name, result)
    return result
