"""LlamaIndex: a LlamaIndex agent's tool calls go through a ``ToolRegistry`` (extra ``llamaindex``).

LlamaIndex has no tool middleware, so each tool is wrapped: ``TooltraceTool`` is an
``AsyncBaseTool`` whose ``call`` / ``acall`` run ``registry.call`` / ``registry.acall`` and
return the ``ToolOutput`` the agent hands to the model. Anything but ``ok`` comes back as an
``is_error`` output carrying the envelope's summary (the agent's own tool-error path: the run
goes on and the model can correct itself); an ``ok`` output carries the redacted, trimmed
result. ``as_llamaindex_tools`` wraps the registry's tools; ``adopt`` registers existing
LlamaIndex tools (``FunctionTool`` or any ``BaseTool``) and returns their wrappers.

Unknown tools: an agent (``FunctionAgent``, ``ReActAgent``, ``AgentWorkflow``) answers a call of
a name it does not have itself ("Tool <name> not found"), before any tool could see it; there
is no tool middleware to catch it. ``install_guard(registry)`` listens where LlamaIndex's own
instrumentation sees the agent's ``call_tool`` step end, and sends each such call through the
registry, to be refused (stage ``resolve``) and recorded; the model still reads LlamaIndex's
answer. The listener is process-wide (LlamaIndex's root dispatcher): the returned function
removes it.

LlamaIndex traces with its own instrumentation, not OpenTelemetry: a call's span is a child of
the OpenTelemetry span current where the agent runs (the application's), if there is one.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.agent.workflow.workflow_events import ToolCall as AgentToolCall
from llama_index.core.agent.workflow.workflow_events import ToolCallResult
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index.core.tools import BaseTool, FunctionTool, ToolMetadata, ToolOutput
from llama_index.core.tools.types import AsyncBaseTool
from llama_index_instrumentation import get_dispatcher
from pydantic import PrivateAttr

from .. import (
    Capability,
    Effect,
    RegistrationError,
    ToolCall,
    ToolDefinition,
    ToolRegistry,
    ToolResultEnvelope,
)
from ..model import Principal
from ._adopt import Adopted, register_adopted
from .adapter import ADOPTED_CAPABILITY, ADOPTED_EFFECT, acall, make_call, model_text

__all__ = ["LlamaIndexToolError", "TooltraceTool", "adopt", "as_llamaindex_tools",
           "install_guard"]

_INTEGRATION = "llamaindex"


class LlamaIndexToolError(Exception):
    """An adopted tool returned an error output; its text becomes the (redacted) summary of a
    ``failed`` call."""


@dataclass
class _Metadata(ToolMetadata):
    """Tool metadata whose parameters are the registry's JSON Schema, as registered."""

    parameters: dict[str, Any] = field(default_factory=dict)

    def get_parameters_dict(self) -> dict[str, Any]:
        """The registered schema (what the model is shown)."""
        return dict(self.parameters)

    @property
    def fn_schema_str(self) -> str:
        """The schema as JSON text (what ReAct prompts show)."""
        return json.dumps(self.parameters, ensure_ascii=False)


class TooltraceTool(AsyncBaseTool):
    """A registry tool as a LlamaIndex tool: the same name, description and schema; every
    call (sync or async) goes through the registry's pipeline.

    The output's ``raw_output`` is the envelope's data (redacted) when ``ok``, else ``None``;
    ``raw_input`` the redacted arguments. An asyncio cancel of ``acall`` (a cancelled workflow
    run) becomes ``registry.cancel_call``: the call is recorded as it settles, then the
    cancellation goes on to the workflow. ``principal``: whom every call acts for (default: its
    run's principal, if any).
    """

    def __init__(
        self,
        registry: ToolRegistry,
        definition: ToolDefinition,
        *,
        mode: str = "default",
        return_direct: bool = False,
        principal: Principal | None = None,
    ) -> None:
        self.registry = registry
        self.mode = mode
        self.principal = principal
        self._metadata = _Metadata(
            description=definition.description,
            name=definition.name,
            fn_schema=None,
            return_direct=return_direct,
            parameters=dict(definition.parameters),
        )
        props = definition.parameters.get("properties")
        self._only = next(iter(props)) if isinstance(props, dict) and len(props) == 1 else None

    @property
    def metadata(self) -> ToolMetadata:
        """Name, description and the registered schema."""
        return self._metadata

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Run the call through ``registry.call`` (blocking)."""
        return self._output(self.registry.call(self._call(args, kwargs)))

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Run the call through ``registry.acall`` on the running loop."""
        return self._output(await acall(self.registry, self._call(args, kwargs)))

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ToolCall:
        arguments: Any = kwargs
        if args:
            # LlamaIndex passes the value of a one-parameter tool positionally, and some callers
            # a whole dict; anything else is the registry's to refuse (stage params).
            if len(args) == 1 and not kwargs and isinstance(args[0], dict):
                arguments = args[0]
            elif len(args) == 1 and not kwargs and self._only is not None:
                arguments = {self._only: args[0]}
            else:
                arguments = [*args, kwargs]
        return make_call(
            self.registry,
            self._metadata.get_name(),
            arguments,
            integration=_INTEGRATION,
            provider_id=None,
            mode=self.mode,
            principal=self.principal,
        )

    def _output(self, env: ToolResultEnvelope) -> ToolOutput:
        return ToolOutput(
            content=model_text(env),
            tool_name=self._metadata.get_name(),
            raw_input=dict(args) if isinstance(args := env.record.args_redacted, Mapping)
            else {"arguments": args},
            raw_output=env.data if env.ok else None,
            is_error=not env.ok,
        )


def as_llamaindex_tools(
    registry: ToolRegistry,
    mode: str = "default",
    *,
    names: Iterable[str] | None = None,
    return_direct: Iterable[str] = (),
    principal: Principal | None = None,
) -> list[TooltraceTool]:
    """The registry's tools visible in ``mode`` (or just ``names``) as LlamaIndex tools, their
    calls acting for ``principal`` when given."""
    visible = {d.name: d for d in registry.visible_tools(mode).visible}
    wanted = sorted(visible) if names is None else list(names)
    missing = [n for n in wanted if n not in visible]
    if missing:
        raise RegistrationError(f"not visible in mode {mode!r}: {', '.join(missing)}")
    direct = frozenset(return_direct)
    return [
        TooltraceTool(registry, visible[n], mode=mode, return_direct=n in direct,
                      principal=principal)
        for n in wanted
    ]


def adopt(
    registry: ToolRegistry,
    tools: Sequence[BaseTool],
    *,
    mode: str = "default",
    capability: Capability | str = ADOPTED_CAPABILITY,
    effect: Effect | str = ADOPTED_EFFECT,
    timeout_s: float = 30.0,
    source: str = "framework:llamaindex",
    principal: Principal | None = None,
) -> list[TooltraceTool]:
    """Register existing LlamaIndex tools in ``registry`` and return their wrappers.

    Each keeps its name, description, schema (``metadata.get_parameters_dict()``, checked like
    any registration) and ``return_direct``. A synchronous function runs on the registry's
    worker threads (so its deadline holds), an async one on the loop. A ``FunctionTool`` that
    needs the workflow ``Context`` cannot be adopted (the registry has no such argument).
    The wrappers' calls act for ``principal`` when given.
    """
    tools = list(tools)
    definitions = register_adopted(registry, tools, _read, capability=capability,
                                   effect=effect, source=source, timeout_s=timeout_s)
    return [
        TooltraceTool(registry, d, mode=mode, return_direct=t.metadata.return_direct,
                      principal=principal)
        for t, d in zip(tools, definitions, strict=True)
    ]


def _read(t: BaseTool) -> Adopted:
    meta = t.metadata
    if isinstance(t, FunctionTool) and t.requires_context:
        raise RegistrationError(f"tool {meta.name!r} needs the workflow Context")
    return Adopted(meta.get_name(), meta.description, meta.get_parameters_dict(), _handler(t))


def _handler(t: BaseTool) -> Callable[..., Any]:
    is_async = (
        inspect.iscoroutinefunction(t.real_fn)
        if isinstance(t, FunctionTool)
        else isinstance(t, AsyncBaseTool)
    )
    if is_async:
        async_tool: Any = t

        async def run_async(**arguments: Any) -> Any:
            return _content(await async_tool.acall(**arguments))

        return run_async

    def run(**arguments: Any) -> Any:
        return _content(t.call(**arguments) if isinstance(t, AsyncBaseTool) else t(**arguments))

    return run


def _content(out: ToolOutput) -> str:
    if out.is_error:
        if out.exception is not None:
            raise out.exception
        raise LlamaIndexToolError(out.content or "the tool reported an error")
    return out.content


class _UnknownTools(BaseSpanHandler[Any]):
    """Sees each agent's ``call_tool`` step end (LlamaIndex's instrumentation) and sends a call
    of a tool the agent does not have through the registry, to be refused and recorded."""

    _call: Callable[[str, dict[str, Any], str | None], None] = PrivateAttr()

    def __init__(self, call: Callable[[str, dict[str, Any], str | None], None]) -> None:
        super().__init__()
        self._call = call

    def new_span(self, id_: str, bound_args: inspect.BoundArguments, instance: Any = None,
                 parent_span_id: str | None = None, tags: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        """No span is kept: only the step's end matters."""
        return None

    def prepare_to_exit_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any = None, result: Any = None, **kwargs: Any) -> None:
        """Record the step's call when the agent refused it as a tool it does not have."""
        ev = bound_args.arguments.get("ev")
        if not isinstance(ev, AgentToolCall) or not isinstance(result, ToolCallResult):
            return None
        out = result.tool_output
        # The agent's own refusal of a name it does not have (it ran no tool: no raw output).
        if not (out.is_error and out.raw_output is None
                and str(out.content).startswith(f"Tool {ev.tool_name} not found.")):
            return None
        try:
            self._call(ev.tool_name, dict(ev.tool_kwargs), ev.tool_id or None)
        except Exception:
            pass  # recording must never break the agent's run
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any = None, err: BaseException | None = None,
                             **kwargs: Any) -> None:
        """Nothing was kept."""
        return None


def install_guard(
    registry: ToolRegistry,
    *,
    mode: str = "default",
    run_id: str | None = None,
    principal: Principal | None = None,
) -> Callable[[], None]:
    """Record every call an agent makes of a tool it does not have: LlamaIndex answers such a
    call itself; the guard sends it through the registry too (refused, stage ``resolve``,
    with the model's call id and the name it asked for), acting for ``principal`` (LlamaIndex
    does not say which agent made the call: name it there). Process-wide (LlamaIndex's root
    dispatcher): returns the function that removes it."""

    def record(name: str, arguments: dict[str, Any], call_id: str | None) -> None:
        registry.call(make_call(
            registry, name, arguments, integration=_INTEGRATION, provider_id=call_id,
            mode=mode, run_id=run_id, requested_name=True, principal=principal,
        ))

    handler = _UnknownTools(record)
    root = get_dispatcher()
    root.add_span_handler(handler)

    def uninstall() -> None:
        root.span_handlers = [h for h in root.span_handlers if h is not handler]

    return uninstall
