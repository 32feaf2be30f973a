"""The stages after execution: the execute step as recorded, the outcome rules applied, and an
``ok`` result redacted, trimmed and, when it is too long to stay inline, offloaded to an
artifact (the envelope then holds a preview and the artifact's sha256).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from ..model import (
    Artifact,
    Effect,
    Entry,
    Retry,
    Status,
    Step,
    StepName,
    ToolDefinition,
    ToolResult,
    ToolResultEnvelope,
)
from ..redaction import preview
from ..runtime import CallContext
from ._outcome import Outcome, error_type, outcome_rules
from ._record import Builder, Made, error_text, redact_detail
from ._snapshots import snapshot_after

if TYPE_CHECKING:
    from ._environment import Environment

__all__ = ["finish"]

# Step names and enum members every call uses, as module constants: a member looked up on its class
# costs 72 ns (CPython 3.11, timeit), against 7 ns for a global.
_EXECUTE = StepName.EXECUTE
_REDACT = StepName.REDACT
_OK, _NO_EFFECT = Status.OK, Effect.NONE

_perf_ns = time.perf_counter_ns


def finish(
    env: Environment, b: Builder, entry: Entry, ctx: CallContext, out: Outcome, t: int
) -> ToolResultEnvelope:
    """Record the execute step (begun at ``t``), map the outcome to a status, and make the
    envelope (not emitted: post-hooks come first). A tool that writes files has what it left
    noted first (``_snapshotstage``)."""
    d = entry.definition
    if ctx.snapshots:
        snapshot_after(env, b, d.name, tuple(ctx.snapshots.values()), out.kind != "abandoned")
    signal = out.signal
    value = out.value
    tool_summary: str | None = None
    result_detail: Mapping[str, Any] | None = None
    if type(value) is ToolResult or isinstance(value, ToolResult):
        tool_summary = value.summary
        result_detail = value.detail
        value = value.data
    if ctx.detail or signal or result_detail:
        detail: Mapping[str, Any] = _execute_detail(env, ctx, signal, result_detail)
    else:
        detail = Made(timeout_s=ctx.timeout_s)
    now = b.step(_EXECUTE, t, "tool", out.kind, detail)
    if signal is not None:
        _signal_steps(env, b, d, out, signal)
    status, summary, retry, etype = outcome_rules(
        out.kind,
        signal,
        out.error,
        side_effects=d.effect is not _NO_EFFECT,
        tool=d.name,
        # Raw: the record builder redacts the summary, then cuts it (Builder.envelope).
        tool_summary=str(tool_summary) if tool_summary else "",
        error_text=error_text(env, out.error) if out.error is not None else "",
        timeout_s=ctx.timeout_s,
        grace_s=env.cancel_grace_s,
        call_id=b.call_id,
    )
    b.error_type = etype
    if status is not _OK:
        return b.envelope(status, summary, None, None, None, None, retry=retry)
    return _deliver(env, b, d, value, summary, retry, now)


def _execute_detail(
    env: Environment,
    ctx: CallContext,
    signal: str | None,
    result_detail: Mapping[str, Any] | None,
) -> Mapping[str, Any]:
    """The execute step's detail: the timeout, the signal (a closed set), and what the tool and
    the runtime added, redacted here."""
    out = Made(timeout_s=ctx.timeout_s)
    if ctx.detail:
        out.update(redact_detail(env, ctx.detail))
    if signal is not None:
        out["signal"] = signal
    if result_detail:
        out.update(redact_detail(env, dict(result_detail)))
    return out


def _signal_steps(
    env: Environment, b: Builder, d: ToolDefinition, out: Outcome, signal: str
) -> None:
    """The steps of a tool told to stop: when it was told (a deadline or a cancel request) and
    whether it confirmed (a confirmed cancel is its own step, ``cancelled``)."""
    steps = b.steps
    if out.signal_at is not None:
        name = StepName.DEADLINE if signal == "deadline" else StepName.CANCEL_REQUESTED
        detail = {"cancellable": d.cancellable, "grace_s": env.cancel_grace_s}
        steps.append(
            Step(
                len(steps),
                name,
                b.us_mono(int(out.signal_at * 1e9)),
                0,
                "runtime",
                "signal",
                detail,
            )
        )
    confirmed = out.kind != "abandoned"
    name = StepName.CANCELLED if confirmed and signal == "cancel" else StepName.STOPPED
    decision = "confirmed" if confirmed else "unconfirmed"
    steps.append(
        Step(len(steps), name, b.us(_perf_ns()), 0, "runtime", decision, {"outcome": out.kind})
    )


def _deliver(
    env: Environment,
    b: Builder,
    d: ToolDefinition,
    value: Any,
    summary: str,
    retry: Retry,
    t: int,
) -> ToolResultEnvelope:
    """An ``ok`` result redacted and trimmed (offloaded when long); ``summary`` is the tool's
    own, or a note to follow the one made here."""
    artifact: Artifact | None = None
    data, n = env.redactor.redact(value)
    text = data if type(data) is str else _to_text(data)
    result_preview = text[: env.preview_chars] if text is not None else None
    t = b.step(_REDACT, t, "redactor", "redacted" if n else "clean",
               {"redactions": n} if n else None)
    if text is not None and len(text) > env.max_inline_chars:
        try:
            artifact = env.artifacts.put(text)
        except OSError as exc:
            b.step(StepName.OFFLOAD, _perf_ns(), "runtime", "error", {"error": error_type(exc)})
            artifact = None
        else:
            stored = {"chars": artifact.chars, "sha256": artifact.sha256, "path": artifact.path}
            b.step(StepName.OFFLOAD, t, "runtime", "offloaded", stored)
        data = preview(text, env.preview_chars)
        result_preview = data
    # Made here from the tool's name and numbers alone (no tool text, no artifact's digest):
    # the same text recurs, and its scrubbed form is remembered.
    made = not summary and artifact is None
    if not summary or summary.startswith(" ("):
        size = len(text) if text is not None else 0
        where = f"; full output in artifact sha256:{artifact.sha256[:12]}" if artifact else ""
        summary = f"{d.name} succeeded ({size} chars{where})" + summary
    return b.envelope(
        _OK, summary, data, artifact, None, result_preview, retry=retry, made=made
    )


def _to_text(value: Any) -> str | None:
    if value is None:
        return None
    if type(value) is int:
        return str(value)  # the same text as JSON, without the encoder
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return str(value)
