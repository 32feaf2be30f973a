"""One call to get a registry with every sink wired: the embedded defaults."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from . import _settings
from .registry import ToolRegistry
from .sinks import Sink, SpanOpener

if TYPE_CHECKING:
    from pathlib import Path

    from .model import FunctionTool

__all__ = ["create_registry"]


def create_registry(
    workspace: str | os.PathLike[str] | None = None,
    *,
    home: str | os.PathLike[str] | None = None,
    tracing: bool | None = None,
    metrics: bool = True,
    logging: bool = True,
    audit: bool = True,
    builtins: bool = True,
    metrics_registry: Any = None,
    log_level: str | None = None,
    log_format: str | None = None,
    log_stream: Any = None,
    audit_options: dict[str, Any] | None = None,
    extra_sinks: tuple[Sink, ...] = (),
    policy_file: str | os.PathLike[str] | None = None,
    tools: Iterable[FunctionTool] = (),
    **registry_options: Any,
) -> ToolRegistry:
    """A ``ToolRegistry`` with tracing (when ``OTEL_*`` configures it, or ``tracing=True``),
    Prometheus metrics, structured logs and the DuckDB-queryable audit trail under ``home``
    (``TOOLTRACE_HOME``, else the workspace's own home in the user's state directory:
    ``tooltrace where``), plus the built-in tools.

    The policy comes from ``policy=`` when given, else from the policy file: ``policy_file``
    > ``TOOLTRACE_POLICY`` > ``./tooltrace.toml`` when it exists (``tooltrace.policy.file``); an
    invalid file raises ``PolicyFileError`` and no registry starts. The file's ``[commands]``
    table configures the built-in command tools (their sandbox and network). ``tools`` (``@tool``
    functions) are registered before the file is checked, so it may name them
    without declaring them in its own ``tools = [...]``.

    Keyword arguments not named here go to ``ToolRegistry`` (policy, hooks, approver, caps...).
    """
    from .telemetry import default_sinks

    home_path = _settings.resolve_home(home, workspace=workspace)
    policy_path = None if "policy" in registry_options else _settings.policy_path(policy_file)
    if policy_path is not None and not policy_path.is_file():
        from .policy.file import PolicyFileError, Problem

        raise PolicyFileError([Problem(str(policy_path), 1, 1, "no such policy file")])
    sinks: list[Sink] = default_sinks(
        tracing=tracing,
        metrics=metrics,
        logging=False,
        metrics_registry=metrics_registry,
    )
    if logging:
        from .telemetry.logging import LoggingSink

        sinks.append(LoggingSink(log_stream, level=log_level, fmt=log_format))
    if audit:
        from .telemetry import AuditSink

        sinks.append(AuditSink(home_path, **(audit_options or {})))
    sinks.extend(extra_sinks)
    tracer = next((s for s in sinks if isinstance(s, SpanOpener)), None)
    reg = ToolRegistry(
        workspace=workspace, home=home_path, sinks=sinks, tracer=tracer, **registry_options
    )
    if builtins:
        _register_builtins(reg, policy_path)
    try:
        for t in tools:
            reg.register(t)
        if policy_path is not None:
            from .policy.file import load_policy

            defs = {n: d for n in reg.tool_names() if (d := reg.definition(n)) is not None}
            load_policy(policy_path, tools=defs).apply(reg)
    except Exception:
        reg.shutdown()
        raise
    return reg


def _register_builtins(reg: ToolRegistry, policy_path: Path | None) -> None:
    """The built-in tools, the command tools configured by the policy file's ``[commands]``
    (read before the tools are registered: the whole file is checked against them after)."""
    from .builtins import register_builtins

    commands = None
    if policy_path is not None:
        from .policy.file import command_settings

        settings = command_settings(policy_path)
        commands = settings.config() if settings is not None else None
    register_builtins(reg, commands=commands)
