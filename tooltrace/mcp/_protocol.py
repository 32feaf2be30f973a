"""The rest of the protocol through the proxy: resources, prompts, completion, logging and the
notifications upstream servers send.

Listings are merged over the servers that announce the capability (the first server keeps a
name or URI several offer). ``resources/read`` and ``prompts/get`` run through the registry as
calls of per-server tools (``mcp.<server>.read_resource``, ``mcp.<server>.get_prompt``: their
own kind in the audit trail, never listed as tools): policy and hooks decide, the path policy
applies to a ``file://`` resource's path, and the answer is redacted in place. An upstream's
JSON-RPC error reaches the client with its code, message and data as sent; each request sent
upstream carries its CLIENT span's trace context in ``params._meta``. Notifications from
upstream (resource updates, list changes, log messages, under the logger name the upstream
gave) reach the clients that can want them; a changed tool list is announced only after its
pins were checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from ..model import Capability, Effect, Status, ToolCall, ToolDefinition
from ._backchannel import Backchannel
from ._errors import UpstreamError, UpstreamRPCError
from ._listing import Hint, all_pages, combined, hint_fields
from ._results import from_upstream, marked, upstream_error
from ._serverrequests import server_request_definitions, server_request_name
from ._telemetry import clock, mark_error

if TYPE_CHECKING:
    import mcp.types as mt

    from ..registry import ToolRegistry
    from ._telemetry import ProxyTelemetry
    from ._upstream import Upstream

__all__ = ["Forwarder", "internal_tool_names"]

log = logging.getLogger("tooltrace.mcp")

_INVALID_PARAMS, _INTERNAL_ERROR = -32602, -32603
_MAX_CLIENTS = 1024


def internal_tool_names(label: str) -> tuple[str, str]:
    """The registry names of a server's ``resources/read`` and ``prompts/get`` calls."""
    return server_request_name(label, "read_resource"), server_request_name(label, "get_prompt")


def _mcp_error(code: int, message: str) -> Exception:
    from mcp.shared.exceptions import MCPError

    return MCPError(code, message)


def _hold(value: Any, held: dict[str, str]) -> Any:
    """``value`` with binary payloads (image/audio ``data``, resource ``blob``) replaced by a
    placeholder naming their size and sha256; the payloads are kept in ``held``."""
    if isinstance(value, list):
        return [_hold(v, held) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _hold(v, held) for k, v in value.items()}
    key = "blob" if isinstance(out.get("blob"), str) else (
        "data" if out.get("type") in ("image", "audio") and isinstance(out.get("data"), str)
        else None)
    if key is not None:
        payload = out[key]
        mark = (f"[binary: {len(payload)} base64 chars, sha256 "
                f"{hashlib.sha256(payload.encode()).hexdigest()}]")
        held[mark] = payload
        out[key] = mark
    return out


def _restore(value: Any, held: dict[str, str]) -> Any:
    if isinstance(value, list):
        return [_restore(v, held) for v in value]
    if isinstance(value, dict):
        return {k: _restore(v, held) for k, v in value.items()}
    if isinstance(value, str) and value in held:
        return held[value]
    return value


class Forwarder:
    """Forwards everything but tools between the proxy's clients and its upstream servers."""

    def __init__(self, registry: ToolRegistry, upstreams: dict[str, Upstream],
                 telemetry: ProxyTelemetry | None = None) -> None:
        self.registry = registry
        self.upstreams = upstreams
        #: The CLIENT spans of reads and prompts (their context goes upstream in ``_meta``).
        self.telemetry = telemetry
        #: Upstreams' server-to-client requests: a read or a prompt routes them to its client.
        self.backchannel = Backchannel()
        self.backchannel.registry = registry
        #: The connection to a server for the request being served (``ClientUpstreams.pick``).
        self.pick: Callable[[Upstream], Awaitable[tuple[Upstream, str]]] = _same
        #: Whether upstream connections belong to client sessions (HTTP): then the shared
        #: connections' notifications other than a changed tool list reach no client.
        self.isolated = False
        # The latest request's session of each client (by MCP session id; one over stdio): it
        # sends on the client's standalone channel. Bounded: the oldest clients are forgotten.
        self._sessions: dict[str, Any] = {}
        self._subscribed: dict[str, set[str]] = {}
        self._owner: dict[tuple[str, str], str] = {}  # (kind, name or uri) -> server
        # By call id, from a handler until its answer is made: the binary payloads held back
        # from the registry, and the upstream's answer (for one the registry offloaded).
        self._held: dict[str, dict[str, str]] = {}
        self._raw: dict[str, Any] = {}
        # By call id: the JSON-RPC error an upstream answered a read or prompt with.
        self._refused: dict[str, UpstreamRPCError] = {}
        #: The registry names of the read_resource/get_prompt calls registered here.
        self.internal: set[str] = set()
        # The latest listing's cache hint, by kind (cache_hint).
        self._hints: dict[str, Hint | None] = {}

    # -- setup ---------------------------------------------------------------------------

    def register(self, label: str) -> None:
        """Register a server's ``read_resource`` and ``get_prompt`` calls in the registry."""
        up = self.upstreams[label]
        read_name, prompt_name = internal_tool_names(label)
        for name in (read_name, prompt_name):
            if self.registry.definition(name) is not None and name not in self.internal:
                log.warning("mcp proxy: %s is taken by a tool; server %s's resources and "
                            "prompts are not forwarded", name, label)
                return
        for d in server_request_definitions(
                label, up.config.client_timeout_s or up.config.timeout_s):
            if d.name not in self.internal and self.registry.definition(d.name) is None:
                self.internal.add(d.name)
                self.backchannel.audited.add(d.name)
                self.registry.register(d, self.backchannel.handler())
        if up.supports("resources") and read_name not in self.internal:
            self.internal.add(read_name)
            self.registry.register(ToolDefinition(
                name=read_name, description=f"resources/read on MCP server {label}",
                parameters={"type": "object", "properties": {
                    "uri": {"type": "string"}, "path": {"type": "string"}},
                    "required": ["uri"]},
                path_params=("path",), capability=Capability.READ, effect=Effect.NONE,
                cancellable=False, timeout_s=up.config.timeout_s, source=f"mcp:{label}",
                tool_type="datastore"), self._reader(label))
        if up.supports("prompts") and prompt_name not in self.internal:
            self.internal.add(prompt_name)
            self.registry.register(ToolDefinition(
                name=prompt_name, description=f"prompts/get on MCP server {label}",
                parameters={"type": "object", "properties": {
                    "name": {"type": "string"}, "arguments": {"type": "object"}},
                    "required": ["name"]},
                capability=Capability.READ, effect=Effect.NONE, cancellable=False,
                timeout_s=up.config.timeout_s, source=f"mcp:{label}"), self._prompter(label))

    def instructions(self) -> str | None:
        """The upstreams' instructions, each under its server's label."""
        parts = [f"[{u.label}]\n{u.instructions.strip()}" for u in self.upstreams.values()
                 if u.instructions and u.instructions.strip()]
        return "\n\n".join(parts) or None

    def notification_options(self) -> Any:
        """The front's ``listChanged`` flags for a handshake-era client (an SDK
        ``NotificationOptions``): a kind of list may change when an upstream connected at a
        handshake-era revision says its own may, as the proxy passes its notifications on.
        (At 2026-07-28 the flag means a ``subscriptions/listen`` stream instead, which the SDK
        derives from the front's own listen handler.)"""
        from mcp.server.lowlevel.server import NotificationOptions
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        def changes(kind: str) -> bool:
            return any(getattr(getattr(u.capabilities, kind, None), "list_changed", None) is True
                       for u in self.upstreams.values()
                       if u.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS)

        return NotificationOptions(prompts_changed=changes("prompts"),
                                   resources_changed=changes("resources"),
                                   tools_changed=changes("tools"))

    def seen(self, client: str, session: Any, method: str = "") -> None:
        """Remember a client's session (notifications go to the clients seen)."""
        if session is None:
            return
        if method != "initialize":  # its handshake is over: it may be asked
            self.backchannel.client_arrived.set()
        self._sessions.pop(client, None)
        self._sessions[client] = session
        if len(self._sessions) > _MAX_CLIENTS:
            self._sessions.pop(next(iter(self._sessions)))

    def session_of(self, client: str) -> Any:
        """The latest session of ``client`` (None if it was never seen or was forgotten)."""
        return self._sessions.get(client)

    def only_session(self) -> Any:
        """The session of the one client seen (over stdio, the client), else None (and always
        None when ``isolated``: the shared connections then serve no client)."""
        if self.isolated or len(self._sessions) != 1:
            return None
        return next(iter(self._sessions.values()))

    def _with(self, capability: str) -> list[Upstream]:
        return [u for u in self.upstreams.values() if u.supports(capability)]

    # -- listings ------------------------------------------------------------------------

    def cache_hint(self, kind: str) -> dict[str, Any]:
        """The cache hint of the latest listing of ``kind`` (``resource``, ``template``,
        ``prompt``) as the upstreams gave it, as a listing result's fields (``ttl_ms``,
        ``cache_scope``); empty when an upstream gave none. Over several servers: the shortest
        time, and ``private`` when any says so."""
        return hint_fields(self._hints.get(kind))

    async def _merged(self, capability: str, kind: str, key: str,
                      fetch: Callable[[Any], Awaitable[Any]], field: str) -> list[Any]:
        out: list[Any] = []
        taken: set[str] = set()
        hints: list[Hint | None] = []
        for up in self._with(capability):
            try:
                conn, _ = await self.pick(up)
                items, hint = await conn.request(lambda s: all_pages(s, fetch, field))
            except UpstreamError as exc:
                log.warning("mcp upstream %s: listing %s failed: %s", up.label, kind, exc)
                continue
            hints.append(hint)
            for item in items:
                name = str(getattr(item, key))
                if name in taken:
                    continue
                taken.add(name)
                self._owner[(kind, name)] = up.label
                out.append(item)
        self._hints[kind] = combined(hints)
        return out

    async def list_resources(self) -> list[mt.Resource]:
        """Every upstream's resources."""
        return await self._merged("resources", "resource", "uri",
                                  lambda s: s.list_resources, "resources")

    async def list_templates(self) -> list[mt.ResourceTemplate]:
        """Every upstream's resource templates."""
        return await self._merged("resources", "template", "uri_template",
                                  lambda s: s.list_resource_templates, "resource_templates")

    async def list_prompts(self) -> list[mt.Prompt]:
        """Every upstream's prompts."""
        return await self._merged("prompts", "prompt", "name",
                                  lambda s: s.list_prompts, "prompts")

    async def _route(self, capability: str, kind: str, name: str) -> Upstream:
        label = self._owner.get((kind, name))
        if label is None and kind in ("resource", "prompt"):
            await (self.list_resources() if kind == "resource" else self.list_prompts())
            label = self._owner.get((kind, name))
        servers = self._with(capability)
        if label is None:
            if not servers:
                raise _mcp_error(_INVALID_PARAMS, f"no upstream server offers {capability}")
            return servers[0]
        return self.upstreams[label]

    # -- requests through the registry ---------------------------------------------------

    async def read_resource(self, uri: str) -> mt.ReadResourceResult:
        """``resources/read`` through the registry (audited, policed, redacted)."""
        import mcp.types as mt

        up = await self._route("resources", "resource", uri)
        args: dict[str, Any] = {"uri": uri}
        parsed = urlparse(uri)
        if parsed.scheme == "file":
            args["path"] = unquote(parsed.path)
        data = await self._through(internal_tool_names(up.label)[0], args, "resources/read")
        return mt.ReadResourceResult.model_validate(data, by_alias=True)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None
                         ) -> mt.GetPromptResult:
        """``prompts/get`` through the registry (audited, policed, redacted)."""
        import mcp.types as mt

        up = await self._route("prompts", "prompt", name)
        args = {"name": name, "arguments": dict(arguments or {})}
        data = await self._through(internal_tool_names(up.label)[1], args, "prompts/get")
        return mt.GetPromptResult.model_validate(data, by_alias=True)

    async def _through(self, tool: str, args: dict[str, Any], method: str) -> Any:
        if tool not in self.internal:
            raise _mcp_error(_INVALID_PARAMS, f"{method} is not forwarded to this server")
        call = ToolCall(name=tool, arguments=args, attributes={"mcp.method.name": method})
        env = await self.registry.acall(call)
        held = self._held.pop(env.call_id, {})
        raw = self._raw.pop(env.call_id, None)
        refused = self._refused.pop(env.call_id, None)
        if env.status is not Status.OK:
            if refused is not None:  # the upstream's own answer, as it sent it
                raise upstream_error(refused, self.registry.redactor)
            code = _INVALID_PARAMS if env.reject_stage is not None else _INTERNAL_ERROR
            raise _mcp_error(code, env.summary)
        # The answer is the whole result, redacted (an offloaded one is redacted again here:
        # a resource is read whole, the artifact only keeps the trail small).
        data = env.data
        if env.artifact is not None and raw is not None:
            data, _ = self.registry.redactor.redact(_hold(raw, {}))
        if raw is not None and isinstance(data, dict) and data != _hold(raw, {}):
            data = marked(dict(data), env, ["redacted"])  # said in _meta, as for a call
        return _restore(data, held)

    def _keep(self, call_id: str, wire: dict[str, Any]) -> Any:
        held: dict[str, str] = {}
        shaped = _hold(wire, held)
        self._held[call_id] = held
        self._raw[call_id] = wire
        return shaped

    async def _sent(self, call_id: str, label: str, method: str, target: str,
                    fn: Callable[[Any, dict[str, Any] | None], Awaitable[Any]]) -> Any:
        """One read or prompt sent upstream under a CLIENT span whose context goes in its
        ``_meta``; the answer in wire form (the fields the upstream sent), or
        ``UpstreamRPCError`` kept for ``_through``."""
        tel = self.telemetry
        meta: dict[str, Any] = {}
        up, key = await self.pick(self.upstreams[label])
        span_cm = (tel.client_span(label, method, target, meta) if tel is not None
                   else contextlib.nullcontext())
        t0 = clock()
        error: str | None = None
        with self.backchannel.serving_current(key), span_cm as span:
            try:
                res = await up.request(lambda s: fn(s, meta or None))
            except BaseException as exc:
                error = str(getattr(exc, "error_type", None) or type(exc).__qualname__)
                mark_error(span, error)
                if isinstance(exc, UpstreamRPCError):
                    self._refused[call_id] = exc
                raise
            finally:
                if tel is not None:
                    tel.record_client(label, method, error, clock() - t0)
        return self._keep(call_id, from_upstream(res))

    def _reader(self, label: str) -> Any:
        async def read_resource(ctx: Any, /, uri: str, path: str | None = None) -> Any:
            return await self._sent(ctx.call_id, label, "resources/read", uri,
                                    lambda s, meta: s.read_resource(uri, meta=meta))
        return read_resource

    def _prompter(self, label: str) -> Any:
        async def get_prompt(ctx: Any, /, name: str, arguments: dict[str, Any]) -> Any:
            args = {str(k): str(v) for k, v in arguments.items()}
            return await self._sent(ctx.call_id, label, "prompts/get", name,
                                    lambda s, meta: s.get_prompt(name, args, meta=meta))
        return get_prompt

    # -- requests forwarded as they are --------------------------------------------------

    async def complete(self, params: mt.CompleteRequestParams) -> mt.CompleteResult:
        """``completion/complete``, routed by the prompt or template it completes."""
        import mcp.types as mt

        ref = params.ref
        if getattr(ref, "type", "") == "ref/prompt":
            up = await self._route("prompts", "prompt", str(getattr(ref, "name", "")))
        else:
            up = await self._route("resources", "template", str(getattr(ref, "uri", "")))
        ctx_args = params.context.arguments if params.context is not None else None
        argument = {"name": params.argument.name, "value": params.argument.value}
        res: mt.CompleteResult = await self._forward(
            up, lambda s: s.complete(ref, argument, ctx_args))
        return mt.CompleteResult.model_validate(from_upstream(res), by_alias=True)

    async def subscribe(self, client: str, uri: str, on: bool) -> None:
        """``resources/subscribe`` and ``unsubscribe``: the owner of ``uri`` is told."""
        up = await self._route("resources", "resource", uri)
        subs = self._subscribed.setdefault(uri, set())
        with warnings.catch_warnings():  # deprecated by the newest protocol only
            warnings.simplefilter("ignore", Warning)
            if on:
                subs.add(client)
                await self._forward(up, lambda s: s.subscribe_resource(uri))
            else:
                subs.discard(client)
                if not subs or self.isolated:  # a client's own connection, or the last one
                    await self._forward(up, lambda s: s.unsubscribe_resource(uri))

    async def set_level(self, level: Any) -> None:
        """``logging/setLevel``: every upstream that logs gets the level."""
        for up in self._with("logging"):
            await self._forward(up, lambda s: s.set_logging_level(level))

    async def roots_changed(self, ups: list[Upstream]) -> None:
        """``notifications/roots/list_changed`` from a client, passed on to ``ups`` (the
        client's upstream connections)."""
        for up in ups:
            try:
                with warnings.catch_warnings():  # roots: deprecated by the newest protocol only
                    warnings.simplefilter("ignore", Warning)
                    await up.request(lambda s: s.send_roots_list_changed())
            except UpstreamError as exc:
                log.info("mcp upstream %s: roots/list_changed not passed on: %s", up.label, exc)

    async def _forward(self, up: Upstream, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        try:
            up, _ = await self.pick(up)
            return await up.request(fn)
        except UpstreamRPCError as exc:
            raise _mcp_error(exc.code, str(exc)) from None
        except UpstreamError as exc:
            raise _mcp_error(_INTERNAL_ERROR, str(exc)) from None

    # -- notifications from upstream -----------------------------------------------------

    async def on_notify(self, up: Upstream, message: Any, *, client: str | None = None) -> None:
        """An upstream's notification, passed on to the clients that can want it (``client``:
        the one client the connection belongs to)."""
        import mcp.types as mt

        root = getattr(message, "root", message)
        if client is not None:
            session = self._sessions.get(client)
            to = {client: session} if session is not None else {}
        elif self.isolated and not isinstance(root, mt.ToolListChangedNotification):
            to = {}  # a shared connection: what it says belongs to no client
        else:
            to = dict(self._sessions)
        try:
            if isinstance(root, mt.ResourceUpdatedNotification):
                uri = str(root.params.uri)
                for c in to.keys() & self._subscribed.get(uri, set()):
                    await to[c].send_resource_updated(uri)
            elif isinstance(root, mt.LoggingMessageNotification):
                data, _ = self.registry.redactor.redact(root.params.data)
                logger = root.params.logger  # as the upstream named it (or did not)
                for s in to.values():
                    with warnings.catch_warnings():  # deprecated by the newest protocol only
                        warnings.simplefilter("ignore", UserWarning)
                        await s.send_log_message(root.params.level, data, logger=logger)
            elif isinstance(root, mt.ResourceListChangedNotification):
                for s in to.values():
                    await s.send_resource_list_changed()
            elif isinstance(root, mt.PromptListChangedNotification):
                for s in to.values():
                    await s.send_prompt_list_changed()
            elif isinstance(root, mt.ToolListChangedNotification):
                for s in to.values():
                    await s.send_tool_list_changed()
        except Exception:  # a client that went away must not break the upstream's session
            log.debug("mcp proxy: a notification could not be passed on", exc_info=True)


async def _same(up: Upstream) -> tuple[Upstream, str]:
    return up, up.label

