"""The audit of server-to-client requests (sampling, elicitation, roots) the proxy forwards.

Each request an upstream sends its client through the proxy runs through the registry as a
call of a per-server tool, as ``resources/read`` and ``prompts/get`` do: ``mcp.<server>.sampling``,
``mcp.<server>.elicitation`` and ``mcp.<server>.roots`` (their own kind in the audit trail, never
listed as tools nor callable by a client). One asked while a ``tools/call``, a ``resources/read``
or a ``prompts/get`` of the same client runs is recorded as a child of that call; one asked on
its own is a call of its own. The row says who asked (the tool's server), the method, how it
ended and how long it took, and only sizes otherwise: the arguments hold the method, whether it
belonged to a call, the size of the request's parameters (and, for sampling, the model names the
server hinted at); the result holds the outcome, the size of the answer, the model that answered
(sampling) or the user's action (elicitation). Never the messages, the form or the answer.

How each ends (the trail's ``status`` / ``error_type``): answered: ``ok``; declined by the
proxy (no client to route it to, a client that did not declare the capability, a client with
no MCP session id): ``failed`` / ``declined``; refused by the policy: ``rejected``; the client
answered with an error: ``failed`` / ``client_error``; no answer within the server's
``timeout_s``: the registry's timeout.
"""

from __future__ import annotations

from typing import Any

from ..model import Capability, Effect, ToolDefinition

__all__ = ["SERVER_KINDS", "ClientAnswerError", "ClientDeclined", "describe_answer",
           "describe_request", "server_request_definitions", "server_request_name"]

#: The capability (and tool name suffix) of each server-to-client method.
CAPABILITIES = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation",
                "roots/list": "roots"}
#: What a server does besides its tools, each a call of ``mcp.<server>.<kind>``
#: (``server_request_name``): its resources read, its prompts got, its requests to the client.
SERVER_KINDS = ("read_resource", "get_prompt", *CAPABILITIES.values())


class ClientDeclined(Exception):
    """The proxy did not ask any client (none to route the request to, or it lacks the
    capability): the upstream gets an error it can handle as a refusal."""

    error_type = "declined"


class ClientAnswerError(Exception):
    """The client answered the request with a JSON-RPC error (its code is the message)."""

    error_type = "client_error"


def server_request_name(label: str, kind: str) -> str:
    """The registry name of server ``label``'s calls of ``kind`` (one of ``SERVER_KINDS``)."""
    return f"mcp.{label}.{kind}"


def server_request_definitions(label: str, timeout_s: float) -> list[ToolDefinition]:
    """The definitions of server ``label``'s three server-to-client request kinds."""
    params = {"type": "object", "properties": {
        "method": {"type": "string"}, "in_call": {"type": "boolean"},
        "request_bytes": {"type": "integer"},
        "model_hints": {"type": "array", "items": {"type": "string"}}}}
    return [ToolDefinition(
        name=server_request_name(label, cap), description=f"{method} from MCP server {label}",
        parameters=params, capability=Capability.READ, effect=Effect.NONE, cancellable=True,
        timeout_s=timeout_s, source=f"mcp:{label}", listed=False)
        for method, cap in CAPABILITIES.items()]


def _size(model: Any) -> int:
    if model is None:
        return 0
    try:
        return len(model.model_dump_json(by_alias=True, exclude_none=True))
    except Exception:  # not a pydantic model: its size is not worth failing the request for
        return 0


def describe_request(method: str, params: Any, in_call: bool) -> dict[str, Any]:
    """The arguments recorded for a request: no content, sizes and model hints only."""
    args: dict[str, Any] = {"method": method, "in_call": in_call,
                            "request_bytes": _size(params)}
    prefs = getattr(params, "model_preferences", None)
    hints = [str(h.name)[:100] for h in (getattr(prefs, "hints", None) or [])
             if getattr(h, "name", None)]
    if hints:
        args["model_hints"] = hints[:8]
    return args


def describe_answer(result: Any) -> dict[str, Any]:
    """The result recorded for an answered request: its size, and the model (sampling) or the
    user's action (elicitation); never the answer itself."""
    out: dict[str, Any] = {"outcome": "answered", "answer_bytes": _size(result)}
    model = getattr(result, "model", None)
    if isinstance(model, str):
        out["model"] = model[:100]
    action = getattr(result, "action", None)
    if isinstance(action, str):
        out["action"] = action
    roots = getattr(result, "roots", None)
    if isinstance(roots, list):
        out["roots"] = len(roots)
    return out
