"""``AuditSink``: the durable audit trail of every call, off the call path by default."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._settings import (
    TOOLTRACE_AUDIT_FSYNC,
    TOOLTRACE_AUDIT_STRICT,
    audit_compact,
    audit_fsync,
    audit_strict,
    resolve_home,
)
from ..audit import (
    BackgroundCompaction,
    CompactionBacklog,
    FsyncPolicy,
    LiveProgress,
    SegmentWriter,
    WriterBacklog,
    audit_dir,
    encode_approval,
    encode_call_bytes,
    encode_late,
    load_key,
    load_signer,
    secret_values,
)
from ..exceptions import AuditUnavailableError, ConfigurationError
from ..model import CallRecord
from ..sinks import ApprovalRecord, LateStep, RegistryState
from ._worker import BatchWorker, on_fork_in_child

if TYPE_CHECKING:
    from ..audit import Ack, Recovered, Signer

__all__ = [
    "TOOLTRACE_AUDIT_FSYNC",
    "TOOLTRACE_AUDIT_STRICT",
    "AuditSink",
]


def _policy(explicit: FsyncPolicy | str | None) -> FsyncPolicy:
    raw = audit_fsync(explicit)
    try:
        return FsyncPolicy(raw)
    except ValueError:
        raise ConfigurationError(
            f"{TOOLTRACE_AUDIT_FSYNC} must be one of record, grouped, none; got {str(raw)[:20]!r}"
        ) from None


class AuditSink:
    """Writes one audit line per call (with its steps) to this process's segment file.

    Args:
        home: tooltrace home (explicit > ``TOOLTRACE_HOME`` > the current directory's home in
            the user's state directory); records go to ``<home>/audit/segments/``.
        strict: refuse calls whose intent cannot be made durable (``write_intent`` raises
            ``AuditUnavailableError``), and write each final record synchronously with fsync.
        fsync: ``record`` | ``grouped`` | ``none`` (see ``FsyncPolicy``).
        group_interval_ms: how long the background worker gathers records before one write
            and (``grouped``) one fsync.
        group_max_records: a batch is written as soon as this many records wait.
        max_queue: records waiting beyond this are dropped and counted in ``dropped``.
        segment_max_bytes / segment_max_age_s: when a segment is sealed and a new one begun
            (by size, or by age once it holds a record).
        compact: compact sealed segments in the background (``tooltrace.audit._autocompact``:
            a low-priority process this sink starts when there is work; default
            ``TOOLTRACE_AUDIT_COMPACT``, else on). ``compaction_backlog`` says how far behind.
        checkpoint_every / checkpoint_interval_s: keyed checkpoints every N records, and after
            this many idle seconds when records are not yet covered by one.
        key: checkpoint key (default ``TOOLTRACE_AUDIT_KEY``, else ``<home>/audit.key``).
            Checkpoints, seals and approvals are also signed with the home's Ed25519 key
            (``TOOLTRACE_SIGNING_KEY``, else ``<home>/keys/signing.ed25519``, made on first
            use) and each signed checkpoint head is appended to ``<home>/anchors/``.
        on_ack: called (on the writing thread) with an ``Ack`` whenever records become
            acknowledged, i.e. written and synced as the policy says.
    """

    name = "audit"

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        strict: bool | None = None,
        fsync: FsyncPolicy | str | None = None,
        group_interval_ms: float = 50.0,
        group_max_records: int = 2048,
        max_queue: int = 65536,
        segment_max_bytes: int = 16 * 1024 * 1024,
        segment_max_age_s: float = 600.0,
        compact: bool | None = None,
        checkpoint_every: int = 1000,
        checkpoint_interval_s: float = 1.0,
        key: bytes | None = None,
        on_ack: Callable[[Ack], None] | None = None,
    ) -> None:
        if checkpoint_every < 1 or checkpoint_interval_s <= 0 or segment_max_bytes < 1:
            raise ConfigurationError("checkpoint and segment limits must be positive")
        self.home = resolve_home(home)
        self.strict = audit_strict(strict)
        self.fsync = _policy(fsync)
        self._key = key
        self._writer_args: dict[str, Any] = {
            "fsync": self.fsync,
            "max_bytes": segment_max_bytes,
            "max_age_s": segment_max_age_s,
            "checkpoint_every": checkpoint_every,
            "on_ack": self._acked,
        }
        self._on_ack = on_ack
        self.compact = audit_compact(compact)
        #: The background compaction this sink starts (None until it writes, and when off).
        self.compaction: BackgroundCompaction | None = None
        self._backlog = WriterBacklog(self.audit_dir)
        # Calls among the records being appended now: the acknowledgement counts them.
        self._calls_in_append = 0
        self._writer: SegmentWriter | None = None
        self._signer: Signer | None = None
        self._init_lock = threading.Lock()
        self._ckpt_interval = checkpoint_interval_s
        self._lost = 0
        self.last_error: str | None = None
        self.recovered: list[Recovered] = []
        self._worker: BatchWorker[CallRecord | LateStep | ApprovalRecord] = BatchWorker(
            "audit",
            self._export,
            max_queue=max_queue,
            max_batch=group_max_records,
            interval_s=group_interval_ms / 1000.0,
            on_error=self._note_error,
        )
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self._open_early = False
        #: The progress of this process's calls in flight, for other processes (``tail``).
        self.live: LiveProgress | None = None
        self._live_sub: Any = None
        on_fork_in_child(self._after_fork_in_child)  # after its worker's, registered above

    # -- state ------------------------------------------------------------------------------

    @property
    def audit_dir(self) -> Path:
        """``<home>/audit``."""
        return audit_dir(self.home)

    @property
    def dropped(self) -> int:
        """Records lost: queue full, shut down, or the disk refused them (non-strict)."""
        return self._worker.dropped + self._lost

    @property
    def depth(self) -> int:
        """Records waiting to be written (the audit backlog)."""
        return self._worker.depth

    @property
    def acked_seq(self) -> int:
        """Seq (in this writer's chain) of the last acknowledged line; 0 before any."""
        w = self._writer
        return 0 if w is None else w.acked_seq

    @property
    def acked_records(self) -> int:
        """How many records this writer has acknowledged."""
        w = self._writer
        return 0 if w is None else w.acked_records

    @property
    def writer_id(self) -> str | None:
        """This process's writer id (names its segment files), once it has written."""
        w = self._writer
        return None if w is None else w.writer_id

    @property
    def compaction_backlog(self) -> CompactionBacklog:
        """What this sink wrote that compaction has not taken yet: calls, bytes and the age
        of the oldest (as of the ticker's last look, at most a few seconds ago)."""
        return self._backlog.snapshot()

    def _acked(self, ack: Ack) -> None:
        calls, self._calls_in_append = self._calls_in_append, 0
        self._backlog.add(ack.writer, ack.segment, calls)
        cb = self._on_ack
        if cb is not None:
            cb(ack)

    def recorded(self, call_id: str) -> bool:
        """Whether this home's trail already holds a call (or an intent) with ``call_id``
        (``tooltrace.audit.recorded``; raises ``OSError`` when the trail cannot be read)."""
        # The lookup modules are loaded by the first call that names its own id, not at start.
        from ..audit import recorded

        return recorded(self.audit_dir, call_id)

    def _note_error(self, exc: BaseException) -> None:
        self.last_error = type(exc).__name__

    def _get_writer(self) -> SegmentWriter:
        w = self._writer
        if w is not None:
            return w
        with self._init_lock:
            if self._writer is None:
                key = self._key if self._key is not None else load_key(self.home, create=True)
                assert key is not None
                self._key = key
                if self._signer is None:
                    self._signer = load_signer(self.home, create=True)
                self._writer = SegmentWriter(self.audit_dir, key, signer=self._signer,
                                             **self._writer_args)
                if self.compact:
                    self.compaction = BackgroundCompaction(self.home, key)
                self._start_ticker()
            return self._writer

    def open_segment(self) -> None:
        """Open this process's segment now, not at its first record: the keys are loaded here
        (created in a new home), the segment opened in the background.

        Opening a segment syncs it, the digest and the directory: several ``fsync`` calls,
        which the first records otherwise wait for in the queue. A process that something
        outside may stop soon after its calls, such as the MCP proxy (its client signals it 2 s
        after closing stdin), calls this at start, so that its records are written by then
        rather than still queued behind the opening. Does nothing once a writer exists; never
        raises (a failure is ``last_error``; the first record tries again).
        """
        if self._writer is not None:
            return
        self._open_early = True
        try:
            self._get_writer()  # starts the ticker, which opens the segment first
        except Exception as exc:
            self.last_error = type(exc).__name__

    def bind(self, registry: RegistryState) -> None:
        """Register the trail's keys with the registry's redactor, so no tool output can carry
        them into a record; keep the progress of the registry's calls in flight in the live
        progress file (``tooltrace.audit.LiveProgress``): a subscriber of its ``progress``
        events."""
        try:
            # Made now, not at the first write, so both keys are known before any tool runs.
            with self._init_lock:
                if self._key is None:
                    self._key = load_key(self.home, create=True)
                if self._signer is None:
                    self._signer = load_signer(self.home, create=True)
            for value in secret_values(self.home):
                registry.register_secret(value)
        except (OSError, ConfigurationError) as exc:
            # The writer reports an unusable home when it opens its segment; bind never raises.
            self.last_error = type(exc).__name__
        if self._live_sub is None:
            self.live = LiveProgress(self.audit_dir)
            self._live_sub = registry.subscribe(self.live.on_progress, kinds=["progress"])

    # -- hot path ---------------------------------------------------------------------------

    def emit(self, record: CallRecord) -> None:
        """Queue one finished record (strict mode: write and sync it now). Never raises."""
        live = self.live
        if live is not None:  # even with nothing in flight: its progress may still be on the way
            live.finished(record.call_id)
        if not self.strict:
            self._worker.submit(record)
            return
        try:
            w = self._get_writer()
            with w.lock:
                self._calls_in_append = 1
                w.append([encode_call_bytes(record)], [record.call_id], durable=True)
        except Exception as exc:
            self._lost += 1
            self.last_error = type(exc).__name__

    def emit_late(self, late: LateStep) -> None:
        """Queue a step recorded after its call returned (strict mode: write it now)."""
        live = self.live
        if live is not None:
            live.finished(late.call_id)  # a background job's end: no longer in flight
        if not self.strict:
            self._worker.submit(late)
            return
        try:
            w = self._get_writer()
            with w.lock:
                w.append([encode_late(late)], [late.call_id], durable=True)
        except Exception as exc:
            self._lost += 1
            self.last_error = type(exc).__name__

    def emit_approval(self, approval: ApprovalRecord) -> None:
        """Queue an approver's answer, a record of its own in the chain (strict mode: write and
        sync it now, before the call it approves can run)."""
        if not self.strict:
            self._worker.submit(approval)
            return
        try:
            w = self._get_writer()
            with w.lock:
                w.append([encode_approval(approval)], [approval.call_id], durable=True)
        except Exception as exc:
            self._lost += 1
            self.last_error = type(exc).__name__

    def write_intent(
        self, call_id: str, run_id: str, tool: str, started_at_us: int, args_redacted: Any
    ) -> None:
        """Durably record that ``call_id`` is about to execute.

        Raises ``AuditUnavailableError`` when the intent cannot be written and synced, so the
        registry refuses the call (``stage=audit``).
        """
        fields = {
            "k": "i",
            "call_id": call_id,
            "run_id": run_id,
            "tool": tool,
            "started_at_us": started_at_us,
            "args": args_redacted,
        }
        try:
            w = self._get_writer()
            with w.lock:
                w.append([fields], [call_id], durable=True)
        except Exception as exc:
            self.last_error = type(exc).__name__
            reason = type(exc).__name__
            if isinstance(exc, OSError) and exc.strerror:
                reason = exc.strerror
            raise AuditUnavailableError(
                f"the audit intent could not be made durable ({reason}); call refused"
            ) from None

    # -- background -------------------------------------------------------------------------

    def _export(self, batch: list[CallRecord | LateStep | ApprovalRecord]) -> None:
        try:
            w = self._get_writer()
            # Each record is encoded as the writer reaches it and dropped once its line is in
            # the write buffer: a batch never exists as encoded strings all at once (2,048 of
            # them made multi-MiB transient allocations that glibc kept resident on this thread),
            # and no intermediate dict lives long enough to be promoted by the collector. The
            # batch is walked in slices that hand the interpreter back to the calls.
            bodies = (_encode(r) for r in self._worker.paced(batch))
            with w.lock:
                self._calls_in_append = sum(1 for r in batch if type(r) is CallRecord)
                w.append(bodies, [r.call_id for r in batch], durable=False)
        except Exception as exc:
            self._lost += len(batch)
            self.last_error = type(exc).__name__

    def _start_ticker(self) -> None:
        t = threading.Thread(target=self._tick_loop, name="tooltrace-audit-ticker", daemon=True)
        self._ticker = t
        t.start()

    def _tick_loop(self) -> None:
        if self._open_early:
            self._open_now()
        # Then: seal segments that crashed writers left behind (off the call path).
        key = self._key
        if key is not None:
            from ..audit import recover_dead_segments  # on the ticker, not at start

            try:
                self.recovered = recover_dead_segments(self.audit_dir, key, self._signer)
            except Exception as exc:
                self.last_error = type(exc).__name__
        # Compact what earlier writers left, if that is due, without waiting for a rotation.
        if self.compaction is not None:
            self.compaction.poke(force=True)
        while not self._stop.wait(self._ckpt_interval):
            self.tick()
            if self.compaction is not None:
                self.compaction.poke()

    def _open_now(self) -> None:
        w = self._writer
        if w is None:
            return
        try:
            with w.lock:
                if not self._stop.is_set():  # shutdown sets it before it seals, under the lock
                    w.open()
        except Exception as exc:
            self.last_error = type(exc).__name__

    def tick(self) -> None:
        """The audit ticker's periodic work: the live file, the idle checkpoint, rolling and
        sealing segments (run on the ticker thread)."""
        if self.live is not None:
            self.live.write()
        w = self._writer
        if w is None:
            return
        try:
            with w.lock:
                w.tick()
        except Exception as exc:
            self.last_error = type(exc).__name__
        try:
            self._backlog.refresh()
        except Exception as exc:
            self.last_error = type(exc).__name__

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Write and sync everything queued, then checkpoint it; False if the deadline passed."""
        ok = self._worker.flush(timeout_s)
        self.tick()
        return ok

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush within the deadline, seal the segment as final and stop the threads."""
        self._worker.shutdown(timeout_s)
        if self.live is not None:
            self.live.close()
        self._stop.set()
        t = self._ticker
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)
        w = self._writer
        if w is not None:
            try:
                with w.lock:
                    w.close()
            except Exception as exc:
                self.last_error = type(exc).__name__

    def _after_fork_in_child(self) -> None:
        self._init_lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = None
        self._open_early = False  # the child opens its own segment at its first record
        self._backlog = WriterBacklog(self.audit_dir)
        if self.compaction is not None:
            self.compaction.after_fork()
        w = self._writer
        if w is not None:
            w.after_fork()
            self._start_ticker()


def _encode(r: CallRecord | LateStep | ApprovalRecord) -> bytes | dict[str, Any]:
    if type(r) is CallRecord:
        return encode_call_bytes(r)
    if type(r) is ApprovalRecord:
        return encode_approval(r)
    return encode_late(r)  # type: ignore[arg-type]
