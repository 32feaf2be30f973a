"""What the MCP proxy answers is what its upstream answered: the same requests sent to a real
upstream directly and through the proxy (a subprocess), over stdio and over streamable HTTP,
compared byte for byte as the JSON text after the JSON-RPC id.

The upstream is ``tests/mcp_servers/rich.py`` (the official SDK's ``MCPServer``): every kind of
content block, structured content with and without an output schema, ``_meta`` on a result and
on a block, an error result of several blocks, the tool, resource, template and prompt listings,
a read, a prompt, a completion, and the JSON-RPC error of an unknown resource (its code, message
and ``data``). The clients are plain JSON-RPC clients (lines over stdio, ``httpx`` over HTTP), so
what is compared is what arrived on the wire. Over stdio the proxy starts the upstream itself;
over HTTP the proxy serves streamable HTTP and reaches the upstream over streamable HTTP, with a
bearer token.

A second upstream written against the wire (``tests/mcp_servers/toy.py``) sends what an SDK
would not: ``isError`` first, no ``isError`` at all, an annotation's priority as the integer
``1``, JSON-RPC errors of its own choosing for an unknown resource and an unknown prompt (an SDK
server words the latter differently by revision, so it is compared here, where the upstream
answers alike at every revision). Its results come back with the same keys, values and number
types except where the guide's "What the proxy changes" says otherwise (``test_mcp_changes.py``
holds that list to the tests).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.otlp import free_port
from test_mcp_proxy import REPO, TOY, write_config

RICH = str(REPO / "tests" / "mcp_servers" / "rich.py")
VERSION, MODERN = "2025-11-25", "2026-07-28"
TOKEN = "tok-" + "1c0ffee5eed5a1e5"

#: (name, method, params): the requests both sides get, in this order.
REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("every_block", "tools/call", {"name": "every_block", "arguments": {"n": 10}}),
    ("with_meta", "tools/call", {"name": "with_meta", "arguments": {}}),
    ("lone_text_with_meta", "tools/call", {"name": "lone_text_with_meta", "arguments": {}}),
    ("structured_with_schema", "tools/call", {"name": "read_file", "arguments": {}}),
    ("structured_without_schema", "tools/call",
     {"name": "unschema_structured", "arguments": {"n": 10}}),
    ("several_texts", "tools/call", {"name": "several_texts", "arguments": {}}),
    ("error_of_several_blocks", "tools/call", {"name": "several_errors", "arguments": {}}),
    ("tools_list", "tools/list", {}),
    ("resources_list", "resources/list", {}),
    ("templates_list", "resources/templates/list", {}),
    ("prompts_list", "prompts/list", {}),
    ("read", "resources/read", {"uri": "note://greeting"}),
    ("read_templated", "resources/read", {"uri": "note://notes/x"}),
    ("prompt", "prompts/get", {"name": "review", "arguments": {"code": "print(0)"}}),
    ("completion", "completion/complete", {
        "ref": {"type": "ref/prompt", "name": "review"},
        "argument": {"name": "language", "value": "p"}}),
    ("unknown_resource", "resources/read", {"uri": "note://nope"}),
]
NAMES = [r[0] for r in REQUESTS]

_HEAD = re.compile(rb'^\{"jsonrpc":"2\.0","id":(?:-?\d+|"(?:[^"\\]|\\.)*"),')


def after_id(message: bytes) -> bytes:
    """A JSON-RPC answer's text after its id: the result or error, byte for byte."""
    m = _HEAD.match(message)
    assert m is not None, message[:120]
    return message[m.end():]


def _initialize(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": n, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {},
        "clientInfo": {"name": "wire-client", "version": "1"}}}


class StdioWire:
    """A JSON-RPC client of a server it runs as a subprocess: one line per message."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=cwd,
                                     env={**os.environ, **(env or {})})
        self._n = 0
        #: The server's answer to ``initialize``.
        self.initialized = json.loads(self.request("initialize", _initialize(0)["params"]))
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> bytes:
        """The answer's line as it arrived (notifications on the way are skipped)."""
        self._n += 1
        self._send({"jsonrpc": "2.0", "id": self._n, "method": method, "params": params})
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if json.loads(line).get("id") == self._n:
                return line.rstrip(b"\n")
        raise AssertionError(f"the server closed its stdout before answering {method}")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class HttpWire:
    """A JSON-RPC client of a streamable HTTP endpoint: the answer's JSON text as it arrived
    (the body, or the data of the SSE event that carries it)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.client = httpx.Client(timeout=60, headers={
            "accept": "application/json, text/event-stream", **(headers or {})})
        self._n = 0
        r = self.client.post(url, json=_initialize(0))
        assert r.status_code == 200, r.text
        self.client.headers["mcp-session-id"] = r.headers["mcp-session-id"]
        self.client.headers["mcp-protocol-version"] = VERSION
        r = self.client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert r.status_code == 202, r.text

    def request(self, method: str, params: dict[str, Any]) -> bytes:
        self._n += 1
        r = self.client.post(self.url, json={"jsonrpc": "2.0", "id": self._n, "method": method,
                                             "params": params})
        assert r.status_code == 200, r.text
        return self.answer(r, self._n)

    @staticmethod
    def answer(r: httpx.Response, n: int) -> bytes:
        """The answer to request ``n``: the body, or the data of the SSE event carrying it."""
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            return r.content.strip()
        for line in r.content.splitlines():
            if line.startswith(b"data:"):
                data = line[5:].strip()
                if data and json.loads(data).get("id") == n:
                    return data
        raise AssertionError(f"no answer to request {n} in the event stream")

    def close(self) -> None:
        self.client.delete(self.url)
        self.client.close()


class ModernWire:
    """A JSON-RPC client of a streamable HTTP endpoint at the session-less 2026-07-28 revision:
    no handshake; each request says who sends it in ``_meta`` and names itself in headers."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.client = httpx.Client(timeout=60, headers={
            "accept": "application/json, text/event-stream", "mcp-protocol-version": MODERN,
            **(headers or {})})
        self._n = 0
        #: The HTTP status of each answer (an error answer's is 4xx at this revision).
        self.statuses: list[int] = []

    def request(self, method: str, params: dict[str, Any]) -> bytes:
        self._n += 1
        params = {**params, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "wire-client", "version": "1"}}}
        headers = {"mcp-method": method}
        name = params.get("name", params.get("uri"))
        if isinstance(name, str):
            headers["mcp-name"] = name
        r = self.client.post(self.url, headers=headers, json={
            "jsonrpc": "2.0", "id": self._n, "method": method, "params": params})
        self.statuses.append(r.status_code)
        return HttpWire.answer(r, self._n)

    def close(self) -> None:
        self.client.close()


def _exchange(client: StdioWire | HttpWire | ModernWire) -> dict[str, bytes]:
    try:
        out = {name: client.request(method, params) for name, method, params in REQUESTS}
        if isinstance(client, ModernWire):
            out["http statuses"] = repr(client.statuses).encode()
        return out
    finally:
        client.close()


def _until_listening(port: int) -> None:
    for _ in range(600):  # a request without the token gets a 401 once it listens
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/mcp", timeout=5).close()
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("the upstream never listened")


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fidelity")


def _stdio(tmp: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    direct = _exchange(StdioWire([sys.executable, RICH]))
    config = write_config(tmp, f"""
[proxy]
home = "home-stdio"
[servers.rich]
command = {json.dumps(sys.executable)}
args = [{json.dumps(RICH)}]
""", "stdio.toml", call_ids=False)
    proxied = _exchange(StdioWire(
        [sys.executable, "-m", "tooltrace.mcp", "proxy", "--config", str(config)],
        env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error"}, cwd=tmp))
    return direct, proxied


@pytest.fixture(scope="module")
def rich_http() -> Iterator[int]:
    port = free_port()
    server = subprocess.Popen([sys.executable, RICH],
                              env={**os.environ, "RICH_HTTP_PORT": str(port),
                                   "RICH_TOKEN": TOKEN},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _until_listening(port)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def _http(tmp: Path, upstream: int, *, modern: bool = False
          ) -> tuple[dict[str, bytes], dict[str, bytes]]:
    auth = {"authorization": f"Bearer {TOKEN}"}
    wire = ModernWire if modern else HttpWire
    direct = _exchange(wire(f"http://127.0.0.1:{upstream}/mcp", auth))
    config = write_config(tmp, f"""
[proxy]
home = "home-http-{modern}"
[servers.rich]
url = "http://127.0.0.1:{upstream}/mcp"
headers = {{ Authorization = "Bearer ${{RICH_TEST_TOKEN}}" }}
""", f"http-{modern}.toml", call_ids=False)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tooltrace.mcp", "proxy", "--config", str(config),
         "--http", f"127.0.0.1:{port}"],
        cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": str(REPO), "RICH_TEST_TOKEN": TOKEN,
                        "TOOLTRACE_LOG_LEVEL": "error"})
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "listening on" in line:
                break
        else:
            pytest.fail("the proxy exited before listening:\n" + "".join(seen))
        proxied = _exchange(wire(f"http://127.0.0.1:{port}/mcp"))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return direct, proxied


@pytest.fixture(scope="module", params=["stdio", "http", "http-2026-07-28"])
def answers(request: pytest.FixtureRequest, tmp: Path
            ) -> tuple[dict[str, bytes], dict[str, bytes]]:
    if request.param == "stdio":
        return _stdio(tmp)
    return _http(tmp, request.getfixturevalue("rich_http"), modern=request.param != "http")


_STAMP = re.compile(rb'"io\.modelcontextprotocol/serverInfo":\{"name":"[^"]*","version":"[^"]*"\}')


def _unstamped(text: bytes) -> bytes:
    """``text`` with a 2026-07-28 result's ``serverInfo`` stamp blanked: it names the server
    the client talks to, which through the proxy is the proxy."""
    return _STAMP.sub(b'"io.modelcontextprotocol/serverInfo":{}', text)


@pytest.mark.parametrize("name", NAMES)
def test_the_proxy_answers_byte_for_byte_what_the_upstream_answered(
        answers: tuple[dict[str, bytes], dict[str, bytes]], name: str) -> None:
    direct, proxied = answers
    assert _unstamped(after_id(proxied[name])) == _unstamped(after_id(direct[name]))


def test_a_2026_result_names_the_proxy_as_its_server(
        answers: tuple[dict[str, bytes], dict[str, bytes]]) -> None:
    direct, proxied = answers
    stamp = b'"io.modelcontextprotocol/serverInfo":{"name":"%s"'
    if "http statuses" not in direct:  # a handshake-era result carries none
        assert b"io.modelcontextprotocol/serverInfo" not in proxied["several_texts"]
        return
    assert stamp % b"rich" in direct["several_texts"]
    assert stamp % b"tooltrace-mcp-proxy" in proxied["several_texts"]


def test_the_http_statuses_are_the_upstreams(
        answers: tuple[dict[str, bytes], dict[str, bytes]]) -> None:
    direct, proxied = answers
    assert proxied.get("http statuses") == direct.get("http statuses")


def test_the_comparison_covers_every_content_type_and_both_kinds_of_error(
        answers: tuple[dict[str, bytes], dict[str, bytes]]) -> None:
    direct, _ = answers
    blocks = json.loads(direct["every_block"])["result"]["content"]
    assert {b["type"] for b in blocks} == {"text", "image", "audio", "resource",
                                            "resource_link"}
    assert {"text", "blob"} <= {k for b in blocks for k in b.get("resource", {})}
    assert "structuredContent" in json.loads(direct["structured_with_schema"])["result"]
    error = json.loads(direct["error_of_several_blocks"])["result"]
    assert error["isError"] is True and len(error["content"]) == 3
    unknown = json.loads(direct["unknown_resource"])["error"]
    assert unknown["code"] == -32602 and unknown["data"] == {"uri": "note://nope"}
    if "http statuses" in direct:  # 2026-07-28: listings carry the upstream's cache hints
        for name, hint in (("tools_list", (120000, "public")),
                           ("resources_list", (300000, "public"))):
            hinted = json.loads(direct[name])["result"]
            assert (hinted["ttlMs"], hinted["cacheScope"]) == hint


# -- a server written against the wire ---------------------------------------------------------

TOY_CALLS = ("blocks_error", "numbers", "fail")
TOY_ERRORS = {"unknown_resource": ("resources/read", {"uri": "toy://nope"}),
              "unknown_prompt": ("prompts/get", {"name": "nope"})}


@pytest.fixture(scope="module")
def toy(tmp: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    env = {"TOY_TOOLS": ",".join(TOY_CALLS), "TOY_RESOURCES": "1"}

    def calls(client: StdioWire) -> dict[str, Any]:
        try:
            out = {t: json.loads(client.request("tools/call", {"name": t, "arguments": {}}))
                   for t in TOY_CALLS}
            out["initialize"] = client.initialized
            for name, (method, params) in TOY_ERRORS.items():
                out[name] = json.loads(client.request(method, params))
            return out
        finally:
            client.close()

    direct = calls(StdioWire([sys.executable, TOY], env=env))
    config = write_config(tmp, f"""
[proxy]
home = "home-toy"
[servers.toy]
command = {json.dumps(sys.executable)}
args = [{json.dumps(TOY)}]
env = {{ TOY_TOOLS = {json.dumps(env["TOY_TOOLS"])}, TOY_RESOURCES = "1" }}
""", "toy.toml", call_ids=False)
    proxied = calls(StdioWire(
        [sys.executable, "-m", "tooltrace.mcp", "proxy", "--config", str(config)],
        env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error"}, cwd=tmp))
    return direct, proxied


def _typed(value: Any) -> str:
    """``value`` as JSON text with sorted keys: equal only when every key, value and number
    type is (``0`` is not ``0.0``)."""
    return json.dumps(value, sort_keys=True)


def _priority_as_float(result: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(result))
    for block in out.get("content", []):
        ann = block.get("annotations")
        if isinstance(ann, dict) and isinstance(ann.get("priority"), int):
            ann["priority"] = float(ann["priority"])
    return out


def test_an_error_result_keeps_every_block_and_no_is_error_is_invented(
        toy: tuple[dict[str, Any], dict[str, Any]]) -> None:
    direct, proxied = toy
    for tool in ("blocks_error", "fail"):
        assert _typed(proxied[tool]["result"]) == _typed(
            _priority_as_float(direct[tool]["result"]))
    assert len(proxied["blocks_error"]["result"]["content"]) == 3
    assert "isError" not in direct["numbers"]["result"]
    assert "isError" not in proxied["numbers"]["result"]


def test_numbers_keep_their_type_but_schema_typed_ones(
        toy: tuple[dict[str, Any], dict[str, Any]]) -> None:
    direct, proxied = toy
    sent, got = direct["numbers"]["result"], proxied["numbers"]["result"]
    # Structured content and text are as sent: 0 stays 0, 0.5 stays 0.5.
    assert _typed(got["structuredContent"]) == _typed(sent["structuredContent"])
    assert got["content"][0]["text"] == "0"
    # An annotation's priority is a number in the schema: the client's revision writes it as one.
    assert sent["content"][0]["annotations"] == {"priority": 0}
    assert _typed(got["content"][0]["annotations"]) == _typed({"priority": 0.0})
    # A key the schema does not define is left out, as an SDK client's own check leaves it.
    assert "x-toy" in sent["content"][0] and "x-toy" not in got["content"][0]


def test_key_order_is_the_client_revisions(toy: tuple[dict[str, Any], dict[str, Any]]) -> None:
    direct, proxied = toy
    sent, got = direct["blocks_error"]["result"], proxied["blocks_error"]["result"]
    assert list(sent) == ["isError", "content"]
    assert list(got) == ["content", "isError"]
    assert list(got["content"][0]) == ["text", "type"]


@pytest.mark.parametrize("name", sorted(TOY_ERRORS))
def test_a_read_or_prompt_error_keeps_the_upstreams_code_message_and_data(
        toy: tuple[dict[str, Any], dict[str, Any]], name: str) -> None:
    direct, proxied = toy
    assert "error" in direct[name]
    assert _typed(proxied[name]["error"]) == _typed(direct[name]["error"])


def test_a_listing_comes_whole_in_the_upstreams_order(tmp: Path) -> None:
    """An upstream that pages its tools: the proxy lists them all in one page, in the order
    of the upstream's pages, each as the upstream listed it but for its task support."""
    env = {"TOY_TOOLS": "echo,meta,big,fail,numbers", "TOY_PAGE": "2"}
    direct = StdioWire([sys.executable, TOY], env=env)
    pages, cursor = [], None
    try:
        while True:
            page = json.loads(direct.request("tools/list", {"cursor": cursor} if cursor else {}))
            pages.append(page["result"])
            cursor = page["result"].get("nextCursor")
            if cursor is None:
                break
    finally:
        direct.close()
    config = write_config(tmp, f"""
[proxy]
home = "home-pages"
[servers.toy]
command = {json.dumps(sys.executable)}
args = [{json.dumps(TOY)}]
env = {{ TOY_TOOLS = "{env["TOY_TOOLS"]}", TOY_PAGE = "2" }}
""", "pages.toml", call_ids=False)
    proxy = StdioWire([sys.executable, "-m", "tooltrace.mcp", "proxy", "--config", str(config)],
                      env={"PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error"}, cwd=tmp)
    try:
        listed = json.loads(proxy.request("tools/list", {}))["result"]
    finally:
        proxy.close()
    assert len(pages) == 3
    assert [t["name"] for t in listed["tools"]] == [
        t["name"] for p in pages for t in p["tools"]] == ["echo", "fail", "meta", "big", "numbers"]
    assert "nextCursor" not in listed
    # A tool's task support is the one thing its listing loses: the proxy runs no tasks.
    sent = next(t for p in pages for t in p["tools"] if t["name"] == "numbers")
    got = next(t for t in listed["tools"] if t["name"] == "numbers")
    assert sent["execution"] == {"taskSupport": "optional"} and "execution" not in got
    assert {k: v for k, v in sent.items() if k != "execution"} == got


def test_list_changed_is_advertised_as_the_upstream_advertises_it(
        toy: tuple[dict[str, Any], dict[str, Any]]) -> None:
    direct, proxied = toy
    sent = direct["initialize"]["result"]["capabilities"]
    got = proxied["initialize"]["result"]["capabilities"]
    assert sent["tools"] == {"listChanged": True}
    for kind in ("tools", "resources", "prompts"):
        assert got[kind]["listChanged"] is sent[kind].get("listChanged", False), kind
