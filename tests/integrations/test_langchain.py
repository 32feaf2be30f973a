"""The LangChain / LangGraph adapter, driven through the real framework with a scripted fake model.

``create_agent`` (middleware), a LangGraph ``StateGraph`` with ``ToolNode(wrap_tool_call=...)``,
registry tools as ``StructuredTool``s, and LangChain tools adopted by the registry. No network:
``GenericFakeChatModel`` plays the model (its ``bind_tools`` returns itself).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import orjson
import pytest
from conftest import Watch
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
from support.trail import assert_ids_were_minted

require_module("langchain", extra("langchain"))
require_module("langgraph", extra("langchain"))

from langchain.agents import create_agent  # noqa: E402
from langchain.tools import InjectedState  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage  # noqa: E402
from langchain_core.tools import StructuredTool, ToolException  # noqa: E402
from langchain_core.tools import tool as lc_tool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from pydantic import Field  # noqa: E402

from tooltrace import (  # noqa: E402
    ApprovalDecision,
    ApprovalRequest,
    Capability,
    Effect,
    HookDecision,
    HookView,
    Policy,
    RegistrationError,
    RequireApproval,
    Stage,
    Status,
    ToolRegistry,
    hook,
)
from tooltrace.integrations.langchain import (  # noqa: E402
    TooltraceMiddleware,
    adopt,
    as_langchain_tools,
    tool_node,
)
from tooltrace.model import Principal  # noqa: E402
from tooltrace.telemetry.audit import AuditSink, AuditStore  # noqa: E402
from tooltrace.testing import RecordingSink  # noqa: E402


class ScriptedModel(GenericFakeChatModel):
    """A fake chat model that accepts tools, remembers the tools it was offered and every
    conversation it was sent, and answers from its script."""

    offered: list[dict[str, Any]] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        self.offered[:] = [convert_to_openai_tool(t) for t in tools]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def script(*calls: tuple[str, dict[str, Any], str]) -> ScriptedModel:
    """A model that makes ``calls`` (name, args, id) in one turn, then answers "done"."""
    first = AIMessage("", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls])
    return ScriptedModel(messages=iter([first, AIMessage("done")]))


def run(agent: Any, how: str) -> dict[str, Any]:
    """Invoke the agent synchronously or on an event loop."""
    inp = {"messages": [("user", "go")]}
    if how == "ainvoke":
        out: dict[str, Any] = asyncio.run(agent.ainvoke(inp))
        return out
    res: dict[str, Any] = agent.invoke(inp)
    return res


def tool_messages(out: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


def middleware_agent(reg: ToolRegistry, model: ScriptedModel, **kw: Any) -> Any:
    return create_agent(model, middleware=[TooltraceMiddleware(reg, **kw)])


def graph_agent(reg: ToolRegistry, model: ScriptedModel, tools: list[Any] | None = None) -> Any:
    """A hand-built LangGraph graph: model node, ToolNode with the middleware's wrappers."""
    if tools is None:
        node = tool_node(reg)
        bound = model.bind_tools(list(node.tools_by_name.values()))
    else:
        mw = TooltraceMiddleware(reg, expose_tools=False)
        node = ToolNode(tools, wrap_tool_call=mw.wrap_tool_call,
                        awrap_tool_call=mw.awrap_tool_call)
        bound = model.bind_tools(tools)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("model", call_model)
    g.add_node("tools", node)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "model")
    return g.compile()


# -- the tools the model sees ------------------------------------------------------------------


def test_the_model_is_offered_the_registry_tools_with_their_names_and_schemas(
    make_registry: Callable[..., ToolRegistry],
) -> None:
    reg = make_registry(add, aadd, leak, touch)
    for mode in ("default", "plan"):
        model = ScriptedModel(messages=iter([AIMessage("done")]))
        middleware_agent(reg, model, mode=mode).invoke({"messages": [("user", "hi")]})
        visible = reg.visible_tools(mode).visible
        assert [t["function"]["name"] for t in model.offered] == [d.name for d in visible]
        for spec, d in zip(model.offered, visible, strict=True):
            assert spec["function"]["parameters"] == d.parameters
            assert spec["function"]["description"] == d.description
    assert "touch" not in [t["function"]["name"] for t in model.offered]  # plan: read-only


# -- one call, through the registry ------------------------------------------------------------


@pytest.mark.parametrize(("how", "fn"), [("invoke", add), ("ainvoke", add), ("invoke", aadd),
                                         ("ainvoke", aadd)])
def test_a_tool_call_runs_through_the_registry_sync_and_async(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, how: str, fn: Any,
) -> None:
    reg = make_registry(fn)
    name = fn.definition.name
    model = script((name, {"a": 2, "b": 3}, "call_A1"))
    out = run(middleware_agent(reg, model), how)
    (msg,) = tool_messages(out)
    assert (msg.content, msg.status, msg.tool_call_id, msg.name) == ("5", "success", "call_A1",
                                                                     name)
    (rec,) = sink.records
    assert rec.status is Status.OK and rec.tool == name
    assert uuid.UUID(rec.call_id).version == 7
    assert rec.attributes["provider.tool_call_id"] == "call_A1"
    assert rec.attributes["tooltrace.integration"] == "langchain"
    assert msg.artifact["call_id"] == rec.call_id
    assert out["messages"][-1].content == "done"


def test_the_adapters_principal_goes_on_every_call(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, watch: Watch,
) -> None:
    reg = make_registry(add, sinks=[sink, watch.trail])
    p = Principal(user="ann", agent="researcher", roles=("dev",))
    run(middleware_agent(reg, script(("add", {"a": 2, "b": 3}, "c1")), principal=p), "invoke")
    node = tool_node(reg, principal=p)
    assert node.tools_by_name["add"].invoke({"a": 1, "b": 1}) == "2"
    assert [r.principal for r in sink.records] == [p, p]
    # A principal that looks like a secret is refused like any other, and not recorded.
    leaky = Principal(user="AKIA" + "Z7QF3EXAMPLE4DMO")
    out = run(middleware_agent(reg, script(("add", {"a": 2, "b": 3}, "c2")), principal=leaky),
              "invoke")
    (msg,) = tool_messages(out)
    assert msg.status == "error" and "AKIA" not in str(msg.content)
    assert sink.records[-1].status is Status.REJECTED and sink.records[-1].principal is None
    # The middleware's and the tool node's calls were named by the registry.
    assert_ids_were_minted(reg, watch.trail, "add", {"a": 1, "b": 1})


def test_a_graph_of_two_agents_acts_for_one_principal_and_each_call_names_its_agent(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink,
) -> None:
    reg = make_registry(add, aadd)
    ann = Principal(user="ann", tenant="acme")

    def agent(name: str, model: ScriptedModel, p: Principal) -> Any:
        return create_agent(model, name=name,
                            middleware=[TooltraceMiddleware(reg, run_id="team", principal=p)])

    def team(bob: Principal) -> Any:
        g = StateGraph(MessagesState)
        g.add_node("triage", agent("triage", script(("add", {"a": 1, "b": 2}, "c1")), ann))
        g.add_node("billing", agent("billing desk", script(("aadd", {"a": 3, "b": 4}, "c2")),
                                    bob))
        g.add_edge(START, "triage")
        g.add_edge("triage", "billing")
        return g.compile()

    team(ann).invoke({"messages": [("user", "go")]})
    assert [(r.tool, r.status, r.principal) for r in sink.records] == [
        ("add", Status.OK, Principal(user="ann", agent="triage", tenant="acme")),
        ("aadd", Status.OK, Principal(user="ann", agent="billing-desk", tenant="acme")),
    ]
    # The second agent switching the user within the run is refused.
    team(Principal(user="bob", tenant="acme")).invoke({"messages": [("user", "go")]})
    assert [r.status for r in sink.records[2:]] == [Status.OK, Status.REJECTED]
    assert "principal" in sink.records[-1].summary


# -- every status but ok, through the framework's error path -----------------------------------


def _cancel_when_started(reg: ToolRegistry) -> threading.Thread:
    """An operator cancelling the call from another thread once the tool runs."""
    before = len(STARTED)

    def go() -> None:
        wait_for(lambda: len(STARTED) > before)
        reg.cancel_call(STARTED[-1])

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize(
    ("name", "args", "status", "stage"),
    [
        ("add", {"a": "two", "b": 3}, Status.REJECTED, Stage.PARAMS),
        ("no_such_tool", {}, Status.REJECTED, Stage.RESOLVE),
        ("explode", {}, Status.FAILED, None),
        ("unsure", {}, Status.UNKNOWN, None),
        ("wait", {"seconds": 30}, Status.CANCELLED, None),
    ],
)
@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_every_other_status_reaches_the_model_as_an_error_tool_message(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, how: str, name: str,
    args: dict[str, Any], status: Status, stage: Stage | None,
) -> None:
    reg = make_registry(add, explode, unsure, wait)
    model = script((name, args, "call_E1"))
    canceller = _cancel_when_started(reg) if status is Status.CANCELLED else None
    out = run(middleware_agent(reg, model), how)
    if canceller is not None:
        canceller.join(5)
    (rec,) = sink.records
    assert (rec.status, rec.reject_stage) == (status, stage)
    (msg,) = tool_messages(out)
    assert msg.status == "error" and msg.tool_call_id == "call_E1"
    assert isinstance(msg.content, str) and msg.content.startswith("Error: ")
    assert rec.summary.rstrip(".") in msg.content
    # The model's next turn was sent exactly that message, and the run went on to its answer.
    assert model.seen[1][-1] == msg
    assert out["messages"][-1].content == "done"
    assert SECRET not in msg.content  # the summary is redacted like everything else


@pytest.mark.parametrize("approved", [True, False])
def test_approval_is_asked_before_the_tool_runs(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, approved: bool,
) -> None:
    asked: list[str] = []

    def approver(req: ApprovalRequest) -> ApprovalDecision:
        asked.append(req.tool)
        return ApprovalDecision(approved, "ops", "" if approved else "not during the freeze")

    reg = make_registry(add, policy=Policy(rules=[RequireApproval(tools=frozenset({"add"}))]),
                        approver=approver)
    out = middleware_agent(reg, script(("add", {"a": 1, "b": 2}, "ap1"))).invoke(
        {"messages": [("user", "go")]})
    (msg,) = tool_messages(out)
    (rec,) = sink.records
    assert asked == ["add"]
    if approved:
        assert (rec.status, msg.content, msg.status) == (Status.OK, "3", "success")
    else:
        assert (rec.status, rec.reject_stage) == (Status.REJECTED, Stage.APPROVAL)
        assert msg.status == "error" and rec.summary.rstrip(".") in str(msg.content)


def test_a_call_waits_in_the_approval_queue_until_another_process_answers(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, tmp_path: Path,
) -> None:
    import subprocess
    import sys
    import threading

    from tooltrace.policy import ApprovalQueue

    home = tmp_path / "home"
    reg = make_registry(add, policy=Policy(rules=[RequireApproval(tools=frozenset({"add"}))]),
                        approver=ApprovalQueue(home, timeout=60))
    result: dict[str, Any] = {}
    agent = threading.Thread(target=lambda: result.update(middleware_agent(
        reg, script(("add", {"a": 1, "b": 2}, "q1"))).invoke({"messages": [("user", "go")]})))
    agent.start()
    q = ApprovalQueue(home)
    for _ in range(600):
        if q.pending():
            break
        agent.join(0.05)
    (p,) = q.pending()
    answered = subprocess.run(
        [sys.executable, "-c", "from tooltrace.cli import main; main()", "approvals", "answer",
         p.approval_id, "--approve", "--home", str(home)], capture_output=True, text=True)
    assert answered.returncode == 0, answered.stderr
    agent.join(60)
    (msg,) = tool_messages(result)
    (rec,) = sink.records
    assert (rec.status, msg.content) == (Status.OK, "3")
    assert any(s.step == "approval" and s.decider.endswith("@cli") for s in rec.steps)


# -- what the model reads ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["middleware", "tools", "graph"])
def test_the_model_reads_the_redacted_trimmed_result_never_the_raw_output(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, path: str,
) -> None:
    reg = make_registry(leak)
    model = script(("leak", {}, "call_L1"))
    if path == "middleware":
        agent = middleware_agent(reg, model)
    elif path == "tools":  # no middleware: the StructuredTools run through the registry
        agent = create_agent(model, tools=as_langchain_tools(reg))
    else:
        agent = graph_agent(reg, model)
    out = agent.invoke({"messages": [("user", "go")]})
    (rec,) = sink.records
    assert rec.artifact is not None
    (msg,) = tool_messages(out)
    text = str(msg.content)
    assert SECRET not in text and "[REDACTED:openai_key]" in text
    assert len(text) < reg.preview_chars + 300  # the preview, not the 40,000 characters
    assert f"artifact {rec.artifact.path}" in text and rec.artifact.sha256[:16] in text
    assert msg.artifact["artifact"]["sha256"] == rec.artifact.sha256
    full = (reg.home / rec.artifact.path).read_text()
    assert SECRET not in full and len(full) > 40_000
    assert SECRET not in str(model.seen)  # nothing the model was sent holds it


# -- spans -------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_one_span_per_call_under_the_framework_span(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, otel: Any, how: str,
) -> None:
    reg = make_registry(add, aadd, sinks=[sink, otel.sink])
    model = script(("add", {"a": 1, "b": 1}, "c1"), ("aadd", {"a": 2, "b": 2}, "c2"))
    agent = middleware_agent(reg, model)
    tracer = otel.provider.get_tracer("agent-app")
    inp = {"messages": [("user", "go")]}

    async def arun() -> None:
        with tracer.start_as_current_span("invoke_agent"):
            await agent.ainvoke(inp)

    if how == "ainvoke":
        asyncio.run(arun())
    else:
        with tracer.start_as_current_span("invoke_agent"):
            agent.invoke(inp)
    (parent,) = [s for s in otel.spans() if s.name == "invoke_agent"]
    spans = otel.tool_spans()
    assert sorted(s.name for s in spans) == ["execute_tool aadd", "execute_tool add"]
    by_call = {s.attributes["gen_ai.tool.call.id"]: s for s in spans}
    assert set(by_call) == {r.call_id for r in sink.records}
    for s in spans:
        assert s.parent is not None and s.parent.span_id == parent.context.span_id
        assert s.context.trace_id == parent.context.trace_id
        assert s.attributes["provider.tool_call_id"] in ("c1", "c2")


# -- parallel calls and cancellation -----------------------------------------------------------


@pytest.mark.parametrize(("how", "fn"), [("invoke", wait), ("ainvoke", slow)])
def test_parallel_calls_keep_their_own_call_ids_and_audit_rows(
    make_registry: Callable[..., ToolRegistry], tmp_path: Path, how: str, fn: Any,
) -> None:
    audit_home = tmp_path / "audit-home"
    rec = RecordingSink()
    reg = make_registry(fn, sinks=[rec, AuditSink(audit_home)])
    name = fn.definition.name
    ids = ["p1", "p2", "p3"]
    model = script(*[(name, {"seconds": 0.4}, i) for i in ids])
    out = run(middleware_agent(reg, model), how)
    # They overlapped: every call started before any of them ended.
    spans = [(r.started_at_us, r.started_at_us + r.elapsed_us) for r in rec.records]
    assert len(spans) == 3
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans
    msgs = tool_messages(out)
    assert sorted(m.tool_call_id for m in msgs) == ids
    assert all(m.status == "success" for m in msgs)
    by_provider = {r.attributes["provider.tool_call_id"]: r for r in rec.records}
    assert sorted(by_provider) == ids and len({r.call_id for r in rec.records}) == 3
    for m in msgs:  # each message answers its own call
        assert m.artifact["call_id"] == by_provider[m.tool_call_id].call_id
    reg.shutdown(5.0)  # flushes the audit sink
    with AuditStore(audit_home) as store:
        assert store.counts()["calls"] == 3
        for pid, r in by_provider.items():
            row = store.call(r.call_id).record
            assert row is not None and row["status"] == "ok"
            attrs = row["attributes"]
            attrs = orjson.loads(attrs) if isinstance(attrs, str | bytes) else attrs
            assert attrs["provider.tool_call_id"] == pid


@pytest.mark.parametrize("fn", [slow, wait])
def test_cancelling_the_agent_task_cancels_the_call(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink, fn: Any,
) -> None:
    reg = make_registry(fn)
    model = script((fn.definition.name, {"seconds": 30}, "call_C1"))
    agent = middleware_agent(reg, model)
    before = len(STARTED)

    async def main() -> None:
        task = asyncio.ensure_future(agent.ainvoke({"messages": [("user", "go")]}))
        deadline = time.monotonic() + 5
        while len(STARTED) == before and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert len(STARTED) > before, "the tool did not start"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (rec,) = sink.records  # recorded before the cancel went on to the framework
    assert rec.status is Status.CANCELLED
    assert rec.attributes["provider.tool_call_id"] == "call_C1"
    steps = [s.step for s in rec.steps]
    assert "cancel_requested" in steps and "cancelled" in steps
    assert rec.call_id in STOPPED  # the tool itself was stopped


# -- LangChain tools adopted by the registry ---------------------------------------------------


def test_adopted_tools_keep_the_schema_langchain_shows_and_run_through_the_registry(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink,
) -> None:
    ran: list[tuple[int, int]] = []

    @lc_tool
    def mul(a: int, b: int) -> int:
        """Multiply two integers."""
        ran.append((a, b))
        return a * b

    async def _apow(base: int, exp: int) -> int:
        return int(base**exp)

    apow = StructuredTool.from_function(coroutine=_apow, name="apow",
                                        description="Raise base to exp.")

    @hook(tools=("mul",))
    def double_a(view: HookView) -> HookDecision:
        """Modify the arguments (a hook that narrows: it only changes a value)."""
        return HookDecision.modify(arguments={**view.arguments, "a": view.arguments["a"] * 2})

    reg = make_registry(hooks=[double_a])
    defs = adopt(reg, [mul, apow])
    assert [d.name for d in defs] == ["mul", "apow"]
    for t, d in zip([mul, apow], defs, strict=True):
        assert d.parameters == convert_to_openai_tool(t)["function"]["parameters"]
        assert (d.capability, d.effect) == (Capability.EXECUTE, Effect.EXTERNAL)
    model = script(("mul", {"a": 3, "b": 4}, "m1"), ("apow", {"base": 2, "exp": 5}, "m2"))
    out = graph_agent(reg, model, tools=[mul, apow]).invoke({"messages": [("user", "go")]})
    contents = {m.tool_call_id: m.content for m in tool_messages(out)}
    assert contents == {"m1": "24", "m2": "32"}
    assert ran == [(6, 4)]  # ran once, through the registry, with the hook's arguments
    recs = {r.tool: r for r in sink.records}
    assert recs["mul"].hook_modified and recs["apow"].status is Status.OK


def test_adopt_refuses_what_the_registry_cannot_run(
    make_registry: Callable[..., ToolRegistry],
) -> None:
    @lc_tool
    def stateful(q: str, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Needs the graph state."""
        return q

    bad_schema = StructuredTool(
        name="bad", description="d", func=lambda **kw: "x",
        args_schema={"type": "object", "properties": {"n": {"type": "integer",
                                                             "minimum": "zero"}}},
    )
    reg = make_registry()
    with pytest.raises(RegistrationError, match="injected"):
        adopt(reg, [stateful])
    with pytest.raises(RegistrationError):
        adopt(reg, [bad_schema])
    assert reg.tool_names() == frozenset()


def test_an_adopted_tool_that_reports_an_error_is_a_failed_call(
    make_registry: Callable[..., ToolRegistry], sink: RecordingSink,
) -> None:
    @lc_tool
    def grumpy() -> str:
        """Always fails, in LangChain's own way."""
        raise ToolException(f"no: {SECRET}")

    grumpy.handle_tool_error = True
    reg = make_registry()
    adopt(reg, [grumpy], capability="read", effect="none")
    model = script(("grumpy", {}, "g1"))
    out = middleware_agent(reg, model, expose_tools=False).invoke({"messages": [("user", "go")]})
    (msg,) = tool_messages(out)
    (rec,) = sink.records
    assert rec.status is Status.FAILED and rec.error_type == "AdoptedToolError"
    assert msg.status == "error" and SECRET not in str(msg.content)


def test_a_broken_registry_ends_one_tool_call_not_the_run(
    make_registry: Callable[..., ToolRegistry], monkeypatch: pytest.MonkeyPatch,
) -> None:
    reg = make_registry(add)

    def broken(call: object) -> object:
        raise RuntimeError(f"internal {SECRET}")

    monkeypatch.setattr(reg, "call", broken)
    out = middleware_agent(reg, script(("add", {"a": 1, "b": 2}, "b1"))).invoke(
        {"messages": [("user", "go")]})
    (msg,) = tool_messages(out)
    assert msg.status == "error" and "RuntimeError" in str(msg.content)
    assert SECRET not in str(msg.content) and out["messages"][-1].content == "done"


# -- the bypass test, for LangChain agents -----------------------------------------------------


@pytest.mark.parametrize("path", ["middleware", "adopted", "tools", "graph"])
@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_an_always_block_hook_stops_the_side_effect_of_an_agent_run(
    make_registry: Callable[..., ToolRegistry], marker: Path, path: str, how: str,
) -> None:
    @lc_tool("touch")
    def lc_touch(name: str) -> str:
        """Write the marker file (the side effect under test)."""
        marker.write_text(name)
        return "touched"

    reg = make_registry(hooks=[deny_all])
    model = script(("touch", {"name": "x"}, "t1"))
    if path == "adopted":
        adopt(reg, [lc_touch])
        agent = create_agent(model, tools=[lc_touch],
                             middleware=[TooltraceMiddleware(reg, expose_tools=False)])
    else:
        reg.register(touch)
        agent = {"middleware": lambda: middleware_agent(reg, model),
                 "tools": lambda: create_agent(model, tools=as_langchain_tools(reg)),
                 "graph": lambda: graph_agent(reg, model)}[path]()
    out = run(agent, how)
    assert not marker.exists()
    (msg,) = tool_messages(out)
    assert msg.status == "error"
    assert "blocked by hook deny_all: maintenance window" in str(msg.content)
    assert model.seen[1][-1].content == msg.content  # the model received the rejection


def test_the_adopted_side_effect_happens_without_the_hook(
    make_registry: Callable[..., ToolRegistry], marker: Path, sink: RecordingSink,
) -> None:
    # The positive control: the same path does reach the side effect when nothing blocks it.
    @lc_tool("touch")
    def lc_touch(name: str) -> str:
        """Write the marker file."""
        marker.write_text(name)
        return "touched"

    reg = make_registry()
    adopt(reg, [lc_touch])
    agent = create_agent(script(("touch", {"name": "x"}, "t1")), tools=[lc_touch],
                         middleware=[TooltraceMiddleware(reg, expose_tools=False)])
    agent.invoke({"messages": [("user", "go")]})
    assert marker.read_text() == "x"
    assert [r.status for r in sink.records] == [Status.OK]
