"""Prometheus metrics for tool calls, with label values from closed sets only.

``MetricsSink`` queues each finished call on a ``BatchWorker`` and updates its counters and
histograms there, through cached label children, so the caller does not wait for
prometheus-client's per-value locks and checks. A
scrape first counts every call still queued (``flush``), so what it reads includes every call
that finished before it, as when the updates were made inline. In prometheus-client's
multiprocess mode, whose values are files another process reads, the updates stay inline: a
process that ends must leave nothing uncounted. Gauges that describe the registry's state right
now (in-flight calls, admission queue depths, concurrency caps) and every sink's drop counter
and queue depth are read at scrape time by a custom collector, so they cost nothing on the call
path.

The duration family is one histogram whose series may carry different ``le`` sets: each tool's
series use that tool's buckets (``tool_buckets``), else the default ones. prometheus-client
gives a ``Histogram`` one set of buckets, so the sink keeps one unregistered ``Histogram`` per
distinct set and a collector renders them as the one family (Prometheus reads each series'
buckets on their own, and ``histogram_quantile`` works per series). In multiprocess mode each of
those histograms writes its own files under the same name, and ``multiprocess_registry`` merges
them series by series.

The ``tool`` label is a registered tool's name, or ``_unregistered`` for anything else; a call
id, run id, path, argument or error text never becomes a label. Metric contract::

    tooltrace_tool_calls_total{tool,status}                status: what the call returned
    tooltrace_tool_unknown_resolved_total{tool,outcome}    calls that returned ``unknown`` and
                                                           were resolved later, by final outcome
    tooltrace_tool_rejections_total{tool,stage}
    tooltrace_tool_hook_modifications_total{tool}
    tooltrace_tool_offloads_total{tool}
    tooltrace_tool_call_duration_seconds{tool,status}      histogram, exemplar trace_id; a
                                                           tool's own buckets where
                                                           ``tool_buckets`` gives them
    tooltrace_tool_admission_wait_seconds{tool}            histogram
    tooltrace_policy_observed_total{tool,rule,decision}    observe-mode rules that would have
                                                           denied or asked (rule: the policy's
                                                           rule ids, else ``_other``)
    tooltrace_tool_inflight{tool}                          gauge, read at scrape
    tooltrace_tool_admission_queue_depth{tool}             gauge, read at scrape
    tooltrace_tool_concurrency_limit{tool}                 gauge, each tool's cap (its own,
                                                           else the global cap)
    tooltrace_concurrency_limit                            gauge, the global cap
    tooltrace_telemetry_dropped_total{sink}                read from each sink's ``dropped``
    tooltrace_telemetry_queue_depth{sink}                  read from each sink's ``depth``
    tooltrace_telemetry_export_errors_total{sink}          read from ``export_failures``
    tooltrace_audit_compaction_backlog_calls               calls the audit sinks wrote that
                                                           compaction has not taken yet
    tooltrace_audit_compaction_backlog_bytes               their bytes on disk
    tooltrace_audit_compaction_backlog_age_seconds         the age of the oldest of them
"""

from __future__ import annotations

import bisect
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..model import CallRecord, Stage, Status, StepName
from ..sinks import LateStep, RegistryState
from ._metricsserver import MetricsServer, multiprocess_registry, serve_metrics
from ._worker import BatchWorker

__all__ = [
    "ADMISSION_BUCKETS",
    "DURATION_BUCKETS",
    "OTHER_RULE",
    "SINK_LABELS",
    "UNREGISTERED",
    "MetricsServer",
    "MetricsSink",
    "multiprocess_registry",
    "serve_metrics",
]

#: The ``tool`` label value for any name that is not a registered tool.
UNREGISTERED: Final = "_unregistered"
#: Call duration buckets (seconds): 1 ms to 10 minutes, seven to a decade (1, 1.5, 2, 2.5,
#: 3.5, 5, 7.5), so neighbouring bounds are at most 1.5x apart and ``histogram_quantile``'s
#: interpolation stays within a bucket that narrow (a 1.3 s call reads between 1 and 1.5 s).
#: Pass ``buckets=`` to ``MetricsSink`` for another default, ``tool_buckets=`` for a tool's own.
DURATION_BUCKETS: Final = (
    0.001, 0.0015, 0.002, 0.0025, 0.0035, 0.005, 0.0075,
    0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.075,
    0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.75,
    1.0, 1.5, 2.0, 2.5, 3.5, 5.0, 7.5,
    10.0, 15.0, 20.0, 25.0, 35.0, 50.0, 75.0,
    100.0, 150.0, 200.0, 250.0, 350.0, 500.0, 600.0,
)
#: Admission wait buckets (seconds): 0.5 ms to 30 s.
ADMISSION_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
#: Values of the ``sink`` label; any other sink name is reported as ``other``.
SINK_LABELS: Final = frozenset({"tracing", "metrics", "logging", "audit"})

_STATUSES: Final = tuple(s.value for s in Status)
_STAGES: Final = tuple(s.value for s in Stage)
_ADMISSION: Final = StepName.ADMISSION.value
_POLICY: Final = StepName.POLICY.value
_RESOLVED: Final = StepName.RESOLVED.value
_OBSERVED: Final = frozenset({"observe_deny", "observe_ask"})
#: The ``rule`` label value for a rule id the registry's policy does not hold.
OTHER_RULE: Final = "_other"


class MetricsSink:
    """Prometheus counters and histograms for every finished call, plus scrape-time gauges.

    Args:
        registry: the ``CollectorRegistry`` to register in; a fresh, private one when None
            (pass ``prometheus_client.REGISTRY`` to join the process-wide registry). Registering
            two sinks in one registry is an error, as in prometheus-client.
        tool_names: a fixed set of tool names to label by, for use without a ``ToolRegistry``;
            ``bind(registry)`` replaces it with the registry's live ``tool_names()``.
        buckets: call duration histogram buckets (seconds) of every tool without its own.
        tool_buckets: a tool's own call duration buckets (seconds), by tool name: upper
            bounds that fit the durations the tool has (``{"deploy_service": (1, 1.1, 1.2,
            1.3, 1.5, 2)}``); any order, each positive and finite. Its series carry these
            ``le`` values instead of the default ones. Raises ``ValueError`` on a bad set.
        admission_buckets: admission wait histogram buckets (seconds).
        exemplars: attach ``trace_id`` exemplars to duration observations of sampled calls.
        deferred: update the metrics on a worker thread (the default, except in
            prometheus-client's multiprocess mode) rather than inline in ``emit``.
        max_queue: calls queued for counting at most (beyond it they are dropped and counted
            in ``dropped``).
    """

    name = "metrics"

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        tool_names: Iterable[str] | None = None,
        buckets: Iterable[float] = DURATION_BUCKETS,
        tool_buckets: Mapping[str, Iterable[float]] | None = None,
        admission_buckets: Iterable[float] = ADMISSION_BUCKETS,
        exemplars: bool = True,
        exemplar_interval_s: float = 1.0,
        deferred: bool | None = None,
        max_queue: int = 65536,
    ) -> None:
        #: The prometheus-client registry holding this sink's metrics (serve or scrape it).
        self.registry = CollectorRegistry(auto_describe=True) if registry is None else registry
        self.exemplars = exemplars
        # A bucket keeps only its latest exemplar, so each (tool, status, bucket) takes a new
        # one at most this often: validating exemplar labels costs more than the observation.
        self._exemplar_every_ns = max(0, int(exemplar_interval_s * 1e9))
        self._failed = 0  # records whose metrics could not be updated (never raised)
        self._known: frozenset[str] = frozenset(tool_names or ())
        self._bound: RegistryState | None = None
        self._watched: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        if deferred is None:
            # prometheus-client picks its value class once, at import: anything but the
            # in-memory one keeps values in files another process reads.
            deferred = values.ValueClass is values.MutexValue
        #: Whether the metrics are updated on a worker thread (else inline in ``emit``).
        self.deferred = deferred
        self._worker: BatchWorker[CallRecord] | None = BatchWorker(
            "metrics", self._count_batch, max_queue=max_queue) if deferred else None
        reg = self.registry
        if deferred:
            # First: a scrape counts what is queued, then reads.
            reg.register(_Collect(self._drain, list))
        self._calls = Counter(
            "tooltrace_tool_calls", "Tool calls by the status they returned.", ["tool", "status"],
            registry=reg,
        )
        self._rejections = Counter(
            "tooltrace_tool_rejections", "Rejected tool calls by the stage that stopped them.",
            ["tool", "stage"], registry=reg,
        )
        self._hook_mods = Counter(
            "tooltrace_tool_hook_modifications", "Calls whose arguments a hook narrowed.",
            ["tool"], registry=reg,
        )
        self._offloads = Counter(
            "tooltrace_tool_offloads", "Calls whose result was offloaded to an artifact.",
            ["tool"], registry=reg,
        )
        self._durations_by_buckets(buckets, tool_buckets)
        reg.register(_Collect(self._duration_family, _duration_described))
        self._observed = Counter(
            "tooltrace_policy_observed",
            "Calls an observe-mode policy rule would have denied or sent for approval.",
            ["tool", "rule", "decision"], registry=reg,
        )
        self._resolved = Counter(
            "tooltrace_tool_unknown_resolved",
            "Calls that returned unknown and were resolved later, by their final outcome.",
            ["tool", "outcome"], registry=reg,
        )
        self._rules: frozenset[str] = frozenset()
        self._admission = Histogram(
            "tooltrace_tool_admission_wait_seconds", "Time a call waited for admission.",
            ["tool"], buckets=tuple(admission_buckets), registry=reg,
        )
        # Per tool label: {status: (calls child, duration child)}, {stage: child}, and the
        # hook / offload / admission children. Created together the first time a tool label is
        # seen, so every series exists (at 0) before its first increment and rate() sees it.
        self._children: dict[str, _ToolChildren] = {}
        reg.register(_Collect(self._state_families, _state_described))
        self._prime(self._known)

    def _durations_by_buckets(self, buckets: Iterable[float],
                              tool_buckets: Mapping[str, Iterable[float]] | None) -> None:
        """One unregistered Histogram per distinct bucket set, rendered as one family (a
        tool's definition may bring another set later: ``_new_children``)."""
        self._default_buckets = _bucket_set(buckets, "buckets")
        self._tool_buckets = {str(tool): _bucket_set(b, f"tool_buckets[{tool!r}]")
                              for tool, b in (tool_buckets or {}).items()}
        self._durations: dict[tuple[float, ...], Histogram] = {}
        for bset in (self._default_buckets, *self._tool_buckets.values()):
            if bset not in self._durations:
                self._durations[bset] = Histogram(
                    _DURATION, _DURATION_HELP, ["tool", "status"], buckets=bset, registry=None)

    # -- wiring ---------------------------------------------------------------------------------

    def bind(self, registry: RegistryState) -> None:
        """Read tool names, in-flight counts, queue depths, caps and sinks from ``registry``."""
        self._bound = registry
        self._refresh_names()

    def watch(self, *sinks: Any) -> None:
        """Also report these sinks' ``dropped`` and ``depth`` (for use without a registry)."""
        for s in sinks:
            self._watched.add(s)

    def _refresh_names(self) -> frozenset[str]:
        reg = self._bound
        if reg is not None:
            try:
                names = frozenset(reg.tool_names())
            except Exception:
                names = self._known  # keep the last good set; a scrape or call must not fail
            if names != self._known:
                self._known = names
                self._prime(names)
        return self._known

    def _prime(self, names: Iterable[str]) -> None:
        # Zero-valued series for every registered tool from the first scrape on, so rate() and
        # increase() count a tool's first calls and dashboards list idle tools.
        for label in (*names, UNREGISTERED):
            self._for_tool(label)

    def tool_label(self, tool: str) -> str:
        """The ``tool`` label value for a name: the name if registered, else ``_unregistered``."""
        if tool in self._known:
            return tool
        # A tool registered after bind(): ask the registry once more before giving up.
        if self._bound is not None and tool in self._refresh_names():
            return tool
        return UNREGISTERED

    def _for_tool(self, label: str) -> _ToolChildren:
        ch = self._children.get(label)
        if ch is None:
            with self._lock:
                ch = self._children.get(label)
                if ch is None:
                    ch = self._new_children(label)
                    self._children[label] = ch
        return ch

    def _new_children(self, tool: str) -> _ToolChildren:
        bset = self._buckets_for(tool)
        duration = self._durations.get(bset)
        if duration is None:
            duration = self._durations[bset] = Histogram(
                _DURATION, _DURATION_HELP, ["tool", "status"], buckets=bset, registry=None)
        return _ToolChildren(
            tool=tool,
            # Keyed by the plain string: a StrEnum member hashes and compares equal to it.
            by_status={s: (self._calls.labels(tool, s), duration.labels(tool, s))
                       for s in _STATUSES},
            bounds=(*bset, math.inf),
            exemplar_due={s: [0] * (len(bset) + 1) for s in _STATUSES},
            by_stage={stage: self._rejections.labels(tool, stage) for stage in _STAGES},
            hook_mods=self._hook_mods.labels(tool),
            offloads=self._offloads.labels(tool),
            admission=self._admission.labels(tool),
        )

    def _buckets_for(self, tool: str) -> tuple[float, ...]:
        """``tool_buckets``' set for the tool, else its definition's ``latency_buckets``, else
        the default buckets."""
        mine = self._tool_buckets.get(tool)
        if mine is not None:
            return mine
        d = self._bound.definition(tool) if self._bound is not None else None
        if d is not None and d.latency_buckets:
            return _bucket_set(d.latency_buckets, f"tool {tool!r} latency_buckets")
        return self._default_buckets

    def buckets_of(self, tool: str) -> tuple[float, ...]:
        """The call duration buckets (upper bounds, seconds, without +Inf) that ``tool``'s
        series use."""
        return self._buckets_for(self.tool_label(tool))

    # -- sink -----------------------------------------------------------------------------------

    @property
    def dropped(self) -> int:
        """Records not counted: lost to a full queue or after shutdown, or whose update
        failed (counted, never raised)."""
        return self._failed + (self._worker.dropped if self._worker is not None else 0)

    @property
    def depth(self) -> int:
        """Finished calls queued for counting."""
        return self._worker.depth if self._worker is not None else 0

    def emit(self, record: CallRecord) -> None:
        """Count one finished call: queue it for the worker, or count it here when not
        deferred (never blocks, never raises)."""
        if self._worker is not None:
            self._worker.submit(record)
        else:
            self._count(record)

    def _count_batch(self, batch: list[CallRecord]) -> None:
        assert self._worker is not None
        for record in self._worker.paced(batch):  # slices that hand the interpreter back
            self._count(record)

    def _count(self, record: CallRecord) -> None:
        try:
            ch = self._for_tool(self.tool_label(record.tool))
            calls, duration = ch.by_status[record.status]
            calls.inc()
            seconds = record.elapsed_us / 1e6
            if self.exemplars and record.trace_sampled and record.trace_id:
                due = ch.exemplar_due[record.status]
                i = bisect.bisect_left(ch.bounds, seconds)
                now = time.monotonic_ns()
                if now >= due[i]:
                    due[i] = now + self._exemplar_every_ns
                    duration.observe(seconds, {"trace_id": record.trace_id})
                else:
                    duration.observe(seconds)
            else:
                duration.observe(seconds)
            stage = record.reject_stage
            if stage is not None:
                ch.by_stage[stage].inc()
            if record.hook_modified:
                ch.hook_mods.inc()
            if record.artifact is not None:
                ch.offloads.inc()
            for st in record.steps:
                name = st.step
                if name == _POLICY:
                    if st.decision in _OBSERVED:
                        self._count_observed(ch.tool, st.decider, st.decision)
                elif name == _ADMISSION:
                    ch.admission.observe(st.elapsed_us / 1e6)
                    break
        except Exception:
            self._failed += 1

    def emit_late(self, late: LateStep) -> None:
        """Count the late resolution of a call that returned ``unknown`` (by its final
        outcome); other late steps (a job's end) change no metric. Never raises."""
        try:
            st = late.step
            if st.step == _RESOLVED and st.decision in _STATUSES:
                self._resolved.labels(self.tool_label(late.tool), st.decision).inc()
        except Exception:
            self._failed += 1

    def rule_label(self, rule: str) -> str:
        """The ``rule`` label value: a rule id of the bound registry's policy, else
        ``_other`` (the policy's rule ids are the closed set; a rule that decides under
        several ids, such as a Cedar policy set, lists them in ``rule_ids``)."""
        if rule not in self._rules:
            policy = getattr(self._bound, "policy", None)
            names = getattr(policy, "rules", ())
            self._rules = frozenset(str(n) for r in names for n in
                                    getattr(r, "rule_ids", (getattr(r, "name", ""),)))
        return rule if rule in self._rules else OTHER_RULE

    def _count_observed(self, tool: str, decider: str, decision: str) -> None:
        rule = self.rule_label(decider.removeprefix("policy:"))
        self._observed.labels(tool, rule, decision).inc()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Count every call queued so far before returning (each scrape does this first);
        False if that took longer than ``timeout_s``."""
        return self._worker.flush(timeout_s) if self._worker is not None else True

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Count what is queued and stop the worker; metrics stay readable (calls emitted
        later are dropped)."""
        if self._worker is not None:
            self._worker.shutdown(timeout_s)

    # -- scrape time ----------------------------------------------------------------------------

    def _drain(self) -> list[Metric]:
        self.flush()
        return []

    def _duration_family(self) -> list[Metric]:
        fam = _duration_described()[0]
        for hist in list(self._durations.values()):
            for m in hist.collect():
                fam.samples.extend(m.samples)  # each series whole, so its lines stay together
        return [fam]

    def _sinks(self) -> list[Any]:
        seen: list[Any] = [self]
        reg = self._bound
        if reg is not None:
            try:
                seen.extend(s for s in reg.sinks if s is not self)
            except Exception:  # a scrape reports what it can
                pass
        seen.extend(s for s in list(self._watched) if all(s is not x for x in seen))
        return seen

    def _state_families(self) -> list[Metric]:
        """The gauges read from the bound registry and every sink's counters, now."""
        fams = _state_described()
        (inflight, queue, tool_cap, global_cap, dropped, depth, errors,
         b_calls, b_bytes, b_age) = fams
        reg = self._bound
        if reg is not None:
            names = sorted(self._refresh_names())
            self._per_tool(inflight, names, _read(reg.inflight))
            self._per_tool(queue, names, _read(reg.queue_depth))
            limits = _read(reg.concurrency_limits)
            if isinstance(limits, tuple) and len(limits) == 2:
                cap, per_tool = limits
                # Every tool's cap: its own, else the global one (so a panel's cap line and
                # in-flight / cap ratios exist for every tool; none when nothing caps it).
                caps = {} if cap is None else dict.fromkeys(names, float(cap))
                if cap is not None:
                    global_cap.add_metric([], float(cap))
                if isinstance(per_tool, Mapping):
                    caps.update(per_tool)
                self._per_tool(tool_cap, [], caps)
        drops: dict[str, int] = {}
        depths: dict[str, int] = {}
        errs: dict[str, int] = {}
        backlogs = []
        for s in self._sinks():
            backlog = _backlog(s)
            if backlog is not None:
                backlogs.append(backlog)
            label = _sink_label(s)
            for attr, acc in (("dropped", drops), ("depth", depths), ("export_failures", errs)):
                v = _int_attr(s, attr)
                if v is not None:
                    acc[label] = acc.get(label, 0) + v
        for label, v in sorted(drops.items()):
            dropped.add_metric([label], v)
        for label, v in sorted(depths.items()):
            depth.add_metric([label], v)
        for label, v in sorted(errs.items()):
            errors.add_metric([label], v)
        if backlogs:
            b_calls.add_metric([], sum(b[0] for b in backlogs))
            b_bytes.add_metric([], sum(b[1] for b in backlogs))
            b_age.add_metric([], max(b[2] for b in backlogs))
        return list(fams)

    def _per_tool(self, fam: GaugeMetricFamily, names: list[str], values: Any) -> None:
        # Every registered tool gets a sample (0 when idle); unknown keys fold into one label.
        out = dict.fromkeys(names, 0.0)
        if isinstance(values, Mapping):
            for tool, v in values.items():
                try:
                    label = self.tool_label(str(tool))
                    out[label] = out.get(label, 0.0) + float(v)
                except Exception:
                    continue
        for label, v in sorted(out.items()):
            fam.add_metric([label], v)


@dataclass(frozen=True, slots=True)
class _ToolChildren:
    """All label children of one ``tool`` label value, created at once."""

    tool: str
    by_status: dict[str, tuple[Any, Any]]
    """Per status: (calls counter child, duration histogram child)."""
    bounds: tuple[float, ...]
    """The duration buckets' upper bounds as the histogram orders them, +Inf last."""
    exemplar_due: dict[str, list[int]]
    """Per status, per duration bucket: when (monotonic ns) it may take its next exemplar."""
    by_stage: dict[str, Any]
    hook_mods: Any
    offloads: Any
    admission: Any


_DURATION: Final = "tooltrace_tool_call_duration_seconds"
_DURATION_HELP: Final = "End-to-end tool call duration."


def _bucket_set(values: Iterable[float], what: str) -> tuple[float, ...]:
    """Upper bounds as a sorted tuple without duplicates or +Inf (the histogram adds it)."""
    try:
        bounds = sorted({float(v) for v in values} - {math.inf})
    except (TypeError, ValueError):
        raise ValueError(f"{what}: bucket bounds must be numbers") from None
    if not bounds:
        raise ValueError(f"{what}: give at least one finite bucket bound")
    if not all(0 < b < math.inf for b in bounds):
        raise ValueError(f"{what}: bucket bounds must be positive and finite, got {bounds[:3]}")
    return tuple(bounds)


def _duration_described() -> list[Metric]:
    return [Metric(_DURATION, _DURATION_HELP, "histogram")]


def _sink_label(sink: Any) -> str:
    name = getattr(sink, "name", None)
    return name if name in SINK_LABELS else "other"


def _int_attr(obj: Any, attr: str) -> int | None:
    try:
        v = getattr(obj, attr, None)
        return int(v) if v is not None else None
    except Exception:
        return None


def _backlog(sink: Any) -> tuple[int, int, float] | None:
    """(calls, bytes, age of the oldest) of the sink's compaction backlog
    (``AuditSink.compaction_backlog``), or None."""
    try:
        b = getattr(sink, "compaction_backlog", None)
        return None if b is None else (int(b.calls), int(b.bytes), float(b.oldest_age_s))
    except Exception:
        return None


def _read(fn: Callable[[], Any]) -> Any:
    """What a registry read returns, or None when it fails (a scrape never does)."""
    try:
        return fn()
    except Exception:
        return None


class _Collect(Collector):
    """A collector that calls one of a sink's own methods, held weakly: a registry (such as
    the process-wide one) does not keep the sink alive, and once the sink is gone it reports
    what ``describe`` gives (the families, without samples)."""

    def __init__(self, collect: Callable[[], list[Metric]],
                 describe: Callable[[], Iterable[Metric]]) -> None:
        self._collect = weakref.WeakMethod(collect)
        self._describe = describe

    def describe(self) -> Iterable[Metric]:
        # Returning the families with no samples lets the registry check names up front.
        return list(self._describe())

    def collect(self) -> Iterable[Metric]:
        fn = self._collect()
        return list(self._describe()) if fn is None else fn()


def _state_described() -> tuple[
    GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily,
    CounterMetricFamily, GaugeMetricFamily, CounterMetricFamily, GaugeMetricFamily,
    GaugeMetricFamily, GaugeMetricFamily,
]:
    return (
        GaugeMetricFamily("tooltrace_tool_inflight", "Tool calls executing now.",
                          labels=["tool"]),
        GaugeMetricFamily("tooltrace_tool_admission_queue_depth",
                          "Tool calls waiting for admission now.", labels=["tool"]),
        GaugeMetricFamily("tooltrace_tool_concurrency_limit",
                          "Concurrency cap of each tool: its own, else the global cap.",
                          labels=["tool"]),
        GaugeMetricFamily("tooltrace_concurrency_limit", "Global concurrency cap."),
        CounterMetricFamily("tooltrace_telemetry_dropped",
                            "Telemetry records a sink dropped (queue full or shut down).",
                            labels=["sink"]),
        GaugeMetricFamily("tooltrace_telemetry_queue_depth",
                          "Telemetry records waiting in a sink's queue.", labels=["sink"]),
        CounterMetricFamily("tooltrace_telemetry_export_errors",
                            "Telemetry records a sink failed to deliver.", labels=["sink"]),
        GaugeMetricFamily("tooltrace_audit_compaction_backlog_calls",
                          "Calls the audit sinks wrote that compaction has not taken yet."),
        GaugeMetricFamily("tooltrace_audit_compaction_backlog_bytes",
                          "Bytes of audit segments compaction has not taken yet."),
        GaugeMetricFamily("tooltrace_audit_compaction_backlog_age_seconds",
                          "Age of the oldest call compaction has not taken yet."),
    )
