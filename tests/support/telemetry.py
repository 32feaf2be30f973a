"""Builders of hand-made call records for the telemetry sink tests."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import Any

from tooltrace.model import Artifact, CallRecord, Stage, Status, Step
from tooltrace.telemetry.tracing import SpanHandle

__all__ = ["make_record", "steps_for"]

_ids = itertools.count(1)


def steps_for(status: Status, start_us: int, *, warn: bool = False) -> tuple[Step, ...]:
    """A plausible step list for a call that ended with ``status``."""
    steps = [
        Step(0, "resolve", start_us, 5, "registry", "accept"),
        Step(1, "validate", start_us + 5, 20, "schema", "accept"),
    ]
    if warn:
        steps.append(Step(2, "pre_hook", start_us + 25, 30, "hook:guard", "warn",
                          {"reason": "large read"}))
    if status is Status.REJECTED:
        steps.append(Step(len(steps), "policy", start_us + 60, 10, "policy:no-write", "reject"))
        return tuple(steps)
    steps.append(Step(len(steps), "admission", start_us + 60, 400, "runtime", "accept"))
    steps.append(Step(len(steps), "execute", start_us + 460, 1000, "tool",
                      "ok" if status is Status.OK else status.value))
    return tuple(steps)


def make_record(
    tool: str = "read_text",
    status: Status = Status.OK,
    *,
    handle: SpanHandle | None = None,
    elapsed_us: int = 1500,
    started_at_us: int | None = None,
    reject_stage: Stage | None = None,
    error_type: str | None = None,
    args: Mapping[str, Any] | None = None,
    result_preview: str | None = "hello",
    artifact: Artifact | None = None,
    steps: tuple[Step, ...] | None = None,
    warn: bool = False,
    run_id: str = "run-1",
    **extra: Any,
) -> CallRecord:
    """A finished record; ``handle`` supplies trace ids as the registry would."""
    start = int(time.time() * 1e6) if started_at_us is None else started_at_us
    if status is Status.REJECTED and reject_stage is None:
        reject_stage = Stage.POLICY
    ids: dict[str, Any] = {}
    if handle is not None:
        ids = {
            "trace_id": handle.trace_id,
            "span_id": handle.span_id,
            "parent_span_id": handle.parent_span_id,
            "trace_sampled": handle.sampled,
        }
    return CallRecord(
        call_id=f"0190c0de-0000-7000-8000-{next(_ids):012d}",
        run_id=run_id,
        tool=tool,
        source="user",
        status=status,
        reject_stage=reject_stage,
        summary=f"{tool} {status.value}",
        error_type=error_type,
        started_at_us=start,
        elapsed_us=elapsed_us,
        execution_started=status is not Status.REJECTED,
        args_redacted={"path": "notes.txt"} if args is None else args,
        result_preview=result_preview if status is Status.OK else None,
        artifact=artifact,
        steps=steps_for(status, start, warn=warn) if steps is None else steps,
        **ids,
        **extra,
    )
