"""Packages use one another only through their public names.

Each folder of ``tooltrace`` is a package whose ``__init__`` says what it offers; the top-level
modules form the core package ``tooltrace``. A module may import anything of its own package,
and another package's public modules and names; never a ``_private`` module or name of another
package. The few top-level private modules that every package shares are listed in ``SHARED``,
each with the reason it is shared. The import statements are read from the sources (nothing is
imported), those under ``TYPE_CHECKING`` and inside functions included.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import tooltrace

PKG = Path(tooltrace.__file__).resolve().parent

#: Top-level private modules any package may import: shared infrastructure, kept short.
SHARED = {
    # The settings: explicit argument > TOOLTRACE_* variable > default, read in one place.
    "tooltrace._settings": "settings",
    # How a package defers its public names until first use (every package's __init__).
    "tooltrace._lazy": "lazy public names",
    # Call and run ids (UUIDv7): one format wherever an id is made.
    "tooltrace._ids": "ids",
    # Tool calls in flight on the tool threads, which the sinks' workers stay out of.
    "tooltrace._inflight": "calls in flight",
    # Files created whole (a key, an approval) and directory entries synced: one mechanism.
    "tooltrace._files": "files written whole",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    rel = PKG.parent.joinpath(*dotted.split("."))
    return rel.with_suffix(".py").is_file() or (rel / "__init__.py").is_file()


def _package_of(dotted: str) -> str:
    """``tooltrace.<folder>`` for what lives in a folder, else the core ``tooltrace``."""
    parts = dotted.split(".")
    if len(parts) > 1 and (PKG / parts[1] / "__init__.py").is_file():
        return ".".join(parts[:2])
    return "tooltrace"


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything a module imports from tooltrace: a module, or a
    module's name (``tooltrace.audit.load_key``)."""
    module = _module_name(path)
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tooltrace":
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != "tooltrace":
                continue
            for alias in node.names:
                yield node.lineno, f"{target}.{alias.name}"


def _private_parts(dotted: str) -> list[str]:
    """The ``_private`` parts of an imported name below the package that owns it."""
    owner = _package_of(dotted)
    rest = dotted.split(".")[len(owner.split(".")):]
    return [p for p in rest if p.startswith("_") and not p.startswith("__")]


def _shared(dotted: str) -> bool:
    return any(dotted == m or dotted.startswith(m + ".") for m in SHARED)


def test_no_package_imports_another_packages_private_modules_or_names() -> None:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        mine = _package_of(_module_name(path))
        for line, dotted in _imports(path):
            owner = _package_of(dotted)
            if owner == mine or _shared(dotted) or not _private_parts(dotted):
                continue
            found.append(f"{path.relative_to(PKG.parent)}:{line} imports {dotted}"
                         f" (private to {owner}: import a public name of {owner})")
    assert found == []


def test_the_shared_private_modules_exist_and_are_top_level() -> None:
    for module in SHARED:
        assert _is_module(module), module
        assert _package_of(module) == "tooltrace" and _private_parts(module), module


def test_the_audit_trail_knows_nothing_of_its_sink_or_its_readers() -> None:
    # The audit sink (telemetry), the archive, the CLI and the proxy build on tooltrace.audit;
    # never the other way round.
    above = ("tooltrace.telemetry", "tooltrace.archive", "tooltrace.cli", "tooltrace.mcp",
             "tooltrace.integrations")
    found = [f"{path.relative_to(PKG.parent)}:{line} imports {dotted}"
             for path in sorted((PKG / "audit").rglob("*.py"))
             for line, dotted in _imports(path)
             if _package_of(dotted) in above]
    assert found == []


def test_the_checker_sees_what_it_must_refuse() -> None:
    # A guard against a checker that passes because it reads nothing.
    assert _private_parts("tooltrace.audit._format.load_key") == ["_format"]
    assert _private_parts("tooltrace.audit._store._VIEWS") == ["_store", "_VIEWS"]
    assert _private_parts("tooltrace.audit.load_key") == []
    assert _private_parts("tooltrace._setup.create_registry") == ["_setup"]
    assert _package_of("tooltrace.mcp._config.load_object") == "tooltrace.mcp"
    seen = dict(_imports(PKG / "cli" / "verify.py"))
    assert any(d.startswith("tooltrace.audit.") for d in seen.values())
