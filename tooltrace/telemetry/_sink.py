"""The sink protocols as ``tooltrace.telemetry`` offers them; they are declared, with the roles a
sink may take on, in ``tooltrace.sinks`` (the registry emits to them and imports nothing from
this package)."""

from __future__ import annotations

from ..sinks import (
    BindingSink,
    DurableSink,
    LateSink,
    LateStep,
    OpenSpan,
    RegistryState,
    Sink,
    SpanOpener,
)

__all__ = [
    "BindingSink",
    "DurableSink",
    "LateSink",
    "LateStep",
    "OpenSpan",
    "RegistryState",
    "Sink",
    "SpanOpener",
]
