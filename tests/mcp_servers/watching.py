"""An MCP server built with the official SDK's ``MCPServer``, run over stdio as a real upstream
that announces resource updates on ``subscriptions/listen`` streams (2026-07-28): ``touch(uri)``
says the resource ``uri`` was updated. Resources: ``note://a`` and ``note://b``.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("watching", instructions="Test server that announces resource updates.")


@server.resource("note://a")
def note_a() -> str:
    """Note a."""
    return "a"


@server.resource("note://b")
def note_b() -> str:
    """Note b."""
    return "b"


@server.tool()
async def touch(uri: str, ctx: Context) -> str:
    """Say that the resource ``uri`` was updated."""
    await ctx.notify_resource_updated(uri)
    return f"touched {uri}"


if __name__ == "__main__":
    server.run("stdio")
