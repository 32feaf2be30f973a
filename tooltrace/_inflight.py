"""Tool calls handed to a tool thread right now, so that background work can stay out of them.

A call with ``execution="thread"`` is two hand-offs of the interpreter: the caller sleeps while a
tool thread runs the tool, then the caller wakes up again. Whatever holds the interpreter when
either of them wants it delays the call by as long as it keeps it. The registry's tool threads
(``tooltrace.runtime.ToolThreads``) note here when a job is submitted, and its caller notes
when it has seen the job end (``Job.done``, ``Job.result``): it is awake again then, holding the
interpreter. The sinks' workers (``tooltrace.telemetry``) ask ``calls_in_flight`` before each
record of a batch and wait while it is true, up to bounds of their own, so that their work lands
between calls rather than inside them.

It is a hint, never a lock, and costs the hand-off two stores: a caller is never held up by it.
With several callers at once the last one to note wins. A call counts for at most ``LONG_S``
after its submit (a tool that runs longer is no quick hand-off, an abandoned one may never end,
and an async caller never looks), and the workers have bounds of their own.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["LONG_S", "MARKS", "Marks", "calls_in_flight"]

#: How long after its submit a call stops counting as in flight (seconds).
LONG_S: Final = 0.02


class Marks:
    """When the last job in flight was submitted (``time.perf_counter``; 0.0: none is)."""

    __slots__ = ("start",)

    def __init__(self) -> None:
        self.start = 0.0


#: The process's marks: set by ``ToolThreads.submit``, cleared by a caller that saw its job end.
MARKS: Final = Marks()


def calls_in_flight(now: float) -> bool:
    """True while a call submitted less than ``LONG_S`` before ``now`` (``time.perf_counter()``)
    has not been seen ending by its caller."""
    return now - MARKS.start < LONG_S


def _reset() -> None:
    MARKS.start = 0.0


if hasattr(os, "register_at_fork"):  # a forked child has none of its parent's tool threads
    os.register_at_fork(after_in_child=_reset)
