"""Build: the call path's modules are compiled with mypyc; everything else stays Python.

``TOOLTRACE_BUILD`` chooses: ``auto`` (the default) compiles and falls back to pure Python with
a warning when it cannot (no C compiler, say); ``compiled`` fails the build instead; ``pure``
does not compile. A successful build writes ``tooltrace/_build.json`` with a fingerprint of each
compiled module's source: at import, ``tooltrace._build`` runs the compiled modules only while
their sources still match (an edited checkout runs its edits, see ``tooltrace/_build.py``).
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
# What to compile and how sources are fingerprinted come from the module that checks them at
# import (loaded by path: it needs only the standard library, the package's dependencies may
# not be installed here).
_spec = importlib.util.spec_from_file_location("_tooltrace_build", ROOT / "tooltrace" / "_build.py")
assert _spec is not None and _spec.loader is not None
_selector = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_selector)
COMPILED: tuple[str, ...] = _selector.COMPILED
fingerprint = _selector.fingerprint
GROUP = "tooltrace._callpath"
MODE = os.environ.get("TOOLTRACE_BUILD", "auto").strip().lower() or "auto"
if MODE not in ("auto", "compiled", "pure"):
    sys.exit(f"TOOLTRACE_BUILD must be auto, compiled or pure, not {MODE!r}")


def _say(text: str) -> None:
    print(f"tooltrace build: {text}", file=sys.stderr)


def _extensions() -> list[Any]:
    if MODE == "pure":
        return []
    try:
        from mypyc.build import mypycify

        paths = [f"tooltrace/{m}.py" for m in COMPILED]
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
    """Builds all compiled modules or none, and records the sources they were built from."""

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
        manifest = {
            "modules": {
                m: fingerprint((ROOT / "tooltrace" / f"{m}.py").read_bytes()) for m in COMPILED
            },
            "group": GROUP,
            "docs": {m: _docs(ROOT / "tooltrace" / f"{m}.py") for m in COMPILED},
        }
        for base in {Path(self.build_lib), ROOT} if self.inplace else {Path(self.build_lib)}:
            target = base / "tooltrace" / "_build.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(manifest, indent=1) + "\n")

    def get_outputs(self) -> list[str]:
        outs = list(super().get_outputs())
        if self.extensions:
            outs.append(str(Path(self.build_lib) / "tooltrace" / "_build.json"))
        return outs


setup(ext_modules=_extensions(), cmdclass={"build_ext": _BuildExt})
