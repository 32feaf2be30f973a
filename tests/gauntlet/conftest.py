"""Gauntlet session hooks: print every recorded figure at the end of the run."""

from __future__ import annotations

from typing import Any

from ._figures import COLLECTED, LONG


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per figure set: what was measured, at which size."""
    if not COLLECTED:
        return
    tr = terminalreporter
    tr.section(f"gauntlet figures ({'long' if LONG else 'CI'} sizes)")
    for name, values in COLLECTED:
        shown = ", ".join(f"{k}={v}" for k, v in values.items() if k != "long")
        tr.write_line(f"{name}: {shown}")
