"""An MCP server built with the official SDK's low-level ``Server``, run over stdio as a real
upstream that notifies and asks its client outside tool calls.

- ``resources/subscribe``: ``touch`` then sends ``notifications/resources/updated`` for a URI
  this session subscribed to (and nothing for one it did not); ``change_lists`` sends
  ``resources/list_changed`` and ``prompts/list_changed``.
- right after ``notifications/initialized``, and after every ``notifications/roots/list_changed``,
  it asks the client for its roots on its own (no request of the client in flight); ``seen_roots``
  returns what it was told, and how often.
- reading ``note://roots`` asks for the roots while it serves the read; ``prompts/get`` of
  ``sampled`` asks the client's LLM while it serves the prompt.
- ``work(tag, steps, meet)`` reports ``steps`` progress marks naming ``tag``, logs ``log <tag>``,
  asks the client's LLM for ``tag``, and returns the model and text it got (two clients' calls
  can be told apart). With ``meet`` (a directory), it first leaves a file named ``tag`` there
  and waits until two are there: two calls are then in flight at once, whatever the speed.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import Any

import mcp.types as mt
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning

warnings.simplefilter("ignore", MCPDeprecationWarning)

RESOURCES = ["note://a", "note://b", "note://roots"]
subscribed: set[str] = set()
roots_seen: list[list[str]] = []
tasks: set[asyncio.Task[Any]] = set()


def _text(s: str) -> list[mt.TextContent]:
    return [mt.TextContent(type="text", text=s)]


async def _ask_roots(session: Any) -> None:
    try:
        res = await session.list_roots()
        roots_seen.append([str(r.uri) for r in res.roots])
    except Exception as exc:  # the client refused: remember that too
        roots_seen.append([f"error: {type(exc).__name__}"])


def _later(coro: Any) -> None:
    # Not awaited in the handler: a request to the client from a notification handler must not
    # hold up the loop that reads the client's answer.
    task = asyncio.get_running_loop().create_task(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


async def _sample(session: Any, text: str, request_id: Any = None) -> mt.CreateMessageResult:
    res: mt.CreateMessageResult = await session.create_message(
        [mt.SamplingMessage(role="user", content=mt.TextContent(type="text", text=text))],
        max_tokens=20, related_request_id=request_id)
    return res


async def list_tools(ctx: Any, params: Any) -> mt.ListToolsResult:
    obj = {"type": "object"}
    return mt.ListToolsResult(tools=[
        mt.Tool(name="touch", description="Update a resource.", input_schema={
            "type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}),
        mt.Tool(name="change_lists", description="Change the resource and prompt lists.",
                input_schema=obj),
        mt.Tool(name="seen_roots", description="The roots asked for outside calls.",
                input_schema=obj),
        mt.Tool(name="work", description="Progress, then sampling, for a tag.", input_schema={
            "type": "object", "properties": {"tag": {"type": "string"},
                                             "steps": {"type": "integer"},
                                             "meet": {"type": "string"}},
            "required": ["tag"]}),
    ])


async def call_tool(ctx: Any, params: mt.CallToolRequestParams) -> mt.CallToolResult:
    args = params.arguments or {}
    if params.name == "touch":
        uri = str(args["uri"])
        if uri in subscribed:
            await ctx.session.send_resource_updated(uri)
        return mt.CallToolResult(content=_text("touched" if uri in subscribed else "quiet"))
    if params.name == "change_lists":
        await ctx.session.send_resource_list_changed()
        await ctx.session.send_prompt_list_changed()
        return mt.CallToolResult(content=_text("changed"))
    if params.name == "seen_roots":
        return mt.CallToolResult(content=_text(json.dumps(roots_seen)))
    if params.name == "work":
        tag = str(args["tag"])
        steps = int(args.get("steps", 2))
        if args.get("meet"):
            meet = Path(str(args["meet"]))
            (meet / tag).touch()
            for _ in range(400):  # bounded: 20 s
                if len(list(meet.iterdir())) >= 2:
                    break
                await asyncio.sleep(0.05)
        for i in range(1, steps + 1):
            await ctx.session.report_progress(i, steps, f"{tag} {i}")
            await asyncio.sleep(0.05)  # room for the other client's call to interleave
        await ctx.session.send_log_message("info", f"log {tag}", logger="work")
        res = await _sample(ctx.session, tag, ctx.request_id)
        return mt.CallToolResult(content=_text(json.dumps(
            {"model": res.model, "text": getattr(res.content, "text", None)})))
    raise ValueError(f"unknown tool {params.name}")


async def list_resources(ctx: Any, params: Any) -> mt.ListResourcesResult:
    return mt.ListResourcesResult(resources=[
        mt.Resource(uri=u, name=u.rsplit("/", 1)[-1], mime_type="text/plain")
        for u in RESOURCES])


async def read_resource(ctx: Any, params: mt.ReadResourceRequestParams) -> mt.ReadResourceResult:
    uri = str(params.uri)
    text = f"content of {uri}"
    if uri == "note://roots":
        res = await ctx.session.list_roots()
        text = json.dumps([str(r.uri) for r in res.roots])
    return mt.ReadResourceResult(contents=[mt.TextResourceContents(
        uri=uri, mime_type="text/plain", text=text)])


async def subscribe(ctx: Any, params: mt.SubscribeRequestParams) -> mt.EmptyResult:
    subscribed.add(str(params.uri))
    return mt.EmptyResult()


async def unsubscribe(ctx: Any, params: mt.UnsubscribeRequestParams) -> mt.EmptyResult:
    subscribed.discard(str(params.uri))
    return mt.EmptyResult()


async def list_prompts(ctx: Any, params: Any) -> mt.ListPromptsResult:
    return mt.ListPromptsResult(prompts=[mt.Prompt(name="sampled", description="Sampled.")])


async def get_prompt(ctx: Any, params: mt.GetPromptRequestParams) -> mt.GetPromptResult:
    res = await _sample(ctx.session, "prompt please")
    return mt.GetPromptResult(messages=[mt.PromptMessage(role="user", content=mt.TextContent(
        type="text", text=f"{res.model}: {getattr(res.content, 'text', '')}"))])


async def on_initialized(ctx: Any, params: Any) -> None:
    _later(_ask_roots(ctx.session))


async def on_roots_changed(ctx: Any, params: Any) -> None:
    _later(_ask_roots(ctx.session))


server: Server[Any] = Server(
    "notifying", on_list_tools=list_tools, on_call_tool=call_tool,
    on_list_resources=list_resources, on_read_resource=read_resource,
    on_subscribe_resource=subscribe, on_unsubscribe_resource=unsubscribe,
    on_list_prompts=list_prompts, on_get_prompt=get_prompt,
    on_roots_list_changed=on_roots_changed)
server.add_notification_handler("notifications/initialized", mt.NotificationParams,
                                on_initialized)


async def main() -> None:
    """Serve over stdio until the client closes stdin."""
    from mcp.server.lowlevel import NotificationOptions

    opts = server.create_initialization_options(
        NotificationOptions(prompts_changed=True, resources_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, opts)


if __name__ == "__main__":
    asyncio.run(main())
