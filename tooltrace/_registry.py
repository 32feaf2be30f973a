"""The tool registry: registration, the shadow report, and the one execution entry.

``ToolRegistry.call`` (and its async twin ``acall``) is the only public way to run a tool. Both
drive the same pipeline, written once as a generator that *yields* the operations that block
(approval, hooks, admission, strict audit, execution) and *receives* their outcomes; a blocking
driver serves ``call`` and an asyncio driver serves ``acall``. Every stage appends a ``Step``.

Outcome rules (what a post-mortem relies on):

- ``rejected``: the execute step never started (resolve, params, policy, approval, hook,
  admission, audit or cancel stopped it first).
- ``failed``: execution started and the tool raised, or a tool without side effects was stopped
  by its deadline.
- ``cancelled``: cancellation was confirmed (the tool stopped within the grace period, or it has
  no side effects and was abandoned).
- ``unknown``: a side-effecting tool was dispatched and did not confirm it stopped within the
  grace period after a deadline or cancel. Its slot stays taken until it really ends; the end is
  recorded later as a ``resolved`` step and ``status(call_id)`` reports it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import orjson
import uuid_utils
from mypy_extensions import mypyc_attr

from . import _build, _config
from ._admission import Admission, AdmissionResult
from ._context import CallContext
from ._execute import Execute, execute_async, execute_blocking, execute_inline
from ._executors import LoopThread, ToolThreads, make_pool
from ._ids import new_call_id, new_run_id
from ._outcome import Outcome, error_type, outcome_rules
from ._record import (
    UNREGISTERED,
    VETTED,
    Builder,
    detached,
    error_text,
    redact_args,
    safe_name,
    scrub,
)
from ._statuses import StatusTable
from ._tooltable import Entry, Resolution, ToolTable, Visibility, make_entry
from .envelope import (
    Artifact,
    CallStatus,
    Retry,
    Stage,
    Status,
    Step,
    StepName,
    ToolCall,
    ToolResultEnvelope,
)
from .exceptions import (
    AuditUnavailableError,
    MalformedCallError,
)
from .hooks import Hook, HookAction, HookDecision, HookView
from .paths import PathPolicyError, Workspace
from .policy import (
    ApprovalDecision,
    ApprovalRequest,
    Policy,
    PolicyDecision,
    PolicyRequest,
    Verdict,
)
from .redaction import ArtifactStore, Redactor, preview
from .sinks import BindingSink, DurableSink, LateSink, LateStep, OpenSpan, Sink, SpanOpener
from .tool import Effect, FunctionTool, ToolDefinition, ToolResult

__all__ = ["CallStatus", "LateStep", "Resolution", "ToolRegistry", "Visibility"]

Approver = Callable[[ApprovalRequest], ApprovalDecision]


# -- operations the pipeline yields to its driver ---------------------------------------------


@dataclass(slots=True)
class _RunHook:
    hook: Hook
    view: HookView


@dataclass(slots=True)
class _Approve:
    request: ApprovalRequest


class _Ask(NamedTuple):
    """A policy rule asked for approval (``t``: when the approval step begins)."""

    decision: PolicyDecision
    reason: str
    decider: str
    t: int


@dataclass(slots=True)
class _Admit:
    tool: str
    run_id: str
    timeout_s: float
    call_id: str = ""


@dataclass(slots=True)
class _Intent:
    sink: DurableSink
    call_id: str
    run_id: str
    tool: str
    started_at_us: int
    args: Any


_Op = _RunHook | _Approve | _Admit | _Intent | Execute
_Pipeline = Generator[_Op, Any, ToolResultEnvelope]

# Python subclasses of the compiled class are allowed (it is public API).
@mypyc_attr(allow_interpreted_subclasses=True)
class ToolRegistry:
    """Registered tools and the one way to run them.

    Everything is optional: with no arguments the workspace is the current directory, the home
    is ``TOOLTRACE_HOME`` or ``./.tooltrace``, the default policy applies and no sinks are
    attached (telemetry off).
    """

    def __init__(
        self,
        *,
        workspace: str | os.PathLike[str] | Workspace | None = None,
        home: str | os.PathLike[str] | None = None,
        sinks: Iterable[Sink] = (),
        tracer: SpanOpener | None = None,
        policy: Policy | None = None,
        hooks: Iterable[Hook] = (),
        approver: Approver | None = None,
        redactor: Redactor | None = None,
        run_id: str | None = None,
        max_concurrency: int = 64,
        max_queue: int = 256,
        tool_concurrency: Mapping[str, int] | None = None,
        admission_timeout_s: float = 5.0,
        max_timeout_s: float | None = None,
        cancel_grace_s: float = 2.0,
        max_inline_chars: int = 16384,
        preview_chars: int = 2048,
        hook_threads: int = 8,
    ) -> None:
        self.workspace = (
            workspace
            if isinstance(workspace, Workspace)
            else Workspace(workspace if workspace is not None else os.getcwd())
        )
        self.home = _config.resolve_home(home)
        self.artifacts = ArtifactStore(self.home / "artifacts")
        self.policy = policy if policy is not None else Policy()
        self.redactor = redactor if redactor is not None else Redactor()
        self.approver = approver
        self.run_id = run_id or new_run_id()
        self.max_timeout_s = _config.env_float(
            _config.TOOLTRACE_MAX_TIMEOUT_S, max_timeout_s, 600.0
        )
        self.admission_timeout_s = admission_timeout_s
        self.cancel_grace_s = cancel_grace_s
        self.max_inline_chars = max_inline_chars
        self.preview_chars = preview_chars
        self._hooks: tuple[Hook, ...] = tuple(hooks)
        for h in self._hooks:
            if h.phase not in ("pre", "post"):
                raise ValueError(f"hook {h.name!r}: phase must be 'pre' or 'post'")
        sinks = tuple(sinks)
        if tracer is None:
            # A tracing sink is also the span opener: use it without making callers pass it twice.
            tracer = next((s for s in sinks if isinstance(s, SpanOpener)), None)
        self._tracer = tracer
        self._pre_hooks = tuple(h for h in self._hooks if h.phase == "pre")
        self._post_hook_list = tuple(h for h in self._hooks if h.phase == "post")
        self._sinks: tuple[Sink, ...] = ()
        self._durable: tuple[DurableSink, ...] = ()
        self._late_sinks: tuple[LateSink, ...] = ()
        self._table = ToolTable()
        self._reg_lock = threading.RLock()
        self._admission = Admission(max_concurrency, max_queue, tool_concurrency)
        self._pool = ToolThreads(max_concurrency, "tooltrace-tool")
        self._hook_threads = hook_threads
        self._hook_pool = make_pool(hook_threads, "tooltrace-hook")
        self._loop = LoopThread()
        # Running calls by id; a context's _done/_final say when and how its call returned.
        self._active: dict[str, CallContext] = {}
        self._cancelled_runs: set[str] = set()
        self._cancel_early: dict[str, None] = {}
        self._statuses = StatusTable()
        self._allow_details: dict[tuple[str, ...], Mapping[str, Any]] = {}
        # Ids of the shared details this registry made and keeps alive (see VETTED).
        self._vetted: set[int] = set()
        self._emit_late_fn = self._emit_late  # bound once, shared by every call's context
        self._shutdown_callbacks: list[Callable[[float], None]] = []
        self._closed = False
        self.sink_errors = 0
        self._root_text = str(self.workspace.root)
        self._home_text = str(self.home.resolve())
        for sink in sinks:
            self.add_sink(sink)

    # -- registration -------------------------------------------------------------------------

    def register(
        self,
        tool: FunctionTool | ToolDefinition,
        handler: Callable[..., Any] | None = None,
    ) -> ToolDefinition:
        """Register a ``@tool`` function, or a definition with its handler.

        The schema is checked against its metaschema and compiled here; any failure raises a
        ``RegistrationError`` and leaves nothing registered. Returns the definition.
        """
        entry = make_entry(tool, handler)
        definition = entry.definition
        self._table.add(entry)
        if definition.max_concurrency is not None:
            self._admission.tool_caps.setdefault(definition.name, definition.max_concurrency)
        return definition

    def unregister(self, name: str, source: str) -> None:
        """Remove one source's definition of ``name`` (the next one becomes active)."""
        self._table.remove(name, source)

    def resolution(self) -> list[Resolution]:
        """The shadow report: every name, its active source and what it shadows (sorted)."""
        return self._table.resolution()

    def definition(self, name: str) -> ToolDefinition | None:
        """The active (effective) definition of ``name``, or None."""
        e = self._table.active.get(name)
        return e.definition if e is not None else None

    def visible_tools(self, mode: str = "default") -> Visibility:
        """Tools the mode exposes, sorted by name, and the hidden ones with reasons."""
        visible: list[ToolDefinition] = []
        hidden: list[tuple[str, str]] = []
        for name in sorted(self._table.active):
            d = self._table.active[name].definition
            ok, why = self.policy.mode_allows(d, mode)
            if ok:
                visible.append(d)
            else:
                hidden.append((name, why))
        return Visibility(mode, tuple(visible), tuple(hidden))

    def tool_names(self) -> frozenset[str]:
        """Names of the registered tools: the closed set of metric label values."""
        return frozenset(self._table.active)

    # -- sinks and runtime state --------------------------------------------------------------

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The attached telemetry sinks."""
        return self._sinks

    def add_sink(self, sink: Sink) -> None:
        """Attach a sink and take note of the other roles it takes on (``tooltrace.sinks``):
        a ``LateSink`` also gets late steps, a ``BindingSink`` is bound here, a strict
        ``DurableSink`` makes each call's intent durable before the call runs."""
        self._sinks = (*self._sinks, sink)
        if isinstance(sink, DurableSink) and sink.strict:
            self._durable = (*self._durable, sink)
        if isinstance(sink, LateSink):
            self._late_sinks = (*self._late_sinks, sink)
        if isinstance(sink, BindingSink):
            sink.bind(self)

    def inflight(self) -> dict[str, int]:
        """Calls holding a concurrency slot now, by tool."""
        return self._admission.inflight()

    def queue_depth(self) -> dict[str, int]:
        """Calls waiting for admission now, by tool."""
        return self._admission.queue_depth()

    def concurrency_limits(self) -> tuple[int, dict[str, int]]:
        """``(global cap, {tool: cap})``."""
        return self._admission.global_cap, dict(self._admission.tool_caps)

    def on_shutdown(self, callback: Callable[[float], None]) -> None:
        """Run ``callback(timeout_s)`` at shutdown (background jobs register here)."""
        self._shutdown_callbacks.append(callback)

    # -- the execution entry ------------------------------------------------------------------

    def call(self, call: ToolCall | Mapping[str, Any] | str | bytes) -> ToolResultEnvelope:
        """Run one tool call through the whole pipeline and return its envelope (blocking)."""
        box: list[ToolResultEnvelope] = []
        gen = self._boxed(call, box)
        # next(gen, None) ends without raising when the generator returns None: most calls
        # (inline tools, no hooks or approval) never yield, and pay for no StopIteration.
        op = next(gen, None)
        while op is not None:
            try:
                op = gen.send(self._serve(op))
            except StopIteration:
                break
        return box[0]

    def _boxed(
        self, call: ToolCall | Mapping[str, Any] | str | bytes, box: list[ToolResultEnvelope]
    ) -> Generator[_Op, Any, None]:
        box.append((yield from self._pipeline(call, True)))

    async def acall(self, call: ToolCall | Mapping[str, Any] | str | bytes) -> ToolResultEnvelope:
        """Run one tool call through the same pipeline on the running event loop."""
        gen = self._pipeline(call)
        try:
            op = next(gen)
            while True:
                op = gen.send(await self._aserve(op))
        except StopIteration as stop:
            env: ToolResultEnvelope = stop.value
            return env

    def status(self, call_id: str) -> CallStatus | None:
        """What the registry knows of a call: the last 4,096 calls, and the last 10,000 that
        ended ``unknown`` (None if it is not remembered; the audit trail has every call)."""
        return self._statuses.get(call_id)

    def cancel(self, run_id: str, *, wait: bool = True) -> dict[str, Status | None]:
        """Cancel a run: admit no more of its calls, signal each active one, wait the grace.

        Returns each affected call's final status (None if still undecided when the wait ends).
        """
        self._cancelled_runs.add(run_id)
        self._admission.cancel_run(run_id)
        targets = {cid: c for cid, c in list(self._active.items()) if c.run_id == run_id}
        return self._cancel_targets(targets, wait)

    def cancel_call(self, call_id: str, *, wait: bool = True) -> Status | None:
        """Cancel one call by id; return its final status (None if unknown or undecided)."""
        a = self._active.get(call_id)
        if a is None:
            if self._admission.cancel_call(call_id):
                return Status.REJECTED  # it was waiting for a slot: refused with stage cancel
            st = self.status(call_id)
            if st is not None:
                return st.status
            # Not started yet (still validating, in policy or hooks): refuse it when it gets to
            # admission. Bounded: ids that never show up are forgotten oldest first.
            self._cancel_early[call_id] = None
            if len(self._cancel_early) > 10_000:
                self._cancel_early.pop(next(iter(self._cancel_early)))
            return None
        return self._cancel_targets({call_id: a}, wait).get(call_id)

    def _cancel_targets(
        self, targets: dict[str, CallContext], wait: bool
    ) -> dict[str, Status | None]:
        for c in targets.values():
            c.signal("cancel")
        if wait:
            # Cancels are rare: poll rather than give every call an event to wait on.
            deadline = time.monotonic() + self.cancel_grace_s + 1.0
            while time.monotonic() < deadline and not all(c._done for c in targets.values()):
                time.sleep(0.002)
        return {cid: c._final for cid, c in targets.items()}

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop admitting calls, run shutdown callbacks (jobs), flush and close every sink."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_s
        self._admission.close()
        # Give calls still running (abandoned ones included) part of the time to end, so their
        # late resolutions reach the sinks before those close.
        while self._admission.inflight() and time.monotonic() < deadline - timeout_s / 2:
            time.sleep(0.01)
        for cb in self._shutdown_callbacks:
            try:
                cb(max(0.0, deadline - time.monotonic()))
            except Exception:
                self.sink_errors += 1
        for sink in self._sinks:
            try:
                sink.shutdown(max(0.1, deadline - time.monotonic()))
            except Exception:
                self.sink_errors += 1
        self._pool.shutdown()
        self._hook_pool.shutdown(wait=False, cancel_futures=True)
        self._loop.stop()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Flush every sink; False if any missed the deadline."""
        ok = True
        for sink in self._sinks:
            try:
                ok = bool(sink.flush(timeout_s)) and ok
            except Exception:
                self.sink_errors += 1
                ok = False
        return ok

    def __enter__(self) -> ToolRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- the pipeline (one copy, two drivers) -------------------------------------------------

    def _pipeline(
        self, raw: ToolCall | Mapping[str, Any] | str | bytes, blocking: bool = False
    ) -> _Pipeline:
        """The pipeline; ``blocking`` when its driver is ``call()`` (which may wait here)."""
        t_wall = time.time_ns() // 1000
        t0 = _perf_ns()
        b = Builder(self, t_wall, t0)
        if type(raw) is ToolCall or isinstance(raw, ToolCall):
            call = raw
        else:
            try:
                call = ToolCall.parse(raw)
            except MalformedCallError as exc:
                b.call_id = new_call_id()
                if self._tracer is not None:
                    b.span = self._tracer.open_span(UNREGISTERED)
                b.step(StepName.RESOLVE, t0, "registry", "reject", {"reason": exc.reason})
                return b.reject(Stage.PARAMS, f"malformed tool call: {exc}", UNREGISTERED)
        bad = self._check_call(call)
        if bad is not None:
            # A ToolCall object is as untrusted as JSON: its fields are checked before any of
            # them reaches a record (ids are queried by type, anything may hold a secret).
            b.call_id = new_call_id()
            if self._tracer is not None:
                b.span = self._tracer.open_span(UNREGISTERED)
            b.step(StepName.RESOLVE, t0, "registry", "reject", {"reason": bad})
            return b.reject(Stage.PARAMS, f"malformed tool call: {bad}", UNREGISTERED)
        if call.call_id:
            cid = call.call_id.lower()
            if not self._statuses.claim(cid, self._active):
                # A call id is an identity: the refusal is recorded under an id of its own, so
                # no reader can take it (or the first call) for the other.
                b.call_id = new_call_id()
                if self._tracer is not None:
                    b.span = self._tracer.open_span(UNREGISTERED)
                b.step(
                    StepName.RESOLVE,
                    t0,
                    "registry",
                    "reject",
                    {"reason": "duplicate_call_id", "call_id": cid},
                )
                return b.reject(
                    Stage.PARAMS,
                    "malformed tool call: call_id is already in use (duplicate_call_id)",
                    UNREGISTERED,
                )
            b.call_id = cid
        else:
            # str(uuid7()) is new_call_id() without a function call, on every call.
            b.call_id = str(_uuid7())
        b.run_id = call.run_id or self.run_id
        b.mode = call.mode
        if call.attributes:
            b.attributes = self._clean_attributes(call.attributes)
        # Read as Any: a ToolCall built in code may hold anything in these two (they are checked
        # below), and compiled code would raise a TypeError reading them as their declared type.
        untyped: Any = call
        name = untyped.name
        raw_args = untyped.arguments
        if type(raw_args) is dict:
            # The call's own copy: records keep (redacted views of) these arguments and sinks
            # read them later, so a caller reusing its dict must not change what was recorded.
            raw_args = raw_args.copy()
        b.args_redacted = redact_args(self, raw_args)

        # 1. resolve
        t = _perf_ns()
        entry = self._table.active.get(name) if type(name) is str else None
        if self._tracer is not None:
            # Every call gets its span, rejected ones included, so all sinks share its ids.
            b.span = self._tracer.open_span(entry.definition.name if entry else UNREGISTERED)
        if entry is None:
            shown = safe_name(name)
            if self.redactor.redact_text(shown) != shown:  # a name may itself be a secret
                shown = "the requested tool"
            b.step(StepName.RESOLVE, t, "registry", "reject", {"requested": shown})
            return b.reject(Stage.RESOLVE, "unknown tool", UNREGISTERED, shown_name=shown)
        d = entry.definition
        b.entry = entry
        if b.run_id in self._cancelled_runs or b.call_id in self._cancel_early:
            b.step(StepName.RESOLVE, t, "runtime", "reject", {"reason": "cancelled"})
            return b.reject(Stage.CANCEL, "it was cancelled before it started", d.name)
        ok, why = self.policy.mode_allows(d, call.mode)
        t = b.step(_RESOLVE, t, "registry", "accept", None)

        # 2. validate
        if type(raw_args) is not dict and not isinstance(raw_args, Mapping):
            b.step(
                StepName.VALIDATE, t, "schema", "reject", {"error": "arguments must be an object"}
            )
            return b.reject(Stage.PARAMS, "arguments must be an object", d.name)
        args, err = entry.schema.validate(raw_args if type(raw_args) is dict else dict(raw_args))
        if err is not None:
            b.step(
                StepName.VALIDATE, t, "schema", "reject", {"error": err.message, "rule": err.rule}
            )
            return b.reject(Stage.PARAMS, err.message, d.name)
        t = b.step(_VALIDATE, t, "schema", "accept", None)

        # 3. policy (mode, resource scope, argument content) and approval
        if not ok:
            b.step(StepName.POLICY, t, "policy:mode", "deny", {"reason": why})
            return b.reject(Stage.POLICY, f"not allowed in this mode ({why})", d.name)
        verdict = self._authorize(b, entry, args, call.mode, t, None)
        if verdict is not None:
            if isinstance(verdict, ToolResultEnvelope):
                return verdict
            approval = yield from self._approve(b, d, args, verdict)
            if approval is not None:
                return approval

        # 4. pre-hooks (modify => re-validate and re-authorise; only narrowing allowed)
        hook_args: Any = None  # the redacted arguments hooks see, made once per version of them
        for h in self._pre_hooks:
            if not h.applies_to(d.name):
                continue
            if hook_args is None:
                hook_args = redact_args(self, args)
            view = _hook_view(b, d, hook_args)
            t = time.perf_counter_ns()
            kind, res = yield _RunHook(h, view)
            decider = f"hook:{h.name}"
            if kind != "ok":
                what = "timed out" if kind == "timeout" else "raised an error"
                hdetail = {"required": h.required, "error": error_text(self, res) if res else what}
                if h.required:
                    b.step(StepName.PRE_HOOK, t, decider, "block", hdetail)
                    return b.reject(Stage.HOOK, f"required hook {h.name} {what}", d.name)
                b.step(StepName.PRE_HOOK, t, decider, "warn", hdetail)
                continue
            dec: HookDecision = res
            reason = scrub(self, dec.reason)[:300]
            if dec.tool is not None and dec.tool != d.name:
                b.step(
                    StepName.PRE_HOOK, t, decider, "block", {"reason": "tried to change the tool"}
                )
                return b.reject(Stage.HOOK, f"hook {h.name} tried to change the tool", d.name)
            if dec.mode is not None and dec.mode != call.mode:
                b.step(StepName.PRE_HOOK, t, decider, "block", {"reason": "tried to switch mode"})
                return b.reject(Stage.HOOK, f"hook {h.name} tried to switch the mode", d.name)
            if dec.action is HookAction.BLOCK:
                b.step(StepName.PRE_HOOK, t, decider, "block", {"reason": reason})
                return b.reject(Stage.HOOK, f"blocked by hook {h.name}: {reason}", d.name)
            if dec.action is HookAction.MODIFY and dec.arguments is not None:
                new_args = self._merge_hook_args(args, view.arguments, dec.arguments)
                diff = _diff(view.arguments, redact_args(self, new_args))
                b.step(
                    StepName.PRE_HOOK,
                    t,
                    decider,
                    "modify",
                    {"reason": reason, "diff": detached(diff)},
                )
                b.hook_modified = True
                t = time.perf_counter_ns()
                checked, err = entry.schema.validate(new_args)
                if err is not None:
                    b.step(StepName.REVALIDATE, t, "schema", "reject", {"error": err.message})
                    return b.reject(
                        Stage.HOOK,
                        f"hook {h.name} produced invalid arguments: {err.message}",
                        d.name,
                    )
                b.step(StepName.REVALIDATE, t, "schema", "accept", None)
                verdict = self._authorize(b, entry, checked, call.mode, t, (h.name, args))
                if verdict is not None:
                    if isinstance(verdict, ToolResultEnvelope):
                        return verdict
                    approval = yield from self._approve(b, d, checked, verdict)
                    if approval is not None:
                        return approval
                args = checked
                b.args_redacted = hook_args = redact_args(self, args)
                continue
            b.step(
                StepName.PRE_HOOK,
                t,
                decider,
                dec.action.value,
                {"reason": reason} if reason else None,
            )

        # 5. admission, deadline, strict audit, execute
        if b.call_id in self._cancel_early or b.run_id in self._cancelled_runs:
            b.step(
                StepName.ADMISSION,
                time.perf_counter_ns(),
                "runtime",
                "reject",
                {"reason": "cancelled"},
            )
            return b.reject(Stage.CANCEL, "it was cancelled before it started", d.name)
        timeout = d.timeout_s
        detail: dict[str, Any] | None = None
        if call.timeout_s is not None:
            asked = float(untyped.timeout_s)  # an int passes _check_call too
            timeout = min(max(asked, 0.001), self.max_timeout_s)
            if timeout != asked:
                detail = {"timeout_requested_s": asked, "timeout_s": timeout}
        t = b.last  # admission begins where the last step ended (one clock read less)
        adm: AdmissionResult
        if self._admission.try_acquire(d.name):
            adm = _FREE
        else:
            adm = yield _Admit(d.name, b.run_id, self.admission_timeout_s, b.call_id)
        if adm is _FREE and not detail:
            info = _FREE_INFO  # shared and never mutated: records are read-only downstream
        else:
            info = {"waited_ms": round(adm.waited_s * 1000, 3), "reason": adm.reason}
            if detail:
                info.update(detail)
        if not adm.admitted:
            b.step(StepName.ADMISSION, t, "runtime", "reject", info)
            stage = Stage.CANCEL if adm.reason == "cancelled" else Stage.ADMISSION
            return b.reject(
                stage,
                _ADMISSION_TEXT.get(adm.reason, adm.reason),
                d.name,
                retry=Retry(adm.reason != "shutdown", after_ms=250),
            )
        b.step(_ADMISSION, t, "runtime", "accept", info)
        released = False
        try:
            for sink in self._durable:
                t = time.perf_counter_ns()
                failure = yield _Intent(
                    sink, b.call_id, b.run_id, d.name, b.t_wall, b.args_redacted
                )
                if failure is not None:
                    b.step(
                        StepName.AUDIT_INTENT,
                        t,
                        "audit",
                        "reject",
                        {"error": error_text(self, failure)},
                    )
                    return b.reject(
                        Stage.AUDIT, "the audit record could not be made durable", d.name
                    )
                b.step(StepName.AUDIT_INTENT, t, "audit", "durable", None)
            span = b.span
            ctx = CallContext(  # positional: this runs on every call
                b.call_id,
                b.run_id,
                d.name,
                timeout,
                self.workspace,
                self.artifacts,
                None if span is None else _traceparent(span),
                call.background and d.background,
                self._emit_late_fn,
            )
            # Plain dict operations are atomic under the GIL; cancel() copies before iterating.
            self._active[b.call_id] = ctx
            if b.call_id in self._cancel_early:  # cancelled while it was being admitted
                ctx.signal("cancel")
            b.execution_started = True
            t = b.last
            released = True  # from here the executor's finally gives the slot back
            out: Outcome
            if entry.inline:
                out = execute_inline(self, entry, ctx, args, b.span)
            elif blocking:
                # The blocking driver would only hand the operation back to this thread: run it
                # here and save the round trip through the generator.
                out = execute_blocking(self,
                    Execute(entry, ctx, args, b.span, self.cancel_grace_s)
                )
            else:
                out = yield Execute(entry, ctx, args, b.span, self.cancel_grace_s)
        finally:
            if not released:
                self._admission.release(d.name)
        env: ToolResultEnvelope | None = None
        try:
            env = self._finish(b, entry, ctx, out, t)
            if self._post_hook_list:
                env = yield from self._post_hooks(b, entry, env)
            else:
                env = b.emit(env)
        finally:
            self._active.pop(b.call_id, None)
            ctx._final = env.status if env is not None else None
            ctx._done = True
        return env

    def _authorize(
        self,
        b: Builder,
        entry: Entry,
        args: Mapping[str, Any],
        mode: str,
        t: int,
        hook: tuple[str, Mapping[str, Any]] | None,
    ) -> ToolResultEnvelope | _Ask | None:
        """Resource scope and argument rules; ``hook`` = (name, arguments before).

        A plain function (no generator on the common path): a rule that asks returns ``_Ask``
        and the pipeline then runs ``_approve``, which may yield to the approver."""
        d = entry.definition
        stage = _HOOK_STAGE if hook else _POLICY_STAGE
        resolved: dict[str, str] = {} if d.path_params else _NO_PATHS
        for p in d.path_params:
            value = args.get(p)
            if value is None:
                continue
            if not isinstance(value, str):
                b.step(StepName.POLICY, t, "policy:path_scope", "deny", {"param": p})
                return b.reject(stage, f"argument {p} must be a path string", d.name)
            try:
                rp = self.workspace.resolve(value, must_exist=False)
            except PathPolicyError as exc:
                b.step(
                    StepName.POLICY,
                    t,
                    "policy:path_scope",
                    "deny",
                    {"param": p, "reason": exc.reason},
                )
                return b.reject(stage, f"path not allowed ({exc.reason}): {exc}", d.name)
            resolved[p] = rp.relative
            if hook is not None:
                before = hook[1].get(p)
                if (
                    isinstance(before, str)
                    and before != value
                    and not self._narrows(before, rp.relative)
                ):
                    b.step(
                        StepName.POLICY,
                        t,
                        "policy:hook_scope",
                        "deny",
                        {"param": p, "reason": "widened path scope", "hook": hook[0]},
                    )
                    return b.reject(
                        Stage.HOOK, f"hook {hook[0]} tried to widen a path's scope", d.name
                    )
        req = PolicyRequest(d, args, mode, b.run_id, b.call_id, resolved)
        decision, rules = self.policy.evaluate(req)
        if decision is None:
            if resolved:
                b.step(
                    StepName.POLICY, t, "policy", "allow", {"rules": list(rules), "paths": resolved}
                )
                return None
            # Shared and never mutated (records are read-only downstream), like _FREE_INFO.
            detail = self._allow_details.get(rules)
            if detail is None:
                detail = {"rules": list(rules)}
                if len(self._allow_details) < 64:
                    # Redacted once here, so the record builder may skip it on every call.
                    detail = detached(self.redactor.redact(detail)[0])
                    self._allow_details[rules] = detail
                    self._vetted.add(id(detail))
            b.step(_POLICY, t, "policy", "allow", detail)
            return None
        reason = scrub(self, decision.reason)[:300]
        decider = f"policy:{decision.rule}"
        if decision.verdict is Verdict.DENY:
            b.step(StepName.POLICY, t, decider, "deny", {"reason": reason, "paths": resolved})
            return b.reject(stage, f"denied by policy rule {decision.rule}: {reason}", d.name)
        t = b.step(StepName.POLICY, t, decider, "ask", {"reason": reason, "paths": resolved})
        return _Ask(decision, reason, decider, t)

    def _approve(
        self, b: Builder, d: ToolDefinition, args: Mapping[str, Any], ask: _Ask
    ) -> Generator[_Op, Any, ToolResultEnvelope | None]:
        """Ask the approver (or apply TOOLTRACE_APPROVAL when there is none)."""
        decision, reason, decider, t = ask
        if self.approver is None:
            allow = os.environ.get(_config.TOOLTRACE_APPROVAL, "deny").strip().lower() == "allow"
            b.step(
                StepName.APPROVAL,
                t,
                decider,
                "approve" if allow else "deny",
                {"reason": "no approver configured"},
            )
            if not allow:
                return b.reject(
                    Stage.APPROVAL, "approval required and no approver is configured", d.name
                )
            return None
        areq = ApprovalRequest(
            b.call_id, b.run_id, d.name, redact_args(self, args), decision.rule, reason
        )
        kind, res = yield _Approve(areq)
        if kind != "ok" or not isinstance(res, ApprovalDecision):
            b.step(
                StepName.APPROVAL,
                t,
                "user:unknown",
                "deny",
                {"error": error_text(self, res) if isinstance(res, BaseException) else "no answer"},
            )
            return b.reject(Stage.APPROVAL, "the approver failed to answer", d.name)
        who = re.sub(r"[^A-Za-z0-9@._-]", "_", res.who or "unknown")[:64]
        areason = scrub(self, res.reason)[:300]
        b.step(
            StepName.APPROVAL,
            t,
            f"user:{who}",
            "approve" if res.approved else "deny",
            {"reason": areason, "rule": decision.rule},
        )
        if not res.approved:
            return b.reject(Stage.APPROVAL, f"denied by {who}", d.name)
        return None

    def _check_call(self, call: ToolCall) -> str | None:
        """Why a ToolCall's own fields are unusable, or None."""
        c: Any = call  # untyped reads: compiled code would check the declared types first
        cid, rid, mode = c.call_id, c.run_id, c.mode
        if cid is not None and (type(cid) is not str or not _UUID_RE.match(cid)):
            return "call_id must be a UUID string"
        if rid is not None and (
            type(rid) is not str
            or not _TOKEN_RE.match(rid)
            or self.redactor.redact_text(rid) != rid
        ):
            return "run_id must be 1-128 characters of [A-Za-z0-9._:-] and not a secret"
        if mode not in self.policy.modes and (
            type(mode) is not str
            or not _TOKEN_RE.match(mode)
            or self.redactor.redact_text(mode) != mode
        ):
            return "mode must be 1-128 characters of [A-Za-z0-9._:-] and not a secret"
        t = c.timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or not t > 0):
            return "timeout_s must be a positive number"
        if not isinstance(c.background, bool):
            return "background must be a boolean"
        attrs = c.attributes
        if type(attrs) is not dict and not isinstance(attrs, Mapping):
            return "attributes must be a mapping"
        return None

    def _clean_attributes(self, attrs: Mapping[str, Any]) -> dict[str, str | int | bool]:
        """Extra span attributes, bounded and redacted (they reach every sink)."""
        out: dict[str, str | int | bool] = {}
        for k, v in list(attrs.items())[:32]:
            if type(k) is not str or not _TOKEN_RE.match(k):
                continue
            if isinstance(v, bool | int):
                out[k] = v
            elif isinstance(v, float):
                out[k] = str(v)
            else:
                out[k] = self.redactor.redact_text(str(v)[:256])
        return out

    def _narrows(self, before: str, after_relative: str) -> bool:
        """A hook may move a path only within the directory the original path named."""
        try:
            orig = self.workspace.resolve(before, must_exist=False).relative
        except PathPolicyError:
            return False
        scope = orig.rsplit("/", 1)[0] if "/" in orig else ""
        if orig == after_relative:
            return True
        return (scope == "" and "/" not in after_relative) or after_relative.startswith(scope + "/")

    def _merge_hook_args(
        self, raw: Mapping[str, Any], shown: Mapping[str, Any], new: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Hooks see redacted arguments; values they hand back unchanged keep the raw original."""
        out: dict[str, Any] = {}
        for k, v in new.items():
            out[k] = raw[k] if k in raw and k in shown and shown[k] == v else v
        return out

    def _post_hooks(
        self, b: Builder, entry: Entry, env: ToolResultEnvelope
    ) -> Generator[_Op, Any, ToolResultEnvelope]:
        d = entry.definition
        posts = (
            [h for h in self._post_hook_list if h.applies_to(d.name)]
            if self._post_hook_list
            else ()
        )
        if not posts:
            return b.emit(env)
        data = env.data
        status = env.status
        summary = env.summary
        error_type = b.error_type
        for h in posts:
            view = _hook_view(b, d, b.args_redacted or {}, "post", status.value, data)
            t = time.perf_counter_ns()
            kind, res = yield _RunHook(h, view)
            decider = f"hook:{h.name}"
            if kind != "ok":
                what = "timed out" if kind == "timeout" else "raised an error"
                if h.required and status is Status.OK:
                    b.step(StepName.POST_HOOK, t, decider, "block", {"error": what})
                    status, data, error_type = Status.FAILED, None, "post_hook_error"
                    summary = (
                        f"{d.name} ran, but its result was withheld: required hook {h.name} {what}"
                    )
                else:
                    b.step(StepName.POST_HOOK, t, decider, "warn", {"error": what})
                continue
            dec: HookDecision = res
            reason = scrub(self, dec.reason)[:300]
            if dec.action is HookAction.BLOCK and status is Status.OK:
                b.step(StepName.POST_HOOK, t, decider, "block", {"reason": reason})
                status, data, error_type = Status.FAILED, None, "post_hook_block"
                summary = f"{d.name} ran, but hook {h.name} withheld its result: {reason}"
            elif dec.action is HookAction.MODIFY and status is Status.OK:
                data, _ = self.redactor.redact(dec.result)
                b.step(StepName.POST_HOOK, t, decider, "modify", {"reason": reason})
                b.hook_modified = True
            else:
                ann = dict(dec.annotations) if dec.annotations else None
                if ann is not None:
                    ann = detached(self.redactor.redact(ann)[0])
                b.step(
                    StepName.POST_HOOK,
                    t,
                    decider,
                    dec.action.value,
                    {"reason": reason, "annotations": ann} if (reason or ann) else None,
                )
        b.error_type = error_type
        env = b.envelope(
            status,
            summary,
            data,
            env.artifact,
            env.record.reject_stage,
            env.record.result_preview,
            retry=env.retry,
        )
        return b.emit(env)

    def _finish(
        self, b: Builder, entry: Entry, ctx: CallContext, out: Outcome, t: int
    ) -> ToolResultEnvelope:
        """Map an execution outcome to a status, redact, trim and offload."""
        d = entry.definition
        side_effects = d.effect is not _NO_EFFECT
        steps = b.steps
        signal = out.signal
        tool_summary: str | None = None
        value = out.value
        result_detail: Mapping[str, Any] | None = None
        if type(value) is ToolResult or isinstance(value, ToolResult):
            tool_summary = value.summary
            result_detail = value.detail
            value = value.data
        exec_detail: Mapping[str, Any]
        if ctx.detail or signal is not None or result_detail:
            exec_detail = {"timeout_s": ctx.timeout_s}
            if ctx.detail:
                exec_detail.update(detached(self.redactor.redact(ctx.detail)[0]))
            if signal is not None:
                exec_detail["signal"] = signal
            if result_detail:
                exec_detail.update(detached(self.redactor.redact(dict(result_detail))[0]))
        else:
            # Shared per timeout and never mutated (records are read-only downstream).
            exec_detail = _EXEC_DETAILS.get(ctx.timeout_s) or _exec_detail(ctx.timeout_s)
        now = b.step(_EXECUTE, t, "tool", out.kind, exec_detail)
        if signal is not None and out.signal_at is not None:
            sig_ns = int(out.signal_at * 1e9)
            name = StepName.DEADLINE if signal == "deadline" else StepName.CANCEL_REQUESTED
            steps.append(
                Step(
                    len(steps),
                    name,
                    b.us_mono(sig_ns),
                    0,
                    "runtime",
                    "signal",
                    {"cancellable": d.cancellable, "grace_s": self.cancel_grace_s},
                )
            )
        if signal is not None:
            # A confirmed cancel is its own step ("cancel requested" and "cancelled" differ);
            # anything else that was told to stop says whether it confirmed.
            confirmed = out.kind != "abandoned"
            name = StepName.CANCELLED if confirmed and signal == "cancel" else StepName.STOPPED
            steps.append(
                Step(
                    len(steps),
                    name,
                    b.us(_perf_ns()),
                    0,
                    "runtime",
                    "confirmed" if confirmed else "unconfirmed",
                    {"outcome": out.kind},
                )
            )
        status, summary, retry, etype = outcome_rules(
            out.kind,
            signal,
            out.error,
            side_effects,
            tool=d.name,
            tool_summary=scrub(self, tool_summary)[:500] if tool_summary else "",
            error_text=error_text(self, out.error) if out.error is not None else "",
            timeout_s=ctx.timeout_s,
            grace_s=self.cancel_grace_s,
            call_id=b.call_id,
        )
        b.error_type = etype
        if status is not _OK:
            return b.envelope(status, summary, None, None, None, None, retry=retry)
        # 6. redact and trim
        artifact: Artifact | None = None
        t = now
        data, n = self.redactor.redact(value)
        text = data if type(data) is str else _to_text(data)
        result_preview = text[: self.preview_chars] if text is not None else None
        t = b.step(
            _REDACT,
            t,
            "redactor",
            "redacted" if n else "clean",
            {"redactions": n} if n else None,
        )
        if text is not None and len(text) > self.max_inline_chars:
            try:
                artifact = self.artifacts.put(text)
            except OSError as exc:
                b.step(
                    StepName.OFFLOAD, _perf_ns(), "runtime", "error", {"error": error_type(exc)}
                )
                artifact = None
            else:
                b.step(
                    StepName.OFFLOAD,
                    t,
                    "runtime",
                    "offloaded",
                    {"chars": artifact.chars, "sha256": artifact.sha256, "path": artifact.path},
                )
            data = preview(text, self.preview_chars)
            result_preview = data
        if not summary or summary.startswith(" ("):
            size = len(text) if text is not None else 0
            where = f"; full output in artifact sha256:{artifact.sha256[:12]}" if artifact else ""
            summary = f"{d.name} succeeded ({size} chars{where})" + summary
        return b.envelope(status, summary, data, artifact, None, result_preview, retry=retry)

    # -- helpers ------------------------------------------------------------------------------

    def _emit_late(
        self,
        call_id: str,
        run_id: str,
        tool: str,
        step: str,
        decision: str,
        detail: Mapping[str, Any] | None,
    ) -> None:
        red = detached(self.redactor.redact(dict(detail))[0]) if detail else None
        seq = self._statuses.next_late_seq(call_id)
        s = Step(seq, step, time.time_ns() // 1000, 0, "runtime", decision, red)
        late = LateStep(call_id, run_id, tool, s)
        for sink in self._late_sinks:
            try:
                sink.emit_late(late)
            except Exception:
                self.sink_errors += 1

    # -- drivers ------------------------------------------------------------------------------

    def _serve(self, op: _Op) -> Any:
        if isinstance(op, Execute):
            return execute_blocking(self, op)
        if isinstance(op, _Admit):
            return self._admission.acquire(op.tool, op.run_id, op.timeout_s, op.call_id)
        if isinstance(op, _RunHook):
            res = self._bounded(self._hook_pool, op.hook, op.view, op.hook.timeout_s)
            if res[0] == "timeout":
                self._replace_hook_pool()
            return res
        if isinstance(op, _Approve):
            assert self.approver is not None
            try:
                return "ok", self.approver(op.request)
            except Exception as exc:
                return "error", exc
        return self._write_intent(op)

    async def _aserve(self, op: _Op) -> Any:
        loop = asyncio.get_running_loop()
        if isinstance(op, Execute):
            return await execute_async(self, op)
        if isinstance(op, _Admit):
            return await self._admission.acquire_async(op.tool, op.run_id, op.timeout_s, op.call_id)
        if isinstance(op, _RunHook):
            fut = loop.run_in_executor(self._hook_pool, _guard, op.hook, op.view)
            try:
                return await asyncio.wait_for(fut, op.hook.timeout_s)
            except TimeoutError:
                self._replace_hook_pool()
                return "timeout", None
        if isinstance(op, _Approve):
            approver = self.approver
            assert approver is not None
            return await loop.run_in_executor(self._hook_pool, _guard, approver, op.request)
        return await loop.run_in_executor(self._hook_pool, self._write_intent, op)

    @staticmethod
    def _bounded(
        pool: concurrent.futures.Executor, fn: Callable[[Any], Any], arg: Any, timeout_s: float
    ) -> tuple[str, Any]:
        fut = pool.submit(_guard, fn, arg)
        try:
            res: tuple[str, Any] = fut.result(timeout_s)
            return res
        except concurrent.futures.TimeoutError:
            return "timeout", None

    def _replace_hook_pool(self) -> None:
        """A hook overran its limit and still holds a pool thread: give later hooks a fresh
        pool, so a hung hook cannot starve healthy ones (its thread ends when it returns)."""
        with self._reg_lock:
            old, self._hook_pool = self._hook_pool, make_pool(self._hook_threads, "tooltrace-hook")
        old.shutdown(wait=False)

    def _write_intent(self, op: _Intent) -> BaseException | None:
        try:
            op.sink.write_intent(op.call_id, op.run_id, op.tool, op.started_at_us, op.args)
        except Exception as exc:
            return (
                exc
                if isinstance(exc, AuditUnavailableError)
                else AuditUnavailableError(f"{type(exc).__name__}")
            )
        return None

_perf_ns = time.perf_counter_ns
_allocate_lock = threading.Lock
# Enum members read through their class cost a metaclass lookup each: the hot path reads these.
# The hot steps' names as plain strings (equal to the StepName members): a dict holding only
# plain values can be untracked by the garbage collector, an enum member keeps it tracked, and
# every span event's attributes hold the step's name.
_RESOLVE, _VALIDATE, _POLICY = str(StepName.RESOLVE), str(StepName.VALIDATE), str(StepName.POLICY)
_ADMISSION, _EXECUTE, _REDACT = (
    str(StepName.ADMISSION),
    str(StepName.EXECUTE),
    str(StepName.REDACT),
)
_OK, _UNKNOWN, _NO_EFFECT = Status.OK, Status.UNKNOWN, Effect.NONE
_HOOK_STAGE, _POLICY_STAGE = Stage.HOOK, Stage.POLICY
_NO_PATHS: dict[str, str] = {}  # shared by calls of tools without path arguments, never mutated
_uuid7 = uuid_utils.uuid7
_EXEC_DETAILS: dict[float, Mapping[str, Any]] = {}


def _exec_detail(timeout_s: float) -> Mapping[str, Any]:
    detail = {"timeout_s": timeout_s}
    if len(_EXEC_DETAILS) < 256:
        _EXEC_DETAILS[timeout_s] = detail
        VETTED.add(id(detail))
    return detail


_FREE = AdmissionResult(True, 0.0, "free")
_FREE_INFO: Mapping[str, Any] = {"waited_ms": 0.0, "reason": "free"}
VETTED.add(id(_FREE_INFO))
_RETRY_OK = Retry(True)
_UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
_TOKEN_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

_ADMISSION_TEXT = {
    "queue_full": "too many calls waiting for a slot (queue full)",
    "timeout": "no concurrency slot became free in time",
    "cancelled": "it (or its run) was cancelled while it waited for a slot",
    "shutdown": "the registry is shutting down",
}


def _guard(fn: Callable[[Any], Any], arg: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(arg)
    except Exception as exc:
        return "error", exc


def _to_text(value: Any) -> str | None:
    if value is None:
        return None
    if type(value) is int:
        return str(value)  # the same text as JSON, without the encoder
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return str(value)


def _traceparent(span: OpenSpan | None) -> str | None:
    if span is None:
        return None
    return f"00-{span.trace_id}-{span.span_id}-{'01' if span.sampled else '00'}"


def _diff(before: Any, after: Any) -> dict[str, Any]:
    """A small argument diff (both sides already redacted)."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return {"before": before, "after": after}
    changed = {k: [before[k], after[k]] for k in before if k in after and before[k] != after[k]}
    added = {k: after[k] for k in after if k not in before}
    removed = [k for k in before if k not in after]
    out: dict[str, Any] = {}
    if changed:
        out["changed"] = changed
    if added:
        out["added"] = added
    if removed:
        out["removed"] = removed
    return out


def _hook_view(
    b: Builder,
    d: ToolDefinition,
    arguments: Mapping[str, Any],
    phase: Literal["pre", "post"] = "pre",
    status: str | None = None,
    result: Any = None,
) -> HookView:
    """What a hook sees of the call (arguments already redacted)."""
    return HookView(
        b.call_id,
        b.run_id,
        d.name,
        d.source,
        d.capability.value,
        d.effect.value,
        b.mode,
        arguments,
        phase,
        status,
        result,
    )


_build.keep_docs(__name__, globals())
