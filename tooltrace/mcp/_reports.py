"""What the MCP proxy reports about itself: servers, exposed tools, and name collisions."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..model import Resolution

__all__ = ["Collision", "ProxyReport", "ServerReport", "ToolReport"]


@dataclass(frozen=True, slots=True)
class ToolReport:
    """One upstream tool: the name it is exposed under, and whether it is active."""

    name: str
    server: str
    upstream_name: str
    state: str  # active | shadowed | skipped
    pin: str  # new | pinned | changed
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Collision:
    """A tool name offered by more than one server, and how the configured rule resolved it."""

    upstream_name: str
    servers: tuple[str, ...]
    rule: str
    resolution: str


@dataclass(frozen=True, slots=True)
class ServerReport:
    """One upstream server's state."""

    label: str
    state: str
    tools: int
    restarts: int
    error: str | None


@dataclass(frozen=True, slots=True)
class ProxyReport:
    """What the proxy exposes: servers, tools (with pin state), collisions, the shadow report."""

    servers: tuple[ServerReport, ...]
    tools: tuple[ToolReport, ...]
    collisions: tuple[Collision, ...]
    resolution: tuple[Resolution, ...]
    conflicts: tuple[str, ...] = field(default=())

    @property
    def changed(self) -> tuple[ToolReport, ...]:
        """Tools whose description or schema changed since they were pinned."""
        return tuple(t for t in self.tools if t.pin == "changed")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form."""
        return {
            "servers": [asdict(s) for s in self.servers],
            "tools": [asdict(t) for t in self.tools],
            "collisions": [asdict(c) for c in self.collisions],
            "conflicts": list(self.conflicts),
            "resolution": [asdict(r) for r in self.resolution],
        }
