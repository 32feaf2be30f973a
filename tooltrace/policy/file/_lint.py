"""Warnings for rules that load but do not say what they seem to: they can never match, or an
earlier rule always decides first.

A policy file can be valid and still be wrong: ``args = { command = "..." }`` on a tool whose
parameter is ``argv`` never matches, ``paths = ["!notes/**"]`` names paths that begin with ``!``
(globs are not negated), a rule limited to a mode that hides its tools never runs, and a rule
after an unconditional ``deny`` of the same calls never decides. Each is reported as a warning
at its place (``tooltrace policy check`` prints them; ``--strict`` makes them fail). Judging
which tools a rule can match needs their definitions: without them (the MCP proxy's policy,
checked before its servers are known) only the checks that need none are made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...model import ToolDefinition
from .._rules import Mode, Verdict
from ._check import Checker
from ._limits import LimitRule
from ._rules import Match, PatternRule
from ._source import Path

__all__ = ["check_globs", "lint_modes", "lint_rules"]

#: A rule of the file with the place it is written at (its table's path).
Spot = tuple[Path, PatternRule | LimitRule]


def check_globs(ck: Checker, path: Path, globs: Sequence[str]) -> None:
    """Warn about globs that can match no resolved path."""
    for i, g in enumerate(globs):
        if g == "":
            ck.warn((*path, i), "an empty glob matches no path", g)
        elif g.startswith("!"):
            ck.warn((*path, i), f"{g!r}: a glob is not negated here (it names paths that begin"
                    " with '!'); to match paths outside some globs, use only_paths = [...]"
                    " (or except_paths beside paths)", g)
        elif g.endswith("/"):
            ck.warn((*path, i), f"{g!r} matches no path (a resolved path never ends with '/');"
                    f" write {g + '**'!r} for everything under it", g)


class _Tools:
    """Which known tools a rule's match can name (None: it cannot be told here)."""

    def __init__(self, definitions: Mapping[str, ToolDefinition] | None,
                 declared: Iterable[str]) -> None:
        self.defs = definitions
        # Tools the file declares without a definition are registered later: a rule that may
        # match them cannot be judged against the known ones alone.
        self.unknown = frozenset(declared) - frozenset(definitions or ())

    def of(self, m: Match) -> list[ToolDefinition] | None:
        if self.defs is None:
            return None
        if m.tools is not None and not m.tools <= frozenset(self.defs):
            return None
        if m.tools is None and self.unknown:
            return None
        return [d for d in self.defs.values() if m.tool(d) and (d.listed or m.names(d.name))]


def lint_modes(ck: Checker, modes: Iterable[Mode],
               definitions: Mapping[str, ToolDefinition] | None) -> None:
    """Warn about a mode's tool list naming a tool the mode's capabilities or effects hide."""
    for m in modes:
        if m.tools is None or definitions is None:
            continue
        for name in sorted(m.tools):
            d = definitions.get(name)
            visible, why = m.allows(d) if d is not None else (True, "")
            if not visible:
                ck.warn(("modes", m.name, "tools"), f"mode {m.name!r} lists {name!r}, which it"
                        f" never shows: {why}", name)


def lint_rules(ck: Checker, spots: Sequence[Spot], modes: Mapping[str, Mode],
               definitions: Mapping[str, ToolDefinition] | None,
               declared: Iterable[str] = ()) -> None:
    """Warn about rules that can never match, and rules an earlier one always decides for."""
    tools = _Tools(definitions, declared)
    for i, (path, rule) in enumerate(spots):
        cand = tools.of(rule.match)
        if cand is not None and not _reachable(ck, path, rule, cand, modes):
            continue
        if isinstance(rule, PatternRule) and cand:
            _arguments(ck, path, rule, cand)
        for earlier_path, earlier in spots[:i]:
            if isinstance(earlier, PatternRule) and _shadows(earlier, rule, tools):
                _shadowed(ck, path, rule, earlier_path, earlier)
                break


def _name(path: Path, rule: PatternRule | LimitRule) -> str:
    return "[approval]" if path == ("approval",) else f"rule {rule.name!r}"


def _where(path: Path) -> Path:
    return (*path, "id") if isinstance(path[-1], int) else path


def _reachable(ck: Checker, path: Path, rule: PatternRule | LimitRule,
               cand: list[ToolDefinition], modes: Mapping[str, Mode]) -> bool:
    """Whether the rule can match some known tool in one of its modes (warn when not)."""
    what = _name(path, rule)
    if not cand:
        ck.warn(_where(path), f"{what} matches no tool: no tool has the tools, capabilities"
                " and effects it names together")
        return False
    wanted = rule.match.modes
    if wanted is not None and not any(
            modes[m].allows(d)[0] for m in wanted if m in modes for d in cand):
        ck.warn((*path, "modes"), f"{what} can never match: mode(s) {', '.join(sorted(wanted))}"
                " show none of the tools it names")
        return False
    if isinstance(rule, PatternRule) and rule.reads_paths and not any(d.path_params
                                                                        for d in cand):
        key = next(k for k in ("paths", "except_paths", "only_paths") if getattr(rule, k))
        ck.warn((*path, key), f"{what} can never match: none of the tools it names has a path"
                " argument")
        return False
    return True


def _arguments(ck: Checker, path: Path, rule: PatternRule, cand: list[ToolDefinition]) -> None:
    """Warn about ``args`` keys no tool takes, and keys that are path arguments."""
    for name, _pattern in rule.args:
        params = [d for d in cand if name in _parameters(d)]
        if not params:
            takes = "; ".join(f"{d.name} takes {', '.join(_parameters(d)) or 'none'}"
                              for d in cand[:3])
            ck.warn((*path, "args", name), f"args.{name}: no tool {_name(path, rule)} matches"
                    f" takes an argument {name!r} ({takes}), so it can never match")
        elif any(name in d.path_params for d in params):
            ck.warn((*path, "args", name), f"args.{name} is matched against the argument as"
                    " the model wrote it, before '..' and symlinks are resolved (a pattern"
                    " such as ^notes/ also passes notes/../x): to say where a path may lead,"
                    " use paths, except_paths or only_paths")


def _parameters(d: ToolDefinition) -> list[str]:
    props = d.parameters.get("properties")
    return list(props) if isinstance(props, Mapping) else []


def _kind(rule: PatternRule | LimitRule) -> str:
    if isinstance(rule, LimitRule):
        return "limit"
    return "observe" if rule.observe else str(rule.verdict)


#: Which later kinds of rule an earlier one decides for, by the earlier one's kind: a deny
#: ends the evaluation, an ask wins over every later ask and observation, the first
#: observation is the one recorded.
_DECIDES_FOR = {"deny": {"deny", "ask", "observe", "limit"}, "ask": {"ask", "observe"},
                "observe": {"observe"}}


def _conditions(rule: PatternRule) -> tuple[Any, ...]:
    """What a rule reads besides the tool and principal, comparable between two rules."""
    globs = tuple(tuple(p.pattern for p in ps)
                  for ps in (rule.paths, rule.except_paths, rule.only_paths))
    return (tuple((n, p.pattern) for n, p in rule.args), globs, rule.hosts_allow,
            rule.hosts_deny)


def _shadows(a: PatternRule, b: PatternRule | LimitRule, tools: _Tools) -> bool:
    """Whether ``a`` (earlier) decides every call ``b`` could decide or count."""
    if _kind(b) not in _DECIDES_FOR[_kind(a)]:
        return False
    free = not (a.reads_content or a.reads_paths)
    if not free and (isinstance(b, LimitRule) or _conditions(a) != _conditions(b)):
        return False
    return _covers(a.match, b.match, tools)


def _covers(a: Match, b: Match, tools: _Tools) -> bool:
    """Whether every call ``b`` matches, ``a`` matches too."""
    ca, cb = tools.of(a), tools.of(b)
    if ca is not None and cb is not None:
        if not cb or not {d.name for d in cb} <= {d.name for d in ca}:
            return False
    elif not all(_within(x, y) for x, y in ((a.tools, b.tools),
                                             (a.capabilities, b.capabilities),
                                             (a.effects, b.effects))):
        return False
    return all(_within(x, y) for x, y in ((a.modes, b.modes), (a.users, b.users),
                                           (a.agents, b.agents), (a.tenants, b.tenants),
                                           (a.roles, b.roles)))


def _within(wide: frozenset[Any] | None, narrow: frozenset[Any] | None) -> bool:
    return wide is None or (narrow is not None and narrow <= wide)


def _shadowed(ck: Checker, path: Path, rule: PatternRule | LimitRule, earlier_path: Path,
              earlier: PatternRule) -> None:
    line = ck.pos.of(_where(earlier_path))[0]
    first = f"{_name(earlier_path, earlier)} (line {line})"
    if isinstance(rule, LimitRule):
        ck.warn(_where(path), f"limit {rule.name!r} never counts a call: {first} denies every"
                " call it would count, and comes first")
        return
    does = {Verdict.DENY: "denies", Verdict.ASK: "asks about"}[earlier.verdict]
    does = "observes" if earlier.observe else does
    ck.warn(_where(path), f"{_name(path, rule)} never decides: {first} comes first and {does}"
            " every call it matches")
