"""Records of one tool call: steps, the call record and the result envelope.

Everything here is immutable and already redacted: these are the objects that sinks, hooks'
views, logs, the CLI and the model see. Records are frozen ``msgspec.Struct``s (one is made for
every call; the measurement behind the choice is in ``docs/internals/performance-analysis.md``).
Timestamps are integer microseconds since the Unix epoch (``*_us``), which is what the audit
store and the span builder want without conversion.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

__all__ = [
    "Artifact",
    "CallRecord",
    "CallStatus",
    "Principal",
    "ProgressMark",
    "Retry",
    "Stage",
    "Status",
    "Step",
    "StepName",
    "Timing",
    "ToolCall",
    "ToolResultEnvelope",
]


class Status(enum.StrEnum):
    """Final status of a call.

    ``rejected``: execution never started. ``failed``: it started and failed. ``cancelled``:
    cancellation was confirmed. ``unknown``: a side-effecting tool was dispatched and its end
    state could not be confirmed (deadline, unconfirmed cancel, crash).
    """

    OK = "ok"
    REJECTED = "rejected"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


class Stage(enum.StrEnum):
    """Where a rejected call was stopped (closed set: it is a metric label)."""

    RESOLVE = "resolve"
    PARAMS = "params"
    POLICY = "policy"
    APPROVAL = "approval"
    HOOK = "hook"
    ADMISSION = "admission"
    AUDIT = "audit"
    CANCEL = "cancel"


class StepName(enum.StrEnum):
    """Names of pipeline steps as they appear in records, spans and the audit trail."""

    RESOLVE = "resolve"
    VALIDATE = "validate"
    POLICY = "policy"
    APPROVAL = "approval"
    PRE_HOOK = "pre_hook"
    REVALIDATE = "revalidate"
    ADMISSION = "admission"
    AUDIT_INTENT = "audit_intent"
    SNAPSHOT = "snapshot"
    EXECUTE = "execute"
    DEADLINE = "deadline"
    CANCEL_REQUESTED = "cancel_requested"
    CANCELLED = "cancelled"
    STOPPED = "stopped"
    REDACT = "redact"
    OFFLOAD = "offload"
    POST_HOOK = "post_hook"
    ENVELOPE = "envelope"
    JOB_STARTED = "job_started"
    JOB_ENDED = "job_ended"
    RESOLVED = "resolved"


class Step(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One pipeline step: what ran, when, for how long, who decided and what.

    Immutable, built positionally and never tracked by the cyclic garbage collector (six or more
    are made per call and many wait in the sinks' queues). So a step must never be part of a
    reference cycle: it holds strings and numbers, and a small ``detail`` the registry builds
    itself or copies (a tool's or hook's detail is copied, never shared, so nothing in it can
    refer back to the record). It still behaves like the tuple it encodes as: it unpacks and
    indexes in field order, and ``_asdict()`` and ``_replace()`` work as on a named tuple.
    ``detail`` is redacted, JSON-serialisable and small.
    """

    seq: int
    """The step's place in its call, from 0."""
    step: str
    """What ran: a [`StepName`][tooltrace.StepName] value (``validate``, ``policy`` ...)."""
    started_at_us: int
    """When it began, in microseconds since the Unix epoch."""
    elapsed_us: int
    """How long it took, in microseconds."""
    decider: str
    """Who decided: ``schema``, ``policy:<rule>``, ``hook:<name>``, ``runtime``, ``tool``,
    ``user:<who>`` ..."""
    decision: str
    """What was decided: ``accept``, ``reject``, ``allow``, ``deny``, ``continue``, ``warn``,
    ``block``, ``modify`` ..."""
    detail: Mapping[str, Any] | None = None
    """Facts about the step (a reason, the paths checked, an argument diff): redacted,
    JSON-serialisable and small; ``None`` when there are none."""

    def __iter__(self) -> Iterator[Any]:
        return iter(msgspec.structs.astuple(self))

    def __getitem__(self, index: int | slice) -> Any:
        return msgspec.structs.astuple(self)[index]

    def __len__(self) -> int:
        return 7

    def _asdict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)

    def _replace(self, **changes: Any) -> Step:
        return msgspec.structs.replace(self, **changes)


class CallStatus(msgspec.Struct, frozen=True, gc=False):  # atomic fields: never in a cycle
    """What ``status(call_id)`` knows: the returned status and, for ``unknown``, the resolution."""

    call_id: str
    """The call's id."""
    tool: str
    """The tool's name."""
    status: Status
    """What the call returned (the envelope's ``status``)."""
    resolved: Status | None
    """For a call that returned ``unknown``: how it really ended, once someone said so
    (``resolve``); ``None`` until then and for every other status."""
    summary: str
    """The envelope's summary."""

    @property
    def outcome(self) -> Status:
        """The call's final outcome: ``status``, except that a call that returned ``unknown``
        takes the status it resolved to (``unknown`` until then). The audit trail's
        ``tool_calls.outcome`` and the CLI use the same word."""
        return self.resolved or self.status


class Principal(msgspec.Struct, frozen=True, gc=False):
    """Who a call acts for: a user, an agent, a tenant and roles. Policy rules match on it; it
    is recorded in the audit trail (its own columns), on spans and in logs, never as a metric
    label. Each value is 1-128 characters of ``[A-Za-z0-9@._:-]``."""

    user: str | None = None
    """The person (or service account) the agent acts for."""
    agent: str | None = None
    """The agent's name."""
    tenant: str | None = None
    """The tenant (organisation, workspace, customer) the call belongs to."""
    roles: tuple[str, ...] = ()
    """The principal's roles (at most 32)."""

    def to_dict(self) -> dict[str, Any]:
        """The set fields, as JSON-ready values."""
        out: dict[str, Any] = {}
        for k in ("user", "agent", "tenant"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        if self.roles:
            out["roles"] = list(self.roles)
        return out


class ToolCall(msgspec.Struct, frozen=True):
    """A request to run a tool: only intent until the registry's pipeline accepts it."""

    name: str
    """The tool to run."""
    arguments: Mapping[str, Any] = msgspec.field(default_factory=dict)
    """The arguments, validated against the tool's schema before anything runs."""
    call_id: str | None = None
    """The call's id (``None``: a fresh UUIDv7). An id is an identity: one the registry has
    seen or the trail holds is refused (``duplicate_call_id``). Supply a UUIDv7
    (``tooltrace.new_call_id``); any other UUID costs a look-up through the whole trail."""
    run_id: str | None = None
    """The run the call belongs to (``None``: the registry's run)."""
    mode: str = "default"
    """The mode to run in (``default``, ``plan`` or one the policy defines): it decides which
    tools may be called."""
    timeout_s: float | None = None
    """A deadline other than the tool's own, in seconds, capped by the operator's maximum
    (``None``: the tool's ``timeout_s``)."""
    background: bool = False
    """Ask a tool that supports it to return at once with a job id and keep running."""
    attributes: Mapping[str, str | int | bool] = msgspec.field(default_factory=dict)
    """Extra span attributes a front end adds (for example the MCP proxy's
    ``mcp.method.name``): redacted, and kept in the record."""
    principal: Principal | None = None
    """Who the call acts for (``None``: the principal its run was bound to, if any). Whom a
    run acts for (user, tenant, roles) is set once: a later call of the run naming others is
    refused. The agent may change within a run (a hand-off); each call records its own."""

    @classmethod
    def parse(cls, raw: str | bytes | bytearray | Mapping[str, Any]) -> ToolCall:
        """Parse a model's tool call (JSON text or mapping); raise ``MalformedCallError``."""
        from ..exceptions import MalformedCallError
        from ._validation import parse_tool_call

        obj = parse_tool_call(raw)
        call_id = obj.get("call_id", obj.get("id"))
        run_id = obj.get("run_id")
        mode = obj.get("mode", "default")
        timeout_s = obj.get("timeout_s")
        background = obj.get("background", False)
        if call_id is not None and not isinstance(call_id, str):
            raise MalformedCallError("shape", "tool call 'call_id' must be a string")
        if run_id is not None and not isinstance(run_id, str):
            raise MalformedCallError("shape", "tool call 'run_id' must be a string")
        if not isinstance(mode, str):
            raise MalformedCallError("shape", "tool call 'mode' must be a string")
        if timeout_s is not None and (
            isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float)
        ):
            raise MalformedCallError("shape", "tool call 'timeout_s' must be a number")
        if not isinstance(background, bool):
            raise MalformedCallError("shape", "tool call 'background' must be a boolean")
        return cls(
            name=obj["name"],
            arguments=obj["arguments"],
            call_id=call_id,
            run_id=run_id,
            mode=mode,
            timeout_s=timeout_s,
            background=background,
        )


class Artifact(msgspec.Struct, frozen=True):
    """A result too big to stay inline, stored content-addressed (see ``ArtifactStore``)."""

    path: str
    """Where the text is stored, relative to the tooltrace home (never a full host path)."""
    chars: int
    """The length of the full text, in characters."""
    bytes: int
    """The size of its UTF-8 encoding, in bytes."""
    sha256: str
    """The hex sha256 digest of its UTF-8 bytes: the name it is stored under."""


# gc=False: only atomic fields, so no instance can be part of a reference cycle, and the
# collector need not track the several made per call.
class Retry(msgspec.Struct, frozen=True, gc=False):
    """Advice to the caller: may the call be retried, after how long, and must a person look."""

    allowed: bool
    """Whether calling again may help: yes after bad arguments or a full queue, no after a
    policy denial or a failure of a tool with side effects."""
    after_ms: int = 0
    """How long to wait before retrying, in milliseconds (0: no need to wait)."""
    requires_inspection: bool = False
    """Whether a person should look before anyone retries: the call may have had effects that
    cannot be confirmed, or an audit or hook refusal needs attention."""


class Timing(msgspec.Struct, frozen=True, gc=False):  # atomic fields only (see Retry)
    """When the call started (epoch microseconds) and how long it took end to end."""

    started_at_us: int
    """When the call started, in microseconds since the Unix epoch."""
    elapsed_ms: float
    """How long it took end to end, in milliseconds."""


class ProgressMark(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One progress report a tool made (``CallContext.progress``), as the record keeps it.

    A record keeps a bounded number of them (the first ones, and always the latest last);
    ``seq`` numbers every report the tool made, so a gap shows how many were left out.
    """

    seq: int
    """The report's number in its call, from 0 (reports the rate limit held back included)."""
    at_us: int
    """When it was reported, in microseconds since the Unix epoch."""
    done: float
    """Work done, in the tool's own unit."""
    total: float | None = None
    """Work in all, in the same unit; ``None`` when the tool does not know."""
    message: str | None = None
    """What the tool said it is doing: redacted, at most 200 characters."""


class CallRecord(msgspec.Struct, frozen=True):
    """The finished, redacted record of one call: what every sink receives.

    Field names follow the audit contract (``tool_calls`` columns) in the README.
    """

    call_id: str
    """The call's id (a UUIDv7 unless the caller gave one)."""
    run_id: str
    """The run the call belongs to."""
    tool: str
    """The tool's name; ``_unregistered`` when the call named no registered tool."""
    source: str
    """Where the tool's definition came from (``builtin``, ``user``, ``mcp:<server>`` ...);
    empty for an unregistered tool."""
    status: Status
    """How the call ended: ``ok``, ``rejected``, ``failed``, ``cancelled`` or ``unknown``."""
    reject_stage: Stage | None
    """Where a rejected call was stopped; ``None`` unless ``status`` is ``rejected``."""
    summary: str
    """A readable sentence about the call: redacted, no full host path, no raw output."""
    error_type: str | None
    """The low-cardinality name of what went wrong: the rejecting stage, ``cancelled``, an
    exception's class name or the name a tool gives its error; ``None`` when the call
    succeeded."""
    started_at_us: int
    """When the call started, in microseconds since the Unix epoch."""
    elapsed_us: int
    """How long it took end to end, in microseconds."""
    execution_started: bool
    """Whether the tool was started: never for a rejected call."""
    args_redacted: Mapping[str, Any] | None
    """The arguments the tool ran with (after any hook's modification), redacted; ``None`` if
    the call was stopped before they were read."""
    result_preview: str | None
    """The start of the redacted result as text (the preview that stayed inline when it was
    offloaded); ``None`` when there is no result."""
    artifact: Artifact | None
    """Where a result too long to keep inline was stored; ``None`` if it was not offloaded."""
    steps: tuple[Step, ...]
    """The pipeline steps, in order."""
    mode: str = "default"
    """The mode the call ran in."""
    tool_type: str = "function"
    """The tool's ``tool_type`` (``function``, ``extension`` or ``datastore``)."""
    description: str | None = None
    """The first 500 characters of the tool's description; ``None`` for an unregistered
    tool."""
    trace_id: str | None = None
    """The trace of the call's span (hex); ``None`` when no span was opened."""
    span_id: str | None = None
    """The call's span (hex); ``None`` when no span was opened."""
    parent_span_id: str | None = None
    """The span the call's span is a child of; ``None`` for a root span or none."""
    trace_sampled: bool = False
    """Whether the call's span is sampled (exported)."""
    hook_modified: bool = False
    """Whether a hook changed the arguments or the result."""
    attributes: Mapping[str, str | int | bool] = msgspec.field(default_factory=dict)
    """A few extra, low-cardinality-safe span attributes a front end adds (for example the MCP
    proxy's ``mcp.method.name``); redacted like everything else."""
    parent_call_id: str | None = None
    """The call whose tool made this one through its context (``ctx.call``); ``None`` for a
    call made from outside any tool."""
    depth: int = 0
    """How deeply the call is nested: 0 for a call from outside, 1 for a call a tool made, and
    so on."""
    progress: tuple[ProgressMark, ...] = ()
    """The progress the tool reported (bounded: see ``ProgressMark``)."""
    principal: Principal | None = None
    """Who the call acted for; ``None`` when neither the call nor its run named anyone."""
    capability: str | None = None
    """The kind of access the tool declares (``read``, ``write``, ``network``, ``execute``);
    ``None`` for an unregistered tool."""
    effect: str | None = None
    """Whether the tool declares side effects and how far they reach (``none``, ``local``,
    ``external``); ``None`` for an unregistered tool."""

    @property
    def elapsed_ms(self) -> float:
        """End-to-end duration in milliseconds."""
        return self.elapsed_us / 1000.0

    def replace(self, **changes: Any) -> CallRecord:
        """A copy with some fields changed."""
        return msgspec.structs.replace(self, **changes)


class ToolResultEnvelope(msgspec.Struct, frozen=True):
    """What a caller (and the model) gets back from ``ToolRegistry.call``."""

    call_id: str
    """The call's id."""
    tool: str
    """The tool's name (``_unregistered`` when the call named no registered tool)."""
    status: Status
    """What the call returned: ``ok``, ``rejected``, ``failed``, ``cancelled`` or ``unknown``.
    A call that returned ``unknown`` gets its final *outcome* later, when its tool really ends:
    ``ToolRegistry.status(call_id).outcome``, the audit trail's ``tool_calls.outcome``."""
    summary: str
    """A readable sentence that never holds a full host path or raw output."""
    data: Any
    """The redacted result (``None`` unless ``status`` is ``ok``); when it was too long to
    keep inline, a preview of its text (the whole is in ``artifact``)."""
    artifact: Artifact | None
    """Where a result too long to keep inline was stored; ``None`` if it was not offloaded."""
    retry: Retry
    """Whether the caller may retry, after how long, and whether a person should look first."""
    timing: Timing
    """When the call started and how long it took."""
    record: CallRecord
    """The finished, redacted record of the call: what every sink received."""

    @property
    def ok(self) -> bool:
        """True when the call succeeded."""
        return self.status is Status.OK

    @property
    def reject_stage(self) -> Stage | None:
        """The stage that rejected the call, if it was rejected."""
        return self.record.reject_stage

    @property
    def steps(self) -> tuple[Step, ...]:
        """The pipeline steps of this call."""
        return self.record.steps

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (what the CLI and the MCP proxy send)."""
        art = self.artifact
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "status": self.status.value,
            "summary": self.summary,
            "data": self.data,
            "artifact": None
            if art is None
            else {"path": art.path, "chars": art.chars, "bytes": art.bytes, "sha256": art.sha256},
            "retry": {
                "allowed": self.retry.allowed,
                "after_ms": self.retry.after_ms,
                "requires_inspection": self.retry.requires_inspection,
            },
            "timing": {
                "started_at_us": self.timing.started_at_us,
                "elapsed_ms": self.timing.elapsed_ms,
            },
            "reject_stage": None if self.reject_stage is None else self.reject_stage.value,
            "steps": [s._asdict() for s in self.record.steps],
        }
