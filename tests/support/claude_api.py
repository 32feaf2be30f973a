"""A fake Anthropic Messages API on loopback, for driving the real Claude Code CLI.

The CLI bundled with ``claude-agent-sdk`` talks to ``ANTHROPIC_BASE_URL``: ``FakeMessagesApi``
answers its ``POST /v1/messages`` requests with scripted assistant turns in the API's own
streaming event format (``message_start``, ``content_block_*`` with ``text_delta`` and
``input_json_delta`` pieces, ``message_delta``, ``message_stop``), and keeps every request body
it was sent, so a test reads exactly what the model was shown. ``cli_env`` gives the CLI a
throwaway ``HOME`` and config directory, a dummy key, and a proxy that refuses anything but
loopback.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    "FakeMessagesApi",
    "Turn",
    "cli_env",
    "deferred_names",
    "text",
    "tool_results",
    "use",
]

#: One assistant turn: content blocks, or a function of the request body that returns them.
Turn = Sequence[dict[str, Any]] | Callable[[dict[str, Any]], Sequence[dict[str, Any]]]


def text(value: str) -> dict[str, Any]:
    """A text block."""
    return {"type": "text", "text": value}


def use(name: str, tool_input: dict[str, Any], use_id: str) -> dict[str, Any]:
    """A ``tool_use`` block (its input is streamed in pieces, as the API does)."""
    return {"type": "tool_use", "id": use_id, "name": name, "input": tool_input}


@dataclass
class FakeMessagesApi:
    """Scripted assistant turns served on ``127.0.0.1``; ``requests`` holds every body sent.

    Each ``POST /v1/messages`` takes the next turn of ``turns``; once they run out it answers
    ``done`` and ends the turn. Use it as a context manager (it serves in a thread).
    """

    turns: list[Turn]
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        """The base URL to give the CLI (``ANTHROPIC_BASE_URL``)."""
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeMessagesApi:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                api.paths.append(self.path)
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                    self._send(404, "application/json", b'{"type":"error"}')
                    return
                blocks, n_req = api._next(body)
                stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
                if body.get("stream"):
                    self._send(200, "text/event-stream", _events(blocks, stop, n_req))
                else:
                    self._send(200, "application/json", json.dumps(
                        _message(blocks, stop, n_req)).encode())

            def do_GET(self) -> None:
                api.paths.append(self.path)
                self._send(404, "application/json", b'{"type":"error"}')

            def _send(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
        with self._lock:
            self.requests.append(body)
            turn = self.turns.pop(0) if self.turns else [text("done")]
            n = len(self.requests)
        return list(turn(body) if callable(turn) else turn), n

    def tool_names(self, i: int = 0) -> list[str]:
        """The names in request ``i``'s ``tools`` (placeholders for deferred tools included)."""
        return [t["name"] for t in self.requests[i].get("tools", [])]

    def schema(self, i: int, name: str) -> dict[str, Any] | None:
        """The input schema request ``i`` sends for tool ``name`` (None: not sent). A deferred
        tool's is sent with ``defer_loading`` once a ``tool_reference`` (what ``ToolSearch``
        returns) names it: the API expands the reference into the model's prompt."""
        for t in self.requests[i].get("tools", []):
            if t.get("name") == name:
                return dict(t["input_schema"])
        return None


def _message(blocks: list[dict[str, Any]], stop: str, n: int) -> dict[str, Any]:
    return {"id": f"msg_{n:04d}", "type": "message", "role": "assistant",
            "model": "claude-fake-1", "content": blocks, "stop_reason": stop,
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}


def _events(blocks: list[dict[str, Any]], stop: str, n: int) -> bytes:
    out: list[str] = []

    def event(kind: str, data: dict[str, Any]) -> None:
        out.append(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n")

    start = _message([], stop, n)
    start.update(stop_reason=None, usage={"input_tokens": 10, "output_tokens": 1})
    event("message_start", {"message": start})
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            event("content_block_start", {"index": i, "content_block": {"type": "text",
                                                                        "text": ""}})
            event("content_block_delta", {"index": i, "delta": {"type": "text_delta",
                                                                 "text": b["text"]}})
        else:
            event("content_block_start", {"index": i, "content_block": {
                "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
            raw = json.dumps(b["input"])
            for piece in (raw[: len(raw) // 2], raw[len(raw) // 2:]):
                event("content_block_delta", {"index": i, "delta": {
                    "type": "input_json_delta", "partial_json": piece}})
        event("content_block_stop", {"index": i})
    event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 5}})
    event("message_stop", {})
    return "".join(out).encode()


def cli_env(api: FakeMessagesApi, home: Path, **extra: str) -> dict[str, str]:
    """``ClaudeAgentOptions.env`` for the CLI: the fake API, a dummy key, a throwaway home and
    config directory, and a dead proxy for anything that is not loopback."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / "claude-config"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
        **extra,
    }


_DEFERRED = re.compile(
    r"deferred tools are now available via ToolSearch[^\n]*\n((?:[^\n]+\n)+)")


def deferred_names(body: dict[str, Any]) -> list[str]:
    """The tool names a request lists as deferred (loaded through ``ToolSearch``)."""
    found: list[str] = []
    for m in _DEFERRED.finditer(json.dumps(body).replace("\\n", "\n")):
        found += [n.strip() for n in m.group(1).splitlines() if n.strip()]
    return found


def tool_results(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every ``tool_result`` block of a request's messages."""
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            yield from (c for c in content if c.get("type") == "tool_result")
