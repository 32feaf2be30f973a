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

#: What stays when the terminal is narrow, most important first.
_PRIORITY = ("tool", "calls", "ok", "unknown", "outcome_ok", "p50_ms", "p95_ms",
             "outcome_unknown")


@click.command()
@since_option("calls")
@tool_option(None)
@trail_options
def stats(since: str | None, tool: str | None, home: Path | None, as_json: bool, wide: bool,
          archive: str | None) -> None:
    """Per tool: calls, ok and unknown (returned and final), reject and offload ratios, p50/p95.

    ok and unknown count what calls returned (as the metrics do); outcome_ok and
    outcome_unknown count final outcomes (a call that returned unknown and was resolved later
    as ok is in unknown and in outcome_ok; outcome_unknown is what is still unresolved).

    The definitions are those of the Prometheus recording rules: parameter-reject ratio =
    rejections at stage params / calls; policy-reject ratio = rejections at stage policy or
    approval / calls; offload ratio = offloaded / ok calls; p50/p95 over all calls.
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
    print_table(None, res.columns, res.rows, guard, wide=wide, priority=_PRIORITY)
