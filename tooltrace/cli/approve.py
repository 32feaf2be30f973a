"""``tooltrace approvals``: the recorded answers (the listing of ``tooltrace.cli.approvals``),
and the approval queue from a terminal: ``approvals pending`` lists the requests waiting for an
answer, ``approvals answer ID --approve|--deny`` answers one (recorded as ``<user>@cli``).
"""

from __future__ import annotations

import datetime as dt
import inspect
import time
from pathlib import Path
from typing import Any

import click

from ._common import (
    EXIT_FAIL,
    EXIT_USAGE,
    OutputGuard,
    duration_s,
    fail,
    home_option,
    json_option,
    print_json,
)
from ._common import table as print_table
from .approvals import approvals as _listing


def parse_duration(value: str | None) -> float | None:
    """``--ttl``: seconds, or a number with s, m, h or d (``90``, ``10m``, ``2h``)."""
    if value is None:
        return None
    seconds = duration_s(value, unit_required=False)
    if not seconds:
        raise click.BadParameter(f"{value!r}: use a positive duration such as 90, 10m or 2h")
    return seconds


@click.group(invoke_without_command=True, params=list(_listing.params),
             help=inspect.cleandoc(_listing.help or "") + "\n\nSubcommands: `pending` lists"
             " the requests waiting in the approval queue, `answer` answers one.")
@click.pass_context
def approvals(ctx: click.Context, /, **options: Any) -> None:
    if ctx.invoked_subcommand is None:
        assert _listing.callback is not None
        ctx.invoke(_listing.callback, **options)


def _principal(p: dict[str, Any] | None) -> str:
    p = p or {}
    return ", ".join(f"{k} {p[k]}" for k in ("user", "agent", "tenant") if p.get(k))


def _left(expires_at_us: int) -> str:
    s = max(0, (expires_at_us - time.time_ns() // 1000) // 1_000_000)
    return f"{s // 60}m{s % 60:02d}s"


@approvals.command()
@home_option
@json_option
def pending(home: Path | None, as_json: bool) -> None:
    """List the requests waiting in the approval queue, newest first.

    Each names its id (its shortest prefix unique in the queue, which `approvals answer`
    takes; --json has it whole), the tool, the rule that asked, whom the
    call acts for, the redacted arguments and how long it still waits before it is denied.
    """
    from ..policy import ApprovalQueue
    from ..redaction import default_redactor

    guard = OutputGuard(home)
    redact = default_redactor().redact_text
    queue = ApprovalQueue(home)
    rows = queue.pending()
    if as_json:
        from dataclasses import asdict

        print_json([asdict(p) for p in rows], guard)
        return
    if not rows:
        click.echo("no approval requests are waiting")
        return
    import orjson

    from ..audit import cut

    every = sorted(r.approval_id for r, _ in queue.entries())
    cells = [[cut(p.approval_id, every), p.tool, p.rule, _principal(p.principal),
              _left(p.expires_at_us),
              redact(orjson.dumps(p.arguments, option=orjson.OPT_SORT_KEYS).decode())]
             for p in rows]
    print_table(None, ["id", "tool", "rule", "principal", "expires_in", "arguments"], cells,
                guard, limit=60, wide=False, priority=("id", "tool", "expires_in", "rule"))


@approvals.command()
@click.argument("approval_id")
@click.option("--approve/--deny", "approve", default=None,
              help="Let the call run, or refuse it (one of the two is required).")
@click.option("--reason", default="", help="Why (kept, redacted, in the approval record).")
@click.option("--ttl", default=None, metavar="DURATION",
              help="Also approve later calls of the same tool, principal and arguments for this"
              " long (90, 10m, 2h).")
@home_option
@json_option
def answer(approval_id: str, approve: bool | None, reason: str, ttl: str | None,
           home: Path | None, as_json: bool) -> None:
    """Answer a waiting request (APPROVAL_ID from `approvals pending`, or a unique prefix).

    The answer is recorded as <your user>@cli. The first answer wins: exit 1 when the request
    was answered already or expired, or no request has this id; 2 when the prefix matches
    several requests.
    """
    from ..policy import AlreadyAnswered, ApprovalExpired, ApprovalNotFound, ApprovalQueue
    from ..policy import answerer as who

    if approve is None:
        fail("say --approve or --deny", EXIT_USAGE)
    guard = OutputGuard(home)
    queue = ApprovalQueue(home)
    approval_id = _request_id(queue, approval_id, guard)
    try:
        ans = queue.answer(approval_id, approved=approve, who=who("cli"),
                                         reason=reason, ttl_s=parse_duration(ttl), via="cli")
    except AlreadyAnswered as exc:
        fail(f"request {approval_id} was already answered by {exc.answer.who}", EXIT_FAIL, guard)
    except (ApprovalExpired, ApprovalNotFound) as exc:
        fail(str(exc), EXIT_FAIL, guard)
    if as_json:
        from dataclasses import asdict

        print_json(asdict(ans), guard)
        return
    at = dt.datetime.fromtimestamp(ans.answered_at_us / 1e6, dt.UTC).strftime("%H:%M:%S")
    click.echo(guard(f"{'approved' if ans.approved else 'denied'} {approval_id} as {ans.who}"
                     f" at {at} UTC"))


def _request_id(queue: Any, given: str, guard: OutputGuard) -> str:
    """The whole id of the one request ``given`` (an id or a prefix of one) names; exit 2 when
    it names several. An id no request starts with is returned as given (the queue says)."""
    from ..audit import AmbiguousPrefix, ambiguous, match_prefix

    try:
        found = match_prefix(given, (r.approval_id for r, _ in queue.entries()))
    except AmbiguousPrefix as exc:
        fail(ambiguous(given, exc.matches, "request id"), EXIT_USAGE, guard)
    return found or given
