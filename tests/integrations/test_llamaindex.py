"""The LlamaIndex adapter: tools wrapped so every call of a real ``FunctionAgent`` (driven by
``MockFunctionCallingLLM``, no network) goes through the registry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Watch
from support.bypass import deny_all, touch
from support.components import extra, require_module
from support.integrations import SECRET, add, explode, leak, unsure
from support.trail import assert_ids_were_minted

require_module("llama_index.core", extra("llamaindex"))

from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.base.llms.types import ToolCallBlock  # noqa: E402
from llama_index.core.llms import ChatMessage, MessageRole  # noqa: E402
from llama_index.core.llms.mock import MockFunctionCallingLLM  # noqa: E402
from llama_index.core.tools import FunctionTool, ToolMetadata, ToolOutput  # noqa: E402
from llama_index.core.tools.types import BaseTool  # noqa: E402
from llama_index.core.workflow import Context  # noqa: E402

from tooltrace import Mode, Policy, RegistrationError, Stage, Status, ToolRegistry, tool  # noqa: E402
from tooltrace.integrations.llamaindex import (  # noqa: E402
    TooltraceTool,
    adopt,
    as_llamaindex_tools,
    install_guard,
)
from tooltrace.model import Principal  # noqa: E402
from tooltrace.testing import RecordingSink  # noqa: E402

# FunctionAgent's constructor walks its members with inspect, reading pydantic's deprecated
# attributes: LlamaIndex's warnings, not ours.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect")


class Script:
    """A model that asks for ``calls`` in one turn (in parallel), then answers with what the
    tools told it; ``seen`` keeps each tool message it was shown."""

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        self.calls = calls
        self.seen: dict[str, str] = {}

    def __call__(self, messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        results = [m for m in messages if m.role == MessageRole.TOOL]
        if results:
            for m in results:
                self.seen[str(m.additional_kwargs.get("tool_call_id"))] = m.content or ""
            return ChatMessage(role="assistant", content="done")
        return ChatMessage(role="assistant", blocks=[
            ToolCallBlock(tool_call_id=f"c{i}", tool_name=name, tool_kwargs=kwargs)
            for i, (name, kwargs) in enumerate(self.calls)])


def run_agent(tools: list[Any], script: Script) -> str:
    agent = FunctionAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=script))

    async def go() -> str:
        return str(await agent.run(user_msg="go"))

    return asyncio.run(asyncio.wait_for(go(), 30))


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


async def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def test_agent_calls_run_through_the_registry(
        make_registry: Callable[..., ToolRegistry], sink: RecordingSink, watch: Watch) -> None:
    reg = make_registry(add, sinks=[sink, watch.trail])
    tools = as_llamaindex_tools(reg) + adopt(
        reg, [FunctionTool.from_defaults(fn=multiply), FunctionTool.from_defaults(fn=shout)])
    script = Script(("add", {"a": 1, "b": 2}), ("multiply", {"a": 3, "b": 4}),
                    ("shout", {"text": "hi"}), ("add", {"a": 5, "b": 5}))
    assert run_agent(tools, script) == "done"
    assert script.seen == {"c0": "3", "c1": "12", "c2": "HI", "c3": "10"}
    # One record per call, each with its own id, also for the two parallel calls of one tool.
    assert sorted(r.tool for r in sink.records) == ["add", "add", "multiply", "shout"]
    assert len({r.call_id for r in sink.records}) == 4
    assert all(r.status is Status.OK and r.attributes["tooltrace.integration"] == "llamaindex"
               for r in sink.records)
    assert_ids_were_minted(reg, watch.trail, "add", {"a": 1, "b": 1})  # named by the registry


def test_the_adapters_principal_goes_on_every_call(
        make_registry: Callable[..., ToolRegistry], sink: RecordingSink) -> None:
    reg = make_registry(add)
    p = Principal(user="ann", agent="analyst", tenant="acme")
    tools = as_llamaindex_tools(reg, principal=p) + adopt(
        reg, [FunctionTool.from_defaults(fn=multiply)], principal=p)
    script = Script(("add", {"a": 1, "b": 2}), ("multiply", {"a": 3, "b": 4}))
    assert run_agent(tools, script) == "done"
    assert script.seen == {"c0": "3", "c1": "12"}
    assert [r.principal for r in sink.records] == [p, p]
    # A principal that looks like a secret is refused like any other, and not recorded.
    (leaky,) = as_llamaindex_tools(reg, names=["add"],
                                   principal=Principal(user="AKIA" + "Z7QF3EXAMPLE4DMO"))
    out = leaky.call(a=1, b=1)
    assert out.is_error and "AKIA" not in str(out.content)
    assert sink.records[-1].status is Status.REJECTED and sink.records[-1].principal is None


def test_a_tool_the_agent_lacks_is_recorded_by_the_guard(
        make_registry: Callable[..., ToolRegistry], sink: RecordingSink) -> None:
    reg = make_registry(add)
    # LlamaIndex answers a name the agent does not have itself: nothing reaches the registry.
    script = Script(("nosuch_tool", {"q": "x"}), ("add", {"a": 1, "b": 2}))
    assert run_agent(as_llamaindex_tools(reg), script) == "done"
    assert [r.tool for r in sink.records] == ["add"]
    assert script.seen["c0"].startswith("Tool nosuch_tool not found.")
    uninstall = install_guard(reg, principal=Principal(user="ann"))
    try:
        script = Script(("nosuch_tool", {"q": "x"}), ("add", {"a": 1, "b": 2}))
        assert run_agent(as_llamaindex_tools(reg), script) == "done"
    finally:
        uninstall()
    rec = next(r for r in sink.records if r.attributes.get("provider.tool_name"))
    assert (rec.status, rec.reject_stage, rec.args_redacted) == (
        Status.REJECTED, Stage.RESOLVE, {"q": "x"})
    assert rec.attributes["provider.tool_call_id"] == "c0"
    assert rec.principal == Principal(user="ann")
    assert script.seen["c0"].startswith("Tool nosuch_tool not found.")  # LlamaIndex's answer
    assert sorted(r.tool for r in sink.records) == ["_unregistered", "add", "add"]
    # Removed, it records nothing more.
    run_agent(as_llamaindex_tools(reg), Script(("nosuch_tool", {})))
    assert len(sink.records) == 3


def test_every_failure_reaches_the_model_as_a_tool_error(
        make_registry: Callable[..., ToolRegistry], sink: RecordingSink) -> None:
    @tool(capability="write", effect="local")
    def save(text: str) -> str:
        """Save a text."""
        return "saved"

    policy = Policy(modes=[Mode("default"), Mode("review", tools=frozenset({"add", "explode",
                                                                          "unsure", "save"}))])
    reg = make_registry(add, explode, unsure, save, policy=policy)
    tools = as_llamaindex_tools(reg, "review")
    script = Script(("add", {"a": "one"}), ("explode", {}), ("unsure", {}),
                    ("save", {"text": "x"}))
    reg.policy.modes["review"] = Mode("review", tools=frozenset({"add", "explode", "unsure"}))
    assert run_agent(tools, script) == "done"  # the run goes on: the model can correct itself
    by_tool = {r.tool: r for r in sink.records}
    assert (by_tool["add"].status, by_tool["add"].reject_stage) == (Status.REJECTED,
                                                                    Stage.PARAMS)
    assert by_tool["explode"].status is Status.FAILED
    assert by_tool["unsure"].status is Status.UNKNOWN
    assert (by_tool["save"].status, by_tool["save"].reject_stage) == (Status.REJECTED,
                                                                      Stage.POLICY)
    for i, name in enumerate(["add", "explode", "unsure", "save"]):
        assert script.seen[f"c{i}"].startswith(f"Error: {by_tool[name].summary}")
    assert SECRET not in script.seen["c1"]


def test_the_model_sees_the_redacted_trimmed_result(
        make_registry: Callable[..., ToolRegistry], sink: RecordingSink) -> None:
    reg = make_registry(leak, max_inline_chars=4096)
    (wrapped,) = as_llamaindex_tools(reg)
    out = wrapped.call(chars=20_000)
    rec = sink.records[0]
    assert rec.artifact is not None and not out.is_error
    assert SECRET not in out.content and "[REDACTED" in out.content
    assert len(out.content) < 6000 and rec.artifact.sha256[:16] in out.content
    assert out.raw_output == rec.result_preview


def test_sync_async_and_positional_calls(make_registry: Callable[..., ToolRegistry],
                                         sink: RecordingSink) -> None:
    @tool()
    def echo(text: str) -> str:
        """Echo."""
        return text

    reg = make_registry(add, echo)
    wrapped = {t.metadata.name: t for t in as_llamaindex_tools(reg)}
    assert wrapped["add"].call(a=1, b=1).content == "2"
    assert asyncio.run(wrapped["add"].acall(a=2, b=2)).content == "4"
    assert wrapped["echo"]("positional").content == "positional"  # LlamaIndex's one-arg form
    assert wrapped["add"].call({"a": 3, "b": 3}).content == "6"
    bad = wrapped["add"].call(1, 2)
    assert bad.is_error and sink.records[-1].reject_stage is Stage.PARAMS
    assert wrapped["add"].metadata.get_parameters_dict() == dict(
        reg.definition("add").parameters)  # type: ignore[union-attr]


def test_adopt_keeps_the_schema_and_checks_it(make_registry: Callable[..., ToolRegistry]
                                              ) -> None:
    reg = make_registry()
    original = FunctionTool.from_defaults(fn=multiply, return_direct=True)
    (wrapped,) = adopt(reg, [original])
    assert isinstance(wrapped, TooltraceTool)
    assert wrapped.metadata.get_parameters_dict() == original.metadata.get_parameters_dict()
    assert wrapped.metadata.to_openai_tool() == original.metadata.to_openai_tool()
    assert wrapped.metadata.fn_schema_str == original.metadata.fn_schema_str  # ReAct's prompt
    assert wrapped.metadata.return_direct

    class Broken(BaseTool):
        @property
        def metadata(self) -> ToolMetadata:
            return _BrokenMeta(description="broken", name="broken")

        def __call__(self, input: Any) -> ToolOutput:
            raise AssertionError("never called")

    with pytest.raises(RegistrationError):
        adopt(reg, [Broken()])
    assert reg.definition("broken") is None

    with pytest.raises(RegistrationError, match="Context"):
        adopt(reg, [FunctionTool.from_defaults(fn=needs_ctx)])


async def needs_ctx(ctx: Context, x: int) -> int:
    """A tool that needs the workflow context."""
    return x


# Resolved here: LlamaIndex reads the annotation object (this module postpones annotations).
needs_ctx.__annotations__["ctx"] = Context


class _BrokenMeta(ToolMetadata):
    def get_parameters_dict(self) -> dict[str, Any]:
        return {"type": "object", "properties": {"a": {"type": "no-such-type"}}}


def test_spans_nest_under_the_applications_span(
        make_registry: Callable[..., ToolRegistry], sink: RecordingSink, otel: Any) -> None:
    reg = make_registry(add, sinks=[sink, otel.sink])
    script = Script(("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4}))
    tracer = otel.provider.get_tracer("app")
    with tracer.start_as_current_span("agent run") as span:
        run_agent(as_llamaindex_tools(reg), script)
    parent = span.get_span_context()
    assert len(sink.records) == 2
    for r in sink.records:
        assert (r.trace_id, r.parent_span_id) == (f"{parent.trace_id:032x}",
                                                  f"{parent.span_id:016x}")
    assert len(otel.tool_spans()) == 2  # one span per call


def test_a_cancelled_run_follows_the_cancel_contract(
        make_registry: Callable[..., ToolRegistry], sink: RecordingSink) -> None:
    started = asyncio.Event()

    @tool(effect="local")
    async def slow(seconds: float) -> str:
        """Sleep (a cancel lands in the sleep and confirms the stop)."""
        started.set()
        await asyncio.sleep(seconds)
        return "slept"

    reg = make_registry(slow)
    script = Script(("slow", {"seconds": 30}))
    agent = FunctionAgent(tools=as_llamaindex_tools(reg),
                          llm=MockFunctionCallingLLM(response_generator=script))

    async def go() -> None:
        handler = agent.run(user_msg="go")
        await asyncio.wait_for(started.wait(), 10)
        await handler.cancel_run()
        for _ in range(200):
            if sink.records:
                return
            await asyncio.sleep(0.02)

    asyncio.run(asyncio.wait_for(go(), 30))
    (rec,) = sink.records
    assert rec.status is Status.CANCELLED and rec.execution_started


def test_always_block_hook_stops_the_agents_tool(
        make_registry: Callable[..., ToolRegistry], sink: RecordingSink, marker: Path) -> None:
    reg = make_registry(touch, hooks=[deny_all])
    script = Script(("touch", {"name": "x"}))
    assert run_agent(as_llamaindex_tools(reg), script) == "done"
    assert not marker.exists()
    (rec,) = sink.records
    assert (rec.status, rec.reject_stage) == (Status.REJECTED, Stage.HOOK)
    assert script.seen["c0"].startswith(f"Error: {rec.summary}")
    assert "maintenance window" in script.seen["c0"]
