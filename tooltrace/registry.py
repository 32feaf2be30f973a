"""The tool registry: registration, the shadow report, the one execution entry
(``call``/``acall``), cancellation, status, flush and shutdown.

The registry holds what outlives a call (the tool table, the sinks, the runtime's threads, the
book of active calls) and hands each call's pipeline (``tooltrace.pipeline``) a frozen
``Environment`` of it; the pipeline never sees the registry. A setting changed on the registry
(``policy``, ``approver``, ``redactor``, ...) makes a new environment for the calls that
start after it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from . import _settings, pipeline
from ._ids import CLOCK_SKEW_S, id_prefix, new_run_id
from .events import Subscription
from .hooks import Hook, by_phase
from .model import (
    CallStatus,
    FunctionTool,
    Principal,
    Resolution,
    RunPrincipals,
    Status,
    ToolDefinition,
    ToolListing,
    ToolResultEnvelope,
    ToolTable,
    Visibility,
    make_entry,
    tool_listing,
)
from .pipeline import (
    AttributeMemo,
    Book,
    Emitter,
    Environment,
    EventHub,
)
from .policy import ApprovalCache, ApprovalDecision, ApprovalRequest, Policy, Workspace
from .redaction import ArtifactStore, Redactor
from .runtime import Admission, CallContext, LoopThread, RenewablePool, ToolThreads
from .sinks import (
    ApprovalSink,
    BindingSink,
    DurableSink,
    LateSink,
    Sink,
    SpanOpener,
    TrailSink,
)
from .snapshots import SnapshotStore

if TYPE_CHECKING:
    from .pipeline import RawCall

__all__ = ["Approver", "ToolRegistry"]

#: Decides a call a policy rule asked about.
Approver = Callable[[ApprovalRequest], ApprovalDecision]


class ToolRegistry:
    """Registered tools and the one way to run them.

    Everything is optional: with no arguments the workspace is the current directory, the home
    is ``TOOLTRACE_HOME`` or the workspace's own in the user's state directory, the default
    policy applies and no sinks are attached (telemetry off). The keywords:

    - ``workspace``: the directory tools work in; path arguments must resolve inside it (a
      path, or a ``Workspace``).
    - ``home``: where tooltrace keeps its files; no tool's path may lead into it.
    - ``sinks``: telemetry sinks; each gets every finished, redacted record (see ``add_sink``).
    - ``tracer``: mints each call's span ids before it runs; by default the first sink that is
      a ``SpanOpener`` (a tracing sink).
    - ``policy``: the rules that decide whether a call may run (``Policy()`` by default).
    - ``hooks``: pre- and post-hooks (``phase`` ``"pre"`` or ``"post"``), run in this order.
    - ``approver``: decides a call a policy rule asked about; without one,
      ``TOOLTRACE_APPROVAL=allow`` approves and anything else denies.
    - ``redactor``: hides secrets in records, hook views, summaries and results.
    - ``run_id``: the run a call belongs to unless it names its own (a new id by default).
    - ``max_concurrency``: calls running at once, all tools together (and the tool threads).
    - ``max_queue``: calls that may wait for a slot; one more is refused (``queue_full``).
    - ``tool_concurrency``: caps per tool, ``{name: n}`` (a tool's own ``max_concurrency``
      applies where none is given here).
    - ``admission_timeout_s``: how long a call waits for a slot before it is refused.
    - ``max_timeout_s``: the longest timeout a call may ask for (``TOOLTRACE_MAX_TIMEOUT_S``,
      600 s by default).
    - ``cancel_grace_s``: how long a tool told to stop (deadline, cancel) has to confirm it;
      a side-effecting tool that does not ends ``unknown``.
    - ``max_inline_chars``: a result longer than this (as text) goes to an artifact.
    - ``preview_chars``: how much of a result the record keeps (and an offloaded envelope).
    - ``hook_threads``: threads for hooks, the approver and strict audit writes.
    - ``max_depth``: how deeply tools may nest calls through their context (``ctx.call``);
      a deeper call is refused (``TOOLTRACE_MAX_DEPTH``, 8 by default).
    - ``progress_interval_s``: the shortest time between two published progress reports of
      one call (``ctx.progress``); reports in between are held back, the latest kept.
    - ``snapshot_max_bytes``: the largest file kept as a snapshot before a tool that declares
      ``writes`` runs (``TOOLTRACE_SNAPSHOT_MAX_BYTES``, 8 MiB by default).
    - ``principal``: whom the registry's own run acts for (calls of the run that name none
      carry it; a call that names another user, tenant or roles is refused, one that names
      another agent is not).
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
        max_depth: int | None = None,
        progress_interval_s: float = 0.1,
        snapshot_max_bytes: int | None = None,
        principal: Principal | None = None,
    ) -> None:
        ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace or os.getcwd())
        self.home = _settings.resolve_home(home, workspace=ws.root)
        workspace_ = ws.with_protected(_settings.protected_paths(self.home, ws.root))
        self.group_descriptions: dict[str, str] = {}  # see describe_group
        redactor = redactor if redactor is not None else Redactor()
        run_id = run_id or new_run_id()
        pre_hooks, post_hooks = by_phase(tuple(hooks))
        sinks = tuple(sinks)
        # A tracing sink is also the span opener: callers need not pass it twice.
        opener = next((s for s in sinks if isinstance(s, SpanOpener)), None)
        self._emitter = Emitter()
        self._shutdown_callbacks: list[Callable[[float], None]] = []
        self._closed = False
        self._env = Environment(
            run_id=run_id,
            workspace=workspace_,
            artifacts=ArtifactStore(self.home / "artifacts"),
            snapshots=SnapshotStore(self.home, snapshot_max_bytes),
            policy=policy if policy is not None else Policy(),
            approver=approver,
            redactor=redactor,
            tools=ToolTable(),
            principals=RunPrincipals.starting(run_id, principal, redactor),
            pre_hooks=pre_hooks,
            post_hooks=post_hooks,
            tracer=tracer if tracer is not None else opener,
            admission=Admission(max_concurrency, max_queue, tool_concurrency),
            pool=ToolThreads(max_concurrency, "tooltrace-tool"),
            hook_threads=RenewablePool(hook_threads, "tooltrace-hook"),
            loop=LoopThread(),
            hub=EventHub(redactor, progress_interval_s),
            book=Book(),
            emitter=self._emitter,
            approvals=ApprovalCache(),
            attributes=AttributeMemo(),
            max_timeout_s=_settings.max_timeout_s(max_timeout_s),
            admission_timeout_s=admission_timeout_s,
            cancel_grace_s=cancel_grace_s,
            max_inline_chars=max_inline_chars,
            preview_chars=preview_chars,
            max_depth=_settings.max_depth(max_depth),
            # A caller's UUIDv7 id below this (clock skew allowed) may be in an earlier
            # process's trail.
            trail_from=id_prefix(time.time() + CLOCK_SKEW_S),
            # Records show these for host paths (scrub).
            root_text=str(workspace_.root),
            home_text=str(self.home.resolve()),
        )
        for sink in sinks:
            self.add_sink(sink)

    # -- settings: each change makes a new environment for the calls that start after it ------

    def _replace(self, **changes: Any) -> None:
        self._env = replace(self._env, **changes)

    @property
    def environment(self) -> Environment:
        """What the pipeline of a call starting now is handed (``tooltrace.pipeline``)."""
        return self._env

    @property
    def run_id(self) -> str:
        """The run a call belongs to unless it names its own."""
        return self._env.run_id

    @property
    def workspace(self) -> Workspace:
        """The directory tools work in (the home and its files are protected in it)."""
        return self._env.workspace

    @workspace.setter
    def workspace(self, value: Workspace) -> None:
        ws = value.with_protected(_settings.protected_paths(self.home, value.root))
        self._replace(workspace=ws, root_text=str(ws.root))

    @property
    def artifacts(self) -> ArtifactStore:
        """Where results too big to keep inline go."""
        return self._env.artifacts

    @property
    def snapshots(self) -> SnapshotStore:
        """What files held before a tool that declares ``writes`` ran."""
        return self._env.snapshots

    @property
    def policy(self) -> Policy:
        """The rules that decide whether a call may run."""
        return self._env.policy

    @policy.setter
    def policy(self, value: Policy) -> None:
        self._replace(policy=value)

    @property
    def approver(self) -> Approver | None:
        """Decides a call a policy rule asked about (None: ``TOOLTRACE_APPROVAL`` decides)."""
        return self._env.approver

    @approver.setter
    def approver(self, value: Approver | None) -> None:
        self._replace(approver=value)

    @property
    def redactor(self) -> Redactor:
        """Hides secrets in records, hook views, summaries and results."""
        return self._env.redactor

    @redactor.setter
    def redactor(self, value: Redactor) -> None:
        self._env.hub.redactor = value
        self._replace(redactor=value, made_texts={}, allowed_rules={})

    @property
    def max_timeout_s(self) -> float:
        """The longest timeout a call may ask for."""
        return self._env.max_timeout_s

    @property
    def admission_timeout_s(self) -> float:
        """How long a call waits for a concurrency slot before it is refused."""
        return self._env.admission_timeout_s

    @property
    def cancel_grace_s(self) -> float:
        """How long a tool told to stop has to confirm it."""
        return self._env.cancel_grace_s

    @property
    def max_inline_chars(self) -> int:
        """A result longer than this (as text) goes to an artifact."""
        return self._env.max_inline_chars

    @property
    def preview_chars(self) -> int:
        """How much of a result the record keeps."""
        return self._env.preview_chars

    @property
    def max_depth(self) -> int:
        """How deeply tools may nest calls through their context (deeper: refused)."""
        return self._env.max_depth

    @property
    def sink_errors(self) -> int:
        """Sink (and shutdown callback) errors: counted, never raised into a call."""
        return self._emitter.errors

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
        self._env.tools.add(entry)
        if definition.max_concurrency is not None:
            self._env.admission.tool_caps.setdefault(definition.name, definition.max_concurrency)
        return definition

    def unregister(self, name: str, source: str) -> None:
        """Remove one source's definition of ``name`` (the next one becomes active)."""
        self._env.tools.remove(name, source)

    def resolution(self) -> list[Resolution]:
        """The shadow report: every name, its active source and what it shadows (sorted)."""
        return self._env.tools.resolution()

    def definition(self, name: str) -> ToolDefinition | None:
        """The active (effective) definition of ``name``, or None."""
        e = self._env.tools.active.get(name)
        return e.definition if e is not None else None

    def visible_tools(self, mode: str = "default") -> Visibility:
        """Tools the mode exposes, sorted by name, and the hidden ones with reasons (entries
        that are not tools, ``ToolDefinition.listed`` False, are in neither)."""
        visible: list[ToolDefinition] = []
        hidden: list[tuple[str, str]] = []
        active = self._env.tools.active
        for name in sorted(active):
            d = active[name].definition
            if not d.listed:
                continue
            ok, why = self.policy.mode_allows(d, mode)
            if ok:
                visible.append(d)
            else:
                hidden.append((name, why))
        return Visibility(mode, tuple(visible), tuple(hidden))

    def describe_group(self, group: str, description: str) -> None:
        """Say what a tool group is for: the one line a collapsed listing shows for it."""
        self.group_descriptions[group] = description

    def tool_listing(self, mode: str = "default", expand: Iterable[str] = ()) -> ToolListing:
        """The tools ``mode`` shows with each group collapsed to one line (except those in
        ``expand``) and ``load_tools`` to open one; stable bytes (``ToolListing.to_json``).
        See ``tooltrace.model._listing``."""
        return tool_listing(self, mode, expand)

    def acting_principal(
        self, run_id: str | None = None, principal: Principal | None = None
    ) -> Principal | None:
        """Whom a call of ``run_id`` (default: this registry's run) naming ``principal`` would
        act as, the run's binding applied; binds nothing (for judging a call before it runs)."""
        return self._env.principals.peek(run_id or self.run_id, principal)

    def tool_names(self) -> frozenset[str]:
        """Names of the registered tools: the closed set of metric label values."""
        return frozenset(self._env.tools.active)

    # -- sinks and runtime state --------------------------------------------------------------

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The attached telemetry sinks."""
        return self._emitter.sinks

    def add_sink(self, sink: Sink) -> None:
        """Attach a sink and take note of the other roles it takes on (``tooltrace.sinks``):
        a ``LateSink`` also gets late steps, a ``BindingSink`` is bound here, a strict
        ``DurableSink`` makes each call's intent durable before the call runs, a ``TrailSink``
        is asked about caller-supplied call ids the registry cannot vouch for."""
        em = self._emitter
        em.sinks = (*em.sinks, sink)
        if isinstance(sink, DurableSink) and sink.strict:
            em.durable = (*em.durable, sink)
        if isinstance(sink, LateSink):
            em.late_sinks = (*em.late_sinks, sink)
        if isinstance(sink, TrailSink):
            em.trail_sinks = (*em.trail_sinks, sink)
        if isinstance(sink, ApprovalSink):
            em.approval_sinks = (*em.approval_sinks, sink)
        if isinstance(sink, BindingSink):
            sink.bind(self)

    def register_secret(self, value: str) -> None:
        """Redact ``value`` (raw and encoded) from every record from now on: for secrets
        tooltrace itself holds (the audit sink's keys), so none reaches a sink or the model."""
        self.redactor.register_value(value)

    def inflight(self) -> dict[str, int]:
        """Calls holding a concurrency slot now, by tool."""
        return self._env.admission.inflight()

    def queue_depth(self) -> dict[str, int]:
        """Calls waiting for admission now, by tool."""
        return self._env.admission.queue_depth()

    def concurrency_limits(self) -> tuple[int, dict[str, int]]:
        """``(global cap, {tool: cap})``."""
        return self._env.admission.global_cap, dict(self._env.admission.tool_caps)

    def on_shutdown(self, callback: Callable[[float], None]) -> None:
        """Run ``callback(timeout_s)`` at shutdown (background jobs register here)."""
        self._shutdown_callbacks.append(callback)

    # -- the execution entry ------------------------------------------------------------------

    def call(self, call: RawCall) -> ToolResultEnvelope:
        """Run one tool call through the whole pipeline and return its envelope (blocking)."""
        return pipeline.run(self._env, call)

    async def acall(self, call: RawCall) -> ToolResultEnvelope:
        """Run one tool call through the same pipeline on the running event loop."""
        return await pipeline.arun(self._env, call)

    def subscribe(
        self,
        subscriber: Callable[[Any], Any],
        *,
        kinds: Iterable[str] | None = None,
        max_queue: int = 1024,
    ) -> Subscription:
        """Give ``subscriber`` a stream of call events (``tooltrace.events``): ``started``,
        each ``step``, ``progress`` and ``finished``, or only the ``kinds`` named.

        A plain function is called on a thread of its own; a coroutine function is awaited on
        the event loop running now (subscribe from it). Each subscription queues at most
        ``max_queue`` events: a slow subscriber loses events (counted in ``dropped``), one
        that raises is counted in ``errors``; neither slows or breaks a call. ``close()`` the
        returned ``Subscription`` to stop; ``shutdown`` closes them all.
        """
        return self._env.hub.subscribe(subscriber, kinds, max_queue)

    def new_call_id(self) -> str:
        """A fresh call id to give a call (``ToolCall(call_id=...)``) so it can be named before
        it runs (``cancel_call``, its events): one made here is known new, so unlike other
        supplied ids it is never looked up in the audit trail."""
        return self._env.book.statuses.mint()

    def status(self, call_id: str) -> CallStatus | None:
        """What the registry knows of a call: the last 4,096 calls, and the last 10,000 that
        ended ``unknown`` (None if it is not remembered; the audit trail has every call)."""
        return self._env.book.statuses.get(call_id)

    def cancel(self, run_id: str, *, wait: bool = True) -> dict[str, Status | None]:
        """Cancel a run: admit no more of its calls, signal each active one, wait the grace.

        Returns each affected call's final status (None if still undecided when the wait ends).
        """
        self._env.book.cancelled_runs.add(run_id)
        self._env.admission.cancel_run(run_id)
        targets = {cid: c for cid, c in list(self._env.book.active.items()) if c.run_id == run_id}
        return self._cancel_targets(targets, wait)

    def cancel_call(self, call_id: str, *, wait: bool = True) -> Status | None:
        """Cancel one call by id; return its final status (None if unknown or undecided)."""
        a = self._env.book.active.get(call_id)
        if a is None:
            if self._env.admission.cancel_call(call_id):
                return Status.REJECTED  # it was waiting for a slot: refused with stage cancel
            st = self.status(call_id)
            if st is not None:
                return st.status
            # Not started yet (still validating, in policy or hooks): refuse it when it gets to
            # admission. Bounded: ids that never show up are forgotten oldest first.
            self._env.book.cancel_early[call_id] = None
            if len(self._env.book.cancel_early) > 10_000:
                self._env.book.cancel_early.pop(next(iter(self._env.book.cancel_early)))
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
            while time.monotonic() < deadline and not all(c.has_returned
                                                          for c in targets.values()):
                time.sleep(0.002)
        return {cid: c.final_status for cid, c in targets.items()}

    # -- the end ------------------------------------------------------------------------------

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop admitting calls, run shutdown callbacks (jobs), flush and close every sink."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_s
        self._env.admission.close()
        # Give calls still running (abandoned ones included) part of the time to end, so their
        # late resolutions reach the sinks before those close.
        while self._env.admission.inflight() and time.monotonic() < deadline - timeout_s / 2:
            time.sleep(0.01)
        for cb in self._shutdown_callbacks:
            try:
                cb(max(0.0, deadline - time.monotonic()))
            except Exception:
                self._emitter.errors += 1
        for sink in self._emitter.sinks:
            try:
                sink.shutdown(max(0.1, deadline - time.monotonic()))
            except Exception:
                self._emitter.errors += 1
        env = self._env
        env.hub.close(max(0.1, deadline - time.monotonic()))
        env.pool.shutdown()
        env.hook_threads.shutdown()
        env.loop.stop()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Flush every sink; False if any missed the deadline."""
        ok = True
        for sink in self._emitter.sinks:
            try:
                ok = bool(sink.flush(timeout_s)) and ok
            except Exception:
                self._emitter.errors += 1
                ok = False
        return ok

    def __enter__(self) -> ToolRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
