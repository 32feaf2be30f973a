"""Timelines drawn to scale as inline SVG: the steps of one call, the calls of one run.

Every bar's x position and width are proportional to time on one linear axis with labelled
ticks; a step that takes no measurable time is drawn as a 2-pixel mark so it stays visible.
Every text is escaped here; nothing in the drawing refers to anything outside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from ..audit import cut
from ._model import NeighbourRow, StepRow

__all__ = ["COLOURS", "call_timeline", "run_timeline", "ticks"]

_LABEL_W = 260
_PLOT_W = 640
_ROW_H = 18
_TOP = 24
#: The colour of each decision and status: green went through, amber changed it, orange was
#: refused before running (rejected), red failed while running, purple is of unknown end,
#: grey was cancelled; anything else is blue. The pages' legends are drawn from this table.
COLOURS = {
    "accept": "#2e7d32", "allow": "#2e7d32", "continue": "#2e7d32", "returned": "#2e7d32",
    "ok": "#2e7d32", "approve": "#2e7d32", "admit": "#2e7d32", "modify": "#f9a825",
    "warn": "#f9a825", "annotate": "#f9a825", "reject": "#e65100", "deny": "#e65100",
    "block": "#e65100", "rejected": "#e65100", "raise": "#c62828", "failed": "#c62828",
    "unknown": "#6a1b9a", "timeout": "#6a1b9a", "signal": "#6a1b9a", "unconfirmed": "#6a1b9a",
    "abandoned": "#6a1b9a", "cancelled": "#616161",
}
_OTHER = "#1565c0"
#: Room at the right edge for the steps recorded after the call returned.
_LATE_W = 90


def ticks(span_ms: float, count: int = 5) -> list[float]:
    """Round tick values (ms) from 0 to at least ``span_ms``: 1, 2 or 5 times a power of ten."""
    span = max(span_ms, 1e-3)
    raw = span / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    n = math.ceil(span / step - 1e-9)
    return [round(i * step, 6) for i in range(n + 1)]


def _fmt_ms(ms: float) -> str:
    if ms >= 1000:
        return f"{ms / 1000:g} s"
    return f"{ms:g} ms"


def _late_at(ms: float) -> str:
    """When a late step happened, from the call's start: ``+2.50 s``, ``+840.0 ms``."""
    return f"+{ms / 1000:.2f} s" if ms >= 1000 else f"+{ms:.1f} ms"


def _axis(scale: float, marks: Sequence[float], height: int) -> list[str]:
    out = []
    for t in marks:
        x = _LABEL_W + t * scale
        out.append(f'<line x1="{x:.1f}" y1="{_TOP - 4}" x2="{x:.1f}" y2="{height - 4}" '
                   'class="grid"/>')
        out.append(f'<text x="{x:.1f}" y="{_TOP - 8}" class="tick">{escape(_fmt_ms(t))}</text>')
    return out


def _bar(y: int, x0: float, width: float, colour: str, title: str) -> str:
    return (f'<rect x="{x0:.1f}" y="{y + 3}" width="{max(width, 2.0):.1f}" '
            f'height="{_ROW_H - 6}" fill="{colour}"><title>{escape(title)}</title></rect>')


def _svg(rows: list[str], height: int, label: str, extra: int = 0) -> str:
    width = _LABEL_W + _PLOT_W + 20 + extra
    return (f'<svg class="timeline" role="img" '
            f'aria-label="{escape(label)}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">' + "".join(rows) + "</svg>")


def call_timeline(steps: Sequence[StepRow]) -> str:
    """The steps of one call to scale while it ran; the steps recorded after it returned (a
    late resolution, a job's end) after a break at the right edge, each marked with its time
    (to scale they would squash the rest to a line)."""
    drawn = [s for s in steps if not s.late]
    late = [s for s in steps if s.late]
    span = max([s.offset_ms + s.elapsed_ms for s in drawn] + [1e-3])
    marks = ticks(span)
    scale = _PLOT_W / marks[-1]
    height = _TOP + _ROW_H * (len(drawn) + len(late)) + 8
    rows = _axis(scale, marks, height)
    for i, s in enumerate([*drawn, *late]):
        y = _TOP + i * _ROW_H
        rows.append(f'<text x="4" y="{y + 13}" class="label" data-step="{escape(s.step)}">'
                    f'{escape(f"{s.seq} {s.step} · {s.decider}"[:60])}</text>')
        title = (f"{s.step}: {s.decision} by {s.decider}, +{s.offset_ms:g} ms, "
                 f"{s.elapsed_ms:g} ms" + (" (after the call returned)" if s.late else ""))
        colour = COLOURS.get(s.decision, _OTHER)
        if not s.late:
            rows.append(_bar(y, _LABEL_W + s.offset_ms * scale, s.elapsed_ms * scale, colour,
                             title))
            continue
        x = _LABEL_W + _PLOT_W + 12
        rows.append(f'<text x="{x - 10}" y="{y + 13}" class="tick">//</text>')
        rows.append(f'<rect x="{x}" y="{y + 3}" width="8" height="{_ROW_H - 6}" '
                    f'fill="{colour}" data-late="{escape(s.step)}"><title>{escape(title)}'
                    "</title></rect>")
        rows.append(f'<text x="{x + 12}" y="{y + 13}" class="label">'
                    f"{escape(_late_at(s.offset_ms))}</text>")
    return _svg(rows, height, "timeline of the call's steps", _LATE_W if late else 0)


def run_timeline(calls: Sequence[NeighbourRow]) -> str:
    """The calls of a run on one time axis, to scale; the report's own call highlighted."""
    span = max([c.offset_ms + c.elapsed_ms for c in calls] + [1e-3])
    marks = ticks(span)
    scale = _PLOT_W / marks[-1]
    height = _TOP + _ROW_H * len(calls) + 8
    rows = _axis(scale, marks, height)
    near = sorted(c.call_id for c in calls)  # each id cut where it differs from the others
    for i, c in enumerate(calls):
        y = _TOP + i * _ROW_H
        css = "label current" if c.current else "label"
        rows.append(f'<text x="4" y="{y + 13}" class="{css}">'
                    f'{escape(f"{c.tool} {cut(c.call_id, near)}")}</text>')
        rows.append(_bar(y, _LABEL_W + c.offset_ms * scale, c.elapsed_ms * scale,
                         COLOURS.get(c.status, _OTHER),
                         f"{c.tool} {c.call_id}: {c.status}, {c.elapsed_ms:g} ms"))
    return _svg(rows, height, "timeline of the run's calls")
