"""The tool threads note the calls in flight, which the sinks' workers stay out of."""

from __future__ import annotations

import threading
import time

import pytest

from tooltrace import _inflight
from tooltrace.runtime import ToolThreads


def test_a_call_is_in_flight_from_submit_until_its_caller_sees_it_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # How soon a new tool thread starts is the host's: the tool may look well after the 20 ms
    # a call counts for (LONG_S, tested below); this test is about the marks.
    monkeypatch.setattr(_inflight, "LONG_S", 5.0)
    pool = ToolThreads(2, "test-inflight")
    go = threading.Event()
    seen: list[bool] = []

    def tool() -> str:
        seen.append(_inflight.calls_in_flight(time.perf_counter()))
        go.wait(10)
        return "done"

    try:
        job = pool.submit(tool)
        submitted = _inflight.MARKS.start
        assert _inflight.calls_in_flight(submitted)
        go.set()
        while not job._done:  # ended, but its caller has not looked yet: still waking up
            time.sleep(0.001)
        assert _inflight.calls_in_flight(submitted)
        assert job.done()  # the caller looks: awake again, nothing is in flight
        assert not _inflight.calls_in_flight(submitted)
        assert job.result(10) == "done"
        assert seen == [True]
    finally:
        pool.shutdown()


def test_a_call_counts_for_at_most_long_s() -> None:
    pool = ToolThreads(1, "test-inflight")
    release = threading.Event()
    try:
        job = pool.submit(release.wait, 10)
        submitted = _inflight.MARKS.start
        assert _inflight.calls_in_flight(submitted)
        # A tool that runs longer is no quick hand-off (and an abandoned one may never end).
        assert not _inflight.calls_in_flight(submitted + 2 * _inflight.LONG_S)
    finally:
        release.set()
        pool.shutdown()
    assert job.result(10) is True
    assert not _inflight.calls_in_flight(time.perf_counter())
