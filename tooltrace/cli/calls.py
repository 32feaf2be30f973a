"""``tooltrace calls``: recent calls, filtered by what they returned or by their final outcome."""

from __future__ import annotations

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

_STATUSES = click.Choice(["ok", "rejected", "failed", "cancelled", "unknown"])
#: What matters most when the terminal is narrow; the rest (run, start time) goes first.
_PRIORITY = ("call_id", "tool", "status", "outcome", "summary", "agent", "reject_stage",
             "elapsed_ms")


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
    guard = OutputGuard(home)
    with open_store(home, guard, archive) as store:
        res = store.calls(tool=tool, status=status, outcome=outcome, run_id=run_id,
                          user=user, agent=agent, since=parse_since(since), limit=limit)
    if as_json:
        print_json(res.dicts(), guard)
        return
    if not res.rows:
        click.echo("no calls match")
        return
    columns, rows = _without_unset(list(res.columns), [list(r) for r in res.rows])
    print_table(None, columns, rows, guard, limit=60, wide=wide, priority=_PRIORITY)


#: Columns left out of the table when no call listed has a value in them.
_OPTIONAL = ("user", "agent")


def _without_unset(columns: list[str], rows: list[list[Any]]) -> tuple[list[str], list[list[Any]]]:
    """The table without the principal columns no listed call fills (no empty fields)."""
    drop = [i for i, c in enumerate(columns)
            if c in _OPTIONAL and all(r[i] in (None, "") for r in rows)]
    keep = [i for i in range(len(columns)) if i not in drop]
    return [columns[i] for i in keep], [[r[i] for i in keep] for r in rows]
