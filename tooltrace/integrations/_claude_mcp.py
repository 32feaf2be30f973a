"""The in-process MCP server that serves registry tools to the Claude Code CLI.

The CLI lists the server's tools (registry names, descriptions, schemas) and sends each
``tools/call`` here; the adapter's ``run`` makes it a full registry call. The CLI names the
model's tool-use id in the request's ``_meta`` (``claudecode/toolUseId``), which ``run`` gets,
so an in-process call carries the same id a built-in's does.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from claude_agent_sdk import McpSdkServerConfig

from .. import ToolDefinition, ToolResultEnvelope

__all__ = ["RunCall", "sdk_server"]

#: ``run(tool name, arguments, the model's tool-use id or None)``: the call's envelope.
RunCall = Callable[[str, dict[str, Any], str | None], Awaitable[ToolResultEnvelope]]

# Where the CLI's ``tools/call`` request names the model's tool-use id.
_META_TOOL_USE_ID = "claudecode/toolUseId"
_TOOL_USE_ID = re.compile(r"\A[A-Za-z0-9_-]{1,128}\Z")


def sdk_server(name: str, tools: Sequence[ToolDefinition], run: RunCall) -> McpSdkServerConfig:
    """An SDK MCP server named ``name`` listing ``tools`` and answering each call with
    ``run``'s envelope (anything but ``ok`` is an ``is_error`` result carrying the summary)."""
    import mcp.types as mt
    from mcp.server.lowlevel import Server

    from ..mcp import envelope_to_result

    listed = [mt.Tool(name=d.name, description=d.description, input_schema=_wire(d))
              for d in tools]
    served = frozenset(d.name for d in tools)

    async def on_list_tools(ctx: Any, params: Any) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=listed)

    async def on_call_tool(ctx: Any, params: mt.CallToolRequestParams) -> mt.CallToolResult:
        if params.name not in served:
            return mt.CallToolResult(
                content=[mt.TextContent(type="text", text=f"unknown tool {params.name[:64]}")],
                is_error=True,
            )
        use = (params.meta or {}).get(_META_TOOL_USE_ID)
        use = use if isinstance(use, str) and _TOOL_USE_ID.match(use) else None
        return envelope_to_result(await run(params.name, params.arguments or {}, use))

    server = Server(name, on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    return McpSdkServerConfig(type="sdk", name=name, instance=server)


def _wire(d: ToolDefinition) -> dict[str, Any]:
    schema = dict(d.parameters)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema
