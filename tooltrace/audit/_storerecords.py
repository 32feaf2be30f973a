"""What reading the audit trail answers and refuses with: query results, one call's detail, and
the lookup errors (no such call, an ambiguous prefix, one id recorded for several calls)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AmbiguousCallId",
    "CallDetail",
    "CallNotFound",
    "DuplicateCallId",
    "QueryResult",
    "ReadIssue",
]



class CallNotFound(LookupError):
    """No call has this id (or id prefix)."""


class AmbiguousCallId(LookupError):
    """An id prefix matches more than one call; ``matches`` lists some of them."""

    def __init__(self, prefix: str, matches: list[str]) -> None:
        super().__init__(f"call id prefix {prefix!r} matches {len(matches)}+ calls")
        self.prefix = prefix
        self.matches = matches


class DuplicateCallId(LookupError):
    """More than one call was recorded under one id; ``records`` names each (tool, start,
    writer, segment, line). Readers refuse to merge them into one call."""

    def __init__(self, call_id: str, records: list[dict[str, Any]]) -> None:
        super().__init__(f"call id {call_id} was recorded for {len(records)} different calls")
        self.call_id = call_id
        self.records = records


@dataclass(frozen=True, slots=True)
class ReadIssue:
    """Something a reader noticed while loading segments (verify says more)."""

    segment: str
    line: int | None
    message: str


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Columns and rows of one query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        """Rows as dicts keyed by column name."""
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


@dataclass(frozen=True, slots=True)
class CallDetail:
    """One call: its ``tool_calls`` row (None if only an intent exists), steps and intent."""

    call_id: str
    record: dict[str, Any] | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    intent: dict[str, Any] | None = None


def _one_call(call_id: str, records: list[dict[str, Any]] | None) -> None:
    """Refuse to merge: several records under one id are several calls (see
    ``DuplicateCallId``), whose steps cannot be told apart by id."""
    if records and len(records) > 1:
        keys = ("tool", "started_at", "writer", "segment", "line")
        raise DuplicateCallId(call_id, [{k: r.get(k) for k in keys} for r in records])
