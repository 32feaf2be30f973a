"""Every problem at the place it is about: TOML syntax errors at the construct left open (not
where the parser gave up) with columns from 1, an array-of-tables typo at its header, and Cedar
problems at the token, attribute, entity type or annotation (a file with a statement that does
not parse still has its other statements checked against the schema)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.components import extra, require_module

from tooltrace import ToolRegistry
from tooltrace.builtins import register_builtins
from tooltrace.model import ToolDefinition
from tooltrace.policy.file import check_policy


@pytest.mark.parametrize(("text", "line", "col", "message"), [
    ('version = 1\ntools = ["a",\n  "b"\n\n[paths]\ndeny = ["x"]\n', 2, 9,
     "TOML syntax: unclosed array: it opens here and lacks its closing ]"),
    ('version = 1\n[[rules]]\nid = "x\ntools = ["a"]\n', 3, 6,
     "TOML syntax: unclosed string: it opens here and lacks its closing quote on the same line"),
    ("[[rules]]\nid = 'x\n", 2, 6, "TOML syntax: unclosed string"),
    ('a = """x\nabc\n', 1, 5, "TOML syntax: unclosed multi-line string"),
    ('principal = { roles = ["x"]\nid = 1\n', 1, 13, "TOML syntax: unclosed inline table"),
    ("a = [[1, 2], [3\n\nb = 1\n", 1, 14, "TOML syntax: unclosed array"),
    ("a = [1,\n2\n", 1, 5, "TOML syntax: unclosed array"),
    ('[paths]\ndeny = ["a" "b"]\n', 2, 13, "TOML syntax: Unexpected character: '\"'"),
    ("version = 1\nversion = 2\n", 2, 1, 'TOML syntax: Key "version" already exists.'),
    ("[rules\nid = 1\n", 1, 7, "TOML syntax: unexpected end of line"),
    ("version = 1\n\n[[limit]]\nid = 'x'\nmax_calls = 3\n", 3, 1,
     "unknown key 'limit' in the file (did you mean 'limits'?)"),
    ("version = 1\n\n[[rules]]\nid = 'a'\n\n[[rulez]]\nid = 'b'\n", 6, 1,
     "unknown key 'rulez' in the file"),
])
def test_toml_problems_are_placed_where_they_are(
    tmp_path: Path, text: str, line: int, col: int, message: str
) -> None:
    f = tmp_path / "p.toml"
    f.write_text(text)
    (p,) = check_policy(f, tools={"read_text"})
    assert (p.line, p.column) == (line, col) and p.message.startswith(message), p


CEDAR = """@id("no-secret-files")
forbid (principal, action in Tooltrace::Action::"call", resource)
when { context has path && context.path like "*.env" };

@id("broken")
forbid (principal, action, resource)
when { resource.name == };

@id("colour")
forbid (principal, action, resource)
when {
  resource.capability == "execute" &&
  resource.colour == "red"
};

@id("robots") forbid (principal in Tooltrace::Robot::"r2", action, resource);

@id("asks") @decision("maybe") forbid (principal, action, resource);

@id("eq") forbid (principal, action, resource) when { resource.name = "x" };

@id("str") forbid (principal, action, resource) when { resource.name == "x };
"""


def _builtins() -> dict[str, ToolDefinition]:
    reg = register_builtins(ToolRegistry())
    try:
        return {n: d for n in reg.tool_names() if (d := reg.definition(n)) is not None}
    finally:
        reg.shutdown()


def test_cedar_problems_are_placed_at_what_they_are_about_all_in_one_run(
    tmp_path: Path,
) -> None:
    require_module("cedarpy", extra("cedar"))
    (tmp_path / "agents.cedar").write_text(CEDAR)
    f = tmp_path / "tooltrace.toml"
    f.write_text('[cedar]\npolicies = ["agents.cedar"]\n')
    got = [(p.line, p.column, p.message) for p in check_policy(f, tools=_builtins())]
    assert got == [
        (7, 25, "Cedar syntax: unexpected token `}`"),
        (13, 12, "Cedar schema: policy colour: attribute `colour` on entity type"
                 " `Tooltrace::Tool` not found"),
        (16, 15, "Cedar schema: policy robots: unable to find an applicable action given the"
                 " policy scope constraints"),
        (16, 36, "Cedar schema: policy robots: unrecognized entity type `Tooltrace::Robot`"),
        (18, 13, "policy asks: @decision must be one of deny, ask, not 'maybe'"),
        (20, 69, "Cedar syntax: '=' is not a valid operator in Cedar"),
        (22, 73, "Cedar syntax: invalid token"),
    ]
