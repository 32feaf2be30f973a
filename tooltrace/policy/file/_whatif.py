"""What-if: replay recorded calls against a candidate policy, offline, and say what changes.

Each call in the audit trail (its tool, redacted arguments, mode, principal, run, resolved
paths and times) is decided again by the candidate policy and compared with the decision it
got: ``allow`` (a policy step allowed it or only observed), ``deny`` or ``ask``. Calls stopped
before the policy step (malformed, unknown tool) and calls the workspace's path scope refused
are not policy decisions and are left out. A rule that reads argument values cannot be replayed
exactly on arguments the trail holds redacted: such a call is ``undecidable``, never a guess.

A file's rules read only the tool, mode, principal, arguments and resolved paths, and recorded
calls repeat those facts a lot, so DuckDB groups the calls by them (with the recorded decision)
as it reads the trail, and each distinct set is decided once. Limits count calls one
by one, in the order they started, with their recorded durations, as the engine counts them:
every call no rule denies (one that asks counts too). An undecidable call counts as the recorded
run decided it, and the result says how many such calls the limits counted
(``WhatIf.approximate``). The calls a limit counts, and then those whose decision changes (for
their examples), are read a second time, each matched to its group by a hash of its facts, and
counted in DuckDB: when no two groups share the facts the call record holds itself, that read
needs no policy steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...model import ToolDefinition
from ._compile import Compiled
from ._limits import limit_key
from ._replay import Decider, Ruling, principal_of, recorded_decision

if TYPE_CHECKING:
    import duckdb

__all__ = ["Change", "WhatIf", "replay"]

_EXAMPLES = 3
#: The facts a candidate's rules read, and the recorded decision: calls alike in all of these
#: are decided once. The first seven are the call record's own (no policy step needed).
_KEY = ("tool", "mode", "principal_user", "principal_agent", "principal_tenant",
        "principal_roles", "args_redacted", "decider", "decision", "detail")
_OWN = _KEY[:7]
_SINCE = "$since IS NULL OR c.started_at >= CAST($since AS TIMESTAMP)"
#: Every call alone: its own facts, run and times.
_ALONE = f"""
SELECT c.call_id, c.run_id, c.tool, c.mode, epoch_us(c.started_at) AS t_us, c.elapsed_ms,
       c.args_redacted, c.principal_user, c.principal_agent, c.principal_tenant,
       c.principal_roles
FROM tool_calls c WHERE {_SINCE}
"""
#: Every call with its last policy step.
_CALLS = f"""
SELECT c.call_id, c.run_id, c.tool, c.mode, epoch_us(c.started_at) AS t_us, c.elapsed_ms,
       c.args_redacted, c.principal_user, c.principal_agent, c.principal_tenant,
       c.principal_roles, s.p.decider AS decider, s.p.decision AS decision,
       s.p.detail AS detail
FROM tool_calls c
LEFT JOIN (SELECT call_id, arg_max(struct_pack(decider, decision, detail), seq) AS p
           FROM tool_call_steps WHERE step = 'policy' GROUP BY call_id) s
  ON s.call_id = c.call_id
WHERE {_SINCE}
"""
_FIRST = "struct_pack(t := t_us, id := call_id)"
_EARLIEST = f"min_by({_FIRST}, {_FIRST}, {_EXAMPLES})"
#: Alike calls, numbered, with two hashes a call is found by again: of its own facts (``own``)
#: and of all of them (``h``), and (``{first}``) their earliest calls or NULL.
_GROUPS = f"""
CREATE OR REPLACE TEMP TABLE whatif_groups AS
SELECT row_number() OVER () AS g, hash({", ".join(_OWN)}) AS own, hash({", ".join(_KEY)}) AS h, *
FROM (SELECT {", ".join(_KEY)}, count(*) AS n, {{first}} AS first
      FROM ({_CALLS}) GROUP BY {", ".join(_KEY)})
"""
#: The calls read again: those of the groups in ``whatif_keys`` (a group's number, its
#: principal key, for each limit whether it counts the group's calls, and whether a call of the
#: group changes decision when no limit denies it and when one does), read from ``{calls}`` and
#: found by the hash ``{hash}`` of the facts ``{hashed}``, and by all the facts too (``{same}``)
#: when two groups share that hash.
_ROWS = """
SELECT k.* EXCLUDE (h{facts}), c.run_id, c.t_us, c.elapsed_ms, c.call_id
FROM (SELECT hash({hashed}) AS h, * FROM ({calls})) c
JOIN (SELECT w.{hash} AS h{w_facts}, k.* FROM whatif_groups w JOIN whatif_keys k ON k.g = w.g) k
  ON c.h = k.h{same}
"""
#: One limit (the ``i``-th) of calls in all, for every key at once: past the first ``$max<i>``
#: calls that reach it (calls it counts that no earlier limit denied), it denies.
_MAX_CALLS = """
SELECT * EXCLUDE (reach, denied_by),
       CASE WHEN reach AND row_number() OVER (PARTITION BY {key}, reach ORDER BY t_us, call_id)
                 > $max{i} THEN $name{i} ELSE denied_by END AS denied_by
FROM (SELECT *, denied_by IS NULL AND l{i} AS reach FROM {prev})
"""
#: The tally: calls by group and the limit that denies them, with the earliest of those whose
#: decision changes as examples.
_COUNTED = f"""
SELECT g, denied_by, count(*),
       {_EARLIEST} FILTER (WHERE CASE WHEN denied_by IS NULL THEN moved ELSE moved_by_limit END)
FROM {{last}} GROUP BY g, denied_by
"""


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
    """Up to three of their call ids, the earliest first."""
    _first: list[tuple[int, str]] = field(default_factory=list, repr=False)

    def note(self, count: int, first: list[tuple[int, str]]) -> None:
        """Count ``count`` more calls; keep the earliest of them (``first``: start in
        microseconds, call id) as examples."""
        self.count += count
        if len(self._first) < _EXAMPLES or first[0] < self._first[-1]:
            self._first = sorted(self._first + first)[:_EXAMPLES]
            self.examples = [i for _t, i in self._first]

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
    approximate: int = 0
    """Undecidable calls the limits counted (as the recorded run decided them: one the rule
    that cannot be decided denied then is not counted), so the limits' decisions on the calls
    after them are approximate."""

    @property
    def changed(self) -> int:
        """Calls whose decision would change."""
        return sum(c.count for c in self.changes.values() if c.after != "undecidable")

    @property
    def undecidable(self) -> int:
        """Calls a rule cannot decide on redacted arguments."""
        return sum(c.count for c in self.changes.values() if c.after == "undecidable")

    def add(self, tool: str, rule: str, before: str, after: str, count: int,
            first: list[tuple[int, str]]) -> None:
        """Count ``count`` changed or undecidable calls; ``first``: the earliest of them as
        (start in microseconds, call id)."""
        key = (tool, rule, before, after)
        c = self.changes.get(key)
        if c is None:
            c = self.changes[key] = Change(tool, rule, before, after)
        c.note(count, first)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, groups sorted by tool, rule and size."""
        groups = sorted(self.changes.values(), key=lambda c: (c.tool, c.rule, -c.count))
        return {"calls": self.calls, "replayed": self.replayed, "changed": self.changed,
                "undecidable": self.undecidable, "approximate": self.approximate,
                "unknown_tools": dict(self.unknown_tools),
                "changes": [c.to_dict() for c in groups if c.after != "undecidable"],
                "undecidable_calls": [c.to_dict() for c in groups if c.after == "undecidable"]}


@dataclass(frozen=True, slots=True)
class _Group:
    tool: str
    before: str
    old_rule: str
    principal: Any
    ruling: Ruling


def replay(con: duckdb.DuckDBPyConnection, compiled: Compiled,
           tools: Mapping[str, ToolDefinition], *, since: Any = None) -> WhatIf:
    """Decide every call recorded in ``con``'s ``tool_calls`` and ``tool_call_steps`` (those
    started at or after ``since``, when given) again with ``compiled``."""
    decider = Decider(compiled)
    try:
        # With limits, the calls of the groups that change are read again with those a limit
        # counts, and their examples found then: not for every group here (0.10 s of CPU of
        # 1.38 at 1,000,000 calls, docs/internals/performance-history.md).
        con.execute(_GROUPS.format(first="NULL" if decider.limits else _EARLIEST),
                    {"since": since})
        groups = con.execute(f"SELECT g, {', '.join(_KEY)}, n, first FROM whatif_groups"
                             ).fetchall()
        out = WhatIf()
        again = _decide_groups(groups, decider, tools, out)
        if again:
            _count(con, again, decider, out, since)
        return out
    finally:
        con.execute("DROP TABLE IF EXISTS whatif_groups")


def _distinct_hashes(con: duckdb.DuckDBPyConnection) -> tuple[bool, bool]:
    """Whether no two groups share the hash of their own facts, and of all their facts."""
    own, h = con.execute("SELECT count(DISTINCT own) = count(*), count(DISTINCT h) = count(*)"
                         " FROM whatif_groups").fetchone() or (False, False)
    return bool(own), bool(h)


def _rows(con: duckdb.DuckDBPyConnection) -> str:
    """The query for the calls read again, matched to their group as cheaply as the
    groups allow: by their own facts alone when no two groups share them (the policy steps are
    not read again), else by all their facts."""
    own, h = _distinct_hashes(con)
    if own:
        return _ROWS.format(calls=_ALONE, hashed=", ".join(_OWN), hash="own", facts="",
                            w_facts="", same="")
    if h:
        return _ROWS.format(calls=_CALLS, hashed=", ".join(_KEY), hash="h", facts="",
                            w_facts="", same="")
    # Two sets of facts share a hash (arguments can be chosen to make one): match the facts
    # themselves, a NULL matching a NULL as in the grouping.
    return _ROWS.format(calls=_CALLS, hashed=", ".join(_KEY), hash="h",
                        facts="".join(f", {col}" for col in _KEY),
                        w_facts="".join(f", w.{col}" for col in _KEY),
                        same="".join(f" AND c.{col} IS NOT DISTINCT FROM k.{col}"
                                     for col in _KEY))


def _decide_groups(groups: list[tuple[Any, ...]], decider: Decider,
                   tools: Mapping[str, ToolDefinition], out: WhatIf) -> dict[int, _Group]:
    """Decide each group of alike calls; return those whose calls are read again: those a
    limit counts, and those whose decision changes when the grouping kept no examples."""
    again: dict[int, _Group] = {}
    for g, tool, mode, user, agent, tenant, roles, args, old, decision, detail, n, first \
            in groups:
        out.calls += n
        before = recorded_decision(old, decision)
        if before is None:
            continue
        d = tools.get(tool)
        if d is None:
            out.unknown_tools[tool] = out.unknown_tools.get(tool, 0) + n
            continue
        out.replayed += n
        principal = principal_of(user, agent, tenant, roles)
        ruling = decider.rules(d, mode, principal, args, detail)
        old_rule = str(old or "").removeprefix("policy:")
        if ruling.after == "undecidable" and ruling.limits:
            # The engine counted such a call unless the rule that cannot be decided now denied
            # it: the recorded decision says whether it did.
            if before == "deny" and old_rule == ruling.rule:
                ruling = Ruling(ruling.after, ruling.rule)
            else:
                out.approximate += n
        if ruling.limits or (ruling.after != before and first is None):
            again[g] = _Group(tool, before, old_rule, principal, ruling)
        elif ruling.after != before:
            out.add(tool, ruling.rule or old_rule, before, ruling.after, n,
                    [(f["t"], f["id"]) for f in first])
    return again


def _count(con: duckdb.DuckDBPyConnection, counted: dict[int, _Group], decider: Decider,
           out: WhatIf, since: Any) -> None:
    """Replay the limits on every call of ``counted`` they can count, in start order (a
    group no limit counts keeps its decision)."""
    import pyarrow as pa

    grps = counted.values()
    keys = {"g": list(counted),
            "pkey": [limit_key("principal", "", grp.principal) for grp in grps],
            "moved": [grp.ruling.after != grp.before for grp in grps],
            "moved_by_limit": [grp.before != "deny" for grp in grps]}
    for i, lim in enumerate(decider.limits):
        keys[f"l{i}"] = [lim in grp.ruling.limits for grp in grps]
    con.register("whatif_keys", pa.table(keys))
    try:
        rows = _rows(con)
        if all(x.per_minute is None and x.max_concurrent is None for x in decider.limits):
            _count_in_sql(con, counted, decider, out, rows, since)
        else:
            _count_in_order(con, counted, out, rows, since)
    finally:
        con.unregister("whatif_keys")


def _count_in_sql(con: duckdb.DuckDBPyConnection, counted: dict[int, _Group],
                  decider: Decider, out: WhatIf, rows: str, since: Any) -> None:
    """Limits of calls in all only, in one query: each limit in turn denies, for every key at
    once, the calls past its first ``max_calls`` among those that reach it."""
    steps = [f"d0 AS (SELECT *, NULL::VARCHAR AS denied_by FROM ({rows}))"]
    params: dict[str, Any] = {"since": since}
    for i, lim in enumerate(decider.limits):
        if lim.max_calls is None or not any(lim in grp.ruling.limits
                                            for grp in counted.values()):
            continue
        n = len(steps)
        key = "run_id" if lim.per == "run" else "pkey"
        steps.append(f"d{n} AS ({_MAX_CALLS.format(key=key, i=i, prev=f'd{n - 1}')})")
        params |= {f"name{i}": lim.name, f"max{i}": lim.max_calls}
    sql = "WITH " + ",\n".join(steps) + _COUNTED.format(last=f"d{len(steps) - 1}")
    for g, denied_by, n, first in con.execute(sql, params).fetchall():
        grp = counted[g]
        after = grp.ruling.after if denied_by is None else "deny"
        if after != grp.before:
            rule = grp.ruling.rule if denied_by is None else denied_by
            out.add(grp.tool, rule or grp.old_rule, grp.before, after, n,
                    [(f["t"], f["id"]) for f in first])


def _count_in_order(con: duckdb.DuckDBPyConnection, counted: dict[int, _Group],
                    out: WhatIf, rows: str, since: Any) -> None:
    """Any limits: each call they can count, decided one by one in start order."""
    limit = Decider.limit
    cur = con.execute(f"SELECT g, run_id, t_us, elapsed_ms, call_id FROM ({rows})"
                      " ORDER BY t_us, call_id", {"since": since})
    for batch in cur.to_arrow_reader(65536):
        gs, runs, ts, elapsed, ids = (c.to_pylist() for c in batch.columns)
        for g, run_id, t_us, ms, call_id in zip(gs, runs, ts, elapsed, ids, strict=True):
            grp = counted[g]
            after, rule = limit(grp.ruling, grp.principal, run_id, call_id, t_us, ms)
            if after != grp.before:
                out.add(grp.tool, rule or grp.old_rule, grp.before, after, 1, [(t_us, call_id)])
