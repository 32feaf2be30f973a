"""An MCP server built with the official SDK's ``MCPServer`` (FastMCP), run over stdio as a real
upstream whose tools ask their client: sampling, elicitation and roots, each returning what the
client answered as text (a refusal fails the tool). ``probe`` asks one of them and returns the
JSON-RPC error the request got, if any (code and message), instead of failing; ``pid`` names the
process serving the call (which upstream connection a client's calls reach).
"""

from __future__ import annotations

import json
import os
import warnings

import mcp_types as mt
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from pydantic import BaseModel

# Sampling and roots are deprecated by the newest protocol, and still in use.
warnings.simplefilter("ignore", MCPDeprecationWarning)
server = MCPServer("asking", instructions="Test server whose tools ask the client.")


class Answer(BaseModel):
    """What ``ask`` asks the user for."""

    name: str


@server.tool()
async def sample(prompt: str, ctx: Context) -> str:
    """Ask the client's LLM to complete ``prompt``; return the model and the text."""
    res = await ctx.session.create_message(
        [mt.SamplingMessage(role="user", content=mt.TextContent(type="text", text=prompt))],
        max_tokens=50, system_prompt="be brief", related_request_id=ctx.request_id)
    return json.dumps({"model": res.model, "text": getattr(res.content, "text", None)})


@server.tool()
async def ask(question: str, ctx: Context) -> str:
    """Ask the user for a name; return the action and the data."""
    res = await ctx.elicit(question, Answer)
    data = res.data.model_dump() if res.action == "accept" else None
    return json.dumps({"action": res.action, "data": data})


@server.tool()
async def roots(ctx: Context) -> str:
    """The client's roots, as a list of URIs."""
    res = await ctx.session.list_roots()
    return json.dumps([str(r.uri) for r in res.roots])


@server.tool()
async def probe(kind: str, ctx: Context) -> str:
    """Ask the client for ``kind`` (sampling, elicitation or roots); return ``{"answered":
    true}`` or the error the request got, as ``{"code": ..., "message": ...}``."""
    try:
        if kind == "sampling":
            await ctx.session.create_message(
                [mt.SamplingMessage(role="user", content=mt.TextContent(type="text", text="hi"))],
                max_tokens=5, related_request_id=ctx.request_id)
        elif kind == "elicitation":
            await ctx.elicit("your name?", Answer)
        else:
            await ctx.session.list_roots()
    except MCPError as exc:
        return json.dumps({"code": exc.error.code, "message": exc.error.message})
    return json.dumps({"answered": True})


@server.tool()
def pid() -> int:
    """The id of the process serving this call."""
    return os.getpid()


if __name__ == "__main__":
    server.run("stdio")
