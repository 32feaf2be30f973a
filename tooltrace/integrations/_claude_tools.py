"""Claude's tools as tooltrace definitions: Claude Code's built-in tools (what policy needs to
know of them) and the SDK's ``@tool`` functions (``adopt``).

The CLI runs these tools itself; tooltrace decides on each call and records it. The schemas
name the arguments policy reads (``command`` for command rules, ``url`` for network rules, path
arguments for the workspace scope) and type the common ones; they admit the other arguments
the CLI sends (``additionalProperties``), so a newer CLI's extra fields are not refused.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from claude_agent_sdk import SdkMcpTool

from .. import Capability, Effect, RegistrationError, ToolDefinition, ToolRegistry
from ._adopt import Adopted, register_adopted
from .adapter import ADOPTED_CAPABILITY, ADOPTED_EFFECT

__all__ = [
    "BUILTIN_TOOLS",
    "PASSED_THROUGH_TOOLS",
    "ClaudeToolError",
    "adopt",
    "builtin_definitions",
    "matches",
    "same_shape",
    "sdk_schema",
]


class ClaudeToolError(Exception):
    """A tool's own error: Claude Code reported the built-in tool failed, or an SDK ``@tool``
    returned ``is_error``. Its text becomes the (redacted) summary of a ``failed`` call."""

_S: Mapping[str, Any] = {"type": "string"}
_N: Mapping[str, Any] = {"type": "number"}
_B: Mapping[str, Any] = {"type": "boolean"}
_A: Mapping[str, Any] = {"type": "array"}

# name: (capability, effect, path arguments, typed properties, required, description).
# The names Claude Code 2.1 offers (kept current by a test that reads the bundled CLI's first
# request), then those of older CLIs.
_TABLE: dict[str, tuple[Capability, Effect, tuple[str, ...], dict[str, Any], tuple[str, ...], str]]
_TABLE = {
    # A sub-agent: it has no effect of its own; each of its tool calls is decided on its own.
    "Agent": (Capability.READ, Effect.NONE, (),
              {"description": _S, "prompt": _S, "subagent_type": _S}, ("prompt",),
              "Start a sub-agent (executed by Claude Code)."),
    "Bash": (Capability.EXECUTE, Effect.EXTERNAL, (),
             {"command": _S, "timeout": _N, "description": _S, "run_in_background": _B},
             ("command",), "Run a shell command (executed by Claude Code)."),
    # Session cron jobs enqueue prompts (whose tool uses are decided on their own); a durable
    # one is written to .claude/scheduled_tasks.json.
    "CronCreate": (Capability.WRITE, Effect.LOCAL, (),
                   {"cron": _S, "prompt": _S, "recurring": _B, "durable": _B},
                   ("cron", "prompt"), "Schedule a prompt (executed by Claude Code)."),
    "CronDelete": (Capability.WRITE, Effect.LOCAL, (), {"id": _S}, ("id",),
                   "Cancel a scheduled prompt (executed by Claude Code)."),
    "CronList": (Capability.READ, Effect.NONE, (), {}, (),
                 "List the scheduled prompts (executed by Claude Code)."),
    # Reads and updates design projects on claude.ai through the user's login.
    "DesignSync": (Capability.NETWORK, Effect.EXTERNAL, (), {"method": _S}, ("method",),
                   "Sync a claude.ai design project (executed by Claude Code)."),
    "Edit": (Capability.WRITE, Effect.LOCAL, ("file_path",),
             {"file_path": _S, "old_string": _S, "new_string": _S, "replace_all": _B},
             ("file_path", "old_string", "new_string"), "Edit a file (executed by Claude Code)."),
    "EnterWorktree": (Capability.WRITE, Effect.LOCAL, ("path",), {"name": _S, "path": _S}, (),
                      "Create a git worktree and move the session into it "
                      "(executed by Claude Code)."),
    "ExitWorktree": (Capability.WRITE, Effect.LOCAL, (),
                     {"action": _S, "discard_changes": _B}, ("action",),
                     "Leave (and keep or remove) the session's worktree "
                     "(executed by Claude Code)."),
    "ListAgents": (Capability.READ, Effect.NONE, (), {}, (),
                   "List the agents messages can go to (executed by Claude Code)."),
    # Runs a long-lived command and streams its lines: a command like Bash's.
    "Monitor": (Capability.EXECUTE, Effect.EXTERNAL, (),
                {"command": _S, "description": _S, "timeout_ms": _N}, ("description",),
                "Run a background monitor command (executed by Claude Code)."),
    "NotebookEdit": (Capability.WRITE, Effect.LOCAL, ("notebook_path",),
                     {"notebook_path": _S, "new_source": _S}, ("notebook_path",),
                     "Edit a Jupyter notebook cell (executed by Claude Code)."),
    "Read": (Capability.READ, Effect.NONE, ("file_path",),
             {"file_path": _S, "offset": _N, "limit": _N}, ("file_path",),
             "Read a file (executed by Claude Code)."),
    "ReportFindings": (Capability.READ, Effect.NONE, (), {"findings": _A}, ("findings",),
                       "Report review findings to the host (executed by Claude Code)."),
    "ScheduleWakeup": (Capability.READ, Effect.NONE, (),
                       {"delaySeconds": _N, "reason": _S, "prompt": _S, "stop": _B}, (),
                       "Schedule when a /loop resumes (executed by Claude Code)."),
    # Messages reach other agents, other local sessions, or cloud sessions.
    "SendMessage": (Capability.NETWORK, Effect.EXTERNAL, (),
                    {"to": _S, "message": _S, "summary": _S}, ("to", "message"),
                    "Send a message to another agent (executed by Claude Code)."),
    # A skill is instructions; what it asks for runs through other tools, each decided.
    "Skill": (Capability.READ, Effect.NONE, (), {"skill": _S, "args": _S}, ("skill",),
              "Invoke a skill (executed by Claude Code)."),
    "TaskStop": (Capability.EXECUTE, Effect.LOCAL, (), {"task_id": _S, "shell_id": _S}, (),
                 "Stop a background task (executed by Claude Code)."),
    "WebFetch": (Capability.NETWORK, Effect.NONE, (), {"url": _S, "prompt": _S}, ("url",),
                 "Fetch a URL (executed by Claude Code)."),
    "WebSearch": (Capability.NETWORK, Effect.NONE, (), {"query": _S}, ("query",),
                  "Search the web (executed by Claude Code)."),
    # A workflow is a script the CLI runs, orchestrating sub-agents: opaque code.
    "Workflow": (Capability.EXECUTE, Effect.EXTERNAL, (), {"script": _S, "name": _S}, (),
                 "Run a workflow script of sub-agents (executed by Claude Code)."),
    "Write": (Capability.WRITE, Effect.LOCAL, ("file_path",),
              {"file_path": _S, "content": _S}, ("file_path", "content"),
              "Write a file (executed by Claude Code)."),
    # Older CLIs' names.
    "BashOutput": (Capability.READ, Effect.NONE, (), {"bash_id": _S}, (),
                   "Read the output of a background shell (executed by Claude Code)."),
    "Glob": (Capability.READ, Effect.NONE, ("path",), {"pattern": _S, "path": _S}, ("pattern",),
             "Find files by pattern (executed by Claude Code)."),
    "Grep": (Capability.READ, Effect.NONE, ("path",),
             {"pattern": _S, "path": _S, "glob": _S}, ("pattern",),
             "Search file contents (executed by Claude Code)."),
    "KillShell": (Capability.EXECUTE, Effect.LOCAL, (), {"shell_id": _S}, (),
                  "Stop a background shell (executed by Claude Code)."),
    "MultiEdit": (Capability.WRITE, Effect.LOCAL, ("file_path",),
                  {"file_path": _S, "edits": _A}, ("file_path", "edits"),
                  "Apply several edits to a file (executed by Claude Code)."),
    "Task": (Capability.READ, Effect.NONE, (),
             {"description": _S, "prompt": _S, "subagent_type": _S}, ("prompt",),
             "Start a sub-agent (executed by Claude Code)."),
    "TodoWrite": (Capability.READ, Effect.NONE, (), {"todos": _A}, ("todos",),
                  "Update the session's todo list (executed by Claude Code)."),
}

#: Names of the built-in tools this module describes: each use is decided by the registry.
BUILTIN_TOOLS: tuple[str, ...] = tuple(_TABLE)

#: Claude Code's names the adapter lets through untouched (no registry call, no record), and
#: why: they steer the session itself and touch nothing outside it.
PASSED_THROUGH_TOOLS: Mapping[str, str] = types.MappingProxyType({
    "ToolSearch": "loads deferred tools' schemas into the prompt; nothing runs",
    "AskUserQuestion": "asks the user; the answer comes from the user, not a tool",
    "EnterPlanMode": "switches the session to plan mode, which only narrows what may run",
    "ExitPlanMode": "asks the user to approve a plan; the user answers",
    "DeferredToolPlaceholder": "a placeholder entry of the CLI's tool list, never called",
})


def builtin_definitions(
    names: Iterable[str] | None = None,
    *,
    timeout_s: float = 600.0,
    source: str = "framework:claude-agent-sdk",
) -> list[ToolDefinition]:
    """Definitions of the named built-in tools (all of ``BUILTIN_TOOLS`` by default).

    They are not cancellable (tooltrace cannot stop the CLI's work): a call still running when
    its deadline passes ends ``unknown``, and the outcome the CLI reports later resolves it.
    """
    out = []
    for name in BUILTIN_TOOLS if names is None else names:
        row = _TABLE.get(name)
        if row is None:
            raise RegistrationError(
                f"no built-in Claude Code tool {name!r}; known: {', '.join(BUILTIN_TOOLS)}"
            )
        capability, effect, paths, props, required, description = row
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {k: dict(v) for k, v in props.items()},
            "additionalProperties": True,
        }
        if required:
            schema["required"] = list(required)
        out.append(
            ToolDefinition(
                name=name,
                description=description,
                parameters=schema,
                capability=capability,
                effect=effect,
                cancellable=False,
                timeout_s=timeout_s,
                source=source,
                path_params=paths,
            )
        )
    return out


def matches(matcher: str | None, tool_name: str) -> bool:
    """Whether a hook with the CLI's tool ``matcher`` (None: every tool) sees ``tool_name``."""
    if matcher is None or matcher in ("", "*"):
        return True
    try:
        return re.fullmatch(matcher, tool_name) is not None
    except re.error:
        return tool_name in matcher.split("|")


def same_shape(a: Any, b: Any) -> bool:
    """Whether ``a`` can stand in for ``b`` where a tool's output schema is enforced (the CLI
    takes a hook's ``updatedToolOutput`` only in the tool's own shape)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_shape(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_shape, a, b))
    return type(a) is type(b)


# -- taking over SDK @tool functions ---------------------------------------------------------


def adopt(
    registry: ToolRegistry,
    tools: Iterable[SdkMcpTool[Any]],
    *,
    capability: Capability | str = ADOPTED_CAPABILITY,
    effect: Effect | str = ADOPTED_EFFECT,
    timeout_s: float = 30.0,
    source: str = "framework:claude-agent-sdk",
) -> list[ToolDefinition]:
    """Register SDK ``@tool`` functions in ``registry``, with the schema the SDK would send
    (checked like any registration), so ``ClaudeAgentAdapter.mcp_server`` serves them through
    the pipeline. A result with ``is_error`` ends the call ``failed`` with the tool's text."""
    return register_adopted(registry, tools, _read_sdk_tool, capability=capability,
                            effect=effect, source=source, timeout_s=timeout_s)


def _read_sdk_tool(t: SdkMcpTool[Any]) -> Adopted:
    return Adopted(t.name, t.description, sdk_schema(t.input_schema), _sdk_handler(t))


def _sdk_handler(t: SdkMcpTool[Any]) -> Any:
    async def run(**arguments: Any) -> Any:
        result = await t.handler(arguments)
        content = list(result.get("content", []))
        texts = [c.get("text", "") for c in content if c.get("type") == "text"]
        if result.get("is_error"):
            raise ClaudeToolError("\n".join(texts) or "the tool reported an error")
        return "\n".join(texts) if len(texts) == len(content) else content

    return run


def sdk_schema(input_schema: Any) -> dict[str, Any]:
    """The JSON Schema the SDK sends for a ``@tool``'s ``input_schema`` (its rules: a JSON
    Schema as is, ``{name: type}`` with every name required, or a ``TypedDict``)."""
    if isinstance(input_schema, Mapping):
        if isinstance(input_schema.get("type"), str) and "properties" in input_schema:
            return dict(input_schema)
        props = {k: _type_schema(v) for k, v in input_schema.items()}
        return {"type": "object", "properties": props, "required": list(props)}
    if typing.is_typeddict(input_schema):
        hints = typing.get_type_hints(input_schema, include_extras=True)
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {k: _type_schema(v) for k, v in hints.items()},
        }
        required = sorted(getattr(input_schema, "__required_keys__", hints))
        if required:
            schema["required"] = required
        return schema
    raise RegistrationError(f"cannot read a schema from {type(input_schema).__name__}")


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type_schema(tp: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if getattr(origin, "_name", None) in ("NotRequired", "Required", "ReadOnly"):
        return _type_schema(args[0])
    if origin is typing.Annotated:
        schema = _type_schema(args[0])
        note = next((a for a in args[1:] if isinstance(a, str)), None)
        if note is not None:
            schema["description"] = note
        return schema
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if origin is typing.Union or isinstance(tp, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _type_schema(rest[0]) if len(rest) == 1 else {"anyOf": [_type_schema(a)
                                                                      for a in rest]}
    if origin is list or tp is list:
        return {"type": "array", "items": _type_schema(args[0])} if args else {"type": "array"}
    if origin is dict or tp is dict:
        return {"type": "object"}
    if typing.is_typeddict(tp):
        return sdk_schema(tp)
    return {"type": "string"}  # the SDK's own fallback
