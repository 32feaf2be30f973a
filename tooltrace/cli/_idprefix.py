"""Call id prefixes that are unique in the trail, for tables people read and copy.

UUIDv7 ids made in the same millisecond share their first 13 characters and often many more
(the rest counts up within the millisecond), so a fixed-length prefix can name several calls.
Each id here is cut just after the first character that tells it apart from its neighbours in
the whole trail (ids sorted), and never before its 13th (the millisecond). ``tooltrace
autopsy`` and every command that takes a call id accept such a prefix.

Only the ids that share a listed id's first 13 characters can make its prefix longer, so only
those are read (one range of ids per millisecond, pruned like a lookup), not every id in the
trail; and the ranges are written into the query rather than bound as a parameter (DuckDB's
client imports numpy and pandas to bind a list: 100 MiB more for a command that lists 20 calls).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["MIN_PREFIX", "unique_prefixes"]

#: The shortest prefix shown: the UUIDv7's millisecond, ``01a24a57-c7f7``.
MIN_PREFIX = 13

_ID = re.compile(r"^[0-9a-f-]+$")


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
    out = {i: i for i in wanted}
    heads = sorted({i[:MIN_PREFIX] for i in wanted if len(i) >= MIN_PREFIX and _ID.match(i)})
    if not heads:
        return out
    ranges = " OR ".join(f"(call_id >= '{h}' AND call_id < '{h[:-1]}{chr(ord(h[-1]) + 1)}')"
                         for h in heads)
    near = sorted({str(r[0]) for r in store.sql(
        f"SELECT DISTINCT call_id FROM tool_calls WHERE {ranges}").rows})
    at = {cid: k for k, cid in enumerate(near)}
    for cid in wanted:
        k = at.get(cid)
        if k is None:
            continue
        prev = near[k - 1] if k else None
        nxt = near[k + 1] if k + 1 < len(near) else None
        n = max(_common(cid, prev), _common(cid, nxt)) + 1
        out[cid] = cid[: max(MIN_PREFIX, n)]
    return out
