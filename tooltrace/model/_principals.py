"""Principals: who a call acts for, checked like any field a caller sends, and bound once per run.

A principal has two parts: whom the call acts for (user, tenant, roles) and the agent acting.
A run is bound to the first of its calls whose principal names a user, tenant or role (or to
the registry's ``principal`` for its own run); a later call of the run that names another user,
tenant or roles is refused, so an agent cannot change whom it acts for half-way through a run.
The agent may change within a run (a hand-off from one agent to another is not refused): each
call records the agent it names. A call that names no principal acts as the principal that
bound its run; one that names only an agent acts for the run's user, tenant and roles.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

import msgspec

from ._envelope import Principal

__all__ = ["RunPrincipals", "principal_problem"]

_VALUE_RE = re.compile(r"^[A-Za-z0-9@._:-]{1,128}$")
_MAX_ROLES = 32


def principal_problem(p: Any, is_clean: Any) -> str | None:
    """Why ``p`` is no usable principal (a value is malformed or looks like a secret), or
    None. ``is_clean`` is the registry's redactor's ``is_clean``."""
    if not isinstance(p, Principal):
        return "principal must be a Principal"
    values: list[Any] = [v for v in (p.user, p.agent, p.tenant) if v is not None]
    roles: Any = p.roles
    if not isinstance(roles, tuple) or len(roles) > _MAX_ROLES:
        return f"principal roles must be a tuple of at most {_MAX_ROLES} names"
    values.extend(roles)
    for v in values:
        if type(v) is not str or not _VALUE_RE.match(v) or not is_clean(v):
            return "principal values must be 1-128 characters of [A-Za-z0-9@._:-], not secrets"
    return None


class RunPrincipals:
    """The principal each recent run is bound to (the most recent 4,096 runs are kept)."""

    __slots__ = ("_by_run", "_lock", "used")

    def __init__(self) -> None:
        self._by_run: OrderedDict[str, Principal] = OrderedDict()
        self._lock = threading.Lock()
        #: Whether any principal was named yet (until then calls need not look one up).
        self.used = False

    @classmethod
    def starting(cls, run_id: str, principal: Principal | None, redactor: Any) -> RunPrincipals:
        """A table with ``run_id`` bound to ``principal`` (when given; ``ValueError`` when it
        is unusable)."""
        table = cls()
        if principal is not None:
            why = principal_problem(principal, redactor.is_clean)
            if why is not None:
                raise ValueError(why)
            table.bind(run_id, principal)
        return table

    def peek(self, run_id: str, principal: Principal | None) -> Principal | None:
        """Whom a call of ``run_id`` naming ``principal`` would act as, binding nothing (a
        principal the run would refuse is given as the run's)."""
        with self._lock:
            bound = self._by_run.get(run_id)
        if principal is None or bound is None:
            return principal or bound
        if not _names_whom(principal):
            return bound if principal.agent is None else \
                msgspec.structs.replace(bound, agent=principal.agent)
        return principal if _whom(principal) == _whom(bound) or not _names_whom(bound) \
            else bound

    def bind(self, run_id: str, principal: Principal | None) -> tuple[Principal | None, bool]:
        """``(the call's principal, True)``, binding the run to ``principal`` when it is the
        run's first to name a user, tenant or role; ``(the run's principal, False)`` when
        ``principal`` names other ones than those the run is bound to."""
        with self._lock:
            bound = self._by_run.get(run_id)
            if principal is None:
                return bound, True
            if bound is None or (_names_whom(principal) and not _names_whom(bound)):
                self.used = True
                self._by_run[run_id] = principal
                if len(self._by_run) > 4096:
                    self._by_run.popitem(last=False)
                return principal, True
            if not _names_whom(principal):
                # Only the agent acting: it acts for the run's user, tenant and roles.
                if principal.agent is None or principal.agent == bound.agent:
                    return bound, True
                return msgspec.structs.replace(bound, agent=principal.agent), True
            if _whom(principal) != _whom(bound):
                return bound, False
            return principal, True


def _whom(p: Principal) -> tuple[str | None, str | None, tuple[str, ...]]:
    """Whom a call acts for: the user, tenant and roles (the agent acting is not part of it)."""
    return p.user, p.tenant, p.roles


def _names_whom(p: Principal) -> bool:
    return p.user is not None or p.tenant is not None or bool(p.roles)
