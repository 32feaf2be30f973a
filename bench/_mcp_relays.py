"""Reference contenders for the ``mcp`` section: two stdio proxies with no tooltrace in them.

    python -m bench._mcp_relays relay -- CMD ARGS...   # copies lines both ways, nothing else
    python -m bench._mcp_relays sdk -- CMD ARGS...     # the MCP Python SDK, as shipped

``relay`` is the floor of any proxy that is a process of its own: one more process between
client and server, so each message is read and written once more and two more processes must be
woken. ``sdk`` is the least a proxy built on the SDK does: a low-level ``Server`` over the SDK's
``stdio_server`` whose ``tools/list`` and ``tools/call`` are forwarded through a
``ClientSession`` over ``stdio_client``; the difference to ``relay`` is the SDK's own server and
client cost.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any


async def _relay(cmd: list[str]) -> None:
    loop = asyncio.get_running_loop()
    proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                 os.fdopen(0, "rb", buffering=0, closefd=False))
    out, _ = await loop.connect_write_pipe(asyncio.Protocol,
                                           os.fdopen(1, "wb", buffering=0, closefd=False))

    async def down() -> None:  # client -> server
        while line := await reader.readline():
            proc.stdin.write(line)  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]

    async def up() -> None:  # server -> client
        while line := await proc.stdout.readline():  # type: ignore[union-attr]
            out.write(line)

    await asyncio.gather(down(), up())
    await proc.wait()


async def _sdk(cmd: list[str]) -> None:
    import mcp.types as mt
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    async with stdio_client(params) as (r, w), ClientSession(r, w) as upstream:
        await upstream.initialize()

        async def list_tools(ctx: Any, p: Any) -> mt.ListToolsResult:
            return await upstream.list_tools()

        async def call_tool(ctx: Any, p: mt.CallToolRequestParams) -> mt.CallToolResult:
            return await upstream.call_tool(p.name, p.arguments)

        server: Server[Any] = Server("sdk-passthrough", on_list_tools=list_tools,
                                     on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def main(argv: list[str]) -> None:
    """``relay|sdk -- CMD ARGS...``."""
    kind, cmd = argv[0], argv[argv.index("--") + 1:]
    asyncio.run(_relay(cmd) if kind == "relay" else _sdk(cmd))


if __name__ == "__main__":
    main(sys.argv[1:])
