"""Tables for people that fit the terminal: ids never wrap, prose wraps at word boundaries, and
columns that do not fit are left out with a note (``--wide`` shows them all).

The width is ``COLUMNS`` when set, else the terminal's, else (output piped to a file or another
program) 200 characters. A column whose cells hold spaces (a summary, a detail, a message) is
prose: it may wrap, down to ``MIN_PROSE`` characters. Every other column (ids, times, numbers,
names) keeps its full width on one line, so a call id copies and pastes in one piece. Columns
are kept in order of importance (the command says which matter most; by default left to right)
and shown in their own order. Plain ``click.echo`` with the box characters rich uses: no rich
import, so every command starts as fast as ``autopsy``.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ._common import OutputGuard

__all__ = ["MIN_PROSE", "PIPE_WIDTH", "Layout", "fit", "note", "render", "styled",
           "terminal_width"]

#: The narrowest a prose column is wrapped to before it is left out instead.
MIN_PROSE = 20
#: The width used when output is not a terminal and ``COLUMNS`` is not set.
PIPE_WIDTH = 200


def terminal_width() -> int:
    """Characters per line: ``COLUMNS`` when set, else the terminal's, else ``PIPE_WIDTH``."""
    raw = os.environ.get("COLUMNS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((80, 24)).columns
    return PIPE_WIDTH


def styled() -> bool:
    """Bold labels and headers: on a terminal, unless ``NO_COLOR`` is set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


@dataclass(frozen=True, slots=True)
class Layout:
    """Which columns are shown (indexes, in display order), how wide, and which were left out."""

    shown: tuple[int, ...]
    widths: tuple[int, ...]
    left_out: tuple[str, ...]


def fit(columns: Sequence[str], cells: Sequence[Sequence[str]], width: int | None,
        priority: Sequence[str] = ()) -> Layout:
    """Choose the columns that fit in ``width`` characters (None: all, at full width).

    ``priority`` names the columns that matter most, in order; the rest follow left to right.
    The first column by priority is always shown.
    """
    natural = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    prose = [any(" " in r[i] for r in cells) for i in range(len(columns))]
    least = [min(n, max(MIN_PROSE, len(c))) if p else n
             for n, p, c in zip(natural, prose, columns, strict=True)]
    if width is None:
        return Layout(tuple(range(len(columns))), tuple(natural), ())
    order = [columns.index(c) for c in priority if c in columns]
    order += [i for i in range(len(columns)) if i not in order]
    used, keep = 1, set[int]()  # 1: the left border
    for i in order:
        if not keep or used + least[i] + 3 <= width:
            keep.add(i)
            used += least[i] + 3
    shown = tuple(i for i in range(len(columns)) if i in keep)
    widths = {i: least[i] for i in shown}
    spare = width - used
    for i in shown:  # prose columns grow back towards their full width, left to right
        grow = min(max(spare, 0), natural[i] - widths[i])
        widths[i] += grow
        spare -= grow
    return Layout(shown, tuple(widths[i] for i in shown),
                  tuple(columns[i] for i in range(len(columns)) if i not in keep))


def render(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
           guard: OutputGuard, *, limit: int = 80, wide: bool = False,
           priority: Sequence[str] = ()) -> None:
    """Print ``rows`` as a boxed table that fits the terminal (all columns with ``wide``)."""
    from ._common import cell

    cells = [[guard(cell(v, limit)) for v in r] for r in rows]
    width = None if wide else terminal_width()
    lay = fit(columns, cells, width, priority)
    heads = [columns[i] for i in lay.shown]
    bold = styled()

    def line(left: str, sep: str, right: str, vals: Sequence[str]) -> str:
        return left + sep.join(f" {v:<{w}} " for v, w in zip(vals, lay.widths, strict=True)) + right

    def rule(left: str, fill: str, sep: str, right: str) -> str:
        return left + sep.join(fill * (w + 2) for w in lay.widths) + right

    if title:
        inner = sum(lay.widths) + 3 * len(lay.widths) + 1
        click.echo(f"{title:^{inner}}".rstrip())
    click.echo(rule("┏", "━", "┳", "┓"))
    head = line("┃", "┃", "┃", heads)
    click.echo(click.style(head, bold=True) if bold else head)
    click.echo(rule("┡", "━", "╇", "┩"))
    for r in cells:
        parts = [textwrap.wrap(r[i], w, break_on_hyphens=False) or [""] if len(r[i]) > w
                 else [r[i]] for i, w in zip(lay.shown, lay.widths, strict=True)]
        for k in range(max(len(p) for p in parts)):
            click.echo(line("│", "│", "│", [p[k] if k < len(p) else "" for p in parts]))
    click.echo(rule("└", "─", "┴", "┘"))
    if lay.left_out:
        note(f"(left out to fit {width} columns: {', '.join(lay.left_out)};"
             " --wide shows every column)")


def note(text: str, indent: str = "") -> None:
    """Print prose wrapped to the terminal width (never cutting a word or an id)."""
    click.echo(textwrap.fill(text, max(terminal_width(), 40), initial_indent=indent,
                             subsequent_indent=indent + "  ", break_long_words=False,
                             break_on_hyphens=False))
