"""A wire-level MCP server over stdio that writes down every line it receives (to the file
named by ``WIRE_LOG``), so a test can see what the proxy sent upstream: request ids, ``_meta``,
``notifications/cancelled``.

Tools: ``echo`` (answers at once), ``slow(seconds, steps, gap)`` (reports ``steps`` progress
marks ``gap`` seconds apart, default 0.02, under the request's ``progressToken``, then answers
after ``seconds``; a
``notifications/cancelled`` for it ends it without an answer), ``refuse`` (a JSON-RPC error
answer, code -32603), ``garble`` (an answer whose error is not an object: not JSON-RPC),
``crash`` (the process exits mid-call).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

LOG = os.environ.get("WIRE_LOG")


def _schema(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props}


TOOLS = [
    {"name": "echo", "description": "Echo the text back.",
     "inputSchema": _schema({"text": {"type": "string"}})},
    {"name": "slow", "description": "Report progress, then answer.",
     "inputSchema": _schema({"seconds": {"type": "number"}, "steps": {"type": "integer"},
                             "gap": {"type": "number"}})},
    {"name": "refuse", "description": "Answer with a JSON-RPC error.",
     "inputSchema": _schema({})},
    {"name": "garble", "description": "Answer with a malformed error.",
     "inputSchema": _schema({})},
    {"name": "crash", "description": "Exit the server process.", "inputSchema": _schema({})},
]


def send(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


async def slow(mid: Any, args: dict[str, Any], meta: dict[str, Any]) -> None:
    token = meta.get("progressToken")
    steps = int(args.get("steps", 0))
    for i in range(1, steps + 1):
        if token is not None:
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": token, "progress": i, "total": steps,
                             "message": f"step {i}"}})
        await asyncio.sleep(float(args.get("gap", 0.02)))
    await asyncio.sleep(float(args.get("seconds", 0)))
    send({"jsonrpc": "2.0", "id": mid, "result": text("slow done")})


async def main() -> None:
    loop = asyncio.get_running_loop()
    running: dict[Any, asyncio.Task[None]] = {}
    while raw := await loop.run_in_executor(None, sys.stdin.readline):
        if not raw.strip():
            continue
        if LOG:
            with open(LOG, "a") as f:
                f.write(raw if raw.endswith("\n") else raw + "\n")
        msg = json.loads(raw)
        method, mid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method == "notifications/cancelled":
            task = running.pop(json.dumps(params.get("requestId")), None)
            if task is not None:
                task.cancel()
            continue
        if mid is None:
            continue
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}}, "serverInfo": {"name": "wire", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        elif method == "tools/call":
            name, args = params.get("name"), params.get("arguments") or {}
            if name == "echo":
                send({"jsonrpc": "2.0", "id": mid, "result": text(str(args.get("text")))})
            elif name == "slow":
                task = loop.create_task(slow(mid, args, params.get("_meta") or {}))
                running[json.dumps(mid)] = task
            elif name == "refuse":
                send({"jsonrpc": "2.0", "id": mid,
                      "error": {"code": -32603, "message": "the server refused"}})
            elif name == "garble":
                send({"jsonrpc": "2.0", "id": mid, "error": "nope"})
            elif name == "crash":
                os._exit(3)
        else:
            send({"jsonrpc": "2.0", "id": mid,
                  "error": {"code": -32601, "message": f"unknown: {method}"}})


if __name__ == "__main__":
    asyncio.run(main())
