"""``tooltrace policy``: check a policy file, test it against the recorded history, and print
the Cedar schema Cedar policies are validated against."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ._common import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    OutputGuard,
    archive_option,
    home_option,
    json_option,
    open_store,
    parse_since,
    print_json,
    table,
    wide_option,
)

if TYPE_CHECKING:
    from ..model import ToolDefinition

__all__ = ["policy"]

# --tools of every policy command: tools a policy file may name besides the built-in ones.
_tools_option = click.option(
    "--tools", "tool_specs", multiple=True, metavar="MODULE:ATTR",
    help="Tools the file may name besides the built-in ones (a @tool, or a list of them;"
    " the demo's: tooltrace.demo:DEMO_TOOLS).",
)


def _definitions(specs: tuple[str, ...]) -> dict[str, ToolDefinition]:
    """The built-in tools' definitions and those ``--tools`` names."""
    from ..builtins import register_builtins
    from ..exceptions import TooltraceError
    from ..mcp import load_object
    from ..model import FunctionTool
    from ..registry import ToolRegistry

    reg = register_builtins(ToolRegistry())
    try:
        out = {n: d for n in reg.tool_names() if (d := reg.definition(n)) is not None}
        for spec in specs:
            try:
                obj: Any = load_object(spec, "tooltrace.tools")
            except TooltraceError as exc:
                raise click.UsageError(str(exc)) from None
            items = obj if isinstance(obj, list | tuple) else [obj]
            if not all(isinstance(t, FunctionTool) for t in items):
                raise click.UsageError(f"{spec} is not a @tool function (or a list of them)")
            out.update((t.definition.name, t.definition) for t in items)
        return out
    finally:
        reg.shutdown()


@click.group()
def policy() -> None:
    """Policy files: check one, or test it against recorded calls before it ships."""


@policy.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@_tools_option
@click.option("--strict", is_flag=True,
              help="Exit 1 when there are warnings (rules that can never match or decide).")
@json_option
def check(file: Path, tool_specs: tuple[str, ...], strict: bool, as_json: bool) -> None:
    """Check FILE: every problem as file:line:column, then every warning (a rule that can
    never match, or that an earlier rule always decides for).

    Exit 0 valid, 1 valid with warnings under --strict, 2 invalid.
    """
    from ..policy.file import check_policy

    guard = OutputGuard(None)
    found = check_policy(file, tools=_definitions(tool_specs), warnings=True)
    errors = [p for p in found if p.severity == "error"]
    warnings = [p for p in found if p.severity == "warning"]
    if as_json:
        print_json({"file": str(file), "valid": not errors,
                    "problems": [{"line": p.line, "column": p.column, "severity": p.severity,
                                  "message": p.message} for p in found]}, guard)
    else:
        for p in found:
            click.echo(guard(str(p)), err=True)
        if not errors:
            n = len(warnings)
            tail = f" ({n} warning{'s' * (n != 1)})" if n else ""
            click.echo(guard(f"{file}: ok{tail}"))
    sys.exit(EXIT_USAGE if errors else EXIT_FAIL if strict and warnings else EXIT_OK)


@policy.command(name="test")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@home_option
@archive_option
@click.option("--since", default=None, metavar="WHEN",
              help="Only calls since then: 7d, 12h, 30m or an ISO timestamp (UTC).")
@_tools_option
@json_option
@wide_option
def test_policy(file: Path, home: Path | None, archive: str | None, since: str | None,
                tool_specs: tuple[str, ...], as_json: bool, wide: bool) -> None:
    """Replay recorded calls against FILE and report the decisions it would change.

    Exit 0 when no decision changes, 1 when any does, 2 for an invalid file, bad usage or no
    trail to replay (so a CI gate can tell "changes" from "could not test").
    """
    from ..policy.file import PolicyFileError, load_policy, replay

    guard = OutputGuard(home)
    tools = _definitions(tool_specs)
    try:
        pf = load_policy(file, tools=tools)
    except PolicyFileError as exc:
        for p in exc.problems:
            click.echo(guard(str(p)), err=True)
        sys.exit(EXIT_USAGE)
    with open_store(home, guard, archive, missing=EXIT_USAGE) as store:
        result = replay(store.con, pf.compiled, tools, since=parse_since(since))
    if as_json:
        print_json({"file": str(file), **result.to_dict()}, guard)
    else:
        _report(result, guard, wide)
    sys.exit(EXIT_FAIL if result.changed else EXIT_OK)


@policy.command(name="cedar-schema")
@click.option("--mode", default=None, metavar="MODE",
              help="Only the tools visible in this mode (a built-in mode or the file's).")
@click.option("--policy", "policy_file", default=None, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="The policy file whose modes --mode names (default: TOOLTRACE_POLICY or"
                   " ./tooltrace.toml).")
@_tools_option
def cedar_schema(mode: str | None, policy_file: Path | None,
                 tool_specs: tuple[str, ...]) -> None:
    """Print the Cedar schema of the tools' calls (the built-in tools and --tools).

    Cedar policies are validated against it when they load. Exit 0, or 2 for an unknown mode
    or an invalid policy file.
    """
    from .. import _settings
    from ..policy import DEFAULT_MODES
    from ..policy.file import PolicyFileError, cedar_schema, load_policy

    guard = OutputGuard(None)
    tools = _definitions(tool_specs)
    modes = {m.name: m for m in DEFAULT_MODES}
    path = _settings.policy_path(policy_file)
    if path is not None:
        try:  # the modes only: Cedar files are checked for syntax, not against this schema
            modes = dict(load_policy(path, tools=None).compiled.policy.modes)
        except PolicyFileError as exc:
            for p in exc.problems:
                click.echo(guard(str(p)), err=True)
            sys.exit(EXIT_USAGE)
    if mode is not None:
        m = modes.get(mode)
        if m is None:
            raise click.UsageError(f"unknown mode {mode!r}; known: {', '.join(sorted(modes))}")
        tools = {n: d for n, d in tools.items() if m.allows(d)[0]}
    click.echo(guard(cedar_schema(tools.values())), nl=False)
    sys.exit(EXIT_OK)


def _report(result: Any, guard: OutputGuard, wide: bool) -> None:
    d = result.to_dict()
    click.echo(guard(f"{d['calls']} calls read, {d['replayed']} replayed: {d['changed']} would"
                     f" change, {d['undecidable']} undecidable"))
    if d["approximate"]:
        click.echo(guard(f"approximate: limits counted {d['approximate']} undecidable calls as"
                         " the recorded run decided them"))
    for key, title in (("changes", "changed decisions"), ("undecidable_calls", "undecidable")):
        if d[key]:
            table(title, ["tool", "rule", "before", "after", "calls", "examples"],
                  [[c["tool"], c["rule"], c["before"], c["after"], c["count"],
                    " ".join(c["examples"])] for c in d[key]], guard, limit=200, wide=wide,
                  priority=("tool", "rule", "before", "after", "calls"))
    unknown = d["unknown_tools"]
    if unknown:
        from ..demo import DEMO_TOOLS

        demo = {t.definition.name for t in DEMO_TOOLS}
        hint = " (the demo's: --tools tooltrace.demo:DEMO_TOOLS)" \
            if set(unknown) <= demo else ""
        for tool, n in sorted(unknown.items()):
            click.echo(guard(f"not replayed: {n} calls of {tool} (no definition: pass"
                             f" --tools MODULE:ATTR{hint})"))
