"""The console's pages as HTML text: one layout, a page per view, small inline SVG charts.

Every value shown goes through ``_e``: the default redactor (a second pass over data the trail
already holds redacted) and ``html.escape``. The only script is the live view's, allowed by
its nonce; it builds rows with ``textContent``, never with markup from the server's events.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from html import escape
from typing import Any
from urllib.parse import quote

import orjson

from ..policy import PendingApproval, QueueAnswer
from ..redaction import default_redactor

__all__ = ["APPROVALS_JS", "LIVE_JS", "approvals_page", "calls_page", "esc", "layout",
           "pending_section", "principal_text", "report_page", "runs_page", "stats_page", "when"]

_REDACT = default_redactor().redact_text
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_STATUSES = ("ok", "rejected", "failed", "cancelled", "unknown")

_STYLE = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1b1b1b;
background:#fff}
header{background:#17324d;color:#fff;padding:8px 20px;display:flex;flex-wrap:wrap;gap:6px 18px;
align-items:center}
header b{font-size:16px;margin-right:8px}header a{color:#dce9f5;text-decoration:none}
header a.on{color:#fff;font-weight:700;border-bottom:2px solid #fff}
header .ro{margin-left:auto;font-size:12px;color:#ffd27f}
main{padding:12px 20px;max-width:100%;overflow-x:hidden}
h1{font-size:19px;margin:6px 0 8px}h2{font-size:16px;margin:22px 0 6px}
.scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:6px 0 12px;width:100%}
td,th{border:1px solid #d8d8d8;padding:3px 7px;vertical-align:top;text-align:left}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.sum{max-width:34em;overflow-wrap:anywhere}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;
overflow-wrap:anywhere}
.s-ok{color:#1b5e20}.s-rejected{color:#b71c1c;font-weight:600}.s-failed{color:#e65100}
.s-unknown{color:#6a1b9a;font-weight:600}.s-cancelled{color:#8d6e00}.s-running{color:#0d47a1}
tr.new td{animation:flash 2s}@keyframes flash{from{background:#fff59d}to{background:none}}
form.filters{display:flex;flex-wrap:wrap;gap:6px 12px;align-items:end;margin:6px 0}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:#444}
.card{border:1px solid #cfd8dc;border-radius:6px;padding:10px 12px;margin:10px 0;
background:#fbfcfd}
.card dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:4px 0}
.card dt{font-weight:600}.card dd{margin:0;overflow-wrap:anywhere}
.card form{display:flex;flex-wrap:wrap;gap:8px;align-items:end;margin-top:8px}
.card input[type=text]{width:min(28em,100%)}
button{padding:4px 12px;border-radius:4px;border:1px solid #888;cursor:pointer}
button.approve{background:#2e7d32;color:#fff;border-color:#1b5e20}
button.deny{background:#c62828;color:#fff;border-color:#8e0000}
.muted{color:#666}.charts{display:flex;flex-wrap:wrap;gap:14px}
.chart{border:1px solid #e0e0e0;padding:6px 8px;border-radius:4px;max-width:100%}
.chart h3{font-size:13px;margin:0 0 4px}
svg text{font:11px ui-monospace,monospace;fill:#222}
.report{max-width:100%;overflow-x:auto}
.report table{width:auto}.report .timeline{max-width:100%;height:auto}
"""

_LIVE_JS = """
const box=document.getElementById('live');const q=box.dataset.query;
const tb=box.querySelector('tbody');
const es=new EventSource('/events'+q);
function td(t,c){const d=document.createElement('td');d.textContent=t;if(c)d.className=c;return d;}
es.addEventListener('call',e=>{const c=JSON.parse(e.data);
 const old=document.getElementById('c-'+c.call_id);if(old)old.remove();
 const tr=document.createElement('tr');tr.id='c-'+c.call_id;tr.className='new';
 tr.dataset.status=c.status;tr.append(td(c.at));tr.append(td(c.status,'s-'+c.status));
 const tool=td('');const a=document.createElement('a');a.href='/calls/'+c.call_id;
 a.textContent=c.tool;tool.append(a);tr.append(tool);tr.append(td(c.principal));
 tr.append(td(c.elapsed,'num'));tr.append(td(c.summary,'sum'));
 const r=td('');const ra=document.createElement('a');ra.href='/runs/'+c.run_id;
 ra.textContent=(c.run_id||'').slice(0,13);r.append(ra);tr.append(r);
 tb.prepend(tr);const n=document.getElementById('count');if(n)n.textContent=tb.rows.length;});
"""

_APPROVALS_JS = """
const box=document.getElementById('pending');let seen=box.dataset.ids;
const es=new EventSource('/events?approvals=1');
es.addEventListener('approvals',async e=>{const ids=e.data;
 if(ids===seen)return;seen=ids;const r=await fetch('/approvals/pending');
 if(r.ok){document.getElementById('pending').innerHTML=await r.text();}});
"""


def esc(value: Any) -> str:
    """A value as HTML text: redacted once more, then escaped."""
    return escape(_REDACT("" if value is None else str(value)), quote=True)


def when(v: Any) -> str:
    """A time (datetime or microseconds since the epoch) as ``YYYY-MM-DD HH:MM:SS`` (UTC)."""
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, int):
        return dt.datetime.fromtimestamp(v / 1e6, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return "" if v is None else str(v)


def principal_text(p: dict[str, Any] | None) -> str:
    """Whom a call acts for, as one short line."""
    p = p or {}
    return ", ".join(f"{k} {p[k]}" for k in ("user", "agent", "tenant") if p.get(k))


def layout(title: str, body: str, *, active: str, nonce: str, script: str = "",
           read_only: bool = False) -> str:
    """A whole page: the navigation, the body, and the page's script (with its nonce)."""
    nav = "".join(
        f'<a href="/{p}"{" class=on" if p == active else ""}>{label}</a>'
        for p, label in (("calls", "Live calls"), ("runs", "Runs"), ("approvals", "Approvals"),
                         ("stats", "Stats")))
    ro = '<span class="ro">read-only</span>' if read_only else ""
    js = f'<script nonce="{nonce}">{script}</script>' if script else ""
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            '<meta name=viewport content="width=device-width, initial-scale=1">'
            '<meta name=referrer content=same-origin>'
            f"<title>{esc(title)} · tooltrace</title><style>{_STYLE}</style></head><body>"
            f"<header><b>tooltrace</b>{nav}{ro}</header><main>{body}</main>{js}</body></html>")


def _status(s: Any) -> str:
    return f'<span class="s-{esc(s)}">{esc(s)}</span>'


def _call_row(r: dict[str, Any]) -> str:
    cid, run = str(r["call_id"]), str(r.get("run_id") or "")
    who = principal_text({"user": r.get("user"), "agent": r.get("agent")})
    elapsed = r.get("elapsed_ms")
    return (f'<tr id="c-{esc(cid)}" data-status="{esc(r.get("status"))}">'
            f"<td>{esc(when(r.get('started_at')))}</td><td>{_status(r.get('status'))}</td>"
            f'<td><a href="/calls/{esc(cid)}">{esc(r.get("tool"))}</a></td><td>{esc(who)}</td>'
            f'<td class=num>{"" if elapsed is None else f"{float(elapsed):.1f} ms"}</td>'
            f'<td class=sum>{esc(r.get("summary"))}</td>'
            f'<td><a href="/runs/{esc(run)}">{esc(run[:13])}</a></td></tr>')


def calls_page(rows: Sequence[dict[str, Any]], f: Any, query: str) -> str:
    """The live calls page body: filters, and a table the live view prepends to."""
    def sel(name: str, options: Sequence[str], current: str | None) -> str:
        opts = "".join(f'<option value="{esc(o)}"{" selected" if o == current else ""}>'
                       f"{esc(o) or 'any'}</option>" for o in ("", *options))
        return f'<label>{name}<select name="{name}">{opts}</select></label>'

    def text(name: str, current: str | None) -> str:
        return (f'<label>{name}<input type=text name="{name}" value="{esc(current or "")}" '
                f'size=14></label>')

    filters = ('<form class=filters method=get action="/calls">'
               f'{sel("status", _STATUSES, f.status)}'
               f'{text("tool", f.tool)}{text("run", f.run_id)}{text("user", f.user)}'
               "<button>filter</button></form>")
    head = "".join(f"<th>{h}</th>" for h in ("started (UTC)", "status", "tool", "principal",
                                             "elapsed", "summary", "run"))
    body = "".join(_call_row(r) for r in rows)
    return (f"<h1>Live calls <span class=muted>(<span id=count>{len(rows)}</span> shown; new "
            f"ones appear as they finish)</span></h1>{filters}"
            f'<div class=scroll id=live data-query="{esc(query)}"><table><thead><tr>{head}</tr>'
            f"</thead><tbody>{body}</tbody></table></div>")


def runs_page(rows: Sequence[dict[str, Any]]) -> str:
    """The runs list: each run with its calls' outcomes."""
    head = "".join(f"<th>{h}</th>" for h in ("run", "calls", "ok", "rejected", "failed",
                                             "cancelled", "unknown", "first", "last", "tools"))
    out = []
    for r in rows:
        run = str(r["run_id"])
        nums = "".join(f"<td class=num>{int(r[k])}</td>" for k in
                       ("calls", "ok", "rejected", "failed", "cancelled", "unknown"))
        out.append(f'<tr><td><a class=mono href="/runs/{esc(run)}">{esc(run)}</a></td>{nums}'
                   f"<td>{esc(when(r['first_at']))}</td><td>{esc(when(r['last_at']))}</td>"
                   f"<td>{esc(r['tools'])}</td></tr>")
    return (f"<h1>Runs</h1><div class=scroll><table><thead><tr>{head}</tr></thead><tbody>"
            f"{''.join(out) or '<tr><td colspan=10>no calls recorded yet</td></tr>'}"
            "</tbody></table></div>")


def _link_ids(html_text: str) -> str:
    """Every id in the report's text (not in its tags) becomes a link to its page."""
    def text(m: re.Match[str]) -> str:
        return _UUID.sub(lambda u: f'<a href="/id/{u[0]}">{u[0]}</a>', m[0])

    return re.sub(r">[^<]+<", text, html_text)


def report_page(report_html: str, extra: str = "") -> str:
    """A call or run report (``tooltrace.report.render_html``) inside the console, its ids
    linked."""
    style = re.search(r"<style>(.*?)</style>", report_html, re.S)
    body = re.search(r"<body>(.*)</body>", report_html, re.S)
    inner = body[1] if body else ""
    scoped = (style[1] if style else "").replace("body{", ".report{")
    return f"<style>{scoped}</style>{extra}<div class=report>{_link_ids(inner)}</div>"


def pending_section(pending: Sequence[PendingApproval], csrf: str, read_only: bool) -> str:
    """The waiting requests, each with its answer form (none when read-only)."""
    if not pending:
        return "<p class=muted id=none-pending>no request is waiting</p>"
    out = []
    for p in pending:
        args = orjson.dumps(p.arguments, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
        left = max(0, (p.expires_at_us - dt.datetime.now(dt.UTC).timestamp() * 1e6) / 1e6)
        form = "" if read_only else (
            f'<form method=post action="/approvals/{esc(p.approval_id)}">'
            f'<input type=hidden name=csrf value="{escape(csrf, quote=True)}">'
            '<label>reason <input type=text name=reason maxlength=300></label>'
            '<label>TTL <input type=text name=ttl size=6 placeholder="e.g. 10m"></label>'
            '<button class=approve name=decision value=approve>Approve</button>'
            '<button class=deny name=decision value=deny>Deny</button></form>')
        out.append(
            f'<div class=card id="{esc(p.approval_id)}" data-approval-id="{esc(p.approval_id)}">'
            f"<b>{esc(p.tool)}</b> <span class=muted>asked by rule {esc(p.rule)}</span>"
            f"<dl><dt>why</dt><dd>{esc(p.reason)}</dd>"
            f"<dt>for</dt><dd>{esc(principal_text(p.principal)) or '-'}</dd>"
            f'<dt>call</dt><dd><a class=mono href="/calls/{esc(p.call_id)}">{esc(p.call_id)}</a>'
            f'</dd><dt>run</dt><dd><a class=mono href="/runs/{esc(p.run_id)}">{esc(p.run_id)}</a>'
            f"</dd><dt>arguments</dt><dd><pre class=mono>{esc(args.decode())}</pre></dd>"
            f"<dt>sha256</dt><dd class=mono>{esc(p.arguments_sha256)}</dd>"
            f"<dt>expires in</dt><dd>{left:.0f} s (then denied)</dd></dl>{form}</div>")
    return "".join(out)


def approvals_page(pending: Sequence[PendingApproval],
                   answered: Sequence[tuple[PendingApproval, QueueAnswer]], csrf: str,
                   read_only: bool) -> str:
    """Pending requests (with answer forms) and the answered ones with who and when."""
    rows = "".join(
        f'<tr data-approval-id="{esc(p.approval_id)}"><td>{esc(when(a.answered_at_us))}</td>'
        f'<td class="s-{"ok" if a.approved else "rejected"}">'
        f'{"approved" if a.approved else "denied"}</td><td>{esc(a.who)}</td>'
        f"<td>{esc(a.via)}</td><td>{esc(p.tool)}</td><td>{esc(a.reason)}</td>"
        f'<td>{"" if a.ttl_s is None else f"{a.ttl_s:g} s"}</td>'
        f'<td><a class=mono href="/calls/{esc(p.call_id)}">{esc(p.call_id[:13])}</a></td></tr>'
        for p, a in answered)
    head = "".join(f"<th>{h}</th>" for h in ("answered (UTC)", "answer", "who", "via", "tool",
                                             "reason", "ttl", "call"))
    ids = ",".join(p.approval_id for p in pending)
    return (f'<h1>Approvals</h1><h2>Waiting</h2><div id=pending data-ids="{esc(ids)}">'
            f"{pending_section(pending, csrf, read_only)}</div><h2>Answered</h2>"
            f"<div class=scroll><table id=answered><thead><tr>{head}</tr></thead><tbody>"
            f"{rows or '<tr><td colspan=8>none yet</td></tr>'}</tbody></table></div>")


def _bars(title: str, values: Sequence[tuple[str, float]], fmt: str, vmax: float | None = None
          ) -> str:
    width, row = 330, 18
    top = vmax if vmax else max([v for _, v in values] + [1e-9])
    parts = []
    for i, (label, v) in enumerate(values):
        w = 0 if top <= 0 else max(1.0, 130 * v / top) if v > 0 else 0
        y = i * row
        parts.append(f'<text x="0" y="{y + 13}">{esc(label[:16])}</text>'
                     f'<rect x="120" y="{y + 3}" width="{w:.1f}" height="12" fill="#3f6fa5">'
                     f"<title>{esc(label)}: {fmt.format(v)}</title></rect>"
                     f'<text x="{124 + w:.1f}" y="{y + 13}">{fmt.format(v)}</text>')
    h = max(row, row * len(values))
    return (f'<div class=chart><h3>{esc(title)}</h3><svg width="{width}" height="{h}" '
            f'viewBox="0 0 {width} {h}" role=img aria-label="{esc(title)}">{"".join(parts)}'
            "</svg></div>")


def _spark(points: Sequence[tuple[int, int]]) -> str:
    """Calls per minute as small bars, one a minute, over the last hour of activity."""
    if not points:
        return ""
    w, h = 120, 24
    last = points[-1][0]
    top = max(n for _, n in points)
    bars = "".join(
        f'<rect x="{(59 - (last - t) // 60) * 2}" y="{h - max(1.0, n / top * h):.1f}" width="2"'
        f' height="{max(1.0, n / top * h):.1f}" fill="#3f6fa5"><title>{n}</title></rect>'
        for t, n in points if last - t < 3600)
    return (f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role=img aria-label="calls per'
            f' minute">{bars}</svg>')


def stats_page(rows: Sequence[dict[str, Any]], rate: dict[str, list[tuple[int, int]]]) -> str:
    """Per tool: calls, rates, reject and offload ratios, p50/p95, with small charts."""
    if not rows:
        return "<h1>Stats</h1><p class=muted>no calls recorded yet</p>"
    tools = [str(r["tool"]) for r in rows]

    def col(k: str) -> list[tuple[str, float]]:
        return [(t, float(r[k] or 0)) for t, r in zip(tools, rows, strict=True)]

    ratios = [(t, float(r["param_reject_ratio"] or 0) + float(r["policy_reject_ratio"] or 0))
              for t, r in zip(tools, rows, strict=True)]
    charts = (_bars("calls", col("calls"), "{:.0f}") + _bars("reject ratio", ratios, "{:.0%}", 1)
              + _bars("offload ratio", col("offload_ratio"), "{:.0%}", 1)
              + _bars("p50 (ms)", col("p50_ms"), "{:.1f}") + _bars("p95 (ms)", col("p95_ms"),
                                                                   "{:.1f}"))
    keys = ("calls", "ok", "unknown", "param_reject_ratio", "policy_reject_ratio",
            "offload_ratio", "p50_ms", "p95_ms")
    head = "".join(f"<th>{h}</th>" for h in ("tool", *keys, "calls/min (last hour)"))
    body = "".join(
        f'<tr><td><a href="/calls?tool={quote(t)}">{esc(t)}</a></td>'
        + "".join(f"<td class=num>{esc(r[k])}</td>" for k in keys)
        + f"<td>{_spark(rate.get(t, []))}</td></tr>" for t, r in zip(tools, rows, strict=True))
    return (f"<h1>Stats per tool</h1><div class=charts>{charts}</div><div class=scroll><table>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


LIVE_JS = _LIVE_JS
APPROVALS_JS = _APPROVALS_JS
