"""What every section shares: percentiles, tables, RSS, a discarding span exporter."""

from __future__ import annotations

import functools
import math
import os
import platform
import sys
from collections.abc import Sequence
from typing import Any

__all__ = [
    "SCRATCH_ENV",
    "DropExporter",
    "Table",
    "fmt",
    "machine",
    "percentile",
    "rss_mib",
    "scratch",
]

#: Directory under which every bench process makes its temporary homes (set by ``run.py``,
#: inherited by child processes, removed at the end of the run).
SCRATCH_ENV = "TOOLTRACE_BENCH_TMP"


def scratch(prefix: str) -> str:
    """A new temporary directory inside this run's scratch directory (or the system's)."""
    import tempfile

    base = os.environ.get(SCRATCH_ENV)
    if base:
        os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=base or None)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of already sorted values, nearest-rank."""
    if not sorted_values:
        return math.nan
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100.0 * len(sorted_values)) - 1))
    return float(sorted_values[k])


def fmt(v: Any, digits: int = 1) -> str:
    """A table cell: numbers with fixed digits, None as a dash."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.{digits}f}"
    return str(v)


class Table:
    """A Markdown table printed with a title line (``### title``), easy to paste and to parse."""

    def __init__(self, title: str, columns: Sequence[str]) -> None:
        self.title = title
        self.columns = list(columns)
        self.rows: list[list[str]] = []

    def add(self, *cells: Any, digits: int = 1) -> None:
        """Add one row (cells formatted with ``fmt``)."""
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.title}: {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([fmt(c, digits) for c in cells])

    def render(self) -> str:
        """The table as Markdown."""
        widths = [len(c) for c in self.columns]
        for r in self.rows:
            widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]

        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

        out = [f"### {self.title}", "", line(self.columns)]
        out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        out.extend(line(r) for r in self.rows)
        return "\n".join(out) + "\n"

    def print(self) -> None:
        """Print the table to stdout at once."""
        sys.stdout.write(self.render() + "\n")
        sys.stdout.flush()


def rss_mib(pid: int | None = None) -> float:
    """Resident set size of a process (this one by default), MiB, from /proc."""
    path = f"/proc/{pid or 'self'}/status"
    with open(path) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) / 1024.0
    return math.nan


def machine() -> str:
    """One line describing where the figures were measured."""
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?"
            )
    except OSError:
        model = "?"
    return (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPU ({model}), {platform.system()} {platform.release()}"
    )


@functools.cache
def _drop_exporter_class() -> type:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class _Drop(SpanExporter):
        """A span exporter that counts and discards."""

        def __init__(self) -> None:
            self.spans = 0

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            self.spans += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    return _Drop


def DropExporter() -> Any:
    """A ``SpanExporter`` that counts spans (``.spans``) and drops them."""
    return _drop_exporter_class()()
