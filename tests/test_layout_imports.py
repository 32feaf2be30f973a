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
    # Values every JSON writer takes (a lone surrogate, a huge integer): the audit trail's, the
    # logs' and the spans' encoders share one fallback.
    "tooltrace._jsonsafe": "JSON-safe values",
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


# -- the layers: every import points down (or stays in its layer) ---------------------------

#: Each unit of tooltrace (a folder, or a top-level module) and its layer; an import may name a
#: unit of its own layer or a lower one, never a higher one: module-level, type-only and
#: function-local imports alike. ``tooltrace`` is the facade (``tooltrace/__init__.py``).
LAYERS: dict[str, int] = {
    # Foundation: errors, settings, ids, lazy names, whole-file writes, calls in flight, JSON-safe
    # values.
    "exceptions": 0, "_settings": 0, "_ids": 0, "_lazy": 0, "_files": 0, "_inflight": 0,
    "_jsonsafe": 0,
    # Records and redaction know each other: an artifact is a record, a validation error is
    # redacted before it is cut.
    "model": 1, "redaction": 1,
    # What a call is checked against and emitted to.
    "policy": 2, "sinks": 2, "hooks": 2,
    "snapshots": 3,
    "runtime": 4,
    "events": 5,
    "pipeline": 6,
    "registry": 7,
    # Built on the registry: the built-in tools, the trail and everything that reads it.
    "builtins": 8,
    "audit": 9,
    "telemetry": 10, "archive": 10, "report": 10, "policy.file": 10,
    "console": 11, "_setup": 11, "demo": 11, "integrations": 11, "mcp": 11, "testing": 11,
    "cli": 12, "tooltrace": 12,
}
#: Imports allowed against the layers, each with its reason.
EXEMPT = {
    # The version string the facade holds: what every report and export names.
    "tooltrace.__version__": "version",
    # `python -m tooltrace.mcp` runs the CLI's mcp command.
    "tooltrace.cli.mcp.mcp": "entry point",
}


def _unit(dotted: str) -> str:
    parts = dotted.split(".")
    if parts[1:3] == ["policy", "file"]:
        return "policy.file"
    if len(parts) > 1 and ((PKG / parts[1] / "__init__.py").is_file()
                           or (PKG / f"{parts[1]}.py").is_file()):
        return parts[1]
    return "tooltrace"


def test_every_unit_has_a_layer() -> None:
    units = {_unit(_module_name(p)) for p in PKG.rglob("*.py")}
    assert units - set(LAYERS) == set()


def test_imports_point_down_the_layers() -> None:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        mine = _unit(_module_name(path))
        for line, dotted in _imports(path):
            theirs = _unit(dotted)
            # The facade re-exports the core (layers up to the registry): what lies above it
            # may use its public names.
            facade_ok = theirs == "tooltrace" and LAYERS[mine] > LAYERS["registry"]
            if LAYERS[theirs] > LAYERS[mine] and dotted not in EXEMPT and not facade_ok:
                found.append(f"{path.relative_to(PKG.parent)}:{line} ({mine}, layer "
                             f"{LAYERS[mine]}) imports {dotted} ({theirs}, layer {LAYERS[theirs]})")
    assert found == []


def test_the_pipeline_never_imports_the_registry() -> None:
    found = [f"{path.relative_to(PKG.parent)}:{line} imports {dotted}"
             for path in sorted((PKG / "pipeline").rglob("*.py"))
             for line, dotted in _imports(path)
             if _unit(dotted) in ("registry", "tooltrace")]
    assert found == []


def test_the_registry_imports_nothing_built_on_it() -> None:
    above = {u for u, n in LAYERS.items() if n > LAYERS["registry"]}
    found = [f"registry.py:{line} imports {dotted}"
             for line, dotted in _imports(PKG / "registry.py") if _unit(dotted) in above]
    assert found == []


# -- no reading another object's private attributes -------------------------------------------

#: ``obj._name`` reads where ``obj`` is not ``self`` or ``cls``, each with its reason; the
#: count is held here. A namedtuple's own API (``_replace``, ``_asdict``) is not private.
PRIVATE_READS = {
    # os._exit: the Landlock helper ends its child without running Python's exit handlers.
    "runtime/_landlock.py": 2,
    # LangChain has no public flag for "this tool overrides _arun"; its BaseTool.arun makes
    # the same check.
    "integrations/langchain.py": 2,
}
_NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}


def _private_reads(path: Path) -> int:
    count = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and node.attr not in _NAMEDTUPLE_API
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            count += 1
    return count


def test_no_module_reads_another_objects_private_attributes() -> None:
    found = {p.relative_to(PKG).as_posix(): n for p in sorted(PKG.rglob("*.py"))
             if (n := _private_reads(p))}
    assert found == PRIVATE_READS
