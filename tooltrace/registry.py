"""The tool registry: registration, the shadow report, and the one execution entry.

``ToolRegistry.call`` (and its async twin ``acall``) is the only public way to run a tool. The
registry lives in ``tooltrace._registry``; the pipeline it drives, stage by stage, in the private
modules that module's docstring lists. This module re-exports the public names.
"""

from __future__ import annotations

from ._registry import Resolution, ToolRegistry, Visibility
from .envelope import CallStatus
from .sinks import LateStep

__all__ = ["CallStatus", "LateStep", "Resolution", "ToolRegistry", "Visibility"]
