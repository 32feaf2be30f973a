"""The package stays in rooms a newcomer can read: no module over 700 lines, no function (or
method) over 80 lines, measured with ``ast`` over every module of ``tooltrace/``.

The module bound is the style guide's: a cohesive module of up to about 700 lines beats pieces
that reach into each other's private state (STYLE.md, house rule 1); a module past it is more
than one responsibility and is split by responsibility, not by its line count."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import tooltrace

PKG = Path(tooltrace.__file__).resolve().parent
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80

# Known exceptions: none, every module fits. Keep it empty: split a module instead of adding one.
KNOWN: tuple[str, ...] = ()


def _modules() -> list[tuple[str, Path]]:
    return sorted((p.relative_to(PKG).as_posix(), p) for p in PKG.rglob("*.py"))


def _known(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in KNOWN)


def _too_long(path: Path) -> tuple[int, list[str]]:
    """The module's line count, and its functions over the limit (``name: lines``)."""
    source = path.read_text()
    functions = [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    return len(source.splitlines()), functions


def test_no_module_is_over_the_limit() -> None:
    over = [
        f"{name}: {lines}"
        for name, path in _modules()
        if not _known(name) and (lines := _too_long(path)[0]) > MAX_MODULE_LINES
    ]
    assert over == [], f"modules over {MAX_MODULE_LINES} lines: split them"


def test_no_function_is_over_the_limit() -> None:
    over = [
        f"{name}: {fn}"
        for name, path in _modules()
        if not _known(name)
        for fn in _too_long(path)[1]
    ]
    assert over == [], f"functions over {MAX_FUNCTION_LINES} lines: split them"

