"""``tooltrace stats``: per tool calls, reject and offload ratios, p50/p95 latency."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import (
    OutputGuard,
    open_store,
    parse_since,
    print_json,
    since_option,
    tool_option,
    trail_options,
)
from ._common import table as print_table

#: The first table: calls by the status they returned and by final outcome. What stays when
#: the terminal is narrow comes first: what needs attention (still unknown, failed) before ok.
_COUNTS = ("tool", "calls", "failed", "unknown", "outcome_unknown", "rejected", "cancelled",
           "ok", "outcome_ok")
#: The second table: the latency and the recording rules' ratios, shown as percentages under
#: short headers (so the table fits 80 columns; --json keeps the ratio columns' names).
_RATIOS = ("tool", "p50_ms", "p95_ms", "param_reject_ratio", "policy_reject_ratio",
           "hook_block_ratio", "offload_ratio")
_HEADERS = {"param_reject_ratio": "params%", "policy_reject_ratio": "policy%",
            "hook_block_ratio": "hook%", "offload_ratio": "offload%"}


def _percent(v: object) -> object:
    return f"{float(v) * 100:.1f}%" if isinstance(v, int | float) else v


@click.command()
@since_option("calls")
@tool_option(None)
@trail_options
def stats(since: str | None, tool: str | None, home: Path | None, as_json: bool, wide: bool,
          archive: str | None) -> None:
    """Per tool: calls by status and final outcome, then the ratios and p50/p95.

    ok, rejected, failed, cancelled and unknown count what calls returned (as the metrics
    do); outcome_ok and outcome_unknown count final outcomes (a call that returned unknown and
    was resolved later as ok is in unknown and in outcome_ok; outcome_unknown is what is still
    unresolved).

    The definitions are those of the Prometheus recording rules: parameter-reject ratio =
    rejections at stage params / calls; policy-reject ratio = rejections at stage policy or
    approval / calls; hook-block ratio = rejections at stage hook / calls; offload ratio =
    offloaded / ok calls; p50/p95 over all calls. For people the counts and the ratios are two
    tables, each fitting the terminal; --json gives one row per tool with every column.
    """
    from ..audit import find_sql

    q = find_sql("tool_stats")
    assert q is not None, "the tool_stats query ships with tooltrace"
    guard = OutputGuard(home)
    with open_store(home, guard, archive) as store:
        given = {k: v for k, v in (("since", parse_since(since)), ("tool", tool)) if v is not None}
        res = store.sql(q.text, q.bind(given))
    if as_json:
        print_json(res.dicts(), guard)
        return
    if not res.rows:
        click.echo("no calls recorded")
        return
    for title, names in (("calls by status (returned) and outcome (final)", _COUNTS),
                         ("ratios (as the recording rules) and latency", _RATIOS)):
        idx = [res.columns.index(c) for c in names if c in res.columns]
        heads = [_HEADERS.get(res.columns[i], res.columns[i]) for i in idx]
        rows = [[_percent(r[i]) if res.columns[i] in _HEADERS else r[i] for i in idx]
                for r in res.rows]
        # Shown and, when narrow, kept in the order of _COUNTS/_RATIOS.
        print_table(title, heads, rows, guard, wide=wide, priority=heads)
