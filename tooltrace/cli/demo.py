"""``tooltrace demo``: run a realistic agent workload on the embedded defaults."""

from __future__ import annotations

import collections
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..audit import unique_prefixes
from ._common import (
    EXIT_USAGE,
    OutputGuard,
    home_option,
    json_option,
    policy_option,
    print_json,
    self_command,
    table,
    wide_option,
)

__all__ = ["STATUSES", "demo"]

#: The statuses a call can return, in the order tables show them.
STATUSES = ("ok", "rejected", "failed", "cancelled", "unknown")

#: The three calls the summary points an engineer at, in order.
SPOTLIGHT = (
    ("path-escape", "a policy denial: a path that tries to leave the workspace"),
    ("unknown", "a side-effecting call that returned unknown; its outcome came later"),
    ("offload", "a big output moved to an artifact with its sha256"),
)


def _progress_printer() -> Callable[[int, int], None]:
    """Progress on stderr: a line redrawn five times a second on a terminal, else one every
    two seconds."""
    tty = sys.stderr.isatty()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= (0.2 if tty else 2.0):
            last[0] = now
            end = "\r" if tty and done < total else "\n"
            click.echo(f"demo: {done}/{total} calls ({100 * done // total}%)", err=True, nl=False)
            click.echo(end, err=True, nl=False)

    return progress


@click.command()
@home_option
@click.option(
    "--calls",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Total calls to make (the scripted story, then a randomised mix).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on 127.0.0.1:PORT while the demo runs (0 = any).",
)
@click.option(
    "--linger",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Keep serving metrics this many seconds after the calls end.",
)
@click.option("--seed", type=int, default=7, show_default=True, help="Seed of the randomised mix.")
@click.option("--serve", is_flag=True,
              help="Serve the web console while the demo runs (its URL is printed) and wait for"
              " the demo's approvals to be answered there; keep serving until Ctrl-C.")
@click.option("--serve-port", type=click.IntRange(min=0, max=65535), default=8765,
              show_default=True, help="The console's port with --serve (taken: any free one).")
@policy_option
@json_option
@wide_option
def demo(
    home: Path | None, calls: int, metrics_port: int | None, linger: float, seed: int,
    serve: bool, serve_port: int, policy_file: Path | None, as_json: bool, wide: bool,
) -> None:
    """Run a realistic agent workload through the built-in tools (no servers needed).

    Successes, parameter errors, policy denials (path escape, symlink escape, denied command), an
    approval, a hook that blocks and one that modifies, a deadline hit, an offloaded big output, a
    cancellation and an unknown outcome; then a summary and the autopsy commands to run.
    """
    from ..demo import run_demo

    guard = OutputGuard(home)
    progress = _progress_printer()
    if metrics_port is not None:
        click.echo(f"demo: serving metrics on 127.0.0.1:{metrics_port or '<any port>'}", err=True)
    from ..policy.file import PolicyFileError

    console, approver = _console(home, serve_port) if serve else (None, None)
    try:
        result = run_demo(
            home=home,
            calls=calls,
            metrics_port=metrics_port,
            seed=seed,
            progress=progress,
            linger_s=linger,
            policy_file=policy_file,
            approver=approver,
        )
    except PolicyFileError as exc:
        for p in exc.problems:
            click.echo(guard(str(p)), err=True)
        sys.exit(EXIT_USAGE)
    spotlight = [
        (label, result.highlights[label], why)
        for label, why in SPOTLIGHT
        if label in result.highlights
    ]
    # Printed as given (not scrubbed to <home>) so the commands run as printed.
    # --home belongs to each command (the group has no such option), so it follows the name.
    tt = self_command()
    at = "" if home is None else f" --home {shlex.quote(str(home))}"
    # People get each id as its shortest prefix unique in the trail (what autopsy takes).
    short = {} if as_json else _prefixes(result.home, list(result.highlights.values()))
    autopsies = [f"{tt} autopsy{at} {short.get(cid, cid)}" for _, cid, _ in spotlight]
    more = [f"{tt} {cmd}{at}{rest}" for cmd, rest in (
        ("calls", " --status unknown"), ("stats", ""), ("tools", ""), ("verify", ""))]
    by_id = {e.call_id: e for e in result.envelopes}
    if as_json:
        print_json(
            {
                "calls": len(result.envelopes),
                "by_status": dict(result.by_status()),
                "by_outcome": dict(result.by_outcome()),
                "by_tool": {t: dict(c) for t, c in sorted(result.by_tool().items())},
                "highlights": result.highlights,
                "story": [{"what": label, "call_id": cid, "status": _status(by_id, cid),
                           "outcome": _outcome(result, by_id, cid)}
                          for label, cid in result.highlights.items()],
                "autopsy": autopsies,
                "next": more,
                "metrics_port": result.metrics_port,
                "sandboxes": sorted(result.sandboxes),
            },
            guard,
        )
    else:
        _print_summary(result, guard, wide, autopsies, more, spotlight, short)
    if console is not None:
        _keep_serving(console)


def _console(home: Path | None, port: int) -> tuple[Any, Any]:
    """The console on a thread, its URL printed, and the approval queue as the approver."""
    from ..policy import ApprovalQueue
    from .serve import start_background

    url, console = start_background(home, port)
    click.echo(f"demo: the console is at {url}", err=True)
    click.echo("demo: the demo's approvals wait there (Approvals page) for up to 10 minutes",
               err=True)
    return console, ApprovalQueue(home, timeout=600)


def _keep_serving(console: Any) -> None:
    sys.stdout.flush()
    click.echo("demo: done; the console keeps serving until Ctrl-C", err=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        console.stop()


def _prefixes(home: Path, ids: list[str]) -> dict[str, str]:
    """The ids' shortest prefixes unique in the demo's trail (whole ids if it cannot be read)."""
    from ..audit import AuditStore

    try:
        with AuditStore(home) as store:
            return unique_prefixes(store, ids)
    except Exception:  # the summary still prints, with whole ids
        return {}


def _print_summary(result: Any, guard: OutputGuard, wide: bool, autopsies: list[str],
                   more: list[str], spotlight: list[tuple[str, str, str]],
                   short: dict[str, str]) -> None:
    """The tables for people, then the next steps, each a command that runs as printed."""
    by_id = {e.call_id: e for e in result.envelopes}
    rows = [
        [tool, *(c.get(s, 0) for s in STATUSES), sum(c.values())]
        for tool, c in sorted(result.by_tool().items())
    ]
    totals = result.by_status()
    rows.append(["(all)", *(totals.get(s, 0) for s in STATUSES), sum(totals.values())])
    table(f"tooltrace demo: {len(result.envelopes)} calls by status (what each returned)",
          ["tool", *STATUSES, "total"], rows, guard, wide=wide)
    click.echo(_outcome_line(result))
    story = [[label, short.get(cid, cid), _status(by_id, cid),
              "" if _outcome(result, by_id, cid) == _status(by_id, cid)
              else _outcome(result, by_id, cid)]
             for label, cid in result.highlights.items()]
    table("the scripted story (outcome: where a later resolution changed it)",
          ["what", "call_id", "status", "outcome"], story, guard, wide=wide,
          priority=("call_id", "what", "status", "outcome"))
    if result.sandboxes:
        click.echo("Commands ran in the sandbox: " + ", ".join(sorted(result.sandboxes))
                   + " (the execute step and the span say which, call by call)")
    click.echo("Replay a call step by step:")
    for line, (_label, _cid, why) in zip(autopsies, spotlight, strict=True):
        click.echo(f"  {line}    # {why}")
    click.echo("More:")
    for line in more:
        click.echo(f"  {line}")


def _status(by_id: dict[str, Any], call_id: str) -> str:
    env = by_id.get(call_id)
    return "?" if env is None else str(env.status.value)


def _outcome(result: Any, by_id: dict[str, Any], call_id: str) -> str:
    env = by_id.get(call_id)
    return "?" if env is None else str(result.outcome(env))


def _outcome_line(result: Any) -> str:
    """One sentence on what became of the calls that returned ``unknown``."""
    unknown = [e for e in result.envelopes if e.status.value == "unknown"]
    if not unknown:
        return "outcome: every call's final outcome is the status it returned"
    later = collections.Counter(result.outcome(e) for e in unknown)
    still = later.pop("unknown", 0)
    parts = ", ".join(f"{n} {o}" for o, n in sorted(later.items())) or "none"
    n = len(unknown)
    return (f"outcome: of the {n} call{'s' * (n != 1)} that returned unknown, later resolved as"
            f" {parts}; {still} still unknown")
