"""``tooltrace export --format ocsf``: the audit trail as OCSF events, for a SIEM.

JSON lines on stdout, appended to a file (``-o``), or sent to an OTLP/HTTP logs endpoint
(``--otlp-endpoint``); ``--since`` and ``--follow`` as ``tooltrace tail`` follows. The events
and the mapping come from ``tooltrace.audit.ocsf_batches``; this command only writes them.
"""

from __future__ import annotations

import datetime as dt
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import IO, Any

import click
import orjson

from ._common import EXIT_FAIL, EXIT_USAGE, OutputGuard, fail, home_option, parse_since


@click.command()
@home_option
@click.option("--format", "fmt", type=click.Choice(["ocsf"]), default="ocsf",
              show_default=True, help="Event format: OCSF (API Activity for calls, User Access"
              " Management for approvals).")
@click.option("--since", "since", default=None,
              help="Only records since: a duration (15m, 2h, 7d), a UTC timestamp, or a call id"
              " (that call's start, the call included).")
@click.option("--follow", is_flag=True,
              help="After what is there, keep exporting records as they are written"
              " (Ctrl-C or SIGTERM stops).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Append the JSON lines to this file instead of printing them.")
@click.option("--otlp-endpoint", metavar="URL", default=None,
              help="Send the events to this OTLP/HTTP logs endpoint instead"
              " (http://HOST:4318/v1/logs; headers from OTEL_EXPORTER_OTLP_LOGS_HEADERS).")
@click.option("--max-events", type=click.IntRange(min=1), default=None,
              help="Stop after this many events.")
@click.option("--duration", type=click.FloatRange(min=0), default=None,
              help="With --follow: stop after this many seconds.")
@click.option("--interval", type=click.FloatRange(min=0.01), default=0.2, show_default=True,
              help="With --follow: seconds between two looks at the trail.")
def export(home: Path | None, fmt: str, since: str | None, follow: bool, output: Path | None,
           otlp_endpoint: str | None, max_events: int | None, duration: float | None,
           interval: float) -> None:
    """Export the audit trail as OCSF events: JSON lines, or OTLP logs."""
    from .._settings import resolve_home
    from ..audit import (
        AmbiguousCallId,
        CallNotFound,
        OtlpLogShipper,
        ambiguous,
        audit_dir,
        ocsf_batches,
    )
    from ..exceptions import TooltraceError

    if output is not None and otlp_endpoint is not None:
        raise click.UsageError("-o and --otlp-endpoint are exclusive: choose one destination")
    since_at, since_call = _since(since)
    guard = OutputGuard(home)
    root = resolve_home(home)
    if not follow and not audit_dir(root).is_dir():
        fail(f"no audit trail under {guard(str(root))} (set --home or TOOLTRACE_HOME)")
    shipper: OtlpLogShipper | None = None
    end = None if duration is None else time.monotonic() + duration
    written = 0
    try:
        if otlp_endpoint is not None:
            shipper = OtlpLogShipper(otlp_endpoint)
        with _output(output) as out, _stop_on_signals(follow) as stopped:
            batches = ocsf_batches(root, since=since_at, since_call=since_call, follow=follow,
                                   interval=interval)
            for batch in batches:
                if max_events is not None:
                    batch = batch[:max_events - written]
                lines = [guard(orjson.dumps(e).decode()) for e in batch]
                if shipper is not None:
                    shipper.send(batch, lines)
                elif lines:
                    out.write("".join(f"{line}\n" for line in lines))
                    out.flush()
                written += len(batch)
                if (max_events is not None and written >= max_events) or stopped() or (
                        end is not None and time.monotonic() >= end):
                    break
    except AmbiguousCallId as exc:
        fail(f"--since: {ambiguous(exc.prefix, exc.matches)}", EXIT_USAGE, guard)
    except CallNotFound as exc:
        fail(f"--since: {exc}", EXIT_FAIL, guard)
    except TooltraceError as exc:  # the OTLP endpoint refused, or the otlp extra is missing
        fail(str(exc), EXIT_FAIL, guard)
    finally:
        if shipper is not None:
            shipper.close()


def _since(value: str | None) -> tuple[dt.datetime | None, str | None]:
    """``--since``: a duration or a timestamp (``parse_since``), else a call id."""
    if value is None:
        return None, None
    try:
        iso = parse_since(value)
    except click.BadParameter:
        if not all(ch in "0123456789abcdefABCDEF-" for ch in value.strip()) or not value.strip():
            raise click.BadParameter(
                f"{value!r}: use a duration such as 15m, 2h, 7d, an ISO timestamp (UTC) or a"
                " call id", param_hint="'--since'") from None
        return None, value.strip()
    assert iso is not None
    return dt.datetime.fromisoformat(iso), None


@contextmanager
def _output(path: Path | None) -> Iterator[IO[str]]:
    if path is None:
        yield sys.stdout
        return
    with open(path, "a", encoding="utf-8") as f:
        yield f


@contextmanager
def _stop_on_signals(follow: bool) -> Iterator[Callable[[], bool]]:
    """While following, SIGINT and SIGTERM ask for a stop after the batch in hand (written
    whole, never cut), instead of ending the process wherever it is."""
    asked: list[int] = []
    if not follow:
        yield lambda: False
        return

    def ask(signum: int, _frame: FrameType | None) -> None:
        asked.append(signum)

    previous: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, ask)
    except ValueError:  # not the main thread: signals keep their handlers
        pass
    try:
        yield lambda: bool(asked)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
