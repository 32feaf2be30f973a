"""A hand-written agent loop on the OpenAI, Anthropic and Gemini APIs (and MCP's shapes).

No SDK and no network: each provider is played by a scripted fake that answers in the
provider's own JSON and remembers what it was sent, so the tests check what the model reads.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.bypass import deny_all, touch
from support.components import extra, require_module
from support.integrations import (
    SECRET,
    STARTED,
    STOPPED,
    aadd,
    add,
    explode,
    leak,
    slow,
    unsure,
    wait,
    wait_for,
)

from tooltrace import (
    ApprovalDecision,
    ApprovalRequest,
    MalformedCallError,
    Policy,
    RegistrationError,
    RequireApproval,
    Stage,
    Status,
    ToolRegistry,
    tool,
)
from tooltrace.integrations.providers import (
    ProviderCall,
    ProviderCallError,
    acall_from,
    call_from,
    read_call,
    result_message,
    result_turn,
    tool_specs,
)
from tooltrace.model import Principal
from tooltrace.telemetry.audit import AuditSink, AuditStore
from tooltrace.testing import RecordingSink

FORMATS = ["openai", "openai-responses", "anthropic", "gemini", "mcp"]
SCHEMA_KEY = {"openai": None, "openai-responses": "parameters", "anthropic": "input_schema",
              "gemini": "parametersJsonSchema", "mcp": "inputSchema"}


class SDKObject:
    """Stands in for a provider SDK's pydantic object: all the adapter uses is ``model_dump``."""

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def model_dump(self, *, mode: str = "python", exclude_none: bool = False) -> dict[str, Any]:
        return {k: v for k, v in self._fields.items() if v is not None or not exclude_none}


def provider_call(fmt: str, name: str, args: dict[str, Any], pid: str) -> dict[str, Any]:
    """A tool call in the provider's JSON, as its API returns it."""
    text = json.dumps(args)
    if fmt == "openai":
        return {"id": pid, "type": "function", "function": {"name": name, "arguments": text}}
    if fmt == "openai-responses":
        return {"type": "function_call", "id": "fc_1", "call_id": pid, "name": name,
                "arguments": text}
    if fmt == "anthropic":
        return {"type": "tool_use", "id": pid, "name": name, "input": args}
    if fmt == "gemini":
        return {"functionCall": {"id": pid, "name": name, "args": args}}
    return {"jsonrpc": "2.0", "id": pid, "method": "tools/call",
            "params": {"name": name, "arguments": args}}


class FakeProvider:
    """A scripted model behind a provider's API: the first turn makes ``calls``, the second
    answers "done"; every request's messages are kept."""

    def __init__(self, fmt: str, calls: list[tuple[str, dict[str, Any], str]]) -> None:
        self.fmt = fmt
        self.calls = calls
        self.seen: list[list[Any]] = []

    def respond(self, messages: list[Any]) -> tuple[list[Any], Any]:
        """``(tool calls, the assistant turn to append)``."""
        self.seen.append(json.loads(json.dumps(messages)))
        calls = [provider_call(self.fmt, *c) for c in self.calls] if len(self.seen) == 1 else []
        if self.fmt == "anthropic":
            return calls, {"role": "assistant", "content": calls or [{"type": "text",
                                                                      "text": "done"}]}
        if self.fmt == "gemini":
            return calls, {"role": "model", "parts": calls or [{"text": "done"}]}
        if self.fmt == "openai":
            return calls, {"role": "assistant", "content": None if calls else "done",
                           "tool_calls": calls or None}
        return calls, calls or [{"type": "message", "content": "done"}]


def agent_loop(reg: ToolRegistry, fake: FakeProvider) -> list[Any]:
    """The hand-written loop: ask, run the tool calls through the registry, answer, repeat."""
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for _ in range(4):
        calls, turn = fake.respond(messages)
        messages.extend(turn if isinstance(turn, list) else [turn])
        if not calls:
            return messages
        envs = [call_from(reg, c) for c in calls]
        messages.extend(result_turn(envs, fake.fmt))
    raise AssertionError("the loop did not end")


def result_text(item: dict[str, Any]) -> str:
    """The text the model reads in one result item, whatever the format."""
    for key in ("content", "output"):
        if isinstance(item.get(key), str):
            return str(item[key])
    if "functionResponse" in item:
        resp = item["functionResponse"]["response"]
        return str(resp.get("error", resp.get("output")))
    return str(item["content"][0]["text"])


# -- tool specs --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_specs_give_the_visible_tools_in_order_with_stable_bytes(
    make_registry: Callable[..., ToolRegistry], fmt: Any,
) -> None:
    reg = make_registry(leak, add, touch, aadd)
    other = make_registry(aadd, touch, add, leak)  # registered in another order
    for mode in ("default", "plan"):
        specs = tool_specs(reg, mode, format=fmt)
        visible = reg.visible_tools(mode).visible
        names = [s["function"]["name"] if fmt == "openai" else s["name"] for s in specs]
        assert names == [d.name for d in visible]
        for s, d in zip(specs, visible, strict=True):
            key = SCHEMA_KEY[fmt]
            schema = s["function"]["parameters"] if key is None else s[key]
            assert schema == d.parameters
        blob = orjson.dumps(specs)
        assert blob == orjson.dumps(tool_specs(reg, mode, format=fmt))
        assert blob == orjson.dumps(tool_specs(other, mode, format=fmt))
    assert "touch" not in orjson.dumps(tool_specs(reg, "plan", format=fmt)).decode()


def test_tool_specs_refuse_names_a_provider_would_refuse(
    make_registry: Callable[..., ToolRegistry],
) -> None:
    @tool("notes.search")
    def search(q: str) -> str:
        """A dotted name: fine for tooltrace, Gemini and MCP; not for OpenAI or Anthropic."""
        return q

    reg = make_registry(search)
    for fmt in ("openai", "openai-responses", "anthropic"):
        with pytest.raises(RegistrationError, match=r"notes\.search"):
            tool_specs(reg, format=fmt)  # type: ignore[arg-type]
    assert tool_specs(reg, format="gemini")[0]["name"] == "notes.search"
    assert tool_specs(reg, format="mcp")[0]["name"] == "notes.search"
    with pytest.raises(ValueError, match="format"):
        tool_specs(reg, format="cohere")  # type: ignore[arg-type]


# -- reading the providers' tool calls ---------------------------------------------------------


SHAPES: list[tuple[str, Any, str]] = [
    ("openai", provider_call("openai", "add", {"a": 2, "b": 3}, "call_o1"), "call_o1"),
    ("openai", SDKObject(id="call_o2", type="function",
                         function={"name": "add", "arguments": '{"a": 2, "b": 3}'}), "call_o2"),
    ("openai-responses", provider_call("openai-responses", "add", {"a": 2, "b": 3}, "call_r1"),
     "call_r1"),
    ("anthropic", provider_call("anthropic", "add", {"a": 2, "b": 3}, "toolu_01A09q90qw90"),
     "toolu_01A09q90qw90"),
    ("anthropic", SDKObject(type="tool_use", id="toolu_02", name="add", input={"a": 2, "b": 3},
                            caller=None), "toolu_02"),
    ("gemini", provider_call("gemini", "add", {"a": 2, "b": 3}, "g-1"), "g-1"),
    ("gemini", SDKObject(function_call={"id": "g-2", "name": "add", "args": {"a": 2, "b": 3}},
                         text=None), "g-2"),
    ("gemini", SDKObject(id="g-3", name="add", args={"a": 2, "b": 3}), "g-3"),
    ("mcp", provider_call("mcp", "add", {"a": 2, "b": 3}, "7"), "7"),
    ("mcp", {"jsonrpc": "2.0", "id": 8, "method": "tools/call",
             "params": {"name": "add", "arguments": {"a": 2, "b": 3}}}, "8"),
    ("openai", json.dumps(provider_call("openai", "add", {"a": 2, "b": 3}, "call_o3")),
     "call_o3"),
]


@pytest.mark.parametrize(("fmt", "raw", "pid"), SHAPES)
def test_a_provider_tool_call_runs_as_it_comes_and_keeps_its_id(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, fmt: str, raw: Any,
    pid: str,
) -> None:
    reg = make_registry(add)
    env = call_from(reg, raw)
    assert env.status is Status.OK and env.data == 5
    (rec,) = sink.records
    assert rec.attributes["provider.tool_call_id"] == pid
    assert rec.attributes["tooltrace.integration"] == fmt
    assert uuid.UUID(env.call_id).version == 7 and env.call_id != pid
    msg = result_message(env)  # the format and the id come from the call
    assert pid in orjson.dumps(msg).decode() or fmt == "mcp"


def test_the_callers_principal_goes_on_the_call(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink,
) -> None:
    reg = make_registry(add)
    p = Principal(user="ann", agent="loop", roles=("dev",))
    raw = provider_call("anthropic", "add", {"a": 2, "b": 3}, "toolu_p")
    assert call_from(reg, raw, principal=p).ok
    assert asyncio.run(acall_from(reg, raw, principal=p)).ok
    assert [r.principal for r in sink.records] == [p, p]
    leaky = Principal(user="AKIA" + "Z7QF3EXAMPLE4DMO")
    env = call_from(reg, raw, run_id="other", principal=leaky)
    assert env.status is Status.REJECTED and env.record.principal is None
    msg = result_message(env, "anthropic", tool_call_id="toolu_p")
    assert "AKIA" not in orjson.dumps(msg).decode()


def test_a_real_openai_sdk_object_is_read(make_registry: Callable[..., ToolRegistry]) -> None:
    require_module("openai", extra("openai-agents"))
    from openai.types.chat import ChatCompletionMessageFunctionToolCall

    tc = ChatCompletionMessageFunctionToolCall(
        id="call_sdk", type="function", function={"name": "add", "arguments": '{"a":1,"b":2}'})
    env = call_from(make_registry(add), tc)
    assert env.data == 3 and result_message(env, "openai")["tool_call_id"] == "call_sdk"


@pytest.mark.parametrize("raw", [
    None, 1, [], {}, "not json", b"\xff", {"type": "tool_use"}, {"function": "add"},
    {"functionCall": {"name": 3}}, {"type": "tool_use", "name": "", "input": {}},
    {"method": "tools/call", "params": "add"}, {"type": "tool_use", "id": ["x"], "name": "add"},
    {"type": "message", "content": "hi"},
])
def test_what_is_no_tool_call_raises_a_typed_error(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, raw: Any,
) -> None:
    reg = make_registry(add)
    with pytest.raises(ProviderCallError) as info:
        call_from(reg, raw)
    assert isinstance(info.value, MalformedCallError)
    assert info.value.reason in ("shape", "name", "json")
    assert sink.records == []


@pytest.mark.parametrize(("arguments", "reason", "hint"), [
    ('{"a": 2, "b":', "json", "not valid JSON"),
    ("[1, 2]", "shape", "arguments must be an object"),
    ('{"a": 1, "b": ' + "[" * 70 + "]" * 70 + "}", "too_deep", "nested too deeply"),
])
def test_bad_arguments_come_back_rejected_to_the_model(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, arguments: str,
    reason: str | None, hint: str,
) -> None:
    reg = make_registry(add)
    raw = {"id": "call_bad", "type": "function", "function": {"name": "add",
                                                               "arguments": arguments}}
    env = call_from(reg, raw)
    assert (env.status, env.reject_stage) == (Status.REJECTED, Stage.PARAMS)
    (rec,) = sink.records
    assert rec.attributes["provider.tool_call_id"] == "call_bad" and rec.tool == "add"
    assert rec.attributes.get("provider.arguments_error") == reason
    msg = result_message(env, "openai")
    assert msg["tool_call_id"] == "call_bad" and msg["content"].startswith("Error: ")
    assert hint in msg["content"]


def test_read_call_says_what_it_read() -> None:
    pc = read_call(provider_call("anthropic", "add", {"a": 1, "b": 2}, "toolu_9"))
    assert pc == ProviderCall("anthropic", "toolu_9", "add", {"a": 1, "b": 2})
    pc = read_call({"id": "c", "type": "function", "function": {"name": "add",
                                                                "arguments": "{oops"}})
    assert (pc.arguments, pc.arguments_error) == ("{oops", "json")
    pc = read_call({"functionCall": {"name": "add", "args": {"a": 1}}})  # no id: older Gemini
    assert pc.id is None and pc.format == "gemini"


# -- results for the model ---------------------------------------------------------------------


def test_result_messages_in_each_providers_shape(
    make_registry: Callable[..., ToolRegistry],
) -> None:
    reg = make_registry(add, hooks=[])
    ok = call_from(reg, provider_call("anthropic", "add", {"a": 1, "b": 2}, "toolu_ok"))
    bad = call_from(reg, provider_call("anthropic", "nope", {}, "toolu_bad"))
    assert result_message(ok) == {"type": "tool_result", "tool_use_id": "toolu_ok",
                                  "content": "3", "is_error": False}
    err = result_message(bad)
    assert err["is_error"] is True and err["tool_use_id"] == "toolu_bad"
    assert err["content"].startswith("Error: nope was rejected (resolve): unknown tool.")
    assert result_message(ok, "openai") == {"role": "tool", "tool_call_id": "toolu_ok",
                                            "content": "3"}
    assert result_message(ok, "openai-responses") == {
        "type": "function_call_output", "call_id": "toolu_ok", "output": "3"}
    g_ok, g_bad = result_message(ok, "gemini"), result_message(bad, "gemini")
    assert g_ok == {"functionResponse": {"name": "add", "id": "toolu_ok",
                                         "response": {"output": "3"}}}
    # A reply about a tool that does not exist still names the tool the model asked for.
    assert g_bad["functionResponse"]["name"] == "nope"
    assert g_bad["functionResponse"]["response"] == {"error": err["content"]}
    m_ok, m_bad = result_message(ok, "mcp"), result_message(bad, "mcp")
    assert m_ok["content"] == [{"type": "text", "text": "3"}] and m_ok["isError"] is False
    assert m_bad["isError"] is True and m_ok["_meta"]["tooltrace/call_id"] == ok.call_id
    assert result_message(ok, "openai", tool_call_id="other")["tool_call_id"] == "other"
    assert result_turn([ok, bad], "anthropic") == [
        {"role": "user", "content": [result_message(ok), err]}]
    assert result_turn([ok, bad], "gemini") == [{"role": "user", "parts": [g_ok, g_bad]}]
    assert result_turn([ok, bad], "openai") == [result_message(ok, "openai"),
                                                result_message(bad, "openai")]
    assert result_turn([]) == []
    # The registry's own envelope (no provider id) needs one for the providers that key on it.
    from tooltrace import ToolCall
    plain_env = reg.call(ToolCall("add", {"a": 1, "b": 1}))
    with pytest.raises(ValueError, match="tool_call_id"):
        result_message(plain_env, "anthropic")
    with pytest.raises(ValueError, match="format"):
        result_message(plain_env)


def test_structured_results_stay_structured_where_the_provider_takes_json(
    make_registry: Callable[..., ToolRegistry],
) -> None:
    @tool(execution="inline")
    def stats(n: int) -> dict[str, int]:
        """A structured result."""
        return {"n": n, "square": n * n}

    env = call_from(make_registry(stats), provider_call("gemini", "stats", {"n": 3}, "g"))
    assert result_message(env)["functionResponse"]["response"] == {
        "output": {"n": 3, "square": 9}}
    assert result_message(env, "mcp")["structuredContent"] == {"n": 3, "square": 9}
    assert json.loads(result_message(env, "openai")["content"]) == {"n": 3, "square": 9}


@pytest.mark.parametrize("approved", [True, False])
def test_approval_is_asked_before_the_tool_runs(
    make_registry: Callable[..., ToolRegistry], approved: bool,
) -> None:
    def approver(req: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved, "ops", "" if approved else "not during the freeze")

    reg = make_registry(add, policy=Policy(rules=[RequireApproval(tools=frozenset({"add"}))]),
                        approver=approver)
    env = call_from(reg, provider_call("anthropic", "add", {"a": 1, "b": 2}, "toolu_ap"))
    msg = result_message(env)
    if approved:
        assert (env.status, msg["content"], msg["is_error"]) == (Status.OK, "3", False)
    else:
        assert (env.status, env.reject_stage) == (Status.REJECTED, Stage.APPROVAL)
        assert msg["is_error"] is True and env.summary.rstrip(".") in msg["content"]


# -- statuses, redaction, through the loop -----------------------------------------------------


def _cancel_when_started(reg: ToolRegistry) -> threading.Thread:
    before = len(STARTED)

    def go() -> None:
        wait_for(lambda: len(STARTED) > before)
        reg.cancel_call(STARTED[-1])

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize(("name", "args", "status"), [
    ("add", {"a": "two", "b": 3}, Status.REJECTED),
    ("explode", {}, Status.FAILED),
    ("unsure", {}, Status.UNKNOWN),
    ("wait", {"seconds": 30}, Status.CANCELLED),
])
@pytest.mark.parametrize("fmt", ["openai", "anthropic", "gemini"])
def test_every_other_status_reaches_the_model_as_the_providers_tool_error(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, fmt: str, name: str,
    args: dict[str, Any], status: Status,
) -> None:
    reg = make_registry(add, explode, unsure, wait)
    canceller = _cancel_when_started(reg) if status is Status.CANCELLED else None
    fake = FakeProvider(fmt, [(name, args, "id_1")])
    agent_loop(reg, fake)
    if canceller is not None:
        canceller.join(5)
    (rec,) = sink.records
    assert rec.status is status
    sent = fake.seen[1][-1]  # the turn after the call: what the model was sent
    item = {"anthropic": lambda: sent["content"][0], "gemini": lambda: sent["parts"][0],
            "openai": lambda: sent}[fmt]()
    text = result_text(item)
    assert text.startswith("Error: ") and rec.summary.rstrip(".") in text
    assert SECRET not in json.dumps(fake.seen)
    if fmt == "anthropic":
        assert item["is_error"] is True and item["tool_use_id"] == "id_1"
    elif fmt == "gemini":
        assert "error" in item["functionResponse"]["response"]
    else:
        assert item["tool_call_id"] == "id_1"


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_model_reads_the_redacted_trimmed_result(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, fmt: str,
) -> None:
    reg = make_registry(leak)
    fake = FakeProvider(fmt, [("leak", {}, "id_L")])
    agent_loop(reg, fake)
    (rec,) = sink.records
    assert rec.artifact is not None
    sent = json.dumps(fake.seen)
    assert SECRET not in sent and "[REDACTED:openai_key]" in sent
    assert f"artifact {rec.artifact.path}" in sent
    assert len(sent) < reg.preview_chars + 1500  # the preview, not the 40,000 characters


# -- spans, parallel calls, cancellation -------------------------------------------------------


def test_one_span_per_call_under_the_applications_span(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, otel: Any,
) -> None:
    reg = make_registry(add, aadd, sinks=[sink, otel.sink])
    tracer = otel.provider.get_tracer("loop")
    with tracer.start_as_current_span("chat turn"):
        call_from(reg, provider_call("openai", "add", {"a": 1, "b": 2}, "s1"))

    async def turn() -> None:
        with tracer.start_as_current_span("chat turn"):
            await acall_from(reg, provider_call("anthropic", "aadd", {"a": 1, "b": 2}, "s2"))

    asyncio.run(turn())
    parents = {s.context.span_id: s for s in otel.spans() if s.name == "chat turn"}
    spans = otel.tool_spans()
    assert sorted(s.name for s in spans) == ["execute_tool aadd", "execute_tool add"]
    for s in spans:
        assert s.parent is not None and s.parent.span_id in parents
        assert s.context.trace_id == parents[s.parent.span_id].context.trace_id
    assert sorted(s.attributes["provider.tool_call_id"] for s in spans) == ["s1", "s2"]
    assert len({s.parent.span_id for s in spans if s.parent}) == 2


def test_parallel_calls_keep_their_own_call_ids_and_audit_rows(
    make_registry: Callable[..., ToolRegistry], tmp_path: Path,
) -> None:
    home = tmp_path / "audit-home"
    rec = RecordingSink()
    reg = make_registry(slow, sinks=[rec, AuditSink(home)])
    calls = [provider_call("openai", "slow", {"seconds": 0.4}, f"p{i}") for i in range(3)]

    async def turn() -> list[Any]:
        return list(await asyncio.gather(*(acall_from(reg, c) for c in calls)))

    envs = asyncio.run(turn())
    # They overlapped: every call started before any of them ended.
    spans = [(e.record.started_at_us, e.record.started_at_us + e.record.elapsed_us) for e in envs]
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans
    msgs = result_turn(envs, "openai")
    assert [m["tool_call_id"] for m in msgs] == ["p0", "p1", "p2"]
    assert len({e.call_id for e in envs}) == 3
    reg.shutdown(5.0)
    with AuditStore(home) as store:
        assert store.counts()["calls"] == 3
        for env, pid in zip(envs, ["p0", "p1", "p2"], strict=True):
            row = store.call(env.call_id).record
            assert row is not None and row["status"] == "ok"
            attrs = row["attributes"]
            attrs = orjson.loads(attrs) if isinstance(attrs, str | bytes) else attrs
            assert attrs["provider.tool_call_id"] == pid


@pytest.mark.parametrize("fn", [slow, wait])
def test_cancelling_the_awaiting_task_cancels_the_call(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, fn: Any,
) -> None:
    reg = make_registry(fn)
    before = len(STARTED)
    raw = provider_call("anthropic", fn.definition.name, {"seconds": 30}, "toolu_c")

    async def main() -> None:
        task = asyncio.ensure_future(acall_from(reg, raw))
        deadline = time.monotonic() + 5
        while len(STARTED) == before and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert len(STARTED) > before, "the tool did not start"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (rec,) = sink.records  # recorded before the cancel went on
    assert rec.status is Status.CANCELLED
    assert {"cancel_requested", "cancelled"} <= {s.step for s in rec.steps}
    assert rec.call_id in STOPPED


# -- the bypass test, for a hand-written loop --------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_always_block_hook_stops_the_side_effect_in_a_hand_written_loop(
    make_registry: Callable[..., ToolRegistry], marker: Path, fmt: str,
) -> None:
    reg = make_registry(touch, hooks=[deny_all])
    fake = FakeProvider(fmt, [("touch", {"name": "x"}, "id_t")])
    agent_loop(reg, fake)
    assert not marker.exists()
    assert "blocked by hook deny_all: maintenance window" in json.dumps(fake.seen[1])


def test_the_side_effect_happens_without_the_hook(
    make_registry: Callable[..., ToolRegistry], marker: Path,
) -> None:
    # The positive control: the same loop does reach the side effect when nothing blocks it.
    agent_loop(make_registry(touch), FakeProvider("anthropic", [("touch", {"name": "x"}, "t")]))
    assert marker.read_text() == "x"
