"""A tooltrace tool's progress reaches an MCP client that asked for it (``progressToken``):
the real MCP client and the proxy's real MCP server, connected in memory."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.shared.memory import create_client_server_memory_streams

from tooltrace import CallContext, ToolRegistry, tool
from tooltrace.mcp import McpProxy, ProxyConfig, build_server

SECRET = "sk-" + "0badcafe" * 5


@tool()
async def crunch(ctx: CallContext, n: int) -> str:
    """Works through n items, reporting each."""
    for i in range(n):
        ctx.progress(i + 1, n, f"item {i} {SECRET}")
        await asyncio.sleep(0.005)
    return f"crunched {n}"


async def _session_calls(reg: ToolRegistry, calls: list[tuple[str, dict[str, Any], bool]]
                         ) -> list[tuple[Any, list[tuple[float, float | None, str | None]]]]:
    proxy = McpProxy(ProxyConfig(), registry=reg)
    server = build_server(proxy, "stdio")
    out = []
    async with create_client_server_memory_streams() as (client, srv), \
            anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.run(srv[0], srv[1], server.create_initialization_options()))
        async with ClientSession(client[0], client[1]) as session:
            await session.initialize()
            for name, args, ask in calls:
                got: list[tuple[float, float | None, str | None]] = []

                async def on_progress(p: float, total: float | None, msg: str | None,
                                      got: list[Any] = got) -> None:
                    got.append((p, total, msg))

                res = await session.call_tool(name, args,
                                              progress_callback=on_progress if ask else None)
                out.append((res, got))
        tg.cancel_scope.cancel()
    return out


def test_progress_notifications_reach_the_client_that_asked(tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", progress_interval_s=0.0)
    reg.register(crunch)
    (asked, got), (plain, none) = asyncio.run(_session_calls(
        reg, [("crunch", {"n": 5}, True), ("crunch", {"n": 3}, False)]))
    reg.shutdown()
    assert not asked.is_error and not plain.is_error
    assert [(p, t) for p, t, _m in got] == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
    assert all(m is not None and m.startswith("item ") and SECRET not in m for _p, _t, m in got)
    assert none == []
