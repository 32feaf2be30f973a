"""A side-effecting tool and an always-block hook, importable by CLI subprocesses in tests."""

from __future__ import annotations

import os
from pathlib import Path

from tooltrace import HookDecision, HookView, hook, tool


@tool(capability="write", effect="local")
def touch(name: str) -> str:
    """Write the marker file named by TOOLTRACE_TEST_MARKER (the side effect under test)."""
    Path(os.environ["TOOLTRACE_TEST_MARKER"]).write_text(name)
    return "touched"


@hook(required=True)
def deny_all(view: HookView) -> HookDecision:
    """Block every call."""
    return HookDecision.block("maintenance window")
