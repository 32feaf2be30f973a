"""tooltrace.integrations.crewai: a real CrewAI ``Crew`` driven by a scripted ``BaseLLM``."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

# CrewAI reads these when imported: nothing may leave the machine or land in the real home.
# (Only where CrewAI is installed: elsewhere this module is skipped and changes nothing.)
if importlib.util.find_spec("crewai") is not None:
    _HOME = tempfile.mkdtemp(prefix="tooltrace-crewai-")
    os.environ.update(
        HOME=_HOME,
        CREWAI_STORAGE_DIR=str(Path(_HOME) / "storage"),
        CREWAI_DISABLE_TELEMETRY="true",
        CREWAI_DISABLE_TRACKING="true",
        CREWAI_TRACING_ENABLED="false",
    )

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

require_module("crewai", extra("crewai"))

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.events import crewai_event_bus  # noqa: E402
from crewai.hooks import clear_all_tool_call_hooks  # noqa: E402
from crewai.llms.base_llm import BaseLLM  # noqa: E402
from crewai.tools import BaseTool  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from pydantic import BaseModel  # noqa: E402

from tooltrace import (  # noqa: E402
    CallContext,
    Principal,
    RegistrationError,
    Stage,
    Status,
    ToolCancelled,
    ToolRegistry,
    tool,
)
from tooltrace.integrations.crewai import (  # noqa: E402
    adopt,
    akickoff,
    as_crewai_tools,
    install_guard,
)
from tooltrace.telemetry import TracingSink  # noqa: E402
from tooltrace.telemetry.audit import AuditStore  # noqa: E402
from tooltrace.testing import RecordingSink  # noqa: E402


def test_the_tested_versions() -> None:
    assert metadata.version("crewai").startswith("1.15."), metadata.version("crewai")
    assert tuple(int(p) for p in metadata.version("opentelemetry-api").split(".")[:3]) >= (
        1, 45, 1
    )


class ScriptedLLM(BaseLLM):
    """Answers each call with the next scripted turn (tool calls, or text); keeps the messages."""

    script: list[Any] = []
    seen: list[Any] = []
    tools_seen: list[Any] = []

    def call(self, messages: Any, tools: Any = None, *args: Any, **kwargs: Any) -> Any:
        self.seen.append([dict(m) for m in messages] if isinstance(messages, list) else messages)
        self.tools_seen.append(tools)
        return self.script.pop(0) if self.script else "done"

    def supports_function_calling(self) -> bool:
        return True


_IDS = iter(range(10**6))


def calls(*specs: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One model turn calling each ``(name, args)`` (CrewAI runs several in parallel)."""
    return [
        {"id": f"c{next(_IDS)}", "type": "function",
         "function": {"name": n, "arguments": json.dumps(a)}}
        for n, a in specs
    ]


def tool_messages(llm: ScriptedLLM) -> dict[str, str]:
    """What the model read for each tool call, by the model's call id."""
    return {
        m["tool_call_id"]: m["content"]
        for m in llm.seen[-1]
        if isinstance(m, dict) and m.get("role") == "tool"
    }


def crew_for(llm: ScriptedLLM, tools: list[BaseTool]) -> Crew:
    agent = Agent(role="r", goal="g", backstory="b", llm=llm, tools=tools, verbose=False)
    task = Task(description="do it", expected_output="x", agent=agent)
    return Crew(agents=[agent], tasks=[task])


@tool(timeout_s=60.0)
def hold(ctx: CallContext, seconds: float) -> str:
    """Wait on the call context (CrewAI runs tools on threads); confirm a cancel by raising."""
    STARTED.append(ctx.call_id)
    if ctx.wait(seconds):
        STOPPED.append(ctx.call_id)
        raise ToolCancelled("stopped on request")
    return "waited"


EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    clear_all_tool_call_hooks()
    STARTED.clear()
    STOPPED.clear()
    EXPORTER.clear()
    yield
    clear_all_tool_call_hooks()


@pytest.fixture
def trail(tmp_path: Path) -> CountingTrail:
    return CountingTrail(tmp_path / "home")


@pytest.fixture
def registry(tmp_path: Path, sink: RecordingSink, trail: CountingTrail) -> Iterator[ToolRegistry]:
    reg = ToolRegistry(
        workspace=tmp_path,
        home=tmp_path / "home",
        sinks=[sink, TracingSink(PROVIDER, interval_s=0.05), trail],
        cancel_grace_s=0.3,
    )
    for t in (add, aadd, leak, explode, unsure, hold):
        reg.register(t)
    yield reg
    reg.shutdown(timeout_s=2.0)


def test_the_model_sees_the_registry_tools_names_and_schemas(registry: ToolRegistry) -> None:
    llm = ScriptedLLM(model="scripted", script=[], seen=[], tools_seen=[])
    crew_for(llm, as_crewai_tools(registry)).kickoff()
    seen = {t["function"]["name"]: t["function"] for t in llm.tools_seen[0]}
    assert sorted(seen) == sorted(d.name for d in registry.visible_tools().visible)
    for name, fn in seen.items():
        definition = registry.definition(name)
        assert definition is not None
        assert fn["description"] == definition.description
        params = fn["parameters"]
        want = definition.parameters
        assert sorted(params["properties"]) == sorted(want["properties"])
        # CrewAI offers tools in strict mode: every property required, optional ones nullable.
        assert sorted(params["required"]) == sorted(want["properties"])
        for prop, schema in want["properties"].items():
            kinds = params["properties"][prop].get("anyOf", [params["properties"][prop]])
            assert schema["type"] in [k["type"] for k in kinds]
            if prop not in want.get("required", ()):
                assert {"type": "null"} in kinds


def test_sync_and_async_tools_in_parallel_keep_their_call_ids_and_audit_rows(
    registry: ToolRegistry, sink: RecordingSink, tmp_path: Path, trail: CountingTrail
) -> None:
    llm = ScriptedLLM(
        model="scripted",
        script=[calls(("add", {"a": 1, "b": 2}), ("aadd", {"a": 3, "b": 4})), "done"],
        seen=[], tools_seen=[],
    )
    out = crew_for(llm, as_crewai_tools(registry)).kickoff()
    assert out.raw == "done"
    got = tool_messages(llm)
    assert sorted(got.values()) == ["3", "7"]
    assert {r.status for r in sink.records} == {Status.OK}
    assert len({r.call_id for r in sink.records}) == 2
    assert trail.lookups == 0  # ids the registry made: never searched for in its trail
    registry.shutdown(timeout_s=5.0)
    with AuditStore(tmp_path / "home") as store:
        rows = store.sql("select call_id, tool, status from tool_calls order by tool").dicts()
    assert [(r["tool"], r["status"]) for r in rows] == [("aadd", "ok"), ("add", "ok")]
    assert {r["call_id"] for r in rows} == {r.call_id for r in sink.records}


def test_a_repeated_call_is_never_answered_from_crewais_cache(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    llm = ScriptedLLM(
        model="scripted",
        script=[calls(("add", {"a": 1, "b": 1})), calls(("add", {"a": 1, "b": 1})), "done"],
        seen=[], tools_seen=[],
    )
    crew_for(llm, as_crewai_tools(registry)).kickoff()
    assert len(sink.records) == 2


def test_the_model_sees_the_redacted_trimmed_result(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    llm = ScriptedLLM(model="scripted", script=[calls(("leak", {"chars": None})), "done"], seen=[],
                      tools_seen=[])
    crew_for(llm, as_crewai_tools(registry)).kickoff()
    (seen,) = tool_messages(llm).values()
    assert SECRET not in seen
    assert len(seen) < 20_000
    (rec,) = sink.records
    assert rec.artifact is not None and rec.artifact.path in seen


def test_every_other_status_is_a_crewai_tool_failure_and_the_run_goes_on(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    run_id = "crewai-cancel-run"
    llm = ScriptedLLM(
        model="scripted",
        script=[
            calls(("add", {"a": "one", "b": 2})),  # rejected: params
            calls(("explode", {})),  # failed
            calls(("unsure", {})),  # unknown
            calls(("hold", {"seconds": 30})),  # cancelled (by the registry's cancel)
            "done",
        ],
        seen=[], tools_seen=[],
    )

    async def main() -> Any:
        async def cancel_when_started() -> None:
            await asyncio.to_thread(wait_for, lambda: STARTED, 20.0)
            await asyncio.to_thread(registry.cancel, run_id)

        canceller = asyncio.create_task(cancel_when_started())
        out = await asyncio.to_thread(crew_for(llm, as_crewai_tools(registry, run_id=run_id))
                                      .kickoff)
        await canceller
        return out

    out = asyncio.run(main())
    assert out.raw == "done"
    got = tool_messages(llm)
    by_tool = {r.tool: r for r in sink.records}
    failures = {f.failure.code: f.failure for f in out.tasks_output[0].tool_failures}
    for tool_name, status in (
        ("add", Status.REJECTED),
        ("explode", Status.FAILED),
        ("unsure", Status.UNKNOWN),
        ("hold", Status.CANCELLED),
    ):
        rec = by_tool[tool_name]
        assert rec.status is status, (tool_name, rec.status, rec.summary)
        assert any(rec.summary in text and f"(code: {status.value})" in text
                   for text in got.values()), (tool_name, got)
        assert failures[status.value].details["call_id"] == rec.call_id
    assert SECRET not in str(got)


def test_one_span_per_call_under_the_span_where_the_crew_runs(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    llm = ScriptedLLM(
        model="scripted",
        script=[calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})),
                calls(("add", {"a": 3, "b": 3})), "done"],
        seen=[], tools_seen=[],
    )
    with PROVIDER.get_tracer("app").start_as_current_span("crew run") as app:
        crew_for(llm, as_crewai_tools(registry)).kickoff()
    registry.flush()
    ours = [s for s in EXPORTER.get_finished_spans() if s.name == "execute_tool add"]
    assert len(ours) == 3
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in ours) == sorted(
        r.call_id for r in sink.records
    )
    for span in ours:
        assert span.parent is not None
        assert span.parent.span_id == app.get_span_context().span_id


def test_a_cancelled_kickoff_cancels_the_runs_tool_calls(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    run_id = "crewai-kickoff"
    llm = ScriptedLLM(model="scripted", script=[calls(("hold", {"seconds": 30})), "done"],
                      seen=[], tools_seen=[])
    crew = crew_for(llm, as_crewai_tools(registry, run_id=run_id))

    async def main() -> None:
        task = asyncio.create_task(akickoff(crew, registry, run_id))
        await asyncio.to_thread(wait_for, lambda: STARTED, 20.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    wait_for(lambda: sink.records, 5.0)
    (rec,) = sink.records
    assert rec.status is Status.CANCELLED and rec.execution_started
    assert STOPPED == STARTED == [rec.call_id]
    later = registry.call({"name": "add", "arguments": {"a": 1, "b": 1}, "run_id": run_id})
    assert later.status is Status.REJECTED


class _ShoutArgs(BaseModel):
    text: str


class Shout(BaseTool):
    name: str = "shout"
    description: str = "Shout the text."
    args_schema: type[BaseModel] = _ShoutArgs

    def _run(self, text: str) -> str:
        RAN.append(text)
        return text.upper()


class Stray(BaseTool):
    name: str = "stray"
    description: str = "A tool the registry never heard of."
    args_schema: type[BaseModel] = _ShoutArgs

    def _run(self, text: str) -> str:
        RAN.append("stray")
        return text


RAN: list[str] = []


def test_adopted_tools_and_the_guard_route_every_call_through_the_registry(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    RAN.clear()
    shout = Shout()
    (definition,) = adopt(registry, [shout])
    assert definition.parameters["properties"]["text"]["type"] == "string"
    assert definition.parameters["required"] == ["text"]
    install_guard(registry)
    llm = ScriptedLLM(
        model="scripted",
        script=[calls(("shout", {"text": "hi"})), calls(("stray", {"text": "x"})), "done"],
        seen=[], tools_seen=[],
    )
    crew_for(llm, [shout, Stray()]).kickoff()
    got = list(tool_messages(llm).values())
    assert RAN == ["hi"]
    assert got[0] == "HI"
    assert "rejected" in got[1] and "(code: rejected)" in got[1]
    assert [(r.tool, r.status) for r in sink.records] == [
        ("shout", Status.OK), ("_unregistered", Status.REJECTED)
    ]
    assert sink.records[1].attributes["provider.tool_name"] == "stray"


def test_a_name_the_agent_lacks_is_refused_by_the_registry_with_the_guard(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    # Without the guard CrewAI answers "Tool not found" alone, and nothing is recorded.
    llm = ScriptedLLM(model="scripted", script=[calls(("nosuch_tool", {"q": "x"})), "done"],
                      seen=[], tools_seen=[])
    crew_for(llm, as_crewai_tools(registry)).kickoff()
    assert sink.records == [] and list(tool_messages(llm).values()) == ["Tool not found"]
    # CrewAI runs its before-tool hooks for a name it does not know: the guard's sends it
    # through the registry, and the model reads the registry's refusal.
    install_guard(registry)
    llm = ScriptedLLM(model="scripted", script=[calls(("nosuch_tool", {"q": "x"})), "done"],
                      seen=[], tools_seen=[])
    crew_for(llm, as_crewai_tools(registry)).kickoff()
    (rec,) = sink.records
    assert (rec.status, rec.reject_stage, rec.args_redacted) == (
        Status.REJECTED, Stage.RESOLVE, {"q": "x"})
    assert rec.attributes["provider.tool_name"] == "nosuch_tool"
    (answer,) = tool_messages(llm).values()
    assert "rejected" in answer and "unknown tool" in answer


class ReActLLM(ScriptedLLM):
    """A model that writes its tool calls as text (CrewAI's ReAct path)."""

    def supports_function_calling(self) -> bool:
        return False


def test_a_name_crewai_refuses_before_any_hook_is_recorded_by_the_guard(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    install_guard(registry)
    llm = ReActLLM(model="scripted", seen=[], tools_seen=[], script=[
        'Thought: use a tool\nAction: nosuch_tool\nAction Input: {"q": "x"}',
        "Thought: I now know the final answer\nFinal Answer: done"])
    crew_for(llm, as_crewai_tools(registry)).kickoff()
    # The model read CrewAI's own refusal; the registry recorded the attempt (the event bus
    # runs its listeners on threads of its own: wait for the record).
    assert any("Action 'nosuch_tool' don't exist" in str(m.get("content"))
               for m in llm.seen[-1] if isinstance(m, dict))
    wait_for(lambda: sink.records, 10.0)
    crewai_event_bus.flush()  # CrewAI parses the action several times: one record all the same
    (rec,) = sink.records
    assert (rec.status, rec.reject_stage) == (Status.REJECTED, Stage.RESOLVE)
    assert rec.attributes["provider.tool_name"] == "nosuch_tool"
    assert rec.principal is not None and rec.principal.agent == "r"


def test_adopt_checks_the_converted_schema(registry: ToolRegistry) -> None:
    class Odd(BaseModel):
        x: int

    class OddTool(BaseTool):
        name: str = "odd"
        description: str = "d"
        args_schema: type[BaseModel] = Odd

        def _run(self, x: int) -> int:
            return x

    tool = OddTool()
    tool.args_schema.model_json_schema = lambda: {"type": "object", "properties": 3}  # type: ignore[method-assign]
    with pytest.raises(RegistrationError):
        adopt(registry, [tool])
    assert registry.definition("odd") is None


def test_bypass_a_crew_never_reaches_the_side_effect_and_sees_the_rejection(
    tmp_path: Path, marker: Path
) -> None:
    sink = RecordingSink()
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", hooks=[deny_all], sinks=[sink])
    reg.register(touch)

    class RawTouch(BaseTool):
        name: str = "raw_touch"
        description: str = "The same side effect as a plain CrewAI tool, given to the agent."

        def _run(self, name: str) -> str:
            marker.write_text(name)
            return "touched"

    raw = RawTouch()
    adopt(reg, [raw], capability="write", effect="local")
    uninstall = install_guard(reg)
    llm = ScriptedLLM(
        model="scripted",
        script=[calls(("touch", {"name": "x"})), calls(("raw_touch", {"name": "y"})), "done"],
        seen=[], tools_seen=[],
    )
    try:
        out = crew_for(llm, [*as_crewai_tools(reg), raw]).kickoff()
    finally:
        uninstall()
        reg.shutdown(timeout_s=2.0)
    assert not marker.exists()
    assert out.raw == "done"
    assert [r.status for r in sink.records] == [Status.REJECTED, Status.REJECTED]
    got = list(tool_messages(llm).values())
    for rec, text in zip(sink.records, got, strict=True):
        assert rec.summary in text and "maintenance window" in text


def test_a_crew_of_two_agents_acts_for_one_principal_and_each_call_names_its_agent(
    registry: ToolRegistry, sink: RecordingSink
) -> None:
    ann = Principal(user="ann", tenant="acme")
    llm = ScriptedLLM(model="scripted", script=[
        calls(("add", {"a": 1, "b": 2})), "summed", calls(("aadd", {"a": 3, "b": 4})), "done",
    ], seen=[], tools_seen=[])
    install_guard(registry, run_id="crew-run", principal=ann)
    agents = [Agent(role=role, goal="g", backstory="b", llm=llm, verbose=False,
                    tools=as_crewai_tools(registry, run_id="crew-run", principal=ann))
              for role in ("Researcher", "Senior Writer")]
    tasks = [Task(description=f"step {i}", expected_output="x", agent=a)
             for i, a in enumerate(agents)]
    assert Crew(agents=agents, tasks=tasks).kickoff().raw == "done"
    assert [(r.tool, r.status, r.principal) for r in sink.records] == [
        ("add", Status.OK, Principal(user="ann", agent="Researcher", tenant="acme")),
        ("aadd", Status.OK, Principal(user="ann", agent="Senior-Writer", tenant="acme")),
    ]
    # Another user in the same run is refused.
    llm.script = [calls(("add", {"a": 1, "b": 1})), "done"]
    bob = as_crewai_tools(registry, run_id="crew-run", principal=Principal(user="bob"))
    crew_for(llm, bob).kickoff()
    refused = sink.records[-1]
    assert refused.status is Status.REJECTED and "principal" in refused.summary
    assert refused.principal is not None and refused.principal.user == "bob"  # the evidence
    assert refused.tool == "add"
