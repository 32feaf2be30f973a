"""``tooltrace tools``: the shadow report of the built-in registry, what each mode's tool list
costs the model, and (``--listing``) the tool list a model is given."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from ._common import (
    EXIT_FAIL,
    OutputGuard,
    fail,
    home_option,
    json_option,
    print_json,
    wide_option,
)
from ._common import table as print_table

if TYPE_CHECKING:
    from ..integrations.providers import Format

_FORMATS = ("openai", "openai-responses", "anthropic", "gemini", "mcp")


@click.command()
@click.option("--mode", default="default", show_default=True,
              help="Mode whose visibility (and groups) to report.")
@click.option("--format", "fmt", type=click.Choice(_FORMATS), default="openai",
              show_default=True, help="Provider format the schema sizes (and --listing) use.")
@click.option("--listing", is_flag=True,
              help="Print the tool list MODE gives a model, groups collapsed, as JSON (stable "
                   "bytes: the same registry and options always print the same).")
@click.option("--expand", multiple=True, metavar="GROUP",
              help="With --listing: show this group's tools in full (repeatable).")
@click.option("--native", is_flag=True,
              help="With --listing: tooltrace's own listing (groups, hidden tools and groups "
                   "with reasons) instead of the provider format.")
@home_option
@json_option
@wide_option
def tools(mode: str, fmt: str, listing: bool, expand: tuple[str, ...], native: bool,
          home: Path | None, as_json: bool, wide: bool) -> None:
    """Every tool name, its active definition, what it shadows, its group and whether MODE
    shows it; then what each mode's and group's schemas cost (characters, and tokens
    estimated at 4 characters per token)."""
    guard = OutputGuard(home)
    try:
        from ..builtins import default_registry
    except ImportError:
        fail("the built-in tools are not available in this installation", EXIT_FAIL)
    from ..exceptions import RegistrationError
    from ..integrations import providers
    from ..integrations.providers import CHARS_PER_TOKEN, schema_sizes

    reg = default_registry(home=home)
    try:
        if listing:
            try:
                specs = None if native else providers.tool_specs(
                    reg, mode, cast("Format", fmt), collapse=True, expand=expand)
                body = (reg.tool_listing(mode, expand).to_json() if specs is None
                        else _canonical(specs))
            except RegistrationError as exc:
                fail(guard(str(exc)), EXIT_FAIL)
            sys.stdout.buffer.write(body + b"\n")
            return
        # Entries that are not tools (an MCP server's requests to its client) are not listed.
        entries = [e for e in reg.resolution()
                   if (d := reg.definition(e.name)) is None or d.listed]
        vis = reg.visible_tools(mode)
        sizes = {m: schema_sizes(reg, m, cast("Format", fmt)) for m in sorted(reg.policy.modes)}
        groups = {e.name: d.group_name if (d := reg.definition(e.name)) else None
                  for e in entries}
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
        "group": groups.get(e.name),
        "narrowed": e.narrowed,
        "visible": e.name not in hidden,
        "hidden_reason": hidden.get(e.name),
    } for e in entries]
    size_rows = [{"mode": m, "part": part, "chars": v.chars if v else None,
                  "tokens": v.tokens if v else None}
                 for m, parts in sizes.items() for part, v in parts.items()]
    estimate = f"tokens estimated as characters / {CHARS_PER_TOKEN}, rounded up ({fmt} format)"
    if as_json:
        print_json({"mode": mode, "tools": rows,
                    "schema_sizes": {"format": fmt, "estimate": estimate, "sizes": size_rows}},
                   guard)
        return
    if not rows:
        click.echo("no tools registered")
        return
    cols = list(rows[0])
    print_table(f"tools (mode {mode})", cols, [[r[c] for c in cols] for r in rows], guard,
                wide=wide, priority=("name", "source", "visible", "priority", "shadowed"))
    print_table(f"schema sizes ({fmt})", ["mode", "part", "chars", "tokens"],
                [[r["mode"], r["part"], r["chars"], r["tokens"]] for r in size_rows], guard,
                wide=wide)
    click.echo(estimate)


def _canonical(specs: list[dict[str, Any]]) -> bytes:
    import orjson

    return orjson.dumps(specs, option=orjson.OPT_SORT_KEYS)
