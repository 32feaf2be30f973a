"""Lazy public names for a package: the one way tooltrace packages defer heavy imports."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module ``__getattr__`` and ``__dir__`` that import ``names[name]`` (a submodule, relative
    to ``package``) on first access and cache the value in ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        rel = module if module.startswith(".") else "." + module
        value = getattr(importlib.import_module(rel, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
