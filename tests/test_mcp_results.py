"""Results through the MCP proxy are the upstream's results: byte-compared with the same calls
made directly, for every kind of content block, with and without an output schema, under and
over the proxy's inline limit.

The upstream is a real server built with the official SDK (``tests/mcp_servers/rich.py``), the
client is the official SDK client, and the proxy runs as a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from typing import Any

import jsonschema
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from support.otlp import free_port
from support.prom import promtool_binary
from test_mcp_proxy import REPO, audit_rows, call_id, proxy_session, write_config

RICH = str(REPO / "tests" / "mcp_servers" / "rich.py")
SMALL, BIG = 10, 40_000  # the proxy's inline limit is 16384 characters
META_TOOLS = ("with_meta", "lone_text_with_meta")
CASES = [(tool, n) for tool in ("read_file", "several_texts", "unschema_structured",
                                "every_block") for n in (SMALL, BIG)]


def wire(result: Any) -> bytes:
    """A result as the client hands it on, without ``_meta`` (where the proxy adds its ids)."""
    data = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    data.pop("_meta", None)
    return json.dumps(data, sort_keys=True).encode()


async def _calls(session: ClientSession) -> dict[tuple[str, int], Any]:
    return {(tool, n): await session.call_tool(tool, {"n": n}) for tool, n in CASES}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("rich")
    port = free_port()
    config = write_config(tmp, f"""
[proxy]
home = "home"
metrics_port = {port}
[servers.rich]
command = {json.dumps(sys.executable)}
args = [{json.dumps(RICH)}]
""")

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        params = StdioServerParameters(command=sys.executable, args=[RICH])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            out["direct_tools"] = {t.name: t for t in (await s.list_tools()).tools}
            out["direct"] = await _calls(s)
            out["direct_meta"] = [await s.call_tool(t, {}) for t in META_TOOLS]
        async with proxy_session(config) as s:
            out["proxy_tools"] = {t.name: t for t in (await s.list_tools()).tools}
            out["proxied"] = await _calls(s)
            out["proxied_meta"] = [await s.call_tool(t, {}) for t in META_TOOLS]
            out["secret"] = await s.call_tool("secret_text", {})
            try:
                await s.call_tool("no_such_tool", {"n": 1})
            except MCPError as exc:
                out["unknown"] = exc
            out["after_unknown"] = await s.call_tool("read_file", {})
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                out["metrics"] = r.read().decode()
        return out

    out = asyncio.run(scenario())
    out["home"] = tmp / "home"
    return out


@pytest.mark.parametrize(("tool", "n"), [c for c in CASES if c[1] == SMALL])
def test_results_under_the_limit_are_byte_identical(results: dict[str, Any], tool: str,
                                                    n: int) -> None:
    direct, proxied = results["direct"][tool, n], results["proxied"][tool, n]
    assert wire(proxied) == wire(direct)
    assert proxied.meta["tooltrace/status"] == "ok"  # named because the config asks (call_ids)
    assert "tooltrace/artifact" not in proxied.meta and "tooltrace/changed" not in proxied.meta


@pytest.mark.parametrize(("tool", "n"), [c for c in CASES if c[1] == BIG])
def test_offloaded_results_keep_their_shape(results: dict[str, Any], tool: str,
                                            n: int) -> None:
    direct, proxied = results["direct"][tool, n], results["proxied"][tool, n]
    art = proxied.meta["tooltrace/artifact"]
    assert proxied.meta["tooltrace/changed"] == ["truncated"]
    # Structured content stays whole: the result is still valid for the tool's schema.
    assert json.dumps(proxied.structured_content) == json.dumps(direct.structured_content)
    schema = results["proxy_tools"][tool].output_schema
    assert schema == results["direct_tools"][tool].output_schema
    if schema is not None:
        jsonschema.validate(proxied.structured_content, schema)
    # Every block where it was; only long text is shortened, to a preview of the same text.
    assert [b.type for b in proxied.content] == [b.type for b in direct.content]
    shortened = 0
    for d, p in zip(direct.content, proxied.content, strict=True):
        dt, pt = _text(d), _text(p)
        if dt is None or len(dt) < 2048:
            assert wire(p) == wire(d) or pt == dt + _note(pt)
            continue
        shortened += 1
        assert len(pt) < len(dt)
        head = pt.split(" ... [truncated", 1)[0]
        assert dt.startswith(head) and len(head) > 1000
    # (unschema_structured's bulk is its structured content, which stays whole.)
    assert shortened == sum(len(_text(b) or "") >= 2048 for b in direct.content)
    assert "output truncated" in "".join(_text(b) or "" for b in proxied.content)
    # The artifact holds the whole result: every text and the structured content, unchanged.
    stored = json.loads((results["home"] / art["path"]).read_text())
    assert len(json.dumps(stored, ensure_ascii=False, separators=(",", ":"))) == art["chars"]
    assert stored.get("structuredContent") == direct.structured_content
    assert [_text_of_wire(b) for b in stored["content"]] == [_text(b) for b in direct.content]


def test_upstream_meta_and_every_result_field_are_handed_on(results: dict[str, Any]) -> None:
    """The upstream result's own ``_meta`` (beside the proxy's ``tooltrace/*`` keys), a block's
    ``_meta``, annotations and structured content reach the client as the upstream sent them,
    on the structured path and on the one-text-block short path."""
    for direct, proxied in zip(results["direct_meta"], results["proxied_meta"], strict=True):
        d = direct.model_dump(by_alias=True, exclude_none=True, mode="json")
        p = proxied.model_dump(by_alias=True, exclude_none=True, mode="json")
        assert d["_meta"] and d["_meta"]["example.org/trace"].startswith("t-00")
        ours = {k: v for k, v in p["_meta"].items() if k.startswith("tooltrace/")}
        assert ours["tooltrace/status"] == "ok"
        assert {k: v for k, v in p["_meta"].items() if k not in ours} == d["_meta"]
        d.pop("_meta")
        p.pop("_meta")
        assert p == d
    rich = results["proxied_meta"][0].model_dump(by_alias=True, exclude_none=True, mode="json")
    assert rich["content"][0]["_meta"] == {"example.org/block": 1}
    assert rich["content"][0]["annotations"] == {"audience": ["user"]}
    assert rich["structuredContent"] == {"count": 10}


def test_secrets_are_redacted_in_place(results: dict[str, Any]) -> None:
    res = results["secret"]
    assert [b.type for b in res.content] == ["text"]
    assert "AKIA" not in wire(res).decode()
    assert res.content[0].text.endswith("\nok")
    assert res.structured_content["password"].startswith("[REDACTED")
    assert set(res.structured_content) == {"note", "password"}
    # The change is marked in _meta, and only there.
    assert res.meta["tooltrace/changed"] == ["redacted"]
    assert res.meta["tooltrace/status"] == "ok"


def test_unknown_tool_is_a_json_rpc_error_and_is_audited(results: dict[str, Any]) -> None:
    exc = results["unknown"]
    assert exc.code == -32602 and "no_such_tool" in exc.message
    assert not results["after_unknown"].is_error  # the session goes on
    rows = [r for r in audit_rows(results["home"]).values() if r["reject_stage"] == "resolve"]
    assert [(r["status"], r["tool"]) for r in rows] == [("rejected", "_unregistered")]
    assert audit_rows(results["home"])[call_id(results["after_unknown"])]["status"] == "ok"


def _text(block: Any) -> str | None:
    if block.type == "text":
        return str(block.text)
    resource = getattr(block, "resource", None)
    return getattr(resource, "text", None)


def _text_of_wire(block: dict[str, Any]) -> str | None:
    if block["type"] == "text":
        return str(block["text"])
    return (block.get("resource") or {}).get("text")


def _note(text: str | None) -> str:
    return "" if text is None or "\n\n[tooltrace" not in text else text[text.index("\n\n[tool"):]


def test_operation_durations_are_measured_with_closed_labels(results: dict[str, Any]) -> None:
    metrics = results["metrics"]
    calls = len(CASES) + len(META_TOOLS) + 2  # secret_text and the call after the unknown
    assert ('tooltrace_mcp_client_operation_duration_seconds_count{error_type="",'
            f'method="tools/call",server="rich"}} {calls}.0') in metrics
    assert ('tooltrace_mcp_server_operation_duration_seconds_count{error_type="",'
            f'method="tools/call"}} {calls}.0') in metrics
    assert ('tooltrace_mcp_server_operation_duration_seconds_count{error_type="-32602",'
            'method="tools/call"} 1.0') in metrics
    assert "no_such_tool" not in metrics


def test_the_mcp_metrics_pass_the_promtool_lint(results: dict[str, Any]) -> None:
    """promtool is a component (``support.components``): missing, this fails under CI=true."""
    lint = subprocess.run([promtool_binary(), "check", "metrics"], input=results["metrics"],
                          text=True, capture_output=True, timeout=60)
    assert "mcp_" not in lint.stdout + lint.stderr, lint.stdout + lint.stderr
