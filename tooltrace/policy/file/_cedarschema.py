"""The Cedar entity model of a tool call, and the Cedar schema generated from the tools.

Every call is one Cedar request (one per resolved path when it has several):

- **principal**: ``Tooltrace::User::"<user>"`` when the call names a user, else
  ``Tooltrace::Agent::"<agent>"``, else ``Tooltrace::Anonymous::"anonymous"``; its parents are
  its roles (``Tooltrace::Role::"<role>"``) and its tenant (``Tooltrace::Tenant::"<tenant>"``),
  its attributes ``agent`` (a user's) and ``tenant``, each present only when set.
- **action**: one per tool, ``Tooltrace::Action::"<tool>"``, each a member of the group
  ``Tooltrace::Action::"call"`` (``action in Tooltrace::Action::"call"`` is any tool call).
- **resource**: the tool, ``Tooltrace::Tool::"<tool>"``, with ``name``, ``capability``,
  ``effect``, ``source``, ``tool_type`` and, when it has one, ``group``.
- **context**: ``mode``, ``depth`` (0 outside any tool), ``parent_tool`` (nested calls), ``path``
  and ``path_param`` (one resolved, workspace-relative path and the argument it came from), and
  ``args``: the arguments of a scalar type in the tool's JSON Schema (string, integer, boolean,
  list of strings), after the default redactor; the schema types ``args`` per tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ...model import Principal, ToolDefinition

__all__ = [
    "ACTION",
    "NAMESPACE",
    "arg_types",
    "context_args",
    "entities_json",
    "principal_uid",
    "schema_text",
]

#: The namespace of every tooltrace entity type.
NAMESPACE = "Tooltrace"
#: The action group every tool's action belongs to.
ACTION = "call"
_CEDAR_TYPES = {"string": "String", "integer": "Long", "boolean": "Bool"}
_LONG = (-(2**63), 2**63 - 1)


def _scalar(spec: Any) -> str | None:
    if not isinstance(spec, Mapping):
        return None
    enum = spec.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return "String"
    t = spec.get("type")
    if isinstance(t, str) and t in _CEDAR_TYPES:
        return _CEDAR_TYPES[t]
    if t == "array" and _scalar(spec.get("items")) == "String":
        return "Set<String>"
    return None


def arg_types(tool: ToolDefinition) -> dict[str, str]:
    """The tool's arguments Cedar sees in ``context.args``, with their Cedar types."""
    props = tool.parameters.get("properties")
    if not isinstance(props, Mapping):
        return {}
    out = {}
    for name, spec in props.items():
        t = _scalar(spec)
        if t is not None and isinstance(name, str):
            out[name] = t
    return out


def _fits(value: Any, cedar_type: str) -> bool:
    if cedar_type == "String":
        return isinstance(value, str)
    if cedar_type == "Long":
        return type(value) is int and _LONG[0] <= value <= _LONG[1]
    if cedar_type == "Bool":
        return isinstance(value, bool)
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


def context_args(types: Mapping[str, str], redacted: Mapping[str, Any]) -> dict[str, Any]:
    """``context.args``: the (redacted) arguments whose values have their schema type."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in redacted.items()
            if k in types and _fits(v, types[k])}


def _uid(kind: str, ident: str) -> dict[str, str]:
    return {"type": f"{NAMESPACE}::{kind}", "id": ident}


def principal_uid(p: Principal | None) -> dict[str, str]:
    """The request's principal: the user, else the agent, else ``Anonymous``."""
    if p is not None and p.user is not None:
        return _uid("User", p.user)
    if p is not None and p.agent is not None:
        return _uid("Agent", p.agent)
    return _uid("Anonymous", "anonymous")


def entities_json(tool: ToolDefinition, p: Principal | None) -> str:
    """The entities of one call: principal, its roles and tenant, the tool and its action."""
    attrs: dict[str, Any] = {"name": tool.name, "capability": str(tool.capability),
                             "effect": str(tool.effect), "source": tool.source,
                             "tool_type": tool.tool_type}
    if tool.group is not None:
        attrs["group"] = tool.group
    out: list[dict[str, Any]] = [
        {"uid": _uid("Tool", tool.name), "attrs": attrs, "parents": []},
        {"uid": _uid("Action", tool.name), "attrs": {}, "parents": [_uid("Action", ACTION)]},
        {"uid": _uid("Action", ACTION), "attrs": {}, "parents": []},
    ]
    who = principal_uid(p)
    parents = []
    pattrs: dict[str, Any] = {}
    if p is not None:
        for role in p.roles:
            parents.append(_uid("Role", role))
            out.append({"uid": _uid("Role", role), "attrs": {}, "parents": []})
        if p.tenant is not None:
            parents.append(_uid("Tenant", p.tenant))
            out.append({"uid": _uid("Tenant", p.tenant), "attrs": {}, "parents": []})
            pattrs["tenant"] = p.tenant
        if p.user is not None and p.agent is not None:
            pattrs["agent"] = p.agent
    out.append({"uid": who, "attrs": pattrs, "parents": parents})
    return json.dumps(out)


def _q(name: str) -> str:
    return json.dumps(name)


def schema_text(tools: Iterable[ToolDefinition]) -> str:
    """A Cedar schema (human-readable syntax) for calls of ``tools``: the entity types, and one
    action per tool whose ``context.args`` is typed from the tool's parameters."""
    lines = [
        f"namespace {NAMESPACE} {{",
        "  entity Role, Tenant;",
        "  entity User in [Role, Tenant] { agent?: String, tenant?: String };",
        "  entity Agent in [Role, Tenant] { tenant?: String };",
        "  entity Anonymous;",
        "  entity Tool { name: String, capability: String, effect: String, source: String,"
        " tool_type: String, group?: String };",
        f"  action {_q(ACTION)};",
    ]
    for tool in sorted(tools, key=lambda t: t.name):
        args = ", ".join(f"{_q(k)}?: {v}" for k, v in sorted(arg_types(tool).items()))
        lines += [
            f"  // {tool.name}: capability {tool.capability}, effect {tool.effect}",
            f"  action {_q(tool.name)} in [{_q(ACTION)}] appliesTo {{",
            "    principal: [User, Agent, Anonymous],",
            "    resource: [Tool],",
            "    context: { mode: String, depth: Long, parent_tool?: String, path?: String,"
            " path_param?: String,",
            f"               args: {{ {args} }} }}",
            "  };",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"
