"""Claude Agent SDK: Claude's tool calls go through a ``ToolRegistry`` (extra ``claude-agent-sdk``).

Two kinds of tools, two routes:

- **Built-in tools** (Bash, Read, Write, Edit, ...) run inside the Claude Code CLI, never in this
  process. ``ClaudeAgentAdapter.register_builtins`` registers a tooltrace definition for each;
  the ``PreToolUse`` hook (or the ``can_use_tool`` callback) starts a registry call for every
  use. Resolve, validate, policy, approval, pre-hooks and admission run as for any call; when
  the pipeline reaches execution, the hook answers (no objection, or the hook-modified input)
  and the call waits while the CLI runs the tool. A rejection becomes a ``deny`` whose reason
  is the envelope's summary. The ``PostToolUse`` / ``PostToolUseFailure`` hook hands the
  outcome over, which completes the call: redaction, post-hooks, audit row, span, metrics.
  Where the redacted result keeps the tool's output shape, ``updatedToolOutput`` gives it to
  the model instead of the raw one.
- **In-process MCP tools** run here: ``mcp_server()`` serves registry tools (and SDK ``@tool``
  functions taken over with ``adopt``) to the CLI; each ``tools/call`` is a full registry call
  (``_claude_mcp``).

``PASSED_THROUGH_TOOLS`` (``ToolSearch``, the tools that steer the session with the user) pass
untouched. A use the CLI refuses before any hook is read from its transcript (``Stop``,
``aclose``) and recorded ``rejected`` (``_claude_transcript``).

Out of reach for built-in tools (the CLI runs them): their deadline (a call the CLI has not
reported on when it passes ends ``unknown``), cancelling them, trimming or offloading their
output before the model sees it, and a post-hook withholding a result (the model is told, but
the CLI has already shown the output).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

import msgspec
from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookContext,
    HookInput,
    HookJSONOutput,
    HookMatcher,
    McpSdkServerConfig,
    PermissionResult,
    PermissionResultAllow,
    PermissionResultDeny,
    ToolPermissionContext,
)
from claude_agent_sdk.types import CanUseTool, HookEvent

from .. import (
    CallContext,
    OutcomeUnknown,
    RegistrationError,
    Status,
    ToolCancelled,
    ToolDefinition,
    ToolRegistry,
    ToolResultEnvelope,
)
from ..model import Principal
from ._claude_mcp import sdk_server
from ._claude_tools import (
    BUILTIN_TOOLS,
    PASSED_THROUGH_TOOLS,
    ClaudeToolError,
    adopt,
    builtin_definitions,
    matches,
    same_shape,
    sdk_schema,
)
from ._claude_transcript import Refused, Transcripts
from .adapter import PROVIDER_NAME, acall, make_call, model_text

__all__ = [
    "BUILTIN_TOOLS",
    "PASSED_THROUGH_TOOLS",
    "REFUSAL",
    "ClaudeAgentAdapter",
    "ClaudeToolError",
    "adopt",
    "sdk_schema",
]


_INTEGRATION = "claude-agent-sdk"

#: Attribute of a tool use Claude Code refused before any hook: the CLI's reason, as it told
#: the model (redacted and bounded like every attribute).
REFUSAL = "claude_code.refusal"


@dataclasses.dataclass(eq=False)
class _Pending:
    """One built-in tool use between its decision and the outcome the CLI reports."""

    call_id: str
    # Set by the registered function when the pipeline reaches execution: the final arguments.
    accepted: asyncio.Future[dict[str, Any]]
    # Set by PostToolUse / PostToolUseFailure (or the settling of a turn): what the CLI reported.
    outcome: asyncio.Future[Any]
    task: asyncio.Future[ToolResultEnvelope] | None = None
    ran_other_input: bool = False
    # The sub-agent making the use (None: the session's main agent): its own stop settles it.
    agent: str | None = None


class ClaudeAgentAdapter:
    """Hooks, ``can_use_tool`` and an in-process MCP server that route Claude's tool calls
    through ``registry`` (see the module docstring for what each route enforces).

    Args:
        registry: the registry that decides and records every call.
        mode: the tooltrace mode calls run in.
        server_name: the in-process MCP server's name (Claude sees ``mcp__<name>__<tool>``).
        grant: True lets an accepted built-in call skip Claude Code's own permission prompt
            (``permissionDecision: allow``); False (default) leaves that prompt in place, so
            tooltrace only ever narrows what Claude Code allows.
        hook_timeout_s: how long the CLI waits for the hooks (approval may take that long).
        on_failure: ``block`` (default) makes the CLI refuse a tool use when the PreToolUse
            hook fails (fail closed); ``continue`` lets it through.
        matcher: the CLI's tool matcher for the tool hooks (``"Bash|Write|Edit"``); None sends
            every tool use through the registry (but ``PASSED_THROUGH_TOOLS``), where an
            unregistered name is refused.
        principal: whom every call acts for (default: its run's principal, if any).
        ask_user: the permission callback that answers the passed-through tools that ask the
            user (``AskUserQuestion``'s answers as ``updated_input``, ``ExitPlanMode``'s
            approval); without it they are allowed as asked, and go unanswered.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        mode: str = "default",
        server_name: str = "tooltrace",
        grant: bool = False,
        hook_timeout_s: float = 600.0,
        on_failure: Literal["block", "continue"] = "block",
        matcher: str | None = None,
        principal: Principal | None = None,
        ask_user: CanUseTool | None = None,
    ) -> None:
        self.registry = registry
        self.principal = principal
        self.mode = mode
        self.server_name = server_name
        self.grant = grant
        self.hook_timeout_s = hook_timeout_s
        self.on_failure: Literal["block", "continue"] = on_failure
        self.matcher = matcher
        self.ask_user = ask_user
        self._builtins: set[str] = set()
        self._served: dict[str, frozenset[str]] = {}
        self._by_use: dict[str, _Pending] = {}
        self._by_call: dict[str, _Pending] = {}
        # Tool-use ids a hook or the in-process server saw (``seen``): any other the
        # transcript shows refused never reached tooltrace.
        self._transcripts = Transcripts()

    # -- registration -----------------------------------------------------------------------

    def register_builtins(
        self, names: Iterable[str] | None = None, *, timeout_s: float = 600.0
    ) -> list[ToolDefinition]:
        """Register Claude Code's built-in tools (all of ``BUILTIN_TOOLS`` by default).

        Each call of one is decided by the pipeline and completed by the outcome the CLI
        reports through this adapter's hooks; called any other way it fails at once.
        """
        out = []
        for d in builtin_definitions(names, timeout_s=timeout_s):
            out.append(self.registry.register(d, self._run_builtin))
            self._builtins.add(d.name)
        return out

    async def _run_builtin(self, ctx: CallContext, **arguments: Any) -> Any:
        p = self._by_call.get(ctx.call_id)
        if p is None:
            raise ClaudeToolError(f"{ctx.tool} runs inside Claude Code: use it from a Claude agent")
        p.accepted.set_result(arguments)
        try:
            return await p.outcome
        finally:
            if p.ran_other_input:
                ctx.set_detail("ran_other_input", True)

    # -- built-in tools: hooks and permission callback --------------------------------------

    def hooks(self) -> dict[HookEvent, list[HookMatcher]]:
        """The hooks to put in ``ClaudeAgentOptions.hooks`` (``options()`` does it)."""
        t, m = self.hook_timeout_s, self.matcher
        return {
            "PreToolUse": [
                HookMatcher(m, [self.pre_tool_use], timeout=t, on_failure=self.on_failure)
            ],
            "PostToolUse": [HookMatcher(m, [self.post_tool_use], timeout=t)],
            "PostToolUseFailure": [HookMatcher(m, [self.post_tool_use_failure], timeout=t)],
            "Stop": [HookMatcher(hooks=[self.stop], timeout=t)],
            "SubagentStop": [HookMatcher(hooks=[self.subagent_stop], timeout=t)],
        }

    async def pre_tool_use(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """Decide a tool use: ``deny`` with the envelope's summary, or let it proceed."""
        if input_data["hook_event_name"] != "PreToolUse":
            return {}
        self._transcripts.seen.add(input_data["tool_use_id"])
        if self._ours(input_data["tool_name"]) or self._passed(input_data["tool_name"]):
            return {}
        tool_input = input_data["tool_input"]
        accepted, value = await self._decide(
            input_data["tool_name"], tool_input, input_data["tool_use_id"],
            input_data.get("agent_id"),
        )
        if not accepted:
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": value,
                }
            }
        if value == tool_input and not self.grant:
            return {}  # no objection: Claude Code's own permission rules still apply
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow" if self.grant else "ask",
                "permissionDecisionReason": "tooltrace accepted this call",
                "updatedInput": value,
            }
        }

    async def can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResult:
        """The permission callback: the same decision as ``pre_tool_use`` (made once per use)."""
        if context.tool_use_id:
            self._transcripts.seen.add(context.tool_use_id)
        if self._passed(tool_name) and self.ask_user is not None:
            return await self.ask_user(tool_name, tool_input, context)
        if self._ours(tool_name) or self._passed(tool_name):
            # The in-process server runs the whole pipeline; a passed-through tool is the CLI's.
            return PermissionResultAllow()
        accepted, value = await self._decide(tool_name, tool_input, context.tool_use_id or "",
                                             context.agent_id)
        if not accepted:
            return PermissionResultDeny(message=value)
        return PermissionResultAllow(updated_input=None if value == tool_input else value)

    async def post_tool_use(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """Complete the call with the tool's output; hand the model the redacted output."""
        if input_data["hook_event_name"] != "PostToolUse":
            return {}
        p = self._accepted(input_data["tool_use_id"])
        if p is None:
            return {}
        response = input_data["tool_response"]
        p.ran_other_input = input_data["tool_input"] != p.accepted.result()
        if not p.outcome.done():
            p.outcome.set_result(response)
        self._forget(p, input_data["tool_use_id"])
        env = await self._finished(p)
        if env.status is Status.UNKNOWN:
            # Reported after the deadline settled the call: a late step records the outcome.
            shown = self.registry.redactor.redact(response)[0]
        elif not env.ok:
            # The CLI already has the output; the model is told it must not rely on it.
            return {
                "decision": "block",
                "reason": env.summary,
                "hookSpecificOutput": {
                    "hookEventName": "PostToolUse",
                    "additionalContext": env.summary,
                },
            }
        elif env.artifact is None:
            shown = env.data
        else:  # offloaded for the record; the CLI's copy keeps its size, but not its secrets
            shown = self.registry.redactor.redact(response)[0]
        if shown == response:
            return {}
        if same_shape(shown, response):
            return {"hookSpecificOutput": {"hookEventName": "PostToolUse",
                                           "updatedToolOutput": shown}}
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse",
                                       "additionalContext": model_text(env)}}

    async def post_tool_use_failure(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """Complete the call as ``failed`` (or ``cancelled`` when the user interrupted it)."""
        if input_data["hook_event_name"] != "PostToolUseFailure":
            return {}
        p = self._accepted(input_data["tool_use_id"])
        if p is None:
            return {}
        p.ran_other_input = input_data["tool_input"] != p.accepted.result()
        if not p.outcome.done():
            if input_data.get("is_interrupt"):
                # Claude Code confirms the tool stopped: a confirmed cancel.
                self.registry.cancel_call(p.call_id, wait=False)
                p.outcome.set_exception(ToolCancelled("interrupted in Claude Code"))
            else:
                p.outcome.set_exception(ClaudeToolError(input_data["error"]))
        self._forget(p, input_data["tool_use_id"])
        await self._finished(p)
        return {}

    async def stop(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """At the end of a turn, record the uses Claude Code refused before any hook (read from
        the session's transcript) and settle the main agent's uses it never reported on (a
        sub-agent may still run in the background: its own stop settles its uses)."""
        await self._read_refused(input_data.get("transcript_path"))
        await self._settle(lambda p: p.agent is None)
        return {}

    async def subagent_stop(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """When a sub-agent ends, record what Claude Code refused it before any hook (its own
        transcript) and settle its uses the CLI never reported on."""
        if input_data["hook_event_name"] != "SubagentStop":
            return {}
        await self._read_refused(input_data.get("agent_transcript_path"))
        agent = input_data.get("agent_id")
        await self._settle(lambda p: p.agent == agent)
        return {}

    async def _read_refused(self, path: object) -> None:
        if isinstance(path, str) and path:
            await self.record_refused(path)

    async def record_refused(self, transcript_path: str | Path) -> list[ToolResultEnvelope]:
        """Record each tool use the transcript shows Claude Code refused before any hook ran
        (an unknown name, input its schema rejected): ``rejected``, never started, with the
        CLI's reason in the ``claude_code.refusal`` attribute. Uses the hooks do not cover
        (``matcher``, ``PASSED_THROUGH_TOOLS``) are left out; each use is recorded once."""
        return [await self._refuse(r) for r in await self._transcripts.refused(transcript_path)
                if not self._passed(r.name) and matches(self.matcher, r.name)]

    async def _refuse(self, r: Refused) -> ToolResultEnvelope:
        # A served tool goes by its registry name (the model asked for mcp__<server>__<name>).
        name = next((r.name[len(s) + 7:] for s in self._served
                     if r.name.startswith(f"mcp__{s}__")), r.name)
        call = make_call(self.registry, name, r.tool_input, integration=_INTEGRATION,
                         provider_id=r.use_id, mode=self.mode, principal=self.principal)
        attributes = {**call.attributes, PROVIDER_NAME: r.name, REFUSAL: r.reason}
        call = msgspec.structs.replace(call, attributes=attributes)
        assert call.call_id is not None
        if self.registry.definition(name) is not None:
            # Refused before the registry could decide: no policy, approval or hook may act on
            # a use that will never run, so it ends at its first step (stage cancel).
            self.registry.cancel_call(call.call_id, wait=False)
        return await self.registry.acall(call)

    async def aclose(self) -> None:
        """Settle every pending built-in call: one accepted but never reported on ends
        ``unknown`` (``failed`` for a tool without side effects); one still being decided is
        cancelled (``rejected`` at stage ``cancel``). First it reads the transcripts the stop
        hooks named once more: the CLI writes its transcript behind the turn, so a refusal
        of the session's last turn may only be there once the session has ended."""
        for path in self._transcripts.paths():
            await self.record_refused(path)
        await self._settle(lambda p: True)

    async def _settle(self, which: Callable[[_Pending], bool]) -> None:
        pending = [p for p in {id(p): p for p in (*self._by_use.values(),
                                                  *self._by_call.values())}.values()
                   if which(p)]
        for p in pending:
            self._give_up(p, "Claude Code reported no outcome for this call")
        for use, p in list(self._by_use.items()):
            if which(p):
                del self._by_use[use]
        await asyncio.gather(*(self._finished(p) for p in pending))

    async def __aenter__(self) -> ClaudeAgentAdapter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _passed(self, tool_name: str) -> bool:
        return tool_name in PASSED_THROUGH_TOOLS and self.registry.definition(tool_name) is None

    def _ours(self, tool_name: str) -> bool:
        return any(
            tool_name.startswith(f"mcp__{server}__") and tool_name[len(server) + 7:] in names
            for server, names in self._served.items()
        )

    def _accepted(self, tool_use_id: str) -> _Pending | None:
        p = self._by_use.get(tool_use_id)
        return p if p is not None and p.accepted.done() else None

    async def _decide(
        self, name: str, tool_input: dict[str, Any], tool_use_id: str, agent: str | None = None
    ) -> tuple[bool, Any]:
        """``(True, final arguments)`` once the call reaches execution, or ``(False, summary)``."""
        p = self._by_use.get(tool_use_id) if tool_use_id else None
        if p is None:
            loop = asyncio.get_running_loop()
            call = make_call(self.registry, name, tool_input, integration=_INTEGRATION,
                             provider_id=tool_use_id or None, mode=self.mode,
                             principal=self.principal)
            assert call.call_id is not None
            p = _Pending(call.call_id, loop.create_future(), loop.create_future(),
                         agent=agent if isinstance(agent, str) else None)
            if tool_use_id:
                self._by_use[tool_use_id] = p
            self._by_call[p.call_id] = p
            p.task = asyncio.ensure_future(self.registry.acall(call))
            p.task.add_done_callback(functools.partial(self._forget, p, tool_use_id))
        assert p.task is not None
        first: set[asyncio.Future[Any]] = {p.accepted, p.task}
        try:
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The CLI withdrew its question: the tool will not run.
            self._give_up(p, "Claude Code withdrew the request", cancelled=True)
            raise
        if p.accepted.done():
            return True, p.accepted.result()
        return False, p.task.result().summary

    def _give_up(self, p: _Pending, why: str, cancelled: bool = False) -> None:
        if not p.accepted.done():
            self.registry.cancel_call(p.call_id, wait=False)
        elif not p.outcome.done():
            if cancelled:
                self.registry.cancel_call(p.call_id, wait=False)
                p.outcome.set_exception(ToolCancelled(why))
            else:
                p.outcome.set_exception(OutcomeUnknown(why))

    async def _finished(self, p: _Pending) -> ToolResultEnvelope:
        assert p.task is not None
        return await asyncio.shield(p.task)

    def _forget(self, p: _Pending, tool_use_id: str, task: object = None) -> None:
        if task is not None and p.accepted.done() and not p.outcome.done():
            return  # settled by its deadline: the CLI's late report still resolves it
        self._by_call.pop(p.call_id, None)
        if self._by_use.get(tool_use_id) is p:
            del self._by_use[tool_use_id]

    # -- in-process MCP tools -----------------------------------------------------------------

    def mcp_server(self, tools: Iterable[str] | None = None) -> McpSdkServerConfig:
        """An in-process MCP server (``ClaudeAgentOptions.mcp_servers[server_name]``) serving
        ``tools`` (default: every tool visible in the mode, built-ins excepted) with their
        registry names, descriptions and schemas; each call is a full registry call."""
        visible = {d.name: d for d in self.registry.visible_tools(self.mode).visible}
        names = sorted(visible) if tools is None else list(tools)
        unknown = [n for n in names if n not in visible]
        if unknown:
            raise RegistrationError(f"not visible in mode {self.mode!r}: {', '.join(unknown)}")
        listed = [visible[n] for n in names if n not in self._builtins]
        self._served[self.server_name] = frozenset(d.name for d in listed)
        return sdk_server(self.server_name, listed, self._run_served)

    async def _run_served(self, name: str, arguments: dict[str, Any], use: str | None
                          ) -> ToolResultEnvelope:
        if use is not None:
            self._transcripts.seen.add(use)
        call = make_call(self.registry, name, arguments, integration=_INTEGRATION,
                         provider_id=use, mode=self.mode, principal=self.principal)
        return await acall(self.registry, call)

    def options(self, base: ClaudeAgentOptions | None = None) -> ClaudeAgentOptions:
        """``base`` (or default options) with this adapter's hooks, ``can_use_tool`` and, when
        registry tools are visible beyond the built-ins, its MCP server (``can_use_tool`` lets
        its tools through: the registry decides on each of their calls)."""
        base = base if base is not None else ClaudeAgentOptions()
        if base.can_use_tool is not None:
            raise ValueError("base already has a can_use_tool callback; the adapter needs it "
                             "(pass one that answers the user's questions as ask_user=)")
        hooks: dict[HookEvent, list[HookMatcher]] = dict(base.hooks or {})
        for event, matchers in self.hooks().items():
            hooks[event] = [*hooks.get(event, []), *matchers]
        changes: dict[str, Any] = {"hooks": hooks, "can_use_tool": self.can_use_tool}
        server = self.mcp_server()
        if self._served[self.server_name]:
            if not isinstance(base.mcp_servers, dict):
                raise ValueError("base.mcp_servers must be a dict to add the in-process server")
            changes["mcp_servers"] = {**base.mcp_servers, self.server_name: server}
        return dataclasses.replace(base, **changes)

