"""Principals: who a call acts for, checked like any field a caller sends, and bound once per run.

A run's principal is set by the first call that names one (or by the registry's ``principal``
for its own run); a later call of the run that names another is refused, so an agent cannot
change whom it acts for half-way through a run. Calls that name none inherit the run's.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

from . import _build
from .envelope import Principal

__all__ = ["RunPrincipals", "principal_problem"]

_VALUE_RE = re.compile(r"^[A-Za-z0-9@._:-]{1,128}$")
_MAX_ROLES = 32


def principal_problem(p: Any, redact_text: Any) -> str | None:
    """Why ``p`` is no usable principal (a value is malformed or looks like a secret), or
    None. ``redact_text`` is the registry's redactor's ``redact_text``."""
    if not isinstance(p, Principal):
        return "principal must be a Principal"
    values: list[Any] = [v for v in (p.user, p.agent, p.tenant) if v is not None]
    roles: Any = p.roles
    if not isinstance(roles, tuple) or len(roles) > _MAX_ROLES:
        return f"principal roles must be a tuple of at most {_MAX_ROLES} names"
    values.extend(roles)
    for v in values:
        if type(v) is not str or not _VALUE_RE.match(v) or redact_text(v) != v:
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
            why = principal_problem(principal, redactor.redact_text)
            if why is not None:
                raise ValueError(why)
            table.bind(run_id, principal)
        return table

    def bind(self, run_id: str, principal: Principal | None) -> tuple[Principal | None, bool]:
        """``(the run's principal, True)`` after binding ``principal`` to the run when it has
        none; ``(the bound one, False)`` when the run is bound to another principal."""
        with self._lock:
            bound = self._by_run.get(run_id)
            if bound is None:
                if principal is None:
                    return None, True
                self.used = True
                self._by_run[run_id] = principal
                if len(self._by_run) > 4096:
                    self._by_run.popitem(last=False)
                return principal, True
            if principal is None or principal == bound:
                return bound, True
            return bound, False


_build.keep_docs(__name__, globals())
