"""What execution produced (``Outcome``) and what it means: the outcome rules, in one place.

The rules (what a post-mortem relies on):

- ``rejected``: the execute step never started (resolve, params, policy, approval, hook,
  admission, audit or cancel stopped it first). The stages decide that; everything below is about
  a call whose execution started.
- ``ok``: the tool returned, also after it was asked to stop, unless it has no side effects and
  the request was a cancel (then it counts as cancelled).
- ``failed``: the tool raised (retry is safe only without side effects), or a tool without side
  effects was stopped by its deadline.
- ``cancelled``: cancellation was confirmed (the tool stopped within the grace period, or it has
  no side effects and was abandoned).
- ``unknown``: a side-effecting tool was dispatched and did not confirm it stopped within the
  grace period after a deadline or cancel, or it raised ``OutcomeUnknown``. Its slot stays taken
  until it really ends; the end is recorded later as a ``resolved`` step (``resolved_status``)
  and ``status(call_id).outcome`` reports it (the summary points at ``tooltrace autopsy``, a
  command that exists for every reader of the trail).

``outcome_rules`` is a pure function of the facts (tests pin it from a table of cases).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from ..exceptions import OutcomeUnknown, ToolInterrupt
from ..model import Retry, Status

__all__ = ["Outcome", "error_type", "outcome_rules", "resolved_status"]


class Outcome(msgspec.Struct):
    """What execution produced, as seen by the caller's driver (one is made per call)."""

    kind: str  # "returned" | "raised" | "abandoned"
    value: Any = None
    error: BaseException | None = None
    signal: str | None = None  # "deadline" | "cancel" once the tool was told to stop
    signal_at: float | None = None
    confirmed_at: float | None = None


_OK, _FAILED, _UNKNOWN, _CANCELLED = Status.OK, Status.FAILED, Status.UNKNOWN, Status.CANCELLED
_RETRY_OK = Retry(True)
_INSPECT = Retry(False, requires_inspection=True)
_RETRY_LATER = Retry(True, after_ms=1000)
_STOPPED_NOTE = " (finished after it was asked to stop)"
_ABANDONED_NOTE = " (abandoned; it has no side effects)"


def outcome_rules(
    kind: str,
    signal: str | None,
    error: BaseException | None,
    side_effects: bool,
    tool: str,
    tool_summary: str = "",
    error_text: str = "",
    timeout_s: float = 0.0,
    grace_s: float = 0.0,
    call_id: str = "",
) -> tuple[Status, str, Retry, str | None]:
    """``(status, summary, retry, error_type)`` of a call whose execution started.

    ``kind`` is how execution ended (``returned``, ``raised``, or ``abandoned`` when the tool
    did not confirm it stopped within the grace period); ``signal`` what the tool was told
    (``deadline``, ``cancel`` or None). The rest only fills the summary: ``tool_summary`` is
    the tool's own (the record builder redacts the summary), ``error_text`` the redacted error.
    """
    if kind == "returned" and signal is None:
        return _OK, tool_summary, _RETRY_OK, None
    confirmed = kind != "abandoned"
    if kind == "returned" and (signal != "cancel" or side_effects):
        return _OK, tool_summary + _STOPPED_NOTE, _RETRY_OK, None
    if kind == "raised" and side_effects and isinstance(error, OutcomeUnknown):
        summary = f"{tool} may have run: {error_text}; its outcome cannot be confirmed"
        return _UNKNOWN, summary, _INSPECT, error_type(error)
    if (
        kind == "raised"
        and error is not None
        and not (signal and isinstance(error, ToolInterrupt | asyncio.CancelledError))
        and not (signal == "deadline" and isinstance(error, TimeoutError))
    ):
        retry = Retry(not side_effects, requires_inspection=side_effects)
        return _FAILED, f"{tool} failed: {error_text}", retry, error_type(error)
    note = "" if confirmed else _ABANDONED_NOTE
    if signal == "cancel" and (confirmed or not side_effects):
        return _CANCELLED, f"{tool} was cancelled{note}", _RETRY_OK, "cancelled"
    if signal == "deadline" and (confirmed or not side_effects):
        return _FAILED, f"{tool} timed out after {timeout_s:g} s{note}", _RETRY_LATER, "timeout"
    why = "its deadline passed" if signal == "deadline" else "it was cancelled"
    summary = (
        f"{tool} may have run: {why} and it did not confirm it stopped within "
        f"{grace_s:g} s; its final outcome is recorded when it ends"
        f" (tooltrace autopsy {call_id})"
    )
    return _UNKNOWN, summary, _INSPECT, "unconfirmed_" + (signal or "stop")


def resolved_status(kind: str, error: BaseException | None) -> Status:
    """How a call that ended ``unknown`` really ended, once its tool is done."""
    if kind == "returned":
        return _OK
    if isinstance(error, ToolInterrupt | asyncio.CancelledError):
        return _CANCELLED
    return _FAILED


def error_type(exc: BaseException) -> str:
    """The low-cardinality name of an error: the one a tool gives its exception (the MCP proxy
    says ``tool_error``), else the exception's class name."""
    named = getattr(exc, "error_type", None)
    if isinstance(named, str) and named:
        return named[:64]
    return type(exc).__name__[:64]
