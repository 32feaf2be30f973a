"""A small MCP server over stdio, written against the wire protocol (JSON-RPC lines) so it
starts in milliseconds and can misbehave in ways an SDK would not let it.

Environment:
    TOY_LABEL              prefix of ``echo`` results (tells which server answered)
    TOY_ECHO_DESCRIPTION   description of ``echo`` (change it between runs: a "rug pull")
    TOY_TOOLS              comma-separated subset of tools to expose (default: all but the
                           ones only named here: ``blocks_error``, ``numbers``)
    TOY_RESOURCES          when set, also serve one resource (``toy://meta``) and one prompt
                           (``meta``) whose contents are the ``_meta`` their request carried;
                           any other is a -32602 error with ``data``
    TOY_PAGE               when set, ``tools/list`` answers pages of this many tools, with a
                           ``nextCursor`` while more follow

Tools: ``echo`` (read-only), ``write_marker`` (writes a file: a side effect), ``fail`` (an
``isError`` result), ``crash`` (the process exits mid-call), ``hang`` (the whole server stops
answering), ``garbage`` (prints a non-JSON line on stdout instead of an answer), ``meta``
(returns the ``_meta`` the request carried), ``mutate`` (changes ``echo``'s description and
sends ``notifications/tools/list_changed``), ``big`` (returns ``n`` characters). Named in
``TOY_TOOLS`` only: ``blocks_error`` (an error result of several blocks, written as a server
might: ``isError`` first) and ``numbers`` (no ``isError`` at all, integers and floats as
written, a block annotation of priority ``0`` and a block key no revision defines).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

LABEL = os.environ.get("TOY_LABEL", "toy")
READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "openWorldHint": False}


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


TOOLS: list[dict[str, Any]] = [
    {"name": "echo", "description": os.environ.get("TOY_ECHO_DESCRIPTION", "Echo the text back."),
     "inputSchema": _schema({"text": {"type": "string", "maxLength": 1000}}, ["text"]),
     "annotations": READ_ONLY},
    {"name": "write_marker", "description": "Write text to a file.",
     "inputSchema": _schema({"path": {"type": "string"}, "text": {"type": "string"}},
                            ["path", "text"])},
    {"name": "fail", "description": "Always reports a tool error.",
     "inputSchema": _schema({"reason": {"type": "string"}}, [])},
    {"name": "crash", "description": "Exit the server process.", "inputSchema": _schema({}, [])},
    {"name": "hang", "description": "Stop answering anything.",
     "inputSchema": _schema({"seconds": {"type": "number"}, "marker": {"type": "string"}}, [])},
    {"name": "garbage", "description": "Print garbage on stdout.", "inputSchema": _schema({}, [])},
    {"name": "meta", "description": "Return the request's _meta.", "inputSchema": _schema({}, []),
     "annotations": READ_ONLY},
    {"name": "mutate", "description": "Change echo's description and announce it.",
     "inputSchema": _schema({"description": {"type": "string"}}, ["description"])},
    {"name": "big", "description": "Return n characters.", "annotations": READ_ONLY,
     "inputSchema": _schema({"n": {"type": "integer", "minimum": 0}}, ["n"])},
]
# Listed only when TOY_TOOLS names them (other tests count the default tools).
NAMED_ONLY: list[dict[str, Any]] = [
    {"name": "blocks_error", "description": "An error result of several blocks.",
     "inputSchema": _schema({}, [])},
    {"name": "numbers", "description": "Numbers as written, and no isError.",
     "inputSchema": _schema({}, []), "annotations": READ_ONLY,
     "execution": {"taskSupport": "optional"}},
]
_only = os.environ.get("TOY_TOOLS")
if _only:
    TOOLS = [t for t in TOOLS + NAMED_ONLY if t["name"] in _only.split(",")]
RESOURCES = bool(os.environ.get("TOY_RESOURCES"))
PAGE = int(os.environ.get("TOY_PAGE") or 0)


def page(cursor: Any) -> dict[str, Any]:
    """One page of ``tools/list`` (all of it without TOY_PAGE)."""
    if not PAGE:
        return {"tools": TOOLS}
    start = int(cursor or 0)
    out: dict[str, Any] = {"tools": TOOLS[start:start + PAGE]}
    if start + PAGE < len(TOOLS):
        out["nextCursor"] = str(start + PAGE)
    return out


def send(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def text(value: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": error}


def call(name: str, args: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any] | None:
    if name == "echo":
        return text(f"{LABEL}:{args['text']}")
    if name == "write_marker":
        Path(args["path"]).write_text(args["text"])
        return text("written")
    if name == "fail":
        return text(f"the tool failed: {args.get('reason', 'it broke')}", error=True)
    if name == "crash":
        os._exit(3)
    if name == "hang":
        if "marker" in args:  # tells a test the call arrived (it waits on that, not a time)
            Path(args["marker"]).write_text("hanging")
        time.sleep(float(args.get("seconds", 60)))
        return text("woke up")
    if name == "garbage":
        sys.stdout.write("this is not JSON-RPC\n")
        sys.stdout.flush()
        time.sleep(60)
        return None
    if name == "mutate":
        for t in TOOLS:
            if t["name"] == "echo":
                t["description"] = args["description"]
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text("mutated")
    if name == "meta":
        return text(json.dumps(meta, sort_keys=True))
    if name == "blocks_error":
        return {"isError": True, "content": [
            {"type": "text", "text": "first: the input was empty"},
            {"type": "text", "text": "second: nothing was written", "annotations": {
                "audience": ["user"], "priority": 1}},
            {"type": "resource_link", "uri": "file:///tmp/toy.log", "name": "toy.log"}]}
    if name == "numbers":
        return {"content": [{"type": "text", "text": "0", "annotations": {"priority": 0},
                             "x-toy": "a key no revision defines"}],
                "structuredContent": {"zero": 0, "half": 0.5, "big": 12345678901234,
                                      "nested": {"list": [0, 1.0, -2]}}}
    if name == "big":
        line = "0123456789abcdefghijklmnopqrstuvwxyz" * 2 + "\n"
        n = int(args["n"])
        return text((line * (n // len(line) + 1))[:n])
    return None


def main() -> None:
    names = {t["name"] for t in TOOLS}
    for raw in sys.stdin:
        if not raw.strip():
            continue
        msg = json.loads(raw)
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:  # a notification
            continue
        params = msg.get("params") or {}
        meta = params.get("_meta") or {}
        if method == "initialize":
            caps: dict[str, Any] = {"tools": {"listChanged": True}}
            if RESOURCES:
                caps.update(resources={}, prompts={})
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": caps,
                "serverInfo": {"name": f"toy-{LABEL}", "version": "1.0"}}})
        elif RESOURCES and method == "resources/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"resources": [
                {"uri": "toy://meta", "name": "meta", "mimeType": "application/json"}]}})
        elif RESOURCES and method == "resources/read" and params.get("uri") == "toy://meta":
            send({"jsonrpc": "2.0", "id": mid, "result": {"contents": [
                {"uri": "toy://meta", "mimeType": "application/json",
                 "text": json.dumps(meta, sort_keys=True)}]}})
        elif RESOURCES and method == "prompts/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"prompts": [{"name": "meta"}]}})
        elif RESOURCES and method == "prompts/get" and params.get("name") == "meta":
            send({"jsonrpc": "2.0", "id": mid, "result": {"messages": [
                {"role": "user", "content": {"type": "text",
                                             "text": json.dumps(meta, sort_keys=True)}}]}})
        elif RESOURCES and method in ("resources/read", "prompts/get"):
            what = "uri" if method == "resources/read" else "name"
            send({"jsonrpc": "2.0", "id": mid, "error": {
                "code": -32602, "message": f"no such {what}: {params.get(what)}",
                "data": {what: params.get(what), "known": 0}}})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": page(params.get("cursor"))})
        elif method == "tools/call" and params.get("name") in names:
            result = call(params["name"], params.get("arguments") or {}, meta)
            if result is not None:
                send({"jsonrpc": "2.0", "id": mid, "result": result})
        else:
            send({"jsonrpc": "2.0", "id": mid,
                  "error": {"code": -32601 if method != "tools/call" else -32602,
                            "message": f"unknown: {method}"}})


if __name__ == "__main__":
    main()
