"""``tooltrace call``: run one tool call from the shell, through the whole pipeline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson

from ._common import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    OutputGuard,
    home_option,
    json_option,
    policy_option,
)

__all__ = ["call"]


@click.command()
@click.argument("name")
@click.argument("arguments", required=False, default="{}")
@home_option
@click.option("--workspace", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=".", show_default=True, help="Workspace the tools may touch.")
@click.option("--mode", default="default", show_default=True, help="Mode (e.g. plan).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.001), default=None,
              help="Deadline in seconds (bounded by the operator's maximum).")
@click.option("--background", is_flag=True, help="Ask a job-capable tool to return a job id.")
@click.option("--tools", "tool_specs", multiple=True, metavar="MODULE:ATTR",
              help="Register extra @tool functions (one, or a list of them).")
@click.option("--hook", "hook_specs", multiple=True, metavar="MODULE:ATTR",
              help="Add a hook (a Hook, or a function of HookView).")
@policy_option
@json_option
def call(name: str, arguments: str, home: Path | None, workspace: Path, mode: str,
         timeout_s: float | None, background: bool, tool_specs: tuple[str, ...],
         hook_specs: tuple[str, ...], policy_file: Path | None, as_json: bool) -> None:
    """Run tool NAME with ARGUMENTS (a JSON object, or - to read it from stdin).

    The call goes through validation, policy, hooks, deadline, redaction and every sink, and is
    audited like any other. Exit code 0 when the call is ok, 1 otherwise, 2 for bad usage.
    """
    from .. import create_registry
    from ..exceptions import TooltraceError
    from ..mcp import load_object, resolve_hooks
    from ..model import FunctionTool, ToolCall
    from ..policy.file import PolicyFileError

    guard = OutputGuard(home)
    raw = sys.stdin.read() if arguments == "-" else arguments
    try:
        args = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise click.UsageError("ARGUMENTS must be a JSON object") from None
    if not isinstance(args, dict):
        raise click.UsageError("ARGUMENTS must be a JSON object")
    try:
        hooks = resolve_hooks(hook_specs)
        extra: list[FunctionTool] = []
        for spec in tool_specs:
            obj: Any = load_object(spec, "tooltrace.tools")
            items = obj if isinstance(obj, list | tuple) else [obj]
            if not all(isinstance(t, FunctionTool) for t in items):
                raise click.UsageError(f"{spec} is not a @tool function (or a list of them)")
            extra.extend(items)
    except TooltraceError as exc:
        raise click.UsageError(guard(str(exc))) from None
    from .._settings import resolve_home

    home = resolve_home(home, workspace=workspace)
    log_dir = home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "cli.jsonl").open("a", encoding="utf-8") as log_stream:
        try:
            reg = create_registry(workspace, home=home, hooks=hooks, metrics=False,
                                  log_stream=log_stream, policy_file=policy_file)
        except PolicyFileError as exc:
            for p in exc.problems:
                click.echo(guard(str(p)), err=True)
            sys.exit(EXIT_USAGE)
        try:
            for t in extra:
                reg.register(t)
            env = reg.call(ToolCall(name, args, mode=mode, timeout_s=timeout_s,
                                    background=background))
        finally:
            reg.shutdown()
    if as_json:
        click.echo(guard(orjson.dumps(env.to_dict(), default=str,
                                      option=orjson.OPT_INDENT_2).decode()))
    else:
        click.echo(guard(f"{env.status.value}: {env.summary}"))
        if env.data is not None:
            data = env.data if isinstance(env.data, str) else orjson.dumps(
                env.data, default=str, option=orjson.OPT_INDENT_2).decode()
            click.echo(guard(data))
        click.echo(guard(f"call_id: {env.call_id}"), err=True)
    sys.exit(EXIT_OK if env.ok else EXIT_FAIL)


