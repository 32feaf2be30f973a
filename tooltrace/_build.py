"""Which build of the call path runs: the mypyc-compiled modules, or their Python source.

The build (``setup.py``) compiles the modules in ``COMPILED`` and records a fingerprint of each
one's source in ``_build.json``. Python would import a compiled module in preference to its
source whatever the source says since; so before any of them is imported, ``select()`` checks
the record and, unless every compiled module matches its source, makes all of them load from
source (one build or the other, never a mix: compiled modules call each other directly).

``TOOLTRACE_PURE_PYTHON=1`` asks for the source build. ``BUILD`` says which one runs and why.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import json
import os
import sys
import zlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["BUILD", "COMPILED", "Build", "fingerprint", "select"]

PACKAGE = "tooltrace"
# setup.py compiles these (it reads this tuple and fingerprint() from this file).
COMPILED = ("policy", "redaction", "registry", "runtime", "validation")
# Light on purpose: every CLI command imports this first (no pathlib, hashlib or importlib.util).
_DIR = os.path.dirname(os.path.realpath(__file__))
_MANIFEST: dict[str, Any] = {}  # _build.json as read by _check()


class Build:
    """The build in use: ``compiled`` True or False, and ``reason`` in words."""

    __slots__ = ("compiled", "reason")

    def __init__(self, compiled: bool, reason: str) -> None:
        self.compiled = compiled
        self.reason = reason

    def __repr__(self) -> str:
        return f"Build(compiled={self.compiled}, reason={self.reason!r})"


class _SourceFinder(importlib.machinery.PathFinder):
    """Finds the call path's modules as Python source, passing over their compiled builds."""

    @classmethod
    def find_spec(
        cls, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        prefix, _, name = fullname.rpartition(".")
        if prefix != PACKAGE or name not in COMPILED:
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(fullname, os.path.join(_DIR, f"{name}.py"))


def _compiled_file(name: str) -> str | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        p = os.path.join(_DIR, name + suffix)
        if os.path.exists(p):
            return p
    return None


def fingerprint(source: bytes) -> str:
    """How the build record identifies a module's source: its size and CRC-32 (an edit, not an
    attack, is what it detects; whoever can edit the sources can replace the build too)."""
    return f"{len(source)}:{zlib.crc32(source):08x}"


def _check() -> Build:
    """Whether the compiled build exists and matches the sources, and if not, why."""
    if os.environ.get("TOOLTRACE_PURE_PYTHON", "").strip() not in ("", "0"):
        return Build(False, "TOOLTRACE_PURE_PYTHON is set")
    global _MANIFEST
    try:
        with open(os.path.join(_DIR, "_build.json"), "rb") as fh:
            _MANIFEST = json.loads(fh.read())
        recorded = _MANIFEST["modules"]
    except FileNotFoundError:
        return Build(False, "not compiled (no C compiler at install, or TOOLTRACE_BUILD=pure)")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Build(False, f"unreadable build record _build.json ({type(exc).__name__})")
    for name in COMPILED:
        if _compiled_file(name) is None:
            return Build(False, f"{name} was not compiled")
        try:
            with open(os.path.join(_DIR, f"{name}.py"), "rb") as fh:
                digest = fingerprint(fh.read())
        except OSError:
            return Build(True, "compiled (sources not shipped)")
        if not isinstance(recorded, dict) or recorded.get(name) != digest:
            return Build(False, f"stale: {name}.py changed since it was compiled")
    return Build(True, "compiled with mypyc")


def keep_docs(module: str, namespace: dict[str, Any]) -> None:
    """Give a compiled module and its classes back their docstrings (mypyc drops them; the
    build recorded them). Called at the end of each compiled module; nothing to do from source.
    Functions and methods keep none in the compiled build (their docstrings cannot be set)."""
    if namespace.get("__file__", "").endswith(".py"):
        return
    every = _MANIFEST.get("docs")
    docs = every.get(module.rpartition(".")[2]) if isinstance(every, dict) else None
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


def select() -> Build:
    """Decide once per process, before the call path's modules are imported."""
    build = _check()
    # Quietly: an edited checkout is where this happens, and its edits are what should run
    # (``tooltrace --version`` says which build runs; reinstall to compile again).
    if (
        not build.compiled
        and any(_compiled_file(n) is not None for n in COMPILED)
        and _SourceFinder not in sys.meta_path
    ):
        sys.meta_path.insert(0, _SourceFinder)
    return build


BUILD = select()
