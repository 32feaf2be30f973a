"""OpenAI Agents SDK: every ``FunctionTool`` call runs through ``ToolRegistry.acall``.

    from tooltrace.integrations.openai_agents import as_function_tools
    agent = Agent(name="ops", model=model, tools=as_function_tools(registry))

- ``as_function_tools(registry, mode)``: the registry's tools as SDK ``FunctionTool``s, with
  the registry's names, descriptions and JSON Schemas (``strict_json_schema`` only where the
  schema already is strict, so the model sees exactly the registry's schema).
- ``adopt(registry, tools, source=...)``: registers existing ``FunctionTool``s as tooltrace
  tools and returns copies whose ``on_invoke_tool`` runs through the registry; each copy keeps
  its ``params_json_schema``, ``strict_json_schema``, guardrails, timeout and approval setting.

Every call carries the SDK's tool call id in ``ToolCall.attributes["provider.tool_call_id"]``
(and ``tooltrace.integration="openai-agents"``); tooltrace's own call id is a fresh UUIDv7. An
envelope that is not ``ok`` becomes the error string the model reads (the envelope's summary),
through ``failure_error_function`` when one is given (``None``: raise ``ToolCallError`` and fail
the run, as the SDK does without a formatter). The model only sees the redacted, trimmed result.

Approval: with ``approvals=FrameworkApprover()`` (also the registry's approver), a call policy
asks about (``RequireApproval``) sets ``needs_approval``: the SDK interrupts the run, a person
approves with ``RunState.approve`` and the resumed call is approved in the registry under
``user:openai-agents``. Tracing: the SDK's tracing is its own, not OpenTelemetry, so tooltrace's
``execute_tool`` span is the one OpenTelemetry span of a call (under whatever span is current).

Unknown tools: a model asking for a tool the agent does not have fails the run
(``ModelBehaviorError``) unless the run's config says otherwise. ``run_config(registry)`` does:
``Runner.run(agent, input, run_config=run_config(registry))`` sends every such call through the
registry (refused, stage ``resolve``, and recorded with the SDK's call id and the name asked
for) and the model reads the refusal; the run goes on. The SDK hands its formatter no arguments,
so the record has none.

Principal: ``principal=`` says whom the calls act for; the agent acting is the SDK's current
agent (``ToolContext.agent.name``, so a hand-off shows in each call's principal) unless
``principal`` names one. ``needs_approval`` asks the policy about that principal too, but the
SDK does not tell it which agent acts: a rule on the agent's name is judged there only when
``principal`` names the agent (otherwise the registry, asking when the call runs, refuses it at
stage ``approval``: it never runs unapproved).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from typing import Any, Final

import orjson
from agents import FunctionTool, RunConfig, RunContextWrapper
from agents.run_config import ToolErrorFormatter, ToolErrorFormatterArgs
from agents.strict_schema import ensure_strict_json_schema
from agents.tool import ToolErrorFunction, set_function_tool_failure_error_function
from agents.tool_context import ToolContext

from ..exceptions import MalformedCallError, RegistrationError
from ..model import Capability, Effect, Principal, ToolResultEnvelope, parse_tool_call
from ..registry import ToolRegistry
from ._adopt import Adopted, register_adopted
from ._bridge import FrameworkApprover, approval_reason, jsonable
from .adapter import ADOPTED_CAPABILITY, ADOPTED_EFFECT, acall, make_call, model_text

__all__ = [
    "FrameworkApprover",
    "ToolCallError",
    "ToolErrorFunction",
    "adopt",
    "as_function_tools",
    "run_config",
]

#: ``tooltrace.integration`` of the calls this adapter makes.
INTEGRATION: Final = "openai-agents"
#: Who the registry's approval step names when the SDK's approval flow said yes.
APPROVED_BY: Final = "openai-agents"

NeedsApproval = bool | Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]


class ToolCallError(Exception):
    """A call that did not succeed, as the exception a ``failure_error_function`` is given.

    Its message is what the model would read (the envelope's summary); ``envelope`` is the
    whole outcome. Raised out of the tool when ``failure_error_function=None``.
    """

    def __init__(self, envelope: ToolResultEnvelope) -> None:
        super().__init__(model_text(envelope))
        self.envelope = envelope


class _Summary:
    """The default ``failure_error_function``: the envelope's summary, as every adapter says it."""

    def __repr__(self) -> str:
        return "<envelope summary>"


_SUMMARY: Final = _Summary()
# The tool context of the call in progress, for the handlers of adopted tools.
_TOOL_CONTEXT: ContextVar[ToolContext[Any] | None] = ContextVar("tooltrace_oa_ctx", default=None)


class _Invoker:
    """``on_invoke_tool``: parse the SDK's arguments, run the registry, answer the model."""

    def __init__(
        self,
        registry: ToolRegistry,
        name: str,
        *,
        mode: str,
        run_id: str | None,
        approvals: FrameworkApprover | None,
        on_error: ToolErrorFunction | _Summary | None,
        principal: Principal | None = None,
    ) -> None:
        self.registry = registry
        self.principal = principal
        self.name = name
        self.mode = mode
        self.run_id = run_id
        self.approvals = approvals
        self.on_error = on_error

    async def __call__(self, ctx: ToolContext[Any], input: str) -> Any:
        arguments: Any = input
        error: str | None = None
        try:
            # The registry's own parser: the same size, depth and JSON rules as any raw call.
            arguments = parse_tool_call({"name": self.name, "arguments": input})["arguments"]
        except MalformedCallError as exc:
            error = exc.reason  # passed on as sent: the registry refuses it (stage params)
        call = make_call(
            self.registry, self.name, arguments, integration=INTEGRATION,
            provider_id=ctx.tool_call_id, mode=self.mode, run_id=self.run_id,
            arguments_error=error, principal=self.principal,
            agent=None if ctx.agent is None else ctx.agent.name,
        )
        approved = ctx.is_tool_approved(ctx.tool_name, ctx.tool_call_id) is True
        token = _TOOL_CONTEXT.set(ctx)
        try:
            if self.approvals is not None and approved and call.call_id is not None:
                with self.approvals.granted(call.call_id, APPROVED_BY):
                    env = await acall(self.registry, call)
            else:
                env = await acall(self.registry, call)
        finally:
            _TOOL_CONTEXT.reset(token)
        return await self._answer(ctx, env)

    async def _answer(self, ctx: ToolContext[Any], env: ToolResultEnvelope) -> Any:
        if env.ok:
            return model_text(env)
        on_error = self.on_error
        if isinstance(on_error, _Summary):
            return model_text(env)
        if on_error is None:
            raise ToolCallError(env)  # the SDK's convention without a formatter: the run fails
        text = on_error(ctx, ToolCallError(env))
        return await text if inspect.isawaitable(text) else text


def _asks(
    registry: ToolRegistry, name: str, mode: str, run_id: str | None, also: NeedsApproval,
    principal: Principal | None = None,
) -> NeedsApproval:
    """``needs_approval``: the tool's own setting, or policy asking about this call (for the
    principal it would act as: ``principal`` with the SDK's acting agent)."""

    async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any], cid: str) -> bool:
        if also is True:
            return True
        if callable(also) and await also(ctx, params, cid):
            return True
        # The SDK hands needs_approval a RunContextWrapper without the agent acting (a
        # ToolContext would name it): a rule on the agent's name is judged without it here.
        agent = getattr(ctx, "agent", None)
        reason = approval_reason(
            registry, name, params, mode=mode, run_id=run_id, call_id=registry.new_call_id(),
            principal=principal, agent=getattr(agent, "name", None),
        )
        return reason is not None

    return needs_approval


def _is_strict(schema: dict[str, Any]) -> bool:
    """Whether the SDK's strict mode would leave the schema as it is."""
    try:
        return ensure_strict_json_schema(copy.deepcopy(schema)) == schema
    except Exception:
        return False


def as_function_tools(
    registry: ToolRegistry,
    mode: str = "default",
    *,
    approvals: FrameworkApprover | None = None,
    run_id: str | None = None,
    failure_error_function: ToolErrorFunction | _Summary | None = _SUMMARY,
    principal: Principal | None = None,
) -> list[FunctionTool]:
    """The registry's tools in ``mode`` as ``FunctionTool``s for ``Agent(tools=[...])``.

    ``run_id`` names the tooltrace run of the calls (default: the registry's); ``principal``,
    whom every call acts for (default: the run's). With
    ``approvals`` (also the registry's approver), a call policy asks about interrupts the run
    for the SDK's approval flow; without it, the registry's own approver decides in the call.
    ``failure_error_function`` turns a ``ToolCallError`` into the model's error string (default:
    status and summary); ``None`` raises it and fails the run.
    """
    tools: list[FunctionTool] = []
    for d in registry.visible_tools(mode).visible:
        schema = dict(d.parameters)
        tools.append(
            FunctionTool(
                name=d.name,
                description=d.description,
                params_json_schema=schema,
                on_invoke_tool=_Invoker(
                    registry,
                    d.name,
                    mode=mode,
                    run_id=run_id,
                    approvals=approvals,
                    on_error=failure_error_function,
                    principal=principal,
                ),
                strict_json_schema=_is_strict(schema),
                needs_approval=(
                    _asks(registry, d.name, mode, run_id, False, principal)
                    if approvals is not None else False
                ),
            )
        )
    return tools


def _handler(inner: FunctionTool) -> Callable[..., Awaitable[Any]]:
    """The registered handler of an adopted tool: the SDK's own invoker, errors raised."""

    async def run(**arguments: Any) -> Any:
        ctx = _TOOL_CONTEXT.get()
        if ctx is None:
            raise RuntimeError(
                f"tool {inner.name!r} needs the Agents SDK's ToolContext: call it through an agent"
            )
        out = await inner.on_invoke_tool(ctx, orjson.dumps(arguments).decode())
        return jsonable(out)

    return run


def adopt(
    registry: ToolRegistry,
    tools: Iterable[Any],
    *,
    source: str = "framework:openai-agents",
    capability: Capability | str = ADOPTED_CAPABILITY,
    effect: Effect | str = ADOPTED_EFFECT,
    timeout_s: float = 30.0,
    priority: int = 0,
    mode: str = "default",
    approvals: FrameworkApprover | None = None,
    run_id: str | None = None,
    failure_error_function: ToolErrorFunction | _Summary | None = _SUMMARY,
    principal: Principal | None = None,
) -> list[FunctionTool]:
    """Register SDK ``FunctionTool``s in the registry; return copies that call through it.

    Each is registered under its name with its ``params_json_schema`` (checked against the
    metaschema: a bad one raises ``RegistrationError``). Its own invoker becomes the registered
    handler, with the SDK's failure formatting off so a failure is ``failed`` in tooltrace,
    not a string that looks like a result. The returned copies keep the schema, strictness,
    guardrails, timeout and ``needs_approval`` (policy asking is added when ``approvals`` is
    given). The capability and effect default to the cautious end; say what a tool really does.
    Give the agent the copies, not the originals. ``run_id`` and ``principal`` are as for
    ``as_function_tools``.
    """
    tools = list(tools)
    register_adopted(registry, tools, _read, capability=capability, effect=effect,
                     source=source, priority=priority, timeout_s=timeout_s)
    out: list[FunctionTool] = []
    for t in tools:
        wrapped = copy.copy(t)
        wrapped.on_invoke_tool = _Invoker(
            registry,
            t.name,
            mode=mode,
            run_id=run_id,
            approvals=approvals,
            on_error=failure_error_function,
            principal=principal,
        )
        if approvals is not None:
            wrapped.needs_approval = _asks(
                registry, t.name, mode, run_id, t.needs_approval, principal)
        out.append(wrapped)
    return out


def _read(t: Any) -> Adopted:
    if not isinstance(t, FunctionTool):
        raise RegistrationError(
            f"cannot adopt {type(t).__name__}: only FunctionTool runs its code in-process"
        )
    inner = copy.copy(t)
    set_function_tool_failure_error_function(inner, None)
    return Adopted(t.name, t.description, copy.deepcopy(t.params_json_schema), _handler(inner))


class _UnknownTools:
    """``RunConfig.tool_error_formatter``: a call of a tool the agent does not have goes through
    the registry (refused and recorded) and the model reads the refusal; other errors are the
    application's own formatter's (or the SDK's)."""

    def __init__(self, registry: ToolRegistry, mode: str, run_id: str | None,
                 principal: Principal | None, then: ToolErrorFormatter | None) -> None:
        self.registry = registry
        self.mode = mode
        self.run_id = run_id
        self.principal = principal
        self.then = then

    async def __call__(self, args: ToolErrorFormatterArgs[Any]) -> str | None:
        if args.kind != "tool_not_found":
            out = self.then(args) if self.then is not None else None
            return await out if inspect.isawaitable(out) else out
        # The SDK hands a formatter no arguments: the record holds none (None, not {}).
        call = make_call(
            self.registry, args.tool_name, None, integration=INTEGRATION,
            provider_id=args.call_id, mode=self.mode, run_id=self.run_id,
            requested_name=True, principal=self.principal,
        )
        return model_text(await acall(self.registry, call))


def run_config(
    registry: ToolRegistry,
    base: RunConfig | None = None,
    *,
    mode: str = "default",
    run_id: str | None = None,
    principal: Principal | None = None,
) -> RunConfig:
    """``base`` (default: a new ``RunConfig``) with unknown tools answered through the registry.

    A tool name the agent does not have no longer fails the run: the call is refused by the
    registry (stage ``resolve``), recorded (``provider.tool_name`` holds the name asked for,
    ``provider.tool_call_id`` the SDK's id) and the model reads the refusal. ``base``'s own
    ``tool_error_formatter`` still formats every other tool error. ``mode``, ``run_id`` and
    ``principal`` are those of the calls, as for ``as_function_tools``.
    """
    base = base if base is not None else RunConfig()
    formatter = _UnknownTools(registry, mode, run_id, principal, base.tool_error_formatter)
    return dataclasses.replace(base, tool_not_found_behavior="return_error_to_model",
                               tool_error_formatter=formatter)
