"""What the console's pages read: calls, runs and per-tool figures from the audit trail (a
DuckDB store opened per request, read-only and locked to the trail), the approval queue, and the
call and run reports. Every function is blocking; the app runs them on worker threads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..audit import AuditStore

__all__ = ["CallFilter", "Trail"]

_RUNS = """
SELECT run_id, count(*) AS calls,
       count(*) FILTER (WHERE status = 'ok') AS ok,
       count(*) FILTER (WHERE status = 'rejected') AS rejected,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE outcome = 'unknown') AS unknown,
       min(started_at) AS first_at, max(started_at) AS last_at,
       string_agg(DISTINCT tool, ', ' ORDER BY tool) AS tools
FROM tool_calls GROUP BY run_id ORDER BY max(call_id) DESC LIMIT 200
"""

_RATE = """
SELECT tool, epoch(date_trunc('minute', started_at))::BIGINT AS minute, count(*) AS calls
FROM tool_calls
WHERE started_at >= (SELECT max(started_at) FROM tool_calls) - INTERVAL 60 MINUTE
GROUP BY ALL ORDER BY tool, minute
"""


@dataclass(frozen=True, slots=True)
class CallFilter:
    """The live calls page's filters (None: any)."""

    status: str | None = None
    tool: str | None = None
    run_id: str | None = None
    user: str | None = None

    def matches(self, line: dict[str, Any]) -> bool:
        """Whether a trail line (a finished call) passes the filters."""
        principal = line.get("principal") or {}
        return ((self.status is None or line.get("status") == self.status)
                and (self.tool is None or line.get("tool") == self.tool)
                and (self.run_id is None or line.get("run_id") == self.run_id)
                and (self.user is None or principal.get("user") == self.user))


class Trail:
    """The home's trail, read through a fresh DuckDB store per question."""

    def __init__(self, home: Path) -> None:
        self.home = home

    @contextmanager
    def store(self) -> Iterator[AuditStore | None]:
        """A store over the trail (None while there is no trail yet)."""
        if not (self.home / "audit").is_dir():
            yield None
            return
        from ..audit import AuditStore

        s = AuditStore(self.home)
        try:
            yield s
        finally:
            s.close()

    def calls(self, f: CallFilter, limit: int = 200) -> list[dict[str, Any]]:
        """The newest calls passing ``f``."""
        with self.store() as s:
            if s is None:
                return []
            return s.calls(tool=f.tool, status=f.status, run_id=f.run_id, user=f.user,
                           limit=limit).dicts()

    def runs(self) -> list[dict[str, Any]]:
        """The newest runs with their outcome counts."""
        with self.store() as s:
            return [] if s is None else s.sql(_RUNS).dicts()

    def stats(self) -> tuple[list[dict[str, Any]], dict[str, list[tuple[int, int]]]]:
        """Per tool figures (the ``tool_stats`` query) and calls per minute over the last hour
        of activity, by tool."""
        from ..audit import find_sql

        q = find_sql("tool_stats")
        assert q is not None, "the tool_stats query ships with tooltrace"
        with self.store() as s:
            if s is None:
                return [], {}
            rows = s.sql(q.text, q.bind({})).dicts()
            rate: dict[str, list[tuple[int, int]]] = {}
            for tool, minute, n in s.sql(_RATE).rows:
                rate.setdefault(str(tool), []).append((int(minute), int(n)))
        return rows, rate

    def report(self, kind: str, ident: str) -> Any:
        """The report of a call or a run (``tooltrace.report``), or None when not there."""
        from ..audit import CallNotFound
        from ..report import build_call_report, build_run_report

        with self.store() as s:
            if s is None:
                return None
            try:
                return (build_call_report(s, ident) if kind == "call"
                        else build_run_report(s, ident))
            except (CallNotFound, LookupError):
                return None

    def kind_of(self, ident: str) -> str | None:
        """``call`` or ``run`` for an id in the trail, else None."""
        with self.store() as s:
            if s is None:
                return None
            r = s.sql("SELECT (SELECT count(*) FROM tool_calls WHERE call_id = $i), "
                      "(SELECT count(*) FROM tool_calls WHERE run_id = $i)", {"i": ident}).rows
        if r and r[0][0]:
            return "call"
        if r and r[0][1]:
            return "run"
        return None
