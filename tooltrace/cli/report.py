"""``tooltrace report``: a post-mortem of one call or one run, as HTML or Markdown."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import (
    EXIT_FAIL,
    EXIT_USAGE,
    OutputGuard,
    archive_option,
    fail,
    home_option,
    open_store,
)


@click.command()
@click.argument("call_id", required=False)
@click.option("--run", "run_id", metavar="RUN_ID", help="Report on every call of this run.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report to this file (default: standard output).")
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), default="html",
              show_default=True, help="One self-contained HTML page, or Markdown to paste.")
@home_option
@archive_option
def report(call_id: str | None, run_id: str | None, output: Path | None, fmt: str,
           home: Path | None, archive: str | None) -> None:
    """Write a post-mortem of one call (CALL_ID, or a unique prefix) or of a run (--run).

    The HTML page loads nothing from anywhere (no script, style, font or image from outside
    it); set TOOLTRACE_TRACE_URL (a template with {trace_id}) to link each call to its trace.
    Exit 1 when no call or run has this id, 2 on a usage error.
    """
    from ..audit import AmbiguousCallId, CallNotFound, DuplicateCallId, ambiguous
    from ..report import build_call_report, build_run_report, render_html, render_markdown

    if (call_id is None) == (run_id is None):
        fail("give either a CALL_ID or --run RUN_ID", EXIT_USAGE)
    guard = OutputGuard(home)
    with open_store(home, guard, archive) as store:
        try:
            rep = (build_call_report(store, call_id) if call_id is not None
                   else build_run_report(store, str(run_id)))
        except AmbiguousCallId as exc:
            fail(ambiguous(str(call_id), exc.matches, store=store), EXIT_USAGE, guard)
        except (CallNotFound, LookupError) as exc:
            if isinstance(exc, DuplicateCallId):
                fail(f"call id {exc.call_id} was recorded for {len(exc.records)} different "
                     "calls; they are not merged into one", EXIT_FAIL)
            what = f"call with id {str(call_id)[:40]!r}" if call_id else (
                f"call of run {str(run_id)[:40]!r}")
            fail(f"no {what} in this audit trail", EXIT_FAIL)
    text = guard(render_html(rep) if fmt == "html" else render_markdown(rep))
    if output is None:
        click.echo(text, nl=False)
        return
    output.write_text(text, encoding="utf-8")
    click.echo(f"wrote {guard(str(output.resolve()))} ({len(text.encode()):,} bytes)", err=True)
