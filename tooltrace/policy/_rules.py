"""Policy: may this call run? Four dimensions, each a rule with a name.

- **capability and mode**: a mode (``default``, ``plan``, or one you define) allows a set of
  capabilities and effects; a tool outside it is hidden in that mode and rejected if called.
- **resource scope**: arguments named in ``ToolDefinition.path_params`` must resolve, symlinks
  followed, inside the workspace (see ``tooltrace.policy``).
- **argument content**: rules such as denied command patterns or URLs to loopback and private
  ranges.
- **approval**: a rule may answer ``ask``; the registry's approver callback then decides, and the
  record says whether a rule (``policy:<rule>``) or a person (``user:<who>``) decided. An
  approval is bound to the sha256 of the call's canonical redacted arguments
  (``arguments_sha256``): other arguments are asked about again. With a time to live it
  covers later calls of the same tool, principal and arguments (decider ``approval:<id>``).

A rule is any callable ``(PolicyRequest) -> PolicyDecision | None`` with a ``name``; ``None``
means "no opinion". The first ``deny`` wins; otherwise the first ``ask``; otherwise allow.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import msgspec

from ..model import Capability, Effect, Principal, ToolDefinition
from ._approvals import arguments_sha256

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "DenyCommandPatterns",
    "DenyNested",
    "DenyPrivateNetwork",
    "Mode",
    "Policy",
    "PolicyDecision",
    "PolicyRequest",
    "RequireApproval",
    "Rule",
    "Verdict",
    "arguments_sha256",
]


class PolicyRequest(msgspec.Struct, frozen=True):
    """What rules see: the tool, its validated arguments, the mode, the run and, for a nested
    call, its depth and parent tool."""

    tool: ToolDefinition
    """The active definition of the called tool."""
    arguments: Mapping[str, Any]
    """The arguments after schema validation (raw: rules see what the tool would get)."""
    mode: str
    """The call's mode (``default``, ``plan``, ...)."""
    run_id: str
    """The run the call belongs to."""
    call_id: str
    """The call's id."""
    resolved_paths: Mapping[str, str] = msgspec.field(default_factory=dict)
    """Each path argument resolved by the workspace policy, workspace-relative (POSIX)."""
    depth: int = 0
    """How deeply the call is nested: 0 for a call from outside any tool, 1 for a call a tool
    made through its context (``ctx.call``), and so on."""
    parent_tool: str | None = None
    """The tool whose call made this one, or ``None`` for a call from outside any tool."""
    principal: Principal | None = None
    """Who the call acts for (``None``: nobody named)."""


@runtime_checkable
class Rule(Protocol):
    """A named policy rule."""

    @property
    def name(self) -> str:
        """The rule's name, as it appears in decisions (``policy:<name>``)."""

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        """Return a verdict, or None for no opinion."""


class Verdict(enum.StrEnum):
    """A policy rule's answer. A rule in observe mode answers ``observe_deny`` or
    ``observe_ask`` where it would deny or ask: the call goes on and its policy step records
    the observation, with the rule as decider."""

    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"
    OBSERVE_DENY = "observe_deny"
    OBSERVE_ASK = "observe_ask"
@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """One rule's verdict."""

    verdict: Verdict
    """Allow, deny or ask (the approver decides)."""
    rule: str
    """The deciding rule's name (the step's decider reads ``policy:<rule>``)."""
    reason: str = ""
    """Why, readable: it must not contain secrets or host paths (it is redacted and cut to 300
    characters all the same)."""
    approval_ttl_s: float | None = None
    """For ``ask``: how long an approval given for this call's arguments also covers later
    calls of the same tool, principal and arguments (None: only this call; an approver's own
    ``ApprovalDecision.ttl`` wins)."""


# A rule may also define ``applies_to(tool: ToolDefinition) -> bool``: False promises no opinion
# on any call of that tool, and the policy then skips calling it for that tool (decided once per
# definition). The built-in rules do; a rule without it is asked on every call.
# A rule may define ``names_tool(name: str) -> bool``: True when it names that tool itself (in
# a tool list, not through a capability, effect or any-tool scope). Entries that are not tools
# (``ToolDefinition.listed`` False) are decided only by the rules that name them.
@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What an approver is asked: which tool, which (redacted) arguments, which rule asked, why."""

    call_id: str
    """The call waiting for the answer."""
    run_id: str
    """The run the call belongs to."""
    tool: str
    """The tool's name."""
    arguments: Mapping[str, Any]
    """The call's arguments, redacted."""
    rule: str
    """The rule that asked."""
    reason: str
    """The rule's reason, redacted."""
    arguments_sha256: str = ""
    """sha256 of the canonical JSON of the redacted ``arguments`` (``arguments_sha256``): the
    approval covers these arguments and no others."""
    principal: Principal | None = None
    """Whom the call acts for."""
@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """An approver's answer."""

    approved: bool
    """True lets the call run; False rejects it (stage ``approval``)."""
    who: str
    """The person or system that decided: the approval step's decider reads ``user:<who>``."""
    reason: str = ""
    """Why, readable: kept (redacted) in the approval step and the approval record."""
    ttl: timedelta | float | None = None
    """Time to live of an approval (seconds or a ``timedelta``): until it expires, later calls
    of the same tool, principal and argument digest pass without asking (None: the policy
    rule's ``approval_ttl_s``, else only this call)."""
@dataclass(frozen=True, slots=True)
class Mode:
    """A mode: which capabilities and effects are allowed, optionally which tools only."""

    name: str
    """The mode's name, as calls ask for it (``ToolCall.mode``)."""
    capabilities: frozenset[Capability] = frozenset(Capability)
    """The capabilities a tool may have to be visible (default: all)."""
    effects: frozenset[Effect] = frozenset(Effect)
    """The effects a tool may have to be visible (default: all)."""
    tools: frozenset[str] | None = None
    """The only tools the mode shows, by name (``None``: any tool the other limits allow)."""

    def allows(self, tool: ToolDefinition) -> tuple[bool, str]:
        """``(visible, reason it is hidden)`` for a tool in this mode."""
        if self.tools is not None and tool.name not in self.tools:
            return False, f"not in the tool list of mode {self.name!r}"
        if tool.capability not in self.capabilities:
            return False, f"capability {tool.capability.value} is not allowed in mode {self.name!r}"
        if tool.effect not in self.effects:
            return False, f"effect {tool.effect.value} is not allowed in mode {self.name!r}"
        return True, ""


DEFAULT_MODES: tuple[Mode, ...] = (
    Mode("default"),
    Mode("plan", capabilities=frozenset({Capability.READ}), effects=frozenset({Effect.NONE})),
)
@dataclass(frozen=True, slots=True)
class DenyCommandPatterns:
    """Deny ``execute`` tools whose command line matches any pattern (regular expressions).

    The command is read from the ``argv`` (list) or ``command`` (string) argument.
    """

    patterns: tuple[str, ...] = (
        r"(^|\s)rm\s+(-[a-zA-Z]*[rf][a-zA-Z]*\s+)+/(\s|$|\*)",
        r"(^|\s)mkfs(\.\w+)?\s",
        r"(^|\s)dd\s+.*of=/dev/",
        r"(curl|wget)\s[^|]*\|\s*(ba|z|da)?sh\b",
        r"(^|\s)(shutdown|reboot|halt|poweroff)(\s|$)",
        r":\(\)\s*\{\s*:\|:&\s*\};:",
        r"(^|\s)chmod\s+(-R\s+)?777\s+/(\s|$)",
    )
    """Regular expressions searched in the command line. The defaults: ``rm -rf /``, ``mkfs``,
    ``dd`` onto a device, a download piped into a shell, shutdown and reboot, a fork bomb,
    ``chmod 777 /``."""
    name: str = "denied_command"
    """The rule's name, as decisions show it (``policy:<name>``)."""
    _compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(re.compile(p) for p in self.patterns))

    def applies_to(self, tool: ToolDefinition) -> bool:
        """Only ``execute`` tools run commands."""
        return tool.capability is _EXECUTE

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        if request.tool.capability is not _EXECUTE:
            return None
        args = request.arguments
        argv = args.get("argv")
        if isinstance(argv, list):
            line = " ".join(str(a) for a in argv)
        elif isinstance(args.get("command"), str):
            line = str(args["command"])
        else:
            return None
        for i, pat in enumerate(self._compiled):
            if pat.search(line):
                return PolicyDecision(
                    Verdict.DENY, self.name, f"command matches denied pattern #{i}"
                )
        return None


_EXECUTE = Capability.EXECUTE  # read through the class on every call otherwise
_PLAIN = frozenset({str, int, float, bool, type(None)})
_URL_RE = re.compile(r"\b(?:https?|ftp|wss?|gopher|file)://[^\s'\"<>]+", re.IGNORECASE)


def _urls(value: Any) -> Iterable[str]:
    """Every string inside ``value`` that may hold a URL, however deeply nested: the model
    controls the nesting, so a depth bound would let a URL hide below it. An explicit stack (no
    recursion limit to hit) and a container met twice is looked at once (a Python caller's
    arguments may hold a cycle)."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str:
            if "://" in v:
                yield v
            continue
        if t is dict or isinstance(v, Mapping):
            inner: Iterable[Any] = v.values()
        elif isinstance(v, list | tuple):
            inner = v
        else:
            continue
        if id(v) not in seen:
            seen.add(id(v))
            stack.extend(inner)


def _is_private_host(host: str) -> bool:
    host = host.strip("[]").rstrip(".").lower()
    if host in ("localhost", "") or host.endswith((".localhost", ".local", ".internal")):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        # Decimal/hex/octal IPv4 spellings (http://2130706433/) resolve to loopback too.
        try:
            if re.fullmatch(r"(0x[0-9a-f]+|\d+)", host):
                ip = ipaddress.ip_address(int(host, 0))
            else:
                return False
        except ValueError:
            return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return bool(
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_reserved
        or ip.is_unspecified
        or ip.is_multicast
    )
@dataclass(frozen=True, slots=True)
class DenyPrivateNetwork:
    """Deny any argument holding a URL to loopback, private, link-local or reserved addresses.

    Guards against a model steering a tool at internal services (SSRF). Host names are not
    resolved (that would be I/O on the call path); names like ``localhost`` and ``*.internal``
    are denied by name.
    """

    name: str = "private_network"
    """The rule's name, as decisions show it (``policy:<name>``)."""
    capabilities: frozenset[Capability] = frozenset(Capability)
    """The capabilities whose tools are checked (default: all)."""

    def applies_to(self, tool: ToolDefinition) -> bool:
        """Tools of the guarded capabilities."""
        return tool.capability in self.capabilities

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        if request.tool.capability not in self.capabilities:
            return None
        args = request.arguments
        if type(args) is dict:
            for v in args.values():  # flat arguments without "://" (the common case): done
                t = type(v)
                if (t is str and "://" in v) or t not in _PLAIN:
                    break
            else:
                return None
        for text in _urls(args):
            for m in _URL_RE.finditer(text):
                try:
                    host = urlsplit(m.group(0)).hostname or ""
                except ValueError:
                    return PolicyDecision(Verdict.DENY, self.name, "argument holds a malformed URL")
                if m.group(0).lower().startswith("file:") or _is_private_host(host):
                    return PolicyDecision(
                        Verdict.DENY,
                        self.name,
                        "argument holds a URL to a private or local address",
                    )
        return None
@dataclass(frozen=True, slots=True)
class RequireApproval:
    """Answer ``ask`` for the named tools, or for tools with the given capabilities/effects."""

    tools: frozenset[str] = frozenset()
    """Tools that need approval, by name."""
    capabilities: frozenset[Capability] = frozenset()
    """Tools of these capabilities need approval."""
    effects: frozenset[Effect] = frozenset()
    """Tools of these effects need approval."""
    name: str = "require_approval"
    """The rule's name, as decisions show it (``policy:<name>``)."""
    when: Callable[[PolicyRequest], bool] | None = None
    """A further test of the call: approval is asked only when it returns True (``None``: for
    every call of a matching tool)."""

    def applies_to(self, tool: ToolDefinition) -> bool:
        """The named tools and tools of the listed capabilities or effects."""
        return (
            tool.name in self.tools
            or tool.capability in self.capabilities
            or tool.effect in self.effects
        )

    def names_tool(self, name: str) -> bool:
        """Whether ``tools`` names ``name``."""
        return name in self.tools

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        t = request.tool
        hit = t.name in self.tools or t.capability in self.capabilities or t.effect in self.effects
        if hit and (self.when is None or self.when(request)):
            return PolicyDecision(Verdict.ASK, self.name, f"{t.name} needs approval")
        return None
@dataclass(frozen=True, slots=True)
class DenyNested:
    """Deny nested calls (a tool calling another through ``ctx.call``) by depth, by the tool
    called or by the tool that calls it. Every listed condition must hold.

    ``DenyNested(parents=frozenset({"browse"}), tools=frozenset({"run_command"}))`` keeps a
    browsing tool's sub-agent from running commands; ``DenyNested(min_depth=3)`` allows two
    levels of nesting whatever the registry's ``max_depth``.
    """

    tools: frozenset[str] = frozenset()
    """The called tools this applies to (empty: any)."""
    parents: frozenset[str] = frozenset()
    """The calling (parent) tools this applies to (empty: any)."""
    min_depth: int = 1
    """The shallowest depth denied (1: any nested call)."""
    name: str = "deny_nested"
    """The rule's name, as decisions show it (``policy:<name>``)."""

    def applies_to(self, tool: ToolDefinition) -> bool:
        """The listed tools (any tool when none is listed)."""
        return not self.tools or tool.name in self.tools

    def names_tool(self, name: str) -> bool:
        """Whether ``tools`` names ``name``."""
        return name in self.tools

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        depth = request.depth
        if depth < max(self.min_depth, 1):
            return None
        if self.tools and request.tool.name not in self.tools:
            return None
        parent = request.parent_tool
        if self.parents and parent not in self.parents:
            return None
        return PolicyDecision(
            Verdict.DENY, self.name, f"nested call (depth {depth}, made by {parent}) not allowed"
        )
class Policy:
    """Modes plus an ordered list of rules. The default denies dangerous commands and URLs to
    private networks, and defines the ``default`` and read-only ``plan`` modes."""

    def __init__(
        self,
        rules: Iterable[Rule] | None = None,
        *,
        modes: Iterable[Mode] = DEFAULT_MODES,
    ) -> None:
        default: tuple[Rule, ...] = (DenyCommandPatterns(), DenyPrivateNetwork())
        self.rules: tuple[Rule, ...] = tuple(rules) if rules is not None else default
        self.modes: dict[str, Mode] = {m.name: m for m in modes}
        for rule in self.rules:
            if not isinstance(getattr(rule, "name", None), str):
                raise TypeError(f"policy rule {rule!r} needs a string 'name'")
        self._named = self.rules
        self._names = tuple(rule.name for rule in self.rules)
        # id(definition) -> (definition, ((index, rule), ...) that may have an opinion on it)
        self._relevant: dict[int, tuple[ToolDefinition, tuple[tuple[int, Rule], ...]]] = {}

    @staticmethod
    def _rules_for(tool: ToolDefinition, rules: tuple[Rule, ...]) -> tuple[tuple[int, Rule], ...]:
        out = []
        for i, rule in enumerate(rules):
            if not tool.listed:  # not a tool: only the rules that name it decide
                names = getattr(rule, "names_tool", None)
                try:
                    if names is None or not names(tool.name):
                        continue
                except Exception:
                    pass  # a rule that cannot say whether it names the entry is asked
                out.append((i, rule))
                continue
            applies = getattr(rule, "applies_to", None)
            try:
                if applies is not None and not applies(tool):
                    continue
            except Exception:
                pass  # a rule that cannot say is asked on every call
            out.append((i, rule))
        return tuple(out)

    def mode_allows(self, tool: ToolDefinition, mode: str) -> tuple[bool, str]:
        """``(visible, reason)`` for a tool in a mode; an unknown mode hides everything, a
        known one never hides an entry that is not a tool (``ToolDefinition.listed``)."""
        m = self.modes.get(mode)
        if m is None:
            return False, "unknown mode"
        if not tool.listed:
            return True, ""
        return m.allows(tool)

    def evaluate(self, request: PolicyRequest) -> tuple[PolicyDecision | None, tuple[str, ...]]:
        """Run the rules: ``(first deny, else first ask, else first observation, else None;
        names of rules run)``. A rule that raises denies (the exception's text is not kept:
        it may hold a secret)."""
        ask: PolicyDecision | None = None
        observed: PolicyDecision | None = None
        rules = self.rules
        if rules is not self._named:  # the rules were replaced: name them again
            self._names = tuple(rule.name for rule in rules)
            self._named = rules
            self._relevant = {}
        tool = request.tool
        hit = self._relevant.get(id(tool))
        if hit is None or hit[0] is not tool:
            hit = (tool, self._rules_for(tool, rules))
            if len(self._relevant) >= 1024:
                self._relevant = {}
            self._relevant[id(tool)] = hit
        for i, rule in hit[1]:
            try:
                d = rule(request)
            except Exception as exc:  # a rule that cannot decide refuses: fail closed
                why = f"the rule failed ({type(exc).__name__}); the call is refused"
                return PolicyDecision(Verdict.DENY, rule.name, why), self._names[: i + 1]
            if d is None or d.verdict is Verdict.ALLOW:
                continue
            v = d.verdict
            if v is Verdict.DENY:
                return d, self._names[: i + 1]
            if v is Verdict.OBSERVE_DENY or v is Verdict.OBSERVE_ASK:
                if observed is None:
                    observed = d
            elif ask is None:
                ask = d
        return (ask if ask is not None else observed), self._names
