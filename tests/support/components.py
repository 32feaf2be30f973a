"""Real components a test needs (a binary, a Python package): present, or the test says which
one is missing.

On a developer machine a missing component skips the test with a reason that names it and how
to install it. Under ``CI=true`` it fails instead: CI installs every component (``.ci/setup.d``
and the test extra), so a skip there would hide a test that no longer runs. Called inside a
test it stops that test; at module level it stops the whole module.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

__all__ = ["extra", "in_ci", "missing", "require_binary", "require_module"]


def in_ci() -> bool:
    """True under ``CI=true``, where a missing component is a failure."""
    return os.environ.get("CI", "").strip().lower() == "true"


def missing(reason: str) -> NoReturn:
    """Stop the calling test (or module): fail under ``CI=true``, skip otherwise."""
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_binary(name: str, install_hint: str, *, path: str | Path | None = None) -> str:
    """The path of the executable ``name`` (looked up on ``PATH``, or ``path`` when given).

    ``install_hint`` says how to get it, e.g.
    ``"apt-get install -y --no-install-recommends prometheus"``.
    """
    if path is not None:
        found = str(path) if Path(path).is_file() and os.access(path, os.X_OK) else None
    else:
        found = shutil.which(name)
    if found is None:
        where = f" at {path}" if path is not None else " on PATH"
        missing(f"{name} is not installed (not found{where}); install it with: {install_hint}")
    return found


def require_module(module: str, install_hint: str) -> ModuleType:
    """Import ``module``; ``install_hint`` says how to get it (see ``extra``)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing(f"{module} is not installed ({type(exc).__name__}: {exc}); "
                f"install it with: {install_hint}")


def extra(name: str) -> str:
    """The install hint for one of tooltrace's extras."""
    return f"pip install 'tooltrace[{name}]'"
