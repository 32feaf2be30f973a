"""The MCP proxy's core: upstream servers' tools registered in a ``ToolRegistry``.

Every ``tools/call`` the proxy receives goes through ``ToolRegistry.acall``: validation against
the upstream's input schema, policy (including the pin rule) and approval, hooks, admission and
deadline, then the upstream call, then redaction and offload of the result, span, metrics, log
line and audit record. A rejected call never reaches the upstream server; the client gets an
``isError`` result carrying the envelope's summary, never raw exception text. What the upstream
answered reaches the client as it was sent (``_results``): its error results with every block,
its JSON-RPC errors with their code, message and data.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _settings
from ..exceptions import ConfigurationError, RegistrationError
from ..model import NAME_RE, Capability, Effect, Principal, Stage, Status, ToolCall, ToolDefinition
from ..policy import (
    DenyCommandPatterns,
    PolicyDecision,
    PolicyRequest,
    RequireApproval,
    Rule,
    Verdict,
)
from ..redaction import default_redactor
from ..registry import ToolRegistry
from ..runtime import CallContext
from ._backchannel import Backchannel
from ._clients import ClientUpstreams
from ._config import ProxyConfig, resolve_approver, resolve_hooks, resolve_rules
from ._errors import UpstreamRPCError, UpstreamToolError
from ._filepolicy import proxy_policy
from ._identity import PrincipalRuns
from ._listing import combined, hint_fields
from ._network import PrivateNetworkRule, allow_lists
from ._pins import ChangedToolsRule, PinCheck, PinStore
from ._protocol import Forwarder
from ._reports import Collision, ProxyReport, ServerReport, ToolReport
from ._results import HeldResult, _error_text, proxied_result, shape_result, upstream_error
from ._telemetry import ProxyTelemetry, clock, mark_error
from ._upstream import Upstream, until_cancelled

if TYPE_CHECKING:
    import mcp.types as mt

__all__ = ["Collision", "McpProxy", "ProxyReport", "ServerReport", "ToolReport"]

log = logging.getLogger("tooltrace.mcp")

#: JSON-RPC's "invalid params", the MCP spec's answer to a call of an unknown tool.
INVALID_PARAMS = -32602


@dataclass(frozen=True, slots=True)
class _Exposed:
    name: str
    server: str
    upstream_name: str
    wire: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class _DenyTools:
    """Policy rule ``mcp_deny``: deny the named (exposed) tools outright."""

    tools: frozenset[str]
    name: str = "mcp_deny"

    def names_tool(self, name: str) -> bool:
        """Whether ``name`` is one of the denied tools."""
        return name in self.tools

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        if request.tool.name in self.tools:
            return PolicyDecision(Verdict.DENY, self.name,
                                  f"{request.tool.name} is denied by the proxy configuration")
        return None


class McpProxy:
    """Upstream MCP servers behind one registry.

    Use ``await start()``, then ``list_tools()`` / ``await call_tool(...)`` (what the MCP
    server front end serves), ``report()``, and ``await aclose()``. ``registry`` may be given
    (tests, embedding); by default one is built with every configured sink, the proxy's policy,
    hooks and approver.
    """

    def __init__(self, config: ProxyConfig, *, registry: ToolRegistry | None = None,
                 pin_new: bool = True, meter_provider: Any = None) -> None:
        self.config = config
        self.home = _settings.resolve_home(config.home, workspace=config.workspace)
        self.pins = PinStore(self.home)
        self.pin_new = pin_new
        # Registry names of the servers' resources/read calls (filled at start).
        self._readers: set[str] = set()
        verdict = {"ask": Verdict.ASK, "deny": Verdict.DENY, "allow": Verdict.ALLOW}[
            config.rug_pull]
        self.changed_rule = ChangedToolsRule(verdict)
        self.registry = registry if registry is not None else self._build_registry()
        #: SERVER/CLIENT spans and operation durations (MCP semantic conventions).
        self.telemetry = ProxyTelemetry(self.registry, [s.label for s in config.servers],
                                        meter_provider=meter_provider)
        #: Identifies this proxy's session in spans when the transport has no session id.
        self.session_id = uuid.uuid4().hex
        self.upstreams: dict[str, Upstream] = {}
        #: Resources, prompts, completion, logging and upstream notifications.
        self.forwarder = fw = Forwarder(self.registry, self.upstreams, self.telemetry)
        #: Upstreams' sampling, elicitation and roots requests, forwarded to the client.
        self.backchannel = fw.backchannel
        #: Each client session's own upstream connections (over HTTP).
        self.clients = ClientUpstreams(fw, self._on_tools, config.idle_timeout_s)
        self._exposed: dict[str, _Exposed] = {}
        self._exposed_by_upstream: dict[tuple[str, str], str] = {}
        self._checks: dict[str, dict[str, PinCheck]] = {}
        self._listings: dict[str, list[dict[str, Any]]] = {}
        self._tools: list[ToolReport] = []
        self._collisions: list[Collision] = []
        self._conflicts: list[str] = []
        self._errors: dict[str, str] = {}
        self._metrics_server: Any = None
        # Upstream results by call id, from the handler until call_tool shapes the answer;
        # likewise the JSON-RPC errors upstreams answered calls with.
        self._held: dict[str, HeldResult] = {}
        self._refused: dict[str, UpstreamRPCError] = {}
        self._runs = PrincipalRuns()

    # -- setup -------------------------------------------------------------------------------

    def policy_rules(self) -> list[Rule]:
        """The proxy's policy: pin changes, configured deny/ask lists, the default content rules
        and any extra rules from the configuration."""
        cfg = self.config
        rules: list[Rule] = [self.changed_rule]
        if cfg.deny:
            rules.append(_DenyTools(cfg.policy_names(cfg.deny)))
        if cfg.ask:
            rules.append(RequireApproval(tools=cfg.policy_names(cfg.ask), name="mcp_ask"))
        rules += [DenyCommandPatterns(),
                  PrivateNetworkRule(self._readers, allow_lists(cfg.servers))]
        rules += resolve_rules(cfg.rules)
        return rules

    def _build_registry(self) -> ToolRegistry:
        from .. import create_registry

        cfg = self.config
        metrics = cfg.metrics_port is not None
        policy, attach = proxy_policy(self.policy_rules(), cfg.policy_file,
                                      cfg.expand_wildcard)
        reg = create_registry(
            cfg.workspace, home=self.home, metrics=metrics, builtins=False,
            policy=policy, hooks=resolve_hooks(cfg.hooks),
            approver=resolve_approver(cfg.approval, self.home),
            cancel_grace_s=cfg.cancel_grace_s,
            max_inline_chars=cfg.max_inline_chars, preview_chars=cfg.preview_chars,
        )
        attach(reg)
        if metrics:
            from ..telemetry.metrics import MetricsSink, serve_metrics

            sink = next((s for s in reg.sinks if isinstance(s, MetricsSink)), None)
            if sink is not None:
                self._metrics_server = serve_metrics(cfg.metrics_port or 0, registry=sink)
        return reg

    async def start(self, *, strict: bool = True) -> None:
        """Start every upstream, list its tools, check pins and register the tools.

        A server that fails to start is reported and its tools are not exposed. With
        ``strict``, a name clash the rule cannot resolve (equal priorities) raises
        ``ConfigurationError``; otherwise it is only reported.
        """
        from ..telemetry import AuditSink

        # The audit segment opens meanwhile: the client that stops the proxy gives it only a
        # short grace, and the records must not still be queued behind the opening's fsyncs.
        for sink in self.registry.sinks:
            if isinstance(sink, AuditSink):
                sink.open_segment()
        for sc in self.config.servers:
            cb = self.backchannel.callbacks(sc.label, self.forwarder.only_session)
            self.upstreams[sc.label] = Upstream(sc, on_tools=self._on_tools,
                                                on_notify=self.forwarder.on_notify, callbacks=cb)
        results = await asyncio.gather(
            *(u.start() for u in self.upstreams.values()), return_exceptions=True)
        for up, res in zip(self.upstreams.values(), results, strict=True):
            if isinstance(res, BaseException):
                self._errors[up.label] = default_redactor().bounded(str(res), 300)
                log.warning("mcp upstream %s: %s", up.label, self._errors[up.label])
        self._plan_and_register()
        for label, up in self.upstreams.items():
            if up.capabilities is not None:
                self.forwarder.register(label)
        self._readers.update(n for n in self.forwarder.internal if n.endswith(".read_resource"))
        for label in self._listings:
            self._apply_flags(label)
        if strict and self._conflicts:
            raise ConfigurationError("tool name conflicts: " + "; ".join(self._conflicts))

    def _on_tools(self, up: Upstream, tools: list[dict[str, Any]]) -> None:
        # Called at every (re)connect and after a tools/list_changed notification.
        checks = self.pins.check(up.label, tools, pin_new=self.pin_new)
        self._checks[up.label] = {c.tool: c for c in checks}
        self._listings.setdefault(up.label, tools)
        for c in checks:
            if c.state == "changed":
                log.warning(
                    "mcp tool %s from server %s changed its description or schema since it "
                    "was pinned (sha256 %s, pinned %s)", c.tool, up.label, c.sha256[:12],
                    (c.pinned_sha256 or "")[:12])
        self._apply_flags(up.label)

    def _apply_flags(self, label: str) -> None:
        checks = self._checks.get(label, {})
        changed: list[str] = []
        same: list[str] = []
        for tool, c in checks.items():
            exposed = self._exposed_by_upstream.get((label, tool))
            if exposed is None:
                continue
            (changed if c.state == "changed" else same).append(exposed)
        self.changed_rule.flag(changed)
        self.changed_rule.clear(same)

    def _plan_and_register(self) -> None:
        cfg = self.config
        by_name: dict[str, list[str]] = {}
        for sc in cfg.servers:
            for t in self._listings.get(sc.label, []):
                by_name.setdefault(str(t.get("name")), []).append(sc.label)
        prio = {sc.label: sc.priority for sc in cfg.servers}
        for name, labels in sorted(by_name.items()):
            if len(labels) < 2:
                continue
            if cfg.collisions == "prefix":
                res = ", ".join(f"{lb}{cfg.separator}{name}" for lb in labels)
            else:
                order = sorted(labels, key=lambda lb: -prio[lb])
                if prio[order[0]] == prio[order[1]]:
                    res = "conflict: equal priorities"
                else:
                    res = f"mcp:{order[0]} active; shadowed: " + ", ".join(
                        f"mcp:{lb}" for lb in order[1:])
            self._collisions.append(Collision(name, tuple(labels), cfg.collisions, res))
        for sc in cfg.servers:
            for t in self._listings.get(sc.label, []):
                name = str(t.get("name"))
                shared = len(by_name.get(name, [])) > 1
                exposed = (f"{sc.label}{cfg.separator}{name}"
                           if cfg.collisions == "prefix" and (shared or cfg.prefix_all) else name)
                self._register(sc.label, name, exposed, t)
        active = {r.name: r.active_source for r in self.registry.resolution()}
        self._tools = [
            ToolReport(t.name, t.server, t.upstream_name,
                       t.state if t.state == "skipped" else (
                           "active" if active.get(t.name) == f"mcp:{t.server}" else "shadowed"),
                       t.pin, t.reason)
            for t in self._tools
        ]

    def _register(self, label: str, name: str, exposed: str, wire: Mapping[str, Any]) -> None:
        sc = next(s for s in self.config.servers if s.label == label)
        check = self._checks.get(label, {}).get(name)
        pin = check.state if check is not None else "new"

        def skip(reason: str) -> None:
            self._tools.append(ToolReport(exposed, label, name, "skipped", pin, reason))
            log.warning("mcp tool %s from server %s is not exposed: %s", name, label, reason)

        if not NAME_RE.match(exposed):
            skip("name outside the allowed characters [A-Za-z0-9._-] or longer than 128")
            return
        if exposed in self._exposed and self.config.collisions == "prefix":
            other = self._exposed[exposed]
            skip(f"exposed name {exposed} is already taken by server {other.server}")
            self._conflicts.append(f"{exposed} from {label} and {other.server}")
            return
        ann = wire.get("annotations") or {}
        read_only = sc.trust_annotations and ann.get("readOnlyHint") is True
        schema = wire.get("inputSchema")
        if not isinstance(schema, Mapping):
            schema = {"type": "object"}
        try:
            definition = ToolDefinition(
                name=exposed,
                description=str(wire.get("description") or ""),
                parameters=schema,
                capability=Capability.READ if read_only else sc.capability,
                # An MCP server's work happens in another process we cannot confirm stopped:
                # side effects reach outside, and the call is not cancellable.
                effect=Effect.NONE if read_only else Effect.EXTERNAL,
                cancellable=False,
                timeout_s=sc.timeout_s,
                source=f"mcp:{label}",
                priority=sc.priority,
                tool_type=sc.tool_type,
            )
            self.registry.register(definition, self._handler(label, name, wire))
        except RegistrationError as exc:
            reason = default_redactor().bounded(str(exc), 300)
            if "same priority" in reason:
                self._conflicts.append(f"{exposed} from {label}: equal priorities")
            skip(reason)
            return
        if exposed not in self._exposed or self._wins(label, exposed):
            self._exposed[exposed] = _Exposed(exposed, label, name, dict(wire))
        self._exposed_by_upstream[(label, name)] = exposed
        self._tools.append(ToolReport(exposed, label, name, "active", pin))

    def _wins(self, label: str, exposed: str) -> bool:
        d = self.registry.definition(exposed)
        return d is not None and d.source == f"mcp:{label}"

    def _handler(self, label: str, upstream_name: str, wire: Mapping[str, Any]) -> Any:
        grace = self.config.cancel_grace_s
        tel = self.telemetry

        async def call_upstream(ctx: CallContext, /, **arguments: Any) -> Any:
            up, key = await self.clients.pick(self.upstreams[label])
            meta: dict[str, Any] = {"traceparent": ctx.traceparent} if ctx.traceparent else {}
            # Wait a little past the registry's deadline and grace: if the server is still
            # silent then, the registry has already answered (unknown for side effects, as the
            # server may have acted) and the server is killed and restarted.
            left = ctx.remaining()
            t0 = clock()
            error: str | None = None
            async def progress(done: float, total: float | None, message: str | None) -> None:
                # The upstream's progress, published as the call's own (redacted, rate-limited;
                # a client that asked for progress gets it).
                try:
                    ctx.progress(max(float(done), 0.0), total if total and total > 0 else None,
                                 message if isinstance(message, str) else None)
                except (TypeError, ValueError):
                    pass

            with self.backchannel.serving_current(key), tel.client_span(
                    label, "tools/call", upstream_name, meta) as span:
                try:
                    res = await until_cancelled(ctx, up.call(
                        upstream_name, arguments, meta=meta or None,
                        wait_s=left + grace + 0.25, suspect_after_s=left, progress=progress))
                except BaseException as exc:
                    error = str(getattr(exc, "error_type", None) or type(exc).__qualname__)
                    mark_error(span, error)
                    if isinstance(exc, UpstreamRPCError):
                        self._refused[ctx.call_id] = exc
                    raise
                finally:
                    if error is not None:
                        tel.record_client(label, "tools/call", error, clock() - t0)
                if res.is_error:
                    error = "tool_error"
                    mark_error(span, error)
                tel.record_client(label, "tools/call", error, clock() - t0)
            held = shape_result(res, wire.get("outputSchema"), self.registry.redactor)
            self._held[ctx.call_id] = held
            if res.is_error:  # the call failed; the client still gets the whole result
                raise UpstreamToolError(_error_text(res))
            return held.shaped

        call_upstream.__name__ = f"mcp_{label}_{upstream_name}"[:100]
        return call_upstream

    async def aclose(self) -> None:
        """Stop the upstream servers, then flush and shut down the registry's sinks."""
        # In parallel: a client that closed stdin gives the proxy only a short grace before it
        # escalates to signals, and the audit and spans must be flushed within it.
        await asyncio.gather(asyncio.to_thread(self.registry.shutdown, 5.0), self.clients.aclose(),
                             *(u.aclose() for u in self.upstreams.values()),
                             return_exceptions=True)
        if self._metrics_server is not None:
            try:
                self._metrics_server.shutdown()
            except Exception:
                pass

    # -- what the front end serves ---------------------------------------------------------

    def list_tools(self) -> list[mt.Tool]:
        """The tools visible in the configured mode, as MCP ``Tool`` objects, in the order of
        the configured servers and, within one, the order the server listed them in."""
        import mcp.types as mt

        out: list[mt.Tool] = []
        changed = self.changed_rule.changed
        visible = {d.name: d for d in self.registry.visible_tools(self.config.mode).visible}
        for name in self._listed_order():
            d = visible.get(name)
            ex = self._exposed.get(name)
            if d is None or ex is None:
                continue
            # Task execution is the one thing a listed tool loses: the proxy runs no tasks.
            wire = {k: v for k, v in ex.wire.items() if k != "execution"}
            wire["name"] = d.name
            if d.name in changed and self.config.rug_pull != "allow":
                wire["description"] = (
                    "[tooltrace: this tool changed since it was pinned; calls need approval] "
                    + str(wire.get("description") or ""))
            try:
                out.append(mt.Tool.model_validate(wire))
            except Exception:
                out.append(mt.Tool(name=d.name, description=d.description,
                                   input_schema=dict(d.parameters)))
        return out

    def tools_cache_hint(self) -> dict[str, Any]:
        """The cache hint of ``tools/list`` (2026-07-28) as the servers gave it, as a listing
        result's fields: over several servers the shortest time, ``private`` when any says
        so; empty when a server gave none (``_listing``)."""
        return hint_fields(combined([u.tools_hint for u in self.upstreams.values()
                                     if u.capabilities is not None]))

    def _listed_order(self) -> list[str]:
        """Exposed tool names in the servers' order and each server's listing order."""
        names: list[str] = []
        for sc in self.config.servers:
            for t in self._listings.get(sc.label, []):
                exposed = self._exposed_by_upstream.get((sc.label, str(t.get("name"))))
                if exposed is not None and exposed not in names:
                    names.append(exposed)
        return names

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        attributes: Mapping[str, str | int | bool] | None = None,
        call_id: str | None = None,
        client: tuple[Any, Any] | None = None,
        principal: Principal | None = None,
    ) -> dict[str, Any]:
        """Run one ``tools/call`` through the registry; return the ``CallToolResult`` the
        client gets, in wire form (``_results.proxied_result``). An unknown tool, and a call
        the upstream answered with a JSON-RPC error, raise ``MCPError`` (the latter with the
        upstream's code, message and data). ``call_id``: the id to give the call, so its
        events can be told apart; ``client``: the downstream session and request id that the
        upstream's sampling, elicitation and roots requests go to while the call runs;
        ``principal``: whom it acts for, in its own run."""
        attrs: dict[str, str | int | bool] = {"mcp.method.name": "tools/call"}
        if attributes:
            attrs.update(attributes)
        ex = self._exposed.get(name)
        if name in self.forwarder.internal:
            from mcp.shared.exceptions import MCPError

            # A server's read_resource or get_prompt: not callable as a tool.
            raise MCPError(INVALID_PARAMS, f"unknown tool: {name[:128]}")
        if ex is not None:
            attrs["tooltrace.mcp.server"] = ex.server
            attrs["tooltrace.mcp.upstream_tool"] = ex.upstream_name
        call = ToolCall(name=name, arguments=arguments if arguments is not None else {},
                        mode=self.config.mode, attributes=attrs, call_id=call_id,
                        principal=principal, run_id=self._runs.run_of(principal))
        with Backchannel.serving_client(client):
            env = await self.registry.acall(call)
        held = self._held.pop(env.call_id, None)
        refused = self._refused.pop(env.call_id, None)
        if env.reject_stage is Stage.RESOLVE:
            from mcp.shared.exceptions import MCPError

            # The spec's answer for a tool the server does not have (the call is audited).
            raise MCPError(INVALID_PARAMS, f"unknown tool: {name[:128]}")
        if refused is not None and env.status is not Status.OK:
            raise upstream_error(refused, self.registry.redactor)
        return proxied_result(env, held, redactor=self.registry.redactor,
                              preview_chars=self.registry.preview_chars,
                              call_ids=self.config.call_ids)

    def report(self) -> ProxyReport:
        """Servers, tools with their pin state, collisions and the registry's shadow report."""
        servers = []
        for sc in self.config.servers:
            up = self.upstreams.get(sc.label)
            state = up.state if up is not None else "stopped"
            if sc.label in self._errors and (up is None or state != "running"):
                state = "failed"
            err = self._errors.get(sc.label) or (up.last_error if up is not None else None)
            servers.append(ServerReport(sc.label, state, len(self._listings.get(sc.label, [])),
                                        up.restarts if up is not None else 0, err))
        tools = []
        for t in self._tools:
            c = self._checks.get(t.server, {}).get(t.upstream_name)
            tools.append(ToolReport(t.name, t.server, t.upstream_name, t.state,
                                    c.state if c is not None else t.pin, t.reason))
        internal = self.forwarder.internal  # reads, prompts, server requests: not tools
        return ProxyReport(tuple(servers), tuple(tools), tuple(self._collisions),
                           tuple(r for r in self.registry.resolution() if r.name not in internal),
                           tuple(self._conflicts))

    def accept(self, server: str | None = None, tools: list[str] | None = None) -> list[str]:
        """Re-pin tools to what their servers say now; return ``server:tool`` names re-pinned."""
        done: list[str] = []
        for label, listing in self._listings.items():
            if server is not None and label != server:
                continue
            names = None
            if tools:
                names = [t for t in (self._upstream_name(label, x) for x in tools) if t]
            for n in self.pins.accept(label, listing, names):
                done.append(f"{label}:{n}")
            self._checks[label] = {c.tool: c for c in self.pins.check(label, listing,
                                                                         pin_new=False)}
            self._apply_flags(label)
        return done

    def _upstream_name(self, label: str, name: str) -> str | None:
        ex = self._exposed.get(name)
        if ex is not None and ex.server == label:
            return ex.upstream_name
        if any(t.get("name") == name for t in self._listings.get(label, [])):
            return name
        return None
