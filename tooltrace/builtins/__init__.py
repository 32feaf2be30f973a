"""Built-in tools, registered with source ``builtin``.

The functions themselves live in private modules and are only reachable through a registry.
"""

from __future__ import annotations

import os
from typing import Any

from ..model import FunctionTool
from ..registry import ToolRegistry
from ._jobs import JobManager, register_command_tools
from ._load_tools import build_load_tools
from ._read_text import read_text
from ._restore import build_restore
from ._run_command import CommandConfig
from ._write_text import write_text

__all__ = [
    "BUILTIN_TOOLS",
    "CommandConfig",
    "JobManager",
    "default_registry",
    "register_builtins",
    "register_command_tools",
    "register_registry_tools",
]

#: Every built-in tool that needs nothing but itself, in registration order.
BUILTIN_TOOLS: tuple[FunctionTool, ...] = (read_text, write_text)


def register_builtins(
    registry: ToolRegistry, *, commands: CommandConfig | None = None
) -> ToolRegistry:
    """Register every built-in tool in ``registry``; return it. ``commands`` configures
    ``run_command`` and the job tools (``CommandConfig()`` by default)."""
    for t in BUILTIN_TOOLS:
        registry.register(t)
    register_command_tools(registry, commands)
    register_registry_tools(registry)
    return registry


def register_registry_tools(registry: ToolRegistry) -> ToolRegistry:
    """Register the tools that work on the registry itself: ``load_tools`` (a collapsed
    group's schemas) and ``restore`` (undo a write from its snapshot); return it. The groups
    of the built-in tools get their descriptions here too."""
    registry.register(build_load_tools(registry))
    registry.register(build_restore(registry))
    for group, text in _GROUPS.items():
        registry.group_descriptions.setdefault(group, text)
    return registry


def default_registry(
    workspace: str | os.PathLike[str] | None = None, **kwargs: Any
) -> ToolRegistry:
    """A registry with the built-in tools; keyword arguments go to ``ToolRegistry``."""
    return register_builtins(ToolRegistry(workspace=workspace, **kwargs))

_GROUPS = {
    "files": "Read and write text files in the workspace, and undo a write",
    "shell": "Run commands and follow their background jobs",
}
