"""``tooltrace tail``: follow a running agent from another terminal.

Calls are printed as they finish (rejections highlighted), and the calls in flight that report
progress get a progress bar, kept at the bottom on a terminal (printed as a line whenever it moves
otherwise). ``--json`` prints one JSON object per line for machines: ``finished``, ``progress``,
``intent`` (strict mode: a call about to run) and ``late`` (a step after its call returned).

It reads what the audit sink writes (``tooltrace.audit.Follower``): the segments and the live
progress files of the home. It opens no database and starts no server.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from pathlib import Path
from typing import Any

import click
import orjson

from ._common import OutputGuard, home_option, json_option

_BAR = 24
_STYLE: dict[str, dict[str, Any]] = {
    "rejected": {"fg": "red", "bold": True}, "failed": {"fg": "yellow"},
    "unknown": {"fg": "magenta", "bold": True}, "cancelled": {"fg": "yellow"},
    "ok": {"fg": "green"},
}


@click.command()
@home_option
@json_option
@click.option("--run", "run_id", default=None, help="Only the calls of this run.")
@click.option("--from-start", is_flag=True,
              help="Begin with the calls already in the trail (default: only new ones).")
@click.option("--max-calls", type=click.IntRange(min=1), default=None,
              help="Stop after this many finished calls.")
@click.option("--duration", type=click.FloatRange(min=0), default=None,
              help="Stop after this many seconds.")
@click.option("--interval", type=click.FloatRange(min=0.01), default=0.2, show_default=True,
              help="Seconds between two looks at the trail.")
def tail(home: Path | None, as_json: bool, run_id: str | None, from_start: bool,
         max_calls: int | None, duration: float | None, interval: float) -> None:
    """Follow calls as they finish, with progress bars for calls in flight (Ctrl-C stops)."""
    from .._settings import resolve_home
    from ..audit import Follower
    from ..redaction import default_redactor

    root = resolve_home(home)
    view = _View(OutputGuard(home), default_redactor().redact_text, as_json,
                 sys.stdout.isatty() and not as_json)
    follower = Follower(root, from_start=from_start)
    end = None if duration is None else time.monotonic() + duration
    finished = 0
    try:
        while True:
            poll = follower.poll()
            for line in poll.lines:
                if run_id is not None and line.get("run_id") != run_id:
                    continue
                finished += view.line(line)
                if max_calls is not None and finished >= max_calls:
                    return
            view.inflight({k: v for k, v in poll.inflight.items()
                           if run_id is None or v.get("run_id") == run_id})
            if end is not None and time.monotonic() >= end:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        view.close()


class _View:
    """What tail prints: finished calls as lines, calls in flight as bars (or JSON lines)."""

    def __init__(self, guard: OutputGuard, redact: Any, as_json: bool, tty: bool) -> None:
        self.guard = guard
        self.redact = redact
        self.as_json = as_json
        self.tty = tty
        self.color = tty and not os.environ.get("NO_COLOR")
        self._shown: dict[str, int] = {}  # call id -> seq of the progress last shown
        self._done: set[str] = set()
        self._footer = 0

    def _text(self, value: Any, limit: int = 200) -> str:
        return self.guard(self.redact(str(value or ""))[:limit])

    def _emit(self, obj: dict[str, Any]) -> None:
        click.echo(self.guard(orjson.dumps(obj).decode()))

    def line(self, o: dict[str, Any]) -> int:
        """Show one trail line; 1 for a finished call, else 0."""
        k = o.get("k")
        if k == "c":
            self._done.add(str(o.get("call_id")))
            self._shown.pop(str(o.get("call_id")), None)
            self._finished(o)
            return 1
        if k == "i":
            self._out({"event": "intent", "call_id": o.get("call_id"), "run_id": o.get("run_id"),
                       "tool": o.get("tool"), "at_us": o.get("started_at_us")},
                      f"{_clock(o.get('started_at_us'))}  starting  {o.get('tool')}"
                      f"  {o.get('call_id')}")
        elif k == "s" and isinstance(o.get("step"), list) and len(o["step"]) >= 6:
            step = o["step"]
            self._out({"event": "late", "call_id": o.get("call_id"), "run_id": o.get("run_id"),
                       "tool": o.get("tool"), "step": step[1], "decision": step[5],
                       "at_us": step[2]},
                      f"{_clock(step[2])}  later     {o.get('tool')}: {step[1]} {step[5]}"
                      f"  {o.get('call_id')}")
        return 0

    def _finished(self, o: dict[str, Any]) -> None:
        status = str(o.get("status"))
        stage = o.get("reject_stage")
        elapsed = (o.get("elapsed_us") or 0) / 1000.0
        obj = {"event": "finished", "call_id": o.get("call_id"), "run_id": o.get("run_id"),
               "tool": o.get("tool"), "status": status, "reject_stage": stage,
               "rejected": status == "rejected", "summary": self._text(o.get("summary"), 500),
               "elapsed_ms": elapsed, "started_at_us": o.get("started_at_us"),
               "parent_call_id": o.get("parent_call_id"), "depth": o.get("depth") or 0}
        label = f"REJECTED ({stage})" if status == "rejected" else status
        if self.color:
            label = click.style(f"{label:<9}", **_STYLE.get(status, {}))
        indent = "  " * int(o.get("depth") or 0)
        text = (f"{_clock(o.get('started_at_us'))}  {label:<9}  {indent}{o.get('tool')}"
                f"  {elapsed:.1f} ms  {obj['summary']}  {o.get('call_id')}")
        self._out(obj, text)

    def _out(self, obj: dict[str, Any], text: str) -> None:
        if self.as_json:
            self._emit(obj)
            return
        self._clear_footer()
        click.echo(self.guard(text))

    def inflight(self, calls: dict[str, dict[str, Any]]) -> None:
        """Show the calls in flight: bars under the lines on a terminal, else changes."""
        live = {k: v for k, v in calls.items() if k not in self._done}
        if self.tty:
            self._clear_footer()
            for c in live.values():
                click.echo(self._bar(c))
            self._footer = len(live)
            return
        for cid, c in live.items():
            seq = int(c.get("seq") or 0)
            if self._shown.get(cid) == seq:
                continue
            self._shown[cid] = seq
            if self.as_json:
                self._emit({"event": "progress", "call_id": cid, "run_id": c.get("run_id"),
                            "tool": c.get("tool"), "done": c.get("done"),
                            "total": c.get("total"), "message": self._text(c.get("message")),
                            "seq": seq, "at_us": c.get("at_us")})
            else:
                click.echo(self._bar(c))

    def _bar(self, c: dict[str, Any]) -> str:
        done, total = c.get("done") or 0, c.get("total")
        if isinstance(total, int | float) and total > 0:
            frac = max(0.0, min(1.0, float(done) / float(total)))
            filled = int(frac * _BAR)
            bar = f"[{'#' * filled}{'.' * (_BAR - filled)}] {done:g}/{total:g}"
        else:
            bar = f"[{'?' * 3}{'.' * (_BAR - 3)}] {done:g}"
        return self.guard(f"{'running':<11}  {c.get('tool')}  {bar}  "
                          f"{self._text(c.get('message'), 80)}  {c.get('call_id')}")

    def _clear_footer(self) -> None:
        if self._footer and self.tty:
            click.echo("\x1b[1A\x1b[2K" * self._footer, nl=False)
        self._footer = 0

    def close(self) -> None:
        """Leave the terminal clean (no bars of calls nobody will update)."""
        self._clear_footer()


def _clock(at_us: Any) -> str:
    if not isinstance(at_us, int):
        return "--:--:--.---"
    t = dt.datetime.fromtimestamp(at_us / 1e6, dt.UTC)
    return t.strftime("%H:%M:%S.") + f"{t.microsecond // 1000:03d}"
