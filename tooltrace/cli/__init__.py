"""The ``tooltrace`` command line: thin commands over the library.

Commands load lazily (``tooltrace --help`` imports no DuckDB): each lives in its own module and
is listed once in ``COMMANDS``; adding one is one line here. Exit codes: 0 ok, 1 the thing
asked about is not there or a check failed, 2 usage error.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["COMMANDS", "main"]

#: command name -> "module:attribute" of its click command.
COMMANDS: dict[str, str] = {
    "audit": "tooltrace.cli.audit:audit",
    "approvals": "tooltrace.cli.approve:approvals",
    "autopsy": "tooltrace.cli.autopsy:autopsy",
    "call": "tooltrace.cli.call:call",
    "calls": "tooltrace.cli.calls:calls",
    "compact": "tooltrace.cli.compact:compact",
    "demo": "tooltrace.cli.demo:demo",
    "export": "tooltrace.cli.export:export",
    "mcp": "tooltrace.cli.mcp:mcp",
    "policy": "tooltrace.cli.policy:policy",
    "query": "tooltrace.cli.query:query",
    "report": "tooltrace.cli.report:report",
    "restore": "tooltrace.cli.restore:restore",
    "serve": "tooltrace.cli.serve:serve",
    "stats": "tooltrace.cli.stats:stats",
    "tail": "tooltrace.cli.tail:tail",
    "tools": "tooltrace.cli.tools:tools",
    "verify": "tooltrace.cli.verify:verify",
    "where": "tooltrace.cli.where:where",
}


class _LazyGroup(click.Group):
    """A group that imports a command's module only when that command is needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(super().list_commands(ctx)))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, attr = target.split(":")
        cmd: Any = getattr(importlib.import_module(module), attr)
        assert isinstance(cmd, click.Command)
        return cmd


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    package_name="tooltrace",
    prog_name="tooltrace",
    message="%(prog)s %(version)s",
)
def main() -> None:
    """Every tool call an AI agent makes, observable and auditable.

    Audit commands read the trail under --home (default: TOOLTRACE_HOME, else the current
    directory's home in the user's state directory; `tooltrace where` prints it).
    Exit codes: 0 ok, 1 not found or a check failed, 2 usage error.
    """
