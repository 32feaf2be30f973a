"""What a post-mortem report shows, gathered from the audit trail and made safe to print.

``build_call_report`` and ``build_run_report`` read calls through ``tooltrace.audit``'s public
readers (``AuditStore.call``, ``explain``, ``AuditStore.sql``) and return a ``Report``: plain
strings and numbers only, every text that came from a call passed through the default redactor
(the trail is redacted already; this is a second line of defence for a file that gets mailed
around). The renderers (HTML, Markdown) only lay it out and escape it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import orjson

from .._settings import trace_url
from ..redaction import default_redactor

if TYPE_CHECKING:
    from ..audit import AuditStore, Autopsy

__all__ = [
    "ArtifactRow",
    "CallReport",
    "HookRow",
    "NeighbourRow",
    "Report",
    "StepRow",
    "build_call_report",
    "build_run_report",
    "trace_link",
]

#: Calls of a run listed around the call a report is about (before and after it).
AROUND = 10
#: A run report details every call that needs attention (not ok, or of an outcome other than
#: ok) and, of the others, the first ones up to this many sections in all.
MAX_DETAILED = 100
#: A call needs attention when it returned, or ended as, anything but these.
_FINE = frozenset({"ok"})
#: A run report lists at most this many calls.
MAX_LISTED = 1000

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
_CELL = 2000


def _text(value: Any, limit: int = _CELL) -> str:
    """Any value as one redacted, bounded line of text ('' for None)."""
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    if isinstance(value, str):
        text = value
    else:
        clean, _ = default_redactor().redact(value)
        text = orjson.dumps(clean, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    text = default_redactor().redact_text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class StepRow:
    """One pipeline step: when it started (ms after the call began), how long it took, who
    decided it and what they decided."""

    seq: int
    step: str
    offset_ms: float
    elapsed_ms: float
    decider: str
    decision: str
    detail: str
    #: True when the step happened after the call returned (a late resolution, a job ending).
    late: bool = False


@dataclass(frozen=True, slots=True)
class HookRow:
    """One hook's verdict and what it changed in the arguments: (key, before, after) rows."""

    phase: str
    hook: str
    decision: str
    reason: str
    changes: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True, slots=True)
class ArtifactRow:
    """A result offloaded to an artifact file."""

    path: str
    chars: str
    bytes: str
    sha256: str


@dataclass(frozen=True, slots=True)
class NeighbourRow:
    """Another call of the same run (or the call itself, ``current``)."""

    call_id: str
    started_at: str
    offset_ms: float
    tool: str
    status: str
    elapsed_ms: float
    summary: str
    current: bool = False
    #: The final outcome (differs from ``status`` when a later step resolved the call).
    outcome: str = ""


@dataclass(frozen=True, slots=True)
class CallReport:
    """Everything one call's section shows."""

    call_id: str
    run_id: str
    tool: str
    status: str
    #: The final outcome: ``status``, or what a later step resolved the call to.
    outcome: str
    summary: str
    started_at: str
    elapsed_ms: float
    execution_started: bool
    facts: tuple[tuple[str, str], ...]
    steps: tuple[StepRow, ...]
    hooks: tuple[HookRow, ...]
    artifact: ArtifactRow | None
    trace_id: str
    trace_link: str | None


@dataclass(frozen=True, slots=True)
class Report:
    """A post-mortem of one call (``kind == "call"``) or of a whole run (``"run"``)."""

    kind: str
    title: str
    generated_at: str
    calls: tuple[CallReport, ...]
    run_calls: tuple[NeighbourRow, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


def trace_link(trace_id: Any) -> str | None:
    """The trace's address from ``TOOLTRACE_TRACE_URL`` (``{trace_id}`` filled in), or None
    when unset, when the id is not a trace id, or when the result is not an http(s) URL."""
    tmpl = trace_url()
    if not tmpl or not isinstance(trace_id, str) or not _TRACE_ID.match(trace_id):
        return None
    try:
        url = tmpl.format(trace_id=quote(trace_id, safe=""))
    except (KeyError, IndexError, ValueError):
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return url


def _steps(a: Autopsy) -> tuple[StepRow, ...]:
    rec = a.record or {}
    total = float(rec.get("elapsed_ms") or 0.0)
    rows = []
    for s in a.steps:
        offset = float(s.get("offset_ms") or 0.0)
        elapsed = float(s.get("elapsed_ms") or 0.0)
        rows.append(StepRow(
            int(s["seq"]), _text(s["step"], 80), offset, elapsed, _text(s["decider"], 200),
            _text(s["decision"], 80), _text(s.get("detail"), 600),
            late=total > 0 and offset > total * 1.01 + 1.0,
        ))
    return tuple(rows)


def _changes(diff: Any) -> tuple[tuple[str, str, str], ...]:
    """(key, before, after) rows of a hook's argument diff."""
    if not isinstance(diff, dict):
        return (("(value)", "", _text(diff, 600)),) if diff else ()
    if "before" in diff and "after" in diff:
        return (("(arguments)", _text(diff["before"], 600), _text(diff["after"], 600)),)
    out: list[tuple[str, str, str]] = []
    for k, pair in (diff.get("changed") or {}).items():
        if isinstance(pair, list) and len(pair) == 2:
            out.append((_text(k, 200), _text(pair[0], 600), _text(pair[1], 600)))
    for k, v in (diff.get("added") or {}).items():
        out.append((_text(k, 200), "(absent)", _text(v, 600)))
    for k in diff.get("removed") or []:
        out.append((_text(k, 200), "(present)", "(removed)"))
    return tuple(out)


def _outcome_text(a: Autopsy) -> str:
    """The final outcome, in the words ``autopsy`` uses."""
    outcome = _text(a.result.get("outcome"))
    if a.resolution:
        return f"{outcome} (resolved later, at {_text(a.resolution['at'])})"
    if outcome == "unknown":
        return "unknown (not resolved: no later step says how the tool ended)"
    return outcome


def _facts(a: Autopsy) -> tuple[tuple[str, str], ...]:
    rec, res = a.record or {}, a.result
    facts = [
        ("tool", f"{_text(rec.get('tool'))} (source {_text(rec.get('source')) or '?'}, "
                 f"mode {_text(rec.get('mode')) or '?'})"),
        ("status", _text(res.get("status"))
         + (f" at stage {_text(res['reject_stage'])}" if res.get("reject_stage") else "")),
        ("outcome", _outcome_text(a)),
        ("summary", _text(res.get("summary"))),
        ("arguments", _text(a.arguments)),
    ]
    if a.final_arguments != a.arguments:
        facts.append(("arguments (final)", _text(a.final_arguments)))
    if res.get("error_type"):
        facts.append(("error type", _text(res["error_type"])))
    if res.get("preview"):
        facts.append(("result preview", _text(res["preview"], 1000)))
    for p in a.policy:
        who = f"rule {p['rule']}" if p.get("rule") else "no rule objected"
        facts.append(("policy", _text(f"{p['decision']} ({who})"
                                      + (f": {p['reason']}" if p.get("reason") else ""))))
    for p in a.approvals:
        facts.append(("approval", _text(f"{p['decision']} by {p.get('approver') or p['decider']}"
                                        + (f": {p['reason']}" if p.get("reason") else ""))))
    if a.resolution:
        facts.append(("resolution", _text(f"{a.resolution['status']} at "
                                          f"{_text(a.resolution['at'])}: "
                                          f"{a.resolution['summary']}")))
    return tuple((k, v) for k, v in facts if v)


def _call_report(a: Autopsy) -> CallReport:
    """One call's section, from its autopsy."""
    rec = a.record or a.intent or {}
    hooks = tuple(
        HookRow(_text(h["phase"]), _text(h["hook"]), _text(h["decision"]),
                _text(h.get("reason") or h.get("error")), _changes(h.get("diff")))
        for h in a.hooks
    )
    art = a.artifact
    artifact = None if not art else ArtifactRow(
        _text(art.get("path")), _text(art.get("chars")), _text(art.get("bytes")),
        _text(art.get("sha256")))
    trace_id = a.trace.get("trace_id") or ""
    return CallReport(
        call_id=_text(a.call_id, 64),
        run_id=_text(rec.get("run_id"), 64),
        tool=_text(rec.get("tool"), 200),
        status=_text(a.result.get("status"), 40) or "no final record",
        outcome=_text(a.result.get("outcome"), 40),
        summary=_text(a.result.get("summary"), 400),
        started_at=_text(rec.get("started_at")),
        elapsed_ms=float(a.result.get("elapsed_ms") or 0.0),
        execution_started=bool(a.execution_started),
        facts=_facts(a),
        steps=_steps(a),
        hooks=hooks,
        artifact=artifact,
        trace_id=_text(trace_id, 64),
        trace_link=trace_link(trace_id),
    )


_RUN_COLS = "call_id, started_at, tool, status, outcome, elapsed_ms, summary"


def _neighbours(rows: list[dict[str, Any]], current: str | None) -> tuple[NeighbourRow, ...]:
    rows = sorted(rows, key=lambda r: (r["started_at"], r["call_id"]))
    t0 = rows[0]["started_at"] if rows else None
    return tuple(
        NeighbourRow(
            _text(r["call_id"], 64), _text(r["started_at"]),
            (r["started_at"] - t0).total_seconds() * 1000.0 if t0 is not None else 0.0,
            _text(r["tool"], 200), _text(r["status"], 40), float(r["elapsed_ms"] or 0.0),
            _text(r["summary"], 300), current=r["call_id"] == current,
            outcome=_text(r.get("outcome"), 40),
        )
        for r in rows
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat(timespec="seconds") + "Z"


def needs_no_attention(status: str, outcome: str) -> bool:
    """Whether a call returned ok and ended ok (everything else is shown first)."""
    return status in _FINE and outcome in _FINE


def build_call_report(store: AuditStore, call_id: str) -> Report:
    """The report of one call (``call_id`` may be a unique prefix): its section, and the calls
    of its run just before and after it. Raises the store's lookup errors."""
    from ..audit import explain

    a = explain(store.call(call_id))
    section = _call_report(a)
    rows: list[dict[str, Any]] = []
    if section.run_id:
        # ``sql`` writes the values into the query (no numpy; LIMIT planned as a top-N).
        rows = store.sql(
            f"(SELECT {_RUN_COLS} FROM tool_calls WHERE run_id = $r AND call_id < $c "
            "ORDER BY call_id DESC LIMIT $n) UNION ALL "
            f"(SELECT {_RUN_COLS} FROM tool_calls WHERE run_id = $r AND call_id >= $c "
            "ORDER BY call_id LIMIT $m)",
            {"r": section.run_id, "c": a.call_id, "n": AROUND, "m": AROUND + 1},
        ).dicts()
    return Report("call", f"call {section.call_id}", _now(), (section,),
                  _neighbours(rows, a.call_id))


def build_run_report(store: AuditStore, run_id: str) -> Report:
    """The report of a run: every call on one timeline, a section for every call that needs
    attention and for the first others up to ``MAX_DETAILED``. Raises ``LookupError`` when the
    run has no call."""
    from ..audit import explain

    rows = store.sql(
        f"SELECT {_RUN_COLS} FROM tool_calls WHERE run_id = $r ORDER BY call_id LIMIT $n",
        {"r": run_id, "n": MAX_LISTED + 1},
    ).dicts()
    if not rows:
        raise LookupError(f"no call of run {run_id[:40]!r} in this audit trail")
    notes = []
    if len(rows) > MAX_LISTED:
        rows = rows[:MAX_LISTED]
        notes.append(f"only the first {MAX_LISTED} calls of the run are listed")
    # What needs attention is always detailed, whenever in the run it happened; the room
    # left goes to the other calls in time order.
    urgent = [r for r in rows if not needs_no_attention(str(r["status"]), str(r.get("outcome")
                                                                              or r["status"]))]
    rest = [r for r in rows if r not in urgent][: max(0, MAX_DETAILED - len(urgent))]
    chosen = {str(r["call_id"]) for r in (*urgent, *rest)}
    if len(chosen) < len(rows):
        notes.append(f"every call that failed, was rejected or cancelled or is of unknown "
                     f"outcome is detailed ({len(urgent)}), and the first {len(rest)} of the "
                     f"others ({len(rows) - len(chosen)} listed only)")
    sections = tuple(
        _call_report(explain(store.call(str(r["call_id"]))))
        for r in rows if str(r["call_id"]) in chosen
    )
    return Report("run", f"run {_text(run_id, 64)}", _now(), sections,
                  _neighbours(rows, None), tuple(notes))
