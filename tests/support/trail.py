"""A real audit sink that counts its trail look-ups: whether a registry searched the trail for
a call's id, which it does for a supplied id it did not make (``ToolRegistry.new_call_id``)
during its first minutes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import uuid_utils

from tooltrace import PolicyDecision, PolicyRequest, ToolCall, ToolRegistry
from tooltrace.telemetry import AuditSink


class CountingTrail(AuditSink):
    """The audit sink, counting its trail look-ups."""

    lookups = 0

    def recorded(self, call_id: str) -> bool:
        self.lookups += 1
        return super().recorded(call_id)


def assert_ids_were_minted(
    reg: ToolRegistry, trail: CountingTrail, name: str, arguments: dict[str, Any]
) -> None:
    """No call so far had its id looked up in ``trail``, while a call of ``name`` under an id
    made elsewhere just now is (the control: the registry is in the window where a supplied id
    it did not make is searched)."""
    assert trail.lookups == 0
    env = reg.call(ToolCall(name, arguments, call_id=str(uuid_utils.uuid7())))
    assert env.ok, env.summary
    assert trail.lookups == 1


@dataclass
class SeenCallIds:
    """A policy rule that decides nothing and keeps the call id of every request it is asked
    about (an adapter's approval pre-check, then the registry's policy step)."""

    ids: list[str] = field(default_factory=list)
    name: str = "seen_call_ids"

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        self.ids.append(request.call_id)
        return None
