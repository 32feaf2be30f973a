"""``tooltrace tail``: follow a running agent from another terminal.

Calls are printed as they finish (rejections highlighted), one aligned line each that fits the
terminal, and the calls in flight that report progress get a line of their own, kept at the
bottom on a terminal with a summary line (printed as a line whenever it moves otherwise).
``--json`` prints one JSON object per line for machines: ``finished``, ``progress``, ``intent``
(strict mode: a call about to run) and ``late`` (a step after its call returned).

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
    """Follow calls as they finish, one line each that fits the terminal, with the calls in
    flight and a summary line at the bottom (Ctrl-C stops)."""
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
            # Every id of this look first: two calls of one millisecond that finish in it are
            # told apart from the first line on.
            view.seen(poll.inflight, (str(ln.get("call_id") or "") for ln in poll.lines))
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


#: Width of the status column: "REJECTED" and "cancelled" both fit.
_STATUS_W = 9
#: Width of the tool column (longer names are cut with "~").
_TOOL_W = 14
#: Width of the duration column ("35.7 ms", "1.30 s", "2m05s").
_TIME_W = 8
#: From this terminal width on the time has milliseconds.
_MS_WIDTH = 100
#: Width of the call id column: most ids are told apart by 13 to 18 characters (the
#: millisecond, then the count within it); a longer prefix pushes its summary along.
_ID_W = 18


class _View:
    """What tail prints: finished calls as lines, calls in flight as bars (or JSON lines).

    For people every line fits the terminal (``COLUMNS`` when set) in aligned columns: time,
    status, tool, duration (or progress), call id (its shortest prefix unique among the calls
    this view has seen, which ``autopsy`` takes), then the summary cut to what is left. On a
    terminal the calls in flight and a summary line stay at the bottom, redrawn only when they
    change; finished calls scroll above them.
    """

    def __init__(self, guard: OutputGuard, redact: Any, as_json: bool, tty: bool) -> None:
        from ..audit import SeenIds
        from ._table import terminal_width

        self.guard = guard
        self.redact = redact
        self.as_json = as_json
        self.tty = tty
        self.color = tty and not os.environ.get("NO_COLOR")
        self.width = max(terminal_width(), 40)
        self._shown: dict[str, int] = {}  # call id -> seq of the progress last shown
        self._done: set[str] = set()
        self._footer: list[str] = []
        self._counts: dict[str, int] = {}
        self._started = time.monotonic()
        self._ids = SeenIds()

    def seen(self, *groups: Any) -> None:
        """Remember call ids (in flight, or about to be shown) that prefixes must tell apart."""
        for ids in groups:
            self._ids.add(*(str(i) for i in ids if i))

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
                      self._row(o.get("started_at_us"), "starting", o.get("tool"), "",
                                o.get("call_id"), ""))
        elif k == "s" and isinstance(o.get("step"), list) and len(o["step"]) >= 6:
            step = o["step"]
            self._out({"event": "late", "call_id": o.get("call_id"), "run_id": o.get("run_id"),
                       "tool": o.get("tool"), "step": step[1], "decision": step[5],
                       "at_us": step[2]},
                      self._row(step[2], "later", o.get("tool"), "", o.get("call_id"),
                                f"{step[1]} {step[5]}"))
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
        self._counts[status] = self._counts.get(status, 0) + 1
        label = "REJECTED" if status == "rejected" else status
        summary = f"({stage}) {obj['summary']}" if status == "rejected" else obj["summary"]
        tool = "  " * int(o.get("depth") or 0) + str(o.get("tool"))
        self._out(obj, self._row(o.get("started_at_us"), label, tool, _duration(elapsed),
                                 o.get("call_id"), str(summary), style=_STYLE.get(status)))

    def _row(self, at_us: Any, label: str, tool: Any, middle: str, call_id: Any, rest: str,
             style: dict[str, Any] | None = None) -> str:
        """One aligned line cut to the terminal width (the colour is added after the cut)."""
        cid = f"{self._ids.prefix(str(call_id or '')):<{_ID_W}}"
        name = str(tool or "")
        if len(name) > _TOOL_W:
            name = name[: _TOOL_W - 1] + "~"
        clock = _clock(at_us)
        head = (clock if self.width >= _MS_WIDTH else clock[:8]) + " "
        tail_ = f" {name:<{_TOOL_W}} {middle:>{_TIME_W}} {cid}"
        room = self.width - len(head) - _STATUS_W - len(tail_) - 1
        text = " ".join(self._text(rest).split())
        end = (" " + (text if len(text) <= room else text[: max(room - 1, 0)] + "~")
               if room > 3 and text else "")
        status = f"{label:<{_STATUS_W}}"
        if self.color and style:
            status = click.style(status, **style)
        return self.guard(head + status + tail_ + end)

    def _out(self, obj: dict[str, Any], text: str) -> None:
        if self.as_json:
            self._emit(obj)
            return
        self._clear_footer()
        click.echo(text)

    def inflight(self, calls: dict[str, dict[str, Any]]) -> None:
        """Show the calls in flight: bars and a summary under the lines on a terminal (redrawn
        when they change), else a line each time a call's progress moves."""
        live = {k: v for k, v in calls.items() if k not in self._done}
        if self.tty:
            lines = [self._bar(c) for c in live.values()]
            lines.append(self._summary(len(live)))
            if lines != self._footer:
                self._clear_footer()
                for ln in lines:
                    click.echo(ln)
                self._footer = lines
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
            pct = f"{frac * 100:.0f}%"
            rest = f"{done:g}/{total:g}  {c.get('message') or ''}"
        else:
            pct = f"{done:g}"
            rest = str(c.get("message") or "")
        return self._row(c.get("at_us"), "running", c.get("tool"), pct, c.get("call_id"), rest)

    def _summary(self, inflight: int) -> str:
        """The bottom line: calls in flight, calls finished by status, time followed."""
        n = sum(self._counts.values())
        by = ", ".join(f"{v} {k}" for k, v in sorted(self._counts.items(),
                                                      key=lambda kv: (-kv[1], kv[0])))
        secs = time.monotonic() - self._started
        line = (f"-- {inflight} in flight; {n} finished" + (f" ({by})" if by else "")
                + f" in {secs:.0f} s")
        return line if len(line) <= self.width else line[: self.width - 1] + "~"

    def _clear_footer(self) -> None:
        if self._footer and self.tty:
            click.echo("\x1b[1A\x1b[2K" * len(self._footer), nl=False)
        self._footer = []

    def close(self) -> None:
        """Leave the terminal clean (no bars of calls nobody will update)."""
        self._clear_footer()


def _duration(ms: float) -> str:
    """A call's duration in a few characters: ``35.7 ms``, ``1.30 s``, ``2m05s``."""
    if ms < 1000:
        return f"{ms:.1f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    m, sec = divmod(int(ms // 1000), 60)
    return f"{m}m{sec:02d}s"


def _clock(at_us: Any) -> str:
    if not isinstance(at_us, int):
        return "--:--:--.---"
    t = dt.datetime.fromtimestamp(at_us / 1e6, dt.UTC)
    return t.strftime("%H:%M:%S.") + f"{t.microsecond // 1000:03d}"
