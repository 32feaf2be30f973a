"""``tooltrace approvals``: who approved (or denied) which call's arguments, for whom, when, why,
until when, and the calls each approval covered.

A terminal wide enough for the essentials (when, who, decision, tool, reason, expiry) gets a
table, leaving out the principal, digest and calls if they do not fit; a narrower one gets one
block per approval, with the reason and the expiry before the ids. ``--wide`` is the whole
table, ``--json`` every field.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from ._common import (
    OutputGuard,
    cell,
    limit_option,
    open_store,
    parse_since,
    print_json,
    since_option,
    tool_option,
    trail_options,
)
from ._common import table as print_table

if TYPE_CHECKING:
    from ..audit import AuditStore

_COLUMNS = ("when", "who", "decision", "tool", "reason", "expires", "principal", "sha256",
            "calls")
#: What matters most when the terminal is narrow: the answer and its terms before any id.
_PRIORITY = _COLUMNS
#: Left out, the table would not say what was decided: a narrower terminal gets blocks.
_ESSENTIAL = frozenset({"reason", "expires"})


def _short(t: dt.datetime | None) -> str:
    return "" if t is None else t.strftime("%Y-%m-%d %H:%M")


def _calls(ids: list[str], short: dict[str, str]) -> str:
    """The covered calls' shortest id prefixes unique in the trail (the first two, then how
    many more), without spaces so the cell never wraps (``--json`` has every id whole)."""
    shown = ",".join(short.get(i, i) for i in ids[:2])
    return shown + (f",+{len(ids) - 2}" if len(ids) > 2 else "")


def _principal(r: dict[str, Any]) -> str:
    """Whom the call asked about acted for, as ``tooltrace autopsy`` says it."""
    parts = [f"{k} {r[f'principal_{k}']}" for k in ("user", "agent", "tenant")
             if r.get(f"principal_{k}")]
    if r.get("principal_roles"):
        parts.append("roles " + ",".join(r["principal_roles"]))
    return ", ".join(parts)


def _row(r: dict[str, Any], redact: Any, short: dict[str, str]) -> tuple[str, ...]:
    return (
        _short(r["approved_at"]), r["approver"] or "", r["decision"], r["tool"] or "",
        redact(r["reason"] or ""), _short(r["expires_at"]) or "-", _principal(r),
        (r["args_sha256"] or "")[:10], _calls(r["covered_calls"] or [], short),
    )


def _with_roles(store: AuditStore, rows: list[dict[str, Any]]) -> None:
    """Each row's ``principal_roles`` (a list), read from the ``approvals`` view."""
    ids = [r["approval_id"] for r in rows]
    found = dict(store.sql("SELECT approval_id, principal_roles FROM approvals"
                           " WHERE list_contains($ids, approval_id)", {"ids": ids}).rows)
    for r in rows:
        raw = found.get(r["approval_id"])
        roles = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
        r["principal_roles"] = list(roles) if isinstance(roles, list) else []


def _blocks(cells: Sequence[Sequence[str]], guard: OutputGuard) -> None:
    """One block per approval: what was decided on its first line, then the reason, the
    expiry and the principal, and the ids last."""
    from ._table import terminal_width

    width = max(terminal_width(), 40)
    for i, c in enumerate(cells):
        when, who, decision, tool, reason, expires, principal, sha, calls = (
            guard(v) for v in c)
        if i:
            click.echo("")
        click.echo(textwrap.fill(f"{when}  {decision}  {tool}  by {who}", width,
                                 subsequent_indent="  ", break_long_words=False,
                                 break_on_hyphens=False))
        for label, value in (("reason", reason), ("expires", expires),
                             ("principal", principal), ("calls", calls), ("sha256", sha)):
            if value:
                click.echo(textwrap.fill(value, width, initial_indent=f"  {label:<10} ",
                                         subsequent_indent=" " * 13, break_long_words=False,
                                         break_on_hyphens=False))


@click.command()
@tool_option("approvals")
@since_option("approvals")
@limit_option
@trail_options
def approvals(tool: str | None, since: str | None, limit: int, home: Path | None,
              as_json: bool, wide: bool, archive: str | None) -> None:
    """List approvers' answers, newest first.

    Each names who decided, when, about which tool and for whom (the principal), the sha256
    of the redacted arguments it covers (other arguments are asked about again), the reason
    (redacted), when it expires (with a time to live) and the calls it covered: the call it
    was asked about and the later calls that reused it. A terminal too narrow for the table
    gets one block per approval (--wide: the whole table).
    """
    from ..audit import list_approvals, unique_prefixes
    from ..redaction import default_redactor
    from ._table import fit, terminal_width

    guard = OutputGuard(home)
    with open_store(home, guard, archive) as store:
        rows = list_approvals(store, tool=tool, since=parse_since(since), limit=limit).dicts()
        if rows:
            _with_roles(store, rows)
        short = {} if as_json or not rows else unique_prefixes(
            store, [i for r in rows for i in (r["covered_calls"] or [])[:2]])
    redact = default_redactor().redact_text
    if as_json:
        for r in rows:
            r["reason"] = redact(r["reason"] or "")
        print_json(rows, guard)
        return
    if not rows:
        click.echo("no approvals match")
        return
    cells = [_row(r, redact, short) for r in rows]
    if not wide:
        shown = [[guard(cell(v, 60)) for v in c] for c in cells]
        if _ESSENTIAL & set(fit(_COLUMNS, shown, terminal_width(), _PRIORITY).left_out):
            _blocks(shown, guard)
            return
    print_table(None, _COLUMNS, cells, guard, limit=60, wide=wide, priority=_PRIORITY)
