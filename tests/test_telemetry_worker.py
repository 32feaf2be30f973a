"""The sinks' background worker hands the interpreter back between slices of a batch."""

from __future__ import annotations

import threading
import time

import pytest

from tooltrace import _inflight
from tooltrace.telemetry import _worker
from tooltrace.telemetry._worker import BatchWorker


def _spin(seconds: float) -> None:
    """Pure-Python work that holds the interpreter lock for about ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class _Counting(BatchWorker[int]):
    """A worker that counts its pauses."""

    pauses = 0

    def pause(self) -> None:
        self.pauses += 1
        super().pause()


def test_a_batch_is_walked_in_slices_that_let_another_thread_run() -> None:
    events: list[tuple[str, int]] = []
    stop = threading.Event()

    def other() -> None:
        n = 0
        while not stop.is_set():
            events.append(("other", n))  # needs the interpreter lock to get here
            n += 1
            _spin(0.0001)

    def export(batch: list[int]) -> None:
        for i in worker.paced(batch):
            events.append(("item", i))
            _spin(0.0002)

    worker = _Counting("test", export, slice_s=0.0005)
    for i in range(60):
        worker.submit(i)
    t = threading.Thread(target=other, daemon=True)
    t.start()
    try:
        assert worker.flush(30.0)
    finally:
        stop.set()
        t.join(10)
        worker.shutdown(5.0)
    items = [i for kind, i in events if kind == "item"]
    assert items == list(range(60))  # all of them, in order
    first = events.index(("item", 0))
    last = events.index(("item", 59))
    # The other thread ran between the first and the last item of the one batch.
    assert any(kind == "other" for kind, _ in events[first:last])
    assert worker.pauses >= 5


def test_a_worker_that_falls_behind_stops_pausing() -> None:
    # With more than a quarter of the queue waiting, catching up beats handing over.
    release = threading.Event()

    def export(batch: list[int]) -> None:
        release.wait(10)
        for _ in worker.paced(batch):
            _spin(0.0003)

    worker = _Counting("test", export, max_queue=40, max_batch=2, slice_s=0.0001)
    worker.submit(0)
    worker.submit(1)  # a full batch: the worker takes both and waits in export
    deadline = time.monotonic() + 10
    while worker.depth and time.monotonic() < deadline:
        time.sleep(0.001)
    for i in range(30):  # 30 waiting of 40: past a quarter (10), and past eight batches
        worker.submit(i)
    release.set()
    assert worker.flush(30.0)
    worker.shutdown(5.0)
    assert worker.exported == 32
    # 16 batches of two items each slow enough to end a slice: each would pause once, but
    # those drained while 10 or more records waited behind them (the first 11) did not. A
    # preemption inside a slice can add a pause; without the catch-up rule there are 15 or more.
    assert 1 <= worker.pauses <= 10


def test_slices_off_means_no_pause() -> None:
    def export(batch: list[int]) -> None:
        for _ in worker.paced(batch):
            _spin(0.0002)

    worker = _Counting("test", export, slice_s=0.0)
    for i in range(20):
        worker.submit(i)
    assert worker.flush(30.0)
    worker.shutdown(5.0)
    assert worker.pauses == 0 and worker.exported == 20


def test_the_background_turn_is_free_after_a_batch_even_when_export_fails() -> None:
    def export(batch: list[int]) -> None:
        for i in worker.paced(batch):
            _spin(0.0002)
            if i == 7:
                raise RuntimeError("the exporter broke")

    errors: list[BaseException] = []
    worker = BatchWorker("test", export, slice_s=0.0005, on_error=errors.append)
    for i in range(10):
        worker.submit(i)
    assert worker.flush(30.0)
    worker.shutdown(5.0)
    assert worker.export_errors == 1 and isinstance(errors[0], RuntimeError)
    # No worker still holds the turn: another worker's slices are not held up.
    assert _worker._TURN.acquire(blocking=False)
    _worker._TURN.release()


def test_negative_slice_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="slice_s"):
        BatchWorker("test", lambda b: None, slice_s=-1.0)


def _calls_back_to_back(seconds: float, spans: list[tuple[float, float]]) -> None:
    """Tool calls on a ``ToolThreads`` pool, one after another, each sleeping 1 ms; their
    (start, end) on ``time.perf_counter`` go to ``spans``."""
    from tooltrace.runtime import ToolThreads

    pool = ToolThreads(1, "test-calls")
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            pool.submit(time.sleep, 0.001).result(10)
            spans.append((t0, time.perf_counter()))
    finally:
        pool.shutdown()


def test_a_worker_waits_while_tool_calls_are_in_flight_and_catches_up_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A call counts as in flight for LONG_S after its submit; on a busy host a 1 ms call can
    # take longer than the 20 ms default, and would then stop counting before it ends.
    monkeypatch.setattr(_inflight, "LONG_S", 5.0)
    done: list[tuple[int, float]] = []
    started = threading.Event()

    def export(batch: list[int]) -> None:
        started.wait(10)
        for i in worker.paced(batch):
            done.append((i, time.perf_counter()))

    worker = BatchWorker("test", export, max_batch=8, interval_s=0.01, yield_max_s=10.0)
    spans: list[tuple[float, float]] = []
    caller = threading.Thread(target=_calls_back_to_back, args=(0.3, spans))
    for i in range(8):  # a full batch: the worker takes it and waits in export
        worker.submit(i)
    caller.start()
    while not spans:
        time.sleep(0.001)
    started.set()  # the worker walks its batch while the calls run
    caller.join(30)
    assert worker.flush(30.0)
    worker.shutdown(5.0)
    assert [i for i, _ in done] == list(range(8))  # nothing lost, in order
    first, last = spans[1][0], spans[-1][0]
    # Calls ran back to back: the worker handled no record between them, all after the last.
    assert not [i for i, t in done if first < t < last]


def test_a_flush_does_not_wait_for_tool_calls_in_flight() -> None:
    def export(batch: list[int]) -> None:
        for _ in worker.paced(batch):
            pass

    worker = _Counting("test", export, max_batch=512, interval_s=0.01, yield_max_s=60.0)
    spans: list[tuple[float, float]] = []
    caller = threading.Thread(target=_calls_back_to_back, args=(2.0, spans))
    caller.start()
    try:
        while not spans:
            time.sleep(0.001)
        for i in range(2000):
            worker.submit(i)
        assert worker.flush(30.0)
        flushed_at = time.perf_counter()
    finally:
        caller.join(30)
        worker.shutdown(5.0)
    assert worker.exported == 2000
    # The flush ended while the calls still ran (they went on for two seconds), and the
    # worker did not pause before each record for them.
    assert flushed_at < spans[-1][0]
    assert worker.pauses < 100


def test_a_worker_that_waited_its_longest_for_calls_runs_a_slice() -> None:
    done: list[float] = []

    def export(batch: list[int]) -> None:
        for _ in worker.paced(batch):
            done.append(time.perf_counter())

    worker = BatchWorker("test", export, max_batch=256, interval_s=0.005, yield_max_s=0.01)
    spans: list[tuple[float, float]] = []
    caller = threading.Thread(target=_calls_back_to_back, args=(1.0, spans))
    caller.start()
    try:
        while not spans:
            time.sleep(0.001)
        for i in range(200):
            worker.submit(i)
        caller.join(30)
    finally:
        caller.join(30)
        assert worker.flush(30.0)
        worker.shutdown(5.0)
    # The whole batch was handled while the calls still ran back to back: once its wait ran
    # out, the worker ran a slice (not one record per wait).
    assert len([t for t in done if t < spans[-1][0]]) == 200


def test_a_forked_child_gets_a_fresh_worker_that_exports_only_its_own_items() -> None:
    import os

    exported: list[int] = []
    w = BatchWorker("fork", exported.extend, interval_s=0.01)
    w.submit(1)
    assert w.flush(5.0)  # the parent's thread is running now
    r, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's thread is gone; the worker starts its own
        try:
            exported.clear()
            w.submit(2)
            ok = w.flush(5.0)
            os.write(wr, f"{ok} {exported} {w.depth}".encode())
        finally:
            os._exit(0)
    os.close(wr)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(r) as f:
        got = f.read()
    assert status == 0 and got == "True [2] 0", got
    w.submit(3)
    assert w.flush(5.0) and exported == [1, 3]
    w.shutdown()
