"""One call, replayed: the facts a post-mortem needs, drawn from its record and its steps.

``explain(detail)`` turns a ``CallDetail`` (``AuditStore.call``) into an ``Autopsy``: the
arguments as the model gave them (redacted), the schema verdict, where each path resolved, each
policy rule and approver, each hook with its decision and argument diff, whether execution
started, deadline and cancellation events, result, artifact, trace, late resolution, and every
step with its time, offset, elapsed time and decider. The CLI prints it; ``to_dict`` is the
``--json`` form.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import orjson

from .._settings import trace_url
from ._storerecords import CallDetail

__all__ = ["Autopsy", "explain"]

#: ``tooltrace.sinks.FIRST_LATE_SEQ``, repeated so the reader imports nothing of the registry
#: (a test pins the two equal).
FIRST_LATE_SEQ = 1000

_EVENT_STEPS = (
    "deadline", "cancel_requested", "cancelled", "stopped", "resolved", "job_started", "job_ended",
)


def _j(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            return v
    return v


@dataclass(frozen=True, slots=True)
class Autopsy:
    """The facts of one call, in the order a reader asks for them."""

    call_id: str
    record: dict[str, Any] | None
    arguments: Any
    final_arguments: Any
    schema: list[dict[str, Any]]
    paths: dict[str, str]
    refused_paths: dict[str, str]
    policy: list[dict[str, Any]]
    approvals: list[dict[str, Any]]
    hooks: list[dict[str, Any]]
    execution_started: bool
    execution: dict[str, Any] | None
    events: list[dict[str, Any]]
    result: dict[str, Any]
    artifact: dict[str, Any] | None
    trace: dict[str, Any]
    resolution: dict[str, Any] | None
    intent: dict[str, Any] | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    family: dict[str, Any] = field(default_factory=dict)
    """Nested calls around this one: ``ancestors`` (root first) and ``descendants`` (depth
    first), from ``call_family``; empty when not looked up."""
    progress: list[dict[str, Any]] = field(default_factory=list)
    """The progress marks the tool reported (bounded)."""
    late: list[dict[str, Any]] = field(default_factory=list)
    """The steps recorded after the call had returned (numbered from ``FIRST_LATE_SEQ``),
    each with ``why``: what recorded it and what it means."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``tooltrace autopsy --json``)."""
        return {
            "call_id": self.call_id,
            "call": self.record,
            "arguments": self.arguments,
            "final_arguments": self.final_arguments,
            "schema": self.schema,
            "paths": self.paths,
            "refused_paths": self.refused_paths,
            "policy": self.policy,
            "approvals": self.approvals,
            "hooks": self.hooks,
            "execution_started": self.execution_started,
            "execution": self.execution,
            "events": self.events,
            "result": self.result,
            "artifact": self.artifact,
            "trace": self.trace,
            "resolution": self.resolution,
            "intent": self.intent,
            "steps": self.steps,
            "family": self.family,
            "progress": self.progress,
            "late": self.late,
        }


_REMOVED = "<removed by a hook; value not recorded>"


def _before_hooks(final: Any, diffs: list[Any]) -> Any:
    """The arguments as the model gave them: the final ones with each hook's diff undone."""
    args = final
    for diff in reversed(diffs):
        if not isinstance(diff, dict):
            continue
        if "before" in diff and "after" in diff:
            args = diff["before"]
            continue
        if not isinstance(args, dict):
            continue
        args = dict(args)
        for k in diff.get("added") or {}:
            args.pop(k, None)
        for k, pair in (diff.get("changed") or {}).items():
            if isinstance(pair, list) and len(pair) == 2:
                args[k] = pair[0]
        for k in diff.get("removed") or []:
            args.setdefault(k, _REMOVED)
    return args


def _us(t: dt.datetime | None) -> int | None:
    if t is None:
        return None
    return int(t.replace(tzinfo=dt.UTC).timestamp() * 1_000_000)


def _outcome(
    rec: dict[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any], dict[str, Any] | None]:
    """What the final record says: (result, artifact, trace, resolution)."""
    if rec is None:
        return ({"status": None, "outcome": None,
                 "summary": "no final record: only the strict-mode intent exists"
                 " (the process stopped during the call?)"}, None, {}, None)
    result = {
        "status": rec["status"],
        "outcome": rec["outcome"],
        "reject_stage": rec["reject_stage"],
        "error_type": rec["error_type"],
        "summary": rec["summary"],
        "preview": rec["result_preview"],
        "elapsed_ms": rec["elapsed_ms"],
    }
    artifact = None
    if rec.get("artifact_path"):
        artifact = {
            "path": rec["artifact_path"],
            "chars": rec["artifact_chars"],
            "bytes": rec["artifact_bytes"],
            "sha256": rec["artifact_sha256"],
        }
    trace: dict[str, Any] = {"trace_id": rec["trace_id"], "span_id": rec["span_id"],
                             "parent_span_id": rec["parent_span_id"],
                             "sampled": rec["trace_sampled"]}
    tmpl = trace_url()
    if tmpl and rec["trace_id"]:
        try:
            trace["url"] = tmpl.format(trace_id=rec["trace_id"], span_id=rec["span_id"] or "")
        except (KeyError, IndexError, ValueError):
            trace["url"] = None
    resolution = None
    if rec.get("resolved_at") is not None:
        resolution = {"status": rec["outcome"], "at": rec["resolved_at"],
                      "summary": rec["resolution_summary"]}
    return result, artifact, trace, resolution


def explain(detail: CallDetail, family: dict[str, Any] | None = None) -> Autopsy:
    """Build the autopsy of one call (``family``: its nested calls, from ``call_family``)."""
    rec = dict(detail.record) if detail.record is not None else None
    progress: list[dict[str, Any]] = []
    if rec is not None:
        rec["args_redacted"] = _j(rec.get("args_redacted"))
        rec["attributes"] = _j(rec.get("attributes"))
        rec["progress"] = _j(rec.get("progress"))
        for m in rec["progress"] or ():
            if isinstance(m, list) and len(m) == 5:
                progress.append(dict(zip(("seq", "at_us", "done", "total", "message"), m,
                                         strict=True)))
    t0 = _us(rec["started_at"]) if rec else (
        _us(detail.intent["started_at"]) if detail.intent else None)
    steps: list[dict[str, Any]] = []
    for s in detail.steps:
        d = dict(s)
        d["detail"] = _j(d.get("detail"))
        at = _us(d.get("started_at"))
        d["offset_ms"] = None if at is None or t0 is None else round((at - t0) / 1000.0, 3)
        steps.append(d)
    schema, policy, approvals, hooks, events = [], [], [], [], []
    paths: dict[str, str] = {}
    refused: dict[str, str] = {}
    execution: dict[str, Any] | None = None
    for s in steps:
        name, det = s["step"], s["detail"] if isinstance(s["detail"], dict) else {}
        brief = {"seq": s["seq"], "step": name, "decider": s["decider"], "decision": s["decision"]}
        if name in ("validate", "revalidate"):
            schema.append({**brief, "error": det.get("error"), "rule": det.get("rule")})
        elif name == "policy":
            # A bare "policy" decider means no rule objected; the rules that ran are in detail.
            rule = s["decider"].split(":", 1)[1] if ":" in s["decider"] else None
            policy.append({**brief, "rule": rule, "rules": det.get("rules"),
                           "reason": det.get("reason")})
            p = det.get("paths")
            if isinstance(p, dict):
                paths.update({str(k): str(v) for k, v in p.items()})
            if s["decision"] == "deny" and det.get("param") is not None:
                refused[str(det["param"])] = str(det.get("reason") or "refused")
        elif name == "approval":
            who = s["decider"].split(":", 1)[1] if s["decider"].startswith("user:") else None
            approvals.append({**brief, "approver": who, "rule": det.get("rule"),
                              "reason": det.get("reason"), "approval_id": det.get("approval_id"),
                              "args_sha256": det.get("args_sha256")})
        elif name in ("pre_hook", "post_hook"):
            hook = s["decider"].split(":", 1)[1] if ":" in s["decider"] else s["decider"]
            hooks.append({**brief, "hook": hook, "phase": name[:-5], "reason": det.get("reason"),
                          "diff": det.get("diff"), "error": det.get("error")})
        elif name == "execute":
            execution = {**brief, "elapsed_ms": s["elapsed_ms"], "detail": det or None}
        if name in _EVENT_STEPS:
            events.append({**brief, "at": s["started_at"], "offset_ms": s["offset_ms"],
                           "detail": det or None})
    started = bool(rec["execution_started"]) if rec else execution is not None
    result, artifact, trace, resolution = _outcome(rec)
    intent = None
    if detail.intent is not None:
        intent = dict(detail.intent)
        intent["args_redacted"] = _j(intent.get("args_redacted"))
    final = rec["args_redacted"] if rec else (intent or {}).get("args_redacted")
    args = _before_hooks(final, [h.get("diff") for h in hooks if h["decision"] == "modify"
                                 and h["phase"] == "pre"])
    late = [{"seq": s["seq"], "step": s["step"], "decider": s["decider"],
             "decision": s["decision"], "offset_ms": s["offset_ms"], "why": _late_why(s)}
            for s in steps if isinstance(s["seq"], int) and s["seq"] >= FIRST_LATE_SEQ]
    return Autopsy(detail.call_id, rec, args, final, schema, paths, refused, policy, approvals,
                   hooks, started, execution, events, result, artifact, trace, resolution,
                   intent, steps, family or {}, progress, late)


def _late_why(step: dict[str, Any]) -> str:
    """What a late step means, in one sentence."""
    who = step["decider"]
    if step["step"] == "resolved":
        return (f"recorded later by {who}, when the tool really ended after the call had returned"
                f" unknown: its final outcome is {step['decision']}")
    if step["step"] in ("job_ended", "job_started"):
        return f"recorded later by {who}: the call's background job {step['step'][4:]}"
    return f"recorded later by {who}, after the call had returned"
