"""Functions stay short enough to read: no function (or method) of ``tooltrace/`` is over 80
lines, measured with ``ast``. Modules have no line bound: a module holds one concern, whatever
its length (STYLE.md, house rule 1); the package layout and the import directions are pinned
by ``test_layout_imports.py``."""

from __future__ import annotations

import ast
from pathlib import Path

import tooltrace

PKG = Path(tooltrace.__file__).resolve().parent
MAX_FUNCTION_LINES = 80


def _long_functions(path: Path) -> list[str]:
    return [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_function_is_over_the_limit() -> None:
    over = [f"{path.relative_to(PKG).as_posix()}: {fn}"
            for path in sorted(PKG.rglob("*.py")) for fn in _long_functions(path)]
    assert over == [], f"functions over {MAX_FUNCTION_LINES} lines: split them"
