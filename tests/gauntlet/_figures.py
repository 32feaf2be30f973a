"""Figures the gauntlet measured: collected per test, printed at the end of the session, and
appended as JSON lines to ``$TOOLTRACE_GAUNTLET_FIGURES`` when that variable names a file."""

from __future__ import annotations

import os
import time
from typing import Any

import orjson

#: ``TOOLTRACE_LONG=1`` selects the long versions.
LONG = os.environ.get("TOOLTRACE_LONG") == "1"
#: File that receives one JSON line per recorded figure set (optional).
FIGURES_ENV = "TOOLTRACE_GAUNTLET_FIGURES"

COLLECTED: list[tuple[str, dict[str, Any]]] = []


def size(ci: int, long: int) -> int:
    """The CI size or, with ``TOOLTRACE_LONG=1``, the long size."""
    return long if LONG else ci


def record(name: str, **values: Any) -> None:
    """Keep one named set of measured figures (printed at the end of the session)."""
    values = {"long": LONG, **values}
    COLLECTED.append((name, values))
    path = os.environ.get(FIGURES_ENV)
    if path:
        line = orjson.dumps({"name": name, "at": time.time(), **values}, default=str)
        with open(path, "ab") as fh:
            fh.write(line + b"\n")


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of a process now (from ``/proc``)."""
    with open(f"/proc/{pid or 'self'}/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")
