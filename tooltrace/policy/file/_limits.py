"""Limits a policy file sets per run or per principal: calls, calls per minute, calls at once.

A ``LimitRule`` is a policy rule with state: it counts the calls it allowed under a key (the
run, or the principal) and denies the one over a limit. Calls at once are released when the
call's record is emitted: ``LimitRelease`` is the sink that does it (``create_registry`` attaches
it with the file's policy). What-if replays the same counting with recorded times.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from ...model import CallRecord, Principal, ToolDefinition
from .._rules import PolicyDecision, PolicyRequest, Verdict
from ._rules import Match, observed

__all__ = ["LimitRelease", "LimitRule", "limit_key"]


def limit_key(per: str, run_id: str, principal: Principal | None) -> str:
    """The counter a call counts against: its run, or its principal (user, agent, tenant)."""
    if per == "run":
        return run_id
    if principal is None:
        return "-"
    return f"{principal.user or '-'}|{principal.agent or '-'}|{principal.tenant or '-'}"


@dataclass(eq=False)
class LimitRule:
    """Deny a matching call over ``max_calls``, ``per_minute`` or ``max_concurrent`` under
    its key (``per``: ``run`` or ``principal``)."""

    name: str
    """The limit's id (``policy:<id>`` in decisions)."""
    match: Match
    """Which calls count."""
    per: str = "run"
    """``run`` or ``principal``."""
    max_calls: int | None = None
    """Matching calls allowed per key in all."""
    per_minute: int | None = None
    """Matching calls allowed per key in any 60 seconds."""
    max_concurrent: int | None = None
    """Matching calls per key running at once."""
    observe: bool = False
    """Observe mode: record what the limit would do and let the call go on."""
    _counts: dict[str, int] = field(default_factory=dict, repr=False)
    _recent: dict[str, deque[float]] = field(default_factory=dict, repr=False)
    _running: dict[str, list[tuple[str, float]]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Calls already counted: a call is decided again after a hook changed its arguments (and
    # an adapter may ask ahead of the call), and must count once.
    _counted: OrderedDict[str, None] = field(default_factory=OrderedDict, repr=False)

    def applies_to(self, tool: ToolDefinition) -> bool:
        """Whether calls of ``tool`` count."""
        return self.match.tool(tool)

    def names_tool(self, name: str) -> bool:
        """Whether the limit's ``tools`` list names ``name``."""
        return self.match.names(name)

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        if not (self.match.tool(request.tool)
                and self.match.call(request.mode, request.principal)):
            return None
        key = limit_key(self.per, request.run_id, request.principal)
        return self.take(key, time.monotonic(), request.call_id, float("inf"))

    def take(self, key: str, now: float, call_id: str, ends: float) -> PolicyDecision | None:
        """Count one call under ``key`` at ``now`` (seconds) that runs until ``ends`` (inf:
        until released); the decision when it is over a limit."""
        with self._lock:
            if call_id in self._counted:
                return None
            over = self._over(key, now)
            if over is None or self.observe:
                self._counted[call_id] = None
                if len(self._counted) > 65536:
                    self._counted.popitem(last=False)
                self._counts[key] = self._counts.get(key, 0) + 1
                if self.per_minute is not None:
                    self._recent.setdefault(key, deque()).append(now)
                if self.max_concurrent is not None:
                    self._running.setdefault(key, []).append((call_id, ends))
        if over is None:
            return None
        return PolicyDecision(observed(Verdict.DENY, self.observe), self.name, over)

    def _over(self, key: str, now: float) -> str | None:
        if self.max_calls is not None and self._counts.get(key, 0) >= self.max_calls:
            return f"over the limit of {self.max_calls} calls per {self.per}"
        if self.per_minute is not None:
            recent = self._recent.get(key)
            while recent and recent[0] <= now - 60.0:
                recent.popleft()
            if recent is not None and len(recent) >= self.per_minute:
                return f"over the limit of {self.per_minute} calls per minute per {self.per}"
        if self.max_concurrent is not None:
            running = [r for r in self._running.get(key, ()) if r[1] > now]
            self._running[key] = running
            if len(running) >= self.max_concurrent:
                return f"over the limit of {self.max_concurrent} calls at once per {self.per}"
        return None

    def release(self, call_id: str) -> None:
        """The call ended: it no longer counts as running."""
        if self.max_concurrent is None:
            return
        with self._lock:
            for key, running in self._running.items():
                kept = [r for r in running if r[0] != call_id]
                if len(kept) != len(running):
                    self._running[key] = kept
                    return


class LimitRelease:
    """The sink that tells a file's limits a call ended (releases its calls-at-once slot)."""

    name = "policy_limits"

    def __init__(self, limits: tuple[LimitRule, ...]) -> None:
        self._limits = tuple(x for x in limits if x.max_concurrent is not None)
        #: Records that could not be handled (counted, never raised).
        self.dropped = 0

    def emit(self, record: CallRecord) -> None:
        """Release the call's slot in every limit that counted it."""
        try:
            for limit in self._limits:
                limit.release(record.call_id)
        except Exception:
            self.dropped += 1

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Nothing is queued."""
        return True

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Nothing to release."""
