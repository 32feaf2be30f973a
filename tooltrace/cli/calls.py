"""``tooltrace calls``: recent calls, filtered."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import (
    OutputGuard,
    archive_option,
    home_option,
    json_option,
    open_store,
    parse_since,
    print_json,
)
from ._common import table as print_table


@click.command()
@click.option("--tool", help="Only calls of this tool.")
@click.option("--status", type=click.Choice(["ok", "rejected", "failed", "cancelled", "unknown"]),
              help="Only calls with this (final) status.")
@click.option("--run", "run_id", help="Only calls of this run id.")
@click.option("--since", help="Only calls since: a duration (30m, 2h, 7d) or a UTC timestamp.")
@click.option("--limit", type=click.IntRange(1, 1_000_000), default=50, show_default=True)
@home_option
@json_option
@archive_option
def calls(tool: str | None, status: str | None, run_id: str | None, since: str | None,
          limit: int, home: Path | None, as_json: bool, archive: str | None) -> None:
    """List calls, newest first."""
    guard = OutputGuard(home)
    with open_store(home, guard, archive) as store:
        res = store.calls(tool=tool, status=status, run_id=run_id, since=parse_since(since),
                          limit=limit)
    if as_json:
        print_json(res.dicts(), guard)
        return
    if not res.rows:
        click.echo("no calls match")
        return
    print_table(None, res.columns, res.rows, guard, limit=60)
