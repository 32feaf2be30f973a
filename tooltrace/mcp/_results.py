"""MCP results and registry envelopes: an upstream tool's result in, a ``CallToolResult`` out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from ..envelope import Status, ToolResultEnvelope

if TYPE_CHECKING:
    import mcp.types as mt

__all__ = ["envelope_to_result"]

_MAX_ERROR_CHARS = 1000


def _error_text(res: mt.CallToolResult) -> str:
    parts = [getattr(b, "text", "") for b in res.content if getattr(b, "type", "") == "text"]
    text = "\n".join(p for p in parts if p) or "the upstream tool reported an error"
    return text[:_MAX_ERROR_CHARS]


def _result_value(res: mt.CallToolResult) -> Any:
    """What the registry redacts and measures: structured content, text, or content blocks."""
    if res.structured_content is not None:
        return res.structured_content
    if all(getattr(b, "type", "") == "text" for b in res.content):
        return "\n".join(getattr(b, "text", "") for b in res.content)
    return [b.model_dump(by_alias=True, exclude_none=True, mode="json") for b in res.content]


def envelope_to_result(env: ToolResultEnvelope) -> mt.CallToolResult:
    """An MCP ``CallToolResult`` for a registry envelope.

    Anything but ``ok`` becomes ``isError: true`` with the envelope's summary (already redacted
    and free of host paths). ``_meta`` carries the call id and status so a client can look the
    call up (``tooltrace autopsy <call id>``).
    """
    import mcp.types as mt

    meta: dict[str, Any] = {"tooltrace/call_id": env.call_id, "tooltrace/status": env.status.value}
    if env.status is not Status.OK:
        if env.reject_stage is not None:
            meta["tooltrace/reject_stage"] = env.reject_stage.value
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
    art = env.artifact
    if art is not None:
        meta["tooltrace/artifact"] = {"path": art.path, "chars": art.chars, "sha256": art.sha256}
        text += (f"\n\n[tooltrace: output truncated; the full result ({art.chars} chars) is in "
                 f"artifact {art.path} (sha256 {art.sha256[:16]}), call {env.call_id}]")
    if content is None:
        content = [mt.TextContent(type="text", text=text)]
    return mt.CallToolResult(content=content, structured_content=structured, is_error=False,
                             _meta=meta)
