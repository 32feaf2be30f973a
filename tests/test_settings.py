"""Settings: ``tooltrace._settings`` is the one reader of ``TOOLTRACE_*`` variables, each one is
in its table, and the configuration page shows exactly that table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import tooltrace
from tooltrace import _settings
from tooltrace._settings import SETTINGS, Setting
from tooltrace.exceptions import ConfigurationError

PKG = Path(tooltrace.__file__).resolve().parent
CONFIG_PAGE = PKG.parent / "docs" / "reference" / "configuration.md"
#: Variables the configuration page lists that the package does not read: setup.py reads
BUILD_TIME: set[str] = set()
_VAR = re.compile(r"^TOOLTRACE_[A-Z0-9_]+$")


def _names_a_variable(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(_VAR.match(node.value))
    if isinstance(node, ast.Name):
        return bool(_VAR.match(node.id))
    if isinstance(node, ast.Attribute):
        return bool(_VAR.match(node.attr))
    return False


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _reads(source: str) -> list[int]:
    """Lines that read a TOOLTRACE_* variable, or define or spell out one's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            env_call = isinstance(f, ast.Attribute) and (
                _is_environ(f.value) or f.attr == "getenv")
            if env_call and node.args and _names_a_variable(node.args[0]):
                found.append(node.lineno)
            if any(k.arg == "envvar" and isinstance(k.value, ast.Constant)
                   and _names_a_variable(k.value) for k in node.keywords):
                found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            if _names_a_variable(node.slice):
                found.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and _names_a_variable(node.value):
            found.append(node.lineno)
    return sorted(found)


def test_only_the_settings_module_reads_tooltrace_variables() -> None:
    found = [f"{path.relative_to(PKG.parent)}:{line}"
             for path in sorted(PKG.rglob("*.py")) if path != PKG / "_settings.py"
             for line in _reads(path.read_text())]
    assert found == [], "read TOOLTRACE_* variables through tooltrace._settings"


def test_the_check_sees_each_way_of_reading_a_variable() -> None:
    source = (
        'import os\n'
        'a = os.environ.get("TOOLTRACE_HOME")\n'
        'b = os.getenv(TOOLTRACE_RUN_ID)\n'
        'c = os.environ[_config.TOOLTRACE_APPROVAL]\n'
        'TOOLTRACE_X = "TOOLTRACE_X"\n'
        'click.option("--home", envvar="TOOLTRACE_HOME")\n'
        'd = os.environ.get(name)\n'
        'click.option("--home", envvar=TOOLTRACE_HOME)\n'
    )
    assert _reads(source) == [2, 3, 4, 5, 6]


def test_every_variable_is_a_constant_in_the_table() -> None:
    constants = {n for n in vars(_settings) if _VAR.match(n)}
    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names))
    assert set(names) == constants
    assert all(getattr(_settings, n) == n for n in constants)
    assert all(s.default and s.meaning for s in SETTINGS)


def _row(s: Setting) -> str:
    see = f" ([{s.see[0]}](../{s.see[1]}))" if s.see else ""
    return f"| `{s.name}` | {s.default} | {s.meaning}{see} |"


def test_the_configuration_page_shows_exactly_the_table() -> None:
    rows = [line for line in CONFIG_PAGE.read_text().splitlines()
            if line.startswith("| `TOOLTRACE_")]
    documented = [r for r in rows if r.split("`")[1] not in BUILD_TIME]
    expected = [_row(s) for s in SETTINGS]
    assert documented == expected, "the page's rows, from SETTINGS:\n" + "\n".join(expected)


def test_an_explicit_argument_wins_over_the_variable_which_wins_over_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    for s in SETTINGS:
        monkeypatch.delenv(s.name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert _settings.resolve_home() == _settings.default_home(Path.cwd())
    assert _settings.resolve_home().is_relative_to(tmp_path / "state" / "tooltrace")
    assert _settings.max_timeout_s() == 600.0
    assert _settings.audit_fsync() == "grouped"
    assert _settings.run_id() is None and _settings.audit_key() is None
    assert not _settings.audit_strict() and not _settings.approval_allows()
    monkeypatch.setenv("TOOLTRACE_HOME", str(tmp_path))
    monkeypatch.setenv("TOOLTRACE_MAX_TIMEOUT_S", "30")
    monkeypatch.setenv("TOOLTRACE_AUDIT_FSYNC", "none")
    monkeypatch.setenv("TOOLTRACE_AUDIT_STRICT", "yes")
    monkeypatch.setenv("TOOLTRACE_APPROVAL", " Allow ")
    assert _settings.resolve_home() == tmp_path
    assert _settings.resolve_home("elsewhere") == Path("elsewhere")
    assert _settings.max_timeout_s() == 30.0 and _settings.max_timeout_s(5) == 5
    assert _settings.audit_fsync() == "none" and _settings.audit_fsync("record") == "record"
    assert _settings.audit_strict() and not _settings.audit_strict(False)
    assert _settings.approval_allows()
    monkeypatch.setenv("TOOLTRACE_MAX_TIMEOUT_S", "soon")
    with pytest.raises(ConfigurationError, match="TOOLTRACE_MAX_TIMEOUT_S"):
        _settings.max_timeout_s()
    with pytest.raises(ConfigurationError, match="positive"):
        _settings.max_timeout_s(0)


def test_the_default_home_is_per_workspace_and_outside_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.delenv("TOOLTRACE_HOME", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    a, b = tmp_path / "ws-a", tmp_path / "ws-b"
    a.mkdir()
    b.mkdir()
    (tmp_path / "link-to-a").symlink_to(a)
    home_a = _settings.resolve_home(workspace=a)
    assert home_a != _settings.resolve_home(workspace=b)
    # Keyed by the real path: the same workspace reached through a symlink shares its home.
    assert home_a == _settings.resolve_home(workspace=tmp_path / "link-to-a")
    assert not home_a.is_relative_to(a) and home_a.name.startswith("ws-a-")
    monkeypatch.chdir(a)
    assert _settings.resolve_home() == home_a
    # A relative XDG_STATE_HOME is invalid by the specification and ignored.
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert _settings.state_dir() == tmp_path / "user" / ".local" / "state" / "tooltrace"
