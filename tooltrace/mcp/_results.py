"""MCP results and registry envelopes: an upstream tool's result in, the client's result out.

The client gets the upstream's result as it arrived (every key, block and number as sent, and
no ``isError`` the upstream did not send) unless tooltrace changed it. An upstream's result is
*shaped* for the registry (``shape_result``): one text block becomes its text; anything else
becomes ``{"content": [...], "structuredContent": ..., "_meta": ...}`` in wire form, so the
registry redacts every block and the structured content in place, and what it audits or
offloads is the whole result. Binary payloads (an image's or audio's ``data``, a resource's
``blob``) are not text: the registry sees a placeholder naming their size and sha256, and the
proxy puts the bytes back into the answer (``proxied_result``).

A change is marked in the result's ``_meta`` only: ``tooltrace/changed`` lists what changed
(``redacted``, ``truncated``, ``withheld``) beside ``tooltrace/call_id`` and
``tooltrace/status``; a result nothing changed carries no ``tooltrace/...`` key (unless the
proxy names every call, ``call_ids``). An upstream's error result (``isError: true``) is handed
on the same way, every block of it. An offloaded result keeps its shape: the structured content
stays whole (redacted), every block stays where it was, and only long text is shortened to a
preview, with the artifact named in ``_meta`` and after the last text block. A call the proxy
refused, or that failed before the upstream answered, gets the proxy's own error result
(``envelope_to_result``).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from ..model import Status, ToolResultEnvelope
from ..redaction import preview
from ._schemasafe import redact_mirrors, retype_redacted, schema_errors

if TYPE_CHECKING:
    import mcp.types as mt

    from ..redaction import Redactor
    from ._errors import UpstreamRPCError

__all__ = ["CHANGES", "SERVER_INFO_META", "HeldResult", "envelope_to_result", "from_upstream",
           "marked", "proxied_result", "shape_result", "upstream_error"]

_MAX_ERROR_CHARS = 1000

#: What ``tooltrace/changed`` in a result's ``_meta`` may name: the result's text or structured
#: content was redacted, long text was cut to a preview (the whole result is in an artifact),
#: or the result was withheld (a redacted value its output schema has no room for).
CHANGES = ("redacted", "truncated", "withheld")

#: The ``_meta`` key a 2026-07-28 server stamps its identity on every result with: it names
#: the server the client is talking to, which for the proxy's client is the proxy.
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"


@dataclass(slots=True)
class HeldResult:
    """What the proxy keeps of one upstream result while the registry finishes the call: the
    result as it arrived (``wire``), the shaped value the registry redacts (unredacted here),
    the binary payloads held back from the registry, by block index, and the tool's output
    schema."""

    wire: dict[str, Any]
    shaped: Any
    binaries: dict[int, tuple[str, str]] = field(default_factory=dict)
    output_schema: Mapping[str, Any] | None = None


def _error_text(res: mt.CallToolResult) -> str:
    parts = [getattr(b, "text", "") for b in res.content if getattr(b, "type", "") == "text"]
    text = "\n".join(p for p in parts if p) or "the upstream tool reported an error"
    return text[:_MAX_ERROR_CHARS]


def _placeholder(payload: str) -> str:
    digest = hashlib.sha256(payload.encode()).hexdigest()
    return f"[binary: {len(payload)} base64 chars, sha256 {digest}]"


def shape_result(res: mt.CallToolResult, output_schema: Any = None,
                 redactor: Redactor | None = None) -> HeldResult:
    """An upstream result as the value the registry redacts, measures and audits
    (``output_schema``: the tool's, which its redacted structured content must still meet;
    ``redactor``: the registry's, for the JSON text of structured content, see _schemasafe)."""
    wire = from_upstream(res)
    blocks = res.content
    if (res.structured_content is None and not wire.get("_meta") and len(blocks) == 1
            and blocks[0].type == "text" and blocks[0].annotations is None
            and blocks[0].meta is None):
        return HeldResult(wire, blocks[0].text)
    content: list[Any] = copy.deepcopy(wire.get("content", []))
    schema = output_schema if isinstance(output_schema, Mapping) else None
    held = HeldResult(wire, {"content": content}, output_schema=schema)
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        holder, key = block, "data"
        if block.get("type") == "resource" and isinstance(block.get("resource"), dict):
            holder, key = block["resource"], "blob"
        payload = holder.get(key)
        if block.get("type") in ("image", "audio", "resource") and isinstance(payload, str):
            mark = _placeholder(payload)
            held.binaries[i] = (mark, payload)
            holder[key] = mark
    if "structuredContent" in wire and wire["structuredContent"] is not None:
        structured = copy.deepcopy(wire["structuredContent"])
        held.shaped["structuredContent"] = structured
        if redactor is not None:
            redact_mirrors(content, structured, redactor)
    if wire.get("_meta"):
        held.shaped["_meta"] = copy.deepcopy(wire["_meta"])
    return held


def from_upstream(result: Any) -> dict[str, Any]:
    """An upstream's result (a model of the SDK's client) in wire form: the fields the upstream
    sent and only those (the SDK's defaults, such as ``isError``, stay out), without the
    upstream's own identity stamp (``SERVER_INFO_META``: the proxy's client is served by the
    proxy, whose front stamps its own where the client's revision has one)."""
    wire: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_unset=True)
    meta = wire.get("_meta")
    if isinstance(meta, dict) and SERVER_INFO_META in meta:
        rest = {k: v for k, v in meta.items() if k != SERVER_INFO_META}
        if rest:
            wire["_meta"] = rest
        else:
            del wire["_meta"]
    return wire


def _restore(content: list[Any], held: HeldResult) -> None:
    for i, (mark, payload) in held.binaries.items():
        if i >= len(content) or not isinstance(content[i], dict):
            continue
        block = content[i]
        holder, key = (block.get("resource"), "blob") if block.get("type") == "resource" else (
            block, "data")
        if isinstance(holder, dict) and holder.get(key) == mark:
            holder[key] = payload


def _shorten(content: list[Any], limit: int, note: str) -> None:
    """Cut long text (text blocks, text resources) to previews; the note follows the last text
    block. Other blocks and their order stay as they were."""
    last = None
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            block["text"] = preview(block["text"], limit)
            last = i
        res = block.get("resource")
        if block.get("type") == "resource" and isinstance(res, dict) and isinstance(
                res.get("text"), str):
            res["text"] = preview(res["text"], limit)
    if last is not None:
        content[last]["text"] += note


def proxied_result(env: ToolResultEnvelope, held: HeldResult | None, *, redactor: Redactor,
                   preview_chars: int, call_ids: bool = False) -> dict[str, Any]:
    """The result a proxied call answers with, in wire form: the upstream's result as it
    arrived, or with what tooltrace changed in it (marked in ``_meta``).

    ``held`` is what ``shape_result`` made of the upstream's answer (``None`` when the call
    never got one). An upstream error result (``isError: true``) is handed on like any other;
    a call that ended otherwise gets the proxy's own result (``envelope_to_result``).
    ``call_ids``: name the call in ``_meta`` even when nothing changed.
    """
    tool_error = held is not None and held.wire.get("isError") is True
    if held is None or not (env.status is Status.OK or (
            env.status is Status.FAILED and tool_error)):
        return _own(envelope_to_result(env))
    if env.status is Status.FAILED:
        # The registry keeps an error result out of the envelope (the trail has its text):
        # it is redacted here, as an ok result is there.
        data, _ = redactor.redact(held.shaped)
    else:
        data = env.data
    art = env.artifact
    if art is None and data == held.shaped:  # nothing changed
        if not call_ids:
            return held.wire
        return {**held.wire, "_meta": {**(held.wire.get("_meta") or {}), **_meta(env)}}
    changed: list[str] = []
    note = "" if art is None else _artifact_note(env)
    if art is not None:
        changed.append("truncated")
    if isinstance(held.shaped, str):
        if art is None or redactor.redact(held.shaped)[0] != held.shaped:
            changed.insert(0, "redacted")
        text = data if isinstance(data, str) else str(data)
        out = copy.deepcopy(held.wire)
        out["content"][0]["text"] = text + note
        return marked(out, env, changed)
    if art is None and isinstance(data, dict) and "content" in data:
        shaped = copy.deepcopy(data)  # a private copy to restore into
        changed.insert(0, "redacted")
    else:
        # Offloaded (the envelope holds a preview of the JSON): redact the shape again.
        shaped, count = redactor.redact(held.shaped)
        shaped = copy.deepcopy(shaped)
        if count:
            changed.insert(0, "redacted")
        _shorten(shaped["content"], preview_chars, note)
    _restore(shaped["content"], held)
    if not _typed_structure(shaped, held, redactor):
        return _withheld(env)
    out = dict(held.wire)
    for key in ("content", "structuredContent", "_meta"):
        if key in shaped:
            out[key] = shaped[key]
    return marked(out, env, changed)


def marked(out: dict[str, Any], env: ToolResultEnvelope, changed: list[str]
           ) -> dict[str, Any]:
    """``out`` (a result in wire form) with the call, its status and what changed
    (``CHANGES``) in its ``_meta``, beside the upstream's own keys."""
    upstream = out.get("_meta")
    out["_meta"] = {**(upstream if isinstance(upstream, dict) else {}), **_meta(env),
                    "tooltrace/changed": changed}
    return out


def _own(result: mt.CallToolResult) -> dict[str, Any]:
    """The proxy's own result, in wire form."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _typed_structure(shaped: dict[str, Any], held: HeldResult, redactor: Redactor) -> bool:
    """Redacted structured content with the types of the original (``_schemasafe``); False
    when it still breaks the tool's output schema."""
    got = shaped.get("structuredContent")
    original = held.shaped.get("structuredContent")
    if got is None or got == original:  # nothing was redacted in it
        return True
    shaped["structuredContent"], _ = retype_redacted(got, original, redactor)
    schema = held.output_schema
    return schema is None or schema_errors(shaped["structuredContent"], schema) == 0


def _withheld(env: ToolResultEnvelope) -> dict[str, Any]:
    import mcp.types as mt

    text = (f"tooltrace: the result of {env.tool} was withheld: it held a secret where the "
            "tool's output schema has no room for a redaction marker (the audit trail has the "
            f"redacted result, call {env.call_id})")
    return _own(mt.CallToolResult(
        content=[mt.TextContent(type="text", text=text)], is_error=True,
        _meta={**_meta(env), "tooltrace/error_type": "redacted_invalid",
               "tooltrace/changed": ["withheld"]}))


def _meta(env: ToolResultEnvelope) -> dict[str, Any]:
    meta: dict[str, Any] = {"tooltrace/call_id": env.call_id,
                            "tooltrace/status": env.status.value}
    if env.reject_stage is not None:
        meta["tooltrace/reject_stage"] = env.reject_stage.value
    if env.status is not Status.OK:
        # error.type of the outcome (low cardinality): the reject stage, or how it failed.
        meta["tooltrace/error_type"] = (
            env.reject_stage.value if env.reject_stage is not None
            else env.record.error_type or env.status.value)
    art = env.artifact
    if art is not None:
        meta["tooltrace/artifact"] = {"path": art.path, "chars": art.chars, "sha256": art.sha256}
    return meta


def _artifact_note(env: ToolResultEnvelope) -> str:
    art = env.artifact
    assert art is not None
    return (f"\n\n[tooltrace: output truncated; the full result ({art.chars} chars) is in "
            f"artifact {art.path} (sha256 {art.sha256[:16]}), call {env.call_id}]")


def envelope_to_result(env: ToolResultEnvelope) -> mt.CallToolResult:
    """An MCP ``CallToolResult`` for a registry envelope.

    Anything but ``ok`` becomes ``isError: true`` with the envelope's summary (already redacted
    and free of host paths). ``_meta`` carries the call id and status so a client can look the
    call up (``tooltrace autopsy <call id>``). A mapping result is also given as structured
    content when it was not offloaded.
    """
    import mcp.types as mt

    meta = _meta(env)
    if env.status is not Status.OK:
        return mt.CallToolResult(content=[mt.TextContent(type="text", text=env.summary)],
                                 is_error=True, _meta=meta)
    data = env.data
    structured: Any = None
    content: list[Any] | None = None
    if isinstance(data, str):
        text = data
    elif isinstance(data, dict) and env.artifact is None:
        text = orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
        structured = data
    elif isinstance(data, list) and env.artifact is None:
        text = ""
        try:
            from pydantic import TypeAdapter

            content = TypeAdapter(list[mt.ContentBlock]).validate_python(data)
        except Exception:
            content = None
            text = orjson.dumps(data, default=str).decode()
    else:
        text = orjson.dumps(data, default=str).decode()
    if env.artifact is not None:
        text += _artifact_note(env)
    if content is None:
        content = [mt.TextContent(type="text", text=text)]
    return mt.CallToolResult(content=content, structured_content=structured, is_error=False,
                             _meta=meta)


def upstream_error(exc: UpstreamRPCError, redactor: Redactor) -> Exception:
    """The JSON-RPC error an upstream answered a request with, as the ``MCPError`` the client
    gets: its code, message and ``data`` as sent (a secret in them redacted; an error has no
    ``_meta`` to mark that in)."""
    from mcp.shared.exceptions import MCPError
    from mcp.types import ErrorData

    sent, _ = redactor.redact(exc.error)
    code, message = sent.get("code"), sent.get("message")
    if not isinstance(code, int) or isinstance(code, bool):
        code = exc.code
    if not isinstance(message, str):
        message = str(exc)
    err = MCPError(code, message)
    if "data" in sent:  # as sent, an explicit null included
        err.error = ErrorData(code=code, message=message, data=sent["data"])
    return err
