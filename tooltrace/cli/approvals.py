"""``tooltrace approvals``: who approved (or denied) which call's arguments, when, why, until
when, and the calls each approval covered."""

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

_COLUMNS = ("when", "who", "decision", "tool", "sha256", "calls", "expires", "reason")
#: What matters most when the terminal is narrow.
_PRIORITY = ("when", "who", "decision", "tool", "sha256", "reason", "expires", "calls")


def _short(t: dt.datetime | None) -> str:
    return "" if t is None else t.strftime("%Y-%m-%d %H:%M")


def _calls(ids: list[str]) -> str:
    """The covered calls' id prefixes (milliseconds apart: the first two, then how many more),
    without spaces so the cell never wraps (``--json`` has every id whole)."""
    shown = ",".join(i[:13] for i in ids[:2])
    return shown + (f",+{len(ids) - 2}" if len(ids) > 2 else "")


def _row(r: dict[str, Any], redact: Any) -> tuple[str, ...]:
    return (
        _short(r["approved_at"]), r["approver"] or "", r["decision"], r["tool"] or "",
        (r["args_sha256"] or "")[:10], _calls(r["covered_calls"] or []),
        _short(r["expires_at"]) or "-", redact(r["reason"] or ""),
    )


@click.command()
@tool_option("approvals")
@since_option("approvals")
@limit_option
@trail_options
def approvals(tool: str | None, since: str | None, limit: int, home: Path | None,
              as_json: bool, wide: bool, archive: str | None) -> None:
    """List approvers' answers, newest first.

    Each names who decided, when, about which tool, the sha256 of the redacted arguments it
    covers (other arguments are asked about again), the reason (redacted), when it expires
    (with a time to live) and the calls it covered: the call it was asked about and the later
    calls that reused it.
    """
    from ..audit import list_approvals
    from ..redaction import default_redactor

    guard = OutputGuard(home)
    with open_store(home, guard, archive) as store:
        rows = list_approvals(store, tool=tool, since=parse_since(since), limit=limit).dicts()
    redact = default_redactor().redact_text
    if as_json:
        for r in rows:
            r["reason"] = redact(r["reason"] or "")
        print_json(rows, guard)
        return
    if not rows:
        click.echo("no approvals match")
        return
    print_table(None, _COLUMNS, [_row(r, redact) for r in rows], guard, limit=60, wide=wide,
                priority=_PRIORITY)
