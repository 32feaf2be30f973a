"""tooltrace.integrations.adk: a real ADK ``InMemoryRunner`` driven by a scripted ``BaseLlm``."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncGenerator, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

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
    unsure,
    wait_for,
)
from support.trail import CountingTrail

require_module("google.adk", extra("adk"))

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps import App  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.adk.tools import BaseTool, FunctionTool  # noqa: E402
from google.genai import types  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # noqa: E402

from tooltrace import (  # noqa: E402
    CallContext,
    Principal,
    RegistrationError,
    Stage,
    Status,
    ToolDefinition,
    ToolRegistry,
    tool,
)
from tooltrace.integrations.adk import (  # noqa: E402
    SharedSpans,
    TooltracePlugin,
    adopt,
    as_adk_tools,
)
from tooltrace.telemetry import TracingSink  # noqa: E402
from tooltrace.telemetry.audit import AuditStore  # noqa: E402
from tooltrace.testing import RecordingSink  # noqa: E402

# One SDK provider for the process (OpenTelemetry allows one global provider): ADK's spans go
# to it, and so do tooltrace's (TracingSink(provider)).
EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(PROVIDER)


def test_the_tested_versions() -> None:
    assert metadata.version("google-adk").startswith("2.13."), metadata.version("google-adk")
    assert metadata.version("opentelemetry-api") <= "1.44.99"


class ScriptedLlm(BaseLlm):
    """Answers each turn with the next scripted parts (then a final text); keeps the requests."""

    script: list[list[types.Part]] = []
    seen: list[LlmRequest] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.seen.append(llm_request)
        parts = self.script.pop(0) if self.script else [types.Part.from_text(text="done")]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


_IDS = itertools.count()


def calls(*specs: tuple[str, dict[str, Any]]) -> list[types.Part]:
    """One model turn calling each ``(name, args)`` (in parallel when more than one)."""
    return [
        types.Part(function_call=types.FunctionCall(id=f"fc-{next(_IDS)}", name=n, args=a))
        for n, a in specs
    ]


def responses(llm: ScriptedLlm) -> dict[str, dict[str, Any]]:
    """The function responses the model was sent, by ADK function call id."""
    out = {}
    for req in llm.seen:
        for content in req.contents:
            for part in content.parts or ():
                fr = part.function_response
                if fr is not None and fr.id is not None:
                    out[fr.id] = dict(fr.response or {})
    return out


async def run_agent(
    llm: ScriptedLlm,
    tools: list[Any],
    plugins: list[Any],
    abort: asyncio.Event | None = None,
    root: LlmAgent | None = None,
) -> list[Any]:
    agent = root or LlmAgent(name="agent", model=llm, tools=tools)
    runner = InMemoryRunner(app=App(name="t", root_agent=agent, plugins=plugins))
    session = await runner.session_service.create_session(app_name="t", user_id="u")
    msg = types.Content(role="user", parts=[types.Part.from_text(text="go")])
    try:
        return [
            e
            async for e in runner.run_async(
                user_id="u", session_id=session.id, new_message=msg, abort_signal=abort
            )
        ]
    finally:
        await runner.close()


def final_text(events: list[Any]) -> str:
    return "".join(p.text or "" for e in events if e.content for p in e.content.parts or ())


@tool(timeout_s=60.0)
async def slow(ctx: CallContext, seconds: float) -> str:
    """Sleep (async, so a cancel lands in the sleep), noting the start and the stop."""
    STARTED.append(ctx.call_id)
    try:
        await asyncio.sleep(seconds)
    finally:
        STOPPED.append(ctx.call_id)
    return "slept"


@pytest.fixture(autouse=True)
def _fresh_ids() -> None:
    global _IDS
    _IDS = itertools.count()
    STARTED.clear()
    STOPPED.clear()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def trail(tmp_path: Path) -> CountingTrail:
    return CountingTrail(tmp_path / "home")


@pytest.fixture
def registry(tmp_path: Path, sink: RecordingSink, trail: CountingTrail) -> Iterator[ToolRegistry]:
    EXPORTER.clear()
    reg = ToolRegistry(
        workspace=tmp_path,
        home=tmp_path / "home",
        sinks=[sink, SharedSpans(TracingSink(PROVIDER, interval_s=0.05)), trail],
        cancel_grace_s=0.3,
    )
    for t in (add, aadd, leak, explode, unsure, slow):
        reg.register(t)
    yield reg
    reg.shutdown(timeout_s=2.0)


def test_the_model_sees_the_registry_tools_names_and_schemas(registry: ToolRegistry) -> None:
    llm = ScriptedLlm(model="scripted", script=[], seen=[])
    asyncio.run(run_agent(llm, as_adk_tools(registry), [TooltracePlugin(registry)]))
    decls = {
        d.name: d
        for t in llm.seen[0].config.tools or ()
        for d in t.function_declarations or ()
    }
    assert sorted(decls) == sorted(d.name for d in registry.visible_tools().visible)
    for name, decl in decls.items():
        definition = registry.definition(name)
        assert definition is not None
        assert decl.description == definition.description
        assert decl.parameters_json_schema == definition.parameters


def test_sync_and_async_tools_in_parallel_keep_their_call_ids_and_audit_rows(
    registry: ToolRegistry, sink: RecordingSink, tmp_path: Path, trail: CountingTrail
) -> None:
    llm = ScriptedLlm(
        model="scripted",
        script=[calls(("add", {"a": 1, "b": 2}), ("aadd", {"a": 3, "b": 4}))],
        seen=[],
    )
    events = asyncio.run(run_agent(llm, as_adk_tools(registry), [TooltracePlugin(registry)]))
    assert final_text(events).endswith("done")
    got = responses(llm)
    assert got["fc-0"] == {"result": 3}
    assert got["fc-1"] == {"result": 7}
    by_provider = {r.attributes["provider.tool_call_id"]: r for r in sink.records}
    assert sorted(by_provider) == ["fc-0", "fc-1"]
    assert {r.status for r in sink.records} == {Status.OK}
    assert len({r.call_id for r in sink.records}) == 2
    assert trail.lookups == 0  # ids the registry made: never searched for in its trail
    registry.shutdown(timeout_s=5.0)
    with AuditStore(tmp_path / "home") as store:
        rows = store.sql("select call_id, tool, status from tool_calls order by tool").dicts()
    assert [(r["tool"], r["status"]) for r in rows] == [("aadd", "ok"), ("add", "ok")]
    assert {r["call_id"] for r in rows} == {r.call_id for r in sink.records}


def test_the_model_sees_the_redacted_trimmed_result(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    llm = ScriptedLlm(model="scripted", script=[calls(("leak", {}))], seen=[])
    asyncio.run(run_agent(llm, as_adk_tools(registry), [TooltracePlugin(registry)]))
    seen = str(responses(llm)["fc-0"])
    assert SECRET not in seen
    assert len(seen) < 20_000
    (rec,) = sink.records
    assert rec.artifact is not None and rec.artifact.path in seen


def test_every_other_status_reaches_the_model_as_an_adk_error_and_the_run_goes_on(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    run_id = "adk-cancel-run"

    async def main() -> list[Any]:
        llm = ScriptedLlm(
            model="scripted",
            script=[
                calls(("add", {"a": "one", "b": 2})),  # rejected: params
                calls(("explode", {})),  # failed
                calls(("unsure", {})),  # unknown
                calls(("slow", {"seconds": 30})),  # cancelled (by the registry's cancel)
            ],
            seen=[],
        )

        async def cancel_when_started() -> None:
            await asyncio.to_thread(wait_for, lambda: STARTED, 10.0)
            await asyncio.to_thread(registry.cancel, run_id)

        canceller = asyncio.create_task(cancel_when_started())
        events = await run_agent(
            llm, as_adk_tools(registry, run_id=run_id), [TooltracePlugin(registry)]
        )
        await canceller
        ENV_LLM.append(llm)
        return events

    ENV_LLM: list[ScriptedLlm] = []
    events = asyncio.run(main())
    assert final_text(events).endswith("done")
    got = responses(ENV_LLM[0])
    statuses = {r.tool: r for r in sink.records}
    for tool_name, status in (
        ("add", Status.REJECTED),
        ("explode", Status.FAILED),
        ("unsure", Status.UNKNOWN),
        ("slow", Status.CANCELLED),
    ):
        rec = statuses[tool_name]
        assert rec.status is status, (tool_name, rec.status, rec.summary)
        answer = got[str(rec.attributes["provider.tool_call_id"])]
        assert answer["status"] == status.value
        assert rec.summary in answer["error"]
    assert SECRET not in str(got)
    spans = {s.attributes.get("tooltrace.call_id"): s for s in EXPORTER.get_finished_spans()
             if s.name.startswith("execute_tool")}
    for rec in sink.records:  # error.type for failed and unknown, as on tooltrace's spans
        span = spans[rec.call_id]
        assert span.instrumentation_scope.name == "gcp.vertex.agent"
        failed = rec.status in (Status.FAILED, Status.UNKNOWN)
        assert rec.error_type is not None or not failed
        assert span.attributes.get("error.type") == (rec.error_type if failed else None)
        assert (span.status.status_code is StatusCode.ERROR) == failed


def test_one_span_per_call_adks_execute_tool_span_carrying_tooltraces_record(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    llm = ScriptedLlm(
        model="scripted", script=[calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}))],
        seen=[],
    )
    asyncio.run(run_agent(llm, as_adk_tools(registry), [TooltracePlugin(registry)]))
    registry.flush()
    # ADK adds an "execute_tool (merged tools)" span over parallel calls: not a tool's span.
    spans = [s for s in EXPORTER.get_finished_spans() if s.name == "execute_tool add"]
    assert len(spans) == 2
    by_call = {s.attributes["tooltrace.call_id"]: s for s in spans}
    assert sorted(by_call) == sorted(r.call_id for r in sink.records)
    for rec in sink.records:
        span = by_call[rec.call_id]
        assert span.instrumentation_scope.name == "gcp.vertex.agent"
        assert rec.span_id == f"{span.context.span_id:016x}"
        assert span.attributes["gen_ai.tool.call.id"] == rec.attributes["provider.tool_call_id"]
        assert span.attributes["tooltrace.status"] == "ok"
        assert [e.name for e in span.events] == [s.step for s in rec.steps]


def test_with_a_plain_tracing_sink_tooltraces_span_nests_under_adks(tmp_path: Path) -> None:
    EXPORTER.clear()
    registry = ToolRegistry(workspace=tmp_path, home=tmp_path / "home",
                            sinks=[TracingSink(PROVIDER, interval_s=0.05)])
    registry.register(add)
    llm = ScriptedLlm(
        model="scripted", script=[calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}))],
        seen=[],
    )
    asyncio.run(run_agent(llm, as_adk_tools(registry), [TooltracePlugin(registry)]))
    registry.shutdown(timeout_s=5.0)
    spans = [s for s in EXPORTER.get_finished_spans() if s.name == "execute_tool add"]
    adk = {s.context.span_id: s for s in spans if s.instrumentation_scope.name != "tooltrace"}
    ours = [s for s in spans if s.instrumentation_scope.name == "tooltrace"]
    assert len(adk) == 2 and len(ours) == 2
    for span in ours:
        assert span.parent is not None and span.parent.span_id in adk
        parent = adk[span.parent.span_id]
        assert parent.attributes["tooltrace.call_id"] == span.attributes["gen_ai.tool.call.id"]
        assert parent.attributes["tooltrace.status"] == "ok"
    assert {s.parent.span_id for s in ours if s.parent} == set(adk)


def test_a_framework_side_cancel_follows_the_cancel_contract(
    registry: ToolRegistry, sink: RecordingSink
) -> None:

    async def main() -> None:
        llm = ScriptedLlm(model="scripted", script=[calls(("slow", {"seconds": 30}))], seen=[])
        abort = asyncio.Event()
        run = asyncio.create_task(
            run_agent(llm, as_adk_tools(registry), [TooltracePlugin(registry)], abort)
        )
        await asyncio.to_thread(wait_for, lambda: STARTED, 10.0)
        abort.set()
        await asyncio.wait_for(run, 10)
        assert not responses(llm)  # the model never got an answer: the invocation stopped

    asyncio.run(main())
    (rec,) = sink.records
    assert rec.status is Status.CANCELLED
    assert rec.execution_started and STOPPED == STARTED == [rec.call_id]
    assert [s.step for s in rec.steps if s.step.startswith("cancel")] == [
        "cancel_requested", "cancelled"
    ]
    assert registry.status(rec.call_id).status is Status.CANCELLED  # type: ignore[union-attr]


def test_adopted_adk_tools_run_through_the_registry_and_unknown_ones_are_refused(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    ran: list[str] = []

    def shout(text: str, tool_context: Any = None) -> dict[str, str]:
        """Shout the text."""
        ran.append(text)
        return {"shout": text.upper()}

    def stray(text: str) -> str:
        """A tool the registry never heard of."""
        ran.append("stray")
        return text

    adk_shout = FunctionTool(shout)
    (definition,) = adopt(registry, [adk_shout])
    assert definition.parameters["properties"]["text"]["type"] == "string"
    assert definition.parameters["required"] == ["text"]
    llm = ScriptedLlm(
        model="scripted",
        script=[calls(("shout", {"text": "hi"})), calls(("stray", {"text": "x"}))],
        seen=[],
    )
    asyncio.run(run_agent(llm, [adk_shout, FunctionTool(stray)], [TooltracePlugin(registry)]))
    got = responses(llm)
    assert ran == ["hi"]
    assert got["fc-0"] == {"shout": "HI"}
    stray_rec = next(r for r in sink.records if r.attributes.get("provider.tool_name") == "stray")
    assert stray_rec.status is Status.REJECTED
    assert got["fc-1"]["status"] == "rejected"


def test_a_name_the_agent_lacks_is_refused_by_the_registry_through_the_plugin(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    # ADK hands a made-up name to the before-tool callbacks (as a placeholder tool) before it
    # answers the model itself: the plugin sends it through the registry.
    llm = ScriptedLlm(model="scripted", script=[calls(("nosuch_tool", {"q": "x"}))], seen=[])
    asyncio.run(run_agent(llm, as_adk_tools(registry), [TooltracePlugin(registry)]))
    (rec,) = [r for r in sink.records if r.attributes.get("provider.tool_name") == "nosuch_tool"]
    assert (rec.status, rec.reject_stage) == (Status.REJECTED, Stage.RESOLVE)
    assert rec.args_redacted == {"q": "x"}
    (answer,) = responses(llm).values()
    assert answer["status"] == "rejected" and "unknown tool" in answer["error"]
    # Without the plugin ADK answers alone, and nothing is recorded.
    before = len(sink.records)
    llm = ScriptedLlm(model="scripted", script=[calls(("nosuch_tool", {"q": "y"}))], seen=[])
    asyncio.run(run_agent(llm, as_adk_tools(registry), []))
    assert len(sink.records) == before
    assert "no tool with that name" in next(iter(responses(llm).values()))["error"]


def test_adopt_checks_the_converted_schema(registry: ToolRegistry) -> None:
    class Odd(BaseTool):
        def _get_declaration(self) -> types.FunctionDeclaration:
            return types.FunctionDeclaration(
                name="odd", description="d", parameters_json_schema={"type": "object",
                                                                      "properties": 3}
            )

    with pytest.raises(RegistrationError):
        adopt(registry, [Odd(name="odd", description="d")])
    assert registry.definition("odd") is None


def test_bypass_an_adk_agent_never_reaches_the_side_effect_and_sees_the_rejection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "side-effect.txt"
    monkeypatch.setenv("TOOLTRACE_TEST_MARKER", str(marker))
    sink = RecordingSink()
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", hooks=[deny_all], sinks=[sink])
    reg.register(touch)

    def raw_touch(name: str) -> str:
        """The same side effect as a plain ADK tool, given to the agent directly."""
        Path(os.environ["TOOLTRACE_TEST_MARKER"]).write_text(name)
        return "touched"

    raw = FunctionTool(raw_touch)
    adopt(reg, [raw], capability="write", effect="local")
    llm = ScriptedLlm(
        model="scripted",
        script=[calls(("touch", {"name": "x"})), calls(("raw_touch", {"name": "y"}))],
        seen=[],
    )
    try:
        events = asyncio.run(run_agent(llm, [*as_adk_tools(reg), raw], [TooltracePlugin(reg)]))
    finally:
        reg.shutdown(timeout_s=2.0)
    assert not marker.exists()
    assert final_text(events).endswith("done")
    got = responses(llm)
    assert [r.status for r in sink.records] == [Status.REJECTED, Status.REJECTED]
    for rec in sink.records:
        answer = got[str(rec.attributes["provider.tool_call_id"])]
        assert answer["status"] == "rejected" and rec.summary in answer["error"]
        assert "maintenance window" in answer["error"]


def test_definition_handler_tools_are_exposed_too(tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home")
    reg.register(
        ToolDefinition("plus", "Add.", {"type": "object", "properties": {"a": {"type": "integer"}},
                                         "required": ["a"]}),
        lambda a: a + 1,
    )
    llm = ScriptedLlm(model="scripted", script=[calls(("plus", {"a": 1}))], seen=[])
    asyncio.run(run_agent(llm, as_adk_tools(reg), []))
    reg.shutdown(timeout_s=2.0)
    assert responses(llm)["fc-0"] == {"result": 2}


def test_a_sub_agent_acts_for_the_same_principal_and_each_call_names_its_agent(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    ann = Principal(user="ann", tenant="acme")
    llm = ScriptedLlm(model="scripted", script=[
        calls(("add", {"a": 1, "b": 2})),
        calls(("transfer_to_agent", {"agent_name": "billing"})),
        calls(("aadd", {"a": 3, "b": 4})),
    ], seen=[])
    tools = as_adk_tools(registry, run_id="adk-hand-off", principal=ann)
    billing = LlmAgent(name="billing", model=llm, tools=tools)
    root = LlmAgent(name="coordinator", model=llm, tools=tools, sub_agents=[billing])
    plugin = TooltracePlugin(registry, run_id="adk-hand-off", principal=ann,
                             passthrough=["transfer_to_agent"])
    asyncio.run(run_agent(llm, [], [plugin], root=root))
    assert [(r.tool, r.status, r.principal) for r in sink.records] == [
        ("add", Status.OK, Principal(user="ann", agent="coordinator", tenant="acme")),
        ("aadd", Status.OK, Principal(user="ann", agent="billing", tenant="acme")),
    ]
    # Another user in the same run is refused, whichever agent asks.
    bob = as_adk_tools(registry, run_id="adk-hand-off", principal=Principal(user="bob"))
    llm.script = [calls(("add", {"a": 1, "b": 1}))]
    asyncio.run(run_agent(llm, bob, []))
    refused = sink.records[-1]  # recorded with the evidence: the tool and whom it asked for
    assert refused.status is Status.REJECTED and refused.tool == "add"
    assert refused.principal is not None and refused.principal.user == "bob"
    assert "principal" in sink.records[-1].summary
