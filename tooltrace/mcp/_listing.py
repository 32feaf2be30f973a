"""An upstream's listing read page by page, with the cache hint it came with.

At 2026-07-28 a listing result carries a cache hint: how long a client may reuse it
(``ttlMs``) and whether only it may (``cacheScope``: ``private``) or anyone (``public``). The
proxy lists every page of a server and hands the hint on with what it serves: over several pages
or servers, the shortest time, and ``private`` when any says so. A revision without hints gives
none, and neither does a page whose hint is only the SDK's default (one the server did not send).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MAX_PAGES", "Hint", "all_pages", "combined", "hint_fields"]

#: The most pages read of one listing: a server paging forever is a broken server.
MAX_PAGES = 100

#: A listing's cache hint: its time to live in milliseconds and its scope.
Hint = tuple[int, str]


def combined(hints: list[Hint | None]) -> Hint | None:
    """One hint for what several pages or servers listed: the shortest time, ``private`` when
    any says so; None when there are none, or any gave no hint."""
    if not hints or any(h is None for h in hints):
        return None
    given = [h for h in hints if h is not None]
    scope = "private" if any(h[1] != "public" for h in given) else "public"
    return min(h[0] for h in given), scope


def hint_fields(hint: Hint | None) -> dict[str, Any]:
    """``hint`` as a listing result's fields (``ttl_ms``, ``cache_scope``); empty for None."""
    return {} if hint is None else {"ttl_ms": hint[0], "cache_scope": hint[1]}


async def all_pages(session: Any, fetch: Callable[[Any], Any], field: str
                    ) -> tuple[list[Any], Hint | None]:
    """Every item of a listing (``fetch(session)`` lists one page; ``field`` names the items in
    a result), and its cache hint."""
    import mcp.types as mt

    items: list[Any] = []
    hints: list[Hint | None] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
        res = await fetch(session)(params=params)
        items.extend(getattr(res, field))
        sent = res.model_fields_set  # a hint the server gave, not the SDK's default
        ttl, scope = getattr(res, "ttl_ms", None), getattr(res, "cache_scope", None)
        hints.append((ttl, str(scope)) if {"ttl_ms", "cache_scope"} <= sent
                     and isinstance(ttl, int) and scope is not None else None)
        cursor = res.next_cursor
        if not cursor:
            break
    return items, combined(hints)
