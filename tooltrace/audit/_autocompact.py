"""Compaction nobody has to run: writers start it in the background, and say how far behind it is.

An audit writer (``tooltrace.telemetry.AuditSink``) checks every few seconds whether the home has
sealed segments that compaction has not taken yet (``due``): at least ``min_bytes`` of them, or
one sealed more than ``after_s`` ago. When it has, the writer starts one compactor process
(``python -m tooltrace.audit._autocompact``), unless one it started is still running, and hands
it the audit key through a pipe. A writer that opens the home first seals what crashed writers
left (``recover_dead_segments``, as it always did) and then checks at once, so what they left is
compacted too.

Once running, the compactor runs ``compact(wait=False, recover=False, max_bytes=pass_bytes)``
whenever a segment has been sealed (a batch of sealed segments per pass, then merging small
files; recovery stays with the writers, ``tooltrace compact`` and ``tooltrace verify
--recover``), the next pass at once while more wait, else a look every ``poll_s`` (a second), so
what it has not taken yet is the writers' live segments and about a second of their writing; it
exits once nothing was sealed for ``idle_exit_s``. It keeps pyarrow to one thread: a process of
its own because compaction's Python would otherwise hold the agent's GIL for seconds.

Its priority is chosen when it starts (Linux lets no unprivileged process leave ``SCHED_IDLE``,
sched(7)): ``SCHED_IDLE`` (it runs only on a CPU nothing else wants, else ``nice 19``) while
compaction keeps up, the writer's own once it is behind (``Waiting.urgent``: a sealed segment
waited ``urgent_after_s``, or ``urgent_bytes`` wait). A writer whose idle compactor runs while
compaction is behind stops it and starts one at its priority; one at the writer's priority
exits once nothing waits after ``normal_for_s`` (``CAUGHT_UP``), so the next starts idle again.
Its memory is bounded: a pass holds one batch, the freed heap is given back after each, and a
compactor still larger than ``max_rss_bytes`` exits (``RETIRED``); the writer's next look, at
once, starts a fresh one if more waits.

Compaction's own rules keep it safe: one compactor at a time (``compact.lock``; a second one
finds it taken and exits), crash-safe at every step (the manifest switch is the commit point: a
compactor killed at any moment leaves at worst a file nobody reads, which the next one removes)
and never double counted. ``TOOLTRACE_AUDIT_COMPACT=off`` (or ``AuditSink(compact=False)``)
turns it off.

``WriterBacklog`` is what the writer reports as the compaction backlog (the metrics
``tooltrace_audit_compaction_backlog_*``): the calls and bytes it wrote that are not compacted
yet (its live segment and its sealed ones compaction has not taken), and the age of the oldest.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ._manifest import manifest_path, read_manifest
from ._segments import list_segments, segment_name

__all__ = ["BackgroundCompaction", "CompactedNames", "CompactionBacklog", "Waiting",
           "WriterBacklog", "due", "lower_priority", "main", "waiting"]

#: Sealed bytes not compacted yet that make a compaction due.
MIN_BYTES = 8 * 1024 * 1024
#: Seconds after which a sealed segment not compacted yet makes a compaction due, however small.
AFTER_S = 30.0
#: Seconds between two looks at the home by a writer (is a compactor due?).
CHECK_EVERY_S = 5.0
#: Seconds between two looks at the home by a running compactor (was a segment sealed?).
POLL_S = 1.0
#: Seconds a compactor waits with nothing due before it exits.
IDLE_EXIT_S = 15.0
#: Seconds a sealed segment may wait for compaction before the compactor runs at the writer's
#: own priority instead of ``SCHED_IDLE`` (see ``Waiting.urgent``).
URGENT_AFTER_S = 30.0
#: Sealed bytes waiting for compaction that make the compactor run at the writer's priority.
URGENT_BYTES = 64 * 1024 * 1024
#: Bytes of sealed segments a compactor takes per pass (one batch): what it holds in memory at
#: once, and how often it looks at its own size.
PASS_BYTES = 32 * 1024 * 1024
#: Resident memory (bytes) past which a compactor exits after its pass; the writer starts a
#: fresh one at once if more is due.
MAX_RSS_BYTES = 512 * 1024 * 1024
#: Seconds a compactor at the writer's priority runs at least; after that it exits as soon as
#: nothing waits, so the next one starts idle again.
NORMAL_FOR_S = 300.0
#: The exit code of a compactor that stopped to be replaced (its memory passed
#: ``MAX_RSS_BYTES``), not because it had nothing to do.
RETIRED = 3
#: The exit code of a compactor at the writer's priority that caught up after ``NORMAL_FOR_S``.
CAUGHT_UP = 4


class CompactedNames:
    """The names of the segments the compaction manifest lists, read again only when the
    manifest changed (a writer looks every few seconds)."""

    def __init__(self, adir: Path) -> None:
        self._path = manifest_path(adir)
        self._adir = adir
        self._stamp: tuple[int, int, int] | None = None
        self._names: frozenset[str] = frozenset()

    def get(self) -> frozenset[str]:
        """The segment names the manifest lists now."""
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            return frozenset()
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            self._names = frozenset(str(s.get("name")) for s in
                                    read_manifest(self._adir).get("segments", []))
            self._stamp = stamp
        return self._names


@dataclass(frozen=True, slots=True)
class Waiting:
    """The sealed segments of a home that compaction has not taken yet: their bytes and how
    long ago the oldest was sealed (s; 0 when none waits)."""

    segments: int
    bytes: int
    oldest_s: float

    def due(self, *, min_bytes: int = MIN_BYTES, after_s: float = AFTER_S) -> bool:
        """Whether this is worth starting a compactor for: ``min_bytes`` or more, or a segment
        sealed ``after_s`` ago or more."""
        return self.segments > 0 and (self.bytes >= min_bytes or self.oldest_s >= after_s)

    def urgent(self, *, after_s: float = URGENT_AFTER_S, min_bytes: int = URGENT_BYTES) -> bool:
        """Whether compaction is behind enough to run at the writer's own priority: a sealed
        segment waited ``after_s`` or more, or ``min_bytes`` or more wait."""
        return self.segments > 0 and (self.oldest_s >= after_s or self.bytes >= min_bytes)


def waiting(adir: Path, *, names: CompactedNames | None = None,
            now: float | None = None) -> Waiting:
    """What waits for compaction under ``adir`` (``<home>/audit``): sealed segments the
    manifest does not list. ``names``: the manifest's names, cached."""
    now = time.time() if now is None else now
    done: frozenset[str] | None = None
    count = size = 0
    oldest = now
    for info in list_segments(adir):
        if info.live:
            continue
        if done is None:
            done = (names or CompactedNames(adir)).get()
        if info.name in done:
            continue
        try:
            st = info.path.stat()
        except FileNotFoundError:
            continue
        count += 1
        size += st.st_size
        oldest = min(oldest, st.st_mtime)
    return Waiting(count, size, max(0.0, now - oldest) if count else 0.0)


def due(adir: Path, *, min_bytes: int = MIN_BYTES, after_s: float = AFTER_S,
        names: CompactedNames | None = None, now: float | None = None) -> bool:
    """Whether compaction has work worth starting for under ``adir`` (``<home>/audit``): sealed
    segments not compacted yet of ``min_bytes`` or more, or one sealed more than ``after_s``
    ago. ``names``: the manifest's names, cached."""
    return waiting(adir, names=names, now=now).due(min_bytes=min_bytes, after_s=after_s)


class BackgroundCompaction:
    """Starts a compactor process for one home when compaction is due (``poke``), one at a
    time, at idle priority unless compaction is behind (``Waiting.urgent``): then at the
    writer's own, replacing an idle one that runs. Never raises: a compactor that cannot start
    is counted in ``failures``."""

    def __init__(self, home: Path, key: bytes, *, min_bytes: int = MIN_BYTES,
                 after_s: float = AFTER_S, check_every_s: float = CHECK_EVERY_S,
                 poll_s: float = POLL_S, idle_exit_s: float = IDLE_EXIT_S,
                 urgent_after_s: float = URGENT_AFTER_S, urgent_bytes: int = URGENT_BYTES,
                 pass_bytes: int = PASS_BYTES, max_rss_bytes: int = MAX_RSS_BYTES,
                 normal_for_s: float = NORMAL_FOR_S) -> None:
        self.home = home
        self._key = key
        self._min_bytes = min_bytes
        self._after_s = after_s
        self._every = check_every_s
        self._poll_s = poll_s
        self._idle_exit_s = idle_exit_s
        self._urgent_after_s = urgent_after_s
        self._urgent_bytes = urgent_bytes
        self._pass_bytes = pass_bytes
        self._max_rss_bytes = max_rss_bytes
        self._normal_for_s = normal_for_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self._names = CompactedNames(home / "audit")
        self._next = 0.0
        self._lock = threading.Lock()
        #: The running compactor's priority (``"idle"`` or ``"normal"``); None when none runs.
        self.priority: str | None = None
        #: Compactor processes started, and those that could not start or ended in an error.
        self.started = 0
        self.failures = 0
        #: Compactors that exited to be replaced (memory past ``max_rss_bytes``), idle ones
        #: stopped to be replaced at the writer's priority because compaction was behind, and
        #: ones at the writer's priority that exited once caught up (after ``normal_for_s``).
        self.retired = 0
        self.escalated = 0
        self.caught_up = 0
        #: The last failure's kind (an exception type, or ``exit <code>``); None before any.
        self.last_error: str | None = None

    @property
    def running(self) -> bool:
        """Whether a compactor this object started is running now."""
        p = self._proc
        return p is not None and p.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id of the compactor this object started last, while it runs."""
        p = self._proc
        return p.pid if p is not None and p.poll() is None else None

    def poke(self, *, force: bool = False) -> bool:
        """Start a compactor if none of ours runs and compaction is due, or replace an idle one
        when compaction is behind (checked at most every ``check_every_s``, and at once after a
        compactor retired; ``force``: check now). True when one was started."""
        with self._lock:
            now = time.monotonic()
            p = self._proc
            if p is not None:
                code = p.poll()
                if code is None and self.priority == "normal":
                    return False
                if code is not None:
                    self._ended(code)
                    force = force or code in (RETIRED, CAUGHT_UP)
            if not force and now < self._next:
                return False
            self._next = now + self._every
            try:
                w = waiting(self.home / "audit", names=self._names)
                if not w.due(min_bytes=self._min_bytes, after_s=self._after_s):
                    return False
                urgent = w.urgent(after_s=self._urgent_after_s, min_bytes=self._urgent_bytes)
                # An idle one runs: replace it only when compaction is behind.
                if self._proc is not None and not (urgent and self._stop_idle()):
                    return False
                self._proc = self._start("normal" if urgent else "idle")
            except Exception as exc:
                self.failures += 1
                self.last_error = type(exc).__name__
                return False
            self.started += 1
            return True

    def _ended(self, code: int) -> None:
        self._proc = None
        self.priority = None
        if self._stopping:
            self._stopping = False
            self.escalated += 1
        elif code == RETIRED:
            self.retired += 1
        elif code == CAUGHT_UP:
            self.caught_up += 1
        elif code != 0:
            self.failures += 1
            self.last_error = f"exit {code}"

    def _stop_idle(self) -> bool:
        """Stop the idle compactor so one at the writer's priority can take over; False if it
        has not exited yet (the next look finds it gone). Stopping it at any moment is safe
        (compaction's commit point is the manifest switch); it loses the batch in hand."""
        p = self._proc
        assert p is not None
        self._stopping = True
        with contextlib.suppress(OSError):
            p.terminate()
        try:
            code = p.wait(2.0)
        except subprocess.TimeoutExpired:
            return False
        self._ended(code)
        return True

    def _start(self, priority: str) -> subprocess.Popen[bytes]:
        if not sys.executable:
            raise RuntimeError("no Python interpreter to run the compactor with")
        env = dict(os.environ)
        # The child imports this very package, wherever this process found it.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                    else "")
        cmd = [sys.executable, "-m", "tooltrace.audit._autocompact", "--home", str(self.home),
               "--poll-s", str(self._poll_s), "--idle-exit-s", str(self._idle_exit_s),
               "--priority", priority, "--pass-bytes", str(self._pass_bytes),
               "--max-rss-bytes", str(self._max_rss_bytes), "--normal-for-s",
               str(self._normal_for_s)]
        # A session of its own: a Ctrl-C meant for the agent does not stop it half way (it
        # would be safe, only wasted), and it finishes after the agent has exited.
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                                close_fds=True)
        if priority == "idle":
            # At once, so its start-up already runs idle (it lowers itself too, when run by
            # hand).
            lower_priority(proc.pid)
        self.priority = priority
        assert proc.stdin is not None
        try:
            proc.stdin.write(self._key + b"\n")
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        return proc

    def wait(self, timeout_s: float) -> bool:
        """Wait for a running compactor to exit; False if it is still running."""
        p = self._proc
        if p is None:
            return True
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def after_fork(self) -> None:
        """Forget the parent's compactor in a forked child (it is not this process's child)."""
        self._proc = None
        self.priority = None
        self._stopping = False
        self._lock = threading.Lock()
        self._next = 0.0


@dataclass(frozen=True, slots=True)
class CompactionBacklog:
    """What one writer wrote that is not compacted yet: calls, bytes on disk and the age (s)
    of the oldest (0 when nothing is waiting)."""

    calls: int
    bytes: int
    oldest_age_s: float


class WriterBacklog:
    """The compaction backlog of one writer's segments: calls counted as they are acknowledged
    (``add``), what compaction took read from the manifest (``refresh``)."""

    def __init__(self, adir: Path) -> None:
        self._adir = adir
        self._names = CompactedNames(adir)
        self._lock = threading.Lock()
        # (writer, segment) -> [calls, wall time of its first acknowledgement, bytes]
        self._segs: dict[tuple[str, int], list[float]] = {}

    def add(self, writer: str, segment: int, calls: int) -> None:
        """``calls`` calls of ``writer``'s segment ``segment`` were acknowledged."""
        with self._lock:
            got = self._segs.get((writer, segment))
            if got is None:
                self._segs[(writer, segment)] = [calls, time.time(), 0]
            else:
                got[0] += calls

    def refresh(self) -> None:
        """Drop the segments compaction took; note each other's size on disk."""
        with self._lock:
            keys = list(self._segs)
        if not keys:
            return
        done = self._names.get()
        sizes: dict[tuple[str, int], int | None] = {}
        for writer, n in keys:
            sealed = segment_name(writer, n, live=False)
            if sealed in done:
                sizes[(writer, n)] = None
                continue
            size = 0
            for name in (segment_name(writer, n, live=True), sealed):
                try:
                    size = (self._adir / "segments" / name).stat().st_size
                    break
                except FileNotFoundError:
                    continue
            sizes[(writer, n)] = size
        with self._lock:
            for k, got in sizes.items():
                if got is None:
                    self._segs.pop(k, None)
                elif k in self._segs:
                    self._segs[k][2] = got

    def snapshot(self) -> CompactionBacklog:
        """The backlog as of the last ``refresh`` (the age as of now)."""
        with self._lock:
            segs = list(self._segs.values())
        if not segs:
            return CompactionBacklog(0, 0, 0.0)
        oldest = min(s[1] for s in segs)
        return CompactionBacklog(int(sum(s[0] for s in segs)), int(sum(s[2] for s in segs)),
                                 max(0.0, time.time() - oldest))


# -- the compactor process ---------------------------------------------------------------------


def lower_priority(pid: int = 0) -> None:
    """Let process ``pid`` (0: this one) run only on a CPU nothing else wants
    (``SCHED_IDLE``), else as ``nice 19``. Best effort: a platform without these leaves it at
    the normal priority. Linux lets no unprivileged process undo this (sched(7), RLIMIT_NICE):
    a compactor that must run at the normal priority is a new process."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, pid, 19)


def _resident_bytes() -> int:
    """This process's resident memory (0 where ``/proc`` does not say)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    import ctypes
    import ctypes.util

    try:
        fn: Callable[[int], int] = ctypes.CDLL(
            ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    return fn


def _give_back_memory() -> None:
    """Return the free pages of the C heap and of Arrow's memory pool to the system. A pass
    parses a batch of lines into Python objects and lets them go; without this the freed heap
    stayed resident (about 100 MiB after a 16 MiB segment, 2026-12-06)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()


def run(home: Path, key: bytes, *, poll_s: float = POLL_S, idle_exit_s: float = IDLE_EXIT_S,
        pass_bytes: int = PASS_BYTES, max_rss_bytes: int = MAX_RSS_BYTES,
        normal_for_s: float | None = None) -> int:
    """The compactor's loop: a pass of about ``pass_bytes`` of sealed segments at a time, the
    next at once while more wait, else a look every ``poll_s``; exit once nothing was sealed
    for ``idle_exit_s`` (or when another compaction holds the lock), or with ``RETIRED`` after
    a pass that left this process larger than ``max_rss_bytes``, or with ``CAUGHT_UP`` when
    nothing waits after ``normal_for_s`` (None: never; a compactor at the writer's priority
    passes it). Returns the exit code."""
    from ._compact import compact

    adir = home / "audit"
    names = CompactedNames(adir)
    started = idle_since = time.monotonic()
    while True:
        if due(adir, min_bytes=1, names=names):
            res = compact(home, key=key, wait=False, recover=False, max_bytes=pass_bytes)
            if res.busy:
                return 0  # another compactor is at it; the writer starts us again if needed
            _give_back_memory()
            if _resident_bytes() > max_rss_bytes:
                return RETIRED
            idle_since = time.monotonic()
            if res.segments:
                continue  # more may wait: no pause between passes
        elif time.monotonic() - idle_since >= idle_exit_s:
            return 0
        elif normal_for_s is not None and time.monotonic() - started >= normal_for_s:
            return CAUGHT_UP
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    """``python -m tooltrace.audit._autocompact --home H``: the audit key on standard input."""
    import argparse  # only the compaction process parses arguments; a writer imports this too

    ap = argparse.ArgumentParser(prog="python -m tooltrace.audit._autocompact")
    ap.add_argument("--home", required=True, type=Path)
    ap.add_argument("--poll-s", type=float, default=POLL_S)
    ap.add_argument("--idle-exit-s", type=float, default=IDLE_EXIT_S)
    ap.add_argument("--priority", choices=("idle", "normal"), default="idle")
    ap.add_argument("--pass-bytes", type=int, default=PASS_BYTES)
    ap.add_argument("--max-rss-bytes", type=int, default=MAX_RSS_BYTES)
    ap.add_argument("--normal-for-s", type=float, default=NORMAL_FOR_S)
    ns = ap.parse_args(argv)
    key = sys.stdin.buffer.readline().strip()
    if not key:
        print("no audit key on standard input", file=sys.stderr)
        return 2
    if ns.priority == "idle":
        lower_priority()
    import pyarrow as pa

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    return run(ns.home, key, poll_s=ns.poll_s, idle_exit_s=ns.idle_exit_s,
               pass_bytes=ns.pass_bytes, max_rss_bytes=ns.max_rss_bytes,
               normal_for_s=ns.normal_for_s if ns.priority == "normal" else None)


if __name__ == "__main__":
    raise SystemExit(main())
