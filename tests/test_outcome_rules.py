"""The outcome rules: how an execution that started ends up ok, failed, cancelled or unknown.

One row per case: how execution ended (returned, raised, abandoned within the grace period),
what the tool was told (a deadline, a cancel, nothing), what it raised, and whether it has side
effects; then the status, error type, retry advice and summary the call reports.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tooltrace import DeadlineExceeded, OutcomeUnknown, Retry, Status, ToolCancelled
from tooltrace.pipeline._outcome import error_type, outcome_rules, resolved_status

OK, FAILED, CANCELLED, UNKNOWN = Status.OK, Status.FAILED, Status.CANCELLED, Status.UNKNOWN
RETRY = Retry(True)
INSPECT = Retry(False, requires_inspection=True)
LATER = Retry(True, after_ms=1000)
NOTE = " (finished after it was asked to stop)"
ABANDONED = " (abandoned; it has no side effects)"
MAY_HAVE_RUN = ("t may have run: {} and it did not confirm it stopped within 2 s; its final"
                " outcome is recorded when it ends (tooltrace autopsy c1)")


class Named(Exception):
    error_type = "tool_error"


# kind, signal, error, side effects -> status, error type, retry, summary
CASES: list[tuple[str, str | None, BaseException | None, bool,
                  Status, str | None, Retry, str]] = [
    # returned
    ("returned", None, None, False, OK, None, RETRY, "mine"),
    ("returned", None, None, True, OK, None, RETRY, "mine"),
    ("returned", "deadline", None, False, OK, None, RETRY, "mine" + NOTE),
    ("returned", "deadline", None, True, OK, None, RETRY, "mine" + NOTE),
    ("returned", "cancel", None, True, OK, None, RETRY, "mine" + NOTE),
    ("returned", "cancel", None, False, CANCELLED, "cancelled", RETRY, "t was cancelled"),
    # raised, nobody asked it to stop
    ("raised", None, ValueError("x"), False, FAILED, "ValueError",
     Retry(True, requires_inspection=False), "t failed: boom"),
    ("raised", None, ValueError("x"), True, FAILED, "ValueError", INSPECT, "t failed: boom"),
    ("raised", None, Named(), True, FAILED, "tool_error", INSPECT, "t failed: boom"),
    ("raised", None, OutcomeUnknown("x"), True, UNKNOWN, "outcome_unknown", INSPECT,
     "t may have run: boom; its outcome cannot be confirmed"),
    ("raised", None, OutcomeUnknown("x"), False, FAILED, "outcome_unknown", RETRY,
     "t failed: boom"),
    ("raised", None, ToolCancelled("x"), False, FAILED, "ToolCancelled", RETRY, "t failed: boom"),
    ("raised", None, TimeoutError(), True, FAILED, "TimeoutError", INSPECT, "t failed: boom"),
    # raised after a cancel
    ("raised", "cancel", ToolCancelled("x"), True, CANCELLED, "cancelled", RETRY,
     "t was cancelled"),
    ("raised", "cancel", asyncio.CancelledError(), False, CANCELLED, "cancelled", RETRY,
     "t was cancelled"),
    ("raised", "cancel", TimeoutError(), True, FAILED, "TimeoutError", INSPECT, "t failed: boom"),
    ("raised", "cancel", OutcomeUnknown("x"), True, UNKNOWN, "outcome_unknown", INSPECT,
     "t may have run: boom; its outcome cannot be confirmed"),
    # raised after its deadline
    ("raised", "deadline", DeadlineExceeded("x"), True, FAILED, "timeout", LATER,
     "t timed out after 1.5 s"),
    ("raised", "deadline", TimeoutError(), False, FAILED, "timeout", LATER,
     "t timed out after 1.5 s"),
    ("raised", "deadline", ValueError("x"), False, FAILED, "ValueError", RETRY,
     "t failed: boom"),
    # did not confirm it stopped within the grace period
    ("abandoned", "cancel", None, False, CANCELLED, "cancelled", RETRY,
     "t was cancelled" + ABANDONED),
    ("abandoned", "cancel", None, True, UNKNOWN, "unconfirmed_cancel", INSPECT,
     MAY_HAVE_RUN.format("it was cancelled")),
    ("abandoned", "deadline", None, False, FAILED, "timeout", LATER,
     "t timed out after 1.5 s" + ABANDONED),
    ("abandoned", "deadline", None, True, UNKNOWN, "unconfirmed_deadline", INSPECT,
     MAY_HAVE_RUN.format("its deadline passed")),
]


def _ids(case: tuple[Any, ...]) -> str:
    kind, signal, error, side_effects = case[:4]
    effects = "side-effects" if side_effects else "no-effects"
    return f"{kind}-{signal or 'unsignalled'}-{type(error).__name__}-{effects}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_outcome_rules_table(case: tuple[Any, ...]) -> None:
    kind, signal, error, side_effects, status, etype, retry, summary = case
    got = outcome_rules(
        kind,
        signal,
        error,
        side_effects,
        tool="t",
        tool_summary="mine",
        error_text="boom",
        timeout_s=1.5,
        grace_s=2.0,
        call_id="c1",
    )
    assert got == (status, summary, retry, etype)


def test_unknown_is_only_for_tools_with_side_effects() -> None:
    for kind, signal, error, side_effects, *_ in CASES:
        status = outcome_rules(kind, signal, error, side_effects, tool="t")[0]
        assert status is not Status.REJECTED
        if not side_effects:
            assert status is not Status.UNKNOWN, (kind, signal, error)


@pytest.mark.parametrize(
    ("kind", "error", "status"),
    [
        ("returned", None, OK),
        ("raised", ToolCancelled("x"), CANCELLED),
        ("raised", DeadlineExceeded("x"), CANCELLED),
        ("raised", asyncio.CancelledError(), CANCELLED),
        ("raised", ValueError("x"), FAILED),
    ],
)
def test_a_late_end_resolves_an_unknown(kind: str, error: BaseException | None,
                                        status: Status) -> None:
    assert resolved_status(kind, error) is status


def test_error_type_is_short_and_low_cardinality() -> None:
    assert error_type(ValueError("secret text")) == "ValueError"
    assert error_type(Named()) == "tool_error"
    long = type("E" * 100, (Exception,), {})
    assert error_type(long()) == "E" * 64
