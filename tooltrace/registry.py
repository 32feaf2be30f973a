"""The tool registry: registration, the shadow report, and the one execution entry.

``ToolRegistry.call`` (and its async twin ``acall``) is the only public way to run a tool. The
registry lives in ``tooltrace._registry`` (its docstring maps the private modules of the call
path); this module re-exports the public names.
"""

from __future__ import annotations

from ._registry import Approver as Approver
from ._registry import ToolRegistry
from ._tooltable import Resolution, Visibility
from .envelope import CallStatus
from .envelope import Status as Status  # importable from here before the split; still is
from .sinks import LateStep

__all__ = ["CallStatus", "LateStep", "Resolution", "ToolRegistry", "Visibility"]
