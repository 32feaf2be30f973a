"""Generate tooltrace's Grafana dashboards and Prometheus rules from code.

Run ``python dashboards/build.py`` (or ``python -m dashboards.build``) from the repository root
after changing this file: it rewrites the committed artifacts next to it,

- ``dashboards/tooltrace-pipelines.json``: every tool pipeline at a glance,
- ``dashboards/tooltrace-tool.json``: one tool in detail,
- ``dashboards/prometheus/tooltrace-rules.yml``: recording and alerting rules.

``--check`` writes nothing and exits 1 when a committed file differs from what this code
generates (CI runs the same comparison as a test). Dashboards are built with
``grafana-foundation-sdk`` (the release targeting Grafana 11.6); rule files with PyYAML. Both
imports are deferred to the functions that need them so the rule model stays importable alone.

The PromQL here is the one place the saturation signals are defined (the same definitions
``tooltrace stats`` uses): per tool over a window,

- parameter-reject ratio = rejections{stage="params"} / calls
- policy-reject ratio    = rejections{stage=~"policy|approval"} / calls
- hook-block ratio       = rejections{stage="hook"} / calls
- offload ratio          = offloads / calls{status="ok"}
- p50 / p95 latency      = histogram_quantile over tooltrace_tool_call_duration_seconds_bucket
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "DASHBOARD_FILES",
    "RULES_FILE",
    "RUNBOOK_BASE",
    "SLO_FILE",
    "SLO_RULES_FILE",
    "AlertOptions",
    "RuleWindows",
    "Signal",
    "alert_names",
    "build_dashboards",
    "build_rule_groups",
    "latency_expr",
    "main",
    "ratio_expr",
    "render_dashboard",
    "render_rules",
    "render_slo_rules",
    "rendered_files",
    "runbook_url",
    "slo",
]

HERE = Path(__file__).resolve().parent
RULES_FILE = "prometheus/tooltrace-rules.yml"
SLO_RULES_FILE = "prometheus/tooltrace-slo-rules.yml"
#: The per-tool service level objectives the SLO rules are generated from (see ``slo.py``).
SLO_FILE = "slos.yml"
DASHBOARD_FILES = ("tooltrace-pipelines.json", "tooltrace-tool.json")
#: Where the alerts' ``runbook_url`` links point: the documentation site's runbook pages, one per
#: alert (``docs/operations/runbooks/<alert in lower case>.md``). The one place this base is
#: written down; ``--runbook-base`` sets another for your own copy of the rules.
RUNBOOK_BASE = "https://tooltrace.dev/docs/operations/runbooks/"
PIPELINES_UID = "tooltrace-pipelines"
TOOL_UID = "tooltrace-tool"

CALLS = "tooltrace_tool_calls_total"
RESOLVED = "tooltrace_tool_unknown_resolved_total"
REJECTIONS = "tooltrace_tool_rejections_total"
OFFLOADS = "tooltrace_tool_offloads_total"
HOOK_MODS = "tooltrace_tool_hook_modifications_total"
DURATION = "tooltrace_tool_call_duration_seconds"
ADMISSION_WAIT = "tooltrace_tool_admission_wait_seconds"
INFLIGHT = "tooltrace_tool_inflight"
QUEUE = "tooltrace_tool_admission_queue_depth"
TOOL_CAP = "tooltrace_tool_concurrency_limit"
GLOBAL_CAP = "tooltrace_concurrency_limit"
DROPPED = "tooltrace_telemetry_dropped_total"
EXPORT_ERRORS = "tooltrace_telemetry_export_errors_total"
SINK_DEPTH = "tooltrace_telemetry_queue_depth"
BACKLOG_AGE = "tooltrace_audit_compaction_backlog_age_seconds"
BACKLOG_BYTES = "tooltrace_audit_compaction_backlog_bytes"


# -------------------------------------------------------------------------------------------
# Prometheus rules
# -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuleWindows:
    """The time windows the rules use; the defaults are the shipped production values.

    Tests build a fast twin (seconds instead of minutes) of the very same expressions.
    """

    rate: str = "5m"
    baseline: str = "1h"
    # The baseline ends this long ago so the surge being measured does not lift its own bar.
    baseline_offset: str = "15m"
    surge_for: str = "5m"
    latency_for: str = "10m"
    backlog_for: str = "5m"
    compaction_for: str = "10m"
    drops_for: str = "0m"
    unknown_for: str = "0m"
    # A call that returned unknown pages only when no resolution came within this grace period.
    unresolved_for: str = "10m"
    export_errors_for: str = "5m"
    interval: str | None = None


@dataclass(frozen=True, slots=True)
class AlertOptions:
    """Thresholds of the alerting rules."""

    # A ratio fires when it rose by at least ``surge_min_rise`` (absolute) AND to at least
    # ``surge_factor`` times its baseline: the first bites for quiet baselines, the second for
    # naturally high ones (an offload ratio of 0.6 needs 0.9 to fire).
    surge_min_rise: float = 0.1
    surge_factor: float = 1.5
    # Ratios over fewer calls than this in the rate window are noise, not a signal.
    min_calls: int = 20
    # Fire a surge only for a tool Prometheus has watched since its baseline window began (off:
    # a fresh Prometheus takes every ratio for a surge from a baseline of 0).
    surge_needs_history: bool = True
    latency_p95_slo_s: float = 5.0
    audit_backlog: int = 5000
    # Calls written but not compacted: older than this (seconds; a segment is sealed after 10
    # minutes at most, then compacted within about a minute) or more than this many bytes.
    compaction_backlog_age_s: int = 1800
    compaction_backlog_bytes: int = 512 * 1024 * 1024
    runbook_base: str = RUNBOOK_BASE


@dataclass(frozen=True, slots=True)
class Signal:
    """One per-tool ratio: its name, numerator, denominator and the alert watching it."""

    key: str
    title: str
    numerator: str
    denominator: str
    alert: str
    severity: str
    meaning: str


SIGNALS: tuple[Signal, ...] = (
    Signal(
        "param_reject",
        "parameter-reject ratio",
        f'{REJECTIONS}{{stage="params"}}',
        CALLS,
        "ToolParamRejectRatioSurge",
        "warning",
        "calls rejected because their arguments failed the tool's JSON Schema",
    ),
    Signal(
        "policy_reject",
        "policy-reject ratio",
        f'{REJECTIONS}{{stage=~"policy|approval"}}',
        CALLS,
        "ToolPolicyRejectRatioSurge",
        "warning",
        "calls refused by policy rules or denied approval",
    ),
    Signal(
        "hook_block",
        "hook-block ratio",
        f'{REJECTIONS}{{stage="hook"}}',
        CALLS,
        "ToolHookBlockRatioSurge",
        "warning",
        "calls blocked by a pre-hook",
    ),
    Signal(
        "offload",
        "offload ratio",
        OFFLOADS,
        f'{CALLS}{{status="ok"}}',
        "ToolOffloadRatioSurge",
        "info",
        "successful calls whose result was too big to stay inline and went to an artifact",
    ),
)


def _seconds(duration: str) -> int:
    """Seconds in a Prometheus duration such as ``5m`` or ``1h30m``."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return int(sum(int(n) * units[u] for n, u in parts))


def _duration(seconds: int) -> str:
    """A Prometheus duration for a number of seconds, in the largest units (``1h15m``)."""
    out, rest = "", seconds
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out or "0s"


def _ratio_record(s: Signal, w: RuleWindows) -> str:
    return f"tool:tooltrace_tool_{s.key}_ratio:rate{w.rate}"


def _baseline_record(s: Signal, w: RuleWindows) -> str:
    return f"tool:tooltrace_tool_{s.key}_ratio:avg{w.baseline}_offset{w.baseline_offset}"


def _calls_record(w: RuleWindows) -> str:
    return f"tool:tooltrace_tool_calls:rate{w.rate}"


def _latency_record(q: str, w: RuleWindows) -> str:
    return f"tool:tooltrace_tool_call_duration_seconds:p{q}_rate{w.rate}"


def _sum_rate(selector: str, window: str, by: str = "tool") -> str:
    return f"sum by ({by}) (rate({selector}[{window}]))"


def ratio_expr(s: Signal, window: str, tool_filter: str = "") -> str:
    """PromQL of one per-tool ratio over ``window`` (shared by the rules and the dashboards).

    A tool with traffic but no numerator series yet reads 0, not "no data"; a tool without
    traffic in the window has no ratio at all (never NaN).
    """
    num = _with_filter(s.numerator, tool_filter)
    den = _with_filter(s.denominator, tool_filter)
    return (
        f"(\n  {_sum_rate(num, window)}\n  or {_sum_rate(den, window)} * 0\n)\n"
        f"/ ({_sum_rate(den, window)} > 0)"
    )


def latency_expr(q: float, window: str, tool_filter: str = "", by: str = "tool") -> str:
    """PromQL of a per-tool latency quantile over ``window``."""
    sel = _with_filter(f"{DURATION}_bucket", tool_filter)
    # ">= 0" drops the NaN histogram_quantile returns for a tool without calls in the window:
    # an idle tool has no latency, not a NaN one.
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({sel}[{window}]))) >= 0"


def _with_filter(selector: str, extra: str) -> str:
    """Add a label matcher (such as ``tool=~"$tool"``) to a selector."""
    if not extra:
        return selector
    if selector.endswith("}"):
        return selector[:-1] + ", " + extra + "}"
    return selector + "{" + extra + "}"


def _counter_rose(selector: str, window: str, by: str) -> str:
    # increase() misses a counter whose series is born with its first event, so a series that
    # exists now but did not exist one window ago also counts as a rise.
    return (
        f"sum by ({by}) (increase({selector}[{window}])) > 0\n"
        f"or\nsum by ({by}) ({selector} unless {selector} offset {window}) > 0"
    )


def _recording_rules(w: RuleWindows) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = [
        {"record": _calls_record(w), "expr": _sum_rate(CALLS, w.rate)},
    ]
    for s in SIGNALS:
        rules.append({"record": _ratio_record(s, w), "expr": ratio_expr(s, w.rate)})
    for q, label in (("50", 0.5), ("95", 0.95)):
        rules.append({"record": _latency_record(q, w), "expr": latency_expr(label, w.rate)})
    for s in SIGNALS:
        rules.append(
            {
                "record": _baseline_record(s, w),
                "expr": (
                    f"avg_over_time({_ratio_record(s, w)}[{w.baseline}] offset {w.baseline_offset})"
                ),
            }
        )
    return rules


def runbook_url(alert: str, base: str = RUNBOOK_BASE) -> str:
    """The URL of an alert's runbook page: ``<base>/<alert in lower case>/``."""
    return f"{base.rstrip('/')}/{alert.lower()}/"


def _alert(
    name: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    description: str,
    opts: AlertOptions,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if _seconds(for_) > 0:
        rule["for"] = for_
    rule["labels"] = {"severity": severity, "service": "tooltrace"}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": runbook_url(name, opts.runbook_base),
    }
    return rule


def _alerting_rules(w: RuleWindows, opts: AlertOptions) -> list[dict[str, Any]]:
    guard = f"{_calls_record(w)} * {_seconds(w.rate)} >= {opts.min_calls}"
    # A surge is measured against history: Prometheus must have watched the tool for twice the
    # baseline's offset, so the baseline window holds at least that offset's worth of the
    # tool's ratio. Without this a fresh Prometheus (or one that lost its data) sees baselines
    # of 0 and every naturally high ratio "surges" on its first evaluations; with it a new
    # deployment's surge alerts work after 30 minutes, not after the whole 1h15m window.
    lookback = _duration(2 * _seconds(w.baseline_offset))
    history = f"{_calls_record(w)} offset {lookback}"
    rules: list[dict[str, Any]] = []
    for s in SIGNALS:
        ratio, base = _ratio_record(s, w), _baseline_record(s, w)
        # A tool watched all along but idle through the baseline window has a baseline of 0.
        baseline = f"({base} or {ratio} * 0)"
        expr = (
            f"{ratio}\n  > {baseline} + {opts.surge_min_rise}\n"
            f"and\n{ratio}\n  > {opts.surge_factor} * {baseline}\n"
            f"and on (tool)\n{guard}"
            + (f"\nand on (tool)\n{history}" if opts.surge_needs_history else "")
        )
        rules.append(
            _alert(
                s.alert,
                expr,
                w.surge_for,
                s.severity,
                f"{{{{ $labels.tool }}}}: {s.title} jumped to "
                "{{ $value | humanizePercentage }}",
                f"The {s.title} of tool {{{{ $labels.tool }}}} ({s.meaning}) is "
                f"{{{{ $value | humanizePercentage }}}} over the last {w.rate}, well above its "
                f"average over the {w.baseline} before (ending {w.baseline_offset} ago).",
                opts,
            )
        )
    p95 = _latency_record("95", w)
    rules.append(
        _alert(
            "ToolLatencyP95OverSLO",
            f"{p95} > {opts.latency_p95_slo_s}\nand on (tool)\n{guard}",
            w.latency_for,
            "warning",
            "{{ $labels.tool }}: p95 latency {{ $value | humanizeDuration }} is over the SLO",
            f"The 95th percentile duration of tool {{{{ $labels.tool }}}} over the last {w.rate} "
            f"is {{{{ $value | humanizeDuration }}}}, above the {opts.latency_p95_slo_s:g} s SLO.",
            opts,
        )
    )
    # Calls of a process that returned unknown, less those it resolved since (a resolution
    # that found the outcome still unknown resolves nothing). Both counters live in the same
    # process, so the difference is taken per instance.
    by = "job, instance, tool"
    returned = f'sum by ({by}) ({CALLS}{{status="unknown"}})'
    resolved = f'sum by ({by}) ({RESOLVED}{{outcome!="unknown"}})'
    rules.append(
        _alert(
            "ToolCallOutcomeUnknown",
            f"{returned}\n- (\n  {resolved}\n  or {returned} * 0\n) > 0",
            w.unresolved_for,
            "critical",
            "{{ $labels.tool }}: {{ $value }} call(s) still of unknown outcome on "
            "{{ $labels.instance }}",
            "{{ $value }} call(s) of tool {{ $labels.tool }} on {{ $labels.instance }} "
            "returned unknown (dispatched, end state not confirmed: deadline passed, cancel "
            f"unconfirmed or crash) and no resolution came for {w.unresolved_for}. Their side "
            "effects may or may not have happened: inspect before retrying.",
            opts,
        )
    )
    rules.append(
        _alert(
            "ToolCallReturnedUnknown",
            _counter_rose(f'{CALLS}{{status="unknown"}}', w.rate, "tool"),
            w.unknown_for,
            "warning",
            "{{ $labels.tool }}: a side-effecting call returned an unknown state",
            "At least one call of tool {{ $labels.tool }} was dispatched but its end state could "
            "not be confirmed when it returned (deadline passed, cancel unconfirmed or crash). "
            "Most resolve within seconds; ToolCallOutcomeUnknown pages for those that do not.",
            opts,
        )
    )
    rules.append(
        _alert(
            "TooltraceTelemetryDropped",
            _counter_rose(DROPPED, w.rate, "job, instance, sink"),
            w.drops_for,
            "warning",
            "{{ $labels.instance }}: the {{ $labels.sink }} sink is dropping records",
            f"The {{{{ $labels.sink }}}} telemetry sink of {{{{ $labels.instance }}}} dropped "
            f"records in the last {w.rate} (queue full or shut down). Calls are unaffected but "
            "their telemetry is incomplete.",
            opts,
        )
    )
    rules.append(
        _alert(
            "TooltraceTelemetryExportErrors",
            _counter_rose(EXPORT_ERRORS, w.rate, "job, instance, sink"),
            w.export_errors_for,
            "warning",
            "{{ $labels.instance }}: the {{ $labels.sink }} sink fails to deliver records",
            f"The {{{{ $labels.sink }}}} telemetry sink of {{{{ $labels.instance }}}} has failed "
            f"to deliver records in every {w.rate} window for {w.export_errors_for} (its "
            "backend refuses them or cannot be reached). Calls are unaffected; the records "
            "are lost for that backend.",
            opts,
        )
    )
    rules.append(
        _alert(
            "TooltraceAuditBacklog",
            f'{SINK_DEPTH}{{sink="audit"}} > {opts.audit_backlog}',
            w.backlog_for,
            "warning",
            "{{ $labels.instance }}: {{ $value }} audit records waiting to be written",
            f"The audit sink of {{{{ $labels.instance }}}} has had more than "
            f"{opts.audit_backlog} records queued for {w.backlog_for}: the audit store is not "
            "keeping up, and records will be dropped when the queue fills.",
            opts,
        )
    )
    mib = opts.compaction_backlog_bytes // (1024 * 1024)
    rules.append(
        _alert(
            "TooltraceCompactionBacklog",
            # Each side aggregated to (job, instance): one alert per process, whichever fired.
            f"max by (job, instance) ({BACKLOG_AGE}) > {opts.compaction_backlog_age_s}\nor\n"
            f"max by (job, instance) ({BACKLOG_BYTES}) > {opts.compaction_backlog_bytes}",
            w.compaction_for,
            "warning",
            "{{ $labels.instance }}: audit compaction is falling behind",
            f"The audit sink of {{{{ $labels.instance }}}} has written calls that compaction has "
            f"not taken for more than {_duration(opts.compaction_backlog_age_s)}, or more than "
            f"{mib} MiB of them, for {w.compaction_for}: every read of the trail parses more "
            "segments (slower autopsy, calls and stats) until compaction catches up.",
            opts,
        )
    )
    return rules


def alert_names() -> list[str]:
    """Names of every shipped alert, in file order."""
    return [r["alert"] for r in _alerting_rules(RuleWindows(), AlertOptions())]


def build_rule_groups(
    windows: RuleWindows | None = None, options: AlertOptions | None = None
) -> dict[str, Any]:
    """The rule file as a mapping (``groups:`` with recording rules, then alerting rules)."""
    w = windows or RuleWindows()
    opts = options or AlertOptions()
    rec: dict[str, Any] = {"name": "tooltrace-saturation"}
    alerts: dict[str, Any] = {"name": "tooltrace-alerts"}
    if w.interval:
        rec["interval"] = alerts["interval"] = w.interval
    rec["rules"] = _recording_rules(w)
    alerts["rules"] = _alerting_rules(w, opts)
    return {"groups": [rec, alerts]}


def _yaml(data: dict[str, Any], header: str) -> str:
    """YAML text of a rule file (multi-line expressions as literal blocks) under ``header``."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=False)
    return header + body


def render_rules(windows: RuleWindows | None = None, options: AlertOptions | None = None) -> str:
    """The rule file as YAML text (multi-line expressions as literal blocks)."""
    header = (
        "# Generated by dashboards/build.py -- edit that file, then run it.\n"
        "# Recording rules for tooltrace's saturation signals and the alerts built on them.\n"
    )
    return _yaml(build_rule_groups(windows, options), header)


def slo() -> ModuleType:
    """``dashboards/slo.py``, the SLO file's reader and the burn-rate rules (loaded by path:
    this directory is not a package when build.py runs as a script)."""
    name = "tooltrace_dashboards_slo"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, HERE / "slo.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


def render_slo_rules(slo_file: Path | None = None, options: AlertOptions | None = None) -> str:
    """The SLO rule file (recording rules and burn-rate alerts) for the objectives in
    ``slo_file`` (default: ``dashboards/slos.yml``) as YAML text."""
    opts = options or AlertOptions()
    cfg = slo().load_slos(slo_file or HERE / SLO_FILE)
    header = (
        "# Generated by dashboards/build.py from dashboards/slos.yml -- edit those, then run it.\n"
        "# Per-tool SLOs: error ratios per window, error budget left, burn-rate alerts.\n"
    )
    groups = slo().slo_rule_groups(cfg, lambda alert: runbook_url(alert, opts.runbook_base))
    return _yaml(groups, header)


# -------------------------------------------------------------------------------------------
# Grafana dashboards
# -------------------------------------------------------------------------------------------

TOOL_FILTER = 'tool=~"$tool"'
#: The processes shown (the runbooks split a signal by instance); ".*" when all are.
INSTANCE_FILTER = 'instance=~"$instance"'
RATE = "$__rate_interval"
#: Where a call's own story is told: the CLI's autopsy, from the call id the trail holds.
AUTOPSY_DOC = "https://tooltrace.dev/docs/audit/cli/#what-autopsy-states"


def _prom_ds() -> Any:
    from grafana_foundation_sdk.models import dashboard as dm

    return dm.DataSourceRef(type_val="prometheus", uid="${datasource}")


def _query(
    ref: str, expr: str, legend: str, *, instant: bool = False, exemplar: bool = False
) -> Any:
    from grafana_foundation_sdk.builders import prometheus as prom

    q = prom.Dataquery().ref_id(ref).expr(expr).legend_format(legend)
    q = q.instant() if instant else q.range()
    if exemplar:
        q = q.exemplar(True)
    return q


def _timeseries(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Any],
    *,
    span: int = 12,
    height: int = 8,
    max_val: float | None = None,
    links: Sequence[Any] = (),
    stack: bool = False,
    min_val: float | None = 0,
    runbook: str | None = None,
) -> Any:
    from grafana_foundation_sdk.builders import common as cb
    from grafana_foundation_sdk.builders import timeseries
    from grafana_foundation_sdk.models import common

    p = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(_prom_ds())
        .unit(unit)
        .span(span)
        .height(height)
        .line_width(1)
        .fill_opacity(10)
        .show_points(common.VisibilityMode.NEVER)
        .legend(
            cb.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["mean", "max", "lastNotNull"])
        )
        .tooltip(
            cb.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    if min_val is not None:
        p = p.min(min_val)
    if runbook is not None:
        p = p.links([_runbook_link(runbook)])
    if stack:
        p = p.stacking(cb.StackingConfig().mode(common.StackingMode.NORMAL))
    if max_val is not None:
        p = p.max(max_val)
    if links:
        p = p.data_links(list(links))
    for q in queries:
        p = p.with_target(q)
    return p


def _stat(
    title: str,
    description: str,
    unit: str,
    query: Any,
    *,
    span: int = 4,
    warn: float | None = None,
    bad: float | None = None,
    runbook: str | None = None,
) -> Any:
    from grafana_foundation_sdk.builders import dashboard as db
    from grafana_foundation_sdk.builders import stat
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as dm

    # Colour by how worried to be: green below ``warn``, orange from it, red from ``bad``.
    steps = [dm.Threshold(None, "green")]
    if warn is not None:
        steps.append(dm.Threshold(warn, "orange"))
    if bad is not None:
        steps.append(dm.Threshold(bad, "red"))
    p = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(_prom_ds())
        .unit(unit)
        .span(span)
        .height(4)
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE)
        .thresholds(db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(steps))
        .with_target(query)
    )
    return p if runbook is None else p.links([_runbook_link(runbook)])


def _link(title: str, url: str) -> Any:
    from grafana_foundation_sdk.builders import dashboard as db

    return db.DashboardLink(title).url(url)


def _runbook_link(alert: str) -> Any:
    """A panel link to the runbook of the alert that watches what the panel shows."""
    return _link(f"Runbook: {alert}", runbook_url(alert)).target_blank(True)


def _autopsy_link() -> Any:
    """How to replay one call step by step from its call id (the trail has the ids; the
    metrics never carry them)."""
    return _link("Replay a call: tooltrace autopsy <call_id>", AUTOPSY_DOC).target_blank(True)


def _tempo_link() -> Any:
    # Exemplars carry the span's trace id as `trace_id`; this opens it in Explore on the Tempo
    # datasource picked in the `tempo` variable. (Grafana also needs the Prometheus datasource's
    # exemplar setting, which docker/grafana/provisioning does.)
    left = (
        '{"datasource":"${tempo}","queries":[{"refId":"A","datasource":{"type":"tempo",'
        '"uid":"${tempo}"},"queryType":"traceql","query":"${__data.fields.trace_id}"}],'
        '"range":{"from":"now-1h","to":"now"}}'
    )
    return _link("Open trace in Tempo", "/explore?schemaVersion=1&orgId=1&left=" + left)


def _variables(multi_tool: bool) -> list[Any]:
    from grafana_foundation_sdk.builders import dashboard as db
    from grafana_foundation_sdk.models import dashboard as dm

    tool = (
        db.QueryVariable("tool")
        .label("Tool")
        .description("Registered tool names (label values of tooltrace_tool_calls_total)")
        .datasource(_prom_ds())
        .query(
            {
                "qryType": 1,
                "query": f"label_values({CALLS}, tool)",
                "refId": "PrometheusVariableQueryEditor-VariableQuery",
            }
        )
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
    )
    if multi_tool:
        tool = tool.multi(True).include_all(True).all_value(".*")
    instance = (
        db.QueryVariable("instance")
        .label("Instance")
        .description("Agent processes scraped (label values of tooltrace_tool_calls_total)")
        .datasource(_prom_ds())
        .query(
            {
                "qryType": 1,
                "query": f"label_values({CALLS}, instance)",
                "refId": "PrometheusVariableQueryEditor-VariableQuery",
            }
        )
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    return [
        db.DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
        db.DatasourceVariable("tempo")
        .label("Tempo")
        .description("Traces datasource that latency exemplars link to")
        .type("tempo"),
        tool,
        instance,
    ]


def _pipelines_panels() -> Iterator[Any]:
    from grafana_foundation_sdk.builders import bargauge
    from grafana_foundation_sdk.builders import dashboard as db
    from grafana_foundation_sdk.models import common

    f = f"{TOOL_FILTER}, {INSTANCE_FILTER}"
    i = INSTANCE_FILTER
    yield db.Row("Overview")
    yield _stat(
        "Call rate",
        "Calls per second over the selected tools.",
        "reqps",
        _query("A", f"sum(rate({CALLS}{{{f}}}[{RATE}]))", "calls/s"),
    )
    yield _stat(
        "Rejected",
        "Share of calls rejected before execution (any stage).",
        "percentunit",
        _query(
            "A",
            f'sum(rate({CALLS}{{status="rejected", {f}}}[{RATE}])) '
            f"/ (sum(rate({CALLS}{{{f}}}[{RATE}])) > 0)",
            "rejected",
        ),
        warn=0.1,
        bad=0.25,
    )
    yield _stat(
        "Failed",
        "Share of calls that started and failed.",
        "percentunit",
        _query(
            "A",
            f'sum(rate({CALLS}{{status="failed", {f}}}[{RATE}])) '
            f"/ (sum(rate({CALLS}{{{f}}}[{RATE}])) > 0)",
            "failed",
        ),
        warn=0.05,
        bad=0.2,
    )
    yield _stat(
        "Unknown outcomes",
        "Side-effecting calls that returned unknown (end state not confirmed), in the time "
        "range. Those still unresolved: `tooltrace calls --outcome unknown`; one call's story: "
        "`tooltrace autopsy <call_id>`.",
        "short",
        _query(
            "A",
            f'sum(increase({CALLS}{{status="unknown", {f}}}[$__range]))',
            "unknown",
            instant=True,
        ),
        bad=1,
        runbook="ToolCallOutcomeUnknown",
    )
    yield _stat(
        "Telemetry drops",
        "Records dropped by any telemetry sink in the time range.",
        "short",
        _query("A", f"sum(increase({DROPPED}{{{i}}}[$__range]))", "dropped", instant=True),
        bad=1,
        runbook="TooltraceTelemetryDropped",
    )
    yield _stat(
        "Audit backlog",
        "Audit records queued and not yet durable (tooltrace_telemetry_queue_depth, sink=audit).",
        "short",
        _query("A", f'sum({SINK_DEPTH}{{sink="audit", {i}}})', "audit backlog"),
        warn=1000,
        bad=AlertOptions().audit_backlog,
        runbook="TooltraceAuditBacklog",
    )
    yield _timeseries(
        "Call rate by status",
        "Calls per second by the status they returned (an unknown resolved later stays"
        " unknown here: see the panel of late resolutions).",
        "reqps",
        [_query("A", f"sum by (status) (rate({CALLS}{{{f}}}[{RATE}]))", "{{status}}")],
        span=16,
        stack=True,
    )
    yield _timeseries(
        "Observed policy decisions",
        "Calls an observe-mode policy rule would have denied or sent for approval, per "
        "second, by tool, rule and decision: a rule being rolled out (see the policy file"
        " guide).",
        "reqps",
        [_query("A", "sum by (tool, rule, decision) "
                f"(rate(tooltrace_policy_observed_total{{{f}}}[{RATE}]))",
                "{{tool}} {{rule}} {{decision}}")],
        span=8,
    )
    yield _timeseries(
        "Unknown outcomes resolved later",
        "Calls that returned unknown and whose final outcome became known later (the call"
        " ended after all), per second, by tool and outcome. `tooltrace calls --status unknown"
        " --outcome unknown` lists those still unresolved.",
        "reqps",
        [_query("A", "sum by (tool, outcome) "
                f"(rate({RESOLVED}{{{f}}}[{RATE}]))", "{{tool}} {{outcome}}")],
        span=12,
        runbook="ToolCallReturnedUnknown",
    )
    yield (
        bargauge.Panel()
        .title("Top tools")
        .description("Tools by number of calls in the time range; click through to one tool.")
        .datasource(_prom_ds())
        .unit("short")
        .span(12)
        .height(8)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .orientation(common.VizOrientation.HORIZONTAL)
        .data_links(
            [
                _link(
                    "Drill down: ${__field.labels.tool}",
                    f"/d/{TOOL_UID}/tooltrace-tool?var-tool=${{__field.labels.tool}}"
                    "&${datasource:queryparam}&${tempo:queryparam}&${__url_time_range}",
                )
            ]
        )
        .with_target(
            _query(
                "A",
                f"topk(10, sum by (tool) (increase({CALLS}{{{f}}}[$__range])))",
                "{{tool}}",
                instant=True,
            )
        )
    )

    yield db.Row("Rejections and offload")
    for s in SIGNALS:
        yield _timeseries(
            s.title[0].upper() + s.title[1:] + " by tool",
            f"Per tool: {s.numerator} / {s.denominator} ({s.meaning}).",
            "percentunit",
            [_query("A", ratio_expr(s, RATE, f), "{{tool}}")],
            span=12,
            max_val=1,
            runbook=s.alert,
        )

    yield db.Row("Latency")
    for q in (0.5, 0.95, 0.99):
        yield _timeseries(
            f"p{round(q * 100)} latency by tool",
            f"{round(q * 100)}th percentile call duration per tool; dots are exemplars "
            "(click one to open its trace).",
            "s",
            [_query("A", latency_expr(q, RATE, f), "{{tool}}", exemplar=True)],
            span=8,
            links=[_tempo_link(), _autopsy_link()],
            runbook="ToolLatencyP95OverSLO" if q == 0.95 else None,
        )

    yield db.Row("Saturation")
    yield _timeseries(
        "In-flight vs caps",
        "Calls executing now per tool, the per-tool concurrency caps, and the global cap "
        "against all in-flight calls.",
        "short",
        [
            _query("A", f"sum by (tool) ({INFLIGHT}{{{f}}})", "{{tool}} in flight"),
            _query("B", f"max by (tool) ({TOOL_CAP}{{{f}}})", "{{tool}} cap"),
            _query("C", f"sum({INFLIGHT}{{{i}}})", "all in flight"),
            _query("D", f"max({GLOBAL_CAP}{{{i}}})", "global cap"),
        ],
        span=8,
    )
    yield _timeseries(
        "Admission queue depth",
        "Calls waiting for a concurrency slot, per tool.",
        "short",
        [_query("A", f"sum by (tool) ({QUEUE}{{{f}}})", "{{tool}}")],
        span=8,
    )
    yield _timeseries(
        "Admission wait p95",
        "95th percentile time a call waited for a concurrency slot, per tool.",
        "s",
        [
            _query(
                "A",
                f"histogram_quantile(0.95, sum by (tool, le) "
                f"(rate({ADMISSION_WAIT}_bucket{{{f}}}[{RATE}])))",
                "{{tool}}",
            )
        ],
        span=8,
    )

    yield db.Row("Telemetry health")
    yield _timeseries(
        "Telemetry drops",
        "Records dropped per second by each sink (queue full or shut down).",
        "short",
        [_query("A", f"sum by (sink) (rate({DROPPED}{{{i}}}[{RATE}]))", "{{sink}}")],
        span=8,
        runbook="TooltraceTelemetryDropped",
    )
    yield _timeseries(
        "Sink queue depth (audit backlog)",
        "Records queued in each telemetry sink; the audit line is the audit backlog.",
        "short",
        [
            _query("A", f'sum({SINK_DEPTH}{{sink="audit", {i}}})', "audit backlog"),
            _query("B", f'sum by (sink) ({SINK_DEPTH}{{sink!="audit", {i}}})', "{{sink}}"),
        ],
        span=8,
        runbook="TooltraceAuditBacklog",
    )
    yield _timeseries(
        "Telemetry export errors",
        "Records per second each sink failed to deliver to its backend (refused or "
        "unreachable); the calls are unaffected, the records are lost for that backend.",
        "short",
        [_query("A", f"sum by (sink) (rate({EXPORT_ERRORS}{{{i}}}[{RATE}]))", "{{sink}}")],
        span=8,
        runbook="TooltraceTelemetryExportErrors",
    )
    yield from _slo_panels()


def _slo_panels() -> Iterator[Any]:
    """The SLO row: error budget left and the 1h burn rate per tool and objective (from the
    SLO recording rules; a tool without an objective in slos.yml has no line)."""
    from grafana_foundation_sdk.builders import dashboard as db

    mod = slo()
    yield db.Row("Service level objectives")
    yield _timeseries(
        "Error budget left by tool and SLO",
        "Share of each objective's error budget (1 - target) still unspent over the SLO period "
        "(dashboards/slos.yml); below 0 the objective is missed.",
        "percentunit",
        [_query("A", f"{mod.BUDGET_RECORD}{{{TOOL_FILTER}}}", "{{tool}} {{slo}}")],
        min_val=None,  # an overspent budget reads below 0 and must show
        runbook="ToolErrorBudgetBurnSlow",
    )
    yield _timeseries(
        "Burn rate (1h) by tool and SLO",
        "How fast each error budget is being spent: the 1h error ratio divided by the budget. "
        "1 spends it exactly over the period; the page alert needs 14.4 (1h and 5m) or 6 (6h "
        "and 30m).",
        "short",
        [_query("A", f"{mod.sli_record('1h')}{{{TOOL_FILTER}}}\n/ on (tool, slo) "
                f"(1 - {mod.OBJECTIVE_RECORD})", "{{tool}} {{slo}}")],
        runbook="ToolErrorBudgetBurnFast",
    )

def _tool_panels() -> Iterator[Any]:
    from grafana_foundation_sdk.builders import dashboard as db

    f = f'tool="$tool", {INSTANCE_FILTER}'
    yield db.Row("Calls")
    yield _timeseries(
        "Calls by status",
        "Calls per second of this tool by the status they returned.",
        "reqps",
        [_query("A", f"sum by (status) (rate({CALLS}{{{f}}}[{RATE}]))", "{{status}}")],
        stack=True,
    )
    yield _timeseries(
        "Rejections by stage",
        "Rejected calls per second by the pipeline stage that stopped them.",
        "reqps",
        [_query("A", f"sum by (stage) (rate({REJECTIONS}{{{f}}}[{RATE}]))", "{{stage}}")],
        stack=True,
    )
    yield _timeseries(
        "Saturation ratios",
        "The tool's parameter-reject, policy-reject, hook-block and offload ratios.",
        "percentunit",
        [_query(chr(ord("A") + i), ratio_expr(s, RATE, f), s.title) for i, s in enumerate(SIGNALS)],
        max_val=1,
    )
    yield _timeseries(
        "Hook modifications and offloads",
        "Calls per second whose arguments a hook narrowed, and results offloaded to artifacts.",
        "reqps",
        [
            _query("A", f"sum(rate({HOOK_MODS}{{{f}}}[{RATE}]))", "hook modified"),
            _query("B", f"sum(rate({OFFLOADS}{{{f}}}[{RATE}]))", "offloaded"),
        ],
    )
    yield db.Row("Latency")
    yield _timeseries(
        "Latency percentiles",
        "p50, p95 and p99 call duration; dots are exemplars (click one to open its trace).",
        "s",
        [
            _query("A", latency_expr(0.5, RATE, f), "p50", exemplar=True),
            _query("B", latency_expr(0.95, RATE, f), "p95"),
            _query("C", latency_expr(0.99, RATE, f), "p99"),
        ],
        links=[_tempo_link(), _autopsy_link()],
        runbook="ToolLatencyP95OverSLO",
    )
    yield _timeseries(
        "p95 latency by status",
        "95th percentile duration split by the status calls returned (rejections are fast,"
        " unknowns slow).",
        "s",
        [_query("A", latency_expr(0.95, RATE, f, by="status"), "{{status}}")],
    )
    yield db.Row("Saturation")
    yield _timeseries(
        "In flight vs cap",
        "Calls of this tool executing now against its own concurrency cap.",
        "short",
        [
            _query("A", f"sum({INFLIGHT}{{{f}}})", "in flight"),
            _query("B", f"max({TOOL_CAP}{{{f}}})", "cap"),
            _query("C", f"sum({QUEUE}{{{f}}})", "waiting for admission"),
        ],
    )
    yield _timeseries(
        "Admission wait",
        "Time calls of this tool waited for a concurrency slot.",
        "s",
        [
            _query(
                "A",
                f"histogram_quantile(0.5, sum by (le) "
                f"(rate({ADMISSION_WAIT}_bucket{{{f}}}[{RATE}])))",
                "p50",
            ),
            _query(
                "B",
                f"histogram_quantile(0.95, sum by (le) "
                f"(rate({ADMISSION_WAIT}_bucket{{{f}}}[{RATE}])))",
                "p95",
            ),
        ],
    )


def _dashboard(
    uid: str, title: str, description: str, multi_tool: bool, panels: Callable[[], Iterator[Any]]
) -> dict[str, Any]:
    from grafana_foundation_sdk.builders import dashboard as db
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import dashboard as dm

    d = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["tooltrace"])
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .link(
            db.DashboardLink("tooltrace")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags(["tooltrace"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for v in _variables(multi_tool):
        d = d.with_variable(v)
    for p in panels():
        d = d.with_row(p) if isinstance(p, db.Row) else d.with_panel(p)
    data: dict[str, Any] = json.loads(json.dumps(d.build(), cls=JSONEncoder))
    return _conform(data)


def _conform(data: dict[str, Any]) -> dict[str, Any]:
    """Fix what the SDK emits that Grafana 11.6's dashboard schema does not allow."""
    # The SDK puts interval-variable fields on every variable; the schema rejects them.
    for var in data.get("templating", {}).get("list", []):
        if var.get("type") != "interval":
            for key in ("auto", "auto_count", "auto_min"):
                var.pop(key, None)
    # Stable, unique panel ids (rows come out as 0, other panels without one): exemplar and
    # "view panel" links, and provisioning diffs, depend on them.
    for i, panel in enumerate(data.get("panels", []), start=1):
        panel["id"] = i
    return data


def build_dashboards() -> dict[str, dict[str, Any]]:
    """Every shipped dashboard as JSON-ready data, keyed by file name."""
    return {
        "tooltrace-pipelines.json": _dashboard(
            PIPELINES_UID,
            "tooltrace: tool pipelines",
            "Tool call rate, rejections, offloads, latency, saturation and telemetry health "
            "across every tool.",
            True,
            _pipelines_panels,
        ),
        "tooltrace-tool.json": _dashboard(
            TOOL_UID,
            "tooltrace: tool",
            "One tool in detail: statuses, rejection stages, ratios, latency with exemplars, "
            "concurrency and admission.",
            False,
            _tool_panels,
        ),
    }


def render_dashboard(data: dict[str, Any]) -> str:
    """Dashboard JSON text exactly as committed."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def rendered_files(
    options: AlertOptions | None = None, slo_file: Path | None = None
) -> dict[str, str]:
    """Every generated file's text, keyed by path relative to dashboards/."""
    files = {name: render_dashboard(d) for name, d in build_dashboards().items()}
    files[RULES_FILE] = render_rules(options=options)
    files[SLO_RULES_FILE] = render_slo_rules(slo_file, options)
    return files


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the generated files; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on a diff")
    parser.add_argument("--out", type=Path, default=HERE, help="output directory")
    defaults = AlertOptions()
    parser.add_argument(
        "--runbook-base",
        default=defaults.runbook_base,
        help="base URL of the runbook pages alerts link to, one page per alert under it "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--latency-slo",
        type=float,
        default=defaults.latency_p95_slo_s,
        help="p95 latency SLO in seconds for ToolLatencyP95OverSLO (default: %(default)s)",
    )
    parser.add_argument(
        "--audit-backlog",
        type=int,
        default=defaults.audit_backlog,
        help="queued audit records that raise TooltraceAuditBacklog (default: %(default)s)",
    )
    parser.add_argument(
        "--slos",
        type=Path,
        default=HERE / SLO_FILE,
        help="the per-tool service level objectives (default: dashboards/slos.yml)",
    )
    args = parser.parse_args(argv)
    if not args.latency_slo > 0 or args.audit_backlog < 1:
        parser.error("--latency-slo and --audit-backlog must be positive")
    try:
        slo().load_slos(args.slos)
    except (OSError, ValueError) as exc:
        parser.error(f"--slos: {exc}")
    options = AlertOptions(
        runbook_base=args.runbook_base,
        latency_p95_slo_s=args.latency_slo,
        audit_backlog=args.audit_backlog,
    )
    stale = []
    for rel, text in rendered_files(options, args.slos).items():
        path = args.out / rel
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(rel)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for rel in stale:
        print(("out of date: " if args.check else "wrote: ") + str(args.out / rel))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
