"""A ``Report`` as one self-contained HTML page: inline style, inline SVG, no script.

The page loads nothing: no script, stylesheet, font or image from anywhere, and its Content
Security Policy (``default-src 'none'``) tells the browser to refuse any load that slipped in.
The only address in it is the trace link, an ``<a href>`` a person may follow. Every text is
escaped with ``html.escape``.
"""

from __future__ import annotations

from collections.abc import Collection
from html import escape

from ._model import CallReport, NeighbourRow, Report, needs_no_attention
from ._svg import COLOURS, call_timeline, run_timeline

__all__ = ["render_html"]

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'"

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1b1b1b;
background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;max-width:100%}
td,th{border:1px solid #d0d0d0;padding:3px 7px;vertical-align:top;text-align:left;
overflow-wrap:anywhere}th{background:#f3f3f3}
table.steps{table-layout:fixed;width:100%}table.steps td:last-child{font:12px ui-monospace,
monospace}table.steps col.n{width:4.5em}table.steps col.s{width:9em}
td.id,td.time,.nowrap,h2 code,h3 code{white-space:nowrap;overflow-wrap:normal;word-break:normal}
.scroll{overflow-x:auto;max-width:100%}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:4px 0 10px;font-size:12.5px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-1px}
td.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;word-break:break-all}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0}
dt{font-weight:600}dd{margin:0;word-break:break-word}
.timeline{display:block;margin:8px 0;background:#fafafa;border:1px solid #e0e0e0;
max-width:100%;height:auto}
.timeline .label{font:11px ui-monospace,monospace;fill:#222}
.timeline .current{font-weight:700;fill:#0d47a1}
.timeline .tick{font:10px sans-serif;fill:#555;text-anchor:middle}
.timeline .grid{stroke:#ddd;stroke-width:1}
tr.current td{background:#e3f2fd}.muted{color:#666}tr.late td{color:#666;font-style:italic}
"""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _table(head: list[str], rows: list[list[str]], *, num: Collection[int] = (),
           css: list[str] | None = None, nowrap: Collection[int] = (),
           links: dict[int, list[str | None]] | None = None) -> str:
    """A table; cells are escaped here, ``num`` are the right-aligned columns, ``nowrap``
    those kept on one line (ids, times), ``links[j][i]`` an in-page anchor for cell (i, j)."""
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for i, r in enumerate(rows):
        cls = f' class="{_e(css[i])}"' if css and css[i] else ""
        out.append(f"<tr{cls}>")
        for j, c in enumerate(r):
            classes = " ".join(n for n, on in (("num", j in num), ("nowrap", j in nowrap)) if on)
            attr = f' class="{classes}"' if classes else ""
            anchor = (links or {}).get(j, [None] * len(rows))[i]
            text = f'<a href="#{_e(anchor)}">{_e(c)}</a>' if anchor else _e(c)
            out.append(f"<td{attr}>{text}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _legend(keys: Collection[str]) -> str:
    """What each colour of a timeline means (only those drawn)."""
    items = [f'<span><i style="background:{COLOURS[k]}"></i>{_e(k)}</span>'
             for k in COLOURS if k in keys]
    return f'<div class="legend">{"".join(items)}</div>' if items else ""


def _ms(v: float) -> str:
    return f"{v:.3f}"


def _verdict(c: CallReport) -> str:
    """What the call returned, and its final outcome when that differs."""
    if c.outcome and c.outcome != c.status:
        return f"returned {c.status}, outcome {c.outcome}"
    return c.status


def _section(c: CallReport, level: int) -> str:
    h = f"h{level}"
    out = [f'<section class="call" id="call-{_e(c.call_id)}">',
           f'<{h}>{_e(c.tool)} <code>{_e(c.call_id)}</code>: {_e(_verdict(c))}</{h}>', "<dl>"]
    facts = [("run", c.run_id), ("started", c.started_at), ("elapsed", f"{c.elapsed_ms:.3f} ms"),
             ("execution started", "yes" if c.execution_started else "no"), *c.facts]
    for k, v in facts:
        out.append(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>")
    if c.trace_id:
        link = (f'<a href="{_e(c.trace_link)}">{_e(c.trace_id)}</a>' if c.trace_link
                else f"<code>{_e(c.trace_id)}</code>")
        out.append(f"<dt>trace</dt><dd>{link}</dd>")
    out.append("</dl>")
    out.append(f"<h{level + 1}>Timeline</h{level + 1}>")
    out.append(call_timeline(c.steps))
    out.append(_legend({s.decision for s in c.steps}))
    late = [s for s in c.steps if s.late]
    if late:
        out.append(f'<p class="muted">{len(late)} step(s) came after the call returned (a late '
                   "resolution, a job's end): drawn after the break at the right edge with "
                   "their time, and in italics below.</p>")
    out.append(f"<h{level + 1}>Steps</h{level + 1}>")
    out.append(_table(
        ["seq", "step", "+ms", "elapsed ms", "decided by", "decision", "detail"],
        [[str(s.seq), s.step, _ms(s.offset_ms), _ms(s.elapsed_ms), s.decider, s.decision,
          s.detail] for s in c.steps],
        num={0, 2, 3}, css=["late" if s.late else "" for s in c.steps],
    ).replace("<table>", '<table class="steps"><colgroup><col class="n"><col class="s">'
              '<col class="s"><col class="s"><col class="s"><col class="s"><col></colgroup>',
              1))
    if c.hooks:
        out.append(f"<h{level + 1}>Hooks and what they changed</h{level + 1}>")
        rows: list[list[str]] = []
        for hk in c.hooks:
            changes = hk.changes or (("", "", ""),)
            rows.extend([hk.phase, hk.hook, hk.decision, hk.reason, k, b, a]
                        for k, b, a in changes)
        out.append(_table(["phase", "hook", "decision", "reason", "argument", "before",
                           "after"], rows))
    if c.artifact:
        a = c.artifact
        out.append(f"<h{level + 1}>Artifact</h{level + 1}>")
        out.append(_table(["path", "chars", "bytes", "sha256"],
                          [[a.path, a.chars, a.bytes, a.sha256]], num={1, 2}))
    out.append("</section>")
    return "\n".join(out)


def _run_table(rows: tuple[NeighbourRow, ...], detailed: Collection[str] = ()) -> str:
    return '<div class="scroll">' + _table(
        ["call", "started", "+ms", "tool", "status", "outcome", "elapsed ms", "summary"],
        [[r.call_id, r.started_at, _ms(r.offset_ms), r.tool, r.status, r.outcome,
          _ms(r.elapsed_ms), r.summary] for r in rows],
        num={2, 6}, nowrap={0, 1}, css=["current" if r.current else "" for r in rows],
        links={0: [f"call-{r.call_id}" if r.call_id in detailed else None for r in rows]},
    ) + "</div>"


def _counts(rows: tuple[NeighbourRow, ...]) -> str:
    """Calls by the status they returned and by their final outcome."""
    statuses = ("ok", "rejected", "failed", "cancelled", "unknown")
    returned = {k: sum(r.status == k for r in rows) for k in statuses}
    final = {k: sum((r.outcome or r.status) == k for r in rows) for k in statuses}
    return _table(["", *statuses, "calls"],
                  [["returned", *(str(returned[k]) for k in statuses), str(len(rows))],
                   ["final outcome", *(str(final[k]) for k in statuses), str(len(rows))]],
                  num=set(range(1, len(statuses) + 2)))


def _attention(rows: tuple[NeighbourRow, ...], detailed: Collection[str]) -> str:
    """The calls that need attention, each linked to its section."""
    urgent = [r for r in rows if not needs_no_attention(r.status, r.outcome or r.status)]
    if not urgent:
        return '<p class="muted">Every call returned ok.</p>'
    return _run_table(tuple(urgent), detailed)


def render_html(report: Report) -> str:
    """The report as one HTML document (UTF-8 text)."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">',
        '<meta name="referrer" content="no-referrer">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>tooltrace report: {_e(report.title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>tooltrace post-mortem: {_e(report.title)}</h1>",
        f'<p class="muted">generated {_e(report.generated_at)} from the audit trail; '
        "arguments and results are redacted.</p>",
    ]
    out.extend(f'<p class="muted">{_e(n)}</p>' for n in report.notes)
    if report.kind == "call":
        out.append(_section(report.calls[0], 2))
        if report.run_calls:
            out.append("<h2>Other calls of the run around it</h2>")
            out.append(run_timeline(report.run_calls))
            out.append(_run_table(report.run_calls))
    else:
        detailed = {c.call_id for c in report.calls}
        out.append("<h2>Calls by status</h2>")
        out.append(_counts(report.run_calls))
        out.append("<h2>What needs attention: failed, rejected, cancelled, unknown</h2>")
        out.append(_attention(report.run_calls, detailed))
        out.append("<h2>Timeline of the run</h2>")
        out.append(run_timeline(report.run_calls))
        out.append(_legend({r.status for r in report.run_calls}))
        out.append("<h2>Calls of the run</h2>")
        out.append(_run_table(report.run_calls, detailed))
        out.append("<h2>Each call</h2>")
        out.extend(_section(c, 3) for c in report.calls)
    out.append("</body></html>")
    return "\n".join(out) + "\n"
