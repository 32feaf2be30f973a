"""``tooltrace autopsy <callId>``: replay one call step by step.

The report is written with ``click.echo`` (labels in bold on a terminal), not rich: the
command is run at the scene of an incident, often in a loop, and rich's import and layout
cost more than the lookup itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ._common import (
    EXIT_FAIL,
    EXIT_USAGE,
    OutputGuard,
    cell,
    fail,
    iso,
    open_store,
    print_json,
    table,
    trail_options,
)
from ._table import note, styled, terminal_width


@click.command()
@click.argument("call_id")
@trail_options
@click.option("--diff", "show_diff", is_flag=True,
              help="Also show the change the call made to each file it wrote (unified diff "
                   "from its snapshots, redacted).")
def autopsy(call_id: str, home: Path | None, as_json: bool, wide: bool,
            archive: str | None, show_diff: bool) -> None:
    """Replay one call step by step (CALL_ID may be a unique prefix).

    Exit 1 when no call has this id, 2 when the prefix matches several calls.
    """
    from ..audit import (
        AmbiguousCallId,
        CallNotFound,
        DuplicateCallId,
        ambiguous,
        call_family,
        explain,
    )

    guard = OutputGuard(home)
    with open_store(home, guard, archive) as store:
        try:
            detail = store.call(call_id)
        except AmbiguousCallId as exc:
            fail(ambiguous(call_id, exc.matches, store=store), EXIT_USAGE, guard)
        except CallNotFound:
            fail(f"no call with id {call_id[:40]!r} in this audit trail", EXIT_FAIL)
        except DuplicateCallId as exc:
            where = "; ".join(
                f"{r['tool']} at {r['started_at']} ({r['segment']} line {r['line']})"
                for r in exc.records[:4]
            )
            fail(f"call id {exc.call_id} was recorded for {len(exc.records)} different calls "
                 f"({where}); they are not merged into one", EXIT_FAIL)
        a = explain(detail, call_family(store, detail))
        for w in dict.fromkeys(store.warnings):
            click.echo(f"warning: {guard(w)}", err=True)
    diffs = _diffs(a.call_id, home) if show_diff else None
    if as_json:
        out = a.to_dict()
        if diffs is not None:
            out["diff"] = diffs
        print_json(out, guard)
        return
    _render(a, guard, wide)
    if diffs is not None:
        _render_diffs(diffs, guard)


def _diffs(call_id: str, home: Path | None) -> list[dict[str, Any]]:
    """Each written file's change, redacted: path, diff text, and a note when not shown."""
    from .._settings import resolve_home
    from ..redaction import default_redactor
    from ..snapshots import SnapshotNotFound, SnapshotStore, file_diff

    root = resolve_home(home)
    store = SnapshotStore(root, 0)
    try:
        rec = store.load(call_id)
    except SnapshotNotFound:
        return []
    red = default_redactor()
    out = []
    for f in rec.files:
        try:
            text, note = file_diff(store, f)
        except (OSError, ValueError) as exc:
            text, note = "", f"the snapshot cannot be read ({type(exc).__name__})"
        out.append({"path": red.redact_text(f.path), "created": f.created,
                    "diff": red.redact_text(text), "note": note})
    return out


def _render_diffs(diffs: list[dict[str, Any]], guard: OutputGuard) -> None:
    if not diffs:
        click.echo("diff: the call kept no snapshot (it wrote no declared file)")
        return
    for d in diffs:
        click.echo(guard(f"diff of {d['path']}" + (" (created by the call)" if d["created"]
                                                   else "") + (f": {d['note']}" if d["note"]
                                                               else "")))
        if d["diff"]:
            click.echo(guard(d["diff"]), nl=False)



def _line(label: str, value: Any, guard: OutputGuard) -> None:
    """One labelled fact, wrapped to the terminal under its value's column (ids and other
    long words are never cut); a fact with no value is left out rather than printed empty."""
    import textwrap

    text = cell(value, 400)
    if not text.strip():
        return
    head = f"{label:<20}"
    lines = textwrap.wrap(guard(text), max(terminal_width(), 40) - 21,
                          break_long_words=False, break_on_hyphens=False) or [""]
    click.echo(f"{click.style(head, bold=True) if styled() else head} {lines[0]}")
    for more in lines[1:]:
        click.echo(" " * 21 + more)


def _detail(detail: Any) -> str:
    """A step's detail for people: ``key=value`` pairs with spaces between them, so the table
    wraps it to the terminal instead of leaving it out."""
    if not isinstance(detail, dict):
        return cell(detail, 120)
    import orjson

    def value(v: Any) -> str:
        if isinstance(v, str):
            return v
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return ", ".join(v)
        return orjson.dumps(v).decode()

    return " ".join(f"{k}={value(v)}" for k, v in detail.items())


def _who(a: Any, rec: dict[str, Any], guard: OutputGuard) -> None:
    """The tool, the run, and whom the call acted for with the agent that made it."""
    _line("tool", f"{rec.get('tool') or (a.intent or {}).get('tool')}"
          f"  (source {rec.get('source') or '?'}, mode {rec.get('mode') or '?'})", guard)
    _line("run", rec.get("run_id") or (a.intent or {}).get("run_id"), guard)
    fields = ("user", "agent", "tenant", "roles")  # roles as recorded: a JSON list
    _line("principal", ", ".join(f"{k} {rec[f'principal_{k}']}" for k in fields
                                 if rec.get(f"principal_{k}")), guard)


def _status_lines(a: Any, guard: OutputGuard) -> None:
    """What the call returned, and its final outcome, in the words every reader uses."""
    res = a.result
    status = res.get("status")
    if status and res.get("reject_stage"):
        status = f"{status} at stage {res['reject_stage']}"
    _line("status", status, guard)
    outcome = res.get("outcome")
    if a.resolution:
        outcome = f"{outcome} (resolved later, at {iso(a.resolution['at'])})"
    elif outcome == "unknown":
        outcome = "unknown (not resolved: no later step says how the tool ended)"
    _line("outcome", outcome, guard)


def _checks(a: Any, guard: OutputGuard) -> None:
    """The schema checks and the path arguments as resolved (or refused)."""
    for s in a.schema:
        _line(f"schema ({s['step']})", f"{s['decision']}"
              + (f": {s['error']}" if s.get("error") else ""), guard)
    for param, where in a.paths.items():
        where = where or "."  # the workspace root itself
        _line("path", f"{param} -> {where} (within the workspace)", guard)
    for param, why in a.refused_paths.items():
        _line("path", f"{param} refused: {why}", guard)


def _render(a: Any, guard: OutputGuard, wide: bool) -> None:
    rec = a.record or {}
    # Whole ids: unique whatever the trail holds, and found without reading every id (autopsy
    # answers from the lookup files and the segments, without DuckDB).
    title = f" call {a.call_id} "
    click.echo("─" * 3 + title + "─" * max(3, min(100, terminal_width()) - 3 - len(title)))
    _line("call id", a.call_id, guard)
    _who(a, rec, guard)
    _ancestors(a, guard)
    _line("started", iso(rec.get("started_at")), guard)
    res = a.result
    _status_lines(a, guard)
    _line("summary", res.get("summary"), guard)
    _line("elapsed", f"{res.get('elapsed_ms') or 0:.3f} ms", guard)
    _line("arguments", a.arguments, guard)
    if a.final_arguments != a.arguments:
        _line("arguments (final)", a.final_arguments, guard)
    _checks(a, guard)
    for p in a.policy:
        if p.get("rule"):
            txt = f"{p['decision']} by rule {p['rule']}"
        else:
            txt = f"{p['decision']} (no rule objected; ran: {', '.join(p.get('rules') or [])})"
        _line("policy", txt + (f": {p['reason']}" if p.get("reason") else ""), guard)
    for p in a.approvals:
        _line("approval", f"{p['decision']} by {p.get('approver') or p['decider']}"
              + (f" (rule {p['rule']})" if p.get("rule") else "")
              + (f": {p['reason']}" if p.get("reason") else "")
              + (f" [arguments sha256 {p['args_sha256'][:12]}]" if p.get("args_sha256") else ""),
              guard)
    for h in a.hooks:
        txt = f"{h['phase']} {h['hook']}: {h['decision']}"
        if h.get("reason"):
            txt += f" ({h['reason']})"
        if h.get("diff"):
            txt += f" diff {cell(h['diff'], 300)}"
        if h.get("error"):
            txt += f" error {h['error']}"
        _line("hook", txt, guard)
    ex = a.execution
    started = "yes" if a.execution_started else "no (execution never started)"
    if ex is not None:
        started += f", {ex['decision']} after {ex['elapsed_ms']:.3f} ms"
    _line("execution started", started, guard)
    for e in a.events:
        _line(e["step"], f"{e['decision']} at +{e['offset_ms']} ms by {e['decider']}"
              + (f" {cell(e['detail'], 200)}" if e.get("detail") else ""), guard)
    if res.get("error_type"):
        _line("error type", res["error_type"], guard)
    if res.get("preview"):
        _line("result preview", res["preview"], guard)
    if a.artifact:
        art = a.artifact
        _line("artifact", f"{art['path']} ({art['chars']} chars, sha256 {art['sha256']})", guard)
    if a.resolution:
        _line("resolution", f"{a.resolution['status']} at {iso(a.resolution['at'])}: "
              f"{a.resolution['summary']}", guard)
    _progress_and_children(a, guard)
    tr = a.trace
    if tr.get("trace_id"):
        _line("trace", tr["trace_id"] + (f"  {tr['url']}" if tr.get("url") else ""), guard)
    if a.intent is not None:
        _line("strict intent", f"recorded at {iso(a.intent['started_at'])}", guard)
    table("steps",
          ["seq", "step", "at (UTC)", "+ms", "elapsed ms", "decider", "decision", "detail"],
          [[s["seq"], s["step"], s["started_at"], s["offset_ms"], s["elapsed_ms"], s["decider"],
            s["decision"], _detail(s["detail"])] for s in a.steps],
          guard, limit=240, wide=wide,
          priority=("seq", "step", "decision", "detail", "+ms", "decider", "elapsed ms"))
    if a.late:
        click.echo("Late steps (numbered from 1000: recorded after the call had returned):")
        for s in a.late:
            note(guard(f"{s['seq']} {s['step']} {s['decision']} at +{s['offset_ms']} ms:"
                       f" {s['why']}"), indent="  ")



def _ancestors(a: Any, guard: OutputGuard) -> None:
    """The calls above a nested call, root first (the last is its parent)."""
    ups = a.family.get("ancestors") or ()
    for i, up in enumerate(ups):
        cid = str(up.get("call_id"))
        _line("parent" if i == len(ups) - 1 else "ancestor",
              f"{cid}  {up.get('tool')} ({up.get('status')})", guard)


def _progress_and_children(a: Any, guard: OutputGuard) -> None:
    """The progress the tool reported, then the calls it made (a tree, depth first)."""
    for m in a.progress:
        total = f" of {m['total']:g}" if m.get("total") is not None else ""
        _line("progress", f"#{m['seq']} {m['done']:g}{total}"
              + (f": {m['message']}" if m.get("message") else ""), guard)
    for c in a.family.get("descendants") or ():
        _line("called" if c.get("level") == 1 else "",
              f"{'  ' * (int(c.get('level') or 1) - 1)}└ {c['call_id']}"
              f"  {c['tool']}"
              f" ({c['status']}, depth {c['depth']})", guard)
