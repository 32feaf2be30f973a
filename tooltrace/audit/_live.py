"""The live progress file: what a process's calls in flight last reported, for readers in other
processes (``tooltrace tail``).

Finished calls are in the segments; a call still running is not, so the audit sink keeps one
small JSON file per process that the calls' progress reports update::

    <home>/audit/live/<pid>-<token>.json
    {"v": 1, "pid": 4242, "updated_at_us": ..., "calls": [
        {"call_id": ..., "run_id": ..., "tool": ..., "done": 3.0, "total": 10.0,
         "message": "...", "seq": 7, "at_us": ...}, ...]}

Bounded (at most ``MAX_CALLS`` calls, the longest-quiet dropped first; messages are the
redacted, 200-character ones of the records), rewritten whole (write, then rename: a reader
never sees half a file) at most every ``interval_s`` and removed when the process shuts its
sink down. A file whose process is gone is stale: readers skip it (``read_live``), and the next
writer in the home removes it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .._files import replace_whole

if TYPE_CHECKING:
    from ..events import CallProgress

__all__ = ["MAX_CALLS", "LiveProgress", "live_dir", "read_live"]

#: Calls one live file holds at most.
MAX_CALLS = 256
#: Calls remembered as finished, so a progress event delivered after its call returned (the
#: event hub hands events over on a worker thread) does not bring the call back as running.
MAX_ENDED = 4096


def live_dir(adir: Path) -> Path:
    """Where live progress files are, inside an audit directory."""
    return adir / "live"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_of(path: Path) -> int | None:
    head = path.name.split("-", 1)[0]
    return int(head) if head.isdecimal() else None


def read_live(adir: Path) -> Iterator[dict[str, Any]]:
    """The calls in flight that live processes last reported (stale and unreadable files are
    skipped)."""
    d = live_dir(adir)
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        return
    for name in names:
        path = d / name
        pid = _pid_of(path)
        if not name.endswith(".json") or pid is None or not _alive(pid):
            continue
        try:
            doc = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue  # removed meanwhile, or not ours
        calls = doc.get("calls") if isinstance(doc, dict) else None
        for c in calls if isinstance(calls, list) else ():
            if isinstance(c, dict) and isinstance(c.get("call_id"), str):
                yield c


class LiveProgress:
    """One process's live progress file (written by the audit sink)."""

    def __init__(self, adir: Path, interval_s: float = 0.25) -> None:
        self._dir = live_dir(adir)
        self._path = self._dir / f"{os.getpid()}-{os.urandom(4).hex()}.json"
        self._interval = interval_s
        self._calls: dict[str, dict[str, Any]] = {}
        self._ended: dict[str, None] = {}  # an ordered set, oldest first
        self._lock = threading.Lock()
        self._dirty = False
        self._next = 0.0
        self._closed = False
        self._written = False
        #: Writes that failed (a full disk, a read-only home): counted, never raised.
        self.errors = 0

    @property
    def active(self) -> bool:
        """True while some call in flight has reported progress (what ``finished`` asks)."""
        return bool(self._calls)

    def on_progress(self, ev: CallProgress) -> None:
        """A progress event (a subscriber of the registry's ``progress`` kind)."""
        m = ev.mark
        entry = {"call_id": ev.call_id, "run_id": ev.run_id, "tool": ev.tool, "done": m.done,
                 "total": m.total, "message": m.message, "seq": m.seq, "at_us": m.at_us}
        with self._lock:
            if ev.call_id in self._ended:
                return  # the call returned before its progress event arrived
            calls = self._calls
            calls.pop(ev.call_id, None)
            calls[ev.call_id] = entry  # the dict's order: longest quiet first
            while len(calls) > MAX_CALLS:
                calls.pop(next(iter(calls)))
            self._dirty = True
        if time.monotonic() >= self._next:
            self.write()

    def finished(self, call_id: str) -> None:
        """A call returned: it is no longer in flight (written at the next ``write``), and
        progress reported for it from now on is ignored."""
        with self._lock:
            ended = self._ended
            ended[call_id] = None
            if len(ended) > MAX_ENDED:
                del ended[next(iter(ended))]
            if self._calls.pop(call_id, None) is not None:
                self._dirty = True

    def write(self) -> None:
        """Rewrite the file if anything changed since the last write."""
        with self._lock:
            if not self._dirty or self._closed:
                return
            self._dirty = False
            self._next = time.monotonic() + self._interval
            doc = {"v": 1, "pid": os.getpid(), "updated_at_us": time.time_ns() // 1000,
                   "calls": list(self._calls.values())}
            try:
                if not self._written:
                    self._dir.mkdir(parents=True, exist_ok=True)
                    self._sweep()
                # Not synced: the file only says what runs now and goes with the process.
                replace_whole(self._path, orjson.dumps(doc), sync=False)
                self._written = True
            except OSError:
                self.errors += 1

    def close(self) -> None:
        """Remove the file (the process's calls are over)."""
        with self._lock:
            self._closed = True
            self._calls.clear()
            if self._written:
                try:
                    self._path.unlink()
                except OSError:
                    pass

    def _sweep(self) -> None:
        """Remove the files of processes that are gone."""
        for p in self._dir.glob("*.json"):
            pid = _pid_of(p)
            if pid is not None and not _alive(pid):
                try:
                    p.unlink()
                except OSError:
                    pass
