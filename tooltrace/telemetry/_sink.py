"""What the registry asks of a telemetry sink, and of the tracer that opens spans.

The registry emits; sinks subscribe. A sink gets each finished, already-redacted
``CallRecord`` through ``emit``, which must return at once and never raise: real work happens on
a ``BatchWorker``. Two optional roles exist beside it:

- ``SpanOpener`` (the tracing sink): called before execution to mint trace and span ids and a
  context to make current while the tool runs, so nested work joins the trace.
- ``DurableSink`` (the audit sink in ``strict`` mode): called before execution to make an intent
  record durable; if it raises, the call is refused (``stage=audit``).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..envelope import CallRecord

__all__ = ["DurableSink", "OpenSpan", "Sink", "SpanOpener"]


@runtime_checkable
class Sink(Protocol):
    """Receives finished call records; never blocks, never raises."""

    name: str

    def emit(self, record: CallRecord) -> None:
        """Queue one finished record (non-blocking, non-raising)."""

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Push out everything queued; False if the deadline passed first."""

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush within the deadline and release resources."""


class OpenSpan(Protocol):
    """A span opened for one call: its ids and the context to make current during execution."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    sampled: bool

    def attach(self) -> Any:
        """Make this span's context current; return a token for ``detach``."""

    def detach(self, token: Any) -> None:
        """Restore the context that was current before ``attach``."""


@runtime_checkable
class SpanOpener(Protocol):
    """Mints the ids of a call's span before it runs (the span itself is built afterwards)."""

    def open_span(self, tool: str) -> OpenSpan | None:
        """Return the span handle for a call of ``tool``, or None when tracing is off."""


@runtime_checkable
class DurableSink(Protocol):
    """A sink that can make a record durable before execution (strict audit mode)."""

    strict: bool

    def write_intent(
        self, call_id: str, run_id: str, tool: str, started_at_us: int, args_redacted: Any
    ) -> None:
        """Durably record that ``call_id`` is about to execute; raise if that is impossible."""
