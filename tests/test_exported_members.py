"""The public surface is exactly what ``tooltrace.__all__`` says, and importing it stays cheap."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import tooltrace

EXPECTED = {
    "ApprovalDecision", "ApprovalRequest", "Artifact", "ArtifactStore", "AuditUnavailableError",
    "CallContext", "CallRecord", "CallStatus", "Capability", "ConfigurationError",
    "DeadlineExceeded", "DenyCommandPatterns", "DenyPrivateNetwork", "DuplicateToolError",
    "Effect", "Execution", "FunctionHook", "FunctionTool", "GroupLine", "Hook", "HookAction",
    "HookDecision",
    "HookView", "InvalidSchemaError", "LateStep", "MalformedCallError", "Mode", "OutcomeUnknown",
    "PathPolicyError", "Policy", "PolicyDecision", "PolicyRequest", "Principal", "Redactor",
    "RegistrationError", "RequireApproval", "ResolvedPath", "Resolution", "Retry", "Rule",
    "Stage", "Status", "Step", "StepName", "Timing", "ToolCall", "ToolCancelled",
    "ToolDefinition", "ToolInterrupt", "ToolListing", "ToolRegistry", "ToolResult",
    "ToolResultEnvelope",
    "TooltraceError", "Verdict", "Visibility", "Workspace", "__version__", "create_registry",
    "current_context", "hook", "new_call_id", "tool",
}


def test_all_is_pinned() -> None:
    assert set(tooltrace.__all__) == EXPECTED
    assert sorted(tooltrace.__all__) == list(tooltrace.__all__)
    for name in tooltrace.__all__:
        assert getattr(tooltrace, name) is not None


def test_public_names_have_docstrings() -> None:
    missing = [n for n in tooltrace.__all__ if not n.startswith("__")
               and callable(getattr(tooltrace, n)) and not getattr(tooltrace, n).__doc__]
    assert missing == []


def test_import_does_not_pull_heavy_dependencies() -> None:
    code = (
        "import sys, tooltrace\n"
        "heavy = [m for m in ('duckdb', 'pyarrow', 'grpc', 'opentelemetry.sdk',"
        " 'prometheus_client', 'structlog', 'rich') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_registry_that_starts_and_stops_loads_no_reader_and_compiles_no_detector(
    tmp_path: Path,
) -> None:
    # What serves a later or a rarer path loads there: checking anchors, looking a call up,
    # recovering dead segments, compaction's command line, the detectors' regexes, the command
    # sandbox (the first command), the schema compiler (the first call a schema checks) and the
    # stages (the first call).
    later = ("tooltrace.audit._anchorcheck", "tooltrace.audit._findings",
             "tooltrace.audit._lookup", "tooltrace.audit._recover", "argparse",
             "tooltrace.runtime._sandbox", "fastjsonschema", "tooltrace.pipeline._stages")
    code = (
        "import os, sys, tooltrace\n"
        "from tooltrace.redaction import _detectors\n"
        "tooltrace.create_registry(workspace=sys.argv[1], home=sys.argv[2],"
        " log_stream=open(os.devnull, 'w')).shutdown()\n"
        f"print(','.join(m for m in {later!r} if m in sys.modules))\n"
        "print(_detectors._compiled.cache_info().currsize)\n"
    )
    (tmp_path / "ws").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLTRACE_"))}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ws"), str(tmp_path / "home")],
                         capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split("\n")[:2] == ["", "0"]


def test_cli_commands_do_not_import_the_registry() -> None:
    # The audit readers start fast: `tooltrace autopsy` needs DuckDB, not the call pipeline.
    code = (
        "import sys, tooltrace.cli.autopsy, tooltrace.cli.calls\n"
        "print(','.join(m for m in ('tooltrace.registry', 'tooltrace.pipeline', 'asyncio')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_tool_is_the_decorator_wherever_it_is_imported_from() -> None:
    import tooltrace.model

    assert callable(tooltrace.tool) and tooltrace.tool is tooltrace.model.tool


def _imported(nodes: list[ast.stmt]) -> dict[str, str]:
    """``{name: module}`` of the ``from .module import name`` statements among ``nodes``."""
    return {
        alias.asname or alias.name: "." * node.level + (node.module or "")
        for node in nodes
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def _init() -> ast.Module:
    return ast.parse(Path(tooltrace.__file__).read_text())


def _type_checking_imports() -> dict[str, str]:
    blocks = [
        node
        for node in _init().body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1
    return _imported(blocks[0].body)


def test_all_is_built_from_the_one_list_the_imports_match() -> None:
    # What type checkers see (the TYPE_CHECKING imports, plus the names bound at import) is the
    # one list of public names, each from the same module it loads from on first use.
    typed = _type_checking_imports()
    eager = {
        name: module
        for name, module in _imported(_init().body).items()
        if name in tooltrace.__all__
    }
    assert set(typed).isdisjoint(eager)
    assert {**typed, **eager} == tooltrace._PUBLIC
    assert sorted([*tooltrace._PUBLIC, "__version__"]) == list(tooltrace.__all__)


def test_a_strict_type_checker_sees_every_public_name_as_exported(tmp_path: Path) -> None:
    # Names re-exported with ``import X as X``: ``mypy --strict`` (no implicit re-export) takes
    # every name in __all__ from the package.
    names = [n for n in tooltrace.__all__ if not n.startswith("__")]
    user = tmp_path / "user.py"
    user.write_text(f"from tooltrace import {', '.join(names)}\n")
    root = str(Path(tooltrace.__file__).parents[1])
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                          "--follow-imports=silent", str(user)],
                         capture_output=True, text=True, env={**os.environ, "MYPYPATH": root})
    assert out.returncode == 0, out.stdout
