"""What the registry emits to: the sink protocols, and the span opener it asks before a call runs.

The registry emits; sinks subscribe. Every sink gets each finished, already-redacted
``CallRecord`` through ``emit``, which returns at once and never raises (real work happens on a
background worker), and is flushed and shut down with a deadline. A sink may take on more roles;
the registry checks each one once, when the sink is attached (``ToolRegistry.add_sink``):

- ``LateSink``: also takes steps recorded after their call returned (``LateStep``: a background
  job's end, the late resolution of a call that ended ``unknown``).
- ``BindingSink``: is bound to the registry it is attached to, and reads its state
  (``RegistryState``: tool names, in-flight counts, queue depths, caps, the other sinks) or
  subscribes to its call events (the audit sink keeps the progress of calls in flight).
- ``DurableSink`` (the audit sink in ``strict`` mode): makes an intent record durable before
  execution; if that fails, the call is refused (``stage=audit``).
- ``TrailSink`` (the audit sink): says whether a call id is already recorded, so a
  caller-supplied id that an earlier process used is refused (``duplicate_call_id``).
- ``ApprovalSink`` (the audit sink): takes each approver's answer (``ApprovalRecord``) the
  moment it is given, as a record of its own.

The tracer is not a sink but is asked before execution: a ``SpanOpener`` mints the call's trace
and span ids and gives an ``OpenSpan`` to make current while the tool runs, so nested work joins
the trace. A tracing sink is usually both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .model import CallRecord, Step, ToolDefinition

__all__ = [
    "FIRST_LATE_SEQ",
    "ApprovalRecord",
    "ApprovalSink",
    "BindingSink",
    "DurableSink",
    "LateSink",
    "LateStep",
    "OpenSpan",
    "RegistryState",
    "Sink",
    "SpanOpener",
    "TrailSink",
]


#: The sequence number of a call's first late step: a call's own steps are numbered from 0, and
#: steps recorded after it returned from here on, so they sort after them.
FIRST_LATE_SEQ = 1000


@dataclass(frozen=True, slots=True)
class LateStep:
    """A step recorded after its call returned (job end, late resolution of an unknown)."""

    call_id: str
    """The call the step belongs to."""
    run_id: str
    """The run of that call."""
    tool: str
    """The tool's name (``_unregistered`` never: a late step follows a call that ran)."""
    step: Step
    """The step itself, numbered from ``FIRST_LATE_SEQ`` so it sorts after the call's own."""


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One approver's answer about one call's arguments (already redacted): who, why, when, and
    the digest of the arguments it covers. The approval step of every call it covers names
    its ``approval_id``."""

    approval_id: str
    """A UUIDv7 of its own (time-ordered)."""
    call_id: str
    """The call the approver was asked about."""
    run_id: str
    """That call's run."""
    tool: str
    """The tool's name."""
    rule: str
    """The policy rule that asked."""
    approved: bool
    """True: approved; False: denied."""
    who: str
    """Who decided (``[A-Za-z0-9@._-]``, at most 64 characters)."""
    reason: str
    """Why, redacted and cut to 300 characters."""
    args_sha256: str
    """sha256 (hex) of the canonical JSON of the redacted arguments it covers
    (``tooltrace.policy.arguments_sha256``)."""
    at_us: int
    """When it was given (Unix microseconds)."""
    expires_at_us: int | None = None
    """Until when later calls of the same tool, principal and argument digest pass on it
    without asking (None: it covers only the call it was asked about)."""
    principal: dict[str, Any] | None = None
    """The principal of the call (``Principal.to_dict``), None when the call had none."""
    arguments: Any = None
    """The redacted arguments it covers, as validated (``args_sha256`` is their digest)."""


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


@runtime_checkable
class LateSink(Protocol):
    """A sink that also takes steps recorded after their call returned."""

    def emit_late(self, late: LateStep) -> None:
        """Queue one late step (non-blocking, non-raising), like ``Sink.emit``."""


class RegistryState(Protocol):
    """What a bound sink may read of the registry it is attached to (each read is a snapshot)."""

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The attached sinks."""

    def tool_names(self) -> frozenset[str]:
        """Names of the registered tools: the closed set of metric label values."""

    def definition(self, name: str) -> ToolDefinition | None:
        """The active definition of ``name``, or None."""

    def inflight(self) -> dict[str, int]:
        """Calls holding a concurrency slot now, by tool."""

    def queue_depth(self) -> dict[str, int]:
        """Calls waiting for admission now, by tool."""

    def concurrency_limits(self) -> tuple[int, dict[str, int]]:
        """``(global cap, {tool: cap})``."""

    def subscribe(
        self, subscriber: Callable[[Any], Any], *, kinds: Iterable[str] | None = None,
        max_queue: int = 1024,
    ) -> Any:
        """Subscribe to the registry's call events (``ToolRegistry.subscribe``)."""

    def register_secret(self, value: str) -> None:
        """Redact ``value`` from every record from now on (``ToolRegistry.register_secret``)."""


@runtime_checkable
class BindingSink(Protocol):
    """A sink bound to its registry when attached (the metrics sink reads its state)."""

    def bind(self, registry: RegistryState) -> None:
        """Remember ``registry``; called once, from ``ToolRegistry.add_sink``."""


@runtime_checkable
class DurableSink(Protocol):
    """A sink that can make a record durable before execution (strict audit mode)."""

    strict: bool

    def write_intent(
        self, call_id: str, run_id: str, tool: str, started_at_us: int, args_redacted: Any
    ) -> None:
        """Durably record that ``call_id`` is about to execute; raise if that is impossible."""


@runtime_checkable
class TrailSink(Protocol):
    """A sink that can tell whether a call id is already in its durable record."""

    def recorded(self, call_id: str) -> bool:
        """True when a call (or an intent) with ``call_id`` is recorded; raises ``OSError``
        when that cannot be known."""


@runtime_checkable
class ApprovalSink(Protocol):
    """A sink that also takes approvers' answers (the audit sink chains them)."""

    def emit_approval(self, approval: ApprovalRecord) -> None:
        """Queue one approval record (non-blocking, non-raising), like ``Sink.emit``."""


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
