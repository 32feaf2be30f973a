"""Every public name says what it is, and every field of a public record says what it holds.

A field is documented by a docstring right under it (read from the source with ``ast``) or by
its name in an ``Attributes:`` section of the class docstring; the API pages render both.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import msgspec

import tooltrace

ROOT = Path(__file__).resolve().parent.parent

_ATTRIBUTE_LINE = re.compile(r"^\s+(\w+)\s*(?:\([^)]*\))?\s*:")


def _public() -> list[tuple[str, object]]:
    return [(n, getattr(tooltrace, n)) for n in tooltrace.__all__ if not n.startswith("__")]


def _records() -> list[tuple[str, type]]:
    return [
        (name, obj)
        for name, obj in _public()
        if isinstance(obj, type)
        and (dataclasses.is_dataclass(obj) or issubclass(obj, msgspec.Struct))
    ]


def _fields(cls: type) -> list[str]:
    """The record's public fields, in order."""
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
    else:
        names = list(getattr(cls, "__struct_fields__", ()))
    return [n for n in names if not n.startswith("_")]


def _source(cls: type) -> Path:
    """The checkout's source of the module that defines ``cls`` (a compiled build has none)."""
    base = ROOT.joinpath(*cls.__module__.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _attribute_docstrings(cls: type) -> set[str]:
    """Fields followed by a string literal in the class body."""
    tree = ast.parse(_source(cls).read_text())
    node = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__
    )
    documented = set()
    for stmt, after in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
            and after.value.value.strip()
        ):
            documented.add(stmt.target.id)
    return documented


def _attributes_section(cls: type) -> set[str]:
    """Names listed under ``Attributes:`` in the class docstring."""
    lines = (inspect.getdoc(cls) or "").splitlines()
    if "Attributes:" not in lines:
        return set()
    found = set()
    for line in lines[lines.index("Attributes:") + 1 :]:
        if line and not line[0].isspace():
            break  # the next section
        m = _ATTRIBUTE_LINE.match(line)
        if m is not None:
            found.add(m.group(1))
    return found


def _undocumented(cls: type) -> list[str]:
    documented = _attribute_docstrings(cls) | _attributes_section(cls)
    return [f for f in _fields(cls) if f not in documented]


def test_every_public_name_has_a_docstring() -> None:
    missing = [name for name, obj in _public() if not (inspect.getdoc(obj) or "").strip()]
    assert missing == []


def test_every_field_of_a_public_record_is_documented() -> None:
    records = dict(_records())
    assert {"ToolDefinition", "ToolCall", "CallRecord", "Step", "HookView", "Mode"} <= set(records)
    missing = {
        name: fields
        for name, cls in records.items()
        if (fields := _undocumented(cls))
    }
    assert missing == {}, "document each field with a docstring under it"


def test_the_checks_read_both_ways_of_documenting_a_field() -> None:
    # ToolDefinition documents its fields under each one; a class may instead list them.
    from tooltrace.model import ToolDefinition

    assert _attribute_docstrings(ToolDefinition) >= {"name", "max_concurrency"}

    class Listed:
        """A record.

        Attributes:
            first: The first.
            second (int): The second.

        Note:
            third: not a field.
        """

    assert _attributes_section(Listed) == {"first", "second"}
