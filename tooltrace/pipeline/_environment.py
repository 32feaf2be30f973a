"""What the pipeline is handed: the ``Environment`` of a call, built by the registry.

The stages read what a call needs from here and from nowhere else: the settings and limits, the
tool table, the policy gate (policy, approver, approvals), the runtime (admission, tool threads,
hook threads, the event loop), the ``Book`` of active calls and statuses, the redactor, and the
``Emitter`` that hands finished records to the sinks. The environment is frozen: the registry
makes a new one when a setting changes (``dataclasses.replace``), and a call keeps the one it
started with. What changes while calls run (the book, the emitter's sinks, the event hub) is
held by reference and owns its own state.

It is also the host of a running call's context (``tooltrace.runtime.CallHost``): a tool's
progress reports and nested calls come back through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..model import ProgressMark, Step, ToolTable
from ..policy import ApprovalCache, Workspace
from ..runtime import MESSAGE_CHARS, keep_marks
from ..sinks import ApprovalRecord, LateStep
from ._book import StatusTable
from ._record import redact_detail, scrub

if TYPE_CHECKING:
    from ..hooks import Hook
    from ..model import RunPrincipals, ToolCall, ToolResultEnvelope
    from ..policy import ApprovalDecision, ApprovalRequest, Policy
    from ..redaction import ArtifactStore, Redactor
    from ..runtime import Admission, CallContext, LoopThread, RenewablePool, ToolThreads
    from ..sinks import ApprovalSink, DurableSink, LateSink, Sink, SpanOpener, TrailSink
    from ..snapshots import SnapshotStore
    from ._eventhub import EventHub
    from ._sanitise import AttributeMemo

__all__ = ["Book", "Emitter", "Environment"]


class Book:
    """The calls the registry knows of while it runs: the active ones by id (their context says
    when and how each returned), the runs cancelled, the calls cancelled before they started,
    and the statuses of recent calls (``StatusTable``)."""

    __slots__ = ("active", "cancel_early", "cancelled_runs", "statuses")

    def __init__(self) -> None:
        #: Running calls by id (plain dict operations are atomic; readers copy before iterating).
        self.active: dict[str, CallContext] = {}
        #: Runs cancelled: their calls are refused from now on.
        self.cancelled_runs: set[str] = set()
        #: Calls cancelled before they reached admission, oldest first (bounded by the registry).
        self.cancel_early: dict[str, None] = {}
        self.statuses = StatusTable()


class Emitter:
    """Where finished records go: the sinks, by the roles they take on, and the count of the
    errors they raised (never raised into a call)."""

    __slots__ = ("approval_sinks", "durable", "errors", "late_sinks", "sinks", "trail_sinks")

    def __init__(self) -> None:
        self.sinks: tuple[Sink, ...] = ()
        #: Strict durable sinks: a call's intent is made durable in each before it runs.
        self.durable: tuple[DurableSink, ...] = ()
        self.late_sinks: tuple[LateSink, ...] = ()
        #: Sinks asked whether a caller-supplied call id is already in the trail.
        self.trail_sinks: tuple[TrailSink, ...] = ()
        self.approval_sinks: tuple[ApprovalSink, ...] = ()
        #: Errors the sinks raised (and shutdown callbacks): counted, never raised.
        self.errors = 0

    def emit(self, record: Any) -> None:
        """Hand a finished record to every sink."""
        for sink in self.sinks:
            try:
                sink.emit(record)
            except Exception:
                self.errors += 1

    def emit_late(self, late: LateStep) -> None:
        """Hand a step recorded after its call returned to every ``LateSink``."""
        for sink in self.late_sinks:
            try:
                sink.emit_late(late)
            except Exception:
                self.errors += 1

    def emit_approval(self, approval: ApprovalRecord) -> None:
        """Hand an approver's answer to every ``ApprovalSink``."""
        for sink in self.approval_sinks:
            try:
                sink.emit_approval(approval)
            except Exception:
                self.errors += 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Environment:
    """Everything the pipeline of a call reads. Built by ``ToolRegistry``; see the module."""

    run_id: str
    workspace: Workspace
    artifacts: ArtifactStore
    snapshots: SnapshotStore
    policy: Policy
    approver: Callable[[ApprovalRequest], ApprovalDecision] | None
    redactor: Redactor
    tools: ToolTable
    principals: RunPrincipals
    pre_hooks: tuple[Hook, ...]
    post_hooks: tuple[Hook, ...]
    tracer: SpanOpener | None
    admission: Admission
    pool: ToolThreads
    hook_threads: RenewablePool
    loop: LoopThread
    hub: EventHub
    book: Book
    emitter: Emitter
    approvals: ApprovalCache
    attributes: AttributeMemo
    max_timeout_s: float
    admission_timeout_s: float
    cancel_grace_s: float
    max_inline_chars: int
    preview_chars: int
    max_depth: int
    #: A caller's UUIDv7 id below this may be in an earlier process's trail.
    trail_from: str
    #: Host paths records show as ``.`` and ``<home>`` (``scrub``).
    root_text: str
    home_text: str
    #: Texts the registry made from its own parts, scrubbed once (``_record.scrub_made``).
    made_texts: dict[str, tuple[Redactor, int, str]] = field(default_factory=dict)
    #: The allow step's rule names, redacted once per set of rules (``_authorize._allowed``).
    allowed_rules: dict[tuple[str, ...], tuple[Redactor, int, Mapping[str, Any]]] = field(
        default_factory=dict)

    # -- the host of a running call's context (tooltrace.runtime.CallHost) ---------------------

    @property
    def progress_interval_s(self) -> float:
        """The shortest time between two published progress reports of one call."""
        return self.hub.progress_interval_s

    def report_progress(self, ctx: CallContext, seq: int, at_us: int, done: float,
                        total: float | None, message: str | None) -> None:
        """Keep one progress report on ``ctx`` (redacted, bounded) and publish it."""
        text = scrub(self, message)[:MESSAGE_CHARS] if message else None
        mark = ProgressMark(seq, at_us, done, total, text)
        keep_marks(ctx, mark)
        if self.hub.progress:
            self.hub.call_progress(ctx, mark)

    def call_child(self, call: ToolCall, parent: CallContext) -> ToolResultEnvelope:
        """Run a tool's nested call through the whole pipeline (blocking)."""
        from ._drivers import run  # the drivers load with the first call

        return run(self, call, parent)

    async def acall_child(self, call: ToolCall, parent: CallContext) -> ToolResultEnvelope:
        """Run a tool's nested call on the running event loop."""
        from ._drivers import arun

        return await arun(self, call, parent)

    # -- what the pipeline records after a call returned --------------------------------------

    def emit_late(self, call_id: str, run_id: str, tool: str, step: str, decision: str,
                  detail: Mapping[str, Any] | None) -> None:
        """Record a step after its call returned (a job's end, a late resolution): numbered
        after the call's own steps, redacted, and handed to every ``LateSink``."""
        red = redact_detail(self, dict(detail)) if detail else None
        seq = self.book.statuses.next_late_seq(call_id)
        s = Step(seq, step, time.time_ns() // 1000, 0, "runtime", decision, red)
        self.emitter.emit_late(LateStep(call_id, run_id, tool, s))
