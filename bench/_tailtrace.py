"""What ran while a call waited: garbage collections and background work slices, timestamped.

Installed in a contender's worker process (``python -m bench._worker NAME --tail``) before the
contender is built. It changes nothing in tooltrace: it wraps, in this process only, the
functions where background threads do their work, and records each slice's interval on
``time.perf_counter_ns`` (one clock for every thread) and its thread CPU time
(``time.thread_time_ns``):

- ``BatchWorker.drain`` (every sink's worker: tracing, logging, audit), cut into slices at
  each ``BatchWorker.pause`` and wait for the background turn (a slice ends where the worker
  hands the interpreter back and a new one starts when it has it again);
- ``AuditSink.tick`` (the audit ticker's checkpoints);
- ``export`` of every exporter class the contenders use (the OpenTelemetry SDK's batch span
  processor thread calls it), wrapped at the class of ``bench._common.DropExporter``;
- ``os.fsync`` cuts the slice it runs in (the disk wait holds no interpreter lock).

Collections come from ``gc.callbacks`` (start and stop, with the generation).
"""

from __future__ import annotations

import functools
import gc
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Recorder", "install"]


class Recorder:
    """Intervals of background slices and collections seen since the last ``take``."""

    def __init__(self) -> None:
        #: (thread name, start ns, end ns, thread CPU ns) per finished background slice.
        self.slices: list[tuple[str, int, int, int]] = []
        #: (generation, start ns, end ns) per collection.
        self.collections: list[tuple[int, int, int]] = []
        # thread ident -> (name, start ns, thread CPU ns at start) of the slice running there.
        self._open: dict[int, tuple[str, int, int]] = {}
        self._gc_start = 0

    # -- slices -------------------------------------------------------------------------------

    def begin(self, label: str) -> None:
        """A background slice starts on this thread (nested begins are ignored)."""
        ident = threading.get_ident()
        if ident not in self._open:
            name = f"{label} ({threading.current_thread().name})"
            self._open[ident] = (name, time.perf_counter_ns(), time.thread_time_ns())

    def end(self) -> None:
        """The slice running on this thread ends."""
        t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        opened = self._open.pop(threading.get_ident(), None)
        if opened is not None:
            name, t0, c0 = opened
            self.slices.append((name, t0, t1, c1 - c0))

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` recorded as one slice (or part of the slice already open on its thread)."""

        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            nested = threading.get_ident() in self._open
            if not nested:
                self.begin(label)
            try:
                return fn(*args, **kwargs)
            finally:
                if not nested:
                    self.end()

        return recorded

    def cut(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (a pause between slices) closes the open slice and reopens it after."""

        @functools.wraps(fn)
        def paused(*args: Any, **kwargs: Any) -> Any:
            opened = self._open.get(threading.get_ident())
            if opened is not None:
                self.end()
            try:
                return fn(*args, **kwargs)
            finally:
                if opened is not None:
                    self.begin(opened[0].split(" (", 1)[0])

        return paused

    # -- collections ----------------------------------------------------------------------------

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks`` entry."""
        if phase == "start":
            self._gc_start = time.perf_counter_ns()
        else:
            self.collections.append(
                (int(info.get("generation", -1)), self._gc_start, time.perf_counter_ns())
            )

    # -- reading --------------------------------------------------------------------------------

    def take(self, until_ns: int) -> tuple[list[Any], list[Any]]:
        """Slices (including those still running, cut at ``until_ns``) and collections so far;
        both lists start empty again."""
        slices, self.slices = self.slices, []
        cpu_now = 0  # another thread's CPU clock cannot be read from here: report 0 for it
        for name, t0, _c0 in list(self._open.values()):
            slices.append((name, t0, until_ns, cpu_now))
        cols, self.collections = self.collections, []
        return [list(s) for s in slices], [list(c) for c in cols]

    def reset(self) -> None:
        """Forget what was recorded (slices running now are kept open)."""
        self.slices = []
        self.collections = []


def install() -> Recorder:
    """Wrap the background work functions of this process; return the recorder."""
    rec = Recorder()
    from tooltrace.telemetry import AuditSink, BatchWorker

    bw = BatchWorker
    bw.drain = rec.wrap("sink worker", bw.drain)  # type: ignore[method-assign]
    # A pause, and the wait for the process's background turn, hold no interpreter lock.
    for name in ("pause", "take_turn"):
        fn = getattr(bw, name, None)
        if fn is not None:
            setattr(bw, name, rec.cut(fn))
    sink = AuditSink
    sink.tick = rec.wrap("audit ticker", sink.tick)  # type: ignore[method-assign]
    from bench._common import DropExporter

    cls = type(DropExporter())
    cls.export = rec.wrap("SDK batch span processor", cls.export)
    import os

    os.fsync = rec.cut(os.fsync)
    gc.callbacks.append(rec.on_gc)
    return rec
