"""``bench/`` measures tooltrace through its public API: no module of ``bench/`` imports a
private tooltrace module (a part of its dotted name starting with ``_``) or a private name
from a public one, by an import statement or by ``importlib.import_module`` / ``__import__``.

A benchmark that reaches into private modules breaks when the code it measures is reorganised,
and measures something no user runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _private(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] == "tooltrace" and any(p.startswith("_") for p in parts[1:])


def private_imports(source: str) -> list[str]:
    """``line: what`` for each import of a private tooltrace module or name in ``source``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "tooltrace":
                continue
            if _private(node.module):
                found.append(f"{node.lineno}: from {node.module} import ...")
            found += [f"{node.lineno}: from {node.module} import {a.name}"
                      for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if (name in ("import_module", "__import__") and isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str) and _private(arg.value)):
                found.append(f"{node.lineno}: {name}({arg.value!r})")
    return sorted(found, key=lambda f: int(f.split(":", 1)[0]))


def _bench_files() -> list[Path]:
    files = sorted((ROOT / "bench").rglob("*.py"))
    assert len(files) > 20  # the whole bench, subpackages included
    return files


@pytest.mark.parametrize("path", _bench_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_bench_imports_only_public_tooltrace_names(path: Path) -> None:
    assert private_imports(path.read_text()) == []


def test_the_check_finds_every_form_of_private_import() -> None:
    src = (
        "import tooltrace._build\n"
        "from tooltrace.audit._format import load_key\n"
        "from tooltrace.telemetry import _worker, AuditSink\n"
        "import importlib\n"
        "importlib.import_module('tooltrace.pipeline._stages')\n"
        "__import__('tooltrace._settings')\n"
        "from tooltrace import ToolRegistry\n"
        "from tooltrace.audit import load_key\n"
        "from bench._common import scratch\n"
        "from ._x import y\n"
    )
    assert private_imports(src) == [
        "1: import tooltrace._build",
        "2: from tooltrace.audit._format import ...",
        "3: from tooltrace.telemetry import _worker",
        "5: import_module('tooltrace.pipeline._stages')",
        "6: __import__('tooltrace._settings')",
    ]
