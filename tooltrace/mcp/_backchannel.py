"""Server-to-client requests through the proxy: sampling, elicitation and roots.

An upstream server may ask its client to sample an LLM (``sampling/createMessage``), to ask
the user (``elicitation/create``) or for its roots (``roots/list``): while it serves a request
of the proxy (a ``tools/call``, a ``resources/read``, a ``prompts/get``), or on its own (roots
right after ``initialize``, or after the client said its roots changed). The upstream's
``ClientSession`` gets the callbacks built here; each forwards the request to the proxy's
client: while the proxy is serving a client request through that upstream connection, the
client of that request (the newest, when several are in flight), tied to that request so that
over streamable HTTP it rides the request's stream; otherwise the client the connection belongs
to (``fallback``: over stdio the one client; over HTTP the client session the upstream session
was opened for), on its own channel. The client's answer goes back as the upstream's answer.
With no client to ask, or a client that did not declare the capability, the upstream gets the
error the SDK's client gives when it has no callback. Only the method, whether it belonged to
a request, and how it ended are logged, never the messages or the answers. Each request is also
audited, through the registry, as a call of its own kind (``_serverrequests``): a child of the
call it was asked during, when there is one.

A client with no MCP session id (streamable HTTP in stateless mode) has no connection of its
own: its requests run on the shared connections, where a server-to-client request cannot be
told apart between such clients. Such requests are declined (never routed to another client).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..model import ToolCall
from ..runtime import current_context
from ._serverrequests import (
    CAPABILITIES,
    ClientAnswerError,
    ClientDeclined,
    describe_answer,
    describe_request,
    server_request_name,
)

if TYPE_CHECKING:
    import mcp.types as mt

    from ..registry import ToolRegistry

__all__ = ["Backchannel", "ClientRequest", "current_request"]

log = logging.getLogger("tooltrace.mcp")

# How long a request made before any client is there (roots right after the upstream's
# initialize, at the proxy's start) waits for one.
_WAIT_FOR_CLIENT_S = 10.0


@dataclass(frozen=True, slots=True)
class _Serving:
    session: Any
    request_id: Any
    call: Any = None  # the CallContext of the registry call being served, if any


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """The client request being served: the client (its MCP session id, ``""`` over stdio),
    the downstream session it came on, and its JSON-RPC id (None for a notification)."""

    client: str
    session: Any
    request_id: Any


_CURRENT: contextvars.ContextVar[ClientRequest | None] = contextvars.ContextVar(
    "tooltrace_mcp_client_request", default=None)


def current_request() -> ClientRequest | None:
    """The client request this task serves (set by the server front end), or None."""
    return _CURRENT.get()


class _Current:
    """``Backchannel.request``'s block (a class: one is entered on every call)."""

    __slots__ = ("_req", "_token")

    def __init__(self, req: ClientRequest) -> None:
        self._req = req

    def __enter__(self) -> None:
        self._token = _CURRENT.set(self._req)

    def __exit__(self, *_exc: object) -> None:
        _CURRENT.reset(self._token)


class _Pushed:
    """``Backchannel.serving``'s block: ``entry`` on ``stack`` while it runs."""

    __slots__ = ("_entry", "_stack")

    def __init__(self, stack: list[_Serving], entry: _Serving) -> None:
        self._stack, self._entry = stack, entry

    def __enter__(self) -> None:
        self._stack.append(self._entry)

    def __exit__(self, *_exc: object) -> None:
        self._stack.remove(self._entry)


class Backchannel:
    """The client requests in flight per upstream, and the upstreams' callbacks to reach them."""

    def __init__(self) -> None:
        self._serving: dict[str, list[_Serving]] = {}
        #: The registry that audits the requests (set by the ``Forwarder``), and the names of
        #: the request kinds registered in it (``Forwarder.register``).
        self.registry: ToolRegistry | None = None
        self.audited: set[str] = set()
        #: Set once a client finished its handshake (``Forwarder.seen``).
        self.client_arrived = asyncio.Event()

    @staticmethod
    def request(req: ClientRequest) -> contextlib.AbstractContextManager[None]:
        """While the block runs, ``current_request()`` is ``req`` (in tasks started in it too)."""
        return _Current(req)

    @staticmethod
    def serving_client(client: tuple[Any, Any] | None) -> contextlib.AbstractContextManager[None]:
        """``request(...)`` for a downstream ``(session, request id)`` given by a caller (the
        client's MCP session id kept from the request being served, if it is the same)."""
        req = _CURRENT.get()
        if client is None or (req is not None and req.session is client[0]):
            return contextlib.nullcontext()
        return Backchannel.request(ClientRequest(req.client if req else "", *client))

    def serving(self, key: str, session: Any, request_id: Any
                ) -> contextlib.AbstractContextManager[None]:
        """While the block runs, requests from upstream connection ``key`` go to ``session``."""
        return _Pushed(self._serving.setdefault(key, []),
                       _Serving(session, request_id, current_context()))

    def serving_current(self, key: str) -> contextlib.AbstractContextManager[None]:
        """``serving(key, ...)`` for the client request this task serves (if any)."""
        req = _CURRENT.get()
        if req is None or req.request_id is None:
            return contextlib.nullcontext()
        return self.serving(key, req.session, req.request_id)

    def callbacks(self, key: str, fallback: Callable[[], Any] | None = None
                  ) -> dict[str, Any]:
        """``ClientSession`` keyword arguments that forward the requests of upstream connection
        ``key``; ``fallback()`` names the client session to ask when no request is in flight."""

        async def sampling(context: Any, params: mt.CreateMessageRequestParams) -> Any:
            return await self._forward(key, fallback, "sampling/createMessage", params,
                                       lambda s: _sample(s.session, params, s.request_id))

        async def elicitation(context: Any, params: mt.ElicitRequestParams) -> Any:
            return await self._forward(key, fallback, "elicitation/create", params,
                                       lambda s: _elicit(s.session, params, s.request_id))

        async def list_roots(context: Any) -> Any:
            return await self._forward(key, fallback, "roots/list", None,
                                       lambda s: _list_roots(s.session))

        return {"sampling_callback": sampling, "elicitation_callback": elicitation,
                "list_roots_callback": list_roots}

    def _target(self, key: str, fallback: Callable[[], Any] | None) -> _Serving | None:
        stack = self._serving.get(key)
        if stack:
            return stack[-1]
        return self._outside(fallback)

    def _outside(self, fallback: Callable[[], Any] | None) -> _Serving | None:
        """The client to ask a request that belongs to no request in flight (None while the
        client is still in its handshake: it is not asked yet, see ``_forward``)."""
        ready = self.client_arrived.is_set()
        session = fallback() if fallback is not None and ready else None
        return None if session is None else _Serving(session, None)

    async def _forward(self, key: str, fallback: Callable[[], Any] | None, method: str,
                       params: Any, send: Any) -> Any:
        label = key.split("\0", 1)[0]
        target = self._target(key, fallback)
        if target is None and fallback is not None and not self.client_arrived.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.client_arrived.wait(), _WAIT_FOR_CLIENT_S)
            # Asked while no request was in flight: it stays outside any, even if the client's
            # first request has started by the time the client is there.
            target = self._outside(fallback)
        name = server_request_name(label, CAPABILITIES[method])
        if self.registry is None or name not in self.audited:
            return (await self._ask(key, method, target, send))[1]
        answer: list[Any] = []

        async def ask() -> Any:
            outcome, got = await self._ask(key, method, target, send)
            answer.append(got)
            if outcome == "declined":
                raise ClientDeclined(f"{method} was not forwarded: {got.message}")
            if outcome == "error":
                raise ClientAnswerError(f"the client answered {method} with error {got.code}")
            return describe_answer(got)

        args = describe_request(method, params, target is not None and target.call is not None)
        token = _ASK.set(ask)
        try:
            if target is not None and target.call is not None:
                env = await target.call.acall(name, args)
            else:
                env = await self.registry.acall(ToolCall(name=name, arguments=args, attributes={
                    "mcp.method.name": method, "tooltrace.mcp.server": label}))
        finally:
            _ASK.reset(token)
        if answer:
            return answer[0]
        import mcp.types as mt

        # Refused by the policy, or no answer in time: the upstream hears why, not the details.
        why = "refused by the proxy's policy" if env.reject_stage is not None else (
            f"not answered ({env.record.error_type or env.status})")
        log.info("mcp upstream %s: %s %s", label, method, why)
        return mt.ErrorData(code=mt.INVALID_REQUEST, message=f"{method} {why}")

    def handler(self) -> Any:
        """The registry handler of the request kinds: it runs the request being audited."""

        async def forward_to_client(ctx: Any, /, **arguments: Any) -> Any:
            ask = _ASK.get()
            if ask is None:  # called by anything but a forwarded request: nothing to forward
                raise ClientDeclined("only the proxy forwards server-to-client requests")
            return await ask()

        return forward_to_client

    async def _ask(self, key: str, method: str, target: _Serving | None, send: Any
                   ) -> tuple[str, Any]:
        """Ask ``target``'s client: ``(outcome, answer)``, outcome ``answered``, ``declined``
        or ``error``, answer the result or the ``ErrorData`` for the upstream."""
        import mcp.types as mt
        from mcp.shared.exceptions import MCPError

        label = key.split("\0", 1)[0]
        capability = CAPABILITIES[method]
        if target is None or not _declared(target.session, capability):
            if target is None and self._serving.get(key + "\0"):
                log.warning("mcp upstream %s: %s refused (the calls in flight come from clients "
                            "without a session id)", label, method)
                return "declined", mt.ErrorData(code=mt.INVALID_REQUEST, message=_SESSIONLESS)
            why = "no client to ask" if target is None else "client lacks capability"
            log.warning("mcp upstream %s: %s refused (%s)", label, method, why)
            return "declined", mt.ErrorData(code=mt.INVALID_REQUEST,
                                            message=_UNSUPPORTED[capability])
        where = "outside any request" if target.request_id is None else "during a request"
        try:
            result = await send(target)
        except MCPError as exc:
            log.info("mcp upstream %s: %s (%s) answered by the client with error %s", label,
                     method, where, exc.error.code)
            return "error", exc.error
        except Exception as exc:
            log.warning("mcp upstream %s: %s (%s) could not be forwarded (%s)", label, method,
                        where, type(exc).__name__)
            return "error", mt.ErrorData(code=mt.INTERNAL_ERROR,
                                         message=f"the proxy could not forward {method}")
        log.info("mcp upstream %s: %s (%s) answered by the client", label, method, where)
        return "answered", result


# The request being audited, for the registry handler (set around the registry call).
_ASK: contextvars.ContextVar[Callable[[], Awaitable[Any]] | None] = contextvars.ContextVar(
    "tooltrace_mcp_server_request", default=None)

_SESSIONLESS = ("the proxy cannot route this request to a client: the request it belongs to "
                "came from a client without an MCP session id")

# The SDK client's answers when it has no callback for the request.
_UNSUPPORTED = {"sampling": "Sampling not supported", "elicitation": "Elicitation not supported",
                "roots": "List roots not supported"}


def _declared(session: Any, capability: str) -> bool:
    caps = getattr(session, "client_capabilities", None)
    return caps is not None and getattr(caps, capability, None) is not None


async def _sample(session: Any, p: mt.CreateMessageRequestParams, request_id: Any) -> Any:
    with warnings.catch_warnings():  # sampling: deprecated by the newest protocol only
        warnings.simplefilter("ignore", Warning)
        return await _create_message(session, p, request_id)


async def _create_message(session: Any, p: mt.CreateMessageRequestParams, request_id: Any
                          ) -> Any:
    return await session.create_message(
        p.messages, max_tokens=p.max_tokens, system_prompt=p.system_prompt,
        include_context=p.include_context, temperature=p.temperature,
        stop_sequences=p.stop_sequences, metadata=p.metadata,
        model_preferences=p.model_preferences, tools=p.tools, tool_choice=p.tool_choice,
        related_request_id=request_id)


async def _elicit(session: Any, p: mt.ElicitRequestParams, request_id: Any) -> Any:
    import mcp.types as mt

    if isinstance(p, mt.ElicitRequestURLParams):
        return await session.elicit_url(p.message, p.url, p.elicitation_id,
                                        related_request_id=request_id)
    return await session.elicit_form(p.message, p.requested_schema,
                                     related_request_id=request_id)


async def _list_roots(session: Any) -> Any:
    from mcp.shared.exceptions import MCPDeprecationWarning

    with warnings.catch_warnings():
        # roots are deprecated by the newest protocol, and still forwarded for the servers
        # and clients that use them.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return await session.list_roots()
