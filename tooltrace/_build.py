"""Which build of the call path runs: the mypyc-compiled modules of a wheel, or Python source.

An editable install (and any checkout) runs the Python source. A wheel built with ``pip wheel``
(or ``python -m build``) compiles the modules in ``COMPILED`` with mypyc when it can and falls
back to the pure wheel when it cannot (see ``setup.py``); its ``_build.json`` keeps the
docstrings of the compiled modules and classes, which mypyc drops. ``BUILD`` says which build
runs and why; ``tooltrace --version`` prints it.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import json
import os
from typing import Any

__all__ = ["BUILD", "COMPILED", "Build"]

PACKAGE = "tooltrace"
#: The call path's modules a wheel build compiles (dotted names under ``tooltrace``).
COMPILED = (
    "_admission",
    "_authorize",
    "_context",
    "_detectors",
    "_drivers",
    "_encoded",
    "_execute",
    "_executors",
    "_hookstages",
    "_keyrules",
    "_outcome",
    "_record",
    "_redactor",
    "_registry",
    "_result",
    "_sanitise",
    "_stages",
    "_statuses",
    "_tooltable",
    "_validators",
    "artifacts",
    "policy",
    "validation",
)
# Light on purpose: every CLI command imports this first (no pathlib or importlib.util).
_DIR = os.path.dirname(os.path.realpath(__file__))
_DOCS: dict[str, Any] = {}  # the docstrings _build.json recorded, by module


class Build:
    """The build in use: ``compiled`` True or False, and ``reason`` in words."""

    __slots__ = ("compiled", "reason")

    def __init__(self, compiled: bool, reason: str) -> None:
        self.compiled = compiled
        self.reason = reason

    def __repr__(self) -> str:
        return f"Build(compiled={self.compiled}, reason={self.reason!r})"


def _compiled_file(name: str) -> str | None:
    base = os.path.join(_DIR, *name.split("."))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(base + suffix):
            return base + suffix
    return None


def _check() -> Build:
    """Whether the compiled modules are installed (Python imports them before the source)."""
    built = [n for n in COMPILED if _compiled_file(n) is not None]
    if not built:
        return Build(False, "Python source")
    if len(built) != len(COMPILED):
        missing = ", ".join(n for n in COMPILED if n not in built)
        return Build(False, f"partly compiled ({missing} missing): reinstall tooltrace")
    global _DOCS
    with contextlib.suppress(OSError, ValueError, AttributeError):
        with open(os.path.join(_DIR, "_build.json"), "rb") as fh:
            docs = json.loads(fh.read()).get("docs")
        _DOCS = docs if isinstance(docs, dict) else {}
    return Build(True, "compiled with mypyc")


def keep_docs(module: str, namespace: dict[str, Any]) -> None:
    """Give a compiled module and its classes back their docstrings (mypyc drops them; the
    build recorded them). Called at the end of each compiled module; nothing to do from source.
    Functions and methods keep none in the compiled build (their docstrings cannot be set)."""
    if namespace.get("__file__", "").endswith(".py"):
        return
    docs = _DOCS.get(module.partition(".")[2])
    for name, doc in docs.items() if isinstance(docs, dict) else ():
        if not isinstance(doc, str):
            continue
        if not name:
            namespace["__doc__"] = doc
            continue
        cls = namespace.get(name)
        if isinstance(cls, type) and not cls.__doc__:
            with contextlib.suppress(AttributeError, TypeError):
                cls.__doc__ = doc


BUILD = _check()
