"""Shared by the framework adapter tests: ``require(module, extra)``."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or skip the calling test module when it is not installed.

    Under ``CI=true`` a missing framework is a failure, not a skip: CI installs every extra.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = f"{module} is not installed (pip install 'tooltrace[{extra}]'): {exc}"
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason, allow_module_level=True)
