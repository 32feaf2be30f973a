"""Helpers for testing code that uses tooltrace: an in-memory sink that keeps every record."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .model import CallRecord

if TYPE_CHECKING:
    from .sinks import LateStep

__all__ = ["RecordingSink"]


class RecordingSink:
    """A sink that keeps every ``CallRecord`` and late step in memory (thread-safe)."""

    name = "recording"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[CallRecord] = []
        self.late: list[LateStep] = []
        self.dropped = 0
        self.depth = 0

    def emit(self, record: CallRecord) -> None:
        """Keep the record."""
        with self._lock:
            self.records.append(record)

    def emit_late(self, late: LateStep) -> None:
        """Keep a step recorded after its call returned."""
        with self._lock:
            self.late.append(late)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Nothing is queued: always True."""
        return True

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Nothing to release."""

    def by_id(self, call_id: str) -> list[CallRecord]:
        """Every record emitted for ``call_id`` (exactly one when all is well)."""
        with self._lock:
            return [r for r in self.records if r.call_id == call_id]

    def clear(self) -> None:
        """Forget everything kept so far."""
        with self._lock:
            self.records.clear()
            self.late.clear()
