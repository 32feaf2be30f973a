"""Policy as code: a TOML policy file, checked with every problem placed, compiled to ``Policy``.

One file (``tooltrace.toml``, ``--policy FILE`` or ``TOOLTRACE_POLICY``) says which tools,
capabilities and effects each mode exposes, which paths are denied or read-only, which
arguments, URL hosts and principals a rule denies or sends for approval, how the built-in
command and network rules are tuned, limits per run or principal, and (``[commands]``) the
sandbox commands run in and whether they may use the network. Any rule may be
``mode = "observe"``: it records what it would have done and lets the call go on. The file
compiles to the ordinary ``tooltrace.policy`` objects: there is one policy engine.

    pf = load_policy("tooltrace.toml", tools=registry.tool_names())
    pf.apply(registry)

``create_registry`` does this by itself; ``tooltrace policy check FILE`` lists every problem as
``file:line:column: message``; ``tooltrace policy test FILE`` replays the audit trail against it.

Policies may also be written in Cedar (``tooltrace[cedar]``): the file names them
(``[cedar] policies = ["agents.cedar"]``), or a ``.cedar`` file is given where a policy file
is (``--policy agents.cedar``). ``cedar_schema(tools)`` is the schema they are validated
against.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...exceptions import ConfigurationError
from ._cedarrule import CedarRule
from ._cedarschema import schema_text as cedar_schema
from ._check import Checker
from ._commands import CommandSettings, command_settings
from ._compile import Compiled, Expand
from ._limits import LimitRelease, LimitRule
from ._rules import Match, PatternRule
from ._source import Problem, parse_text
from ._whatif import Change, WhatIf, replay

if TYPE_CHECKING:
    from ...model import ToolDefinition
    from ...registry import ToolRegistry

__all__ = [
    "Change",
    "CommandSettings",
    "LimitRelease",
    "LimitRule",
    "Match",
    "PatternRule",
    "PolicyFile",
    "PolicyFileError",
    "Problem",
    "WhatIf",
    "cedar_schema",
    "check_policy",
    "command_settings",
    "load_policy",
    "replay",
]


class PolicyFileError(ConfigurationError):
    """A policy file is missing, unreadable or invalid; ``problems`` lists every problem found
    (``file:line:column: message``). A registry never starts on such a file."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        head = "\n".join(str(p) for p in problems[:20])
        more = f"\n... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"invalid policy file ({len(problems)} problems):\n{head}{more}")


@dataclass(frozen=True, slots=True)
class PolicyFile:
    """A checked, compiled policy file."""

    path: str
    """The file, as it was named."""
    compiled: Compiled
    """The policy, limits and rule facts it compiled to."""
    warnings: tuple[Problem, ...] = ()
    """Rules that load but do not say what they seem to: they can never match, or an earlier
    rule always decides first (``Problem.severity`` is ``warning``)."""

    @property
    def commands(self) -> CommandSettings | None:
        """The ``[commands]`` settings (None: the file sets none)."""
        return self.compiled.commands

    @property
    def rule_ids(self) -> tuple[str, ...]:
        """Every rule's id, in evaluation order."""
        return self.compiled.rule_ids

    def apply(self, registry: ToolRegistry) -> None:
        """Make this the registry's policy (and attach what frees its limits' slots); its
        read-only roots outside the workspace join the registry's workspace, and Cedar
        policies see arguments as the registry's redactor leaves them.

        ``[commands]`` is not applied here: it configures the command tools as they are
        registered (``create_registry`` does it; by hand, pass ``command_settings(path)``'s
        ``config()`` to ``register_builtins(registry, commands=...)``)."""
        registry.policy = self.compiled.policy
        if self.compiled.read_only_roots:
            registry.workspace = registry.workspace.with_read_only(self.compiled.read_only_roots)
        for rule in self.compiled.policy.rules:
            if isinstance(rule, CedarRule):
                rule.redactor = registry.redactor
        if any(x.max_concurrent is not None for x in self.compiled.limits):
            registry.add_sink(LimitRelease(self.compiled.limits))


def _read(path: str | os.PathLike[str]) -> tuple[str, str]:
    name = os.fspath(path)
    try:
        return name, Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        raise PolicyFileError([Problem(name, 1, 1, f"cannot read the file: {why}")]) from None


#: What may be named as the tools a file is checked against: names, or the definitions
#: themselves (a mapping of name to ``ToolDefinition``, which also types the Cedar schema).
_Tools = Iterable[str] | Mapping[str, "ToolDefinition"] | None


def _compile(name: str, text: str, tools: _Tools, expand: Expand | None = None
             ) -> tuple[Compiled | None, list[Problem], list[Problem]]:
    from ._compile import compile_document
    from ._source import Positions

    if name.endswith(".cedar"):  # a Cedar file alone: as if a file named it
        doc: Mapping[str, Any] | None = {"cedar": {"policies": [Path(name).name]}}
        pos, problems = Positions(""), list[Problem]()
    else:
        doc, pos, problems = parse_text(text, name)
    if doc is None:
        return None, problems, []
    ck = Checker(name, pos)
    defs = dict(tools) if isinstance(tools, Mapping) else None
    compiled = compile_document(doc, ck, None if tools is None else frozenset(tools), defs,
                                Path(name).parent, expand)

    def placed(p: Problem) -> tuple[bool, str, int, int]:
        return p.file != name, p.file, p.line, p.column

    problems = sorted(ck.problems, key=placed)
    return (compiled if not problems else None), problems, sorted(ck.warnings, key=placed)


def check_policy(path: str | os.PathLike[str], *, tools: _Tools = (),
                 expand: Expand | None = None, warnings: bool = False) -> list[Problem]:
    """Every problem in the file (empty when it is valid); with ``warnings``, also every rule
    that loads but does not say what it seems to (``Problem.severity`` ``warning``: an
    ``args`` key no tool it names takes, a negated or empty glob, a rule no tool matches in
    its modes, a rule an earlier one always decides for), placed in the same order after the
    errors. ``tools`` are the tool names it may
    name besides those its own ``tools`` list declares (``None``: any name, for tools that
    are registered later, such as an MCP proxy's). Given as definitions (name to
    ``ToolDefinition``), they also make the schema Cedar policies are validated against;
    otherwise Cedar files are checked for syntax only. ``expand`` turns a tool name with a
    wildcard into the names it stands for, or raises ``ValueError`` saying why it cannot (the
    MCP proxy's expands ``mcp.*.<kind>``); without it a wildcard is a problem."""
    try:
        name, text = _read(path)
    except PolicyFileError as exc:
        return exc.problems
    _compiled, problems, found = _compile(name, text, tools, expand)
    return problems + found if warnings else problems


def load_policy(path: str | os.PathLike[str], *, tools: _Tools = (),
                expand: Expand | None = None) -> PolicyFile:
    """The compiled file; raises ``PolicyFileError`` with every problem when it is invalid
    (``tools`` and ``expand`` as for ``check_policy``)."""
    name, text = _read(path)
    compiled, problems, found = _compile(name, text, tools, expand)
    if compiled is None:
        raise PolicyFileError(problems)
    return PolicyFile(name, compiled, tuple(found))
