"""LangChain agents and LangGraph: every tool call runs through a tooltrace registry.

``create_agent`` with the middleware (the registry's tools are offered to the model by it)::

    from langchain.agents import create_agent
    from tooltrace.integrations.langchain import TooltraceMiddleware

    agent = create_agent(model, middleware=[TooltraceMiddleware(registry, mode="default")])

A LangGraph graph: ``tool_node(registry)`` is a ``ToolNode`` over the registry's tools whose
``wrap_tool_call``/``awrap_tool_call`` are the middleware's (any ``ToolNode`` can take them).
``as_langchain_tools(registry)`` gives the tools alone, as ``StructuredTool``s that run through
the registry. ``adopt(registry, tools)`` registers existing LangChain tools in the registry, so
the wrapped path runs them through it too.

The wrappers never call the framework's own tool executor: the registry runs the registered
function (validation, policy and approval, hooks, deadline and concurrency, redaction and
offload, telemetry), and the envelope comes back as a ``ToolMessage``: the redacted, trimmed
result, or ``status="error"`` with the envelope's summary for every other status. A tool call
the registry does not know is rejected there (stage ``resolve``), and recorded.

Principal: ``principal=`` says whom the calls act for. Through the middleware (and
``tool_node``'s wrappers) the agent acting is the ``name`` ``create_agent(name=...)`` gave the
agent making the call (its ``lc_agent_name``), unless ``principal`` names one; the tools of
``as_langchain_tools`` called on their own name no agent but the principal's.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest
from langchain_core.messages import ToolCall as LCToolCall
from langchain_core.messages import ToolMessage
from langchain_core.tools import (
    BaseTool,
    InjectedToolCallId,
    StructuredTool,
    Tool,
    ToolException,
)
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt import ToolNode
from langgraph.types import Command
from pydantic import BaseModel

from .. import current_context
from ..exceptions import RegistrationError
from ..model import (
    Capability,
    Effect,
    Principal,
    Status,
    ToolCall,
    ToolDefinition,
    ToolResultEnvelope,
)
from . import adapter as _common
from ._adopt import Adopted, register_adopted
from .adapter import ADOPTED_CAPABILITY, ADOPTED_EFFECT, model_text, plain, result_meta

if TYPE_CHECKING:
    from ..registry import ToolRegistry

__all__ = [
    "AdoptedToolError",
    "TooltraceMiddleware",
    "adopt",
    "as_langchain_tools",
    "tool_message",
    "tool_node",
]

_log = logging.getLogger("tooltrace.integrations")
_INTEGRATION = "langchain"
_Handler = Callable[[ToolCallRequest], "ToolMessage | Command[Any]"]
_AsyncHandler = Callable[[ToolCallRequest], Awaitable["ToolMessage | Command[Any]"]]


def tool_message(envelope: ToolResultEnvelope, tool_call_id: str, name: str) -> ToolMessage:
    """The ``ToolMessage`` the model reads for an envelope (``status="error"`` unless ``ok``).

    ``artifact`` (never sent to the model) holds the call id, status, reject stage and the
    offload artifact's reference, for the application.
    """
    return ToolMessage(
        content=model_text(envelope),
        tool_call_id=tool_call_id,
        name=name,
        status="success" if envelope.status is Status.OK else "error",
        artifact=result_meta(envelope),
    )


def _failure(tool_call: LCToolCall, exc: Exception) -> ToolMessage:
    # The registry answers every call with an envelope; this is a last resort so that a bug
    # here ends one tool call, not the agent's run. Only the exception's type is shown.
    _log.warning("tooltrace could not run a %s call: %s", _INTEGRATION, type(exc).__name__)
    _log.debug("tooltrace adapter failure", exc_info=exc)
    return ToolMessage(
        content=f"Error: the tool call could not be run ({type(exc).__name__}).",
        tool_call_id=tool_call.get("id") or "",
        name=tool_call.get("name", ""),
        status="error",
    )


class TooltraceMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Agent middleware that runs every tool call through ``registry``.

    Args:
        registry: the registry that owns the tools.
        mode: the policy mode of every call, and the tools offered to the model.
        run_id: the run id of every call (default: the registry's run).
        principal: whom every call acts for (default: its run's principal, if any).
        expose_tools: offer the model the tools visible in ``mode`` when the middleware is made
            (``as_langchain_tools``); False when the agent gets its tools elsewhere (a tool
            offered twice reaches the model twice).

    It answers every tool call itself (LangChain's tool executor and any middleware listed
    after it are not called): list it last. ``wrap_tool_call`` and ``awrap_tool_call`` have
    the signature ``ToolNode`` expects of its wrappers, so ``ToolNode(tools,
    wrap_tool_call=mw.wrap_tool_call, awrap_tool_call=mw.awrap_tool_call)`` is the LangGraph
    form.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        mode: str = "default",
        run_id: str | None = None,
        expose_tools: bool = True,
        principal: Principal | None = None,
    ) -> None:
        super().__init__()
        self.registry = registry
        self.principal = principal
        self.mode = mode
        self.run_id = run_id
        self.tools: Sequence[BaseTool] = (
            as_langchain_tools(registry, mode, run_id=run_id, principal=principal)
            if expose_tools
            else ()
        )

    def _call(self, tool_call: LCToolCall, request: ToolCallRequest | None = None) -> ToolCall:
        return _common.make_call(
            self.registry, tool_call["name"], tool_call.get("args"), integration=_INTEGRATION,
            provider_id=tool_call.get("id"), mode=self.mode, run_id=self.run_id,
            principal=self.principal, agent=_agent_name(request),
        )

    def wrap_tool_call(self, request: ToolCallRequest, handler: _Handler) -> ToolMessage:
        """Run the call through ``registry.call``; the framework's executor is not used."""
        tc = request.tool_call
        try:
            env = self.registry.call(self._call(tc, request))
        except Exception as exc:
            return _failure(tc, exc)
        return tool_message(env, tc.get("id") or "", tc["name"])

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: _AsyncHandler
    ) -> ToolMessage:
        """Run the call through ``registry.acall``; a cancel of this task cancels the call."""
        tc = request.tool_call
        try:
            env = await _common.acall(self.registry, self._call(tc, request))
        except Exception as exc:
            return _failure(tc, exc)
        return tool_message(env, tc.get("id") or "", tc["name"])


def _agent_name(request: ToolCallRequest | None) -> str | None:
    """The name ``create_agent(name=...)`` gave the agent making the call (its run's
    ``lc_agent_name`` metadata), if any."""
    config = getattr(getattr(request, "runtime", None), "config", None)
    metadata = config.get("metadata") if isinstance(config, dict) else None
    name = metadata.get("lc_agent_name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else None


def tool_node(
    registry: ToolRegistry,
    mode: str = "default",
    *,
    run_id: str | None = None,
    principal: Principal | None = None,
    **kwargs: Any,
) -> ToolNode:
    """A LangGraph ``ToolNode`` over the registry's visible tools, every call through it (as
    ``principal`` when given).

    ``kwargs`` go to ``ToolNode`` (``name``, ``tags``, ``messages_key``, ...).
    """
    mw = TooltraceMiddleware(registry, mode=mode, run_id=run_id, principal=principal)
    return ToolNode(
        list(mw.tools), wrap_tool_call=mw.wrap_tool_call, awrap_tool_call=mw.awrap_tool_call,
        **kwargs,
    )


# -- registry tools as LangChain tools -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Runner:
    registry: ToolRegistry
    name: str
    mode: str
    run_id: str | None
    principal: Principal | None

    def _call(self, arguments: dict[str, Any]) -> ToolCall:
        return _common.make_call(self.registry, self.name, arguments, integration=_INTEGRATION,
                                 provider_id=None, mode=self.mode, run_id=self.run_id,
                                 principal=self.principal)

    def run(self, **arguments: Any) -> tuple[str, dict[str, Any]]:
        return _content(self.registry.call(self._call(arguments)))

    async def arun(self, **arguments: Any) -> tuple[str, dict[str, Any]]:
        return _content(await _common.acall(self.registry, self._call(arguments)))


def _content(env: ToolResultEnvelope) -> tuple[str, dict[str, Any]]:
    if env.status is not Status.OK:
        # LangChain's own error path: with handle_tool_error=True this becomes a ToolMessage
        # with status="error" and this text.
        raise ToolException(model_text(env))
    return model_text(env), result_meta(env)


def as_langchain_tools(
    registry: ToolRegistry,
    mode: str = "default",
    *,
    run_id: str | None = None,
    principal: Principal | None = None,
) -> list[StructuredTool]:
    """The tools ``mode`` exposes, as LangChain tools: same names, descriptions and JSON
    Schemas, same order as ``registry.visible_tools(mode)``.

    Invoking one runs ``registry.call`` (``ainvoke``: ``registry.acall``); a call that is not
    ``ok`` raises ``ToolException`` with the envelope's summary, which LangChain turns into a
    ``ToolMessage`` with ``status="error"``. The message's ``artifact`` holds the call id.
    ``principal``: whom every call acts for (default: its run's principal, if any).
    """
    out = []
    for d in registry.visible_tools(mode).visible:
        runner = _Runner(registry, d.name, mode, run_id, principal)
        out.append(
            StructuredTool(
                name=d.name,
                description=d.description,
                args_schema=plain(d.parameters),
                func=runner.run,
                coroutine=runner.arun,
                handle_tool_error=True,
                response_format="content_and_artifact",
            )
        )
    return out


# -- LangChain tools adopted by the registry -------------------------------------------------


def adopt(
    registry: ToolRegistry,
    tools: Iterable[BaseTool],
    *,
    source: str = "framework:langchain",
    priority: int = 0,
    capability: Capability | str = ADOPTED_CAPABILITY,
    effect: Effect | str = ADOPTED_EFFECT,
    timeout_s: float = 30.0,
) -> list[ToolDefinition]:
    """Register LangChain tools in the registry; return their definitions.

    Each keeps its name and description; its arguments schema is the one LangChain shows the
    model (``convert_to_openai_tool``), checked and compiled by ``register`` (a bad one raises
    ``RegistrationError`` and nothing of that tool is registered). A framework tool is opaque
    code, so it is policed as ``capability``/``effect`` (default: ``execute``/``external``,
    the most guarded) unless told otherwise. Tools that take injected arguments (graph state,
    store, runtime) are refused: the registry cannot supply them. A tool with a native
    coroutine runs as an async tool (cancellable), any other on the registry's threads.
    """
    return register_adopted(registry, tools, _read, capability=capability, effect=effect,
                            source=source, priority=priority, timeout_s=timeout_s)


def _read(t: BaseTool) -> Adopted:
    if not isinstance(t, BaseTool):
        raise RegistrationError(f"adopt() takes LangChain BaseTool objects, not "
                                f"{type(t).__name__}")
    params = convert_to_openai_tool(t)["function"].get("parameters") or {
        "type": "object", "properties": {}}
    injected = _injected(t, params)
    if injected:
        raise RegistrationError(
            f"tool {t.name!r} takes injected arguments {injected[:5]} (state, store or "
            f"runtime) that the registry cannot supply"
        )
    return Adopted(t.name, t.description, params, _handler(t))


def _injected(t: BaseTool, params: dict[str, Any]) -> list[str]:
    """Arguments the framework injects (hidden from the model) that the registry cannot supply.

    The tool call id is supplied: an adopted tool is invoked as a tool call whose id is
    tooltrace's call id.
    """
    schema = t.args_schema
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return []  # a JSON Schema dict: nothing is injected
    shown = params.get("properties", {})
    return sorted(
        n for n, f in schema.model_fields.items()
        if n not in shown
        and not any(m is InjectedToolCallId or isinstance(m, InjectedToolCallId)
                    for m in f.metadata)
    )


def _native_async(t: BaseTool) -> bool:
    if isinstance(t, StructuredTool | Tool):
        return t.coroutine is not None
    # No public flag says a tool has its own coroutine: LangChain's arun makes this same check.
    return type(t)._arun is not BaseTool._arun


def _handler(t: BaseTool) -> Callable[..., Any]:
    """The function the registry runs for an adopted tool: the tool itself, invoked as a tool
    call (so its own error handling reports through the message status)."""

    def as_call(arguments: dict[str, Any]) -> LCToolCall:
        ctx = current_context()
        return LCToolCall(name=t.name, args=arguments, id=ctx.call_id if ctx else "tooltrace",
                          type="tool_call")

    if _native_async(t):

        async def arun(**arguments: Any) -> Any:
            return _unwrap(t, await t.ainvoke(as_call(arguments)))

        return arun

    def run(**arguments: Any) -> Any:
        return _unwrap(t, t.invoke(as_call(arguments)))

    return run


class AdoptedToolError(Exception):
    """An adopted LangChain tool reported an error (its message is not passed on: the model
    sees the registry's summary of a failed call)."""


def _unwrap(t: BaseTool, out: Any) -> Any:
    if isinstance(out, ToolMessage):
        if out.status == "error":
            raise AdoptedToolError(t.name)
        return out.content
    if isinstance(out, Command):
        raise TypeError(f"tool {t.name!r} returned a Command: graph control from a tool does "
                        f"not pass through the registry")
    if inspect.isawaitable(out):
        raise TypeError(f"tool {t.name!r} returned an awaitable from a sync call")
    return out
