"""Approvals bound to arguments: the digest an approval covers, and the approvals with a time
to live that later calls may reuse.

An approval covers one digest: the sha256 of the canonical JSON (keys sorted, no spaces) of the
call's *redacted* arguments, the arguments the audit trail records (``tool_calls
.args_redacted``), so anyone can recompute it from the trail. Raw arguments never enter it, so
the digest says nothing of a secret.

``ApprovalCache`` keeps the approvals given with a time to live, in this registry (one process),
until they expire: a later call of the same tool, for the same principal, with the same digest,
passes on one without asking. It does not read other processes' approvals from the trail.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, NamedTuple

import orjson

from ..model import Principal

__all__ = ["ApprovalCache", "Reusable", "arguments_sha256", "ttl_seconds", "wall_us"]

_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def _default(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(map(str, obj))
    return str(obj)


def arguments_sha256(redacted_arguments: Any) -> str:
    """sha256 (hex) of the canonical JSON of a call's redacted arguments: keys sorted, no
    whitespace, UTF-8. Equal arguments give equal digests whatever their key order; the
    digest of ``json.loads(tool_calls.args_redacted)`` is the same as the one recorded."""
    blob = orjson.dumps(redacted_arguments, default=_default, option=_OPTS)
    return hashlib.sha256(blob).hexdigest()


def wall_us() -> int:
    """Microseconds since the epoch: the clock approvals expire by (``ApprovalCache``)."""
    return time.time_ns() // 1000


def ttl_seconds(ttl: timedelta | float | int | None) -> float | None:
    """A time to live in seconds (None, or a value of 0 or less: no reuse)."""
    if ttl is None or isinstance(ttl, bool):
        return None
    s = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    return s if s > 0 else None


class Reusable(NamedTuple):
    """An approval later calls may pass on: its id, rule and when it expires."""

    approval_id: str
    rule: str
    expires_at_us: int


_Key = tuple[str, Principal | None, str]


class ApprovalCache:
    """The approvals with a time to live given in this registry, by (tool, principal, digest).

    Bounded: at most ``max_entries``; when full, the expired are dropped, then the oldest.
    ``clock``: microseconds since the epoch (``wall_us``); a test hands in one it moves."""

    def __init__(self, max_entries: int = 4096, clock: Callable[[], int] = wall_us) -> None:
        self.now_us = clock
        self._max = max_entries
        self._lock = threading.Lock()
        self._by_key: dict[_Key, Reusable] = {}

    def find(
        self, tool: str, principal: Principal | None, digest: str, now_us: int
    ) -> Reusable | None:
        """The unexpired approval covering these arguments, or None."""
        key = (tool, principal, digest)
        with self._lock:
            hit = self._by_key.get(key)
            if hit is not None and hit.expires_at_us <= now_us:
                del self._by_key[key]
                return None
            return hit

    def keep(
        self, tool: str, principal: Principal | None, digest: str, approval: Reusable, now_us: int
    ) -> None:
        """Remember an approval until it expires."""
        with self._lock:
            if len(self._by_key) >= self._max:
                live = {k: v for k, v in self._by_key.items() if v.expires_at_us > now_us}
                while len(live) >= self._max:
                    live.pop(next(iter(live)))
                self._by_key = live
            self._by_key[(tool, principal, digest)] = approval

    def clear(self) -> None:
        """Forget every approval (they are asked for again)."""
        with self._lock:
            self._by_key.clear()
