"""A hand-written agent loop on the OpenAI, Anthropic or Gemini APIs (or an MCP client).

No provider SDK is needed: everything here reads and writes the providers' JSON shapes (an
SDK's pydantic objects are read through their ``model_dump()``)::

    from tooltrace.integrations import providers

    tools = providers.tool_specs(registry, "default", format="openai")
    reply = client.chat.completions.create(model=..., messages=messages, tools=tools)
    msg = reply.choices[0].message
    messages.append(msg)
    for tc in msg.tool_calls or ():
        env = providers.call_from(registry, tc)  # or: await providers.acall_from(registry, tc)
        messages.append(providers.result_message(env, "openai"))

Formats: ``openai`` (Chat Completions), ``openai-responses`` (the Responses API),
``anthropic`` (Messages), ``gemini`` (``generateContent``; ``parametersJsonSchema``, so the
registry's JSON Schema is sent as is) and ``mcp`` (``tools/list`` entries and
``CallToolResult``). The provider's own call id is kept on the call as the
``provider.tool_call_id`` attribute (audit row and span); tooltrace's call id is a fresh UUIDv7.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args, runtime_checkable

import orjson

from ..exceptions import MalformedCallError, RegistrationError
from ..model import Principal, Status, ToolCall, ToolResultEnvelope, parse_tool_call
from . import adapter as _common
from .adapter import INTEGRATION, PROVIDER_ID, PROVIDER_NAME, model_text, plain

if TYPE_CHECKING:
    from ..model import ToolDefinition
    from ..registry import ToolRegistry

__all__ = [
    "CHARS_PER_TOKEN",
    "Format",
    "ProviderCall",
    "ProviderCallError",
    "SchemaSize",
    "acall_from",
    "call_from",
    "read_call",
    "result_message",
    "result_turn",
    "schema_size",
    "schema_sizes",
    "tool_specs",
]

Format = Literal["openai", "openai-responses", "anthropic", "gemini", "mcp"]
_FORMATS: tuple[str, ...] = get_args(Format)

# What each API accepts as a function name (tooltrace allows dots and up to 128 characters).
_NAME_RULES: dict[str, re.Pattern[str]] = {
    "openai": re.compile(r"^[A-Za-z0-9_-]{1,64}$"),
    "openai-responses": re.compile(r"^[A-Za-z0-9_-]{1,64}$"),
    "anthropic": re.compile(r"^[A-Za-z0-9_-]{1,64}$"),
    "gemini": re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$"),
}
_UNREGISTERED = "_unregistered"


class ProviderCallError(MalformedCallError):
    """The object is not a tool call of any supported provider (fix the caller).

    ``reason`` is ``shape`` (no known shape), ``name`` (no usable tool name) or ``json`` (JSON
    text that does not parse). A tool call whose *arguments* are bad is not an error: it runs
    through the registry and comes back ``rejected``, so the model is told.
    """


@dataclass(frozen=True, slots=True)
class ProviderCall:
    """A provider's tool call, read: its format, its id, the tool's name and the arguments.

    ``arguments`` is a mapping when they parsed, else what the provider sent;
    ``arguments_error`` is then the parser's reason code (``json``, ``too_large``, ...).
    """

    format: Format
    id: str | None
    name: str
    arguments: Any
    arguments_error: str | None = None


@runtime_checkable
class _Dumpable(Protocol):
    """A pydantic model, as the provider SDKs return them."""

    def model_dump(self, *, mode: str = ..., exclude_none: bool = ...) -> dict[str, Any]: ...


# -- tools for the model ---------------------------------------------------------------------


def tool_specs(
    registry: ToolRegistry,
    mode: str = "default",
    format: Format = "openai",
    *,
    collapse: bool = False,
    expand: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The tools ``mode`` exposes, in the provider's format: same set and order as
    ``registry.visible_tools(mode)``, plain dicts whose JSON is byte-for-byte stable.

    With ``collapse``, the tools of ``registry.tool_listing(mode, expand)`` instead: each
    group not in ``expand`` is left out, and ``load_tools`` lists the collapsed groups (one
    line each) in its description. Raises ``RegistrationError`` naming the tools whose names
    the provider would refuse.
    """
    _check_format(format)
    visible = (
        registry.tool_listing(mode, expand).tools
        if collapse
        else registry.visible_tools(mode).visible
    )
    rule = _NAME_RULES.get(format)
    if rule is not None:
        bad = [d.name for d in visible if not rule.match(d.name)]
        if bad:
            raise RegistrationError(
                f"{format} refuses these tool names (they must match {rule.pattern}): "
                f"{', '.join(bad[:10])}"
            )
    return [_spec(d, format) for d in visible]


def _spec(d: ToolDefinition, format: str) -> dict[str, Any]:
    schema = plain(d.parameters)
    if format == "openai":
        return {
            "type": "function",
            "function": {"name": d.name, "description": d.description, "parameters": schema},
        }
    if format == "openai-responses":
        return {"type": "function", "name": d.name, "description": d.description,
                "parameters": schema}
    if format == "anthropic":
        return {"name": d.name, "description": d.description, "input_schema": schema}
    if format == "gemini":
        return {"name": d.name, "description": d.description, "parametersJsonSchema": schema}
    return {"name": d.name, "description": d.description, "inputSchema": schema}


#: Characters per token that ``SchemaSize.tokens`` assumes: a rule of thumb for English and
#: JSON text with the byte-pair tokenizers of OpenAI and Anthropic models, not a count.
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class SchemaSize:
    """What a tool list costs the model: its compact JSON's length, and a token estimate."""

    chars: int
    """Characters of the specs' compact JSON (as a provider request would carry them)."""
    tokens: int
    """Estimated tokens: ``chars / CHARS_PER_TOKEN`` rounded up (an estimate, not a count)."""


def schema_size(specs: list[dict[str, Any]]) -> SchemaSize:
    """The size of a list of tool specs (``tool_specs``' output)."""
    chars = len(orjson.dumps(specs).decode())
    return SchemaSize(chars, -(-chars // CHARS_PER_TOKEN))


def schema_sizes(
    registry: ToolRegistry, mode: str = "default", format: Format = "openai"
) -> dict[str, SchemaSize | None]:
    """What ``mode``'s tool list costs: ``"full"`` (every tool in full), ``"collapsed"`` (groups
    as one line each; None when the mode cannot collapse them) and ``"group:<name>"`` for each
    group the mode shows (its tools' schemas: what ``load_tools`` adds)."""
    out: dict[str, SchemaSize | None] = {
        "full": schema_size(tool_specs(registry, mode, format))}
    try:
        listing = registry.tool_listing(mode)
    except RegistrationError:
        out["collapsed"] = None
        return out
    out["collapsed"] = schema_size(tool_specs(registry, mode, format, collapse=True))
    visible = registry.visible_tools(mode).visible
    for g in listing.groups:
        out[f"group:{g.name}"] = schema_size(
            [_spec(d, format) for d in visible if d.group_name == g.name])
    return out


# -- the model's tool calls ------------------------------------------------------------------


def read_call(raw: object) -> ProviderCall:
    """Read a provider's tool call as it comes: a dict, an SDK object or JSON text.

    Recognised: an OpenAI Chat Completions ``tool_call`` (``{"id", "type": "function",
    "function": {"name", "arguments": "<json>"}}``), a Responses ``function_call`` item, an
    Anthropic ``tool_use`` block, a Gemini part with ``functionCall`` (or the ``FunctionCall``
    itself), an MCP ``tools/call`` request or its ``{"name", "arguments"}`` params. Raises
    ``ProviderCallError`` for anything else.
    """
    d = _as_mapping(raw)
    kind = d.get("type")
    fn = d.get("function")
    if isinstance(fn, Mapping) and kind in (None, "function"):
        return _read("openai", d.get("id"), fn.get("name"), fn.get("arguments"))
    if kind == "function_call":
        return _read("openai-responses", d.get("call_id", d.get("id")), d.get("name"),
                     d.get("arguments"))
    if kind == "tool_use":
        return _read("anthropic", d.get("id"), d.get("name"), d.get("input"))
    inner = d.get("functionCall", d.get("function_call"))
    if isinstance(inner, Mapping):
        return _read("gemini", inner.get("id"), inner.get("name"), inner.get("args"))
    if d.get("method") == "tools/call":
        params = d.get("params")
        if not isinstance(params, Mapping):
            raise ProviderCallError("shape", "MCP tools/call request without params")
        return _read("mcp", d.get("id"), params.get("name"), params.get("arguments"))
    if kind is None and "name" in d and "args" in d and "arguments" not in d:
        return _read("gemini", d.get("id"), d.get("name"), d.get("args"))
    if kind is None and "name" in d and "arguments" in d:
        return _read("mcp", None, d.get("name"), d.get("arguments"))
    keys = sorted(str(k)[:40] for k in d)[:8]
    raise ProviderCallError(
        "shape",
        f"not a tool call of a supported provider (keys {keys}; type {str(kind)[:40]!r}); "
        f"expected an OpenAI tool_call/function_call, an Anthropic tool_use block, a Gemini "
        f"functionCall or an MCP tools/call",
    )


def _as_mapping(raw: object) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        return raw
    if isinstance(raw, str | bytes | bytearray):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ProviderCallError("json", "tool call text is not valid JSON") from None
    elif isinstance(raw, _Dumpable):
        raw = raw.model_dump(mode="json", exclude_none=True)
    if not isinstance(raw, Mapping):
        raise ProviderCallError(
            "shape", f"a tool call must be a mapping, an SDK object or JSON, not "
            f"{type(raw).__name__}"
        )
    return raw


def _read(format: Format, call_id: Any, name: Any, arguments: Any) -> ProviderCall:
    if not isinstance(name, str) or not name:
        raise ProviderCallError("name", f"{format} tool call without a tool name")
    if call_id is not None and (isinstance(call_id, bool) or not isinstance(call_id, str | int)):
        raise ProviderCallError("shape", f"{format} tool call id must be a string")
    pid = None if call_id is None else str(call_id)
    try:
        # The registry's own parser: the same size, depth and JSON rules as any raw call.
        args = parse_tool_call({"name": name, "arguments": arguments})["arguments"]
    except MalformedCallError as exc:
        # Passed on as sent: the registry rejects it (stage params) and the model is told.
        return ProviderCall(format, pid, name, arguments, exc.reason)
    return ProviderCall(format, pid, name, args)


def _tool_call(
    registry: ToolRegistry, raw: object, mode: str, run_id: str | None,
    timeout_s: float | None, principal: Principal | None,
) -> ToolCall:
    pc = raw if isinstance(raw, ProviderCall) else read_call(raw)
    return _common.make_call(
        registry, pc.name, pc.arguments, integration=pc.format, provider_id=pc.id, mode=mode,
        run_id=run_id, timeout_s=timeout_s, arguments_error=pc.arguments_error,
        requested_name=True, principal=principal,
    )


def call_from(
    registry: ToolRegistry,
    raw: object,
    *,
    mode: str = "default",
    run_id: str | None = None,
    timeout_s: float | None = None,
    principal: Principal | None = None,
) -> ToolResultEnvelope:
    """Run a provider's tool call (see ``read_call``) through ``registry.call``.

    Unparseable arguments give a ``rejected`` envelope (stage ``params``); an object that is
    no tool call at all raises ``ProviderCallError``. ``principal``: whom the call acts for
    (default: its run's principal, if any).
    """
    return registry.call(_tool_call(registry, raw, mode, run_id, timeout_s, principal))


async def acall_from(
    registry: ToolRegistry,
    raw: object,
    *,
    mode: str = "default",
    run_id: str | None = None,
    timeout_s: float | None = None,
    principal: Principal | None = None,
) -> ToolResultEnvelope:
    """``call_from`` on the running event loop; cancelling the awaiting task cancels the call
    (``registry.cancel_call``), which is recorded before the ``CancelledError`` goes on."""
    call = _tool_call(registry, raw, mode, run_id, timeout_s, principal)
    return await _common.acall(registry, call)


# -- results for the model -------------------------------------------------------------------


def result_message(
    envelope: ToolResultEnvelope,
    format: Format | None = None,
    *,
    tool_call_id: str | None = None,
) -> dict[str, Any]:
    """The provider's tool-result item for one call.

    ``openai``: a ``{"role": "tool"}`` message; ``openai-responses``: a
    ``function_call_output`` item; ``anthropic``: a ``tool_result`` block (``is_error`` set
    for every status but ``ok``; put the blocks of one turn in one user message, see
    ``result_turn``); ``gemini``: a ``functionResponse`` part (``response.error`` for every
    status but ``ok``); ``mcp``: a ``CallToolResult`` (``isError``). OpenAI has no error flag:
    the text starts with ``Error:``. ``format`` defaults to the one the call was read from, the
    id to the provider's id recorded on the call.
    """
    attrs = envelope.record.attributes
    fmt = str(format if format is not None else attrs.get(INTEGRATION))
    _check_format(fmt)
    pid = tool_call_id if tool_call_id is not None else attrs.get(PROVIDER_ID)
    failed = envelope.status is not Status.OK
    text = model_text(envelope)
    if fmt == "gemini":
        name = envelope.tool if envelope.tool != _UNREGISTERED else attrs.get(PROVIDER_NAME)
        body: dict[str, Any] = {"name": str(name or envelope.tool)}
        if pid is not None:
            body["id"] = str(pid)
        body["response"] = {"error": text} if failed else {"output": _structured(envelope, text)}
        return {"functionResponse": body}
    if fmt == "mcp":
        out: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": failed}
        data = envelope.data
        if not failed and envelope.artifact is None and isinstance(data, Mapping):
            out["structuredContent"] = plain(data)
        out["_meta"] = {"tooltrace/call_id": envelope.call_id,
                        "tooltrace/status": envelope.status.value}
        return out
    if pid is None:
        raise ValueError(f"{fmt} needs the tool call's id: the call carries none, pass "
                         f"tool_call_id=")
    if fmt == "openai":
        return {"role": "tool", "tool_call_id": str(pid), "content": text}
    if fmt == "openai-responses":
        return {"type": "function_call_output", "call_id": str(pid), "output": text}
    return {"type": "tool_result", "tool_use_id": str(pid), "content": text, "is_error": failed}


def _structured(env: ToolResultEnvelope, text: str) -> Any:
    data = env.data
    if env.artifact is None and isinstance(data, Mapping | list):
        return plain(data)
    return text


def result_turn(
    envelopes: Iterable[ToolResultEnvelope], format: Format | None = None
) -> list[dict[str, Any]]:
    """Everything to append to the conversation after one model turn's tool calls.

    OpenAI (both APIs) and MCP: one item per call. Anthropic: one user message holding every
    ``tool_result`` block. Gemini: one user content holding every ``functionResponse`` part.
    """
    envs = list(envelopes)
    items = [result_message(e, format) for e in envs]
    fmt = format or (str(envs[0].record.attributes.get(INTEGRATION)) if envs else None)
    if fmt == "anthropic":
        return [{"role": "user", "content": items}] if items else []
    if fmt == "gemini":
        return [{"role": "user", "parts": items}] if items else []
    return items


def _check_format(format: str) -> None:
    if format not in _FORMATS:
        raise ValueError(f"format must be one of {_FORMATS}, got {format!r}")
