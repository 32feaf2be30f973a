"""The policy rule that decides with Cedar: at most one cedarpy evaluation per call.

The policy set is parsed once per tool, with only the policies whose scope can name that tool's
action and resource (most policies name a few tools: the rest cost nothing; a tool no policy
can name skips Cedar altogether), and every policy as a ``permit``, so the answer names every
policy that matched, forbids included. A call's entities are parsed once per tool and
principal and kept. ``context.args`` is built (and redacted) only for a tool whose policies
read it, and the answer to a request already seen (same tool, principal and context) is
reused: Cedar's answer depends on nothing else.

A call with several resolved paths is one request per path, evaluated in one batch: a forbid
matches when it matches any of them (as a TOML rule's ``paths``), and with
``default = "deny"`` every one of them needs a permit. The first matching enforced forbid
denies; else, under ``default = "deny"``, a call no permit matches is denied by ``cedar``;
else the first ``@decision("ask")`` forbid asks; else the first observe-mode forbid is
recorded. A failure inside Cedar denies (rule ``cedar``): Cedar never fails open."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import orjson

from ...model import Principal, ToolDefinition
from .._rules import PolicyDecision, PolicyRequest, Verdict
from ._cedar import CedarPolicy, CedarSet
from ._cedarschema import ACTION, NAMESPACE, arg_types, context_args, entities_json, principal_uid
from ._rules import observed

__all__ = ["CEDAR_RULE", "CedarRule"]

#: The rule id of Cedar's own decisions: no permit matched (``default = "deny"``), or Cedar
#: could not evaluate the call.
CEDAR_RULE = "cedar"
_MAX_CACHED = 4096


class CedarRule:
    """Decide calls with a checked Cedar policy set (``default``: ``allow`` lets a call no
    forbid matches go on; ``deny`` also needs a matching permit)."""

    def __init__(self, cedar: CedarSet, default: str = "allow") -> None:
        import cedarpy

        #: The rule's name (``policy:cedar`` decides what no policy of the set does).
        self.name = CEDAR_RULE
        self.cedar = cedar
        self.default = default
        self._cedarpy = cedarpy
        self._est: dict[str, Any] = json.loads(cedar.evaluation_json)["staticPolicies"]
        self._sets: dict[str, tuple[Any, bool]] = {}
        self._answers: dict[tuple[Any, ...], tuple[ToolDefinition, list[str], bool]] = {}
        self._by_id: dict[str, CedarPolicy] = {p.id: p for p in cedar.policies}
        self._order = {p.id: i for i, p in enumerate(cedar.policies)}
        self._permits = frozenset(p.id for p in cedar.policies if p.effect == "permit")
        self._types: dict[int, tuple[ToolDefinition, dict[str, str]]] = {}
        self._entities: dict[tuple[int, Principal | None], tuple[ToolDefinition, Any]] = {}
        self._lock = threading.Lock()
        #: What ``context.args`` is redacted with: the registry's redactor once the policy
        #: file is applied to one (so Cedar sees what the audit trail keeps), else the
        #: default redactor.
        self.redactor: Any = None

    @property
    def rule_ids(self) -> tuple[str, ...]:
        """``cedar`` and every policy's id: rule ids this rule decides with."""
        return (CEDAR_RULE, *(p.id for p in self.cedar.policies))

    def applies_to(self, tool: ToolDefinition) -> bool:
        """Tools some policy's scope can name (any tool with ``default = "deny"``)."""
        return self.default == "deny" or self._set_for(tool.name)[0] is not None

    def names_tool(self, name: str) -> bool:
        """Whether some policy's scope names ``name`` itself (``resource == Tool::"name"``, or
        an ``action`` of that name)."""
        return any(_scope_is(p, name) for p in self._est.values())

    def _set_for(self, tool: str) -> tuple[Any, bool]:
        """The policies whose scope can name ``tool``, parsed (None: there are none), and
        whether any of them may read ``context.args``."""
        hit = self._sets.get(tool)
        if hit is not None:
            return hit
        kept = {pid: p for pid, p in self._est.items() if _scope_names(p, tool)}
        text = json.dumps({"staticPolicies": kept, "templates": {}, "templateLinks": []})
        hit = (self._cedarpy.PolicySet.from_json_str(text) if kept else None, '"args"' in text)
        with self._lock:
            if len(self._sets) >= _MAX_CACHED:
                self._sets.clear()
            self._sets[tool] = hit
        return hit

    def _arg_types(self, tool: ToolDefinition) -> dict[str, str]:
        hit = self._types.get(id(tool))
        if hit is None or hit[0] is not tool:
            hit = (tool, arg_types(tool))
            with self._lock:
                if len(self._types) >= _MAX_CACHED:
                    self._types.clear()
                self._types[id(tool)] = hit
        return hit[1]

    def _entities_for(self, tool: ToolDefinition, p: Principal | None) -> Any:
        key = (id(tool), p)
        hit = self._entities.get(key)
        if hit is None or hit[0] is not tool:
            hit = (tool, self._cedarpy.Entities.from_json_str(entities_json(tool, p)))
            with self._lock:
                if len(self._entities) >= _MAX_CACHED:
                    self._entities.clear()
                self._entities[key] = hit
        return hit[1]

    def _redact(self, args: dict[str, Any]) -> Any:
        redactor = self.redactor
        if redactor is None:
            from ...redaction import default_redactor

            redactor = default_redactor()
        return redactor.redact(args)[0]

    def requests(self, request: PolicyRequest) -> list[dict[str, Any]]:
        """The Cedar requests of one call (one per resolved path, at least one), each context
        as JSON text."""
        tool = request.tool
        types = self._arg_types(tool) if self._set_for(tool.name)[1] else {}
        args: Mapping[str, Any] = request.arguments
        picked = {k: args[k] for k in types if k in args}
        context: dict[str, Any] = {
            "mode": request.mode, "depth": request.depth,
            "args": context_args(types, self._redact(picked)) if picked else {},
        }
        if request.parent_tool is not None:
            context["parent_tool"] = request.parent_tool
        head = {"principal": principal_uid(request.principal),
                "action": {"type": f"{NAMESPACE}::Action", "id": tool.name},
                "resource": {"type": f"{NAMESPACE}::Tool", "id": tool.name}}
        paths = request.resolved_paths
        # As JSON text: cedarpy would encode a dict with the slower stdlib json.
        if not paths:
            return [{**head, "context": orjson.dumps(context).decode()}]
        return [{**head, "context": orjson.dumps({**context, "path": path,
                                                  "path_param": param}).decode()}
                for param, path in paths.items()]

    def matched(self, request: PolicyRequest) -> tuple[list[str], bool]:
        """The ids of the policies that match the call (in file order), and whether every
        request of it matched a permit."""
        tool = request.tool
        policies = self._set_for(tool.name)[0]
        if policies is None:
            return [], False
        requests = self.requests(request)
        key = (id(tool), request.principal, *(r["context"] for r in requests))
        seen = self._answers.get(key)
        if seen is not None and seen[0] is tool:
            return seen[1], seen[2]
        results = self._cedarpy.is_authorized_batch(
            requests, policies, self._entities_for(tool, request.principal))
        hits: set[str] = set()
        permitted = True
        for r in results:
            reasons = r.diagnostics.reasons
            hits.update(reasons)
            permitted = permitted and not self._permits.isdisjoint(reasons)
        ordered = sorted(hits, key=self._order.__getitem__)
        with self._lock:
            if len(self._answers) >= _MAX_CACHED:
                self._answers.clear()
            self._answers[key] = (tool, ordered, permitted)
        return ordered, permitted

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        try:
            hits, permitted = self.matched(request)
        except Exception as exc:  # a Cedar failure must not let the call through
            return PolicyDecision(Verdict.DENY, CEDAR_RULE,
                                  f"Cedar could not evaluate the call ({type(exc).__name__})")
        ask: CedarPolicy | None = None
        seen: CedarPolicy | None = None
        for pid in hits:
            p = self._by_id[pid]
            if p.effect != "forbid":
                continue
            if p.observe:
                seen = seen or p
            elif p.decision == "deny":
                return self._decide(p)
            else:
                ask = ask or p
        if self.default == "deny" and not permitted:
            return PolicyDecision(Verdict.DENY, CEDAR_RULE, "no Cedar permit policy matches")
        if ask is not None:
            return self._decide(ask)
        return None if seen is None else self._decide(seen)

    @staticmethod
    def _decide(p: CedarPolicy) -> PolicyDecision:
        verdict = observed(Verdict(p.decision), p.observe)
        return PolicyDecision(verdict, p.id, p.reason or f"matches Cedar policy {p.id}", p.ttl)


def _is(uid: Any, kind: str, ident: str) -> bool:
    return isinstance(uid, Mapping) and uid.get("type") == f"{NAMESPACE}::{kind}" \
        and uid.get("id") == ident


def _scope_is(policy: Mapping[str, Any], tool: str) -> bool:
    """Whether a policy's scope names ``tool`` itself (not only an open scope that may)."""
    action = policy.get("action") or {}
    resource = policy.get("resource") or {}
    uids = action.get("entities") or [action.get("entity")]
    return (resource.get("op") == "==" and _is(resource.get("entity"), "Tool", tool)) or (
        action.get("op") in ("==", "in") and any(_is(u, "Action", tool) for u in uids))


def _scope_names(policy: Mapping[str, Any], tool: str) -> bool:
    """Whether a policy's scope (in cedarpy's JSON form) can match a call of ``tool``: False
    only for an action or resource constraint that names other tools."""
    action = policy.get("action") or {}
    op = action.get("op")
    if op == "==" and not _is(action.get("entity"), "Action", tool):
        return False
    if op == "in":
        uids = action.get("entities") or [action.get("entity")]
        if not any(_is(u, "Action", tool) or _is(u, "Action", ACTION) for u in uids):
            return False
    resource = policy.get("resource") or {}
    return not (resource.get("op") == "==" and not _is(resource.get("entity"), "Tool", tool))
