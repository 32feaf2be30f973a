"""Every command's ``--help`` reads as pinned in ``tests/cli_help.txt``: options shared between
commands (``tooltrace.cli._common``) keep each command's text, order and defaults.

A deliberate change to a command's options or help: regenerate the file with
``UPDATE_CLI_HELP=1 python -m pytest tests/test_cli_help.py`` and review its diff.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

from tooltrace.cli import main

PINNED = Path(__file__).with_name("cli_help.txt")
# Wide enough that no line wraps differently with the terminal the tests run in.
WIDTH = 100


def _paths(
    group: click.Group, ctx: click.Context, prefix: tuple[str, ...]
) -> list[tuple[str, ...]]:
    """Every command's name path under ``group``, groups included, in listing order."""
    out: list[tuple[str, ...]] = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        path = (*prefix, name)
        out.append(path)
        if isinstance(cmd, click.Group):
            out.extend(_paths(cmd, click.Context(cmd, parent=ctx, info_name=name), path))
    return out


def _all_help() -> str:
    runner = CliRunner()
    paths = [(), *_paths(main, click.Context(main, info_name="tooltrace"), ())]
    parts: list[str] = []
    for path in paths:
        res = runner.invoke(main, [*path, "--help"], prog_name="tooltrace",
                            terminal_width=WIDTH, max_content_width=WIDTH, env={"COLUMNS": None})
        assert res.exit_code == 0, (path, res.output)
        parts.append(f"==== tooltrace {' '.join(path)}".rstrip() + "\n" + res.output)
    return "\n".join(parts)


def test_every_commands_help_is_as_pinned() -> None:
    # In a fresh interpreter: click keeps a command's help option once built, so a test that
    # invoked a subcommand on its own first (without the group's ``-h``) would change the text.
    text = subprocess.run([sys.executable, __file__], check=True, capture_output=True,
                          text=True).stdout
    if os.environ.get("UPDATE_CLI_HELP") == "1":
        PINNED.write_text(text)
    pinned = PINNED.read_text()
    assert text == pinned, (
        "a command's --help changed; if that is meant, regenerate tests/cli_help.txt "
        "(see this module's docstring) and review the diff"
    )


def test_the_pinned_help_covers_every_command() -> None:
    """The file holds a section per command, the listing, list and stats commands among them
    (a command missing from it would go unchecked)."""
    pinned = PINNED.read_text()
    for name in ("calls", "stats", "approvals", "policy test", "autopsy", "verify", "query",
                 "mcp report", "audit ship"):
        assert f"==== tooltrace {name}\n" in pinned, name


if __name__ == "__main__":
    sys.stdout.write(_all_help())
