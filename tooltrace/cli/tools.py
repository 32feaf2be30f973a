"""``tooltrace tools``: the shadow report of the built-in registry."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import EXIT_FAIL, OutputGuard, fail, home_option, json_option, print_json
from ._common import table as print_table


@click.command()
@click.option("--mode", default="default", show_default=True,
              help="Mode whose visibility to report.")
@home_option
@json_option
def tools(mode: str, home: Path | None, as_json: bool) -> None:
    """Every tool name, its active definition, what it shadows, and whether MODE shows it."""
    guard = OutputGuard(home)
    try:
        from ..builtins import default_registry
    except ImportError:
        fail("the built-in tools are not available in this installation", EXIT_FAIL)
    reg = default_registry(home=home)
    try:
        entries = reg.resolution()
        vis = reg.visible_tools(mode)
    finally:
        reg.shutdown(timeout_s=1.0)
    hidden = dict(vis.hidden)
    rows = [{
        "name": e.name,
        "source": e.active_source,
        "priority": e.active_priority,
        "shadowed": [f"{s} (priority {p})" for s, p in e.shadowed],
        "capability": e.capability,
        "effect": e.effect,
        "narrowed": e.narrowed,
        "visible": e.name not in hidden,
        "hidden_reason": hidden.get(e.name),
    } for e in entries]
    if as_json:
        print_json({"mode": mode, "tools": rows}, guard)
        return
    if not rows:
        click.echo("no tools registered")
        return
    cols = list(rows[0])
    print_table(f"tools (mode {mode})", cols, [[r[c] for c in cols] for r in rows], guard,
                no_wrap=("name",))
