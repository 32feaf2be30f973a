"""The proxy's MCP front end: a low-level MCP server over stdio or streamable HTTP (loopback).

``tools/list`` answers from the registry (visible tools in the configured mode);
``tools/call`` runs ``McpProxy.call_tool``; a call that carries a ``progressToken`` gets
``notifications/progress`` for its tool's progress (``_progress``). Span attributes follow the
MCP semantic conventions: ``mcp.method.name``, ``jsonrpc.request.id``, ``mcp.session.id``,
``mcp.protocol.version``, ``network.transport`` (``pipe`` for stdio, ``tcp`` for HTTP).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import gc
import ipaddress
import logging
import signal
import sys
import warnings
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ..exceptions import ConfigurationError
from ._backchannel import Backchannel, ClientRequest
from ._carry import Carried, carried, serving
from ._config import ProxyConfig
from ._frontcall import FRONT_CANCEL, FRONT_PROGRESS, FrontCalls
from ._identity import session_principal
from ._progress import ProgressRelay, progress_token
from ._proxy import McpProxy
from ._resume import RETRY_MS, event_store
from ._stdio import stdio_streams
from ._telemetry import clock, mark_error
from ._upstream import Upstream

if TYPE_CHECKING:
    import mcp.types as mt
    from mcp.server.lowlevel import Server

__all__ = ["build_server", "check_loopback", "run_proxy", "serve_http", "serve_stdio"]

log = logging.getLogger("tooltrace.mcp")

_SHUTDOWN_GRACE_S = 10
_METER_FLUSH_MS = 5000
# Calls whose client cancelled them, still finishing their records.
_pending: set[asyncio.Task[Any]] = set()
_INTERNAL = ("the proxy could not handle this call (internal error); it was not forwarded "
             "unless the audit trail shows an execute step")


def build_server(proxy: McpProxy, transport: str) -> Server[Any]:
    """A low-level MCP server whose tools are the proxy's."""
    import mcp.types as mt
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

    from .. import __version__

    network = "pipe" if transport == "stdio" else "tcp"
    relay = ProgressRelay(proxy.registry)

    async def on_list_tools(ctx: Any, params: mt.PaginatedRequestParams | None
                            ) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=proxy.list_tools(), **proxy.tools_cache_hint())

    # Answers the upstream's result in wire form (a mapping, which the SDK sends as it is
    # after checking it against the client's revision), or the proxy's own result.
    async def on_call_tool(ctx: Any, params: mt.CallToolRequestParams) -> Any:
        attrs = _call_attributes(ctx, network, proxy.session_id)
        token = progress_token(ctx.params)
        c = carried()
        # Named here so that a client's cancel can be passed on (cancel_call) to this call.
        call_id = proxy.registry.new_call_id()
        try:
            if token is not None and c is not None:  # the client asked for progress
                c.progress = relay.open(call_id, FRONT_PROGRESS.get() or ctx.session, token,
                                        ctx.request_id)
            call = _answer(c, proxy.call_tool(
                params.name, params.arguments, attributes=attrs, call_id=call_id,
                client=(ctx.session, ctx.request_id),
                principal=session_principal(ctx, proxy.config.principal_header)))
            front_cancel = FRONT_CANCEL.get()
            if front_cancel is not None:  # the fast path cancels by calling this, not the task
                front_cancel.append(lambda: proxy.registry.cancel_call(call_id, wait=False))
                return await call
            task = asyncio.ensure_future(call)
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                # notifications/cancelled from the client: tooltrace's cancel contract (the
                # call is told to stop, the upstream request is cancelled, and the call's
                # record says how it ended); the client expects no answer.
                proxy.registry.cancel_call(call_id, wait=False)
                _pending.add(task)
                task.add_done_callback(_pending.discard)
                if c is not None and c.progress is not None:
                    c.progress.cancel()
                raise
        except MCPError:
            raise  # a protocol answer (an unknown tool): the SDK sends it as a JSON-RPC error
        except Exception:
            log.error("mcp proxy: internal error handling a call", exc_info=True)
            return mt.CallToolResult(content=[mt.TextContent(type="text", text=_INTERNAL)],
                                     is_error=True)
        finally:
            if c is not None and c.progress is not None:
                relay.forget(call_id)
                await c.progress.close()

    with warnings.catch_warnings():
        # logging/setLevel is deprecated by the newest protocol, and still forwarded for the
        # upstreams that offer it.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[Any] = Server(
            "tooltrace-mcp-proxy",
            version=__version__,
            instructions=proxy.forwarder.instructions()
            or "Tools of upstream MCP servers, run through tooltrace's audited pipeline.",
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
            on_subscriptions_listen=_listen_handler(proxy),
            **_protocol_handlers(proxy),
        )
    # The proxy's own SERVER spans and duration histograms replace the SDK's spans.
    server.middleware = [_Telemetry(proxy, network)]
    # listChanged as the upstreams advertise it (the proxy passes their list changes on); the
    # SDK takes the flags only as an argument, which its HTTP sessions never pass.
    server.create_initialization_options = functools.partial(  # type: ignore[method-assign]
        server.create_initialization_options, proxy.forwarder.notification_options())
    return server


def _call_attributes(ctx: Any, network: str, session: str) -> dict[str, str | int | bool]:
    """A ``tools/call``'s attributes for its record (MCP semantic conventions)."""
    attrs: dict[str, str | int | bool] = {"network.transport": network}
    if ctx.request_id is not None:
        attrs["jsonrpc.request.id"] = str(ctx.request_id)
    if ctx.protocol_version:
        attrs["mcp.protocol.version"] = str(ctx.protocol_version)[:32]
    attrs["mcp.session.id"] = _session_id(ctx) or session
    return attrs


def _listen_handler(proxy: McpProxy) -> Any:
    """``subscriptions/listen`` (2026-07-28): what the upstreams announce reaches the streams;
    the resources the open streams ask for are asked of the upstreams (``Upstream.watch``)."""
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

    bus = InMemorySubscriptionBus()
    for up in proxy.upstreams.values():
        up.listeners.append(bus.publish)
    handler = ListenHandler(bus)
    asked: collections.Counter[str] = collections.Counter()

    def watch() -> None:
        uris = frozenset(asked)
        for up in proxy.upstreams.values():
            up.watch(uris)

    async def listen(ctx: Any, params: Any) -> Any:
        uris = list(params.notifications.resource_subscriptions or ())
        asked.update(uris)
        watch()
        try:
            return await handler(ctx, params)
        finally:
            asked.subtract(uris)
            for uri in set(uris):
                if asked[uri] <= 0:
                    asked.pop(uri, None)
            watch()

    return listen


async def _answer(c: Carried | None, work: Awaitable[Any]) -> Any:
    """The answer to a client request: ``work``'s, or the upstream's request for input (an
    ``InputRequiredResult``, as the upstream sent it) when it asked for some instead."""
    result = await work
    if c is not None and c.interim is not None:
        return dict(c.interim)
    if c is not None and c.modern and isinstance(result, dict) and "resultType" not in result:
        # An upstream at a handshake revision answered: the client's revision requires the
        # result to say what it is.
        return {**result, "resultType": "complete"}
    return result


def _protocol_handlers(proxy: McpProxy) -> dict[str, Any]:
    """Handlers for what the upstreams offer besides tools (each only when one offers it)."""
    import mcp.types as mt

    fw = proxy.forwarder
    ups = proxy.upstreams.values()
    out: dict[str, Any] = {}

    if any(u.supports("resources") for u in ups):
        async def list_resources(ctx: Any, params: Any) -> mt.ListResourcesResult:
            return mt.ListResourcesResult(resources=await fw.list_resources(),
                                          **fw.cache_hint("resource"))

        async def list_templates(ctx: Any, params: Any) -> mt.ListResourceTemplatesResult:
            return mt.ListResourceTemplatesResult(resource_templates=await fw.list_templates(),
                                                  **fw.cache_hint("template"))

        async def read_resource(ctx: Any, params: Any) -> Any:
            return await _answer(carried(), fw.read_resource(str(params.uri)))

        async def subscribe(ctx: Any, params: Any) -> mt.EmptyResult:
            await fw.subscribe(_session_id(ctx) or "", str(params.uri), True)
            return mt.EmptyResult()

        async def unsubscribe(ctx: Any, params: Any) -> mt.EmptyResult:
            await fw.subscribe(_session_id(ctx) or "", str(params.uri), False)
            return mt.EmptyResult()

        out.update(on_list_resources=list_resources, on_list_resource_templates=list_templates,
                   on_read_resource=read_resource)
        if any(_subscribable(u) or (u.twin is not None and _subscribable(u.twin))
               for u in ups):
            out.update(on_subscribe_resource=subscribe, on_unsubscribe_resource=unsubscribe)
    if any(u.supports("prompts") for u in ups):
        async def list_prompts(ctx: Any, params: Any) -> mt.ListPromptsResult:
            return mt.ListPromptsResult(prompts=await fw.list_prompts(),
                                        **fw.cache_hint("prompt"))

        async def get_prompt(ctx: Any, params: Any) -> Any:
            return await _answer(carried(), fw.get_prompt(params.name, params.arguments))

        out.update(on_list_prompts=list_prompts, on_get_prompt=get_prompt)
    if any(u.supports("completions") for u in ups):
        async def complete(ctx: Any, params: Any) -> mt.CompleteResult:
            return await fw.complete(params)

        out["on_completion"] = complete
    async def roots_changed(ctx: Any, params: Any) -> None:
        # The client's roots changed: the upstream connections serving it hear of it.
        await fw.roots_changed(proxy.clients.current(proxy.upstreams))

    out["on_roots_list_changed"] = roots_changed
    if any(u.supports("logging") for u in ups):
        async def set_level(ctx: Any, params: Any) -> mt.EmptyResult:
            await fw.set_level(params.level)
            return mt.EmptyResult()

        out["on_set_logging_level"] = set_level
    return out


def _subscribable(up: Upstream) -> bool:
    """Whether the server announced resource subscriptions (on this connection)."""
    resources = up.capabilities.resources if up.capabilities is not None else None
    return bool(getattr(resources, "subscribe", False))


class _Telemetry:
    """Server middleware: a SERVER span and a duration for every client request."""

    def __init__(self, proxy: McpProxy, network: str) -> None:
        self.tel = proxy.telemetry
        self.forwarder = proxy.forwarder
        self.network = network

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        client = _session_id(ctx) or ""
        self.forwarder.seen(client, getattr(ctx, "session", None), str(ctx.method))
        # What the request's handler sends upstream, and what the upstream asks back while it
        # runs, belongs to this client.
        with Backchannel.request(ClientRequest(client, ctx.session, ctx.request_id)), \
                serving(Carried(str(ctx.protocol_version or "") or None, ctx.params or {})):
            return await self._serve(ctx, call_next)

    async def _serve(self, ctx: Any, call_next: Any) -> Any:
        if ctx.request_id is None:  # a notification
            return await call_next(ctx)
        method = str(ctx.method)
        params = ctx.params or {}
        target = params.get("name") if method in ("tools/call", "prompts/get") else (
            params.get("uri") if method.startswith("resources/") else None)
        target = target[:128] if isinstance(target, str) else None
        error: str | None = None
        t0 = clock()
        with self._span(ctx, method, target) as span:
            try:
                result = await call_next(ctx)
            except BaseException as exc:
                code = getattr(getattr(exc, "error", None), "code", None)
                error = str(code) if isinstance(code, int) else type(exc).__qualname__
                mark_error(span, error)
                raise
            finally:
                if error is not None:
                    self.tel.record_server(method, error, clock() - t0)
            if isinstance(result, dict):  # the wire form (camelCase keys)
                is_error, meta = result.get("isError") is True, result.get("_meta")
            else:
                is_error, meta = getattr(result, "is_error", False) is True, getattr(
                    result, "meta", None)
            if is_error:
                got = meta.get("tooltrace/error_type") if isinstance(meta, dict) else None
                error = str(got or "tool_error")
                mark_error(span, error)
            self.tel.record_server(method, error, clock() - t0)
            return result

    def _span(self, ctx: Any, method: str, target: str | None
              ) -> contextlib.AbstractContextManager[Any]:
        if self.tel.tracer is None:  # no span: nothing to build its attributes for
            return contextlib.nullcontext()
        attrs = _request_attributes(ctx, method, self.network)
        if method == "tools/call" and target:
            attrs["gen_ai.tool.name"] = target
            attrs["gen_ai.operation.name"] = "execute_tool"
        return self.tel.server_span(method, target, attrs, _meta_dict(ctx.meta))


def _request_attributes(ctx: Any, method: str, network: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {"mcp.method.name": method, "network.transport": network}
    if ctx.request_id is not None:
        attrs["jsonrpc.request.id"] = str(ctx.request_id)
    if ctx.protocol_version:
        attrs["mcp.protocol.version"] = str(ctx.protocol_version)[:32]
    session = _session_id(ctx)
    if session:
        attrs["mcp.session.id"] = session
    request = getattr(ctx, "request", None)
    client = getattr(request, "client", None)
    if client is not None:
        attrs["client.address"] = str(client.host)
        attrs["client.port"] = int(client.port)
        attrs["network.protocol.name"] = "http"
        scope = getattr(request, "scope", None) or {}
        if scope.get("http_version"):
            attrs["network.protocol.version"] = str(scope["http_version"])
    return attrs


def _meta_dict(meta: Any) -> dict[str, Any] | None:
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta
    dump = getattr(meta, "model_dump", None)
    return dump(by_alias=True) if callable(dump) else None


def _session_id(ctx: Any) -> str | None:
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("mcp-session-id")
    except Exception:
        return None
    return str(value)[:128] if value else None


async def serve_stdio(proxy: McpProxy, *, wire: tuple[int, int] | None = None,
                      front: FrontCalls | None = None) -> None:
    """Serve the proxy over stdin/stdout (or the pipe descriptors ``wire``, read and write)
    until the client closes its side; ``tools/call`` takes the front fast path ``front``
    (``_frontcall``; a new one when not given)."""
    server = build_server(proxy, "stdio")
    front = front if front is not None else FrontCalls()
    front.attach(server)
    async with stdio_streams(front, wire=wire) as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _freeze_started() -> None:
    """Move what starting made (the SDK's models, the upstreams' listings, compiled schemas:
    about 100,000 objects) out of the garbage collector's reach: a full collection then scans
    only what calls left behind, instead of stopping the call in flight for tens of
    milliseconds every few thousand calls."""
    gc.collect()
    gc.freeze()
    log.debug("mcp proxy: %d objects from start-up frozen out of the garbage collector",
              gc.get_freeze_count())


def check_loopback(host: str) -> None:
    """Raise ``ConfigurationError`` unless ``host`` is a loopback address or ``localhost``."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigurationError(f"the HTTP transport listens on loopback only, not {host!r}")


async def serve_http(proxy: McpProxy, host: str, port: int, *,
                     stop: asyncio.Event | None = None) -> None:
    """Serve the proxy over streamable HTTP at ``http://host:port/mcp`` (loopback only).

    Setting ``stop`` shuts the server down gracefully (open sessions closed, lifespan ended).
    """
    check_loopback(host)
    import uvicorn

    server = build_server(proxy, "http")
    # Each client session gets upstream connections of its own (see _clients).
    proxy.clients.enabled = proxy.forwarder.isolated = True
    # A session idle this long ends (its id then gets 404); its upstream connections close.
    # Every SSE stream is primed (an event id and the retry wait) and kept (_resume): a client
    # whose stream broke reconnects with Last-Event-ID and gets what it missed.
    app = proxy.clients.watch(server.streamable_http_app(
        host=host, session_idle_timeout=proxy.config.idle_timeout_s,
        event_store=event_store(), retry_interval=RETRY_MS))
    # uvicorn catches SIGTERM while it serves: open streams are ended, then the sessions.
    # A request still running after the grace is cancelled.
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=_SHUTDOWN_GRACE_S)
    userver = uvicorn.Server(config)
    serving = asyncio.ensure_future(userver.serve())
    watcher = asyncio.ensure_future((stop or asyncio.Event()).wait())
    watcher.add_done_callback(lambda _: setattr(userver, "should_exit", True))
    try:
        # Said once the socket is bound (a client that waits for the line may connect at once).
        while not userver.started and not serving.done():
            await asyncio.sleep(0.01)
        if userver.started:
            print(f"tooltrace mcp proxy listening on http://{host}:{port}/mcp", file=sys.stderr,
                  flush=True)
        await serving
    finally:
        watcher.cancel()
        if not serving.done():
            userver.should_exit = True
            await asyncio.gather(serving, return_exceptions=True)


async def run_proxy(config: ProxyConfig, *, http: tuple[str, int] | None = None) -> None:
    """Start the upstreams, serve until the client goes away, then shut everything down.

    SIGTERM (what an MCP client sends when the proxy does not exit in time) ends serving
    cleanly: over HTTP the server shuts down gracefully, over stdio the serving task is
    cancelled; either way sinks are flushed and upstreams stopped.
    """
    from ._meter import otlp_meter_provider

    log.debug("mcp proxy: event loop %s", type(asyncio.get_running_loop()).__module__)
    meter = otlp_meter_provider()  # the duration histograms over OTLP, when the env asks
    proxy = McpProxy(config, meter_provider=meter)
    task = asyncio.current_task()
    stop = asyncio.Event()

    def on_sigterm() -> None:
        if http is not None:
            stop.set()  # uvicorn, which sees the signal too while it serves, shuts down
        elif task is not None:
            task.cancel()

    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    except (NotImplementedError, RuntimeError):
        pass
    try:
        await proxy.start()
        for t in proxy.report().changed:
            print(f"tooltrace: tool {t.name} (server {t.server}) changed since it was pinned in "
                  f"{proxy.home.name}/mcp-pins.json; calls need "
                  f"{'approval' if config.rug_pull == 'ask' else config.rug_pull}",
                  file=sys.stderr, flush=True)
        _freeze_started()
        if http is None:
            await serve_stdio(proxy)
        elif not stop.is_set():
            await serve_http(proxy, *http, stop=stop)
    finally:
        await asyncio.shield(proxy.aclose())
        if meter is not None:  # what is still unexported goes out now
            await asyncio.shield(asyncio.to_thread(meter.shutdown, _METER_FLUSH_MS))
