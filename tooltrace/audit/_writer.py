"""One process's append-only audit segment: hash chain, checkpoints, fsync policy, rotation.

Each writer process owns its own segment file, so writers never wait for each other: the only
lock on the hot path is an in-process ``threading.Lock`` (the background worker and, in strict
mode, the calling threads share one writer). Opening and sealing a segment (rare: at rotation and
shutdown) also append one entry to the segment digest (``_manifest``) under its file lock. A
record is *acknowledged* once it is written and, depending on the fsync policy, synced:
``acked_seq`` and the ``on_ack`` callback say which.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._files import fsync_path, write_all
from ._format import FORMAT_VERSION, checkpoint_mac, dumps, genesis_hash
from ._manifest import DROPPED, OPENED, SEALED, append_digest
from ._segments import opening_name, segment_name
from ._signing import Signer, resolve_signer

__all__ = ["Ack", "FsyncPolicy", "SegmentWriter", "new_writer_id"]


class FsyncPolicy(enum.StrEnum):
    """When a written record is synced to disk (and so acknowledged).

    ``record``: each record is written and fsynced on its own before it is acknowledged.
    ``grouped`` (default): each batch (whatever arrived within the group interval, up to the
    group size) is written with one ``write`` and one ``fsync``, then acknowledged.
    ``none``: written to the kernel and acknowledged, never fsynced: survives a process crash,
    not a power loss.
    """

    RECORD = "record"
    GROUPED = "grouped"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Ack:
    """Records that just became acknowledged: the writer's seq now durable and their call ids."""

    writer: str
    segment: int
    seq: int
    call_ids: tuple[str, ...]


def new_writer_id() -> str:
    """A writer id that sorts by start time and is unique across processes and restarts."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{os.urandom(3).hex()}"


def _now_us() -> int:
    return time.time_ns() // 1000


#: Size of the writer's one write buffer: a batch's lines are copied into it and it is written
#: whenever it is full and at the end of the batch. It is allocated once per writer and reused,
#: never freed and reallocated: a batch built as one fresh string each time (2,048 records of
#: ~1 KiB, after a copy per record for each splice) made multi-MiB transient allocations on the
#: writer thread that glibc kept, fragmented and resident, in that thread's arena, and freeing
#: such a block raises glibc's mmap and trim thresholds for every arena of the process. 1 MiB
#: keeps a default batch to two or three ``write`` calls (each lets the call path take the
#: GIL for a switch interval, which slows the writer down).
WRITE_BUFFER = 1024 * 1024


class SegmentWriter:
    """Appends hash-chained lines to this process's live segment.

    Not for direct use by most callers: ``AuditSink`` drives it. ``signer`` signs and anchors
    checkpoints, seals, approvals, digest entries (default: the home's; None: unsigned). Methods
    raise ``OSError`` when the disk refuses a write; the writer then rolls the file back to its
    last good length (or, if even that fails, abandons the segment for a fresh one) so the chain
    stays intact.
    """

    def __init__(
        self,
        adir: Path,
        key: bytes,
        *,
        fsync: FsyncPolicy = FsyncPolicy.GROUPED,
        max_bytes: int = 64 * 1024 * 1024,
        max_age_s: float = 600.0,
        checkpoint_every: int = 1000,
        on_ack: Callable[[Ack], None] | None = None,
        signer: Signer | Literal["home"] | None = "home",
    ) -> None:
        self._adir = adir
        self._signer = resolve_signer(signer, adir, create=True)
        self._dir = adir / "segments"
        self._key = key
        self.fsync = fsync
        self._max_bytes = max_bytes
        self._max_age_s = max_age_s
        self._ckpt_every = checkpoint_every
        self._on_ack = on_ack
        self.lock = threading.Lock()
        self._buf: bytearray | None = None
        self._pos = 0
        self._reset()

    def _reset(self) -> None:
        self.writer_id = new_writer_id()
        self._fd: int | None = None
        self._segment = 0
        self._seq = 0
        self._prev = genesis_hash(self.writer_id)
        self._size = self._opened_size = 0
        self._opened_at = 0.0
        self._since_ckpt = 0
        self._seg_records = 0
        from ._anchors import PendingAnchors  # with the anchors file, at the first record

        self._pending = PendingAnchors(self._signer.anchors if self._signer else None)
        self._unsynced = False
        self.acked_seq = 0
        self.acked_records = 0
        self._owner_pid = os.getpid()

    @property
    def segment(self) -> int:
        """Number of the current (or last) segment."""
        return self._segment

    @property
    def seq(self) -> int:
        """Seq of the last line written."""
        return self._seq

    # -- lines ----------------------------------------------------------------------------

    def _chain(self, encoded: bytes | dict[str, Any]) -> tuple[bytes, bytes]:
        """Chain one record: ``encoded`` is its JSON object (bytes, or fields to encode).

        Returns ``(encoded, tail)``: the line is ``encoded`` without its closing brace, then
        ``tail`` (seq, hash, brace, newline): the same bytes as ``seal_line(body,
        chain_hash(prev, body))`` with ``body`` the object plus its seq, without building
        ``body`` or the line as strings of their own.
        """
        if not isinstance(encoded, bytes):
            if self._signer is not None and encoded.get("k") == "a":  # an approver's answer:
                encoded = {**encoded, "head": self._prev}  # signed over the chain before it
                self._signer.sign_line(self.writer_id, self._segment, self._seq + 1, encoded)
            encoded = dumps(encoded)
        self._seq += 1
        # The seq goes in as the object's last field: a splice, not a second encode.
        seq = b',"seq":%d' % self._seq
        h = hashlib.sha256(self._prev.encode())
        with memoryview(encoded) as view, view[:-1] as head:
            h.update(head)
        h.update(seq)
        h.update(b"}")
        hx = h.hexdigest()
        self._prev = hx
        return encoded, b'%b,"h":"%b"}\n' % (seq, hx.encode())

    def _line(self, encoded: bytes | dict[str, Any]) -> bytes:
        """One chained line (for lines written on their own: headers, checkpoints, seals)."""
        encoded, tail = self._chain(encoded)
        return encoded[:-1] + tail

    def _put_line(self, encoded: bytes | dict[str, Any]) -> None:
        """Chain one record into the write buffer, writing the buffer out first when the line
        does not fit: a buffer write always ends at a line's end, so a crash between two of
        them never leaves half a line."""
        encoded, tail = self._chain(encoded)
        buf = self._buf
        if buf is None:
            buf = self._buf = bytearray(WRITE_BUFFER)
        n = len(encoded) - 1  # the line holds the object without its closing brace
        size = n + len(tail)
        if self._pos + size > len(buf):
            self._write_buffer()
            if size > len(buf):  # a line larger than the whole buffer goes out on its own
                self._write_direct(encoded[:-1] + tail)
                return
        pos = self._pos
        # Same-size slice assignments: copies into the buffer, never a resize. The brace is
        # copied too and overwritten by the tail.
        buf[pos : pos + n + 1] = encoded
        pos += n
        buf[pos : pos + len(tail)] = tail
        self._pos = pos + len(tail)

    def _write_direct(self, data: bytes | bytearray | memoryview) -> None:
        assert self._fd is not None
        write_all(self._fd, data)
        self._size += len(data)
        self._unsynced = True

    def _write_buffer(self) -> None:
        pos, self._pos = self._pos, 0
        if pos and self._buf is not None:
            with memoryview(self._buf) as view, view[:pos] as used:
                self._write_direct(used)

    def _lines(self, records: Sequence[bytes | dict[str, Any]]) -> list[bytes]:
        """Chain records into lines, with a keyed checkpoint after every N records."""
        out = []
        for fields in records:
            out.append(self._line(fields))
            self._since_ckpt += 1
            self._seg_records += 1
            if self._since_ckpt >= self._ckpt_every:
                out.append(self._line(self._checkpoint_fields("ckpt")))
                self._since_ckpt = 0
        return out

    def _mark(self) -> tuple[int, str, int, int]:
        return self._seq, self._prev, self._size, self._seg_records

    def _rollback(self, mark: tuple[int, str, int, int]) -> None:
        self._seq, self._prev, size, self._seg_records = mark
        self._size = size
        self._pending.drop_after(self._seq)
        fd = self._fd
        if fd is None:
            return
        try:
            os.ftruncate(fd, size)
        except OSError:
            # Cannot undo the partial write: leave this segment to recovery (its torn tail is
            # quarantined then) and start a fresh one on the next append.
            self._abandon()

    def _abandon(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        # A new segment of the same writer would chain from a state nobody can check; a new
        # writer id starts a clean chain.
        self._reset()

    def _write(self, data: bytes, mark: tuple[int, str, int, int]) -> None:
        assert self._fd is not None
        try:
            write_all(self._fd, data)
        except OSError:
            self._rollback(mark)
            raise
        self._size += len(data)
        self._unsynced = True

    def _sync(self) -> None:
        if self._fd is not None and self._unsynced:
            os.fsync(self._fd)
            self._unsynced = False

    # -- segments -------------------------------------------------------------------------

    def _open(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        self._segment += 1
        n = self._segment
        live = self._dir / segment_name(self.writer_id, n, live=True)
        tmp = self._dir / opening_name(self.writer_id, n)
        # Create under a private name, lock, write the header, record the segment in the
        # digest, then rename into view: a reader never sees a live segment whose writer has
        # not yet taken the lock, nor one the digest does not name.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        mark = self._mark()
        recorded = False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            header = {
                "k": "open",
                "v": FORMAT_VERSION,
                "writer": self.writer_id,
                "segment": n,
                "pid": os.getpid(),
                "ts": _now_us(),
            }
            data = self._line(header)
            write_all(fd, data)
            sync = self.fsync is not FsyncPolicy.NONE
            if sync:
                os.fsync(fd)
            append_digest(self._adir, self._key, [{"k": OPENED, "writer": self.writer_id, "n": n,
                                            "pid": os.getpid()}], sync=sync,
                          signer=self._signer)
            recorded = True
            os.rename(tmp, live)
            if sync:
                fsync_path(self._dir)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            self._seq, self._prev, _, _ = mark
            if recorded:
                # The digest names a segment that never came into view: say so, and go on as
                # a new writer (this one's chain would skip a segment).
                with contextlib.suppress(OSError):
                    append_digest(self._adir, self._key, [{"k": DROPPED, "writer": self.writer_id,
                                                    "n": n, "reason": "open failed"}],
                                  signer=self._signer)
                self._reset()
            else:
                self._segment -= 1
            raise
        self._fd = fd
        self._size = self._opened_size = len(data)
        self._opened_at = time.monotonic()
        self._since_ckpt = 0
        self._seg_records = 0
        self._unsynced = False

    def _checkpoint_fields(self, kind: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        head = self._prev
        nxt = self._seq + 1
        fields: dict[str, Any] = {"k": kind, "ts": _now_us(), "head": head,
                                  "records": self._seg_records, **(extra or {})}
        if self._signer is not None:
            self._pending.add(self._signer.sign_line(self.writer_id, self._segment, nxt, fields))
        fields["mac"] = checkpoint_mac(self._key, self.writer_id, self._segment, nxt, head, fields)
        return fields

    def _write_checkpoint(self, kind: str, extra: dict[str, Any] | None = None) -> None:
        fields = self._checkpoint_fields(kind, extra)
        mark = self._mark()
        self._write(self._line(fields), mark)
        self._since_ckpt = 0

    def _seal(self, final: bool) -> None:
        """Write the seal line, sync, and rename the segment to its sealed name."""
        fd = self._fd
        if fd is None:
            return
        self._write_checkpoint("seal", {"reason": "close" if final else "rotate", "final": final})
        os.fsync(fd)
        self._unsynced = False
        self._pending.flush(sync=self.fsync is not FsyncPolicy.NONE)
        live = self._dir / segment_name(self.writer_id, self._segment, live=True)
        os.rename(live, self._dir / segment_name(self.writer_id, self._segment, live=False))
        fsync_path(self._dir)
        os.close(fd)
        self._fd = None
        # The seal line is keyed and the file is sealed: if the digest cannot take the entry,
        # ``verify`` reads the state as a writer that stopped right here, not as tampering.
        with contextlib.suppress(OSError):
            append_digest(self._adir, self._key, [{
                "k": SEALED, "writer": self.writer_id, "n": self._segment,
                "last_h": self._prev, "last_seq": self._seq, "final": final,
                "reason": "close" if final else "rotate"}],
                sync=self.fsync is not FsyncPolicy.NONE, signer=self._signer)

    def _maybe_rotate(self) -> None:
        # By age only once the segment holds more than its header: an idle writer would
        # otherwise seal (and compaction then read) one empty segment per period.
        if self._fd is not None and (
            self._size >= self._max_bytes
            or (self._size > self._opened_size
                and time.monotonic() - self._opened_at >= self._max_age_s)
        ):
            self._seal(final=False)
            # Open the successor now: the sealed segment promises one, and an empty successor
            # is what a clean shutdown then seals as final.
            self._open()

    # -- public (callers hold ``lock``) ---------------------------------------------------

    def _write_lines(self, records: Iterable[bytes | dict[str, Any]]) -> int:
        """Chain records through the write buffer and write them; return how many.

        Raises whatever writing (``OSError``) or producing a record raised, with the buffer
        emptied; the caller rolls the file and the chain back.
        """
        n = 0
        try:
            for fields in records:
                self._put_line(fields)
                n += 1
                self._since_ckpt += 1
                self._seg_records += 1
                if self._since_ckpt >= self._ckpt_every:
                    self._put_line(self._checkpoint_fields("ckpt"))
                    self._since_ckpt = 0
            self._write_buffer()
        finally:
            self._pos = 0
        return n

    def append(
        self, records: Iterable[bytes | dict[str, Any]], call_ids: Sequence[str], *,
        durable: bool,
    ) -> int:
        """Write records (each its JSON object, or the fields to encode; without seq and hash);
        return the last acknowledged seq.

        ``records`` may be a lazy iterable (the audit worker encodes each record as it is
        written, so a batch never exists as encoded strings all at once).
        ``durable`` forces an fsync before returning whatever the policy (strict mode).
        Raises ``OSError`` if the records could not be written (or whatever producing a record
        raised); none of them is then on disk as a complete line.
        """
        if os.getpid() != self._owner_pid:
            # Forked child that did not go through ``after_fork``: never write into the
            # parent's chain; start a writer of its own.
            self._fd = None
            self._reset()
        if self._fd is None:
            self._open()
        if self.fsync is FsyncPolicy.RECORD:
            for fields, cid in zip(records, call_ids, strict=True):
                mark = self._mark()
                since = self._since_ckpt
                try:
                    self._write(b"".join(self._lines([fields])), mark)
                except OSError:
                    self._since_ckpt = since
                    raise
                self._sync()
                self._acked(1, (cid,))
        else:
            mark = self._mark()
            since = self._since_ckpt
            try:
                n = self._write_lines(records)
            except BaseException:
                self._since_ckpt = since
                self._rollback(mark)
                raise
            if durable or self.fsync is FsyncPolicy.GROUPED:
                self._sync()
            self._acked(n, tuple(call_ids))
        self._pending.flush(sync=False)  # the idle checkpoint's and the seal's sync the file
        self._maybe_rotate()
        return self.acked_seq

    def after_fork(self) -> None:
        """Forget the parent's segment in a forked child (the parent keeps writing it)."""
        fd = self._fd
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        self.lock = threading.Lock()
        self._reset()

    def _acked(self, n: int, call_ids: tuple[str, ...]) -> None:
        self.acked_seq = self._seq
        self.acked_records += n
        cb = self._on_ack
        if cb is not None:
            try:
                cb(Ack(self.writer_id, self._segment, self._seq, call_ids))
            except Exception:
                pass

    def open(self) -> None:
        """Open a segment now if none is open (``append`` opens one when it needs it)."""
        if self._fd is None and os.getpid() == self._owner_pid:
            self._open()

    def tick(self) -> None:
        """Idle duties: checkpoint records not yet covered, sync, and rotate by age."""
        if self._fd is None:
            return
        if self._since_ckpt:
            self._write_checkpoint("ckpt")
            if self.fsync is not FsyncPolicy.NONE:
                self._sync()
            self._pending.flush(sync=self.fsync is not FsyncPolicy.NONE)
        self._maybe_rotate()

    def close(self) -> None:
        """Seal the current segment as the writer's last."""
        if self._fd is not None and os.getpid() == self._owner_pid:
            self._seal(final=True)
        self._buf = None
