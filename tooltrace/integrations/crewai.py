"""CrewAI (``crewai`` 1.15): every tool call of a crew's agents runs through a ``ToolRegistry``.

::

    agent = Agent(role=..., goal=..., backstory=..., tools=as_crewai_tools(registry))
    uninstall = install_guard(registry)  # optional: police tools that are not tooltrace's too

- ``as_crewai_tools(registry, mode)``: the tools the mode exposes, as CrewAI tools
  (``TooltraceTool``, a ``BaseTool``) with the registry's name, description and schema (as
  CrewAI's ``args_schema``); ``run`` hands the model's arguments to ``registry.call`` as they
  came (the registry validates them, not CrewAI's model of the schema) and never caches.
- ``adopt(registry, tools)``: registers existing CrewAI tools (their ``args_schema``'s JSON
  Schema, checked by the registry); ``as_crewai_tools`` then serves them like any other.
- ``install_guard(registry)``: CrewAI's process-global ``before_tool_call``/``after_tool_call``
  hooks, so a tool that is not a ``TooltraceTool`` is run through the registry by name and
  answered from it (never by itself). Returns the function that removes the two hooks.
- Unknown tools: a name the agent does not have reaches the guard's before-hook when the model
  calls tools natively (CrewAI runs its hooks for it): the registry refuses it (stage
  ``resolve``) and the model reads that refusal. With a model that writes ``Action: <name>``
  instead, CrewAI refuses the name before any hook (the model reads its own "Action ... don't
  exist"); the guard also listens for that refusal (``ToolSelectionErrorEvent``) and sends the
  name through the registry, so the attempt is recorded all the same. Without the guard,
  neither is recorded.
- ``akickoff(crew, registry, run_id)``: ``crew.akickoff()`` whose cancellation is a
  ``registry.cancel(run_id)`` of the calls the crew's tools make under that run id.

What the model gets: the redacted, trimmed result (an offloaded result as its preview and a
reference to the artifact); any other status as a ``ToolFailure`` (CrewAI's own way for a tool
to report failure: the agent reads its message, the failure lands on the task output and the
event bus, and the agent's ``tool_failure_policy`` decides what follows).

Principal: ``principal=`` (on ``as_crewai_tools``, ``TooltraceTool`` and ``install_guard``) says
whom the calls act for. The agent acting is the CrewAI agent's ``role``, which CrewAI hands
only to its tool-call hooks: with ``install_guard`` installed every call (a ``TooltraceTool``'s
too) names the agent that made it, unless ``principal`` names one; without it, calls name the
agent only through ``principal``.

Spans: CrewAI makes none current where a tool runs (its own trace, when turned on, is built
from events in a provider of its own), so tooltrace's span for the call (one per call) is the
child of the span current where the crew runs: the application's, carried into CrewAI's tool
threads with the rest of the context.
"""

# crewai lives in a venv of its own (.ci/framework-venvs type-checks this module there, strict);
# where it is not installed its names are Any, which the package-wide check must accept.
# mypy: disable-error-code="import-not-found,import-untyped"
# mypy: disallow-subclassing-any=False

from __future__ import annotations

import asyncio
import contextvars
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from crewai.events import ToolSelectionErrorEvent, crewai_event_bus
from crewai.hooks import (
    register_after_tool_call_hook,
    register_before_tool_call_hook,
    unregister_after_tool_call_hook,
    unregister_before_tool_call_hook,
)
from crewai.tools import BaseTool
from crewai.tools.tool_failure import ToolFailure
from crewai.utilities.pydantic_schema_utils import create_model_from_schema
from pydantic import PrivateAttr

from ..exceptions import RegistrationError
from ..model import Capability, Effect, Principal, Status, ToolDefinition, ToolResultEnvelope
from ._adopt import Adopted, register_adopted
from .adapter import ADOPTED_CAPABILITY, ADOPTED_EFFECT, make_call, model_text, plain

if TYPE_CHECKING:
    from crewai import Crew
    from crewai.hooks.tool_hooks import ToolCallHookContext

    from ..registry import ToolRegistry

__all__ = [
    "TooltraceTool",
    "adopt",
    "akickoff",
    "as_crewai_tools",
    "install_guard",
    "result_for",
]

INTEGRATION = "crewai"
# The guard's answer for the call its before-hook ran, read by its after-hook (same thread).
_ANSWER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tooltrace_crewai_answer", default=None
)
# The role of the agent whose tool call the guard's before-hook saw (the tool runs next, in the
# same thread or a copy of its context).
_AGENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tooltrace_crewai_agent", default=None
)


def result_for(env: ToolResultEnvelope) -> str | ToolFailure:
    """What the tool returns to CrewAI: the model's text, or a ``ToolFailure`` if not ``ok``.

    The failure's ``code`` is the status, ``retryable`` the envelope's retry advice and
    ``details`` the call id, status and reject stage (never raw output).
    """
    text = model_text(env)
    if env.status is Status.OK:
        return text
    stage = env.reject_stage
    return ToolFailure(
        message=text,
        code=env.status.value,
        retryable=env.retry.allowed,
        details={
            "call_id": env.call_id,
            "status": env.status.value,
            "reject_stage": None if stage is None else stage.value,
        },
    )


def _never(_args: Any = None, _result: Any = None) -> bool:
    # The registry decides every call: a cached answer would skip policy and hooks.
    return False


class TooltraceTool(BaseTool):
    """A registry tool as CrewAI sees it; ``run`` is ``registry.call``. Its calls act for
    ``principal`` (default: their run's)."""

    mode: str = "default"
    run_id: str | None = None
    _registry: ToolRegistry = PrivateAttr()
    _optional: frozenset[str] = PrivateAttr()
    _principal: Principal | None = PrivateAttr(default=None)

    def __init__(
        self,
        registry: ToolRegistry,
        definition: ToolDefinition,
        *,
        mode: str = "default",
        run_id: str | None = None,
        principal: Principal | None = None,
    ) -> None:
        super().__init__(
            name=definition.name,
            description=definition.description or definition.name,
            args_schema=create_model_from_schema(
                plain(definition.parameters), model_name=f"{definition.name}_args"
            ),
            cache_function=_never,
        )
        self.mode = mode
        self.run_id = run_id
        self._registry = registry
        self._principal = principal
        # CrewAI offers tools in strict mode, where every property is required and an optional
        # one nullable: a null for an optional property that does not take null means "not
        # given" (the tool's default applies), as the registry's schema says.
        props = definition.parameters.get("properties", {})
        required = set(definition.parameters.get("required", ()))
        self._optional = frozenset(
            k for k, v in props.items() if k not in required and not _takes_null(v)
        )

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run the call through the registry with the arguments as the model gave them."""
        if args:
            raise TypeError(f"tool {self.name!r} takes keyword arguments only")
        return self._run(**kwargs)

    async def arun(self, *args: Any, **kwargs: Any) -> Any:
        """Like ``run``, on the running loop."""
        if args:
            raise TypeError(f"tool {self.name!r} takes keyword arguments only")
        return await self._arun(**kwargs)

    def _run(self, **kwargs: Any) -> Any:
        return result_for(self._registry.call(self._call(kwargs)))

    async def _arun(self, **kwargs: Any) -> Any:
        from .adapter import acall

        return result_for(await acall(self._registry, self._call(kwargs)))

    def _call(self, arguments: dict[str, Any]) -> Any:
        arguments = {
            k: v for k, v in arguments.items() if v is not None or k not in self._optional
        }
        return make_call(
            self._registry, self.name, arguments, integration=INTEGRATION, provider_id=None,
            mode=self.mode, run_id=self.run_id, principal=self._principal, agent=_AGENT.get(),
        )


def _takes_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return True
    kind = schema.get("type")
    if kind is not None:
        return kind == "null" or (isinstance(kind, list) and "null" in kind)
    alternatives = [*schema.get("anyOf", ()), *schema.get("oneOf", ())]
    if alternatives:
        return any(_takes_null(a) for a in alternatives)
    return "enum" not in schema or None in schema["enum"]


def as_crewai_tools(
    registry: ToolRegistry,
    mode: str = "default",
    *,
    run_id: str | None = None,
    principal: Principal | None = None,
) -> list[BaseTool]:
    """The tools ``mode`` exposes, as CrewAI tools (same names, descriptions and schemas), their
    calls acting for ``principal`` when given."""
    return [
        TooltraceTool(registry, d, mode=mode, run_id=run_id, principal=principal)
        for d in registry.visible_tools(mode).visible
    ]


def _schema_of(tool: BaseTool) -> dict[str, Any]:
    schema: dict[str, Any] = plain(tool.args_schema.model_json_schema())
    if schema.get("type", "object") != "object":
        raise RegistrationError(f"CrewAI tool {tool.name!r}: its arguments are not an object")
    schema.pop("title", None)
    props = schema.get("properties")
    for prop in props.values() if isinstance(props, dict) else ():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


def adopt(
    registry: ToolRegistry,
    tools: Iterable[BaseTool],
    *,
    capability: Capability | str = ADOPTED_CAPABILITY,
    effect: Effect | str = ADOPTED_EFFECT,
    source: str = "framework:crewai",
    priority: int = 0,
    timeout_s: float = 30.0,
) -> list[ToolDefinition]:
    """Register existing CrewAI tools in the registry; return their definitions.

    Each tool's ``args_schema`` becomes the definition's JSON Schema (checked and compiled by
    the registry, which raises ``RegistrationError`` for one it cannot use); the registry calls
    the tool's ``run`` (sync, on its tool threads) in its execute step. A ``ToolFailure`` the
    tool returns is recorded as ``failed``. Give agents ``as_crewai_tools(registry)``, not the
    adopted tools themselves (or ``install_guard`` routes those through the registry too).
    ``capability`` and ``effect`` apply to every tool given.
    """
    return register_adopted(registry, tools, _read, capability=capability, effect=effect,
                            source=source, priority=priority, timeout_s=timeout_s)


def _read(tool: BaseTool) -> Adopted:
    return Adopted(tool.name, tool.description or tool.name, _schema_of(tool), _handler(tool))


class CrewToolFailed(Exception):
    """An adopted CrewAI tool returned a ``ToolFailure``."""


def _handler(tool: BaseTool) -> Callable[..., Any]:
    def run_adopted(**args: Any) -> Any:
        result = tool.run(**args)
        if isinstance(result, ToolFailure):
            raise CrewToolFailed(result.message)
        return result

    run_adopted.__name__ = f"crewai_{tool.name}"
    return run_adopted


def _is_ours(context: ToolCallHookContext) -> bool:
    structured = context.tool
    owner = getattr(getattr(structured, "func", None), "__self__", None)
    return isinstance(owner, TooltraceTool)


def install_guard(
    registry: ToolRegistry,
    *,
    mode: str = "default",
    run_id: str | None = None,
    principal: Principal | None = None,
) -> Callable[[], None]:
    """Route every CrewAI tool call that is not a ``TooltraceTool``'s through the registry.

    The before-hook runs the call through the registry by name (an adopted tool runs in its
    execute step; a name the registry does not know is refused, stage ``resolve``) and blocks
    the tool itself; the after-hook answers the call with the envelope's text. Every call,
    a ``TooltraceTool``'s too, names the role of the agent making it. A name CrewAI refuses
    before any hook (``ToolSelectionErrorEvent``) is sent through the registry too, to be
    refused and recorded. The calls the guard routes act for ``principal`` (default: their
    run's). CrewAI's hooks and event bus are process-global: the returned function removes
    the two hooks and the listener.
    """

    def before(context: ToolCallHookContext) -> bool | None:
        _ANSWER.set(None)
        role = getattr(context.agent, "role", None)
        _AGENT.set(role if isinstance(role, str) else None)
        if _is_ours(context):
            return None
        call = make_call(
            registry, context.tool_name, dict(context.tool_input), integration=INTEGRATION,
            provider_id=None, mode=mode, run_id=run_id,
            requested_name=registry.definition(context.tool_name) is None,
            principal=principal, agent=_AGENT.get(),
        )
        answer = result_for(registry.call(call))
        _ANSWER.set(answer if isinstance(answer, str) else answer.as_agent_message())
        return False

    def after(context: ToolCallHookContext) -> str | None:
        answer = _ANSWER.get()
        _ANSWER.set(None)
        _AGENT.set(None)
        return answer

    seen: weakref.WeakSet[Any] = weakref.WeakSet()
    lock = threading.Lock()

    def refused(source: Any, event: ToolSelectionErrorEvent) -> None:
        # CrewAI refused a name before any hook (a model writing "Action: <name>"): record the
        # attempt. This runs on the event bus's threads, after the model has its answer. CrewAI
        # parses one action several times (each refusal is an event, from the one ToolUsage):
        # the attempt is recorded once.
        with lock:
            if source in seen:
                return
            seen.add(source)
        role = event.agent_role if isinstance(event.agent_role, str) else None
        args = event.tool_args if isinstance(event.tool_args, dict) else {}
        registry.call(make_call(
            registry, str(event.tool_name or ""), dict(args), integration=INTEGRATION,
            provider_id=None, mode=mode, run_id=run_id, requested_name=True,
            principal=principal, agent=role,
        ))

    register_before_tool_call_hook(before)
    register_after_tool_call_hook(after)
    crewai_event_bus.on(ToolSelectionErrorEvent)(refused)

    def uninstall() -> None:
        unregister_before_tool_call_hook(before)
        unregister_after_tool_call_hook(after)
        crewai_event_bus.off(ToolSelectionErrorEvent, refused)

    return uninstall


async def akickoff(crew: Crew, registry: ToolRegistry, run_id: str, **kwargs: Any) -> Any:
    """``await crew.akickoff(**kwargs)``; a cancel of the caller cancels the run's tool calls.

    CrewAI runs tools on threads it cannot interrupt, so a cancelled kickoff would leave them
    running unobserved. Here the cancel becomes ``registry.cancel(run_id)`` (no more calls of
    the run are admitted, each active one is signalled and settles ``cancelled`` or
    ``unknown``, and is recorded), then the kickoff is cancelled and the ``CancelledError``
    goes on. Give the crew's agents ``as_crewai_tools(registry, run_id=run_id)``.
    """
    task = asyncio.ensure_future(crew.akickoff(**kwargs))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.to_thread(registry.cancel, run_id)
        task.cancel()
        await asyncio.wait({task}, timeout=registry.cancel_grace_s + 1.0)
        raise
