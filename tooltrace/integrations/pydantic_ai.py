"""Pydantic AI: every tool call of an ``Agent`` runs through ``ToolRegistry.acall``.

    from tooltrace.integrations.pydantic_ai import SharedSpans, Tooltrace
    registry = ToolRegistry(sinks=[SharedSpans(TracingSink(provider)), ...])
    agent = Agent(model, capabilities=[Instrumentation(...), Tooltrace(registry)])

- ``Tooltrace(registry, mode)``: a capability that gives the agent the registry's tools (the
  names and schemas the registry has) and, innermost in the capability chain, sends every other
  tool call the agent makes to the registry too: an adopted tool runs there, any other tool is
  refused as unknown. Tool calls only reach a tool's code through the registry.
- ``as_toolset(registry, mode)``: the registry's tools as a Pydantic AI toolset, on its own.
- ``adopt(registry, tools, source=...)``: registers Pydantic AI tools (``Tool``, functions, a
  ``FunctionToolset``) as tooltrace tools; their JSON Schema is checked when registered.

Unknown tools: Pydantic AI answers a call of a name the agent does not have itself, before any
tool hook runs (the model reads its "Unknown tool name" retry prompt, listing the tools it
has). ``Tooltrace`` sees the model's response first (``after_model_request``) and sends each
such call through the registry too, so it is refused (stage ``resolve``) and recorded with the
model's call id and the name it asked for.

Outcomes reach the model through Pydantic AI's tool-error path with the envelope's summary:
arguments the registry refused raise ``ModelRetry`` (the model corrects them, within the tool's
retry budget); any other refusal, failure, cancel or unknown end raises ``ToolFailed`` (the
model sees it and the run goes on). The model only ever sees the redacted, trimmed result.

Principal: ``principal=`` says whom the calls act for; the agent acting is the running agent's
``name`` (``RunContext.agent``; an agent delegated to from a tool is its own) unless
``principal`` names one.

One span per call: with instrumentation on, the call takes Pydantic AI's own ``execute_tool``
span (see ``tooltrace.integrations._spans``); wrap the registry's ``TracingSink`` in
``SharedSpans`` so tooltrace exports no second span.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any, Final

from pydantic_ai import ApprovalRequired, ModelRetry, RunContext, Tool, ToolFailed
from pydantic_ai.capabilities import (
    AbstractCapability,
    CapabilityOrdering,
    ValidatedToolArgs,
    WrapToolExecuteHandler,
)
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import ToolDefinition as PaiToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from ..exceptions import RegistrationError
from ..model import Capability, Effect, Principal, Stage, Status, ToolDefinition, ToolResultEnvelope
from ..registry import ToolRegistry
from ._adopt import Adopted, register_adopted
from ._bridge import FrameworkApprover, approval_reason, jsonable
from ._spans import SharedSpans, annotate, framework_span, tool_span
from .adapter import ADOPTED_CAPABILITY, ADOPTED_EFFECT, acall, make_call, model_text

__all__ = [
    "FrameworkApprover",
    "SharedSpans",
    "Tooltrace",
    "TooltraceToolset",
    "adopt",
    "as_toolset",
]

#: ``tooltrace.integration`` of the calls this adapter makes.
INTEGRATION: Final = "pydantic-ai"
#: Who the registry's approval step names when Pydantic AI's approval flow said yes.
APPROVED_BY: Final = "pydantic-ai"
# Marks the tool definitions this adapter serves (kept off the model: metadata is not sent).
_MARK: Final = "tooltrace"
# Arguments reach the registry as the model sent them: validation is the registry's step.
_ANY_ARGS: Final = SchemaValidator(core_schema.any_schema())
# The run context of the call in progress, for adopted tools that take one.
_RUN_CONTEXT: ContextVar[RunContext[Any] | None] = ContextVar("tooltrace_pai_ctx", default=None)


async def _run(
    registry: ToolRegistry,
    name: str,
    arguments: Any,
    ctx: RunContext[Any],
    *,
    mode: str,
    run_id: str | None,
    approvals: FrameworkApprover | None,
    principal: Principal | None = None,
) -> Any:
    """Run one of the agent's tool calls through the registry; map the envelope for the model."""
    run = run_id or ctx.run_id
    approved = ctx.tool_call_approved
    agent = None if ctx.agent is None else ctx.agent.name
    call = make_call(
        registry, name, arguments, integration=INTEGRATION, provider_id=ctx.tool_call_id,
        mode=mode, run_id=run, principal=principal, agent=agent,
    )
    if approvals is not None and not approved and call.call_id is not None:
        # Policy is asked about the call under the id it then runs with.
        reason = approval_reason(registry, name, arguments, mode=mode, run_id=run,
                                 call_id=call.call_id, principal=principal, agent=agent)
        if reason is not None:
            # Pydantic AI's convention: the run stops with the call in DeferredToolRequests.
            raise ApprovalRequired(metadata={"tooltrace.reason": reason})
    span = tool_span(ctx.tool_call_id)
    token = _RUN_CONTEXT.set(ctx)
    try:
        with framework_span(span):
            if approvals is not None and approved and call.call_id is not None:
                with approvals.granted(call.call_id, APPROVED_BY):
                    env = await acall(registry, call)
            else:
                env = await acall(registry, call)
    finally:
        _RUN_CONTEXT.reset(token)
    if span is not None:
        annotate(span, env.record, registry)
    return _for_model(env)


def _for_model(env: ToolResultEnvelope) -> Any:
    if env.ok:
        # Structured data stays structured (Pydantic AI serialises it); offloaded output is text.
        return env.data if env.artifact is None else model_text(env)
    if env.status is Status.REJECTED and env.reject_stage is Stage.PARAMS:
        raise ModelRetry(model_text(env))  # the model's own arguments: it corrects them
    raise ToolFailed(model_text(env))


def _definition(d: ToolDefinition, mode: str) -> PaiToolDefinition:
    return PaiToolDefinition(
        name=d.name,
        description=d.description,
        parameters_json_schema=dict(d.parameters),
        metadata={_MARK: mode},
    )


class TooltraceToolset(AbstractToolset[Any]):
    """The registry's tools in one mode, as a Pydantic AI toolset.

    The tools are listed afresh for every run step (tools registered later show up); each call
    runs through the registry, which validates the arguments (the toolset passes them on as the
    model sent them).
    """

    def __init__(
        self,
        registry: ToolRegistry,
        mode: str = "default",
        *,
        max_retries: int = 1,
        run_id: str | None = None,
        approvals: FrameworkApprover | None = None,
        id: str | None = None,
        principal: Principal | None = None,
    ) -> None:
        self.registry = registry
        self.principal = principal
        self.mode = mode
        self.max_retries = max_retries
        self.run_id = run_id
        self.approvals = approvals
        self._id = id

    @property
    def id(self) -> str | None:
        """The toolset's id (for durable execution), if given."""
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The tools the registry shows in this toolset's mode."""
        return {
            d.name: ToolsetTool(
                toolset=self,
                tool_def=_definition(d, self.mode),
                max_retries=self.max_retries,
                args_validator=_ANY_ARGS,
            )
            for d in self.registry.visible_tools(self.mode).visible
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Run the call through the registry."""
        return await _run(
            self.registry,
            name,
            tool_args,
            ctx,
            mode=self.mode,
            run_id=self.run_id,
            approvals=self.approvals,
            principal=self.principal,
        )


def as_toolset(
    registry: ToolRegistry,
    mode: str = "default",
    *,
    max_retries: int = 1,
    run_id: str | None = None,
    approvals: FrameworkApprover | None = None,
    principal: Principal | None = None,
) -> TooltraceToolset:
    """The registry's tools in ``mode`` as a toolset for ``Agent(toolsets=[...])``.

    ``run_id`` names the tooltrace run of every call (default: the agent run's id, so
    ``registry.cancel(run_id)`` stops an agent run's calls); ``principal``, whom every call acts
    for (default: its run's). With ``approvals`` (also the
    registry's approver), a call policy asks about interrupts the run through Pydantic AI's
    deferred-approval flow; without it, the registry's own approver decides.
    """
    return TooltraceToolset(registry, mode, max_retries=max_retries, run_id=run_id,
                            approvals=approvals, principal=principal)


class Tooltrace(AbstractCapability[Any]):
    """Capability: the registry's tools for the agent, and every tool call through the registry.

    It sits innermost in the capability chain, so instrumentation's span and the other
    capabilities' hooks wrap the registry's pipeline. Calls of tools it did not provide go to
    the registry as well (``strict``, the default): an adopted tool runs there, anything else
    is refused as an unknown tool. ``strict=False`` lets such calls run as the agent has them.
    ``provide_tools=False`` gives the agent no tools (it keeps its own, adopted ones included,
    and their calls run through the registry). ``principal``: whom every call acts for.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        mode: str = "default",
        *,
        strict: bool = True,
        provide_tools: bool = True,
        max_retries: int = 1,
        run_id: str | None = None,
        approvals: FrameworkApprover | None = None,
        principal: Principal | None = None,
    ) -> None:
        self.registry = registry
        self.mode = mode
        self.strict = strict
        self.principal = principal
        self.run_id = run_id
        self.approvals = approvals
        self.provide_tools = provide_tools
        self.toolset = as_toolset(registry, mode, max_retries=max_retries, run_id=run_id,
                                  approvals=approvals, principal=principal)

    def get_ordering(self) -> CapabilityOrdering:
        """Innermost: the registry is the last gate before a tool's code."""
        return CapabilityOrdering(position="innermost")

    def get_toolset(self) -> TooltraceToolset | None:
        """The registry's tools in this capability's mode (None with ``provide_tools=False``)."""
        return self.toolset if self.provide_tools else None

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        """Send each call of a tool the agent does not have through the registry, to be refused
        and recorded: Pydantic AI refuses such a call (the model reads its retry prompt)
        before any tool hook could see it. The response goes on unchanged."""
        params = request_context.model_request_parameters
        known = {t.name for t in (*params.function_tools, *params.output_tools)}
        for part in response.parts:
            if isinstance(part, ToolCallPart) and part.tool_name not in known:
                agent = None if ctx.agent is None else ctx.agent.name
                call = make_call(
                    self.registry, part.tool_name, part.args_as_dict(), integration=INTEGRATION,
                    provider_id=part.tool_call_id, mode=self.mode,
                    run_id=self.run_id or ctx.run_id, requested_name=True,
                    principal=self.principal, agent=agent,
                )
                await acall(self.registry, call)
        return response

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: PaiToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Registry tools run through the toolset; other tools through the registry by name.

        A routed call takes the model's arguments (what the registered schema describes), not
        the Python objects Pydantic AI validated them into; the lifecycle ``handler`` would run
        the tool's code directly, so it is not called for them.
        """
        if (tool_def.metadata or {}).get(_MARK) is not None or not self.strict:
            return await handler(args)
        return await _run(
            self.registry,
            call.tool_name,
            call.args_as_dict(),
            ctx,
            mode=self.mode,
            run_id=self.run_id,
            approvals=self.approvals,
            principal=self.principal,
        )


def _tools_of(tools: Iterable[Any]) -> Iterable[Tool[Any]]:
    for item in tools:
        if isinstance(item, FunctionToolset):
            yield from item.tools.values()
        elif isinstance(item, Tool):
            yield item
        elif callable(item):
            yield Tool(item)
        else:
            raise RegistrationError(
                f"cannot adopt {type(item).__name__}: pass Tool objects, functions or a "
                "FunctionToolset"
            )


def _handler(t: Tool[Any]) -> Callable[..., Any]:
    """The registered handler of an adopted tool: Pydantic AI's own validation, then its code."""
    fs = t.function_schema
    fn = t.function
    name = t.name

    def call_args(arguments: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        kwargs = dict(fs.validator.validate_python(dict(arguments)))
        args: list[Any] = []
        if t.takes_ctx:
            ctx = _RUN_CONTEXT.get()
            if ctx is None:
                raise RuntimeError(
                    f"tool {name!r} takes a Pydantic AI RunContext: call it through an agent"
                )
            args.append(ctx)
        for field in fs.positional_fields:
            args.append(kwargs.pop(field))
        if fs.var_positional_field:
            args.extend(kwargs.pop(fs.var_positional_field))
        return args, kwargs

    if inspect.iscoroutinefunction(fn):

        async def run_async(**arguments: Any) -> Any:
            args, kwargs = call_args(arguments)
            return jsonable(await fn(*args, **kwargs))

        return run_async

    def run_sync(**arguments: Any) -> Any:
        args, kwargs = call_args(arguments)
        return jsonable(fn(*args, **kwargs))

    return run_sync


def adopt(
    registry: ToolRegistry,
    tools: Iterable[Tool[Any] | FunctionToolset[Any] | Callable[..., Any]],
    *,
    source: str = "framework:pydantic-ai",
    capability: Capability | str = ADOPTED_CAPABILITY,
    effect: Effect | str = ADOPTED_EFFECT,
    timeout_s: float = 30.0,
    priority: int = 0,
) -> list[ToolDefinition]:
    """Register Pydantic AI tools in the registry; return their tooltrace definitions.

    Each keeps its name, description and JSON Schema (checked against the metaschema here; a
    bad one raises ``RegistrationError`` and registers nothing of that tool). Its code runs from
    the registry: Pydantic AI's validator turns the checked arguments into the function's types,
    and a tool that takes a ``RunContext`` gets the agent's. The capability and effect default
    to the cautious end (a side effect that cannot be confirmed ends ``unknown``); say what a
    tool really does. Give the agent ``Tooltrace(registry)`` (or ``as_toolset``) instead of
    the original tools.
    """
    return register_adopted(registry, _tools_of(tools), _read, capability=capability,
                            effect=effect, source=source, priority=priority,
                            timeout_s=timeout_s)


def _read(t: Tool[Any]) -> Adopted:
    return Adopted(t.name, t.description or "", dict(t.function_schema.json_schema),
                   _handler(t), timeout_s=t.timeout)
