"""Who a proxied call acts for, taken from its MCP session.

The client's ``clientInfo`` (from its ``initialize`` request) names the agent: ``name`` and,
when given, ``@version``, with any character a principal may not hold replaced by ``-``. Over
HTTP the proxy's ``principal_header`` (a ``[proxy]`` setting) names the user. Both go on the
call as its ``Principal`` and are checked like any principal a caller sends: a value that looks
like a secret, or a header value that is malformed, gets the call refused (and recorded).

Each principal's calls are a run of their own (calls with none stay in the registry's run), so
two clients of one HTTP proxy are never taken for one principal changing half-way through a run
(the protocol's newest version has no session to tell them apart by).
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from typing import Any

from .._ids import new_run_id
from ..model import Principal

__all__ = ["PrincipalRuns", "session_principal"]

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9@._:-]+")


def _agent_name(ctx: Any) -> str | None:
    params = getattr(getattr(ctx, "session", None), "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    if not isinstance(name, str):
        return None
    version = getattr(info, "version", None)
    return _agent(name, version if isinstance(version, str) else None)


@functools.lru_cache(maxsize=256)
def _agent(name: str, version: str | None) -> str | None:
    # Asked on every call with the session's same two strings: worked out once per client.
    if not name.strip():
        return None
    text = f"{name}@{version}" if version else name
    return _NOT_ALLOWED.sub("-", text.strip())[:128] or None


def _header(ctx: Any, header: str | None) -> str | None:
    if not header:
        return None
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get(header)
    except Exception:
        return None
    return str(value) if value else None


def session_principal(ctx: Any, header: str | None) -> Principal | None:
    """The principal of a call in ``ctx``'s MCP session: ``agent`` from the client's
    ``clientInfo``, ``user`` from the HTTP request's ``header`` (when configured and sent);
    ``None`` when neither is known."""
    agent, user = _agent_name(ctx), _header(ctx, header)
    if agent is None and user is None:
        return None
    return Principal(user=user, agent=agent)


class PrincipalRuns:
    """The run id of each principal the proxy has seen, a new one for each (the most recent
    4,096 are kept); calls with no principal stay in the registry's own run."""

    __slots__ = ("_lock", "_runs")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: OrderedDict[Principal, str] = OrderedDict()

    def run_of(self, principal: Principal | None) -> str | None:
        """``principal``'s run id (``None`` for no principal: the registry's run)."""
        if principal is None:
            return None
        with self._lock:
            run = self._runs.get(principal)
            if run is None:
                run = new_run_id()
                self._runs[principal] = run
                if len(self._runs) > 4096:
                    self._runs.popitem(last=False)
            return run
