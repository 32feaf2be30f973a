"""The pipeline of one call, stage by stage.

sanitise -> resolve -> validate -> policy and approval -> pre-hooks (modify => re-validate and
re-authorise) -> admission (concurrency, deadline) -> strict audit intent -> snapshot (a tool that
writes files: ``_snapshotstage``) -> execute -> outcome,
redaction and offload -> post-hooks -> emit.

It is written once, as a generator (``pipeline``) that *yields* the operations that block
(``Approve``, ``RunHook``, ``Admit``, ``Intent``, ``Execute``: each declared beside its stage) and
*receives* their outcomes; a blocking driver serves ``call()`` and an asyncio driver serves
``acall()`` (``_drivers``). Every stage appends a ``Step``. Most calls (an inline tool,
no hooks or approval, a free slot) never yield.

A stage that makes something (the call, its entry, its arguments) returns it, or None when it
refused the call; a stage that only decides returns the refusal, or None to go on. A refusal is
emitted as it is made, and the pipeline returns its envelope (``Builder.refused``).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..model import Entry, Retry, Stage, StepName, ToolCall, ToolDefinition, ToolResultEnvelope
from ..runtime import AdmissionResult, CallContext
from ..sinks import DurableSink, OpenSpan
from ._authorize import Approve, approve, authorize
from ._execute import Execute, execute_blocking, execute_inline
from ._hooks import RunHook, post_hooks, pre_hooks
from ._outcome import Outcome
from ._record import (
    UNREGISTERED,
    Builder,
    Made,
    WatchedBuilder,
    error_text,
    redact_args,
    safe_name,
)
from ._result import finish
from ._sanitise import sanitise
from ._snapshots import snapshot_before

if TYPE_CHECKING:
    from ._environment import Environment

__all__ = ["Admit", "Intent", "Op", "Pipeline", "RawCall", "pipeline"]

# Step names and enum members every call uses, as module constants: a member looked up on its class
# costs 72 ns (CPython 3.11, timeit), against 7 ns for a global.
_RESOLVE = StepName.RESOLVE
_VALIDATE = StepName.VALIDATE
_ADMISSION = StepName.ADMISSION


@dataclass(slots=True)
class Admit:
    """Wait for a concurrency slot (the operation the pipeline yields when none is free)."""

    tool: str
    run_id: str
    timeout_s: float
    call_id: str = ""


@dataclass(slots=True)
class Intent:
    """Make the call's intent durable in a strict audit sink before it runs."""

    sink: DurableSink
    call_id: str
    run_id: str
    tool: str
    started_at_us: int
    args: Any


Op = Approve | RunHook | Admit | Intent | Execute
Pipeline = Generator[Op, Any, ToolResultEnvelope]
RawCall = ToolCall | Mapping[str, Any] | str | bytes

_perf_ns = time.perf_counter_ns
_FREE = AdmissionResult(True, 0.0, "free")
# The admission step's detail when a slot was free: shared by those calls, never mutated.
_FREE_INFO = Made(waited_ms=0.0, reason="free")
_ADMISSION_TEXT = {
    "queue_full": "too many calls waiting for a slot (queue full)",
    "timeout": "no concurrency slot became free in time",
    "cancelled": "it (or its run) was cancelled while it waited for a slot",
    "shutdown": "the registry is shutting down",
}


def pipeline(
    env: Environment, raw: RawCall, blocking: bool = False, parent: CallContext | None = None
) -> Pipeline:
    """One call's pipeline (``blocking``: driven by ``call()``; ``parent``: see ``nested``)."""
    t_wall, t0 = time.time_ns() // 1000, _perf_ns()
    b = WatchedBuilder(env, t_wall, t0) if env.hub.step else Builder(env, t_wall, t0)
    call = sanitise(env, b, raw)
    if call is None:
        return b.refused()
    raw_args = arguments(env, b, call.arguments)
    entry = resolve(env, b, call.name) if not parent else nested(env, b, parent, call.name)
    if entry is None:
        return b.refused()
    args = validate(b, entry, raw_args)
    if args is None:
        return b.refused()
    verdict = authorize(env, b, entry, args, b.mode, b.last, None)
    if verdict is not None:
        if isinstance(verdict, ToolResultEnvelope):
            return verdict
        refused = yield from approve(env, b, entry.definition, args, verdict)
        if refused is not None:
            return refused
    if env.pre_hooks:
        hooked = yield from pre_hooks(env, b, entry, args, b.mode)
        if hooked is None:
            return b.refused()
        args = hooked
    d = entry.definition
    if b.call_id in env.book.cancel_early or b.run_id in env.book.cancelled_runs:
        return _cancelled(b, d, _ADMISSION, _perf_ns())
    timeout, asked = d.timeout_s, None
    if call.timeout_s is not None:
        timeout, asked = deadline(env, call.timeout_s)
    t = b.last  # admission begins where the last step ended (one clock read less)
    if env.admission.try_acquire(d.name):
        adm: AdmissionResult = _FREE
    else:
        adm = yield Admit(d.name, b.run_id, env.admission_timeout_s, b.call_id)
    refused = admission(b, d, adm, asked, t)
    if refused is not None:
        return refused
    released = False
    try:
        if env.emitter.durable:
            refused = yield from intents(env, b, d)
            if refused is not None:
                return refused
        ctx = start(env, b, d, timeout, call.background and d.background, parent, args)
        if ctx is None:  # a file it writes could not be snapshotted safely
            return b.refused()
        t = b.last
        released = True  # from here the executor's finally gives the slot back
        out: Outcome
        if entry.inline:
            out = execute_inline(env, entry, ctx, args, b.span)
        elif blocking:
            # The blocking driver would only hand the operation back to this thread.
            out = execute_blocking(env, Execute(entry, ctx, args, b.span, env.cancel_grace_s))
        else:
            out = yield Execute(entry, ctx, args, b.span, env.cancel_grace_s)
    finally:
        if not released:
            env.admission.release(d.name)
    if ctx.reports:  # the tool reported progress
        keep_progress(b, ctx)
    envelope: ToolResultEnvelope | None = None
    try:
        envelope = finish(env, b, entry, ctx, out, t)
        if env.post_hooks:
            envelope = yield from post_hooks(env, b, entry, envelope)
        else:
            envelope = b.emit(envelope)
    finally:
        env.book.active.pop(b.call_id, None)
        ctx.final_status = envelope.status if envelope is not None else None
        ctx.has_returned = True
    return envelope


def arguments(env: Environment, b: Builder, raw_args: Any) -> Any:
    """The call's own copy of its arguments; their redacted view goes on the record."""
    if type(raw_args) is dict:
        # Records keep (redacted views of) these arguments and sinks read them later, so a
        # caller reusing its dict must not change what was recorded.
        raw_args = raw_args.copy()
    b.args_redacted = redact_args(env, raw_args)
    return raw_args


def resolve(env: Environment, b: Builder, name: Any) -> Entry | None:
    """The active entry of the tool the call names (its span opens here); None if refused."""
    t = _perf_ns()
    entry = env.tools.active.get(name) if type(name) is str else None
    if env.tracer is not None:
        # Every call gets its span, rejected ones included, so all sinks share its ids.
        b.span = env.tracer.open_span(entry.definition.name if entry else UNREGISTERED)
    if entry is None:
        shown = safe_name(name)
        if env.redactor.redact_text(shown) != shown:  # a name may itself be a secret
            shown = "the requested tool"
        b.step(_RESOLVE, t, "registry", "reject", {"requested": shown})
        b.reject(Stage.RESOLVE, "unknown tool", UNREGISTERED, shown_name=shown)
        return None
    b.entry = entry
    if b.run_id in env.book.cancelled_runs or b.call_id in env.book.cancel_early:
        _cancelled(b, entry.definition, _RESOLVE, t)
        return None
    b.step(_RESOLVE, t, "registry", "accept", None)
    return entry


def nested(env: Environment, b: Builder, parent: CallContext, name: Any) -> Entry | None:
    """``resolve`` for a call a tool made: the child stays in its parent's run and mode, one
    level deeper, and its span opens under the parent's."""
    b.depth = parent.depth + 1
    b.parent_call_id = parent.call_id
    # The parent's execute step counts the calls it made (autopsy looks for them then).
    made = parent.detail.get("nested_calls", 0) if parent.detail else 0
    parent.set_detail("nested_calls", made + 1)
    b.parent_tool = parent.tool
    b.run_id = parent.run_id
    b.mode = parent.mode
    span = parent.span
    token = span.attach() if span is not None else None
    try:
        return resolve(env, b, name)
    finally:
        if span is not None:
            span.detach(token)


def validate(b: Builder, entry: Entry, raw_args: Any) -> dict[str, Any] | None:
    """The arguments checked against the tool's schema (defaults filled in); None if refused."""
    t = b.last
    d = entry.definition
    if type(raw_args) is not dict and not isinstance(raw_args, Mapping):
        error = "arguments must be an object"
        b.step(_VALIDATE, t, "schema", "reject", {"error": error})
        b.reject(Stage.PARAMS, error, d.name)
        return None
    args, err = entry.schema.validate(raw_args if type(raw_args) is dict else dict(raw_args))
    if err is not None:
        detail = {"error": err.message, "rule": err.rule}
        b.step(_VALIDATE, t, "schema", "reject", detail)
        b.reject(Stage.PARAMS, err.message, d.name)
        return None
    b.step(_VALIDATE, t, "schema", "accept", None)
    return args


def deadline(env: Environment, requested: Any) -> tuple[float, dict[str, Any] | None]:
    """The timeout a call asked for, within the registry's limits; and, when it had to be
    changed, what the admission step records about that (without one, the tool's applies)."""
    asked = float(requested)  # an int passes check_call too
    timeout = min(max(asked, 0.001), env.max_timeout_s)
    if timeout != asked:
        return timeout, {"timeout_requested_s": asked, "timeout_s": timeout}
    return timeout, None


def admission(
    b: Builder,
    d: ToolDefinition,
    adm: AdmissionResult,
    extra: dict[str, Any] | None,
    t: int,
) -> ToolResultEnvelope | None:
    """Record the admission step (begun at ``t``); the refusal if no slot was had. Its detail
    is numbers and the admission's reason (a closed set)."""
    if adm is _FREE and not extra:
        info: Mapping[str, Any] = _FREE_INFO
    else:
        info = Made(waited_ms=round(adm.waited_s * 1000, 3), reason=adm.reason, **(extra or {}))
    if not adm.admitted:
        b.step(_ADMISSION, t, "runtime", "reject", info)
        stage = Stage.CANCEL if adm.reason == "cancelled" else Stage.ADMISSION
        why = _ADMISSION_TEXT.get(adm.reason, adm.reason)
        return b.reject(stage, why, d.name, retry=Retry(adm.reason != "shutdown", after_ms=250))
    b.step(_ADMISSION, t, "runtime", "accept", info)
    return None


def intents(
    env: Environment, b: Builder, d: ToolDefinition
) -> Generator[Intent, Any, ToolResultEnvelope | None]:
    """Strict audit: each durable sink makes the call's intent durable, or the call is
    refused (``stage=audit``)."""
    for sink in env.emitter.durable:
        t = _perf_ns()
        failure = yield Intent(sink, b.call_id, b.run_id, d.name, b.t_wall, b.args_redacted)
        if failure is not None:
            b.step(StepName.AUDIT_INTENT, t, "audit", "reject", {"error": error_text(env, failure)})
            return b.reject(Stage.AUDIT, "the audit record could not be made durable", d.name)
        b.step(StepName.AUDIT_INTENT, t, "audit", "durable", None)
    return None


def start(
    env: Environment,
    b: Builder,
    d: ToolDefinition,
    timeout: float,
    background: bool,
    parent: CallContext | None = None,
    args: Mapping[str, Any] | None = None,
) -> CallContext | None:
    """The running call's context, registered as running (``cancel()`` finds it there). A
    nested call's deadline is at most its parent's, and it is signalled with its parent. The
    files a tool declares it writes are snapshotted first: None if one cannot be (refused)."""
    span = b.span
    ctx = CallContext(
        b.call_id,
        b.run_id,
        d.name,
        timeout,
        env.workspace,
        env.artifacts,
        traceparent=None if span is None else _traceparent(span),
        background=background,
        late=env.emit_late,
        hub=env,
        mode=b.mode,
    )
    ctx.span = span
    if d.writes and args is not None:
        taken = snapshot_before(env, b, d, args)
        if taken is None:
            return None
        if taken:
            ctx.snapshots = {s.param: s for s in taken}
        ctx.start_clock()  # the deadline counts from after the snapshot, as for any tool
    if parent is not None:
        nest(ctx, parent, b)
    # Plain dict operations are atomic under the GIL; cancel() copies before iterating.
    env.book.active[b.call_id] = ctx
    if b.call_id in env.book.cancel_early:  # cancelled while it was being admitted
        ctx.signal("cancel")
    b.execution_started = True
    if env.hub.started:
        env.hub.call_started(ctx)
    return ctx


def nest(ctx: CallContext, parent: CallContext, b: Builder) -> None:
    """Make ``ctx`` its parent's child: one level deeper, its deadline at most the parent's,
    signalled with the parent."""
    ctx.depth = b.depth
    ctx.parent_call_id = b.parent_call_id
    left = max(parent.remaining(), 0.001)
    if left < ctx.timeout_s:
        ctx.timeout_s = left
        ctx.deadline = time.monotonic() + left
    parent.on_cancel(ctx.stop_with_parent)


def keep_progress(b: Builder, ctx: CallContext) -> None:
    """Publish the progress report the rate limit held back; the record keeps the marks."""
    ctx.flush_progress()
    if ctx.marks:
        b.progress = tuple(ctx.marks)


def _traceparent(span: OpenSpan) -> str:
    return f"00-{span.trace_id}-{span.span_id}-{'01' if span.sampled else '00'}"


def _cancelled(b: Builder, d: ToolDefinition, step: str, t: int) -> ToolResultEnvelope:
    """The refusal of a call (or run) cancelled before it started."""
    b.step(step, t, "runtime", "reject", {"reason": "cancelled"})
    return b.reject(Stage.CANCEL, "it was cancelled before it started", d.name)
