"""Google ADK (``google-adk`` 2.x): every tool call of an ADK agent runs through a ``ToolRegistry``.

Two parts, used together::

    agent = LlmAgent(name="a", model=..., tools=as_adk_tools(registry))
    runner = InMemoryRunner(agent=agent, plugins=[TooltracePlugin(registry)])

- ``as_adk_tools(registry, mode)``: the tools the mode exposes, as ADK tools (``TooltraceTool``)
  whose declaration is the registry's name, description and JSON Schema, and whose ``run_async``
  is ``registry.acall``.
- ``TooltracePlugin(registry)``: a runner plugin whose ``before_tool_callback`` runs every other
  tool call (a tool ``adopt`` registered, or one that never was) through the registry and
  answers it with the envelope, so ADK never runs a tool outside the registry.
- ``adopt(registry, tools)``: registers existing ADK tools (their declaration's schema, checked
  by the registry); they then run, through ADK's own ``run_async``, inside the registry's
  execute step.

What the model gets: the redacted, trimmed result (an offloaded result as its preview and a
reference to the artifact); any other status as ADK's own answer for a call the model should
correct, a response ``{"error": <summary>, "status": <status>}`` (what ADK returns for missing
arguments or an unknown tool), which ADK's span also reports as ``error.type``
``tooltrace.<status>``.

Principal: ``principal=`` (on ``as_adk_tools``, ``TooltraceTool`` and ``TooltracePlugin``) says
whom the calls act for; the agent acting is ADK's ``tool_context.agent_name`` (so a sub-agent's
calls name the sub-agent) unless ``principal`` names one.

Spans: ADK opens ``execute_tool {tool}`` around the callbacks and the tool and keeps it current.
With the registry's ``TracingSink`` wrapped in ``SharedSpans`` the call takes that span (one
span per call): the record carries its ids and tooltrace's attributes and one event per
pipeline step are written onto it before ADK ends it. With a plain ``TracingSink``, tooltrace's
span is its child (two spans per call; a warning says so once). Either way ADK's span reports
``error.type`` for ``failed`` and ``unknown`` only, as tooltrace's own spans do.
"""

# google-adk lives in a venv of its own (.ci/framework-venvs type-checks this module there, strict);
# where it is not installed its names are Any, which the package-wide check must accept.
# mypy: disable-error-code="import-not-found,import-untyped"
# mypy: disallow-subclassing-any=False

from __future__ import annotations

import contextvars
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from google.adk.models.llm_request import LlmRequest
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.genai import types
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Span

from ..exceptions import RegistrationError
from ..model import Capability, Effect, Principal, Status, ToolDefinition, ToolResultEnvelope
from ._adopt import Adopted, register_adopted
from ._spans import SharedSpans, annotate, framework_span
from .adapter import ADOPTED_CAPABILITY, ADOPTED_EFFECT, acall, make_call, model_text, plain

if TYPE_CHECKING:
    from google.adk.tools.tool_context import ToolContext

    from ..registry import ToolRegistry

__all__ = [
    "AdkToolError",
    "SharedSpans",
    "TooltracePlugin",
    "TooltraceTool",
    "adopt",
    "as_adk_tools",
    "response_for",
]

INTEGRATION = "google-adk"
_ADK_SCOPE = "gcp.vertex.agent"
_ERROR_STATUSES = frozenset({Status.FAILED, Status.UNKNOWN})
# The error type of the call this task just answered, for ADK's span (see _detect_error_...).
_ERROR_TYPE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tooltrace_adk_error_type", default=None
)
# The ADK context of the call being run: an adopted tool's ``run_async`` needs it, and it
# reaches the registry's execute step (task or tool thread) with the rest of the context.
_TOOL_CONTEXT: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar(
    "tooltrace_adk_tool_context", default=None
)


class AdkToolError(Exception):
    """An adopted ADK tool answered with ADK's error response (``{"error": ...}``)."""


def response_for(env: ToolResultEnvelope) -> dict[str, Any]:
    """The function response ADK hands the model for this envelope.

    ``ok``: the redacted result (a mapping as is, anything else as ``{"result": ...}``; an
    offloaded result as its preview and where the full text is). Otherwise ADK's error answer,
    ``{"error": <summary>, "status": <status>}``.
    """
    if env.status is not Status.OK:
        return {"error": model_text(env), "status": env.status.value}
    if env.artifact is None and isinstance(env.data, Mapping):
        out: dict[str, Any] = plain(env.data)
        return out
    if env.artifact is None and env.data is not None:
        return {"result": plain(env.data)}
    return {"result": model_text(env)}


def _adk_span(name: str) -> Span | None:
    """ADK's recording ``execute_tool`` span for this call, when it is the current span."""
    span = trace.get_current_span()
    if not isinstance(span, ReadableSpan) or not span.is_recording():
        return None
    scope = span.instrumentation_scope
    if span.name != f"execute_tool {name}" or scope is None or scope.name != _ADK_SCOPE:
        return None
    return span


async def _run(
    registry: ToolRegistry,
    name: str,
    args: Mapping[str, Any],
    tool_context: ToolContext,
    mode: str,
    run_id: str | None,
    principal: Principal | None,
) -> dict[str, Any]:
    call = make_call(
        registry,
        name,
        args,
        integration=INTEGRATION,
        provider_id=tool_context.function_call_id,
        mode=mode,
        run_id=run_id,
        requested_name=registry.definition(name) is None,
        principal=principal,
        agent=tool_context.agent_name,
    )
    span = _adk_span(name)
    token = _TOOL_CONTEXT.set(tool_context)
    try:
        with framework_span(span):
            env = await acall(registry, call)
    finally:
        _TOOL_CONTEXT.reset(token)
    if span is not None:
        annotate(span, env.record, registry)
        span.set_attribute("tooltrace.call_id", env.call_id)
        span.set_attribute("tooltrace.status", env.status.value)
    failed = env.status in _ERROR_STATUSES
    _ERROR_TYPE.set((env.record.error_type or "_OTHER") if failed else None)
    return response_for(env)


class TooltraceTool(BaseTool):
    """A registry tool as ADK sees it; ``run_async`` is ``registry.acall``. Its calls act for
    ``principal`` (default: their run's), made by the ADK agent running them."""

    def __init__(
        self,
        registry: ToolRegistry,
        definition: ToolDefinition,
        *,
        mode: str = "default",
        run_id: str | None = None,
        principal: Principal | None = None,
    ) -> None:
        super().__init__(name=definition.name, description=definition.description)
        self.registry = registry
        self.definition = definition
        self.mode = mode
        self.run_id = run_id
        self.principal = principal

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(
            name=self.name,
            description=self.description,
            parameters_json_schema=plain(self.definition.parameters),
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Run the call through the registry; return what the model may see."""
        return await _run(self.registry, self.name, args, tool_context, self.mode, self.run_id,
                          self.principal)

    def _detect_error_in_response(self, response: Any) -> str | None:
        # ADK's hook for tools that answer errors as a response: error.type on its span. ADK
        # asks in the task that ran the call, right after it.
        return _ERROR_TYPE.get()


def as_adk_tools(
    registry: ToolRegistry,
    mode: str = "default",
    *,
    run_id: str | None = None,
    principal: Principal | None = None,
) -> list[BaseTool]:
    """The tools ``mode`` exposes, as ADK tools (same names, descriptions and schemas), their
    calls acting for ``principal`` when given."""
    return [
        TooltraceTool(registry, d, mode=mode, run_id=run_id, principal=principal)
        for d in registry.visible_tools(mode).visible
    ]


class TooltracePlugin(BasePlugin):
    """Runs every tool call of a runner's agents through the registry.

    A ``TooltraceTool`` runs itself through the registry; any other tool's call is run here,
    by name, and answered with the envelope: the tool ADK would have run never runs outside
    the registry (an adopted tool runs inside its execute step; a tool the registry does not
    know is refused, stage ``resolve``). ``passthrough`` names tools ADK may run itself (for
    example ``transfer_to_agent``): those are not policed. ``principal``: whom the calls it
    runs act for (default: their run's).
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        mode: str = "default",
        run_id: str | None = None,
        passthrough: Collection[str] = (),
        name: str = "tooltrace",
        principal: Principal | None = None,
    ) -> None:
        super().__init__(name=name)
        self.registry = registry
        self.mode = mode
        self.run_id = run_id
        self.principal = principal
        self.passthrough = frozenset(passthrough)

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Answer the call from the registry (None lets a ``TooltraceTool`` run itself)."""
        if isinstance(tool, TooltraceTool) or tool.name in self.passthrough:
            return None
        return await _run(self.registry, tool.name, tool_args, tool_context, self.mode,
                          self.run_id, self.principal)


def _declaration_of(tool: BaseTool) -> types.FunctionDeclaration | None:
    """The declaration ADK sends the model for ``tool``, asked the way ADK's own flow asks."""
    request = LlmRequest()
    request.append_tools([tool])
    declarations = [d for t in request.config.tools or () if isinstance(t, types.Tool)
                    for d in t.function_declarations or ()]
    return declarations[0] if declarations else None


def _schema_of(tool: BaseTool) -> dict[str, Any]:
    decl = _declaration_of(tool)
    if decl is None:
        raise RegistrationError(f"ADK tool {tool.name!r} has no function declaration to adopt")
    if decl.parameters_json_schema is not None:
        schema = plain(decl.parameters_json_schema)
    elif decl.parameters is not None:
        js = decl.parameters.json_schema.model_dump(mode="json", exclude_none=True)
        schema = plain(js)
    else:
        schema = {"type": "object", "properties": {}}
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise RegistrationError(f"ADK tool {tool.name!r}: its parameters are not a JSON object")
    schema.pop("title", None)
    return schema


def adopt(
    registry: ToolRegistry,
    tools: Iterable[BaseTool],
    *,
    capability: Capability | str = ADOPTED_CAPABILITY,
    effect: Effect | str = ADOPTED_EFFECT,
    source: str = "framework:google-adk",
    priority: int = 0,
    timeout_s: float = 30.0,
) -> list[ToolDefinition]:
    """Register existing ADK tools in the registry; return their definitions.

    Each tool's declaration becomes the definition's JSON Schema (checked and compiled by the
    registry, which raises ``RegistrationError`` for one it cannot use). The tool then runs
    inside the registry's execute step through its own ``run_async``, with the ADK context of
    the call, so it runs only within an ADK run (give the agent the tool and the runner a
    ``TooltracePlugin``, or give the agent ``as_adk_tools``). An ``{"error": ...}`` answer
    (ADK's convention) is recorded as ``failed``. ``capability`` and ``effect`` apply to every
    tool given: adopt tools of different power in separate calls.
    """
    return register_adopted(registry, tools, _read, capability=capability, effect=effect,
                            source=source, priority=priority, timeout_s=timeout_s)


def _read(tool: BaseTool) -> Adopted:
    return Adopted(tool.name, tool.description or "", _schema_of(tool), _handler(tool),
                   tool_type="extension" if tool.is_long_running else "function")


def _handler(tool: BaseTool) -> Any:
    async def run_adopted(**args: Any) -> Any:
        ctx = _TOOL_CONTEXT.get()
        if ctx is None:
            raise RuntimeError(f"ADK tool {tool.name!r} runs only within an ADK run")
        result = await tool.run_async(args=args, tool_context=ctx)
        if isinstance(result, dict) and isinstance(result.get("error"), str):
            raise AdkToolError(result["error"])
        return result

    run_adopted.__name__ = f"adk_{tool.name}"
    return run_adopted
