"""Per-tool service level objectives -> multiwindow, multi-burn-rate Prometheus rules.

The objectives live in a YAML file (``dashboards/slos.yml`` is the shipped example)::

    period: 30d                 # the SLO period the error budget is counted over
    min_calls: 10               # calls a burn needs in its short window (default 10)
    objectives:
      - tool: read_text
        availability: 0.999     # share of calls that did not end failed or unknown
        latency:                # share of calls (not rejected) faster than threshold_s
          threshold_s: 0.25     # one of the duration histogram's bucket bounds
          target: 0.99
      - tool: deploy_service
        latency:
          threshold_s: 1.3
          target: 0.95
          buckets: [0.5, 1.0, 1.1, 1.2, 1.25, 1.3, 1.35, 1.4, 1.5, 2.0, 5.0]

``buckets`` is a tool's own duration buckets when its metrics sink gives it some
(``MetricsSink(tool_buckets=...)``): the threshold must be one of them instead.

Two SLIs, as error ratios per tool over a window W:

- availability: calls that ended ``failed`` or ``unknown`` / all calls (a rejected or cancelled
  call is the pipeline working, not the tool failing);
- latency: 1 - calls (not rejected) that took at most ``threshold_s`` / calls (not rejected),
  read from the ``le`` bucket of ``tooltrace_tool_call_duration_seconds``.

The alerts follow the method of Google's SRE workbook (chapter "Alerting on SLOs"): a burn rate
is the error ratio divided by the error budget (1 - target), and an alert needs a long and a
short window both over the same burn rate (the short one makes it stop soon after the problem
does): 14.4x over 1h and 5m or 6x over 6h and 30m pages (2% and 5% of a 30-day budget spent);
3x over 1d and 2h or 1x over 3d and 6h opens a ticket (10% of the budget). The dashboards show
the error budget left over the period. ``build.py`` renders these rules next to the others.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BUDGET_RECORD",
    "BURN_ALERTS",
    "OBJECTIVE_RECORD",
    "BurnAlert",
    "Objective",
    "SloConfig",
    "SloConfigError",
    "le_label",
    "load_slos",
    "parse_slos",
    "sli_record",
    "slo_alert_names",
    "slo_rule_groups",
    "windows",
]

#: The metric contract's names these rules read (``tooltrace.telemetry.metrics``).
CALLS = "tooltrace_tool_calls_total"
DURATION = "tooltrace_tool_call_duration_seconds"

OBJECTIVE_RECORD = "tool_slo:objective:ratio"
BUDGET_RECORD = "tool_slo:error_budget_remaining:ratio"
KINDS = ("availability", "latency")


def sli_record(window: str) -> str:
    """The recording rule of the SLIs' error ratio over ``window`` (labels ``tool``, ``slo``)."""
    return f"tool_slo:sli_error:ratio_rate{window}"


@dataclass(frozen=True, slots=True)
class BurnAlert:
    """One alert of the workbook's table: both windows over ``factor`` times the budget."""

    name: str
    severity: str
    #: (long window, short window, burn-rate factor), any of which fires the alert.
    conditions: tuple[tuple[str, str, float], ...]
    meaning: str
    #: How long a condition must hold before the alert fires (``for:``).
    for_: str


BURN_ALERTS: tuple[BurnAlert, ...] = (
    BurnAlert("ToolErrorBudgetBurnFast", "critical", (("1h", "5m", 14.4), ("6h", "30m", 6.0)),
              "page: at this rate the whole error budget is gone within days", "2m"),
    BurnAlert("ToolErrorBudgetBurnSlow", "warning", (("1d", "2h", 3.0), ("3d", "6h", 1.0)),
              "ticket: the error budget is being spent faster than the period allows", "15m"),
)


class SloConfigError(ValueError):
    """The SLO file is not valid; the message says where and what to write instead."""


@dataclass(frozen=True, slots=True)
class Objective:
    """One SLO of one tool: its kind, target share of good calls, latency threshold."""

    tool: str
    kind: str
    target: float
    threshold_s: float | None = None


@dataclass(frozen=True, slots=True)
class SloConfig:
    """Every objective, and the period the error budget is counted over."""

    objectives: tuple[Objective, ...]
    period: str = "30d"
    #: A burn-rate condition needs at least this many calls of the tool in its short window.
    min_calls: int = 10


def le_label(bound: float) -> str:
    """A bucket bound as prometheus-client writes the ``le`` label (``1.0``, ``0.25``)."""
    from prometheus_client.utils import floatToGoString

    return str(floatToGoString(bound))


def _target(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise SloConfigError(f"{where}: the target must be a number between 0 and 1 "
                             f"(exclusive), such as 0.999; got {value!r}")
    return float(value)


def _objectives(i: int, entry: Any, buckets: tuple[float, ...]) -> Iterable[Objective]:
    where = f"objectives[{i}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("tool"), str) or not entry["tool"]:
        raise SloConfigError(f"{where}: needs a 'tool' (a registered tool's name)")
    tool = entry["tool"]
    unknown = set(entry) - {"tool", *KINDS}
    if unknown:
        raise SloConfigError(f"{where} ({tool}): unknown keys {sorted(unknown)}; "
                             f"allowed: tool, {', '.join(KINDS)}")
    if not set(entry) & set(KINDS):
        raise SloConfigError(f"{where} ({tool}): give 'availability' and/or 'latency'")
    if "availability" in entry:
        target = _target(f"{where}.availability", entry["availability"])
        yield Objective(tool, "availability", target)
    if "latency" in entry:
        lat = entry["latency"]
        if not isinstance(lat, dict) or not {"threshold_s", "target"} <= set(lat) or \
                set(lat) - {"threshold_s", "target", "buckets"}:
            raise SloConfigError(f"{where}.latency ({tool}): needs exactly threshold_s and target"
                                 " (and the tool's own buckets, when it has some)")
        if "buckets" in lat:
            own = lat["buckets"]
            if not isinstance(own, list) or not own or not all(
                    isinstance(b, int | float) and not isinstance(b, bool) and 0 < b < math.inf
                    for b in own):
                raise SloConfigError(f"{where}.latency.buckets ({tool}): a list of positive "
                                     f"bucket bounds in seconds; got {own!r}")
            buckets = tuple(sorted(float(b) for b in own))
        thr = lat["threshold_s"]
        if not isinstance(thr, int | float) or not any(math.isclose(thr, b) for b in buckets):
            raise SloConfigError(
                f"{where}.latency ({tool}): threshold_s must be a bucket bound of "
                f"{DURATION} (one of {', '.join(f'{b:g}' for b in buckets)}); got {thr!r}")
        yield Objective(tool, "latency", _target(f"{where}.latency.target", lat["target"]),
                        float(thr))


def parse_slos(data: Any, buckets: tuple[float, ...]) -> SloConfig:
    """An ``SloConfig`` from the parsed YAML; ``SloConfigError`` when it is not valid."""
    if not isinstance(data, dict) or not isinstance(data.get("objectives"), list):
        raise SloConfigError("the SLO file needs a list under 'objectives'")
    period = data.get("period", "30d")
    if not isinstance(period, str) or not period or not period[:-1].isdigit() or \
            period[-1] not in "hdw":
        raise SloConfigError(f"period: a duration in hours, days or weeks such as 30d; "
                             f"got {period!r}")
    min_calls = data.get("min_calls", 10)
    if isinstance(min_calls, bool) or not isinstance(min_calls, int) or min_calls < 1:
        raise SloConfigError(f"min_calls: a whole number of calls, at least 1; got {min_calls!r}")
    objectives = [o for i, e in enumerate(data["objectives"]) for o in _objectives(i, e, buckets)]
    seen = [(o.tool, o.kind) for o in objectives]
    dupes = sorted({k for k in seen if seen.count(k) > 1})
    if dupes:
        raise SloConfigError(f"more than one objective for {dupes}: one per tool and kind")
    return SloConfig(tuple(objectives), period, min_calls)


def load_slos(path: str | Path, buckets: tuple[float, ...] | None = None) -> SloConfig:
    """Read and check an SLO file (``buckets``: the duration histogram's bounds)."""
    import yaml

    if buckets is None:
        from tooltrace.telemetry.metrics import DURATION_BUCKETS

        buckets = tuple(DURATION_BUCKETS)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise SloConfigError(f"{path}: not YAML: {exc}") from None
    return parse_slos(data, buckets)


def _error_ratio(o: Objective, window: str) -> str:
    sel = f'tool="{o.tool}"'
    if o.kind == "availability":
        bad = f'sum by (tool) (rate({CALLS}{{{sel}, status=~"failed|unknown"}}[{window}]))'
        total = f"sum by (tool) (rate({CALLS}{{{sel}}}[{window}]))"
        return f"(\n  {bad}\n  or {total} * 0\n)\n/ ({total} > 0)"
    assert o.threshold_s is not None
    sel += ', status!="rejected"'
    fast = (f'sum by (tool) (rate({DURATION}_bucket{{{sel}, le="{le_label(o.threshold_s)}"}}'
            f"[{window}]))")
    total = f"sum by (tool) (rate({DURATION}_count{{{sel}}}[{window}]))"
    return f"1 - (\n  {fast}\n  / ({total} > 0)\n)"


def windows(cfg: SloConfig) -> list[str]:
    """Every window a rule needs: the alerts' long and short windows, then the period."""
    out = [w for a in BURN_ALERTS for long, short, _ in a.conditions for w in (long, short)]
    return list(dict.fromkeys([*sorted(set(out), key=_seconds), cfg.period]))


def _seconds(d: str) -> int:
    return int(d[:-1]) * {"m": 60, "h": 3600, "d": 86400, "w": 604800}[d[-1]]


def _records(cfg: SloConfig) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for o in cfg.objectives:
        rules.append({"record": OBJECTIVE_RECORD, "expr": f"vector({o.target!r})",
                      "labels": {"tool": o.tool, "slo": o.kind}})
    for w in windows(cfg):
        for o in cfg.objectives:
            rules.append({"record": sli_record(w), "expr": _error_ratio(o, w),
                          "labels": {"tool": o.tool, "slo": o.kind}})
    rules.append({
        "record": BUDGET_RECORD,
        "expr": (f"1 - (\n  {sli_record(cfg.period)}\n"
                 f"  / on (tool, slo) (1 - {OBJECTIVE_RECORD})\n)"),
    })
    return rules


def _burn_expr(a: BurnAlert, min_calls: int) -> str:
    parts = []
    for long, short, factor in a.conditions:
        bar = f"on (tool, slo) ({factor:g} * (1 - {OBJECTIVE_RECORD}))"
        # Enough data: min_calls calls of the tool in the short window, and Prometheus has
        # watched it for the whole short window (a fresh server's first minutes are no trend).
        parts.append(f"(\n  {sli_record(long)} > {bar}\n"
                     f"  and\n  {sli_record(short)} > {bar}\n"
                     f"  and on (tool)\n"
                     f"  sum by (tool) (increase({CALLS}[{short}])) >= {min_calls}\n"
                     f"  and on (tool)\n  sum by (tool) ({CALLS} offset {short})\n)")
    return "\nor\n".join(parts)


def _alerts(cfg: SloConfig, runbook: Any) -> list[dict[str, Any]]:
    rules = []
    for a in BURN_ALERTS:
        when = " or ".join(f"{f:g}x over {lw} and {sw}" for lw, sw, f in a.conditions)
        rules.append({
            "alert": a.name,
            "expr": _burn_expr(a, cfg.min_calls),
            "for": a.for_,
            "labels": {"severity": a.severity, "service": "tooltrace"},
            "annotations": {
                "summary": "{{ $labels.tool }}: burning its {{ $labels.slo }} error budget "
                           f"({a.severity})",
                "description": (
                    "Tool {{ $labels.tool }} misses its {{ $labels.slo }} objective: its error "
                    "ratio is {{ $value | humanizePercentage }} over the long window: it burns "
                    f"its error budget (1 - target) at {when} ({a.meaning}; budget period "
                    f"{cfg.period})."),
                "runbook_url": runbook(a.name),
            },
        })
    return rules


def slo_rule_groups(cfg: SloConfig, runbook: Any) -> dict[str, Any]:
    """The SLO rule file as a mapping: recording rules, then the burn-rate alerts.

    ``runbook(alert)`` gives an alert's runbook URL.
    """
    # One group: its rules are evaluated in order, so every alert reads the ratios recorded in
    # the same evaluation (two groups run concurrently, and an alert could read the last ones).
    return {"groups": [
        {"name": "tooltrace-slo", "rules": [*_records(cfg), *_alerts(cfg, runbook)]},
    ]}


def slo_alert_names() -> list[str]:
    """Names of the SLO alerts, in file order."""
    return [a.name for a in BURN_ALERTS]
