"""The OCSF events of the trail's records: each finished call as an **API Activity** event
(class 6003) and each approver's answer as a **User Access Management** event (class 3005: an
approval gives the principal the privilege to run one tool with one set of arguments; a refusal
is that assignment failing). The mapping, field by field, is on the documentation page
``audit/export.md``; every event validates against the OCSF schema ``OCSF_VERSION``.

A record comes from a compacted table's row (``from_row``) or from a trail line
(``from_line``); both give the same event. Events are built as the trail holds the records
(redacted); ``_export`` passes them through the redactor once more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "OCSF_VERSION",
    "EventContext",
    "TrailApproval",
    "TrailCall",
    "TrailPrincipal",
    "approval_event",
    "call_event",
]

#: The OCSF schema version every exported event follows (``metadata.version``).
OCSF_VERSION = "1.7.0"

# OCSF classes, categories and the captions their ids go by (the schema's own words: an
# ``*_id`` attribute's sibling holds its caption).
_API_ACTIVITY, _APPLICATION = 6003, 6
_USER_ACCESS, _IAM = 3005, 3
_CLASS_NAME = {_API_ACTIVITY: "API Activity", _USER_ACCESS: "User Access Management"}
_CATEGORY_NAME = {_APPLICATION: "Application Activity", _IAM: "Identity & Access Management"}
_API_ACTIVITIES = {0: "Unknown", 1: "Create", 2: "Read", 3: "Update", 4: "Delete"}
_ASSIGN_PRIVILEGES = 1
_SEVERITY = {1: "Informational", 2: "Low", 3: "Medium"}
_STATUS = {0: "Unknown", 1: "Success", 2: "Failure"}
_ACTION = {1: "Allowed", 2: "Denied"}
_DISPOSITION = {1: "Allowed", 2: "Blocked", 8: "Approved", 25: "Rejected"}
_OTHER = 99
#: Observable type ids (``observable.type_id``) used here.
_HOSTNAME, _USER_NAME = (1, "Hostname"), (4, "User Name")

#: Where a rejection means a control said no (policy, approver, hook): blocked, of medium
#: severity; any other stage rejected a call that could not run (invalid arguments, no such
#: tool, no room, no audit).
_CONTROL_STAGES = frozenset({"policy", "approval", "hook"})


# --- the trail's records, as the export reads them --------------------------------------------


@dataclass(frozen=True, slots=True)
class TrailPrincipal:
    """Whom a call (or the call an approval was asked about) acted for."""

    user: str | None = None
    agent: str | None = None
    tenant: str | None = None
    roles: tuple[str, ...] = ()

    @classmethod
    def from_value(cls, p: Any) -> TrailPrincipal:
        """From a line's ``principal`` object (or None)."""
        if not isinstance(p, Mapping):
            return cls()
        roles = p.get("roles")
        return cls(_text(p.get("user")), _text(p.get("agent")), _text(p.get("tenant")),
                   tuple(str(r) for r in roles) if isinstance(roles, list) else ())

    @classmethod
    def from_columns(cls, user: Any, agent: Any, tenant: Any, roles: Any) -> TrailPrincipal:
        """From the ``principal_*`` columns (roles as JSON text)."""
        parsed = _loads(roles)
        return cls(_text(user), _text(agent), _text(tenant),
                   tuple(str(r) for r in parsed) if isinstance(parsed, list) else ())


@dataclass(frozen=True, slots=True)
class TrailCall:
    """One finished call (a ``tool_calls`` row, or a trail line of kind ``c``)."""

    call_id: str
    run_id: str
    tool: str
    source: str
    status: str
    reject_stage: str | None
    summary: str
    error_type: str | None
    started_at_us: int
    elapsed_us: int
    execution_started: bool
    arguments: Any
    result_preview: str | None
    artifact: Mapping[str, Any] | None
    mode: str | None
    tool_type: str | None
    trace_id: str | None
    span_id: str | None
    parent_span_id: str | None
    parent_call_id: str | None
    depth: int
    principal: TrailPrincipal
    capability: str | None
    effect: str | None
    #: The policy rule that asked for approval or refused the call, if one did.
    rule: str | None

    @classmethod
    def from_line(cls, o: Mapping[str, Any]) -> TrailCall:
        """From a trail line of kind ``c`` (see ``_format``)."""
        art = o.get("artifact")
        return cls(
            str(o.get("call_id")), str(o.get("run_id") or ""), str(o.get("tool") or ""),
            str(o.get("source") or ""), str(o.get("status") or "unknown"),
            _text(o.get("reject_stage")), str(o.get("summary") or ""), _text(o.get("error_type")),
            _int(o.get("started_at_us")), _int(o.get("elapsed_us")),
            o.get("execution_started") is True, o.get("args_redacted"),
            _text(o.get("result_preview")),
            {k: art.get(k) for k in ("path", "sha256", "chars", "bytes")}
            if isinstance(art, Mapping) else None,
            _text(o.get("mode")), _text(o.get("tool_type")), _text(o.get("trace_id")),
            _text(o.get("span_id")), _text(o.get("parent_span_id")),
            _text(o.get("parent_call_id")), _int(o.get("depth")),
            TrailPrincipal.from_value(o.get("principal")), _text(o.get("capability")),
            _text(o.get("effect")), _rule_of(_policy_decider(o.get("steps"))),
        )

    @classmethod
    def from_row(cls, r: Sequence[Any]) -> TrailCall:
        """From a row of the compacted calls as ``_export`` reads them."""
        (call_id, run_id, tool, source, status, reject_stage, summary, error_type, started_us,
         elapsed_ms, execution_started, args, preview, a_path, a_sha, a_chars, a_bytes, mode,
         tool_type, trace_id, span_id, parent_span_id, parent_call_id, depth, p_user, p_agent,
         p_tenant, p_roles, capability, effect, decider) = r
        return cls(
            str(call_id), str(run_id or ""), str(tool or ""), str(source or ""),
            str(status or "unknown"), _text(reject_stage), str(summary or ""), _text(error_type),
            _int(started_us), round((elapsed_ms or 0.0) * 1000), execution_started is True,
            _loads(args), _text(preview),
            {"path": a_path, "sha256": a_sha, "chars": a_chars, "bytes": a_bytes}
            if a_path or a_sha else None,
            _text(mode), _text(tool_type), _text(trace_id), _text(span_id),
            _text(parent_span_id), _text(parent_call_id), _int(depth),
            TrailPrincipal.from_columns(p_user, p_agent, p_tenant, p_roles), _text(capability),
            _text(effect), _rule_of(decider),
        )


@dataclass(frozen=True, slots=True)
class TrailApproval:
    """One approver's answer (an ``approvals`` row, or a trail line of kind ``a``)."""

    approval_id: str
    call_id: str
    run_id: str
    tool: str
    rule: str | None
    approved: bool
    who: str
    reason: str
    args_sha256: str | None
    arguments: Any
    at_us: int
    expires_at_us: int | None
    principal: TrailPrincipal

    @classmethod
    def from_line(cls, o: Mapping[str, Any]) -> TrailApproval:
        """From a trail line of kind ``a`` (see ``_format``)."""
        exp = o.get("expires_at_us")
        return cls(
            str(o.get("approval_id")), str(o.get("call_id") or ""), str(o.get("run_id") or ""),
            str(o.get("tool") or ""), _text(o.get("rule")), o.get("approved") is True,
            str(o.get("who") or ""), str(o.get("reason") or ""), _text(o.get("args_sha256")),
            o.get("args"), _int(o.get("at_us")), exp if isinstance(exp, int) else None,
            TrailPrincipal.from_value(o.get("principal")),
        )

    @classmethod
    def from_row(cls, r: Sequence[Any]) -> TrailApproval:
        """From a row of the compacted answers as ``_export`` reads them."""
        (approval_id, call_id, run_id, tool, rule, decision, approver, reason, digest, at_us,
         expires_us, p_user, p_agent, p_tenant, p_roles, args) = r
        return cls(
            str(approval_id), str(call_id or ""), str(run_id or ""), str(tool or ""),
            _text(rule), decision == "approve", str(approver or ""), str(reason or ""),
            _text(digest), _loads(args), _int(at_us),
            expires_us if isinstance(expires_us, int) else None,
            TrailPrincipal.from_columns(p_user, p_agent, p_tenant, p_roles),
        )


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _loads(v: Any) -> Any:
    if not isinstance(v, str):
        return v
    try:
        return orjson.loads(v)
    except orjson.JSONDecodeError:
        return v


def _policy_decider(steps: Any) -> str | None:
    """The decider of a line's first ``policy`` step."""
    if isinstance(steps, list):
        for s in steps:
            if isinstance(s, list) and len(s) > 4 and s[1] == "policy":
                return s[4] if isinstance(s[4], str) else None
    return None


def _rule_of(decider: Any) -> str | None:
    """``policy:<rule>`` -> ``<rule>``: the rule that asked or refused (an allowing policy
    step is decided by ``policy`` as a whole)."""
    if isinstance(decider, str) and decider.startswith("policy:"):
        return decider.split(":", 1)[1] or None
    return None


# --- the mapping ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EventContext:
    """What every event of one export shares: the machine the trail is on and the product."""

    hostname: str
    version: str


def _ms(us: int) -> int:
    return us // 1000


def _activity(capability: str | None, effect: str | None) -> tuple[int, str]:
    """API Activity's activity from what the tool declares: reading is Read (also a network
    tool without side effects, such as a fetch); writing is Update (a declaration does not
    say whether a write creates or removes); a network tool with side effects or a command
    is Other; an unregistered tool (or a record from before capabilities were recorded) is
    Unknown."""
    if capability == "read" or (capability == "network" and effect == "none"):
        return 2, _API_ACTIVITIES[2]
    if capability == "write":
        return 3, _API_ACTIVITIES[3]
    if capability == "network":
        return _OTHER, "Network"
    if capability == "execute":
        return _OTHER, "Execute"
    return 0, _API_ACTIVITIES[0]


def _status(status: str) -> tuple[int, str]:
    if status == "ok":
        return 1, _STATUS[1]
    if status in ("rejected", "failed"):
        return 2, _STATUS[2]
    if status == "cancelled":
        return _OTHER, "Cancelled"
    return 0, _STATUS[0]


def _severity(c: TrailCall) -> int:
    if c.status == "unknown" or (c.status == "rejected" and c.reject_stage in _CONTROL_STAGES):
        return 3
    if c.status in ("rejected", "failed"):
        return 2
    return 1


def _classified(class_uid: int, category_uid: int, activity_id: int, activity: str
                ) -> dict[str, Any]:
    return {
        "class_uid": class_uid, "class_name": _CLASS_NAME[class_uid],
        "category_uid": category_uid, "category_name": _CATEGORY_NAME[category_uid],
        "activity_id": activity_id, "activity_name": activity,
        "type_uid": class_uid * 100 + activity_id,
        # The type's caption: for an activity of its own (Other), the schema's ``Other``.
        "type_name": f"{_CLASS_NAME[class_uid]}: {'Other' if activity_id == _OTHER else activity}",
    }


def _metadata(ctx: EventContext, uid: str, log_name: str, run_id: str, tenant: str | None,
              profiles: list[str]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "version": OCSF_VERSION,
        "product": {"name": "tooltrace", "vendor_name": "tooltrace", "version": ctx.version},
        "uid": uid, "log_name": log_name, "correlation_uid": run_id, "profiles": profiles,
    }
    if tenant:
        meta["tenant_uid"] = tenant
    return meta


def _user(p: TrailPrincipal) -> dict[str, Any] | None:
    if p.user is None:
        return None
    user: dict[str, Any] = {"name": p.user, "uid": p.user, "type_id": 1, "type": "User"}
    if p.roles:
        user["groups"] = [{"name": r} for r in p.roles]
    return user


def _observable(name: str, kind: tuple[int, str], value: str) -> dict[str, Any]:
    return {"name": name, "type_id": kind[0], "type": kind[1], "value": value}


def _control(action_id: int, disposition_id: int, rule: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"action_id": action_id, "action": _ACTION[action_id],
                           "disposition_id": disposition_id,
                           "disposition": _DISPOSITION[disposition_id]}
    if rule:
        out["policy"] = {"name": rule}
    return out


def call_event(c: TrailCall, ctx: EventContext) -> dict[str, Any]:
    """The API Activity event of one call (not redacted yet)."""
    activity_id, activity = _activity(c.capability, c.effect)
    status_id, status = _status(c.status)
    severity_id = _severity(c)
    start, end = _ms(c.started_at_us), _ms(c.started_at_us + c.elapsed_us)
    actor: dict[str, Any] = {"session": {"uid": c.run_id}}
    user = _user(c.principal)
    if user is not None:
        actor["user"] = user
    if c.principal.agent:
        actor["app_name"] = c.principal.agent
    response: dict[str, Any] = {"message": c.summary}
    if c.error_type:
        response["error"] = c.error_type
        response["error_message"] = c.summary
    data: dict[str, Any] = {}
    if c.result_preview is not None:
        data["preview"] = c.result_preview
    if c.artifact is not None:
        data["artifact"] = dict(c.artifact)
    if data:
        response["data"] = data
    request: dict[str, Any] = {"uid": c.call_id}
    if c.arguments is not None:
        request["data"] = c.arguments
    api: dict[str, Any] = {"operation": c.tool, "request": request, "response": response}
    if c.source:
        api["service"] = {"name": c.source}
    rejected = c.status == "rejected"
    # Blocked: a control said no; Rejected: the call could not run as asked.
    disposition = (2 if c.reject_stage in _CONTROL_STAGES else 25) if rejected else 1
    profiles = ["security_control"]
    observables = [_observable("src_endpoint.hostname", _HOSTNAME, ctx.hostname)]
    if user is not None:
        observables.append(_observable("actor.user.name", _USER_NAME, user["name"]))
    event: dict[str, Any] = {
        **_classified(_API_ACTIVITY, _APPLICATION, activity_id, activity),
        "severity_id": severity_id, "severity": _SEVERITY[severity_id],
        "status_id": status_id, "status": status, "status_code": c.status,
        "time": start, "start_time": start, "end_time": end, "duration": end - start,
        "message": c.summary,
        "actor": actor, "api": api, "src_endpoint": {"hostname": ctx.hostname},
        "resources": [{"name": c.tool, "type": "tool"}],
        **_control(2 if rejected else 1, disposition, c.rule),
        "observables": observables,
        "unmapped": {
            "tool_source": c.source or None, "capability": c.capability, "effect": c.effect,
            "mode": c.mode, "tool_type": c.tool_type, "reject_stage": c.reject_stage,
            "execution_started": c.execution_started, "parent_call_id": c.parent_call_id,
            "depth": c.depth,
        },
    }
    if c.reject_stage or c.error_type:
        event["status_detail"] = c.reject_stage or c.error_type
    if c.trace_id and c.span_id:
        span: dict[str, Any] = {"uid": c.span_id, "operation": f"execute_tool {c.tool}",
                                "start_time": start, "end_time": end, "duration": end - start}
        if c.parent_span_id:
            span["parent_uid"] = c.parent_span_id
        event["trace"] = {"uid": c.trace_id, "span": span}
        profiles.append("trace")
    event["metadata"] = _metadata(ctx, c.call_id, "tool_calls", c.run_id, c.principal.tenant,
                                  profiles)
    return event


def approval_event(a: TrailApproval, ctx: EventContext) -> dict[str, Any]:
    """The User Access Management event of one approver's answer (not redacted yet)."""
    status_id = 1 if a.approved else 2
    verb = "approved" if a.approved else "refused"
    # The privilege goes to whom the call acted for; a call that named nobody acted for its run.
    user = _user(a.principal) or {"uid": a.run_id, "type_id": _OTHER, "type": "Agent run"}
    if a.principal.agent and "name" not in user:
        user["name"] = a.principal.agent
    approver = {"name": a.who, "type_id": 1, "type": "User"}
    resource: dict[str, Any] = {"name": a.tool, "type": "tool"}
    data: dict[str, Any] = {"args_sha256": a.args_sha256}
    if a.arguments is not None:
        data["arguments"] = a.arguments
    resource["data"] = data
    observables = [_observable("actor.user.name", _USER_NAME, a.who),
                   _observable("src_endpoint.hostname", _HOSTNAME, ctx.hostname)]
    if "name" in user:
        observables.append(_observable("user.name", _USER_NAME, user["name"]))
    event: dict[str, Any] = {
        **_classified(_USER_ACCESS, _IAM, _ASSIGN_PRIVILEGES, "Assign Privileges"),
        "severity_id": 1, "severity": _SEVERITY[1],
        "status_id": status_id, "status": _STATUS[status_id],
        "status_code": "approve" if a.approved else "deny",
        "status_detail": a.reason,
        "time": _ms(a.at_us),
        "message": f"{a.who} {verb} a call of {a.tool}",
        "actor": {"user": approver},
        "user": user,
        "privileges": [f"call:{a.tool}"],
        "resource": resource,
        "src_endpoint": {"hostname": ctx.hostname},
        **_control(1 if a.approved else 2, 8 if a.approved else 25, a.rule),
        "observables": observables,
        "unmapped": {"call_id": a.call_id or None,
                     "expires_at": None if a.expires_at_us is None else _ms(a.expires_at_us)},
        "metadata": _metadata(ctx, a.approval_id, "approvals", a.run_id, a.principal.tenant,
                              ["security_control"]),
    }
    return event
