"""``tooltrace demo``: run a realistic agent workload on the embedded defaults."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from ._common import OutputGuard, console, home_option, json_option, print_json, table

__all__ = ["demo"]

#: The three calls the summary points an engineer at, in order.
SPOTLIGHT = (
    ("path-escape", "a policy denial: a path that tries to leave the workspace"),
    ("unknown", "a side-effecting call whose outcome could not be confirmed"),
    ("offload", "a big output moved to an artifact with its sha256"),
)


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
@json_option
def demo(
    home: Path | None, calls: int, metrics_port: int | None, linger: float, seed: int, as_json: bool
) -> None:
    """Run a realistic agent workload through the built-in tools (no servers needed).

    Successes, parameter errors, policy denials (path escape, symlink escape, denied command), an
    approval, a hook that blocks and one that modifies, a deadline hit, an offloaded big output, a
    cancellation and an unknown outcome; then a summary and the autopsy commands to run.
    """
    from ..demo import run_demo

    guard = OutputGuard(home)
    tty = sys.stderr.isatty()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= (0.2 if tty else 2.0):
            last[0] = now
            end = "\r" if tty and done < total else "\n"
            click.echo(f"demo: {done}/{total} calls ({100 * done // total}%)", err=True, nl=False)
            click.echo(end, err=True, nl=False)

    if metrics_port is not None:
        click.echo(f"demo: serving metrics on 127.0.0.1:{metrics_port or '<any port>'}", err=True)
    result = run_demo(
        home=home,
        calls=calls,
        metrics_port=metrics_port,
        seed=seed,
        progress=progress,
        linger_s=linger,
    )
    spotlight = [
        (label, result.highlights[label], why)
        for label, why in SPOTLIGHT
        if label in result.highlights
    ]
    home_arg = "" if home is None else f" --home {guard(str(home))}"
    if as_json:
        print_json(
            {
                "calls": len(result.envelopes),
                "by_status": dict(result.by_status()),
                "by_tool": {t: dict(c) for t, c in sorted(result.by_tool().items())},
                "highlights": result.highlights,
                "autopsy": [f"tooltrace autopsy{home_arg} {cid}" for _, cid, _ in spotlight],
                "metrics_port": result.metrics_port,
            },
            guard,
        )
        return
    statuses = ("ok", "rejected", "failed", "cancelled", "unknown")
    rows = [
        [tool, *(c.get(s, 0) for s in statuses), sum(c.values())]
        for tool, c in sorted(result.by_tool().items())
    ]
    totals = result.by_status()
    rows.append(["(all)", *(totals.get(s, 0) for s in statuses), sum(totals.values())])
    table(
        f"tooltrace demo: {len(result.envelopes)} calls", ["tool", *statuses, "total"], rows, guard
    )
    story = [[label, cid, _status(result, cid)] for label, cid in result.highlights.items()]
    table("the scripted story", ["what", "call_id", "status"], story, guard)
    out = console()
    out.print("Replay a call step by step:")
    for _label, cid, why in spotlight:
        out.print(f"  tooltrace autopsy{home_arg} {cid}    # {why}", highlight=False)
    out.print("More: tooltrace calls, tooltrace stats, tooltrace tools, tooltrace verify")


def _status(result: Any, call_id: str) -> str:
    for e in result.envelopes:
        if e.call_id == call_id:
            return str(e.status.value)
    return "?"
