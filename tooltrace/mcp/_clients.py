"""One upstream session per client session, for a proxy that serves several clients (HTTP).

An MCP session carries state the protocol does not tag with a client: subscriptions, the
logging level, log messages, and the server-to-client requests (sampling, elicitation, roots)
that a stdio connection cannot tie to the request that caused them. Over streamable HTTP the
proxy therefore gives each client session (``Mcp-Session-Id``) its own connection to each
upstream, opened on the first request that needs that upstream and closed when the client ends
its session (``DELETE``), when the session has been idle for ``idle_timeout_s`` (no request in
flight and no open stream: the SDK ends the session then too, and its id gets 404), when its
session is gone (the SDK answered 404), when more than ``MAX_CLIENTS`` clients have connections
(the least recently active loses them), or when the proxy stops. Each closing is logged with
its reason. Everything the upstream sends on that connection goes to that
client only. The connections opened at start serve the one client over stdio, and over HTTP
list the tools, check the pins and serve the requests of clients that send no session id
(stateless mode); a server-to-client request on them is declined.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._backchannel import current_request
from ._carry import carried
from ._errors import UpstreamUnavailable
from ._upstream import Upstream

if TYPE_CHECKING:
    from ._protocol import Forwarder

__all__ = ["MAX_CLIENTS", "ClientUpstreams"]

log = logging.getLogger("tooltrace.mcp")

#: Client sessions that may hold upstream connections at once (the least recent is closed).
MAX_CLIENTS = 64


class ClientUpstreams:
    """The upstream connections of each client session (used only when ``enabled``)."""

    def __init__(self, forwarder: Forwarder,
                 on_tools: Callable[[Upstream, list[dict[str, Any]]], None],
                 idle_timeout_s: float = 600.0) -> None:
        self.forwarder = forwarder
        self.backchannel = forwarder.backchannel
        self.on_tools = on_tools
        forwarder.pick = self.pick  # resources, prompts and the rest use the same connections
        #: Set by the HTTP front end: each client session gets upstream connections of its own.
        self.enabled = False
        # client -> {backchannel key -> the task opening (then holding) that connection}
        self._clients: OrderedDict[str, dict[str, asyncio.Task[Upstream]]] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()
        #: How long a client session may be idle before its connections are closed.
        self.idle_timeout_s = idle_timeout_s
        # client -> HTTP requests of it in flight (open streams included), and the timer that
        # closes its connections once it has had none for idle_timeout_s.
        self._inflight: dict[str, int] = {}
        self._idle: dict[str, asyncio.TimerHandle] = {}

    async def pick(self, primary: Upstream) -> tuple[Upstream, str]:
        """The connection to ``primary``'s server for the client request being served, and
        its key for ``Backchannel.serving``; ``primary`` itself unless enabled."""
        req = current_request()
        if not self.enabled or req is None:
            return primary.era_for(carried()), primary.label
        if not req.client:
            # No session id: the shared connection, under a key its callbacks never route to
            # (its server-to-client requests are declined, never sent to another client).
            return primary.era_for(carried()), f"{primary.label}\0"
        key = f"{primary.label}\0{req.client}"
        conns = self._clients.get(req.client)
        if conns is None:
            conns = self._clients[req.client] = {}
            while len(self._clients) > MAX_CLIENTS:
                self.close_client(next(iter(self._clients)), "was the least recently active")
        self._clients.move_to_end(req.client)
        task = conns.get(key)
        if task is None:
            # In a context of its own: the connection outlives the request that opened it.
            task = conns[key] = asyncio.get_running_loop().create_task(
                self._open(primary, req.client, key), context=contextvars.Context())
        try:
            return await asyncio.shield(task), key
        except Exception as exc:
            if conns.get(key) is task:
                del conns[key]  # the next request tries again
            raise UpstreamUnavailable(
                f"server {primary.label} could not be started for this client session"
            ) from exc

    async def _open(self, primary: Upstream, client: str, key: str) -> Upstream:
        fw = self.forwarder

        async def notify(up: Upstream, message: Any) -> None:
            await fw.on_notify(up, message, client=client)

        # A client with a session speaks a handshake revision: its connection does too, when
        # the server does.
        up = Upstream(primary.config, on_tools=self.on_tools, on_notify=notify,
                      callbacks=self.backchannel.callbacks(key, lambda: fw.session_of(client)),
                      prefer="handshake")
        try:
            await up.start()
        except BaseException:
            await up.aclose()
            raise
        log.info("mcp upstream %s: connected for a client session", primary.label)
        return up

    def current(self, primaries: Mapping[str, Upstream]) -> list[Upstream]:
        """The connections open for the client request being served (``primaries`` unless
        enabled; a client that opened none has none)."""
        req = current_request()
        if not self.enabled or req is None or not req.client:
            return [p.era_for(carried()) for p in primaries.values()]
        tasks = self._clients.get(req.client, {}).values()
        return [t.result() for t in tasks if t.done() and not t.cancelled()
                and t.exception() is None]

    def close_client(self, client: str, why: str = "ended") -> None:
        """Close ``client``'s upstream connections (in the background)."""
        timer = self._idle.pop(client, None)
        if timer is not None:
            timer.cancel()
        conns = self._clients.pop(client, None)
        if not conns:
            return
        log.info("mcp proxy: a client session %s; closing its %d upstream connection(s)",
                 why, len(conns))
        task = asyncio.ensure_future(_close(list(conns.values())))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every client's connections."""
        for client in list(self._clients):
            self.close_client(client, "outlived the proxy")
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def watch(self, app: Any) -> Any:
        """``app`` (the streamable HTTP ASGI app), closing a client's connections once its
        session ends (``DELETE``), has been idle for ``idle_timeout_s``, or is gone (404)."""

        async def watched(scope: Any, receive: Any, send: Any) -> None:
            if scope.get("type") != "http":
                await app(scope, receive, send)
                return
            client = _session_header(scope)
            status: list[int] = []

            async def send_watched(message: Any) -> None:
                if message.get("type") == "http.response.start":
                    status.append(int(message.get("status", 0)))
                await send(message)

            if client:
                self._busy(client)
            try:
                await app(scope, receive, send_watched)
            finally:
                if client:
                    self._done(client)
                    if scope.get("method") == "DELETE":
                        self.close_client(client, "was ended by its client (DELETE)")
                    elif status[:1] == [404]:
                        self.close_client(client, "is unknown to the server (404)")

        return watched

    def _busy(self, client: str) -> None:
        self._inflight[client] = self._inflight.get(client, 0) + 1
        timer = self._idle.pop(client, None)
        if timer is not None:
            timer.cancel()

    def _done(self, client: str) -> None:
        left = self._inflight.get(client, 1) - 1
        if left > 0:
            self._inflight[client] = left
            return
        self._inflight.pop(client, None)
        if client in self._clients:  # only a client holding connections is timed
            why = f"was idle for {self.idle_timeout_s:g} s"
            self._idle[client] = asyncio.get_running_loop().call_later(
                self.idle_timeout_s, self.close_client, client, why)


def _session_header(scope: Any) -> str | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"mcp-session-id":
            return value.decode("latin-1")[:128] or None
    return None


async def _close(tasks: list[asyncio.Task[Upstream]]) -> None:
    for task in tasks:
        try:
            up = await task
        except BaseException:  # it never opened (or failed): nothing to close
            continue
        await up.aclose()
