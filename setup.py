"""Build: a wheel compiles the call path with mypyc; an editable install stays pure Python.

``TOOLTRACE_BUILD`` chooses for a wheel: ``auto`` (the default) compiles and falls back to the
pure wheel with a warning when it cannot (no C compiler, say); ``compiled`` fails the build
instead; ``pure`` does not compile. An editable install (``pip install -e .``) never compiles:
it runs the sources as they are edited, builds in seconds and needs no C compiler. A compiled
wheel ships ``tooltrace/_build.json`` with the docstrings mypyc drops (``tooltrace/_build.py``
puts them back).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# What to compile comes from the module that reports the build at run time (loaded by path: it
# needs only the standard library; the package's dependencies may not be installed here).
_spec = importlib.util.spec_from_file_location("_tooltrace_build", ROOT / "tooltrace" / "_build.py")
assert _spec is not None and _spec.loader is not None
_selector = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_selector)
COMPILED: tuple[str, ...] = _selector.COMPILED
GROUP = "tooltrace._callpath"
MODE = os.environ.get("TOOLTRACE_BUILD", "auto").strip().lower() or "auto"
if MODE not in ("auto", "compiled", "pure"):
    sys.exit(f"TOOLTRACE_BUILD must be auto, compiled or pure, not {MODE!r}")
_COMMANDS = frozenset(sys.argv[1:])
# PEP 660 editable installs run the editable_wheel command (setuptools' build_editable).
EDITABLE = bool(_COMMANDS & {"editable_wheel", "develop"})
# Only building compiles: metadata (egg_info, dist_info) and sdists need no mypyc run.
BUILDING = bool(_COMMANDS & {"bdist_wheel", "build", "build_ext", "install"})


def _source(module: str) -> Path:
    return ROOT / "tooltrace" / (module.replace(".", "/") + ".py")


def _say(text: str) -> None:
    print(f"tooltrace build: {text}", file=sys.stderr)


def _stale_builds() -> None:
    """An editable install runs the sources: remove compiled modules an older in-place build
    left in the tree (of any module, listed in COMPILED or not: tooltrace has no other native
    code), which Python would otherwise import in their place."""
    for built in sorted((ROOT / "tooltrace").rglob("*.so")):
        built.unlink()
        _say(f"removed a stale compiled module: {built.relative_to(ROOT)}")
    (ROOT / "tooltrace" / "_build.json").unlink(missing_ok=True)


def _extensions() -> list[Any]:
    if EDITABLE:
        if MODE == "compiled":
            sys.exit("TOOLTRACE_BUILD=compiled builds a wheel (pip wheel .); an editable "
                     "install runs the Python source")
        _stale_builds()
        return []
    if MODE == "pure" or not BUILDING:
        return []
    try:
        from mypyc.build import mypycify

        paths = [str(_source(m).relative_to(ROOT)) for m in COMPILED]
        # The build environment has only a few of the dependencies (pyproject's build-system):
        # the others type as Any, and the compiled code calls them as Python objects, which is
        # what it does for them anyway. Type-checking proper is `mypy tooltrace` (strict) in CI;
        # here errors that only missing dependencies cause are not errors.
        flags = [
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--allow-subclassing-any",
            "--allow-untyped-calls",
            "--allow-untyped-decorators",
            "--no-warn-return-any",
            "--cache-dir=" + os.devnull,
        ]
        return list(mypycify([*flags, *paths], group_name=GROUP))
    except BaseException as exc:  # mypyc missing or refusing the sources
        if MODE == "compiled":
            raise
        _say(f"not compiling the call path ({type(exc).__name__}: {exc}); pure Python")
        return []


def _docs(path: Path) -> dict[str, str]:
    """The module's and its classes' docstrings ("" for the module): compiled modules and
    classes lose them, and ``tooltrace._build.keep_docs`` puts them back."""
    tree = ast.parse(path.read_text())
    docs = {"": ast.get_docstring(tree, clean=False) or ""}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                docs[node.name] = doc
    return docs


class _BuildExt(build_ext):
    """Builds all compiled modules or none, and records the docstrings mypyc drops."""

    def run(self) -> None:
        if not self.extensions:
            return
        try:
            super().run()
        except Exception as exc:
            if MODE == "compiled":
                raise
            _say(f"compiling failed ({type(exc).__name__}: {exc}); pure Python")
            for out in self.get_outputs():
                Path(out).unlink(missing_ok=True)
            return
        manifest = {"group": GROUP, "docs": {m: _docs(_source(m)) for m in COMPILED}}
        target = Path(self.build_lib) / "tooltrace" / "_build.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(manifest, indent=1) + "\n")

    def get_outputs(self) -> list[str]:
        outs = list(super().get_outputs())
        if self.extensions:
            outs.append(str(Path(self.build_lib) / "tooltrace" / "_build.json"))
        return outs


setup(ext_modules=_extensions(), cmdclass={"build_ext": _BuildExt})
