"""What-if: replay recorded calls against a candidate policy, offline, and say what changes.

Each call in the audit trail (its tool, redacted arguments, mode, principal, run, resolved
paths and times) is decided again by the candidate policy and compared with the decision it
got: ``allow`` (a policy step allowed it or only observed), ``deny`` or ``ask``. Calls stopped
before the policy step (malformed, unknown tool) and calls the workspace's path scope refused
are not policy decisions and are left out. A rule that reads argument values cannot be replayed
exactly on arguments the trail holds redacted: such a call is ``undecidable``, never a guess.
Limits are replayed in the order the calls started, with their recorded durations.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..envelope import Principal
from ..policy import Policy, PolicyRequest, Verdict
from ..tool import ToolDefinition
from ._compile import Compiled
from ._limits import LimitRule, limit_key
from ._rules import PatternRule

__all__ = ["QUERY", "Change", "WhatIf", "recorded_decision", "replay"]

_MARKER = re.compile(r"\[REDACTED:[a-z0-9_]+\]")
_SCOPE = frozenset({"policy:path_scope", "policy:hook_scope"})
#: The query: every call's row and its last policy step.
QUERY = """
SELECT c.call_id, c.run_id, c.tool, c.mode, epoch_us(c.started_at) AS t_us, c.elapsed_ms,
       c.args_redacted, c.principal_user, c.principal_agent, c.principal_tenant,
       c.principal_roles, s.decider, s.decision, s.detail
FROM tool_calls c
LEFT JOIN (SELECT * FROM tool_call_steps WHERE step = 'policy'
           QUALIFY row_number() OVER (PARTITION BY call_id ORDER BY seq DESC) = 1) s
  ON s.call_id = c.call_id
WHERE $since IS NULL OR c.started_at >= CAST($since AS TIMESTAMP)
ORDER BY c.started_at, c.call_id
"""
_EXAMPLES = 3
_UNSET: Any = object()


@dataclass(slots=True)
class Change:
    """Calls of one tool whose decision one rule changes the same way."""

    tool: str
    """The tool."""
    rule: str
    """The rule that decides now (for a loosening: the rule that decided before)."""
    before: str
    """The recorded decision: ``allow``, ``deny`` or ``ask``."""
    after: str
    """The candidate's decision, or ``undecidable``."""
    count: int = 0
    """How many calls."""
    examples: list[str] = field(default_factory=list)
    """Up to three of their call ids."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"tool": self.tool, "rule": self.rule, "before": self.before,
                "after": self.after, "count": self.count, "examples": self.examples}


@dataclass(slots=True)
class WhatIf:
    """The outcome of a replay."""

    calls: int = 0
    """Calls read from the trail."""
    replayed: int = 0
    """Calls decided again (the rest were not policy decisions, or their tool is unknown)."""
    unknown_tools: dict[str, int] = field(default_factory=dict)
    """Calls of tools with no definition to replay with, by tool."""
    changes: dict[tuple[str, str, str, str], Change] = field(default_factory=dict)
    """Changed (and undecidable) calls, by (tool, rule, before, after)."""

    @property
    def changed(self) -> int:
        """Calls whose decision would change."""
        return sum(c.count for c in self.changes.values() if c.after != "undecidable")

    @property
    def undecidable(self) -> int:
        """Calls a rule cannot decide on redacted arguments."""
        return sum(c.count for c in self.changes.values() if c.after == "undecidable")

    def add(self, call_id: str, tool: str, rule: str, before: str, after: str) -> None:
        """Count one changed or undecidable call."""
        key = (tool, rule, before, after)
        c = self.changes.get(key)
        if c is None:
            c = self.changes[key] = Change(tool, rule, before, after)
        c.count += 1
        if len(c.examples) < _EXAMPLES:
            c.examples.append(call_id)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, groups sorted by tool, rule and size."""
        groups = sorted(self.changes.values(), key=lambda c: (c.tool, c.rule, -c.count))
        return {"calls": self.calls, "replayed": self.replayed, "changed": self.changed,
                "undecidable": self.undecidable, "unknown_tools": dict(self.unknown_tools),
                "changes": [c.to_dict() for c in groups if c.after != "undecidable"],
                "undecidable_calls": [c.to_dict() for c in groups if c.after == "undecidable"]}


def recorded_decision(decider: str | None, decision: str | None) -> str | None:
    """What the policy step decided (``allow``, ``deny``, ``ask``); None for no policy
    decision (no step, or the workspace's path scope refused the path)."""
    if decision is None or decider in _SCOPE:
        return None
    if decision in ("deny", "ask"):
        return decision
    return "allow"


def _principal(user: Any, agent: Any, tenant: Any, roles_json: Any) -> Principal | None:
    roles = tuple(orjson.loads(roles_json)) if roles_json else ()
    if not (user or agent or tenant or roles):
        return None
    return Principal(user, agent, tenant, roles)


class _Replayer:
    def __init__(self, compiled: Compiled, tools: Mapping[str, ToolDefinition]) -> None:
        p = compiled.policy
        # Fresh limit state: the candidate counts from zero over the replayed history.
        self.limits = tuple(LimitRule(x.name, x.match, x.per, x.max_calls, x.per_minute,
                                      x.max_concurrent, x.observe) for x in compiled.limits)
        names = {x.name for x in compiled.limits}
        self.policy = Policy([r for r in p.rules if r.name not in names], modes=p.modes.values())
        self.content = [r for r in self.policy.rules
                        if isinstance(r, PatternRule) and r.reads_content]
        self.content_names = frozenset(r.name for r in self.content)
        self.tools = tools
        # Decided once per distinct value: most trails repeat a few modes and principals.
        self._modes: dict[tuple[str, str], bool] = {}
        self._principals: dict[tuple[Any, ...], Principal | None] = {}

    def _mode_ok(self, d: ToolDefinition, mode: str) -> bool:
        key = (d.name, mode)
        ok = self._modes.get(key)
        if ok is None:
            ok = self._modes[key] = self.policy.mode_allows(d, mode)[0]
        return ok

    def decide(self, d: ToolDefinition, row: tuple[Any, ...]) -> tuple[str, str]:
        """(decision, deciding rule or "") of the candidate for one recorded call (a row of
        ``QUERY``)."""
        call_id, run_id, _tool, mode, t_us, elapsed_ms, args_json = row[:7]
        mode = mode or "default"
        if not self._mode_ok(d, mode):
            return "deny", "mode"
        pkey = row[7:11]
        principal = self._principals.get(pkey, _UNSET)
        if principal is _UNSET:
            principal = self._principals[pkey] = _principal(*pkey)
        detail = orjson.loads(row[13]) if row[13] else None
        paths = (detail.get("paths") or {}) if isinstance(detail, dict) else {}
        args = orjson.loads(args_json) if args_json else {}
        req = PolicyRequest(d, args if isinstance(args, dict) else {}, mode, run_id, call_id,
                            paths, principal=principal)
        decision, _rules = self.policy.evaluate(req)
        verdict, rule = (None, "") if decision is None else (decision.verdict, decision.rule)
        if verdict is Verdict.DENY and rule not in self.content_names:
            return "deny", rule
        if args_json and "[REDACTED:" in args_json and _MARKER.search(args_json):
            for r in self.content:
                if r.match.tool(d) and r.match.call(mode, principal):
                    return "undecidable", r.name
        if verdict is Verdict.DENY or verdict is Verdict.ASK:
            return str(verdict), rule
        t = t_us / 1e6
        for lim in self.limits:
            if lim.match.tool(d) and lim.match.call(mode, principal):
                key = limit_key(lim.per, run_id, principal)
                hit = lim.take(key, t, call_id, t + (elapsed_ms or 0) / 1e3)
                if hit is not None and hit.verdict is Verdict.DENY:
                    return "deny", lim.name
        return "allow", rule


def replay(rows: Iterable[tuple[Any, ...]], compiled: Compiled,
           tools: Mapping[str, ToolDefinition]) -> WhatIf:
    """Decide every recorded call (``QUERY``'s rows, as tuples in start order) again with
    ``compiled``."""
    out = WhatIf()
    r = _Replayer(compiled, tools)
    for row in rows:
        out.calls += 1
        decider = row[11]
        before = recorded_decision(decider, row[12])
        if before is None:
            continue
        tool = row[2]
        d = tools.get(tool)
        if d is None:
            out.unknown_tools[tool] = out.unknown_tools.get(tool, 0) + 1
            continue
        out.replayed += 1
        after, rule = r.decide(d, row)
        if after != before:
            old = str(decider or "").removeprefix("policy:")
            out.add(row[0], tool, rule or old, before, after)
    return out
