"""The MCP guide's "What the proxy changes" is held to the tests: every item of its lists names
(in a ``<!-- tests: file::test, ... -->`` comment) the tests that show it, and each of those
tests exists; the proxy's tests of results and trace context are each named by some item.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "docs" / "guide" / "mcp.md"
TESTS = REPO / "tests"
_TAG = re.compile(r"<!-- tests: (.+?) -->")


def _section() -> str:
    text = GUIDE.read_text()
    start = text.index("\n## What the proxy changes\n")
    end = text.index("\n#", start + 1)
    return text[start:end]


def _items() -> list[str]:
    """The section's list items, each with its continuation lines."""
    items: list[str] = []
    for line in _section().splitlines():
        if line.startswith("- "):
            items.append(line)
        elif line.startswith("  ") and items:
            items[-1] += "\n" + line
    return items


def _tests(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")}


def test_every_change_names_tests_that_exist() -> None:
    items = _items()
    assert len(items) >= 10
    for item in items:
        tags = _TAG.findall(item)
        assert len(tags) == 1, f"no tests named for: {item[:80]}"
        for ref in tags[0].split(","):
            file, _, name = ref.strip().partition("::")
            assert (TESTS / file).is_file(), ref
            assert name in _tests(TESTS / file), ref


def test_the_fidelity_and_trace_tests_back_the_list() -> None:
    named = {ref.strip() for tag in _TAG.findall(_section()) for ref in tag.split(",")}
    for file in ("test_mcp_fidelity.py", "test_mcp_tracecontext.py"):
        for name in _tests(TESTS / file):
            if name.startswith("test_the_comparison_covers"):
                continue  # a check of the comparison itself
            assert f"{file}::{name}" in named, f"{file}::{name} backs no item of the list"
