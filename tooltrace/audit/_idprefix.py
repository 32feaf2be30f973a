"""Call id prefixes that are unique in the trail, for tables people read and copy.

UUIDv7 ids made in the same millisecond share their first 13 characters and often many more
(the rest counts up within the millisecond), so a fixed-length prefix can name several calls.
Each id here is cut just after the first character that tells it apart from its neighbours in
the whole trail (ids sorted), and never before its 13th (the millisecond). ``tooltrace
autopsy`` and every command that takes a call id accept such a prefix.

Only the ids that share a listed id's first 13 characters can make its prefix longer, so only
those are read (one range of ids per millisecond, pruned like a lookup: ``AuditStore.
call_ids_between``, which after ``calls`` reads only the segments that command read when no
other can hold such an id), not every id in the trail.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._store import AuditStore

__all__ = ["MIN_PREFIX", "AmbiguousPrefix", "SeenIds", "ambiguous", "cut", "match_prefix",
           "unique_prefixes"]

#: The shortest prefix shown: the UUIDv7's millisecond, ``01a24a57-c7f7``.
MIN_PREFIX = 13

_ID = re.compile(r"^[0-9a-f-]+$")


class AmbiguousPrefix(LookupError):
    """An id prefix names several ids; ``matches`` lists them (sorted)."""

    def __init__(self, prefix: str, matches: Sequence[str]) -> None:
        super().__init__(f"id prefix {prefix[:40]!r} matches {len(matches)} ids")
        self.prefix = prefix
        self.matches = list(matches)


def ambiguous(prefix: str, matches: Sequence[str], what: str = "call id",
              store: Any = None) -> str:
    """The error every command gives for a prefix that names several ids (it exits 2). With
    the trail's ``store``, each call is named with its tool and start time, so whoever copied
    the prefix from a line can tell which call was theirs."""
    facts: dict[str, str] = {}
    listed = [m for m in matches[:4] if isinstance(m, str) and _ID.match(m)]
    if store is not None and listed:
        try:
            rows = store.sql("SELECT call_id, tool, started_at FROM tool_calls WHERE call_id IN ("
                             + ", ".join(f"'{m}'" for m in listed) + ")").rows
            facts = {str(r[0]): f" ({r[1]}, started {str(r[2])[11:23]})" for r in rows}
        except Exception:  # the ids alone still answer
            facts = {}
    shown = ", ".join(m + facts.get(m, "") for m in matches[:4])
    more = " ..." if len(matches) > 4 else ""
    return (f"{what} prefix {prefix[:40]!r} is ambiguous; it matches {shown}{more}"
            " -- give more characters")


def _common(a: str, b: str | None) -> int:
    if not b:
        return 0
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def cut(cid: str, near: Sequence[str]) -> str:
    """``cid`` cut just after the character that tells it apart from its neighbours in the
    sorted ``near`` (which holds it), never shorter than ``MIN_PREFIX``; whole when absent."""
    k = bisect.bisect_left(near, cid)
    if k == len(near) or near[k] != cid:
        return cid
    prev = near[k - 1] if k else None
    nxt = near[k + 1] if k + 1 < len(near) else None
    return cid[: max(MIN_PREFIX, max(_common(cid, prev), _common(cid, nxt)) + 1)]


def match_prefix(prefix: str, ids: Iterable[str]) -> str | None:
    """The one id among ``ids`` that starts with ``prefix`` (None when none does);
    ``AmbiguousPrefix`` when several do and none is ``prefix`` itself."""
    found = sorted({i for i in ids if i.startswith(prefix)})
    if prefix in found or len(found) == 1:
        return prefix if prefix in found else found[0]
    if found:
        raise AmbiguousPrefix(prefix, found)
    return None


class SeenIds:
    """The ids a live view has seen so far, each shown as its shortest prefix unique among
    them (``tail`` reads no database: a call of the same millisecond it never saw can
    still share a prefix shown; ``autopsy`` then names both)."""

    def __init__(self) -> None:
        self._sorted: list[str] = []

    def add(self, *ids: str) -> None:
        """Remember these ids (once each)."""
        for cid in ids:
            k = bisect.bisect_left(self._sorted, cid)
            if k == len(self._sorted) or self._sorted[k] != cid:
                self._sorted.insert(k, cid)

    def prefix(self, cid: str) -> str:
        """``cid``'s shortest prefix unique among the ids seen (it is remembered first)."""
        if not cid:
            return cid
        self.add(cid)
        return cut(cid, self._sorted)


def unique_prefixes(store: AuditStore, ids: Sequence[str]) -> dict[str, str]:
    """For each id, its shortest prefix (at least ``MIN_PREFIX`` characters) that no other
    call in the trail shares; an id the trail does not hold maps to itself."""
    wanted = sorted({i for i in ids if isinstance(i, str)})
    if not wanted:
        return {}
    out = {i: i for i in wanted}
    heads = sorted({i[:MIN_PREFIX] for i in wanted if len(i) >= MIN_PREFIX and _ID.match(i)})
    if not heads:
        return out
    near = store.call_ids_between([(h, h[:-1] + chr(ord(h[-1]) + 1)) for h in heads])
    for cid in wanted:
        out[cid] = cut(cid, near)
    return out
