"""``tooltrace calls``: recent calls, filtered by what they returned or by their final outcome."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click

from ._common import (
    OutputGuard,
    limit_option,
    open_store,
    parse_since,
    print_json,
    since_option,
    tool_option,
    trail_options,
)
from ._common import table as print_table
from ._table import note

_STATUSES = click.Choice(["ok", "rejected", "failed", "cancelled", "unknown"])
#: What matters most when the terminal is narrow: what the call was and when, then what it
#: said; the secondary columns (run, user, agent) go first.
_PRIORITY = ("call_id", "tool", "status", "outcome", "started_at", "summary", "elapsed_ms",
             "reject_stage", "agent", "user")


@click.command()
@tool_option("calls")
@click.option("--status", type=_STATUSES,
              help="Only calls that returned this status (what the caller got back).")
@click.option("--outcome", type=_STATUSES,
              help="Only calls with this final outcome: the status, or for a call that returned"
              " unknown, what it was resolved to later (unknown while unresolved).")
@click.option("--run", "run_id", help="Only calls of this run id.")
@click.option("--user", help="Only calls acting for this user (the principal's user).")
@click.option("--agent", help="Only calls this agent made (the principal's agent).")
@since_option("calls")
@limit_option
@trail_options
def calls(tool: str | None, status: str | None, outcome: str | None, run_id: str | None,
          user: str | None, agent: str | None, since: str | None, limit: int, home: Path | None,
          as_json: bool, wide: bool, archive: str | None) -> None:
    """List calls, newest first.

    Each call has a status (what it returned) and an outcome (its final one). They differ only
    for a call that returned unknown and was resolved later: `--status unknown` lists every
    call that returned unknown, `--status unknown --outcome unknown` those still unresolved.
    Each call names the user it acted for and the agent that made it, when its principal did.
    """
    from ..audit import unique_prefixes

    guard = OutputGuard(home)
    with open_store(home, guard, archive) as store:
        res = store.calls(tool=tool, status=status, outcome=outcome, run_id=run_id,
                          user=user, agent=agent, since=parse_since(since), limit=limit)
        short = {} if as_json or wide or not res.rows else unique_prefixes(
            store, [r[res.columns.index("call_id")] for r in res.rows])
    if as_json:
        print_json(res.dicts(), guard)
        return
    if not res.rows:
        click.echo("no calls match")
        return
    columns, rows = _without_unset(list(res.columns), [list(r) for r in res.rows])
    if short:  # ids as their shortest prefix unique in the trail, times to the millisecond
        i, t = columns.index("call_id"), columns.index("started_at")
        days = {str(r[t])[:10] for r in rows}
        for r in rows:
            r[i] = short.get(r[i], r[i])
            r[t] = _short_time(r[t], with_day=len(days) > 1)
    print_table(None, columns, rows, guard, limit=60, wide=wide, priority=_PRIORITY)
    if short:
        day = f" on {next(iter(days))}" if len(days) == 1 else ""
        note(f"(start times in UTC{day}; call ids cut to their shortest prefix unique in the"
             " trail, which autopsy takes; --wide or --json shows them whole)")


def _short_time(value: Any, *, with_day: bool) -> Any:
    """A start time (UTC, as stored) to the millisecond: ``07:52:43.457``, with the day
    (``12-06 07:52:43.457``) when the listed calls span several."""
    if isinstance(value, dt.datetime):
        value = value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    text = str(value or "")
    if len(text) >= 23 and text[10:11] in ("T", " "):
        return f"{text[5:10]} {text[11:23]}" if with_day else text[11:23]
    return value


#: Columns left out of the table when no call listed has a value in them.
_OPTIONAL = ("user", "agent", "reject_stage")


def _without_unset(columns: list[str], rows: list[list[Any]]) -> tuple[list[str], list[list[Any]]]:
    """The table without the principal columns no listed call fills (no empty fields)."""
    drop = [i for i, c in enumerate(columns)
            if c in _OPTIONAL and all(r[i] in (None, "") for r in rows)]
    keep = [i for i in range(len(columns)) if i not in drop]
    return [columns[i] for i in keep], [[r[i] for i in keep] for r in rows]
