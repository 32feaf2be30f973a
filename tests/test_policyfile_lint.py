"""Rules that load but can never match or decide are warned about at their place:
``tooltrace policy check`` prints them, ``--strict`` exits 1 on them, a registry still starts."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner

from tooltrace import ToolRegistry, create_registry
from tooltrace.builtins import register_builtins
from tooltrace.cli import main
from tooltrace.model import ToolDefinition
from tooltrace.policy.file import check_policy, load_policy

MISTAKES = """version = 1

[modes.review]
capabilities = ["read"]
tools = ["read_text", "write_text"]

[[rules]]
id = "writes-raw"
tools = ["write_text"]
args = { path = "^(?!notes/)" }

[[rules]]
id = "no-curl"
tools = ["run_command"]
args = { command = "curl" }

[[rules]]
id = "neg"
tools = ["write_text"]
paths = ["!notes/**", "", "notes/"]

[[rules]]
id = "plan-writes"
tools = ["write_text"]
modes = ["plan"]

[[rules]]
id = "no-commands"
tools = ["run_command"]

[[rules]]
id = "no-rm"
tools = ["run_command"]
args = { argv = "rm" }

[[rules]]
id = "jobs-paths"
tools = ["job_status"]
only_paths = ["notes/**"]

[[limits]]
id = "commands"
tools = ["run_command"]
max_calls = 3
"""


def _builtins() -> dict[str, ToolDefinition]:
    reg = register_builtins(ToolRegistry())
    try:
        return {n: d for n in reg.tool_names() if (d := reg.definition(n)) is not None}
    finally:
        reg.shutdown()


def test_each_rule_that_cannot_match_or_decide_is_warned_about_at_its_place(
    tmp_path: Path,
) -> None:
    f = tmp_path / "team.toml"
    f.write_text(MISTAKES)
    assert check_policy(f, tools=_builtins()) == []  # valid: warnings only when asked
    got = [(w.line, w.column, w.severity, w.message.split(":")[0].split(" (")[0])
           for w in check_policy(f, tools=_builtins(), warnings=True)]
    assert got == [
        (5, 23, "warning", "mode 'review' lists 'write_text', which it never shows"),
        (10, 10, "warning", "args.path is matched against the argument as the model wrote it,"
                            " before '..' and symlinks are resolved"),
        (15, 10, "warning", "args.command"),
        (20, 10, "warning", "'!notes/**'"),
        (20, 23, "warning", "an empty glob matches no path"),
        (20, 27, "warning", "'notes/' matches no path"),
        (25, 1, "warning", "rule 'plan-writes' can never match"),
        (32, 1, "warning", "rule 'no-rm' never decides"),
        (39, 1, "warning", "rule 'jobs-paths' can never match"),
        (42, 1, "warning", "limit 'commands' never counts a call"),
    ]
    pf = load_policy(f, tools=_builtins())
    assert len(pf.warnings) == 10 and str(pf.warnings[2]).startswith(f"{f}:15:10: warning: ")


def test_policy_check_prints_warnings_and_fails_on_them_only_with_strict(
    tmp_path: Path,
) -> None:
    f = tmp_path / "team.toml"
    f.write_text(MISTAKES)
    res = CliRunner().invoke(main, ["policy", "check", str(f)])
    assert res.exit_code == 0, res.output
    assert f"{f}:15:10: warning: args.command: no tool rule 'no-curl' matches takes an" \
        " argument 'command' (run_command takes argv, cwd, env," in res.output
    assert f"{f}: ok (10 warnings)" in res.output
    assert CliRunner().invoke(main, ["policy", "check", str(f), "--strict"]).exit_code == 1
    res = CliRunner().invoke(main, ["policy", "check", str(f), "--json"])
    out = orjson.loads(res.stdout)
    assert out["valid"] is True
    assert {p["severity"] for p in out["problems"]} == {"warning"}
    f.write_text(MISTAKES + "\n[[rules]]\nid = 'x'\ndecision = 'block'\n")
    res = CliRunner().invoke(main, ["policy", "check", str(f), "--strict"])
    assert res.exit_code == 2 and "decision must be one of deny, ask" in res.output


def test_a_clean_file_and_tools_registered_later_raise_no_warning(tmp_path: Path) -> None:
    f = tmp_path / "ok.toml"
    f.write_text("""
tools = ["deploy"]

[[rules]]
id = "interns-no-commands"
tools = ["run_command"]
principal = { roles = ["intern"] }

[[rules]]
id = "no-curl"
tools = ["run_command"]
args = { argv = "curl" }

[[rules]]
id = "no-prod-deploys"
tools = ["deploy"]
args = { service = "prod" }

[[rules]]
id = "writes-only-in-notes"
effects = ["local"]
only_paths = ["notes/**"]

[approval]
tools = ["write_text"]

[[limits]]
id = "reads"
tools = ["read_text"]
max_calls = 10
""")
    assert check_policy(f, tools=_builtins(), warnings=True) == []
    # A registry starts on a file with warnings (they are for the person checking it).
    bad = tmp_path / "warned.toml"
    bad.write_text(MISTAKES)
    reg = create_registry(tmp_path, home=tmp_path / "h", policy_file=bad, metrics=False,
                          logging=False, audit=False)
    reg.shutdown()
