"""Compile a checked policy file to the policy objects the registry already runs.

Built-in rules first (``denied_command``, ``private_network``), then the ``[paths]`` rules
(``denied_path``, ``read_only_path``), the ``[[rules]]`` in file order, the ``[cedar]``
policies, ``[approval]`` and last the ``[[limits]]`` (so a call another rule denies does not
count against a limit). ``[commands]`` is no rule: it configures the command tools
(``tooltrace.policy.file._commands``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Any

from ...model import Capability, Effect, ToolDefinition
from .._rules import (
    DEFAULT_MODES,
    DenyCommandPatterns,
    DenyPrivateNetwork,
    Mode,
    Policy,
    PolicyDecision,
    PolicyRequest,
    Rule,
    Verdict,
)
from ._check import Checker
from ._commands import CommandSettings, check_commands
from ._limits import LimitRule
from ._lint import Spot, check_globs, lint_modes, lint_rules
from ._rules import Match, PatternRule, glob_regex, observed
from ._source import Path

#: Turns a tool name with a wildcard into the names it stands for (``ValueError``, with the
#: reason, for a wildcard it does not take).
Expand = Callable[[str], Iterable[str]]

__all__ = ["Compiled", "Expand", "Observing", "compile_document", "duration_seconds"]

_TOP = ("version", "tools", "modes", "paths", "builtin", "approval", "rules", "limits", "cedar",
        "commands")
_MATCH = ("tools", "capabilities", "effects", "modes", "principal")
_GLOBS = ("paths", "except_paths", "only_paths")
_RULE = ("id", "decision", "mode", "reason", "ttl", *_MATCH, "args", *_GLOBS, "url_hosts")
_LIMIT = ("id", "mode", "per", *_MATCH, "max_calls", "per_minute", "max_concurrent")
_PRINCIPAL = ("users", "agents", "tenants", "roles")
#: Rule ids the registry itself decides with: a file may not take them.
RESERVED = frozenset({"mode", "path_scope", "hook_scope", "denied_command", "private_network",
                      "denied_path", "read_only_path", "approval", "cedar"})
_WRITING = frozenset({Effect.LOCAL, Effect.EXTERNAL})


@dataclass(frozen=True, slots=True)
class Observing:
    """A built-in rule in observe mode: what it would deny or ask is recorded, not enforced."""

    rule: Any
    """The rule observed."""

    @property
    def name(self) -> str:
        """The observed rule's name."""
        return str(self.rule.name)

    def applies_to(self, tool: ToolDefinition) -> bool:
        """As the observed rule."""
        applies = getattr(self.rule, "applies_to", None)
        return True if applies is None else bool(applies(tool))

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        d: PolicyDecision | None = self.rule(request)
        if d is None or d.verdict is Verdict.ALLOW:
            return d
        return PolicyDecision(observed(d.verdict, True), d.rule, d.reason)


@dataclass(frozen=True, slots=True)
class Compiled:
    """What a file compiles to: the policy, its limits and facts about its rules."""

    policy: Policy
    """Modes and rules, ready for ``ToolRegistry(policy=...)``."""
    limits: tuple[LimitRule, ...]
    """The limits among the rules (they need ``LimitRelease`` to free calls at once)."""
    rule_ids: tuple[str, ...]
    """Every rule's id, in evaluation order: the closed set of the observed metric's label."""
    content_rules: frozenset[str]
    """Ids of rules that read argument values (what-if cannot replay them on redacted
    arguments exactly)."""
    read_only_roots: tuple[str, ...] = ()
    """``[paths] read_only`` entries that are absolute: directories outside the workspace that
    read tools may read (``PolicyFile.apply`` adds them to the registry's workspace)."""
    commands: CommandSettings | None = None
    """The ``[commands]`` table: the command tools' sandbox and network (None: not set)."""


class _Compiler:
    def __init__(self, ck: Checker, tools: frozenset[str] | None,
                 definitions: Mapping[str, ToolDefinition] | None, base: FilePath,
                 expand: Expand | None = None) -> None:
        self.ck = ck
        self.tools = tools
        self.expand = expand
        self.definitions = definitions
        self.base = base
        self.modes: frozenset[str] = frozenset()
        self.taken: set[str] = set(RESERVED)
        self.content: set[str] = set()
        self.roots: tuple[str, ...] = ()
        self.declared: tuple[str, ...] = ()
        #: The rules a lint pass looks at, with where each is written, in evaluation order.
        self.spots: list[Spot] = []

    def run(self, doc: Mapping[str, Any]) -> Compiled:
        ck = self.ck
        top = ck.table((), doc, _TOP)
        if "version" in top and top["version"] != 1:
            ck.problem(("version",), "version must be 1")
        if "tools" in top:
            self.declared = ck.strings(("tools",), top["tools"]) or ()
            self.tools = None if self.tools is None else self.tools | frozenset(self.declared)
        modes = self._modes(top.get("modes", {}))
        self.modes = frozenset(m.name for m in modes)
        rules: list[Rule] = [*self._builtins(top.get("builtin", {}))]
        rules += self._paths(top.get("paths", {}))
        raw_rules = top.get("rules", [])
        if not isinstance(raw_rules, list):
            ck.problem(("rules",), "rules must be an array of tables ([[rules]])")
            raw_rules = []
        for i, r in enumerate(raw_rules):
            rule = self._rule(("rules", i), r)
            if rule is not None:
                rules.append(rule)
                if isinstance(rule, PatternRule):
                    self.spots.append((("rules", i), rule))
        if "cedar" in top:
            rules += self._cedar(top["cedar"])
        if "approval" in top:
            rules += self._approval(top["approval"])
        limits = self._limits(top.get("limits", []))
        rules += limits
        policy = Policy(rules, modes=modes)
        self.spots += [(("limits", i), x) for i, x in enumerate(limits)]
        lint_modes(ck, modes, self.definitions)
        lint_rules(ck, self.spots, policy.modes, self.definitions, self.declared)
        names = tuple(n for r in rules for n in getattr(r, "rule_ids", (str(r.name),)))
        commands = check_commands(ck, top["commands"]) if "commands" in top else None
        return Compiled(policy, tuple(limits), names, frozenset(self.content), self.roots,
                        commands=commands)

    def _modes(self, raw: Any) -> tuple[Mode, ...]:
        ck = self.ck
        out = {m.name: m for m in DEFAULT_MODES}
        if not isinstance(raw, Mapping):
            ck.problem(("modes",), "modes must be a table of [modes.<name>] tables")
            return tuple(out.values())
        for name, spec in raw.items():
            p: Path = ("modes", name)
            t = ck.table(p, spec, ("capabilities", "effects", "tools"))
            caps = ck.members((*p, "capabilities"), t["capabilities"], Capability) \
                if "capabilities" in t else None
            effs = ck.members((*p, "effects"), t["effects"], Effect) if "effects" in t else None
            tools = self._tools((*p, "tools"), t["tools"]) \
                if "tools" in t else None
            out[str(name)] = Mode(str(name), caps if caps is not None else frozenset(Capability),
                                  effs if effs is not None else frozenset(Effect), tools)
        return tuple(out.values())

    def _tools(self, path: Path, value: Any) -> frozenset[str]:
        items = self.ck.strings(path, value)
        if items is None:
            return frozenset()
        if any("*" in v for v in items):
            items = self._expanded(path, items)
        if self.tools is None:
            return frozenset(items)
        return self.ck.names(path, list(items), self.tools, "tool")

    def _expanded(self, path: Path, items: tuple[str, ...]) -> tuple[str, ...]:
        # A wildcard is the MCP proxy's to expand (mcp.*.<kind>: that kind of every server it
        # serves); anywhere else it would name no tool, so it is refused.
        out: list[str] = []
        for i, v in enumerate(items):
            if "*" not in v:
                out.append(v)
                continue
            if self.expand is None:
                self.ck.problem((*path, i), f"{v!r}: a tool name holds no wildcard here (the MCP "
                                "proxy expands mcp.*.<kind> to that kind of each of its servers)",
                                v)
                continue
            try:
                out.extend(sorted(self.expand(v)))
            except ValueError as exc:
                self.ck.problem((*path, i), f"{v!r}: {exc}", v)
        return tuple(out)

    def _observe(self, path: Path, t: Mapping[str, Any]) -> bool:
        return "mode" in t and self.ck.choice((*path, "mode"), t["mode"],
                                              ("enforce", "observe")) == "observe"

    def _builtins(self, raw: Any) -> list[Rule]:
        ck = self.ck
        t = ck.table(("builtin",), raw, ("denied_command", "private_network"))
        out: list[Rule] = []
        p: Path = ("builtin", "denied_command")
        dc = ck.table(p, t.get("denied_command", {}),
                      ("enabled", "mode", "patterns", "extra_patterns"))
        if dc.get("enabled", True) is not False:
            pats = list(DenyCommandPatterns().patterns)
            if "patterns" in dc:
                pats = list(ck.strings((*p, "patterns"), dc["patterns"]) or ())
            pats += ck.strings((*p, "extra_patterns"), dc["extra_patterns"]) or () \
                if "extra_patterns" in dc else ()
            for key in ("patterns", "extra_patterns"):
                for i, s in enumerate(dc.get(key) or ()):
                    ck.pattern((*p, key, i), s)
            rule: Rule = DenyCommandPatterns(tuple(pats)) if not ck.problems else \
                DenyCommandPatterns()
            out.append(Observing(rule) if self._observe(p, dc) else rule)
        p = ("builtin", "private_network")
        pn = ck.table(p, t.get("private_network", {}), ("enabled", "mode", "capabilities"))
        if pn.get("enabled", True) is not False:
            caps = ck.members((*p, "capabilities"), pn["capabilities"], Capability) \
                if "capabilities" in pn else None
            rule = DenyPrivateNetwork(capabilities=caps) if caps is not None \
                else DenyPrivateNetwork()
            out.append(Observing(rule) if self._observe(p, pn) else rule)
        for key in ("denied_command", "private_network"):
            if key in t and "enabled" in t[key]:
                ck.boolean(("builtin", key, "enabled"), t[key]["enabled"])
        return out

    def _paths(self, raw: Any) -> list[Rule]:
        ck = self.ck
        t = ck.table(("paths",), raw, ("deny", "read_only", "mode"))
        observe = self._observe(("paths",), t)
        out: list[Rule] = []
        deny = ck.strings(("paths", "deny"), t["deny"]) if "deny" in t else None
        if deny:
            check_globs(ck, ("paths", "deny"), deny)
            out.append(PatternRule("denied_path", Verdict.DENY, Match(),
                                   "path matches a denied glob", observe,
                                   paths=tuple(glob_regex(g) for g in deny)))
        ro = ck.strings(("paths", "read_only"), t["read_only"]) if "read_only" in t else None
        if ro:
            self.roots = self._roots(ro)
            # Outside the workspace, resolved paths are real: the globs name the real root.
            ro = tuple(os.path.realpath(g) if g in self.roots else g for g in ro)
            globs = tuple(glob_regex(g.rstrip("/") + "/**") for g in ro) + tuple(
                glob_regex(g) for g in ro)
            out.append(PatternRule("read_only_path", Verdict.DENY, Match(effects=_WRITING),
                                   "path is under a read-only root", observe, paths=globs))
        return out

    def _roots(self, ro: tuple[str, ...]) -> tuple[str, ...]:
        """The absolute entries: read-only roots outside the workspace, plain directories."""
        out = []
        for i, g in enumerate(ro):
            if not g.startswith("/"):
                continue
            if any(c in g for c in "*?[") or ".." in g.split("/"):
                self.ck.problem(("paths", "read_only", i), "an absolute read-only root must be"
                                " a directory (no glob, no '..')", g)
            elif not os.path.isdir(g):
                self.ck.problem(("paths", "read_only", i), "a read-only root must be an existing"
                                " directory (it is not one here)", g)
            else:
                out.append(g)
        return tuple(out)

    def _match(self, path: Path, t: Mapping[str, Any]) -> Match:
        ck = self.ck
        pr = ck.table((*path, "principal"), t["principal"], _PRINCIPAL) \
            if "principal" in t else {}
        who = {k: frozenset(ck.strings((*path, "principal", k), pr[k]) or ())
               for k in _PRINCIPAL if k in pr}
        return Match(
            tools=self._tools((*path, "tools"), t["tools"])
            if "tools" in t else None,
            capabilities=ck.members((*path, "capabilities"), t["capabilities"], Capability)
            if "capabilities" in t else None,
            effects=ck.members((*path, "effects"), t["effects"], Effect)
            if "effects" in t else None,
            modes=ck.names((*path, "modes"), t["modes"], self.modes, "mode")
            if "modes" in t else None,
            users=who.get("users"), agents=who.get("agents"), tenants=who.get("tenants"),
            roles=who.get("roles"),
        )

    def _rule(self, path: Path, raw: Any) -> Rule | None:
        ck = self.ck
        t = ck.table(path, raw, _RULE)
        rid = ck.rule_id((*path, "id"), t.get("id"), self.taken)
        decision = ck.choice((*path, "decision"), t.get("decision", "deny"), ("deny", "ask"))
        reason = ck.string((*path, "reason"), t["reason"]) if "reason" in t else ""
        match = self._match(path, t)
        args: list[tuple[str, re.Pattern[str]]] = []
        raw_args = ck.table((*path, "args"), t["args"], tuple(t["args"])) \
            if isinstance(t.get("args"), Mapping) else {}
        if "args" in t and not isinstance(t["args"], Mapping):
            ck.problem((*path, "args"), "args must be a table of argument = pattern")
        for name, pat in raw_args.items():
            compiled = ck.pattern((*path, "args", name), pat)
            if compiled is not None:
                args.append((str(name), compiled))
        globs = {}
        for k in _GLOBS:
            written = ck.strings((*path, k), t[k]) or () if k in t else ()
            check_globs(ck, (*path, k), written)
            globs[k] = tuple(glob_regex(g) for g in written)
        hosts = ck.table((*path, "url_hosts"), t["url_hosts"], ("allow", "deny")) \
            if "url_hosts" in t else {}
        allow = ck.strings((*path, "url_hosts", "allow"), hosts["allow"]) \
            if "allow" in hosts else None
        deny = ck.strings((*path, "url_hosts", "deny"), hosts["deny"]) or () \
            if "deny" in hosts else ()
        ttl = _ttl(ck, (*path, "ttl"), t["ttl"]) if "ttl" in t else None
        if "ttl" in t and decision == "deny":
            ck.problem((*path, "ttl"), "ttl is only for rules with decision = \"ask\"", t["ttl"])
        if rid is None or decision is None or reason is None:
            return None
        rule = PatternRule(
            rid, Verdict(decision), match, reason, self._observe(path, t), args=tuple(args),
            paths=globs.get("paths", ()), except_paths=globs.get("except_paths", ()),
            only_paths=globs.get("only_paths", ()),
            hosts_allow=None if allow is None else tuple(h.lower() for h in allow),
            hosts_deny=tuple(h.lower() for h in deny), approval_ttl_s=ttl,
        )
        if rule.reads_content:
            self.content.add(rid)
        return rule

    def _cedar(self, raw: Any) -> list[Rule]:
        ck = self.ck
        t = ck.table(("cedar",), raw, ("policies", "default"))
        files = ck.strings(("cedar", "policies"), t["policies"]) if "policies" in t else None
        default = ck.choice(("cedar", "default"), t.get("default", "allow"), ("allow", "deny"))
        if not files:
            ck.problem(("cedar",), 'cedar needs policies = ["<file>.cedar", ...]')
            return []
        try:
            import cedarpy  # noqa: F401
        except ImportError:
            ck.problem(("cedar",), "Cedar policies need cedarpy: pip install 'tooltrace[cedar]'")
            return []
        from ._cedar import load_cedar
        from ._cedarrule import CedarRule
        from ._cedarschema import schema_text

        named = [(str(self.base / f), self.base / f) for f in files]
        defs = self.definitions
        cedar, problems = load_cedar(named, None if defs is None else schema_text(defs.values()),
                                     self.taken)
        ck.problems.extend(problems)
        if cedar is None or default is None:
            return []
        return [CedarRule(cedar, default)]

    def _approval(self, raw: Any) -> list[Rule]:
        t = self.ck.table(("approval",), raw, ("mode", "reason", "ttl", *_MATCH))
        if not any(k in t for k in _MATCH):
            self.ck.problem(("approval",), "approval needs tools, capabilities, effects,"
                            " modes or principal")
            return []
        why = self.ck.string(("approval", "reason"), t.get("reason", "needs approval")) or ""
        ttl = _ttl(self.ck, ("approval", "ttl"), t["ttl"]) if "ttl" in t else None
        rule = PatternRule("approval", Verdict.ASK, self._match(("approval",), t), why,
                           self._observe(("approval",), t), approval_ttl_s=ttl)
        self.spots.append((("approval",), rule))
        return [rule]

    def _limits(self, raw: Any) -> list[LimitRule]:
        ck = self.ck
        if not isinstance(raw, list):
            ck.problem(("limits",), "limits must be an array of tables ([[limits]])")
            return []
        out = []
        for i, r in enumerate(raw):
            p: Path = ("limits", i)
            t = ck.table(p, r, _LIMIT)
            rid = ck.rule_id((*p, "id"), t.get("id"), self.taken)
            per = ck.choice((*p, "per"), t.get("per", "run"), ("run", "principal"))
            nums = {k: ck.integer((*p, k), t[k]) for k in
                    ("max_calls", "per_minute", "max_concurrent") if k in t}
            if not nums:
                ck.problem(p, f"{ck.name(p)} needs max_calls, per_minute or max_concurrent")
            match = self._match(p, t)
            if rid is not None and per is not None:
                out.append(LimitRule(rid, match, per, nums.get("max_calls"),
                                     nums.get("per_minute"), nums.get("max_concurrent"),
                                     self._observe(p, t)))
        return out


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(value: Any) -> float | None:
    """An approval's time to live in seconds: a positive number of seconds or a duration
    (``90s``, ``15m``, ``8h``, ``1d``); None when malformed."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    m = _DURATION.match(value) if isinstance(value, str) else None
    if m is None or float(m[1]) <= 0:
        return None
    return float(m[1]) * _SECONDS[m[2]]


def _ttl(ck: Checker, path: Path, value: Any) -> float | None:
    """``ttl`` of ``[approval]`` or an ``ask`` rule, checked (a problem at ``path``)."""
    seconds = duration_seconds(value)
    if seconds is None:
        ck.problem(path, "ttl must be a number of seconds or a duration such as"
                   " 90s, 15m, 8h, 1d", value)
    return seconds


def compile_document(
    doc: Mapping[str, Any], ck: Checker, tools: frozenset[str] | None,
    definitions: Mapping[str, ToolDefinition] | None = None, base: FilePath = FilePath("."),
    expand: Expand | None = None,
) -> Compiled:
    """Check and compile a parsed document; problems are left in ``ck.problems``.
    ``definitions`` (the tools a registry holds) make the schema Cedar policies are validated
    against (without them Cedar files are checked for syntax only); ``base`` is the folder
    the file's Cedar paths are relative to; ``expand`` turns a tool name with a wildcard into
    the names it stands for (without it a wildcard is a problem)."""
    return _Compiler(ck, tools, definitions, base, expand).run(doc)
