"""The proxy's configuration: which upstream servers to start and how to police their tools.

Read from a TOML file (``load_config``) or built in code. Relative paths in the file are
relative to the file's directory. Hooks, approvers and extra policy rules are named as
``module:attribute`` strings or as entry points (groups ``tooltrace.hooks``,
``tooltrace.approvers``, ``tooltrace.rules``).
"""

from __future__ import annotations

import importlib
import ipaddress
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

from ..exceptions import ConfigurationError
from ..hooks import FunctionHook, Hook
from ..model import Capability
from ..policy import ApprovalDecision, ApprovalRequest, Rule
from ._serverrequests import SERVER_KINDS, server_request_name

__all__ = [
    "CollisionRule",
    "ProxyConfig",
    "RugPullAction",
    "ServerConfig",
    "load_config",
    "load_object",
    "resolve_approver",
    "resolve_hooks",
    "resolve_rules",
]

CollisionRule = Literal["prefix", "priority"]
RugPullAction = Literal["ask", "deny", "allow"]
Approver = Callable[[ApprovalRequest], ApprovalDecision]

_LABEL_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SEPARATORS = ("__", "_", ".", "-", "--")
_TOOL_TYPES = ("extension", "function", "datastore")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One upstream MCP server: started over stdio (``command``), or reached over streamable
    HTTP (``url``, with ``headers``; ``${NAME}`` in a header value is read from the environment
    when connecting, so a bearer token lives in the environment, never in the file or a log).

    ``label`` names it in tool sources (``mcp:<label>``) and prefixes; ``priority`` decides a
    name clash under the ``priority`` rule; ``timeout_s`` is each call's default deadline;
    ``capability`` is what tools not annotated read-only are policed as; with
    ``trust_annotations`` a tool annotated ``readOnlyHint`` counts as read-only with no side
    effects, otherwise every tool has external effects. ``client_timeout_s`` is how long a
    sampling, elicitation or roots request of the server waits for the client's answer (default:
    ``timeout_s``; one asked during a call also ends with that call). ``protocol_version`` is
    the revision the proxy speaks to the server: ``auto`` (the newest both support: a
    ``server/discover`` first, the ``initialize`` handshake when the server does not answer
    it), or one revision (``2025-11-25``, ``2026-07-28``, ...).
    """

    label: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    priority: int = 0
    timeout_s: float = 30.0
    tool_type: str = "extension"
    capability: Capability = Capability.WRITE
    trust_annotations: bool = True
    startup_timeout_s: float = 20.0
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Hosts (names or addresses) and networks (CIDR) this server's tools may be pointed at
    #: although they are private or local (the private-network rule lets them through).
    allow_private: tuple[str, ...] = ()
    client_timeout_s: float | None = None
    protocol_version: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not _LABEL_RE.match(self.label):
            raise ConfigurationError(
                f"server label must match {_LABEL_RE.pattern}, got {str(self.label)[:40]!r}")
        if self.url is not None:
            if self.command or not isinstance(self.url, str) or not self.url.startswith(
                    ("http://", "https://")):
                raise ConfigurationError(
                    f"server {self.label!r}: give either a command or an http(s) url")
        elif not isinstance(self.command, str) or not self.command:
            raise ConfigurationError(f"server {self.label!r}: command must be a non-empty string")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()):
            raise ConfigurationError(f"server {self.label!r}: header values must be strings")
        for entry in self.allow_private:
            if not isinstance(entry, str) or not entry:
                raise ConfigurationError(f"server {self.label!r}: allow_private takes strings")
            if "/" in entry:
                try:
                    ipaddress.ip_network(entry, strict=False)
                except ValueError:
                    raise ConfigurationError(
                        f"server {self.label!r}: allow_private entry {entry[:60]!r} is not a "
                        "network") from None
        if not all(isinstance(a, str) for a in self.args):
            raise ConfigurationError(f"server {self.label!r}: args must be strings")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            raise ConfigurationError(f"server {self.label!r}: env values must be strings")
        if self.protocol_version != "auto" and self.protocol_version not in _revisions():
            raise ConfigurationError(
                f"server {self.label!r}: protocol_version must be 'auto' or one of "
                f"{list(_revisions())}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ConfigurationError(f"server {self.label!r}: priority must be an integer")
        for name in ("timeout_s", "startup_timeout_s", "client_timeout_s"):
            value = getattr(self, name)
            if value is None and name == "client_timeout_s":
                continue
            if not _positive(value):
                raise ConfigurationError(f"server {self.label!r}: {name} must be a positive number")
        if self.tool_type not in _TOOL_TYPES:
            raise ConfigurationError(
                f"server {self.label!r}: tool_type must be one of {_TOOL_TYPES}")
        try:
            object.__setattr__(self, "capability", Capability(self.capability))
        except ValueError:
            raise ConfigurationError(
                f"server {self.label!r}: capability must be one of "
                f"{[c.value for c in Capability]}") from None


def _revisions() -> tuple[str, ...]:
    """The protocol revisions the MCP SDK speaks, oldest first."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    return (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Everything the proxy needs: upstream servers and the registry's settings.

    ``collisions``: ``prefix`` exposes a name several servers share as ``<label><separator>
    <name>`` for each of them (``prefix_all`` prefixes every tool); ``priority`` keeps the
    shared name for the server with the highest priority and shadows the others (equal
    priorities refuse to start). ``rug_pull``: what a call of a tool whose description or
    schema changed since it was pinned gets: ``ask`` (approval), ``deny``, or ``allow`` (only
    flagged). ``approval``: ``deny`` (default), ``allow``, ``queue`` / ``queue:<seconds>`` (the
    home's approval queue), or a ``module:function`` approver.
    ``principal_header``: the HTTP request header naming the user a call acts for (the agent is
    the client's ``clientInfo`` name). ``idle_timeout_s``: over HTTP, how long a client session
    may go with no request in flight (and no open stream) before it ends: its upstream
    connections are closed and its session id then gets 404. ``deny`` / ``ask``: names whose
    calls are refused / need approval; ``mcp.*.<kind>`` names that kind (``SERVER_KINDS``) of
    every server (``policy_names``). ``call_ids``: every result's ``_meta`` names its call
    (``tooltrace/call_id``, ``tooltrace/status``); off (the default), only a result the proxy
    changed carries ``tooltrace/...`` keys.
    """

    servers: tuple[ServerConfig, ...] = ()
    home: str | None = None
    workspace: str | None = None
    collisions: CollisionRule = "prefix"
    separator: str = "__"
    prefix_all: bool = False
    rug_pull: RugPullAction = "ask"
    approval: str = "deny"
    deny: frozenset[str] = frozenset()
    ask: frozenset[str] = frozenset()
    rules: tuple[str, ...] = ()
    hooks: tuple[str, ...] = ()
    mode: str = "default"
    cancel_grace_s: float = 2.0
    max_inline_chars: int = 16384
    preview_chars: int = 2048
    metrics_port: int | None = None
    policy_file: str | None = None
    principal_header: str | None = None
    idle_timeout_s: float = 600.0
    call_ids: bool = False

    def __post_init__(self) -> None:
        labels = [s.label for s in self.servers]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ConfigurationError(f"server labels must be unique; repeated: {dupes}")
        if self.collisions not in ("prefix", "priority"):
            raise ConfigurationError("collisions must be 'prefix' or 'priority'")
        if self.separator not in _SEPARATORS:
            raise ConfigurationError(f"separator must be one of {_SEPARATORS}")
        if self.rug_pull not in ("ask", "deny", "allow"):
            raise ConfigurationError("rug_pull must be 'ask', 'deny' or 'allow'")
        if not isinstance(self.approval, str) or not self.approval:
            raise ConfigurationError(
                "approval must be 'deny', 'allow', 'queue[:<seconds>]' or 'module:function'")
        if not self.cancel_grace_s > 0:
            raise ConfigurationError("cancel_grace_s must be positive")
        if not isinstance(self.call_ids, bool):
            raise ConfigurationError("call_ids must be true or false")
        if not _positive(self.idle_timeout_s):
            raise ConfigurationError("idle_timeout_s must be a positive number of seconds")
        h = self.principal_header
        if h is not None and (not isinstance(h, str) or not _HEADER_RE.match(h)):
            raise ConfigurationError("principal_header must be an HTTP header name")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigurationError("metrics_port must be a TCP port number")
        for key, names in (("deny", self.deny), ("ask", self.ask)):
            for name in names:
                if "*" in name:
                    try:
                        self.expand_wildcard(name)
                    except ValueError as exc:
                        raise ConfigurationError(f"policy.{key}: {name!r}: {exc}") from None

    def expand_wildcard(self, name: str) -> frozenset[str]:
        """The names ``mcp.*.<kind>`` stands for: that kind of every configured server (a
        proxy's ``[policy]`` lists and its policy file's ``tools`` lists); ``ValueError`` for
        any other name with a ``*``."""
        kind = _wildcard_kind(name)
        if kind is None:
            raise ValueError(f"the only wildcard is mcp.*.<kind>, every server's requests of "
                             f"that kind (kind: {', '.join(SERVER_KINDS)})")
        return frozenset(server_request_name(s.label, kind) for s in self.servers)

    def policy_names(self, names: frozenset[str]) -> frozenset[str]:
        """``names`` (``deny`` or ``ask``) with each ``mcp.*.<kind>`` replaced by that kind of
        every configured server (``mcp.<server>.<kind>``)."""
        out: set[str] = set()
        for name in names:
            if "*" in name:
                out.update(self.expand_wildcard(name))
            else:
                out.add(name)
        return frozenset(out)



def _wildcard_kind(name: str) -> str | None:
    """The kind ``mcp.*.<kind>`` names, or None if ``name`` is not such a wildcard."""
    prefix, _, kind = name.rpartition(".")
    return kind if prefix == "mcp.*" and kind in SERVER_KINDS else None


_PROXY_KEYS = {
    "home", "workspace", "collisions", "separator", "prefix_all", "rug_pull", "hooks", "mode",
    "cancel_grace_s", "max_inline_chars", "preview_chars", "metrics_port", "principal_header",
    "idle_timeout_s", "call_ids",
}
_HEADER_RE = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_POLICY_KEYS = {"deny", "ask", "approval", "rules", "file"}
_SERVER_KEYS = {
    "command", "args", "env", "cwd", "priority", "timeout_s", "tool_type", "capability",
    "trust_annotations", "startup_timeout_s", "url", "headers", "allow_private",
    "client_timeout_s", "protocol_version",
}


def _positive(value: Any) -> bool:
    """A finite number of seconds above zero (not a bool)."""
    return (not isinstance(value, bool) and isinstance(value, int | float)
            and 0 < value < float("inf"))


def _unknown(section: str, got: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(got) - allowed)
    if extra:
        raise ConfigurationError(f"unknown key(s) in [{section}]: {', '.join(extra)}")


def _rel(base: Path, value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ConfigurationError(f"{what} must be a string path")
    p = Path(os.path.expandvars(os.path.expanduser(value)))
    return str(p if p.is_absolute() else (base / p).resolve())


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{what} must be a list of strings")
    return tuple(value)


def load_config(path: str | os.PathLike[str]) -> ProxyConfig:
    """Read a TOML proxy configuration (see the README section on the MCP proxy)."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(f"config file not found: {p.name}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"config file {p.name} is not valid TOML: {exc}") from None
    return config_from_dict(data, base=p.resolve().parent)


def config_from_dict(data: Mapping[str, Any], *, base: Path | None = None) -> ProxyConfig:
    """Build a ``ProxyConfig`` from parsed TOML (paths relative to ``base``)."""
    base = base or Path.cwd()
    _unknown("top level", data, {"proxy", "policy", "servers"})
    proxy = dict(data.get("proxy", {}))
    policy = dict(data.get("policy", {}))
    _unknown("proxy", proxy, _PROXY_KEYS)
    _unknown("policy", policy, _POLICY_KEYS)
    servers: list[ServerConfig] = []
    raw_servers = data.get("servers", {})
    if not isinstance(raw_servers, Mapping):
        raise ConfigurationError("[servers] must be a table of [servers.<label>] tables")
    for label, raw in raw_servers.items():
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"[servers.{label}] must be a table")
        _unknown(f"servers.{label}", raw, _SERVER_KEYS)
        kw: dict[str, Any] = dict(raw)
        if "command" not in kw and "url" not in kw:
            raise ConfigurationError(f"[servers.{label}] needs a command or a url")
        if "headers" in kw and not isinstance(kw["headers"], Mapping):
            raise ConfigurationError(f"servers.{label}.headers must be a table")
        if "args" in kw:
            kw["args"] = _strings(kw["args"], f"servers.{label}.args")
        if "allow_private" in kw:
            kw["allow_private"] = _strings(kw["allow_private"], f"servers.{label}.allow_private")
        if "cwd" in kw:
            kw["cwd"] = _rel(base, kw["cwd"], f"servers.{label}.cwd")
        if "env" in kw and not isinstance(kw["env"], Mapping):
            raise ConfigurationError(f"servers.{label}.env must be a table")
        try:
            servers.append(ServerConfig(label=label, **kw))
        except TypeError as exc:
            raise ConfigurationError(f"[servers.{label}]: {exc}") from None
    kw2: dict[str, Any] = {}
    for key, value in proxy.items():
        if key in ("home", "workspace"):
            kw2[key] = _rel(base, value, f"proxy.{key}")
        elif key == "hooks":
            kw2[key] = _strings(value, "proxy.hooks")
        else:
            kw2[key] = value
    if "deny" in policy:
        kw2["deny"] = frozenset(_strings(policy["deny"], "policy.deny"))
    if "ask" in policy:
        kw2["ask"] = frozenset(_strings(policy["ask"], "policy.ask"))
    if "rules" in policy:
        kw2["rules"] = _strings(policy["rules"], "policy.rules")
    if "approval" in policy:
        kw2["approval"] = policy["approval"]
    if "file" in policy:
        kw2["policy_file"] = _rel(base, policy["file"], "policy.file")
    return ProxyConfig(servers=tuple(servers), **kw2)


def load_object(spec: str, group: str) -> Any:
    """Load ``module:attribute`` (dots allowed in the attribute) or an entry point by name."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(f"cannot load {spec!r}: {type(exc).__name__}: {exc}") from None
        return obj
    matches = [ep for ep in entry_points(group=group) if ep.name == spec]
    if not matches:
        raise ConfigurationError(f"no entry point {spec!r} in group {group!r}")
    return matches[0].load()


def resolve_hooks(specs: tuple[str, ...]) -> list[Hook]:
    """Hooks from ``module:attribute`` strings or ``tooltrace.hooks`` entry points.

    The object may be a ``Hook`` (for example made with ``@tooltrace.hook``) or a plain
    function ``(HookView) -> HookDecision | None``, which becomes an optional pre-hook.
    """
    out: list[Hook] = []
    for spec in specs:
        obj = load_object(spec, "tooltrace.hooks")
        if isinstance(obj, Hook):
            out.append(obj)
        elif callable(obj):
            fh: Any = FunctionHook(obj, getattr(obj, "__name__", spec.rsplit(":", 1)[-1]))
            out.append(fh)
        else:
            raise ConfigurationError(f"hook {spec!r} is neither a Hook nor a function")
    return out


def resolve_rules(specs: tuple[str, ...]) -> list[Rule]:
    """Extra policy rules from ``module:attribute`` strings or ``tooltrace.rules`` entry points.

    A rule object (callable with a ``name``) is used as is; a class or factory is called with
    no arguments first.
    """
    out: list[Rule] = []
    for spec in specs:
        obj = load_object(spec, "tooltrace.rules")
        if not isinstance(getattr(obj, "name", None), str) and callable(obj):
            obj = obj()
        if not isinstance(getattr(obj, "name", None), str) or not callable(obj):
            raise ConfigurationError(f"policy rule {spec!r} must be callable with a string name")
        out.append(obj)
    return out


def _allow_all(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(True, "config", "approval = allow in the proxy configuration")


def _deny_all(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(False, "config", "approval = deny in the proxy configuration")


def resolve_approver(spec: str, home: Path | None = None) -> Approver:
    """``deny`` / ``allow`` / ``queue`` or ``queue:<seconds>`` (the home's approval queue,
    ``tooltrace.policy``: answered with ``tooltrace approvals answer``, the console or a
    webhook; 300 s by default) / ``module:function`` (or a ``tooltrace.approvers`` entry
    point)."""
    if spec == "deny":
        return _deny_all
    if spec == "allow":
        return _allow_all
    if spec == "queue" or spec.startswith("queue:"):
        from ..policy import ApprovalQueue

        try:
            timeout = float(spec[6:]) if spec != "queue" else 300.0
            return ApprovalQueue(home, timeout=timeout)
        except ValueError:
            raise ConfigurationError(
                f"approval {spec!r}: queue:<seconds> takes a positive number") from None
    obj = load_object(spec, "tooltrace.approvers")
    if not callable(obj):
        raise ConfigurationError(f"approver {spec!r} is not callable")
    approver: Approver = obj
    return approver
