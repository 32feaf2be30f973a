"""A started command's process group and its bounded output streams.

:class:`ProcessTree` starts the program in its own session, drains stdout and stderr through
one selector loop into two :class:`OutputCapture` buffers (head and tail kept, the middle
counted), and on deadline or stop kills the whole group and confirms it is gone.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..runtime import CallContext, Launch
    from ._run_command import CommandConfig

__all__ = ["OutputCapture", "ProcessTree", "report_output"]

_READ_CHUNK = 64 * 1024
# A cwd under this prefix names a directory descriptor the caller holds open (see ProcessTree).
_FD_DIR = "/proc/self/fd/"


class OutputCapture:
    """One output stream, bounded: everything up to the limit, then only its head and tail."""

    __slots__ = ("_head_cap", "_lock", "_tail_cap", "head", "on_feed", "tail", "total")

    def __init__(self, limit: int) -> None:
        self._head_cap = limit // 2
        self._tail_cap = limit - limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._lock = threading.Lock()
        #: Called with each chunk after it was taken (progress reporting); must not raise.
        self.on_feed: Callable[[bytes], None] | None = None

    def feed(self, data: bytes) -> None:
        """Take one chunk read from the pipe."""
        with self._lock:
            self.total += len(data)
            room = self._head_cap - len(self.head)
            if room > 0:
                self.head += data[:room]
                data = data[room:]
            if data:
                self.tail += data
                extra = len(self.tail) - self._tail_cap
                if extra > 0:
                    del self.tail[:extra]

    @property
    def omitted(self) -> int:
        """Bytes dropped from the middle because the stream outgrew the limit."""
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        """What was kept, as text; a note marks the omitted middle."""
        with self._lock:
            head, tail, omitted = bytes(self.head), bytes(self.tail), self.omitted
        if not omitted:
            return (head + tail).decode("utf-8", "replace")
        return (head.decode("utf-8", "replace")
                + f"\n... [{omitted} bytes omitted] ...\n"
                + tail.decode("utf-8", "replace"))

    def last(self, n: int) -> str:
        """The last ``n`` bytes kept, as text (a cut multi-byte character is dropped)."""
        with self._lock:
            data = bytes(self.head + self.tail) if not self.omitted else bytes(self.tail)
        return data[-n:].decode("utf-8", "ignore") if n > 0 else ""


def report_output(ctx: CallContext, tree: ProcessTree) -> None:
    """Report a command's output as its progress: bytes and lines written so far (no total;
    rate-limited by ``ctx.progress``). Never the output's text: a chunk can end inside a
    secret the redactor would only recognise whole."""
    lines = [0]

    def on_feed(chunk: bytes) -> None:
        try:
            lines[0] += chunk.count(b"\n")
            ctx.progress(tree.stdout.total + tree.stderr.total, None,
                         f"{lines[0]} lines of output")
        except Exception:
            pass  # progress is for watching: it never fails the command

    tree.stdout.on_feed = tree.stderr.on_feed = on_feed


def _group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` is alive (zombies count as dead)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Something answers: it may only be zombies waiting for their reaper.
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        rest = raw[raw.rfind(b")") + 2:].split()
        if len(rest) > 2 and int(rest[2]) == pgid and rest[0] not in (b"Z", b"X"):
            return True
    return False


class ProcessTree:
    """A started command, its process group and its two output streams.

    ``run()`` drains the output until the program and its group are done, or until ``stop()``
    is called or ``deadline`` passes; then it kills the group and reports whether it could
    confirm the group is gone.

    ``cwd`` may be ``/proc/self/fd/N``, a directory this process holds open as descriptor N
    (what ``run_command`` passes). The child changes into it itself, and there ``/proc/self`` is
    the child, so N is handed down (``pass_fds``, documented to survive ``close_fds``); the
    kernel takes that name to the open directory, not to a path looked up again (without a
    mounted ``/proc`` the start fails: it never falls back to a name). ``os.fchdir`` in a
    ``preexec_fn`` would do the same, but it runs Python between fork and exec in a threaded
    process (it can deadlock on a lock another thread held at the fork). The program keeps
    descriptor N: it names the directory the program starts in, so it grants nothing more.

    ``launch`` says what to execute (the sandbox's launcher and the command) with which
    environment; the tree owns it from here: it is closed (the command's private temporary
    directory removed) when ``run()`` ends, or at once if the start fails.
    """

    def __init__(
        self,
        launch: Launch,
        *,
        cwd: str,
        config: CommandConfig,
        kill_grace_s: float,
    ) -> None:
        self.launch = launch
        self.config = config
        self.kill_grace_s = kill_grace_s
        self.stdout = OutputCapture(config.max_capture_bytes)
        self.stderr = OutputCapture(config.max_capture_bytes)
        self.started = time.monotonic()
        self.ended: float | None = None
        self.stop_reason: str | None = None
        self.deadline: float | None = None
        self.stragglers_killed = False
        self.confirmed = True
        self._wake_lock = threading.Lock()
        self._wake_open = True
        try:
            self._wake_r, self._wake_w = os.pipe()
        except BaseException:
            launch.close()
            raise
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        held = cwd[len(_FD_DIR):] if cwd.startswith(_FD_DIR) else ""
        try:
            self.proc = subprocess.Popen(
                launch.argv, cwd=cwd, env=launch.env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                close_fds=True,
                pass_fds=((int(held),) if held.isdecimal() else ()) + launch.pass_fds,
            )
        except BaseException:
            os.close(self._wake_r)
            os.close(self._wake_w)
            launch.close()
            raise
        try:
            launch.started()
        except BaseException:
            # The launcher failed before the program ran: reap it and report why.
            self.proc.wait()
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
            launch.close()
            raise
        self.pid = self.proc.pid
        self.pgid = self.proc.pid  # a session leader's group id is its pid

    @property
    def returncode(self) -> int | None:
        """The program's exit code (negative: killed by that signal), None while it runs."""
        return self.proc.returncode

    @property
    def duration_s(self) -> float:
        """Seconds since start (until the end once it ended)."""
        return (self.ended or time.monotonic()) - self.started

    def stop(self, reason: str) -> None:
        """Ask ``run()`` to kill the group now (thread-safe; the first reason wins)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.wake()

    def wake(self) -> None:
        """Make ``run()`` look at ``stop_reason`` and ``deadline`` again."""
        with self._wake_lock:
            # Once run() closed the pipe its descriptor number may belong to another file.
            if self._wake_open:
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"x")

    def run(self, deadline: float | None = None,
            on_deadline: Callable[[], object] | None = None) -> None:
        """Drain output until the group is done, stopped or past ``deadline``; clean up.

        ``deadline`` is kept in ``self.deadline``, which another thread may change (then
        ``wake()``): a background job that is detached at shutdown loses its deadline.
        """
        self.deadline = deadline
        sel = selectors.DefaultSelector()
        pidfd = -1
        streams = 0
        try:
            assert self.proc.stdout is not None and self.proc.stderr is not None
            for pipe, cap in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr)):
                os.set_blocking(pipe.fileno(), False)
                sel.register(pipe.fileno(), selectors.EVENT_READ, cap)
                streams += 1
            sel.register(self._wake_r, selectors.EVENT_READ, "wake")
            try:
                pidfd = os.pidfd_open(self.pid)
                sel.register(pidfd, selectors.EVENT_READ, "exit")
            except (AttributeError, OSError):
                pidfd = -1
            exited_at: float | None = None
            while self.stop_reason is None:
                now = time.monotonic()
                if exited_at is None and pidfd < 0 and self.proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and streams == 0:
                    break
                timeout: float | None = None if pidfd >= 0 else 0.05
                deadline = self.deadline
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        if on_deadline is not None:
                            on_deadline()
                        self.stop("deadline")
                        break
                    timeout = left if timeout is None else min(timeout, left)
                if exited_at is not None:
                    # The program is gone but a group member still holds its output open.
                    left = exited_at + self.config.linger_s - now
                    if left <= 0:
                        break
                    timeout = left if timeout is None else min(timeout, left)
                for key, _ in sel.select(timeout):
                    if key.data == "wake":
                        with contextlib.suppress(OSError):
                            os.read(self._wake_r, 512)
                    elif key.data == "exit":
                        sel.unregister(pidfd)
                        self.proc.wait()
                        exited_at = time.monotonic()
                    elif self._read(key.fd, key.data):
                        sel.unregister(key.fd)
                        streams -= 1
            if self.stop_reason is not None:
                self.confirmed = self._kill(sel)
            elif _group_alive(self.pgid):
                self.stragglers_killed = True
                self.confirmed = self._kill(sel)
            self._drain(sel, 0.2)
            if self.proc.returncode is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(1.0)
        finally:
            self.ended = time.monotonic()
            sel.close()
            with self._wake_lock:
                self._wake_open = False
                for fd in (pidfd, self._wake_r, self._wake_w):
                    if fd >= 0:
                        with contextlib.suppress(OSError):
                            os.close(fd)
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            self.launch.close()

    @staticmethod
    def _read(fd: int, cap: OutputCapture) -> bool:
        """Read what is available; True at end of stream."""
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if not chunk:
            return True
        cap.feed(chunk)
        if cap.on_feed is not None:
            cap.on_feed(chunk)
        return False

    def _drain(self, sel: selectors.BaseSelector, timeout_s: float) -> None:
        """Read what is left in the pipes (bounded: an escaped process may hold them open)."""
        end = time.monotonic() + timeout_s
        while True:
            keys = [k for k in sel.get_map().values() if isinstance(k.data, OutputCapture)]
            left = end - time.monotonic()
            if not keys or left <= 0:
                return
            for key, _ in sel.select(left):
                if isinstance(key.data, OutputCapture) and self._read(key.fd, key.data):
                    sel.unregister(key.fd)

    def _kill(self, sel: selectors.BaseSelector) -> bool:
        """SIGTERM the group, SIGKILL it after the grace; True once no member is alive."""
        if not self._signal(signal.SIGTERM):
            return True
        if self._wait_gone(sel, self.kill_grace_s):
            return True
        self._signal(signal.SIGKILL)
        # SIGKILL cannot be ignored; only a process stuck in the kernel outlasts this.
        return self._wait_gone(sel, 10.0)

    def _signal(self, sig: int) -> bool:
        self.proc.poll()
        if not _group_alive(self.pgid):
            return False
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            return False
        return True

    def _wait_gone(self, sel: selectors.BaseSelector, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        pause = 0.001
        while True:
            self.proc.poll()
            if not _group_alive(self.pgid):
                return True
            if time.monotonic() >= end:
                return False
            # Keep draining: a process handling SIGTERM may block on a full pipe.
            self._drain(sel, pause)
            pause = min(pause * 2, 0.02)
