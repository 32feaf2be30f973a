"""Deciding one recorded call again: what what-if asks of a candidate policy.

``Decider.rules`` decides what the candidate's rules (all but its limits) say about a recorded
call from the facts a rule reads (tool, mode, principal, redacted arguments and resolved
paths), so what-if asks it once per distinct set of facts. Limits count calls in the order
they started, as the engine does: every call no rule denies first (one that asks, or is only
observed, counts too): ``Decider.limit`` replays one call against the limits that count it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ...model import Principal, ToolDefinition
from .._paths import reads_only
from .._rules import Policy, PolicyRequest, Verdict
from ._compile import Compiled
from ._limits import LimitRule, limit_key
from ._rules import PatternRule

__all__ = ["Decider", "Ruling", "principal_of", "recorded_decision"]

_MARKER = re.compile(r"\[REDACTED:[a-z0-9_]+\]")
_SCOPE = frozenset({"policy:path_scope", "policy:hook_scope"})


def recorded_decision(decider: str | None, decision: str | None) -> str | None:
    """What the policy step decided (``allow``, ``deny``, ``ask``); None for no policy
    decision (no step, or the workspace's path scope refused the path)."""
    if decision is None or decider in _SCOPE:
        return None
    if decision in ("deny", "ask"):
        return decision
    return "allow"


def principal_of(user: Any, agent: Any, tenant: Any, roles_json: Any) -> Principal | None:
    """The principal recorded in a call's ``principal_*`` columns (None: nobody named)."""
    roles = tuple(orjson.loads(roles_json)) if roles_json else ()
    if not (user or agent or tenant or roles):
        return None
    return Principal(user, agent, tenant, roles)


@dataclass(frozen=True, slots=True)
class Ruling:
    """What the candidate's rules say about a set of recorded facts."""

    after: str
    """``allow``, ``deny``, ``ask`` or ``undecidable``."""
    rule: str
    """The deciding rule ("" when no rule had an opinion)."""
    limits: tuple[LimitRule, ...] = ()
    """The limits that count such a call: as in the engine, every call no rule denies (one
    that asks, or one a rule could not be decided on, too). Each call is then decided again
    by them, in start order."""


class Decider:
    """The candidate policy, ready to decide recorded calls (limit counters start at zero)."""

    def __init__(self, compiled: Compiled) -> None:
        p = compiled.policy
        # Fresh limit state: the candidate counts from zero over the replayed history. A limit
        # in observe mode never changes a decision: it is not replayed.
        self.limits = tuple(LimitRule(x.name, x.match, x.per, x.max_calls, x.per_minute,
                                      x.max_concurrent) for x in compiled.limits
                            if not x.observe)
        names = {x.name for x in compiled.limits}
        self.policy = Policy([r for r in p.rules if r.name not in names], modes=p.modes.values())
        self.content = [r for r in self.policy.rules
                        if isinstance(r, PatternRule) and r.reads_content]
        self.content_names = frozenset(r.name for r in self.content)
        # Recorded paths outside the workspace are real: so are the roots they must lie in.
        self.roots = tuple(os.path.realpath(r) for r in compiled.read_only_roots)

    def _scope_allows(self, d: ToolDefinition, paths: Mapping[str, Any]) -> bool:
        """Whether the candidate's workspace lets the call name its recorded paths: a path
        outside the workspace must lie in one of its read-only roots, for a tool that only
        reads."""
        for p in paths.values():
            if isinstance(p, str) and p.startswith("/") and not (reads_only(d) and any(
                    p == r or p.startswith(r.rstrip("/") + "/") for r in self.roots)):
                return False
        return True

    def rules(self, d: ToolDefinition, mode: str | None, principal: Principal | None,
              args_json: str | None, detail_json: str | None, *, run_id: str = "",
              call_id: str = "") -> Ruling:
        """The candidate's rules on one recorded call's facts (``args_json``: its redacted
        arguments; ``detail_json``: its policy step's detail, which holds the resolved
        paths)."""
        mode = mode or "default"
        if not self.policy.mode_allows(d, mode)[0]:
            return Ruling("deny", "mode")
        detail = orjson.loads(detail_json) if detail_json else None
        paths = (detail.get("paths") or {}) if isinstance(detail, dict) else {}
        paths = paths if isinstance(paths, Mapping) else {}
        if not self._scope_allows(d, paths):
            return Ruling("deny", "path_scope")
        args = orjson.loads(args_json) if args_json else {}
        req = PolicyRequest(d, args if isinstance(args, Mapping) else {}, mode, run_id, call_id,
                            paths, principal=principal)
        decision, _rules = self.policy.evaluate(req)
        verdict, rule = (None, "") if decision is None else (decision.verdict, decision.rule)
        if verdict is Verdict.DENY and rule not in self.content_names:
            return Ruling("deny", rule)
        # What the engine counts against a limit: every call no rule denied before it.
        limits = tuple(x for x in self.limits
                       if x.match.tool(d) and x.match.call(mode, principal))
        if args_json and "[REDACTED:" in args_json and _MARKER.search(args_json):
            for r in self.content:
                if r.match.tool(d) and r.match.call(mode, principal):
                    return Ruling("undecidable", r.name, limits)
        if verdict is Verdict.DENY:
            return Ruling("deny", rule)
        return Ruling("ask" if verdict is Verdict.ASK else "allow", rule, limits)

    @staticmethod
    def limit(ruling: Ruling, principal: Principal | None, run_id: str, call_id: str,
              t_us: int, elapsed_ms: float | None) -> tuple[str, str]:
        """(decision, rule) for one call no rule denies, counted by ``ruling.limits`` at its
        start time with its recorded duration: a limit's deny, else the rules' decision."""
        t = t_us / 1e6
        ends = t + (elapsed_ms or 0) / 1e3
        for lim in ruling.limits:
            hit = lim.take(limit_key(lim.per, run_id, principal), t, call_id, ends)
            if hit is not None and hit.verdict is Verdict.DENY:
                return "deny", lim.name
        return ruling.after, ruling.rule
