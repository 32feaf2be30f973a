"""An MCP server built with the official SDK's ``MCPServer`` (FastMCP), run over stdio as a real
upstream: one tool per kind of result the proxy must pass through unchanged.

Tools return text (one block or several), images, audio, embedded resources (text and binary),
resource links, a mix in a fixed order, structured content with and without an output schema,
and an error result of several blocks; ``n`` makes a result as long as a test needs (over or
under the proxy's inline limit).
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any, Literal

import mcp_types as mt
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer

# Nested TypedDicts as output schemas need typing_extensions' TypedDict before Python 3.12.
from typing_extensions import TypedDict

# Cache hints its listings carry at 2026-07-28 (a revision without them leaves them out).
server = MCPServer("rich", instructions="Rich test server: one tool per kind of result.",
                   cache_hints={"tools/list": CacheHint(ttl_ms=120000, scope="public"),
                                "resources/list": CacheHint(ttl_ms=300000, scope="public"),
                                "prompts/list": CacheHint(ttl_ms=60000, scope="public"),
                                "resources/templates/list": CacheHint(ttl_ms=5000)})

# A real 1x1 PNG, and bytes that look like nothing in particular for audio and blobs.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
NOISE = hashlib.sha256(b"tooltrace").digest() * 64


def lines(n: int) -> str:
    """``n`` characters of numbered lines (a stand-in for a file's text)."""
    out: list[str] = []
    size, i = 0, 0
    while size < n:
        line = f"line {i:06d}: the quick brown fox jumps over the lazy dog\n"
        out.append(line)
        size += len(line)
        i += 1
    return "".join(out)[:n]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class FileText(TypedDict):
    """What ``read_file`` returns (its output schema)."""

    content: str


@server.tool(structured_output=True)
def read_file(n: int = 11) -> FileText:
    """Structured content with an output schema, like the filesystem server's read_text_file."""
    return {"content": "alpha\nbeta" if n == 11 else lines(n)}


@server.tool(structured_output=False)
def several_texts(n: int = 10) -> mt.CallToolResult:
    """Three text blocks (the middle one ``n`` characters long), no output schema."""
    return mt.CallToolResult(content=[
        mt.TextContent(type="text", text="first"),
        mt.TextContent(type="text", text=lines(n)),
        mt.TextContent(type="text", text="last\n"),
    ])


@server.tool(structured_output=False)
def unschema_structured(n: int = 10) -> mt.CallToolResult:
    """Structured content without an output schema, and a text block that is not its JSON."""
    return mt.CallToolResult(
        content=[mt.TextContent(type="text", text="alpha\nbeta")],
        structured_content={"content": lines(n), "count": n, "tags": ["a", "b"]},
    )


@server.tool(structured_output=False)
def every_block(n: int = 10) -> mt.CallToolResult:
    """One block of every kind, in a fixed order, with a text block ``n`` characters long."""
    return mt.CallToolResult(content=[
        mt.TextContent(type="text", text="caption", annotations=mt.Annotations(priority=0.5)),
        mt.ImageContent(type="image", data=_b64(PNG), mime_type="image/png"),
        mt.AudioContent(type="audio", data=_b64(NOISE), mime_type="audio/wav"),
        mt.EmbeddedResource(type="resource", resource=mt.TextResourceContents(
            uri="file:///notes/a.txt", mime_type="text/plain", text=lines(n))),
        mt.EmbeddedResource(type="resource", resource=mt.BlobResourceContents(
            uri="file:///notes/a.bin", mime_type="application/octet-stream", blob=_b64(NOISE))),
        mt.ResourceLink(type="resource_link", uri="file:///notes/b.txt", name="b.txt",
                        mime_type="text/plain"),
        mt.TextContent(type="text", text="done"),
    ])


@server.tool(structured_output=False)
def with_meta(n: int = 10) -> mt.CallToolResult:
    """A result that carries ``_meta`` of its own (on the result and on a block) beside an
    annotated block and structured content: every field the proxy must hand on."""
    return mt.CallToolResult(
        content=[mt.TextContent(type="text", text=lines(n), _meta={"example.org/block": 1},
                                annotations=mt.Annotations(audience=["user"]))],
        structured_content={"count": n},
        _meta={"example.org/trace": "t-0042", "example.org/cost": {"units": 3}},
    )


@server.tool(structured_output=False)
def lone_text_with_meta() -> mt.CallToolResult:
    """One plain text block and a result ``_meta``: the proxy's short path must keep it."""
    return mt.CallToolResult(content=[mt.TextContent(type="text", text="plain")],
                             _meta={"example.org/trace": "t-0043"})


@server.tool(structured_output=False)
def several_errors() -> mt.CallToolResult:
    """An error result of several blocks (two texts and an image), as a tool that explains
    its failure and shows what it saw."""
    return mt.CallToolResult(is_error=True, content=[
        mt.TextContent(type="text", text="the build failed"),
        mt.TextContent(type="text", text="step 3 of 3: 0 tests ran"),
        mt.ImageContent(type="image", data=_b64(PNG), mime_type="image/png"),
    ])


@server.tool(structured_output=False)
def secret_text() -> mt.CallToolResult:
    """A text block and structured content that carry a credential."""
    key = "AKIA" + "IOSFODNN7EXAMPLE"
    return mt.CallToolResult(
        content=[mt.TextContent(type="text", text=f"aws_access_key_id = {key}\nok")],
        structured_content={"note": f"key {key}", "password": "hunter2-hunter2"},
    )


class Credentials(TypedDict):
    """A login."""

    username: str
    password: str


class Account(TypedDict):
    """What ``account`` returns: secret-naming fields of every type (its output schema)."""

    user: str
    pin: int
    credentials: Credentials
    secrets: list[str]
    enabled: bool


@server.tool(structured_output=True)
def account() -> Account:
    """Structured content whose secrets are a number, an object and an array."""
    return {"user": "ada", "pin": 4821,
            "credentials": {"username": "ada-admin", "password": "hunter2-hunter2"},
            "secrets": ["s3cr3t-one", "s3cr3t-two"], "enabled": True}


class AuthMode(TypedDict):
    """What ``auth_mode`` returns: a secret-naming field the schema allows two values for."""

    user: str
    auth: Literal["basic", "bearer"]


@server.tool(structured_output=True)
def auth_mode() -> AuthMode:
    """Structured content whose redacted field cannot hold a marker (an enum)."""
    return {"user": "ada", "auth": "bearer"}


@server.tool()
async def with_progress(ctx: Context, steps: int = 3) -> str:
    """Report progress ``steps`` times and log one message, then answer."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i} of {steps}")
    await ctx.info("working with token=ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")
    return "done"


@server.resource("note://greeting", mime_type="text/plain")
def greeting() -> str:
    """A short text resource."""
    return "hello from rich"


@server.resource("note://secret", mime_type="text/plain")
def secret_note() -> str:
    """A resource that carries a credential."""
    return "aws_access_key_id = AKIA" + "IOSFODNN7EXAMPLE"


@server.resource("note://notes/{name}", mime_type="text/plain")
def note(name: str) -> str:
    """A templated resource."""
    return f"note {name}"


@server.resource("file://" + os.environ.get("RICH_FILE", "/nonexistent/rich.txt"),
                 mime_type="text/plain")
def workspace_file() -> str:
    """A file resource (its path is given by RICH_FILE)."""
    return Path(os.environ.get("RICH_FILE", "/nonexistent/rich.txt")).read_text()


@server.prompt()
def review(code: str, language: str = "python") -> str:
    """Ask for a review of ``code``."""
    return f"Review this {language} code:\n{code}"


@server.completion()
async def complete(ref: Any, argument: Any, context: Any) -> mt.Completion | None:
    """Complete the ``language`` argument of ``review``."""
    if argument.name == "language":
        langs = ["python", "perl", "php", "rust"]
        return mt.Completion(values=[x for x in langs if x.startswith(argument.value)])
    return None


def serve_http(port: int, token: str) -> None:
    """Streamable HTTP on loopback, answering only requests with ``Bearer <token>``."""
    import uvicorn

    app = server.streamable_http_app()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no"})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if os.environ.get("RICH_HTTP_PORT"):
        serve_http(int(os.environ["RICH_HTTP_PORT"]), os.environ["RICH_TOKEN"])
    else:
        server.run("stdio")
