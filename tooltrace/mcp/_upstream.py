"""One upstream MCP server (stdio or streamable HTTP): start, agree on a revision, list tools,
call, detect failure, restart.

A supervisor task owns the connection (the process and the ``ClientSession`` must be entered
and left by the same task). The transport reads the server's stdout itself: a line that is not
JSON-RPC, or the end of the output, breaks the connection at once, so in-flight calls fail
promptly instead of waiting out their deadline. A call that outlives its wait also breaks the
connection (a hung server is killed). The supervisor then restarts the server with
exponential backoff.

The revision is the newest both speak (``_negotiate``: ``server/discover`` first, the
``initialize`` handshake otherwise). A server that speaks a stateless revision and the handshake
too gets a second connection at the handshake's revision (``twin``) for the clients of that
revision (``era_for``); at a stateless revision the connection keeps a ``subscriptions/listen``
stream open for the changes the server announces (``listeners``). What a client request carries
across (its progress token, its per-request ``_meta``, a request for input) is ``_carry``'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..redaction import default_redactor
from ._carry import Carried, carried, carry_streams, is_modern
from ._config import ServerConfig
from ._errors import (
    UpstreamCancelled,
    UpstreamError,
    UpstreamExited,
    UpstreamProtocolError,
    UpstreamRPCError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from ._fastcall import FastCalls
from ._http import http_transport
from ._listing import Hint, all_pages
from ._process import stdio_process

if TYPE_CHECKING:
    import mcp.types as mt
    from mcp import ClientSession

    from ..runtime import CallContext

__all__ = ["Upstream", "until_cancelled"]

log = logging.getLogger("tooltrace.mcp")

_BACKOFF_MIN_S = 0.2
_BACKOFF_MAX_S = 10.0
_STABLE_S = 30.0
_CONNECTION_CLOSED = -32000
_METHOD_NOT_FOUND = -32601
# Rounds of input the proxy asks a client of an older revision for, for one request.
_INPUT_ROUNDS = 10
# The pause before a subscriptions/listen stream that ended is opened again.
_RELISTEN_S = 1.0
_ENDED = {"protocol": "wrote a line that is not JSON-RPC", "exited": "the process exited",
          "hung": "it stopped answering"}


class Upstream:
    """A supervised connection to one upstream server.

    ``on_tools(upstream, tools)`` is called with the wire form of the tool listing after every
    (re)connect, so pins are checked again when a restarted server changes its tools;
    ``callbacks`` are the session's sampling, elicitation and roots callbacks (``Backchannel``).
    ``prefer="handshake"`` tries the handshake before ``server/discover`` (a client session's
    connection, a twin); ``primary`` is a twin's connection at the stateless revision.
    """

    def __init__(
        self,
        config: ServerConfig,
        *,
        on_tools: Callable[[Upstream, list[dict[str, Any]]], None] | None = None,
        on_notify: Callable[[Upstream, Any], Awaitable[None]] | None = None,
        callbacks: Mapping[str, Any] | None = None,
        prefer: str = "newest",
        primary: Upstream | None = None,
    ) -> None:
        self.config = config
        self._prefer = prefer
        #: With ``protocol_version = "auto"``, a server that speaks a stateless revision and
        #: the handshake too gets a second connection at the handshake's revision, for the
        #: clients that speak it (``era_for``): the session state they rely on (subscriptions,
        #: the logging level, requests of the server during a call) exists only there.
        self.twin: Upstream | None = None
        # A twin's primary: it serves the tools only the stateless revision lists.
        self._primary = primary
        #: Called with each change the server announces (``mcp.shared.subscriptions`` events:
        #: a tool, prompt or resource list changed, a resource updated), from a
        #: ``subscriptions/listen`` stream at a stateless revision or a notification at a
        #: handshake revision; the front end's listen streams are fed from here.
        self.listeners: list[Callable[[Any], Awaitable[None]]] = []
        #: Set while the proxy's own ``subscriptions/listen`` stream to the server is open
        #: (acknowledged), at a stateless revision.
        self.listening = asyncio.Event()
        # The resources the front end's listen streams asked for (``watch``), and the signal
        # that the proxy's own listen stream must be opened again to ask for them.
        self._watched: frozenset[str] = frozenset()
        self._rewatch = asyncio.Event()
        #: The resources the proxy's open listen stream asked the server for (once it is open).
        self.watching: frozenset[str] = frozenset()
        self.label = config.label
        self._on_tools, self._on_notify = on_tools, on_notify
        self._callbacks = dict(callbacks or {})
        self._session: ClientSession | None = None
        # The connection's fast tools/call path (stdio at a handshake-era version), else None.
        self._fast: FastCalls | None = None
        self._broken: asyncio.Event = asyncio.Event()
        self._broken_reason = ""
        self._ready: asyncio.Event = asyncio.Event()
        self._first: asyncio.Future[list[mt.Tool]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._served = False
        self._tasks: set[asyncio.Task[None]] = set()
        #: Tools as listed by the last successful connect (SDK models).
        self.tools: list[mt.Tool] = []
        #: The cache hint the server's tool listing came with (2026-07-28), or None.
        self.tools_hint: Hint | None = None
        #: How many times the server was (re)started after the first start.
        self.restarts = 0
        #: Why the last connection ended or failed (short, no upstream output).
        self.last_error: str | None = None
        #: Server info from the last handshake.
        self.server_name: str | None = None
        self.protocol_version: str | None = None
        #: The server's capabilities and instructions from the last handshake.
        self.capabilities: mt.ServerCapabilities | None = None
        self.instructions: str | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """``running``, ``starting`` (or restarting) or ``stopped``."""
        if self._closing:
            return "stopped"
        return "running" if self._ready.is_set() else "starting"

    async def start(self) -> list[mt.Tool]:
        """Start the supervisor and wait for the first listing (raises on a failed start)."""
        loop = asyncio.get_running_loop()
        self._first = loop.create_future()
        self._task = loop.create_task(self._supervise(), name=f"mcp-upstream-{self.label}")
        timeout = self.config.startup_timeout_s + 2.0
        try:
            tools = await asyncio.wait_for(asyncio.shield(self._first), timeout)
        except TimeoutError:
            raise UpstreamUnavailable(
                f"server {self.label} did not finish its handshake within "
                f"{self.config.startup_timeout_s:g} s") from None
        if self._prefer == "newest" and self.config.protocol_version == "auto" and is_modern(
                self.protocol_version):
            await self._start_twin()
        return tools

    async def _start_twin(self) -> None:
        twin = Upstream(self.config, on_notify=self._on_notify, callbacks=self._callbacks,
                        prefer="handshake", primary=self)
        twin.listeners = self.listeners
        try:
            await twin.start()
        except UpstreamError:
            await twin.aclose()
            return
        if is_modern(twin.protocol_version):  # the server speaks stateless revisions only
            await twin.aclose()
            return
        self.twin = twin

    def era_for(self, request: Carried | None) -> Upstream:
        """The connection for a client request: the twin at the handshake's revision for a
        client that speaks one (or no client), when there is a twin; else this one."""
        if self.twin is not None and (request is None or not request.modern):
            return self.twin
        return self

    async def aclose(self) -> None:
        """Stop the server and the supervisor."""
        if self.twin is not None:
            await self.twin.aclose()
        self._closing = True
        self._broken.set()
        task = self._task
        if task is not None:
            try:
                await asyncio.wait_for(task, 5.0)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
            except Exception:
                pass

    def _break(self, reason: str) -> None:
        if not self._broken.is_set():
            self._broken_reason = reason
            self._broken.set()
            self._ready.clear()

    async def _supervise(self) -> None:
        backoff = _BACKOFF_MIN_S
        while not self._closing:
            started = time.monotonic()
            try:
                await self._run_once()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self.last_error = _describe(exc)
                if self._first is not None and not self._first.done():
                    self._first.set_exception(UpstreamUnavailable(
                        f"server {self.label} failed to start: {self.last_error}"))
            self._session, self._fast = None, None
            self._ready.clear()
            if self._closing:
                break
            if self._served or time.monotonic() - started > _STABLE_S:
                # The connection worked: a new failure starts the backoff afresh.
                backoff = _BACKOFF_MIN_S
            log.warning("mcp upstream %s stopped (%s); restarting in %.1f s", self.label,
                        self.last_error or self._broken_reason or "exited", backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX_S)
            self.restarts += 1

    async def _run_once(self) -> None:
        from mcp import ClientSession

        cfg = self.config
        self._broken = asyncio.Event()
        self._broken_reason = ""
        self._served = False
        transport = (http_transport(cfg) if cfg.url is not None else stdio_process(
            cfg, self._break, lambda: self._broken_reason in ("", "exited")))
        opened: list[ClientSession] = []
        async with transport as (read, write, fast):
            read, write = carry_streams(read, write, lambda: opened[0].protocol_version
                                        if opened else None)
            async with ClientSession(read, write, message_handler=self._on_message,
                                     **self._callbacks) as session:
                opened.append(session)
                await self._serve(session, fast)
        self.last_error = _ENDED.get(self._broken_reason, self._broken_reason or "closed")

    async def _serve(self, session: ClientSession, fast: FastCalls | None) -> None:
        """Negotiate, list, and serve calls on ``session`` until the connection breaks."""
        import anyio

        cfg = self.config
        with anyio.fail_after(cfg.startup_timeout_s):
            await _negotiate(session, cfg.protocol_version, self._prefer)
            tools, self.tools_hint = await _list_all(session)
        info = session.server_info
        self.server_name = info.name if info is not None else None
        self.protocol_version = session.protocol_version
        self.capabilities = session.server_capabilities
        self.instructions = session.instructions
        self.tools = tools
        if self._on_tools is not None:
            self._on_tools(self, [_wire(t) for t in tools])
        self._session = session
        self._fast = fast if fast is not None and FastCalls.serves(
            self.protocol_version) else None
        self._ready.set()
        self.last_error = None
        if self._first is not None and not self._first.done():
            self._first.set_result(tools)
        listening = (asyncio.get_running_loop().create_task(self._listen(session))
                     if is_modern(self.protocol_version) else None)
        try:
            await self._broken.wait()
        finally:
            if listening is not None:
                listening.cancel()
        self._session, self._fast = None, None
        self._ready.clear()

    def watch(self, uris: frozenset[str]) -> None:
        """Ask the server, on the proxy's listen stream (a stateless revision), for the updates
        of ``uris`` (the resources the clients' listen streams asked for), instead of the last
        ones asked."""
        if uris != self._watched:
            self._watched = uris
            self._rewatch.set()

    async def _listen(self, session: ClientSession) -> None:
        """Hear the changes the server announces at a stateless revision: one
        ``subscriptions/listen`` stream for the lists it says change and the resources watched
        (``watch``), opened again when the resources watched change, and after a pause when it
        ends, while the connection lasts."""
        caps = self.capabilities
        kinds = {name: bool(getattr(getattr(caps, name, None), "list_changed", False))
                 for name in ("tools", "prompts", "resources")}
        while True:
            self._rewatch.clear()
            uris = self._watched
            if not any(kinds.values()) and not uris:
                await self._rewatch.wait()
                continue
            once = asyncio.ensure_future(self._listen_once(session, kinds, uris))
            rewatch = asyncio.ensure_future(self._rewatch.wait())
            try:
                await asyncio.wait({once, rewatch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                rewatch.cancel()
                if not once.done():
                    once.cancel()
                    await asyncio.gather(once, return_exceptions=True)
            if not self._rewatch.is_set():
                await asyncio.sleep(_RELISTEN_S)  # it ended by itself: a pause first

    async def _listen_once(self, session: ClientSession, kinds: Mapping[str, bool],
                           uris: frozenset[str]) -> None:
        from mcp.client.subscriptions import ToolsListChanged, listen

        try:
            async with listen(session, tools_list_changed=kinds["tools"],
                              prompts_list_changed=kinds["prompts"],
                              resources_list_changed=kinds["resources"],
                              resource_subscriptions=sorted(uris)) as events:
                self.watching = uris
                self.listening.set()
                async for event in events:
                    if isinstance(event, ToolsListChanged):
                        self._spawn(self._relist())
                    await self._publish(event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("mcp upstream %s: subscriptions/listen ended (%s)", self.label,
                      type(exc).__name__)
        finally:
            self.listening.clear()
            self.watching = frozenset()

    async def _publish(self, event: Any) -> None:
        for listener in list(self.listeners):
            try:
                await listener(event)
            except Exception:  # a listener's failure is its own, not the connection's
                log.debug("mcp upstream %s: a change listener failed", self.label,
                          exc_info=True)

    async def _on_message(self, message: Any) -> None:
        import mcp.types as mt
        from mcp.shared.subscriptions import event_from_wire

        if self.listeners and isinstance(message, mt.ServerNotification):
            root = getattr(message, "root", message)
            event = event_from_wire(str(getattr(root, "method", "")), root.model_dump(
                by_alias=True, mode="json", exclude_none=True).get("params"))
            if event is not None:  # a change announced at a handshake revision
                self._spawn(self._publish(event))

        if isinstance(message, mt.ToolListChangedNotification):
            # A server may change a tool mid-session: check the new listing against the pins
            # (the client hears of the change once the pins were checked).
            self._spawn(self._relist())
        elif self._on_notify is not None and isinstance(message, mt.ServerNotification):
            self._spawn(self._on_notify(self, message))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _relist(self) -> None:
        session = self._session
        if session is None:
            return
        try:
            tools, hint = await asyncio.wait_for(_list_all(session),
                                                 self.config.startup_timeout_s)
        except Exception:  # a failed re-list leaves the last listing in force
            log.warning("mcp upstream %s: re-listing tools after list_changed failed", self.label)
            return
        self.tools, self.tools_hint = tools, hint
        if self._on_tools is not None:
            self._on_tools(self, [_wire(t) for t in tools])
        if self._on_notify is not None:
            import mcp.types as mt

            await self._on_notify(self, mt.ToolListChangedNotification())

    @property
    def fast_calls(self) -> int:
        """``tools/call`` requests the current connection sent on the fast path (``_fastcall``;
        0 on the SDK's path: an HTTP upstream, or one at a 2026-era protocol version)."""
        return self._fast.calls if self._fast is not None else 0

    def supports(self, capability: str) -> bool:
        """Whether the server announced ``capability`` (``resources``, ``prompts``, ...)."""
        caps = self.capabilities
        if caps is not None and getattr(caps, capability, None) is not None:
            return True
        return self.twin is not None and self.twin.supports(capability)

    async def request(self, fn: Callable[[ClientSession], Awaitable[Any]],
                      wait_s: float | None = None) -> Any:
        """Send one request other than ``tools/call`` (``fn(session)``); raise an
        ``UpstreamError`` if the server is not running or does not answer in time."""
        wait = self.config.timeout_s if wait_s is None else wait_s
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), wait)
            except TimeoutError:
                raise UpstreamUnavailable(f"server {self.label} is not running") from None
        session = self._session
        if session is None:
            raise UpstreamUnavailable(f"server {self.label} is not running")
        try:
            result = await asyncio.wait_for(fn(session), wait)
            c = carried()
            for _ in range(_INPUT_ROUNDS):
                if c is None or c.interim is None or c.modern:
                    return result
                # The client speaks a revision without InputRequiredResult: the proxy asks it
                # (as server requests) and retries with its answers.
                await self._answer_inputs(c)
                result = await asyncio.wait_for(fn(session), wait)
            raise UpstreamProtocolError(
                f"server {self.label} asked for input more than {_INPUT_ROUNDS} times")
        except TimeoutError:
            raise UpstreamTimeout(f"server {self.label} did not answer within {wait:g} s") from None
        except UpstreamError:
            raise
        except Exception as exc:
            raise self._map_error(exc) from None

    async def _answer_inputs(self, c: Carried) -> None:
        """Ask the client, as server requests, what the upstream's ``InputRequiredResult``
        asks for (elicitation, sampling, roots), and carry the answers into the retry."""
        import mcp.types as mt

        interim, c.interim = c.interim or {}, None
        asked = interim.get("inputRequests")
        answers: dict[str, Any] = {}
        callbacks = {"elicitation/create": "elicitation_callback",
                     "sampling/createMessage": "sampling_callback",
                     "roots/list": "list_roots_callback"}
        for key, req in (asked.items() if isinstance(asked, Mapping) else ()):
            method = req.get("method") if isinstance(req, Mapping) else None
            ask = self._callbacks.get(callbacks.get(str(method), ""))
            if ask is None:
                raise UpstreamRPCError(_METHOD_NOT_FOUND, f"server {self.label} asked for input "
                                       f"({str(method)[:40]}) the proxy cannot ask its client for")
            if method == "elicitation/create":
                answer = await ask(None, mt.ElicitRequest.model_validate(req).params)
            elif method == "sampling/createMessage":
                answer = await ask(None, mt.CreateMessageRequestParams.model_validate(
                    req.get("params") or {}))
            else:
                answer = await ask(None)
            if isinstance(answer, mt.ErrorData):
                raise UpstreamRPCError(answer.code, f"the client refused {method}: "
                                       f"{default_redactor().bounded(answer.message, 200)}")
            answers[str(key)] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        state = interim.get("requestState")
        c.retry = (answers, state if isinstance(state, str) else None)

    # -- calls -----------------------------------------------------------------------------

    async def call(self, name: str, arguments: Mapping[str, Any], *,
                   meta: Mapping[str, Any] | None, wait_s: float,
                   suspect_after_s: float | None = None,
                   progress: Any = None) -> mt.CallToolResult:
        """Forward one ``tools/call``; raise an ``UpstreamError`` if no answer comes.

        After ``suspect_after_s`` without an answer (the call's deadline), new calls wait for
        the server to answer or be replaced instead of queueing behind a server that may hang;
        after ``wait_s`` the server is declared hung, killed and restarted. ``progress``
        receives the server's progress notifications for this call (for the call's record).

        Serving a client request (``_carry``), the call goes with the client's own progress
        token when it gave one (its progress goes to the client as sent), and with none when
        it did not; an ``InputRequiredResult`` is kept for the client, or, when the client
        speaks an older revision, answered by asking the client (server requests) and retried.
        """
        primary = self._primary
        if primary is not None and all(t.name != name for t in self.tools) and any(
                t.name == name for t in primary.tools):
            # A tool the server offers at its stateless revision only: called there, for a
            # client of a handshake revision too (what it asks for is asked of the client).
            return await primary.call(name, arguments, meta=meta, wait_s=wait_s,
                                      suspect_after_s=suspect_after_s, progress=progress)
        c = carried()
        if c is not None:
            if c.progress is not None:
                c.on_progress = progress
            progress = None
        result = await self._call_once(name, arguments, meta, wait_s, suspect_after_s,
                                       progress, c)
        for _ in range(_INPUT_ROUNDS):
            if c is None or c.interim is None or c.modern:
                return result
            await self._answer_inputs(c)
            result = await self._call_once(name, arguments, meta, wait_s, suspect_after_s,
                                           progress, c)
        raise UpstreamProtocolError(
            f"server {self.label} asked for input more than {_INPUT_ROUNDS} times")

    async def _call_once(self, name: str, arguments: Mapping[str, Any],
                         meta: Mapping[str, Any] | None, wait_s: float,
                         suspect_after_s: float | None, progress: Any,
                         c: Carried | None) -> mt.CallToolResult:
        start = time.monotonic()
        deadline = start + wait_s
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise UpstreamUnavailable(
                    f"server {self.label} is not running (restart {self.restarts} pending)"
                ) from None
        session, broken, fast = self._session, self._broken, self._fast
        if session is None:
            raise UpstreamUnavailable(f"server {self.label} is not running")
        if fast is not None and (c is None or c.progress is None):
            # (The fast path writes past the carrying streams: not for a progress stream.)
            return await self._call_fast(fast, session, broken, name, arguments, meta, progress,
                                         start, wait_s, suspect_after_s)
        call = asyncio.ensure_future(session.call_tool(
            name, dict(arguments), meta=dict(meta) if meta else None,  # type: ignore[arg-type]
            progress_callback=progress))
        stop = asyncio.ensure_future(broken.wait())
        suspect = False
        try:
            done: set[asyncio.Future[Any]] = set()
            if suspect_after_s is not None and suspect_after_s < wait_s:
                done, _ = await asyncio.wait(
                    {call, stop}, timeout=max(0.0, start + suspect_after_s - time.monotonic()),
                    return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    suspect = True
                    self._ready.clear()
            if not done:
                done, _ = await asyncio.wait(
                    {call, stop}, timeout=max(0.0, deadline - time.monotonic()),
                    return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()  # the call was cancelled: the SDK tells the server
            raise
        finally:
            stop.cancel()
            if suspect and not broken.is_set() and call.done():
                self._ready.set()  # it answered late after all: not hung
        if call in done:
            exc = call.exception()
            if exc is None:
                self._served = True
                return call.result()
            raise self._map_error(exc) from None
        call.cancel()
        if stop in done:
            raise self._ended()
        raise self._hung(wait_s)

    async def _call_fast(self, fast: FastCalls, session: ClientSession, broken: asyncio.Event,
                         name: str, arguments: Mapping[str, Any],
                         meta: Mapping[str, Any] | None, progress: Any, start: float,
                         wait_s: float, suspect_after_s: float | None) -> mt.CallToolResult:
        """``call`` on the fast path, awaited in the caller's own task: the connection's end
        fails the request (``FastCalls.close``), so only the two deadlines need timers."""
        suspect = False

        def mark_suspect() -> None:
            nonlocal suspect
            suspect = True
            self._ready.clear()

        now = time.monotonic()
        marker = (asyncio.get_running_loop().call_later(
            max(0.0, start + suspect_after_s - now), mark_suspect)
            if suspect_after_s is not None and suspect_after_s < wait_s else None)
        answered = False
        try:
            async with asyncio.timeout(max(0.0, start + wait_s - now)):
                result = await fast.call(session, str(self.protocol_version), name, arguments,
                                         meta=meta, progress=progress)
            answered = True
        except TimeoutError:
            raise self._hung(wait_s) from None
        except Exception as exc:
            answered = True
            code = getattr(getattr(exc, "error", None), "code", None)
            if code == _CONNECTION_CLOSED and broken.is_set():
                raise self._ended() from None  # the connection ended under the call
            raise self._map_error(exc) from None
        finally:
            if marker is not None:
                marker.cancel()
            if suspect and answered and not broken.is_set():
                self._ready.set()  # it answered late after all: not hung
        self._served = True
        return result

    def _hung(self, wait_s: float) -> UpstreamError:
        """Declare the server hung (it is restarted) and return the error of the call."""
        self._break("hung")
        return UpstreamTimeout(
            f"server {self.label} did not answer within {wait_s:g} s; it is restarted")

    def _ended(self) -> UpstreamError:
        """The error of a call the connection's end cut short."""
        if self._broken_reason == "protocol":
            return UpstreamProtocolError(
                f"server {self.label} wrote a line that is not JSON-RPC; it is restarted")
        return UpstreamExited(f"server {self.label} exited during the call; it is restarted")

    def _map_error(self, exc: BaseException) -> Exception:
        code = getattr(getattr(exc, "error", None), "code", None)
        if isinstance(code, int):
            if code == _CONNECTION_CLOSED:
                if self._broken.is_set() and self._broken_reason == "protocol":
                    # The transport cut the connection because of a non-JSON-RPC line.
                    return UpstreamProtocolError(
                        f"server {self.label} wrote a line that is not JSON-RPC; it is restarted")
                self._break("exited")
                return UpstreamExited(f"server {self.label} closed the connection during the call")
            error = exc.error  # type: ignore[attr-defined]
            message = str(getattr(error, "message", "") or "")
            sent: dict[str, Any] = {"code": code, "message": message}
            if "data" in getattr(error, "model_fields_set", ()):  # as sent: null stays null
                sent["data"] = error.data
            return UpstreamRPCError(code, f"server {self.label} answered error {code}: "
                                          f"{default_redactor().bounded(message, 300)}", sent)
        if isinstance(exc, asyncio.CancelledError):
            return UpstreamExited(f"server {self.label} went away during the call")
        # Anything else is an answer the client could not accept (a malformed result, or
        # structured content that does not match the tool's output schema).
        return UpstreamProtocolError(
            f"server {self.label} answered with a result that could not be accepted "
            f"({type(exc).__name__})")


async def _negotiate(session: ClientSession, pinned: str, prefer: str) -> None:
    """Agree on a revision with the server: the one ``pinned``, or (``auto``) the newest both
    support. A ``server/discover`` comes first; a server that does not answer it with a
    stateless revision the SDK speaks gets the ``initialize`` handshake (the newest handshake
    revision it accepts). Only a server that speaks stateless revisions alone, none of them the
    SDK's, is refused (the SDK's error). ``prefer="handshake"`` (a twin, ``era_for``) tries the
    handshake first."""
    import mcp_types
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    if prefer == "handshake" and pinned == "auto":
        try:
            await session.initialize()
            return
        except MCPError as exc:
            if exc.code != mcp_types.UNSUPPORTED_PROTOCOL_VERSION:
                raise
    if pinned in HANDSHAKE_PROTOCOL_VERSIONS:
        await session.initialize()
        if session.protocol_version != pinned:
            raise UpstreamUnavailable(
                f"the server answered the handshake at {session.protocol_version}, "
                f"not {pinned}")
        return
    version = pinned if pinned in MODERN_PROTOCOL_VERSIONS else MODERN_PROTOCOL_VERSIONS[-1]
    try:
        raw = await session.send_discover(version)
        found = mcp_types.DiscoverResult.model_validate(raw)
    except MCPError as exc:
        supported = (exc.error.data or {}).get("supported") if isinstance(
            exc.error.data, dict) else None
        mutual = [v for v in MODERN_PROTOCOL_VERSIONS if v in (supported or ())]
        if exc.code == mcp_types.UNSUPPORTED_PROTOCOL_VERSION and mutual and pinned == "auto":
            found = mcp_types.DiscoverResult.model_validate(
                await session.send_discover(mutual[-1]))
        elif (exc.code == mcp_types.UNSUPPORTED_PROTOCOL_VERSION and supported
              and not any(v in HANDSHAKE_PROTOCOL_VERSIONS for v in supported)) or pinned != "auto":
            raise
        else:
            await session.initialize()
            return
    except ValueError:  # not a discover result: not a stateless server
        if pinned != "auto":
            raise
        await session.initialize()
        return
    if not any(v in found.supported_versions for v in MODERN_PROTOCOL_VERSIONS):
        if pinned != "auto":
            raise UpstreamUnavailable(f"the server does not speak {pinned}")
        await session.initialize()
        return
    session.adopt(found)


async def _list_all(session: ClientSession) -> tuple[list[mt.Tool], Hint | None]:
    """Every page of the server's tools, and the listing's cache hint (``_listing``)."""
    return await all_pages(session, lambda s: s.list_tools, "tools")


def _wire(tool: mt.Tool) -> dict[str, Any]:
    """A tool's wire form (camelCase keys, unset fields left out)."""
    return dict(tool.model_dump(by_alias=True, exclude_none=True, mode="json"))


def _describe(exc: BaseException) -> str:
    """A short reason for a failed start, without host paths or upstream output."""
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _describe(inner)
    if isinstance(exc, FileNotFoundError):
        return "command not found"
    if isinstance(exc, TimeoutError):
        return "handshake timed out"
    if isinstance(exc, PermissionError):
        return "command not executable"
    code = getattr(getattr(exc, "error", None), "code", None)
    return type(exc).__name__ + (f" {code}" if code is not None else "")


async def until_cancelled(ctx: CallContext, work: Any) -> Any:
    """Await ``work`` in this task; a cancel of the call (not its deadline: the upstream gets
    its grace) cancels it there, and the upstream request is cancelled as the SDK's is
    (``notifications/cancelled``)."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    waiting = True

    def cancel() -> None:
        if waiting:  # not once the work is over: the rest of this task is not the request
            task.cancel()

    def on_signal(reason: str) -> None:
        if reason == "cancel":
            loop.call_soon_threadsafe(cancel)

    ctx.on_cancel(on_signal)
    try:
        return await work
    except asyncio.CancelledError:
        if ctx.reason != "cancel":
            raise
        task.uncancel()
        raise UpstreamCancelled(
            "the call was cancelled; the server was told, but cannot confirm it stopped"
        ) from None
    finally:
        waiting = False
