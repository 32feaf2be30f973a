"""Call id prefixes that are unique in the trail, for tables people read and copy.

UUIDv7 ids made in the same millisecond share their first 13 characters and often many more
(the rest counts up within the millisecond), so a fixed-length prefix can name several calls.
Each id here is cut just after the first character that tells it apart from its neighbours in
the whole trail (ids sorted), and never before its 13th (the millisecond). ``tooltrace
autopsy`` and every command that takes a call id accept such a prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["MIN_PREFIX", "unique_prefixes"]

#: The shortest prefix shown: the UUIDv7's millisecond, ``01a24a57-c7f7``.
MIN_PREFIX = 13

_NEIGHBOURS = """
SELECT call_id, prev, next FROM (
  SELECT call_id, lag(call_id) OVER w AS prev, lead(call_id) OVER w AS next
  FROM tool_calls WINDOW w AS (ORDER BY call_id)
) WHERE list_contains($ids, call_id)
"""


def _common(a: str, b: str | None) -> int:
    if not b:
        return 0
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def unique_prefixes(store: Any, ids: Sequence[str]) -> dict[str, str]:
    """For each id, its shortest prefix (at least ``MIN_PREFIX`` characters) that no other
    call in the trail shares; an id the trail does not hold maps to itself."""
    wanted = sorted({i for i in ids if isinstance(i, str)})
    if not wanted:
        return {}
    res = store.sql(_NEIGHBOURS, {"ids": wanted})
    out = {i: i for i in wanted}
    for cid, prev, nxt in res.rows:
        cid = str(cid)
        n = max(_common(cid, prev and str(prev)), _common(cid, nxt and str(nxt))) + 1
        out[cid] = cid[: max(MIN_PREFIX, n)]
    return out
