"""What the Pydantic AI and OpenAI Agents adapters share beyond ``adapter``: a
framework's own approval flow as tooltrace's approver, whether policy would ask a person about
a call, and a framework tool's return value as plain JSON types. No framework is imported here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..model import Principal
from ..policy import ApprovalDecision, ApprovalRequest, PolicyRequest, Verdict
from .adapter import acting_principal

if TYPE_CHECKING:
    from ..registry import ToolRegistry

__all__ = ["Approver", "FrameworkApprover", "approval_reason", "jsonable"]

#: What ``ToolRegistry(approver=...)`` takes.
Approver = Callable[[ApprovalRequest], ApprovalDecision]


def approval_reason(
    registry: ToolRegistry,
    name: str,
    arguments: Any,
    *,
    mode: str,
    run_id: str | None,
    call_id: str,
    principal: Principal | None = None,
    agent: object = None,
) -> str | None:
    """Why policy would ask a person about this call, or None when it would not.

    Used to tell a framework a call needs its approval flow; the registry still decides when
    the call runs (a rule that errors here is left to it). ``principal`` and ``agent`` are the
    adapter's, as for ``make_call``: the policy is asked about the principal the call would
    act as (``acting_principal``, then the run's binding), as the registry's policy step is.
    """
    definition = registry.definition(name)
    if definition is None or not isinstance(arguments, Mapping):
        return None
    run = run_id or registry.run_id
    who = registry.acting_principal(run, acting_principal(principal, agent))
    request = PolicyRequest(definition, arguments, mode, run, call_id, principal=who)
    try:
        decision, _ = registry.policy.evaluate(request)
    except Exception:
        return None
    if decision is None or decision.verdict is not Verdict.ASK:
        return None
    return decision.reason or f"policy rule {decision.rule} asks for approval"


class FrameworkApprover:
    """Tooltrace's approver, answered by a framework's own approval flow.

    Pass it as ``ToolRegistry(approver=...)`` and to the adapter. When policy asks about a call,
    the adapter has the framework interrupt the run for a person; once the run resumes with
    the call approved, the adapter grants that call's tooltrace id and the registry's approval
    step gets yes from here (decider ``user:<who>``). Any other request goes to ``fallback``,
    or is refused when there is none.
    """

    def __init__(self, fallback: Approver | None = None) -> None:
        self.fallback = fallback
        self._granted: dict[str, str] = {}
        self._lock = threading.Lock()

    @contextmanager
    def granted(self, call_id: str, who: str) -> Iterator[None]:
        """Within the block, approve the call ``call_id`` on behalf of ``who``."""
        with self._lock:
            self._granted[call_id] = who
        try:
            yield
        finally:
            with self._lock:
                self._granted.pop(call_id, None)

    def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        with self._lock:
            who = self._granted.get(request.call_id)
        if who is not None:
            return ApprovalDecision(True, who, "approved in the framework's approval flow")
        if self.fallback is not None:
            return self.fallback(request)
        return ApprovalDecision(False, "tooltrace", "not approved in the framework's approval flow")


def jsonable(value: Any) -> Any:
    """A framework tool's return value as plain JSON types, so redaction sees its content."""
    if value is None or isinstance(value, str | int | float | bool | list | dict):
        return value
    try:
        from pydantic_core import to_jsonable_python

        return to_jsonable_python(value)
    except Exception:
        return str(value)
