"""A ``Report`` as Markdown, to paste into a post-mortem document.

The same content as the HTML page; the timelines are text bars in a fenced block, to scale
(one character is a fixed share of the time axis). Cell text is escaped: HTML special
characters as entities (Markdown passes HTML through), the punctuation that could start
emphasis, code, a link or a table cell with a backslash, line breaks folded. Code spans and
fenced blocks are literal: they only lose the backticks and tildes that could close them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape

from ..audit import cut
from ._model import CallReport, NeighbourRow, Report, StepRow
from ._svg import ticks

__all__ = ["render_markdown"]

_MD = re.compile(r"([\\`*_\[\]|~])")
_BAR_W = 50


def _e(text: object) -> str:
    """One table cell or inline text: escaped, on one line."""
    flat = " ".join(str(text).split())
    return _MD.sub(r"\\\1", escape(flat, quote=False))


def _code(text: str) -> str:
    """Text for a code span or fenced block (shown literally): no backtick or tilde that
    could close it."""
    return text.replace("`", "'").replace("~", "-")


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    out = ["| " + " | ".join(_e(h) for h in head) + " |", "|" + "---|" * len(head)]
    out.extend("| " + " | ".join(_e(c) for c in r) + " |" for r in rows)
    return [*out, ""]


def _bars(items: Sequence[tuple[str, float, float]]) -> list[str]:
    """(label, start ms, length ms) as text bars on one scale."""
    span = ticks(max([s + w for _, s, w in items] + [1e-3]))[-1]
    per = span / _BAR_W
    width = max([len(lbl) for lbl, _, _ in items] + [1])
    out = ["~~~text", f"{'':<{width}} 0{'':<{_BAR_W - 1}}{span:g} ms (one mark = {per:g} ms)"]
    for label, start, length in items:
        lead = min(_BAR_W - 1, int(start / per))
        bar = max(1, round(length / per))
        out.append(f"{_code(label):<{width}} {' ' * lead}{'#' * min(bar, _BAR_W - lead)}")
    return [*out, "~~~", ""]


def _steps_bars(steps: Sequence[StepRow]) -> list[str]:
    return _bars([(f"{s.seq} {s.step} ({s.decider})"[:48], s.offset_ms, s.elapsed_ms)
                  for s in steps if not s.late])


def _section(c: CallReport, level: int) -> list[str]:
    h = "#" * level
    verdict = (f"returned {c.status}, outcome {c.outcome}" if c.outcome and c.outcome != c.status
               else c.status)
    out = [f"{h} {_e(c.tool)} `{_code(c.call_id)}`: {_e(verdict)}", ""]
    facts = [("run", c.run_id), ("started", c.started_at), ("elapsed", f"{c.elapsed_ms:.3f} ms"),
             ("execution started", "yes" if c.execution_started else "no"), *c.facts]
    out.extend(f"- **{_e(k)}**: {_e(v)}" for k, v in facts)
    if c.trace_id:
        out.append(f"- **trace**: [{_e(c.trace_id)}](<{escape(c.trace_link)}>)" if c.trace_link
                   else f"- **trace**: `{_code(c.trace_id)}`")
    out += ["", f"{h}# Timeline", "", *_steps_bars(c.steps), f"{h}# Steps", ""]
    out += _table(["seq", "step", "+ms", "elapsed ms", "decided by", "decision", "detail"],
                  [[s.seq, s.step + (" (late)" if s.late else ""), f"{s.offset_ms:.3f}",
                    f"{s.elapsed_ms:.3f}", s.decider, s.decision, s.detail] for s in c.steps])
    if c.hooks:
        rows = [[hk.phase, hk.hook, hk.decision, hk.reason, k, b, a]
                for hk in c.hooks for k, b, a in (hk.changes or (("", "", ""),))]
        out += [f"{h}# Hooks and what they changed", ""]
        out += _table(["phase", "hook", "decision", "reason", "argument", "before", "after"],
                      rows)
    if c.artifact:
        a = c.artifact
        out += [f"{h}# Artifact", ""]
        out += _table(["path", "chars", "bytes", "sha256"], [[a.path, a.chars, a.bytes, a.sha256]])
    return out


def _run(rows: Sequence[NeighbourRow]) -> list[str]:
    near = sorted(r.call_id for r in rows)  # each id cut where it differs from the others
    out = _bars([(f"{'> ' if r.current else ''}{r.tool} {cut(r.call_id, near)}", r.offset_ms,
                  r.elapsed_ms) for r in rows])
    return out + _table(
        ["call", "started", "+ms", "tool", "status", "outcome", "elapsed ms", "summary"],
        [[("**this call** " if r.current else "") + r.call_id, r.started_at,
          f"{r.offset_ms:.3f}", r.tool, r.status, r.outcome, f"{r.elapsed_ms:.3f}", r.summary]
         for r in rows])


def render_markdown(report: Report) -> str:
    """The report as Markdown text."""
    out = [f"# tooltrace post-mortem: {_e(report.title)}", "",
           f"Generated {_e(report.generated_at)} from the audit trail; arguments and results "
           "are redacted.", ""]
    out.extend(f"*{_e(n)}*\n" for n in report.notes)
    if report.kind == "call":
        out += _section(report.calls[0], 2)
        if report.run_calls:
            out += ["## Other calls of the run around it", "", *_run(report.run_calls)]
    else:
        out += ["## Calls of the run", "", *_run(report.run_calls), "## Each call", ""]
        for c in report.calls:
            out += _section(c, 3)
    return "\n".join(out).rstrip("\n") + "\n"
