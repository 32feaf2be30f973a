"""The OpenAI Agents SDK adapter, driven through the real ``Runner`` with the SDK's own
``agents.testing.ScriptedModel`` (no key, no network: the SDK's trace processors are replaced).

Tool calls reach a tool's code only through the registry; outcomes reach the model as the error
string the SDK sends back; approval goes through the SDK's interruptions; tooltrace's span is
the one OpenTelemetry span of a call; cancellation follows the contract.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.bypass import deny_all, touch
from support.components import extra, require_module
from support.integrations import SECRET, aadd, add, explode, leak, unsure, wait_for
from support.trail import assert_ids_were_minted

require_module("agents", extra("openai-agents"))

from agents import (  # noqa: E402
    Agent,
    FunctionTool,
    RunContextWrapper,
    Runner,
    WebSearchTool,
    function_tool,
    set_trace_processors,
)
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from conftest import Otel, Watch  # noqa: E402

from tooltrace import (  # noqa: E402
    CallContext,
    InvalidSchemaError,
    Policy,
    PolicyDecision,
    PolicyRequest,
    RegistrationError,
    RequireApproval,
    Stage,
    Status,
    ToolCall,
    ToolRegistry,
    Verdict,
    tool,
)
from tooltrace.integrations.openai_agents import (  # noqa: E402
    FrameworkApprover,
    ToolCallError,
    adopt,
    as_function_tools,
    run_config,
)
from tooltrace.model import Principal  # noqa: E402
from tooltrace.testing import RecordingSink  # noqa: E402

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")
PID = "provider.tool_call_id"

MakeRegistry = Callable[..., ToolRegistry]


@pytest.fixture(autouse=True, scope="module")
def no_sdk_tracing() -> Iterator[None]:
    """The SDK's default processor exports to OpenAI: replace it with none."""
    set_trace_processors([])
    yield


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


def script(*calls: Any) -> ScriptedModel:
    """A model whose first turn makes ``calls`` and whose second ends the run."""
    return ScriptedModel([list(calls), [assistant_message("done")]])


def call(name: str, cid: str, /, **args: Any) -> Any:
    return function_call(name, args, call_id=cid)


def outputs(model: ScriptedModel) -> dict[str, str]:
    """What each tool call returned to the model, by the SDK's call id."""
    last = model.calls[-1].input
    assert isinstance(last, list)
    return {str(i["call_id"]): str(i["output"]) for i in last
            if isinstance(i, dict) and i.get("type") == "function_call_output"}


def run(model: ScriptedModel, tools: list[Any], **kwargs: Any) -> Any:
    return Runner.run_sync(Agent(name="t", model=model, tools=tools, **kwargs), "go")


def by_provider_id(sink: RecordingSink) -> dict[str, Any]:
    return {str(r.attributes[PID]): r for r in sink.records}


def test_the_model_is_offered_the_registrys_names_and_schemas(
    make_registry: MakeRegistry,
) -> None:
    reg = make_registry(add, leak, forbidden)
    model = script()
    run(model, as_function_tools(reg))
    offered = {t.name: t for t in model.calls[0].tools if isinstance(t, FunctionTool)}
    assert {n: t.params_json_schema for n, t in offered.items()} == {
        d.name: dict(d.parameters) for d in reg.visible_tools().visible}
    # Strict only where the SDK would not have to change the schema (leak's argument is optional).
    assert (offered["add"].strict_json_schema, offered["leak"].strict_json_schema) == (True, False)
    assert {t.name for t in as_function_tools(reg, "plan")} == {"add", "leak"}


def test_calls_run_through_the_registry_and_the_model_sees_the_redacted_trimmed_result(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(add, aadd, leak, max_inline_chars=4000, preview_chars=300)
    model = script(call("add", "c1", a=2, b=3), call("aadd", "c2", a=4, b=5),
                   call("leak", "c3"))
    assert run(model, as_function_tools(reg)).final_output == "done"
    seen = outputs(model)
    assert (seen["c1"], seen["c2"]) == ("5", "9")
    recs = by_provider_id(sink)
    assert all(r.status is Status.OK and UUID7.match(r.call_id) for r in recs.values())
    assert recs["c1"].attributes["tooltrace.integration"] == "openai-agents"
    art = recs["c3"].artifact
    assert art is not None and art.chars > 40_000
    assert SECRET not in seen["c3"] and len(seen["c3"]) < 1000
    assert art.path in seen["c3"] and art.sha256[:16] in seen["c3"]


def test_the_adapters_principal_goes_on_every_call(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(add, aadd)
    p = Principal(user="ann", agent="triage", tenant="acme")
    model = script(call("add", "c1", a=2, b=3), call("aadd", "c2", a=4, b=5))
    assert run(model, as_function_tools(reg, principal=p)).final_output == "done"

    @function_tool
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    wrapped = adopt(reg, [shout], effect="none", principal=p)
    run(script(call("shout", "c3", text="hi")), wrapped)
    recs = by_provider_id(sink)
    assert [recs[c].principal for c in ("c1", "c2", "c3")] == [p] * 3
    assert recs["c3"].status is Status.OK
    # A principal that looks like a secret is refused like any other, and not recorded.
    leaky = Principal(agent="AKIA" + "Z7QF3EXAMPLE4DMO")
    model = script(call("add", "c4", a=1, b=1))
    run(model, as_function_tools(reg, principal=leaky))
    refused = sink.records[-1]
    assert len(sink.records) == 4 and refused.status is Status.REJECTED
    assert refused.principal is None
    assert outputs(model)["c4"].startswith("Error:") and "AKIA" not in outputs(model)["c4"]


def test_a_hand_off_acts_for_the_same_principal_and_each_call_names_its_agent(
    make_registry: MakeRegistry, sink: RecordingSink, tmp_path: Path
) -> None:
    from tooltrace.telemetry.audit import AuditSink, AuditStore

    home = tmp_path / "trail"
    reg = make_registry(add, aadd, sinks=[sink, AuditSink(home)])
    ann = Principal(user="ann", tenant="acme")
    tools = as_function_tools(reg, run_id="hand-off", principal=ann)
    model = ScriptedModel([
        [call("add", "c1", a=1, b=2)],
        [function_call("transfer_to_billing_agent", {}, call_id="h1")],
        [call("aadd", "c2", a=3, b=4)],
        [assistant_message("done")],
    ])
    billing = Agent(name="billing agent", model=model, tools=tools)
    triage = Agent(name="triage", model=model, tools=tools, handoffs=[billing])
    result = Runner.run_sync(triage, "go")
    assert result.final_output == "done" and result.last_agent is billing
    recs = by_provider_id(sink)
    assert (recs["c1"].status, recs["c2"].status) == (Status.OK, Status.OK)
    assert recs["c1"].principal == Principal(user="ann", agent="triage", tenant="acme")
    assert recs["c2"].principal == Principal(user="ann", agent="billing-agent", tenant="acme")
    # A call switching the user within the run is refused, whichever agent makes it.
    bob = as_function_tools(reg, run_id="hand-off",
                            principal=Principal(user="bob", tenant="acme"))
    model = script(call("add", "c3", a=1, b=1))
    Runner.run_sync(Agent(name="triage", model=model, tools=bob), "go")
    assert by_provider_id(sink)["c3"].status is Status.REJECTED  # recorded with its id
    assert "principal" in outputs(model)["c3"]
    reg.shutdown(5.0)
    with AuditStore(home) as store:
        rows = store.calls(run_id="hand-off").dicts()
        billing_calls = store.calls(agent="billing-agent").dicts()
    assert [(r["tool"], r["user"], r["agent"], r["status"]) for r in reversed(rows)] == [
        ("add", "ann", "triage", "ok"), ("aadd", "ann", "billing-agent", "ok"),
        ("add", "bob", "triage", "rejected")]  # the refused switch keeps its evidence
    assert [r["tool"] for r in billing_calls] == ["aadd"]


def test_refusals_failures_and_unknown_ends_reach_the_model_and_the_run_goes_on(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(add, explode, unsure, forbidden, policy=Policy([DenyTool("forbidden")]))
    model = script(call("add", "params", a="two", b=1),
                   function_call("add", "{not json", call_id="json"),
                   call("forbidden", "policy"), call("explode", "failed"),
                   call("unsure", "unknown"))
    assert run(model, as_function_tools(reg)).final_output == "done"
    recs, seen = by_provider_id(sink), outputs(model)
    expected = {"params": Status.REJECTED, "json": Status.REJECTED, "policy": Status.REJECTED,
                "failed": Status.FAILED, "unknown": Status.UNKNOWN}
    for cid, status in expected.items():
        assert recs[cid].status is status
        assert seen[cid].startswith(f"Error: {recs[cid].summary.rstrip('.')}")
    assert "not valid JSON" in seen["json"] and "not during the freeze" in seen["policy"]
    assert SECRET not in seen["failed"]


def test_a_tool_the_agent_lacks_is_refused_through_the_registry_with_run_config(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    from agents import RunConfig
    from agents.exceptions import ModelBehaviorError

    reg = make_registry(add)
    # The SDK's default fails the run, and nothing is recorded.
    with pytest.raises(ModelBehaviorError):
        run(script(call("nosuch_tool", "n0", q="x")), as_function_tools(reg))
    assert sink.records == []
    seen: list[str] = []

    def mine(args: Any) -> str | None:  # the application's formatter keeps the other kinds
        seen.append(args.kind)
        return None

    model = script(call("nosuch_tool", "n1", q="x"), call("add", "a1", a=1, b=2))
    agent = Agent(name="t", model=model, tools=as_function_tools(reg))
    cfg = run_config(reg, RunConfig(tool_error_formatter=mine), run_id="r-unknown")
    assert Runner.run_sync(agent, "go", run_config=cfg).final_output == "done"
    recs, out = by_provider_id(sink), outputs(model)
    assert (recs["n1"].status, recs["n1"].reject_stage) == (Status.REJECTED, Stage.RESOLVE)
    assert recs["n1"].attributes["provider.tool_name"] == "nosuch_tool"
    assert recs["n1"].run_id == "r-unknown" and recs["a1"].status is Status.OK
    assert out["n1"].startswith(f"Error: {recs['n1'].summary}") and "unknown tool" in out["n1"]
    assert seen == []


def test_failure_error_function_formats_the_error_or_fails_the_run(
    make_registry: MakeRegistry,
) -> None:
    reg = make_registry(explode)

    def custom(ctx: RunContextWrapper[Any], error: Exception) -> str:
        assert isinstance(error, ToolCallError)
        return f"custom: {error.envelope.status.value}"

    model = script(call("explode", "c1"))
    run(model, as_function_tools(reg, failure_error_function=custom))
    assert outputs(model)["c1"] == "custom: failed"
    with pytest.raises(Exception) as info:
        run(script(call("explode", "c2")), as_function_tools(reg, failure_error_function=None))
    assert isinstance(info.value.__cause__, ToolCallError)
    assert SECRET not in str(info.value)


def test_tooltraces_span_is_the_one_span_of_a_call_under_the_callers_span(
    make_registry: MakeRegistry, sink: RecordingSink, otel: Otel
) -> None:
    tracer = otel.provider.get_tracer("app")

    @tool()
    def traced(x: int) -> int:
        """Does nested, traced work."""
        with tracer.start_as_current_span("nested work"):
            return x + 1

    reg = make_registry(traced, add, sinks=[sink, otel.sink])
    model = script(call("traced", "c1", x=1), call("add", "c2", a="no", b=1))

    async def go() -> int:
        with tracer.start_as_current_span("agent run") as outer:
            await Runner.run(Agent(name="t", model=model, tools=as_function_tools(reg)), "go")
        return outer.get_span_context().span_id

    outer_id = asyncio.run(go())
    tool_spans = otel.tool_spans()
    assert len(tool_spans) == 2
    recs = by_provider_id(sink)
    for span in tool_spans:
        attrs = dict(span.attributes or {})
        rec = recs[str(attrs[PID])]
        assert attrs["gen_ai.tool.call.id"] == rec.call_id
        assert span.parent is not None and span.parent.span_id == outer_id
    (inner,) = [s for s in otel.spans() if s.name == "nested work"]
    (first,) = [s for s in tool_spans if (s.attributes or {})[PID] == "c1"]
    assert inner.parent is not None and inner.parent.span_id == first.context.span_id


def test_parallel_calls_keep_their_own_ids_and_audit_rows(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    barrier: list[asyncio.Barrier] = []

    @tool()
    async def meet(who: str) -> str:
        """Returns only once both calls are in: they run at the same time."""
        await asyncio.wait_for(barrier[0].wait(), 5)
        return who

    reg = make_registry(meet, add, block)
    model = script(call("meet", "a", who="a"), call("meet", "b", who="b"),
                   call("add", "c", a=1, b=2), call("block", "d", seconds=0.01))

    async def go() -> None:
        barrier.append(asyncio.Barrier(2))
        await Runner.run(Agent(name="t", model=model, tools=as_function_tools(reg)), "go")

    asyncio.run(go())
    recs = by_provider_id(sink)
    assert set(recs) == {"a", "b", "c", "d"} and len({r.call_id for r in recs.values()}) == 4
    assert all(r.status is Status.OK for r in recs.values())
    assert outputs(model) == {"a": "a", "b": "b", "c": "3", "d": "waited"}


def test_an_sdk_timeout_cancels_the_call(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(hang)
    (hang_tool,) = as_function_tools(reg)
    model = script(call("hang", "c1", seconds=30))
    run(model, [dataclasses.replace(hang_tool, timeout_seconds=0.3)])
    (rec,) = sink.records
    assert rec.status is Status.CANCELLED
    assert "cancel_requested" in [str(st.step) for st in rec.steps]
    assert "timed out" in outputs(model)["c1"]


def test_a_cancelled_run_cancels_the_call(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(hang)
    model = script(call("hang", "c1", seconds=30))

    async def go() -> None:
        agent = Agent(name="t", model=model, tools=as_function_tools(reg))
        task = asyncio.create_task(Runner.run(agent, "go"))
        while not reg.inflight().get("hang"):
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    (rec,) = sink.records
    assert rec.status is Status.CANCELLED
    status = reg.status(rec.call_id)
    assert status is not None and status.status is Status.CANCELLED


def test_registry_cancel_call_reaches_the_model_as_cancelled(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    reg = make_registry(block)
    before = len(STARTED)
    model = script(call("block", "c1", seconds=30))

    def cancel_once_started() -> None:
        wait_for(lambda: len(STARTED) > before)
        reg.cancel_call(STARTED[-1])

    canceller = threading.Thread(target=cancel_once_started)
    canceller.start()
    assert run(model, as_function_tools(reg)).final_output == "done"
    canceller.join()
    (rec,) = sink.records
    assert rec.call_id == STARTED[-1] and rec.status is Status.CANCELLED
    assert outputs(model)["c1"].startswith(f"Error: {rec.summary.rstrip('.')}")


def test_adopted_function_tools_keep_their_schema_and_run_through_the_registry(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    seen_context: list[str] = []

    @function_tool
    def greet(ctx: RunContextWrapper[str], name: str) -> str:
        """Greet someone on behalf of the user in the context."""
        seen_context.append(ctx.context)
        return f"hello {name} from {ctx.context}"

    @function_tool
    async def fail(reason: str) -> str:
        """Always fails."""
        raise RuntimeError(f"cannot: {reason} {SECRET}")

    reg = make_registry()
    wrapped = adopt(reg, [greet, fail], source="project", effect="none")
    for original, copy in zip((greet, fail), wrapped, strict=True):
        assert copy.params_json_schema == original.params_json_schema
        assert copy.strict_json_schema == original.strict_json_schema
        assert copy.on_invoke_tool is not original.on_invoke_tool
    d = reg.definition("greet")
    assert d is not None and d.source == "project" and d.parameters == greet.params_json_schema
    with pytest.raises(RegistrationError):
        adopt(reg, [WebSearchTool()])
    bad = FunctionTool(name="bad", description="bad", strict_json_schema=False,
                       params_json_schema={"type": "object", "properties": {"x": {"type": 5}}},
                       on_invoke_tool=lambda ctx, args: asyncio.sleep(0))
    with pytest.raises(InvalidSchemaError):
        adopt(reg, [bad])
    model = script(call("greet", "c1", name="bo"), call("fail", "c2", reason="x"),
                   call("greet", "c3", nom="bo"))
    Runner.run_sync(Agent(name="t", model=model, tools=wrapped), "go", context="alice")
    recs, seen = by_provider_id(sink), outputs(model)
    assert seen_context == ["alice"] and seen["c1"] == "hello bo from alice"
    # A failure is `failed` in tooltrace (the SDK's own formatter would have made it a result).
    assert recs["c2"].status is Status.FAILED and SECRET not in seen["c2"]
    assert recs["c3"].status is Status.REJECTED and seen["c3"].startswith("Error: ")


def test_approval_runs_through_the_sdks_interruptions(
    make_registry: MakeRegistry, sink: RecordingSink
) -> None:
    approvals = FrameworkApprover()
    reg = make_registry(deploy, add, approver=approvals,
                        policy=Policy([RequireApproval(tools=frozenset({"deploy"}))]))
    model = ScriptedModel([
        [call("deploy", "c1", env="prod"), call("deploy", "c2", env="staging"),
         call("add", "c3", a=1, b=1)],
        [assistant_message("done")],
    ])
    agent = Agent(name="t", model=model, tools=as_function_tools(reg, approvals=approvals))
    first = Runner.run_sync(agent, "go")
    assert sorted(i.raw_item.call_id for i in first.interruptions) == ["c1", "c2"]
    assert [r.attributes[PID] for r in sink.records] == ["c3"]  # only the one needing none ran
    state = first.to_state()
    for item in first.interruptions:
        (state.approve if item.raw_item.call_id == "c1" else state.reject)(item)
    assert Runner.run_sync(agent, state).final_output == "done"
    recs = by_provider_id(sink)
    assert set(recs) == {"c1", "c3"}  # the rejected call never reached the registry
    (approval,) = [st for st in recs["c1"].steps if str(st.step) == "approval"]
    assert (approval.decider, approval.decision) == ("user:openai-agents", "approve")
    seen = outputs(model)
    assert seen["c1"] == "deployed prod" and "deployed" not in seen["c2"]
    # Outside the SDK's flow nobody approved it: the registry refuses.
    env = reg.call(ToolCall("deploy", {"env": "prod"}))
    assert (env.status, env.reject_stage) == (Status.REJECTED, Stage.APPROVAL)


def test_bypass_an_agent_run_never_reaches_the_side_effect(
    make_registry: MakeRegistry, sink: RecordingSink, marker: Path
) -> None:
    @function_tool
    def write_marker(name: str) -> str:
        """The same side effect, as an SDK tool the registry adopted."""
        marker.write_text(name)
        return "written"

    reg = make_registry(touch, hooks=[deny_all])
    tools = as_function_tools(reg) + adopt(reg, [write_marker], effect="local")
    expected = reg.call(ToolCall("touch", {"name": "x"})).summary.rstrip(".")
    model = script(call("touch", "c1", name="x"), call("write_marker", "c2", name="x"))
    assert run(model, tools).final_output == "done"
    assert not marker.exists()
    seen = outputs(model)
    assert seen["c1"].startswith(f"Error: {expected}")
    assert seen["c2"].startswith("Error: " + expected.replace("touch", "write_marker", 1))
    assert [r.reject_stage for r in sink.records] == [Stage.HOOK] * 3


@dataclass(frozen=True)
class AnnAsks:
    """Asks about ann's calls only (a rule on the principal). The SDK gives ``needs_approval``
    no agent, so the pre-check cannot judge a rule on the agent's name (the registry, when the
    call runs, then refuses what it asks about: it never runs unapproved)."""

    name: str = "ann_asks"

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        p = request.principal
        if p is not None and p.user == "ann":
            return PolicyDecision(Verdict.ASK, self.name, "ann's deploys need a second look")
        return None


@pytest.mark.parametrize(("user", "asked"), [("ann", True), ("bob", False)])
def test_the_approval_precheck_judges_the_calls_principal_and_agent(
    make_registry: MakeRegistry, sink: RecordingSink, user: str, asked: bool
) -> None:
    approvals = FrameworkApprover()
    reg = make_registry(deploy, approver=approvals, policy=Policy([AnnAsks()]))
    model = script(call("deploy", "c1", env="prod"))
    tools = as_function_tools(reg, approvals=approvals, principal=Principal(user=user))
    result = run(model, tools)
    if asked:  # the SDK interrupts: nothing reached the registry to be refused there
        assert [i.raw_item.call_id for i in result.interruptions] == ["c1"]
        assert sink.records == []
    else:
        assert result.final_output == "done" and not result.interruptions
        (rec,) = sink.records
        assert rec.status is Status.OK and rec.principal == Principal(user="bob", agent="t")
        assert not any(str(st.step) == "approval" for st in rec.steps)


def test_the_approval_precheck_and_the_call_take_ids_the_registry_made(
    make_registry: MakeRegistry, sink: RecordingSink, watch: Watch
) -> None:
    approvals = FrameworkApprover()
    reg = make_registry(deploy, approver=approvals, **watch.registry_kwargs())
    tools = as_function_tools(reg, approvals=approvals)
    assert run(script(call("deploy", "c1", env="prod")), tools).final_output == "done"
    (rec,) = sink.records
    # The SDK asks needs_approval before the call exists: the pre-check has an id of its own,
    # minted like the call's (so the registry would take it without a search too).
    precheck, policy_step = watch.seen.ids
    assert policy_step == rec.call_id and UUID7.match(precheck) and precheck != rec.call_id
    env = reg.call(ToolCall("deploy", {"env": "prod"}, call_id=precheck))
    assert env.status is Status.OK and env.call_id == precheck
    assert_ids_were_minted(reg, watch.trail, "deploy", {"env": "staging"})
