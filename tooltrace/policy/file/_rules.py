"""The rules a policy file's ``[[rules]]``, ``[paths]`` and ``[approval]`` compile to.

Each is an ordinary policy rule (``tooltrace.policy.Rule``): a name, ``applies_to(tool)`` so the
policy skips it for tools it can never match, and ``__call__(request)``. A rule matches a call
when every condition it states holds (lists are any-of); it then answers its verdict, or the
observe form of it (``observe_deny``, ``observe_ask``) when its mode is ``observe``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ...model import Capability, Effect, Principal, ToolDefinition
from .._rules import PolicyDecision, PolicyRequest, Verdict

__all__ = ["Match", "PatternRule", "glob_regex", "hosts_in", "observed"]

_OBSERVED = {Verdict.DENY: Verdict.OBSERVE_DENY, Verdict.ASK: Verdict.OBSERVE_ASK}
_URL_RE = re.compile(r"\b(?:https?|ftp|wss?)://[^\s'\"<>]+", re.IGNORECASE)


def observed(verdict: Verdict, observe: bool) -> Verdict:
    """The verdict a rule answers: its own, or its observe form in observe mode."""
    return _OBSERVED.get(verdict, verdict) if observe else verdict


def glob_regex(glob: str) -> re.Pattern[str]:
    """A path glob (``**/.env``, ``secrets/*.pem``) as a regular expression over
    workspace-relative POSIX paths: ``**/`` is any number of directories, ``*`` and ``?``
    stay within one, and a trailing ``/**`` is the directory and everything under it."""
    out, i = [], 0
    while i < len(glob):
        if i and i == len(glob) - 3 and glob.endswith("/**"):
            out.append("(?:/.*)?")
            i += 3
        elif glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out))


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    if depth > 32:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v, depth + 1)


def _hosts(args: Mapping[str, Any]) -> Iterator[str]:
    for text in _strings(args):
        if "://" not in text:
            continue
        for m in _URL_RE.finditer(text):
            try:
                yield (urlsplit(m.group(0)).hostname or "").rstrip(".").lower()
            except ValueError:
                yield ""


def hosts_in(host: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``host`` is one of ``patterns`` (``*.example.com`` also covers subdomains)."""
    for p in patterns:
        if p.startswith("*."):
            if host == p[2:] or host.endswith(p[1:]):
                return True
        elif host == p:
            return True
    return False


def _arg_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return " ".join(str(v) for v in value)
    if isinstance(value, bool | int | float):
        return str(value)
    return None


@dataclass(frozen=True, slots=True)
class Match:
    """Which calls a rule is about: tools, capabilities, effects, modes and principals
    (``None``: any)."""

    tools: frozenset[str] | None = None
    """Tool names."""
    capabilities: frozenset[Capability] | None = None
    """Tool capabilities."""
    effects: frozenset[Effect] | None = None
    """Tool effects."""
    modes: frozenset[str] | None = None
    """Call modes."""
    users: frozenset[str] | None = None
    """Principal users."""
    agents: frozenset[str] | None = None
    """Principal agents."""
    tenants: frozenset[str] | None = None
    """Principal tenants."""
    roles: frozenset[str] | None = None
    """Principal roles (any one of them)."""

    def names(self, tool: str) -> bool:
        """Whether ``tools`` names ``tool`` (a match by capability or effect alone does not)."""
        return self.tools is not None and tool in self.tools

    def tool(self, t: ToolDefinition) -> bool:
        """Whether calls of ``t`` can match."""
        return (
            (self.tools is None or t.name in self.tools)
            and (self.capabilities is None or t.capability in self.capabilities)
            and (self.effects is None or t.effect in self.effects)
        )

    def call(self, mode: str, p: Principal | None) -> bool:
        """Whether a call in ``mode`` for principal ``p`` matches (its tool checked apart)."""
        if self.modes is not None and mode not in self.modes:
            return False
        for wanted, have in ((self.users, p and p.user), (self.agents, p and p.agent),
                             (self.tenants, p and p.tenant)):
            if wanted is not None and have not in wanted:
                return False
        return self.roles is None or (p is not None and not self.roles.isdisjoint(p.roles))


@dataclass(frozen=True, slots=True)
class PatternRule:
    """A policy file's rule: when the call matches ``match`` and every condition given holds,
    answer ``verdict`` (its observe form when ``observe``)."""

    name: str
    """The rule's id (``policy:<id>`` in decisions)."""
    verdict: Verdict
    """``deny`` or ``ask``."""
    match: Match
    """Which calls the rule is about."""
    reason: str = ""
    """Why, readable (recorded in the step)."""
    observe: bool = False
    """Observe mode: record what the rule would do and let the call go on."""
    args: tuple[tuple[str, re.Pattern[str]], ...] = ()
    """Argument name and the pattern searched in its value (all must match)."""
    paths: tuple[re.Pattern[str], ...] = ()
    """Globs one of the call's resolved path arguments must match."""
    except_paths: tuple[re.Pattern[str], ...] = ()
    """Globs that take a resolved path out of the rule's reach (a path matching one is as if
    the call had not named it)."""
    only_paths: tuple[re.Pattern[str], ...] = ()
    """The allow-list form: the rule matches a call one of whose resolved paths lies outside
    every one of these globs (``only_paths = ["notes/**"]``: anything not under ``notes/``)."""
    hosts_allow: tuple[str, ...] | None = None
    """Matches when an argument holds a URL whose host is not one of these."""
    hosts_deny: tuple[str, ...] = ()
    """Matches when an argument holds a URL whose host is one of these."""
    approval_ttl_s: float | None = None
    """For ``ask``: how long an approval also covers later calls of the same tool, principal
    and arguments (``PolicyDecision.approval_ttl_s``)."""

    @property
    def reads_content(self) -> bool:
        """Whether the rule looks at argument values (the trail holds them only redacted)."""
        return bool(self.args or self.hosts_deny or self.hosts_allow is not None)

    @property
    def reads_paths(self) -> bool:
        """Whether the rule has a condition on resolved paths."""
        return bool(self.paths or self.except_paths or self.only_paths)

    def applies_to(self, tool: ToolDefinition) -> bool:
        """Whether calls of ``tool`` can match at all (a rule on paths: only tools with path
        arguments)."""
        return self.match.tool(tool) and (bool(tool.path_params) or not self.reads_paths)

    def names_tool(self, name: str) -> bool:
        """Whether the rule's ``tools`` list names ``name``."""
        return self.match.names(name)

    def matches(self, request: PolicyRequest) -> bool:
        """Whether the call meets every condition of the rule."""
        if not self.match.tool(request.tool) or not self.match.call(
            request.mode, request.principal
        ):
            return False
        args = request.arguments
        for name, pattern in self.args:
            text = _arg_text(args.get(name))
            if text is None or pattern.search(text) is None:
                return False
        if self.reads_paths and not any(
            self._selects(p) for p in request.resolved_paths.values()
        ):
            return False
        if self.hosts_deny or self.hosts_allow is not None:
            hosts = list(_hosts(args))
            deny = bool(self.hosts_deny) and any(hosts_in(h, self.hosts_deny) for h in hosts)
            allow = self.hosts_allow
            outside = allow is not None and any(not hosts_in(h, allow) for h in hosts)
            if not (deny or outside):
                return False
        return True

    def _selects(self, path: str) -> bool:
        """Whether the rule's path conditions hold for one resolved path (workspace-relative,
        or absolute in a read-only root)."""
        if self.paths and not any(g.fullmatch(path) for g in self.paths):
            return False
        if any(g.fullmatch(path) for g in self.except_paths):
            return False
        return not self.only_paths or not any(g.fullmatch(path) for g in self.only_paths)

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        if not self.matches(request):
            return None
        why = self.reason or f"matches policy rule {self.name}"
        return PolicyDecision(
            observed(self.verdict, self.observe), self.name, why, self.approval_ttl_s
        )
