"""A fake Claude Code CLI: a ``Transport`` that plays the CLI's side of the SDK's control protocol.

It answers ``initialize``, and for each prompt plays one scripted turn of a model that uses
tools: a built-in tool goes through the ``PreToolUse`` hooks, runs (a Python callable stands in
for the CLI's own tool) and is reported through ``PostToolUse`` / ``PostToolUseFailure``; an
in-process MCP tool is called with ``mcp_message`` requests. What the model would be shown for
each tool use is kept in ``seen``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from claude_agent_sdk import Transport


@dataclass
class Use:
    """One tool use of the scripted model: a built-in (``run`` stands in for the CLI's tool)
    or, when ``server`` is set, a tool of that in-process MCP server."""

    name: str
    input: dict[str, Any]
    run: Callable[[dict[str, Any]], Any] | None = None
    server: str | None = None
    fail: str | None = None
    interrupt: bool = False
    cancel_after: float | None = None  # the CLI cancels this MCP call after that long
    id: str = ""


@dataclass
class FakeCli(Transport):
    turn: list[list[Use]]  # groups of uses; the uses of one group are made in parallel
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    hooks: dict[str, list[str]] = field(default_factory=dict)
    ran: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    listed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    async def connect(self) -> None:
        self._out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._n = 0
        self._mcp_ready: set[str] = set()

    async def write(self, data: str) -> None:
        msg = json.loads(data)
        if msg["type"] == "control_response":
            self._waiting.pop(msg["response"]["request_id"]).set_result(msg["response"])
        elif msg["type"] == "control_request" and msg["request"]["subtype"] == "initialize":
            for event, matchers in (msg["request"]["hooks"] or {}).items():
                self.hooks[event] = [c for m in matchers for c in m["hookCallbackIds"]]
            self._out.put_nowait({"type": "control_response", "response": {
                "subtype": "success", "request_id": msg["request_id"],
                "response": {"hook_on_failure_supported": True}}})
        elif msg["type"] == "user":
            self._play = asyncio.ensure_future(self._turn())

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        async def gen() -> AsyncIterator[dict[str, Any]]:
            while (m := await self._out.get()) is not None:
                yield m
        return gen()

    async def close(self) -> None:
        self._out.put_nowait(None)

    def is_ready(self) -> bool:
        return True

    async def end_input(self) -> None:
        pass

    async def request(self, body: dict[str, Any]) -> dict[str, Any]:
        self._n += 1
        rid = f"cli_{self._n}"
        fut = self._waiting[rid] = asyncio.get_running_loop().create_future()
        self._out.put_nowait({"type": "control_request", "request_id": rid, "request": body})
        resp = await fut
        if resp["subtype"] == "error":
            raise RuntimeError(resp["error"])
        out: dict[str, Any] = resp["response"]
        return out

    async def hook(self, event: str, payload: dict[str, Any]) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        base = {"session_id": "s1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp"}
        for cid in self.hooks.get(event, []):
            merged.update(await self.request({
                "subtype": "hook_callback", "callback_id": cid,
                "input": {**base, "hook_event_name": event, **payload},
                "tool_use_id": payload.get("tool_use_id")}))
        return merged

    async def mcp(self, server: str, method: str, params: dict[str, Any],
                  rid: int | None = None) -> dict[str, Any]:
        self._n += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not method.startswith("notifications/"):
            message["id"] = rid or self._n
        resp = await self.request(
            {"subtype": "mcp_message", "server_name": server, "message": message})
        return dict(resp["mcp_response"])

    async def _use(self, use: Use) -> None:
        if use.server is not None:
            if use.server not in self._mcp_ready:
                self._mcp_ready.add(use.server)
                await self.mcp(use.server, "initialize", {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "fake-cli", "version": "0"}})
                await self.mcp(use.server, "notifications/initialized", {})
                listed = await self.mcp(use.server, "tools/list", {})
                self.listed[use.server] = listed["result"]["tools"]
            self._n += 1
            rid = 10_000 + self._n
            call = asyncio.ensure_future(self.mcp(
                use.server, "tools/call", {"name": use.name, "arguments": use.input}, rid))
            if use.cancel_after is not None:
                await asyncio.sleep(use.cancel_after)
                await self.mcp(use.server, "notifications/cancelled",
                               {"requestId": rid, "reason": "interrupted"})
            resp = await call
            self.seen[use.id] = resp.get("result", resp)
            return
        tool = {"tool_name": use.name, "tool_input": use.input, "tool_use_id": use.id}
        pre = (await self.hook("PreToolUse", tool)).get("hookSpecificOutput", {})
        if pre.get("permissionDecision") == "deny":
            self.seen[use.id] = {"denied": pre["permissionDecisionReason"]}
            return
        tool["tool_input"] = pre.get("updatedInput", use.input)
        if pre.get("permissionDecision") == "ask":  # the CLI asks the SDK's can_use_tool
            perm = await self.request({"subtype": "can_use_tool", "tool_name": use.name,
                                       "input": tool["tool_input"], "tool_use_id": use.id})
            if perm["behavior"] == "deny":
                self.seen[use.id] = {"denied": perm["message"]}
                return
            tool["tool_input"] = perm["updatedInput"]
        if use.fail is not None or use.interrupt:
            await self.hook("PostToolUseFailure", {**tool, "error": use.fail or "interrupted",
                                                   "is_interrupt": use.interrupt})
            self.seen[use.id] = {"error": use.fail}
            return
        assert use.run is not None
        self.ran.append((use.name, tool["tool_input"]))
        response = use.run(tool["tool_input"])
        post = await self.hook("PostToolUse", {**tool, "tool_response": response})
        spec = post.get("hookSpecificOutput", {})
        self.seen[use.id] = {"output": spec.get("updatedToolOutput", response), "post": post}

    async def _turn(self) -> None:
        n = 0
        for group in self.turn:
            for use in group:
                n += 1
                use.id = use.id or f"toolu_{n:02d}"
            await asyncio.gather(*(self._use(u) for u in group))
        await self.hook("Stop", {"stop_hook_active": False})
        self._out.put_nowait({"type": "assistant", "message": {
            "role": "assistant", "model": "fake", "content": [{"type": "text", "text": "done"}]},
            "parent_tool_use_id": None, "session_id": "s1"})
        self._out.put_nowait({"type": "result", "subtype": "success", "duration_ms": 1,
                              "duration_api_ms": 1, "is_error": False, "num_turns": 1,
                              "session_id": "s1", "result": "done"})
        self._out.put_nowait(None)
