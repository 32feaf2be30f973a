"""The Pydantic AI adapter, driven through a real ``Agent`` with ``FunctionModel`` (no network).

Tool calls reach a tool's code only through the registry; outcomes reach the model through
Pydantic AI's tool-error path; with instrumentation on, each call has one span (Pydantic AI's
``execute_tool``, carrying tooltrace's steps); cancellation follows the contract.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.bypass import deny_all, touch
from support.components import extra, require_module
from support.integrations import (
    SECRET,
    aadd,
    add,
    explode,
    leak,
    unsure,
    wait_for,
)
from support.trail import assert_ids_were_minted

require_module("pydantic_ai", extra("pydantic-ai"))

from conftest import Otel, Watch  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from pydantic_ai import (  # noqa: E402
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    Tool,
)
from pydantic_ai.capabilities import Instrumentation  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.instrumented import InstrumentationSettings  # noqa: E402

from tooltrace import (  # noqa: E402
    CallContext,
    InvalidSchemaError,
    Policy,
    PolicyDecision,
    PolicyRequest,
    RequireApproval,
    Stage,
    Status,
    ToolCall,
    ToolRegistry,
    Verdict,
    tool,
)
from tooltrace.integrations.pydantic_ai import (  # noqa: E402
    FrameworkApprover,
    SharedSpans,
    Tooltrace,
    adopt,
    as_toolset,
)
from tooltrace.model import Principal  # noqa: E402
from tooltrace.testing import RecordingSink  # noqa: E402

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")
PID = "provider.tool_call_id"

MakeRegistry = Callable[..., ToolRegistry]


@dataclass(frozen=True)
class DenyTool:
    """A policy rule that denies one tool."""

    tool: str
    name: str = "deny_tool"

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        if request.tool.name == self.tool:
            return PolicyDecision(Verdict.DENY, self.name, "not during the freeze")
        return None


@tool(capability="write", effect="local")
def forbidden() -> str:
    """Denied by policy."""
    return "ran"


@tool(capability="write", effect="external")
def deploy(env: str) -> str:
    """Needs a person's approval."""
    return f"deployed {env}"


#: Call ids of ``hang``/``block`` calls that started.
STARTED: list[str] = []


@tool(timeout_s=60.0)
async def hang(ctx: CallContext, seconds: float) -> str:
    """Sleep (async: a cancel lands in the sleep)."""
    STARTED.append(ctx.call_id)
    await asyncio.sleep(seconds)
    return "slept"


@tool(timeout_s=60.0)
def block(ctx: CallContext, seconds: float) -> str:
    """Wait on the call context (sync) and confirm a cancel."""
    STARTED.append(ctx.call_id)
    ctx.wait(seconds)
    ctx.check()
    return "waited"


class Script:
    """A FunctionModel script: the first response makes the given tool calls, the next ends the
    run. It keeps the tool definitions it was offered and what each tool call returned."""

    def __init__(self, *calls: ToolCallPart) -> None:
        self.calls = list(calls)
        self.offered: dict[str, Any] = {}
        self.seen: dict[str, str] = {}

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.offered = {t.name: t.parameters_json_schema for t in info.function_tools}
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    cid = getattr(part, "tool_call_id", None)
                    if cid:
                        self.seen[cid] = str(getattr(part, "content", ""))
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=list(self.calls))
        return ModelResponse(parts=[TextPart("done")])


def call(name: str, cid: str, /, **args: Any) -> ToolCallPart:
    return ToolCallPart(name, args, tool_call_id=cid)


def by_provider_id(sink: RecordingSink) -> dict[str, Any]:
    return {str(r.attributes[PID]): r for r in sink.records}


def run(script: Script, *capabilities: Any, **kwargs: Any) -> Any:
    return Agent(FunctionModel(script), capabilities=list(capabilities), **kwargs).run_sync("go")


def test_the_model_is_offered_the_registrys_names_and_schemas(
    make_registry: MakeRegistry,
) -> None:
    reg = make_registry(add, aadd, forbidden)
    script = Script()
    run(script, Tooltrace(reg))
    assert script.offered == {d.name: dict(d.parameters) for d in reg.visible_tools().visible}
    Agent(FunctionModel(script), toolsets=[as_toolset(reg, "plan")]).run_sync("go")
    assert set(script.offered) == {"aadd", "add"}  # plan mode hides the write tool


def test_calls_run_through_the_registry_and_the_model_sees_the_redacted_trimmed_result(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(add, aadd, leak, max_inline_chars=4000, preview_chars=300)
    script = Script(call("add", "m1", a=2, b=3), call("aadd", "m2", a=4, b=5),
                    call("leak", "m3"))
    result = run(script, Tooltrace(reg))
    assert result.output == "done"
    assert (script.seen["m1"], script.seen["m2"]) == ("5", "9")
    recs = by_provider_id(sink)
    assert all(r.status is Status.OK and UUID7.match(r.call_id) for r in recs.values())
    assert recs["m1"].run_id == result.run_id  # the agent run is the tooltrace run
    assert recs["m1"].attributes["tooltrace.integration"] == "pydantic-ai"
    art = recs["m3"].artifact
    assert art is not None and art.chars > 40_000
    assert SECRET not in script.seen["m3"] and len(script.seen["m3"]) < 1000
    assert art.path in script.seen["m3"] and art.sha256[:16] in script.seen["m3"]


def test_the_adapters_principal_goes_on_every_call(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(add, aadd)
    p = Principal(user="ann", agent="planner", roles=("dev",))
    script = Script(call("add", "c1", a=1, b=2), call("aadd", "c2", a=3, b=4))
    run(script, Tooltrace(reg, principal=p))
    script = Script(call("add", "t1", a=1, b=1))
    Agent(FunctionModel(script), toolsets=[as_toolset(reg, principal=p)]).run_sync("go")
    recs = by_provider_id(sink)
    assert [recs[c].principal for c in ("c1", "c2", "t1")] == [p] * 3
    assert len(sink.records) == 3
    # A principal that looks like a secret is refused like any other, and not recorded.
    leaky = Principal(user="AKIA" + "Z7QF3EXAMPLE4DMO")
    script = Script(call("add", "s1", a=1, b=1))
    run(script, Tooltrace(reg, principal=leaky))
    refused = sink.records[-1]  # a malformed call's record keeps none of its attributes
    assert len(sink.records) == 4 and refused.status is Status.REJECTED
    assert refused.principal is None
    assert script.seen["s1"].startswith("Error:") and "AKIA" not in script.seen["s1"]


def test_a_delegated_agent_acts_for_the_same_principal_and_each_call_names_its_agent(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(add, aadd)
    ann = Principal(user="ann", roles=("dev",))
    helper = Agent(FunctionModel(Script(call("aadd", "h1", a=3, b=4))), name="helper",
                   capabilities=[Tooltrace(reg, run_id="delegation", principal=ann)])

    async def delegate(ctx: RunContext[None]) -> str:
        """Hand the work to the helper agent."""
        return (await helper.run("go", usage=ctx.usage)).output

    lead = Script(call("add", "l1", a=1, b=2), call("delegate", "l2"))
    run(lead, Tooltrace(reg, run_id="delegation", principal=ann, strict=False), name="lead",
        tools=[delegate])
    assert lead.seen == {"l1": "3", "l2": "done"}
    recs = by_provider_id(sink)
    assert (recs["l1"].status, recs["h1"].status) == (Status.OK, Status.OK)
    assert recs["l1"].principal == Principal(user="ann", agent="lead", roles=("dev",))
    assert recs["h1"].principal == Principal(user="ann", agent="helper", roles=("dev",))
    # Other roles within the run are refused.
    script = Script(call("add", "x1", a=1, b=1))
    run(script, Tooltrace(reg, run_id="delegation", principal=Principal(user="ann")))
    assert by_provider_id(sink)["x1"].status is Status.REJECTED
    assert "principal" in script.seen["x1"]


def test_refusals_failures_and_unknown_ends_reach_the_model_and_the_run_goes_on(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(add, explode, unsure, forbidden, policy=Policy([DenyTool("forbidden")]))
    script = Script(call("add", "params", a="two"), call("forbidden", "policy"),
                    call("explode", "failed"), call("unsure", "unknown"))
    assert run(script, Tooltrace(reg)).output == "done"
    recs = by_provider_id(sink)
    expected = {"params": Status.REJECTED, "policy": Status.REJECTED,
                "failed": Status.FAILED, "unknown": Status.UNKNOWN}
    for cid, status in expected.items():
        assert recs[cid].status is status
        assert script.seen[cid].startswith(f"Error: {recs[cid].summary.rstrip('.')}")
    assert "not during the freeze" in script.seen["policy"]
    assert SECRET not in script.seen["failed"]


def test_a_tool_the_agent_lacks_is_refused_by_pydantic_ai_and_recorded_by_the_registry(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(add)
    script = Script(call("nosuch_tool", "n1", q="x"), call("add", "a1", a=1, b=2))
    assert run(script, Tooltrace(reg, run_id="r-unknown"), name="triage").output == "done"
    recs = by_provider_id(sink)
    rec = recs["n1"]
    assert (rec.status, rec.reject_stage) == (Status.REJECTED, Stage.RESOLVE)
    assert rec.attributes["provider.tool_name"] == "nosuch_tool"
    assert rec.args_redacted == {"q": "x"} and rec.run_id == "r-unknown"
    assert rec.principal is not None and rec.principal.agent == "triage"
    assert recs["a1"].status is Status.OK and len(sink.records) == 2
    # The model read Pydantic AI's own refusal, naming the tools it has.
    assert "Unknown tool name: 'nosuch_tool'" in script.seen["n1"]
    assert "'add'" in script.seen["n1"]


def test_one_span_per_call_pydantic_ais_span_carries_tooltraces_steps(
    make_registry: MakeRegistry, sink: RecordingSink, otel: Otel
) -> None:
    nested = otel.provider.get_tracer("test")

    @tool()
    def traced(x: int) -> int:
        """Does nested, traced work."""
        with nested.start_as_current_span("nested work"):
            return x + 1

    reg = make_registry(traced, add, sinks=[sink, SharedSpans(otel.sink)])
    script = Script(call("traced", "m1", x=1), call("add", "m2", a="no"))
    instrumentation = Instrumentation(
        settings=InstrumentationSettings(tracer_provider=otel.provider)
    )
    run(script, instrumentation, Tooltrace(reg))
    spans = otel.spans()
    tool_spans = otel.tool_spans()
    assert len(tool_spans) == 2  # Pydantic AI's; tooltrace exported none of its own
    (agent_span,) = [s for s in spans if s.name.startswith("invoke_agent")]
    recs = by_provider_id(sink)
    for span in tool_spans:
        attrs = dict(span.attributes or {})
        rec = recs[str(attrs["gen_ai.tool.call.id"])]
        assert span.parent is not None and span.parent.span_id == agent_span.context.span_id
        assert attrs["tooltrace.call_id"] == rec.call_id
        assert attrs["tooltrace.status"] == rec.status.value
        # The audit row names this very span.
        assert (rec.trace_id, rec.span_id) == (
            f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}")
        steps = [str(e.attributes["tooltrace.step"]) for e in span.events
                 if e.attributes and "tooltrace.step" in e.attributes]
        assert steps == [str(st.step) for st in rec.steps]
    (inner,) = [s for s in spans if s.name == "nested work"]
    (first,) = [s for s in tool_spans if (s.attributes or {})["gen_ai.tool.call.id"] == "m1"]
    assert inner.parent is not None and inner.parent.span_id == first.context.span_id


def test_without_instrumentation_tooltraces_span_is_the_one_under_the_callers_span(
    make_registry: MakeRegistry, sink: RecordingSink, otel: Otel
) -> None:
    reg = make_registry(add, sinks=[sink, SharedSpans(otel.sink)])
    with otel.provider.get_tracer("app").start_as_current_span("agent run") as outer:
        run(Script(call("add", "m1", a=1, b=1)), Tooltrace(reg))
    (span,) = otel.tool_spans()
    assert span.parent is not None and span.parent.span_id == outer.get_span_context().span_id
    assert (span.attributes or {})[PID] == "m1"


def test_parallel_calls_keep_their_own_ids_and_audit_rows(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    barrier: list[asyncio.Barrier] = []

    @tool()
    async def meet(who: str) -> str:
        """Returns only once both calls are in: they run at the same time."""
        await asyncio.wait_for(barrier[0].wait(), 5)
        return who

    reg = make_registry(meet, add)
    script = Script(call("meet", "a", who="a"), call("meet", "b", who="b"),
                    call("add", "c", a=1, b=2))

    async def go() -> None:
        barrier.append(asyncio.Barrier(2))
        await Agent(FunctionModel(script), capabilities=[Tooltrace(reg)]).run("go")

    asyncio.run(go())
    recs = by_provider_id(sink)
    assert set(recs) == {"a", "b", "c"} and len({r.call_id for r in recs.values()}) == 3
    assert all(r.status is Status.OK for r in recs.values())
    assert (script.seen["a"], script.seen["b"], script.seen["c"]) == ("a", "b", "3")


def test_a_cancelled_agent_run_cancels_the_call(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(hang)
    script = Script(call("hang", "m1", seconds=30))

    async def go() -> None:
        task = asyncio.create_task(
            Agent(FunctionModel(script), capabilities=[Tooltrace(reg)]).run("go")
        )
        while not reg.inflight().get("hang"):
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    (rec,) = sink.records
    assert rec.status is Status.CANCELLED
    assert "cancel_requested" in [str(st.step) for st in rec.steps]
    status = reg.status(rec.call_id)
    assert status is not None and status.status is Status.CANCELLED


def test_registry_cancel_call_reaches_the_model_as_cancelled(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(block)
    before = len(STARTED)
    script = Script(call("block", "m1", seconds=30))

    def cancel_once_started() -> None:
        wait_for(lambda: len(STARTED) > before)
        reg.cancel_call(STARTED[-1])

    canceller = threading.Thread(target=cancel_once_started)
    canceller.start()
    result = run(script, Tooltrace(reg))
    canceller.join()
    assert result.output == "done"
    (rec,) = sink.records
    assert rec.call_id == STARTED[-1] and rec.status is Status.CANCELLED
    assert script.seen["m1"].startswith(f"Error: {rec.summary.rstrip('.')}")


class Order(BaseModel):
    item: str
    qty: int


def test_adopted_tools_register_once_and_run_through_the_registry(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    placed: list[tuple[str, Order]] = []

    def place_order(ctx: RunContext[str], order: Order) -> str:
        """Place an order for the customer named in deps."""
        placed.append((ctx.deps, order))
        return f"placed {order.qty} x {order.item}"

    async def count(words: list[str]) -> int:
        """Count words."""
        return len(words)

    reg = make_registry()
    d1, d2 = adopt(reg, [Tool(place_order), count], source="project", effect="local")
    assert (d1.name, d1.source, d1.effect.value, d2.name) == (
        "place_order", "project", "local", "count")
    bad = Tool.from_schema(lambda x: x, name="bad", description="bad",
                           json_schema={"type": "object", "properties": {"x": {"type": 5}}})
    with pytest.raises(InvalidSchemaError):
        adopt(reg, [bad])
    assert reg.definition("bad") is None
    # A single model argument is flattened in Pydantic AI's schema: the model sends its fields.
    assert set(d1.parameters["properties"]) == {"item", "qty"}
    script = Script(call("place_order", "m1", item="tea", qty=2),
                    call("count", "m2", words=["a", "b", "c"]),
                    call("place_order", "m3", item="tea"))
    Agent(FunctionModel(script), deps_type=str, capabilities=[Tooltrace(reg)]).run_sync(
        "go", deps="alice")
    assert placed == [("alice", Order(item="tea", qty=2))]
    assert (script.seen["m1"], script.seen["m2"]) == ("placed 2 x tea", "3")
    statuses = {cid: r.status for cid, r in by_provider_id(sink).items()}
    assert statuses == {"m1": Status.OK, "m2": Status.OK, "m3": Status.REJECTED}
    # One definition serves every caller of the registry, not only the agent.
    env = reg.call(ToolCall("count", {"words": ["x"]}))
    assert env.ok and env.data == 1


def test_the_strict_capability_sends_the_agents_own_tools_through_the_registry(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    effects: list[str] = []

    def adopted_tool(x: str) -> str:
        """Adopted: runs through the registry."""
        effects.append("adopted " + x)
        return "ok"

    def stray_tool(x: str) -> str:
        """Never adopted: the registry does not know it."""
        effects.append("stray " + x)
        return "ok"

    def place(order: Order) -> str:
        """Adopted, with a model argument: the registry gets the model's own arguments."""
        effects.append(f"placed {order.qty} {order.item}")
        return "placed"

    reg = make_registry()
    adopt(reg, [adopted_tool, place], effect="local")
    script = Script(call("adopted_tool", "m1", x="1"), call("stray_tool", "m2", x="2"),
                    call("place", "m3", item="tea", qty=2))
    result = run(script, Tooltrace(reg, provide_tools=False),
                 tools=[adopted_tool, stray_tool, place])
    assert result.output == "done" and sorted(effects) == ["adopted 1", "placed 2 tea"]
    recs = by_provider_id(sink)
    assert recs["m1"].status is Status.OK and recs["m3"].status is Status.OK
    assert (recs["m2"].status, recs["m2"].reject_stage) == (Status.REJECTED, Stage.RESOLVE)
    assert script.seen["m2"].startswith("Error: ")


def test_approval_runs_through_pydantic_ais_deferred_flow(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    approvals = FrameworkApprover()
    reg = make_registry(deploy, approver=approvals,
                        policy=Policy([RequireApproval(tools=frozenset({"deploy"}))]))
    script = Script(call("deploy", "m1", env="prod"), call("deploy", "m2", env="staging"))
    agent = Agent(FunctionModel(script), output_type=[str, DeferredToolRequests],
                  capabilities=[Tooltrace(reg, approvals=approvals)])
    first = agent.run_sync("go")
    assert isinstance(first.output, DeferredToolRequests)
    assert {c.tool_call_id for c in first.output.approvals} == {"m1", "m2"}
    assert sink.records == []  # nothing ran and nothing was decided yet
    second = agent.run_sync(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"m1": True, "m2": False}),
    )
    assert second.output == "done"
    (rec,) = sink.records  # the denied call never reached the registry
    assert rec.attributes[PID] == "m1" and rec.status is Status.OK
    (approval,) = [st for st in rec.steps if str(st.step) == "approval"]
    assert (approval.decider, approval.decision) == ("user:pydantic-ai", "approve")
    assert script.seen["m1"] == "deployed prod" and "deployed" not in script.seen["m2"]
    # Outside the framework's flow nobody approved it: the registry refuses.
    env = reg.call(ToolCall("deploy", {"env": "prod"}))
    assert (env.status, env.reject_stage) == (Status.REJECTED, Stage.APPROVAL)


def test_bypass_an_agent_run_never_reaches_the_side_effect(
    make_registry: MakeRegistry, sink: RecordingSink, marker: Path
) -> None:
    def write_marker(name: str) -> str:
        """The same side effect, as a Pydantic AI tool the registry adopted."""
        marker.write_text(name)
        return "written"

    reg = make_registry(touch, hooks=[deny_all])
    adopt(reg, [write_marker], effect="local")
    expected = reg.call(ToolCall("touch", {"name": "x"})).summary.rstrip(".")
    # The registry's tool through the capability's toolset, and the agent's own (adopted)
    # tool through strict routing: both are refused by the hook before they run.
    s1 = Script(call("touch", "m1", name="x"))
    run(s1, Tooltrace(reg))
    s2 = Script(call("write_marker", "m2", name="x"))
    run(s2, Tooltrace(reg, provide_tools=False), tools=[write_marker])
    s3 = Script(call("touch", "m3", name="x"))
    Agent(FunctionModel(s3), toolsets=[as_toolset(reg)]).run_sync("go")
    assert not marker.exists()
    assert s1.seen["m1"].startswith(f"Error: {expected}")
    assert s3.seen["m3"].startswith(f"Error: {expected}")
    assert s2.seen["m2"].startswith("Error: " + expected.replace("touch", "write_marker", 1))
    assert [r.reject_stage for r in sink.records] == [Stage.HOOK] * 4


@dataclass(frozen=True)
class AnnAsks:
    """Asks about ann's calls made by the agent ``ops`` only (a rule on the principal)."""

    name: str = "ann_asks"

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        p = request.principal
        if p is not None and p.user == "ann" and p.agent == "ops":
            return PolicyDecision(Verdict.ASK, self.name, "ann's deploys need a second look")
        return None


@pytest.mark.parametrize(("user", "asked"), [("ann", True), ("bob", False)])
def test_the_approval_precheck_judges_the_calls_principal_and_agent(
    make_registry: MakeRegistry, sink: RecordingSink, user: str, asked: bool
) -> None:
    approvals = FrameworkApprover()
    reg = make_registry(deploy, approver=approvals, policy=Policy([AnnAsks()]))
    script = Script(call("deploy", "m1", env="prod"))
    agent = Agent(FunctionModel(script), name="ops", output_type=[str, DeferredToolRequests],
                  capabilities=[Tooltrace(reg, approvals=approvals,
                                          principal=Principal(user=user))])
    out = agent.run_sync("go").output
    if asked:  # the run stops for a person: nothing reached the registry to be refused there
        assert isinstance(out, DeferredToolRequests)
        assert [c.tool_call_id for c in out.approvals] == ["m1"]
        assert sink.records == []
    else:
        assert out == "done"
        (rec,) = sink.records
        assert rec.status is Status.OK and rec.principal == Principal(user="bob", agent="ops")
        assert not any(str(st.step) == "approval" for st in rec.steps)


def test_the_approval_precheck_and_the_call_share_an_id_the_registry_made(
    make_registry: MakeRegistry, sink: RecordingSink, watch: Watch
) -> None:
    approvals = FrameworkApprover()
    reg = make_registry(deploy, approver=approvals, **watch.registry_kwargs())
    agent = Agent(FunctionModel(Script(call("deploy", "m1", env="prod"))),
                  output_type=[str, DeferredToolRequests],
                  capabilities=[Tooltrace(reg, approvals=approvals)])
    assert agent.run_sync("go").output == "done"
    (rec,) = sink.records
    assert rec.status is Status.OK
    # Asked by the pre-check, then by the registry's policy step: about the same call.
    assert watch.seen.ids == [rec.call_id, rec.call_id]
    assert_ids_were_minted(reg, watch.trail, "deploy", {"env": "staging"})
