"""What the registry remembers of its calls: recent statuses, the ``unknown`` ones and their late
resolutions, the numbering of late steps, and the caller-supplied call ids already taken.

``StatusTable`` owns its lock. Recording a call's status (every call) takes no lock: each
``OrderedDict`` operation is atomic under the GIL, and a late resolution either finds the stored
status or leaves itself pending, which is checked *after* the store and merged under the lock.
Every table is bounded, so memory stays flat. What a table forgets is summed up in one
watermark, ``forgotten``: the greatest UUIDv7 call id it let go (UUIDv7 strings sort by time),
so a caller-supplied id at or below it is one the registry can no longer vouch for alone.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import threading
from collections.abc import Container

from .._ids import new_call_id
from ..model import CallStatus, Status, ToolResultEnvelope
from ..sinks import FIRST_LATE_SEQ

__all__ = ["StatusTable"]

_UNKNOWN = Status.UNKNOWN


class StatusTable:
    """The last ``recent`` calls' statuses, the last ``unknowns`` calls that ended ``unknown``
    (their handle is the call id a later status query resolves, so they are kept much longer),
    and the last ``claimed`` caller-supplied call ids."""

    def __init__(self, recent: int = 4096, unknowns: int = 10_000, claimed: int = 100_000,
                 minted: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._recent: collections.OrderedDict[str, CallStatus] = collections.OrderedDict()
        self._recent_cap = recent
        self._unknowns: collections.OrderedDict[str, CallStatus] = collections.OrderedDict()
        self._unknown_cap = unknowns
        # Resolutions that arrived before their call's status was stored.
        self._pending: dict[str, Status] = {}
        self._late_seq: dict[str, int] = {}
        self._claimed: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._claimed_cap = claimed
        # Ids this registry made for its callers (``mint``), until a call takes one.
        self._minted: collections.OrderedDict[str, bool] = collections.OrderedDict()
        self._minted_cap = minted
        self._tickets = itertools.count()
        #: The greatest UUIDv7 id any table has let go ("" before any).
        self.forgotten = ""

    def get(self, call_id: str) -> CallStatus | None:
        """The call's status, if it is still remembered."""
        return self._unknowns.get(call_id) or self._recent.get(call_id)

    def remember(self, envelope: ToolResultEnvelope) -> None:
        """Store a finished call's status (lock-free on the common path)."""
        call_id = envelope.call_id
        # get() looks in _unknowns first, so an unknown is stored there first: a resolution
        # landing between the two stores then updates the table get() reads.
        st = CallStatus(call_id, envelope.tool, envelope.status, None, envelope.summary)
        if envelope.status is _UNKNOWN:
            self._unknowns[call_id] = st
            if len(self._unknowns) > self._unknown_cap:
                self._forget(self._unknowns.popitem(last=False)[0])
        recent = self._recent
        recent[call_id] = st
        if len(recent) > self._recent_cap:
            self._forget(recent.popitem(last=False)[0])
        if self._pending:
            with self._lock:
                resolved = self._pending.pop(call_id, None)
                if resolved is not None:
                    self._store(CallStatus(call_id, envelope.tool, envelope.status, resolved,
                                           envelope.summary))

    def resolve(self, call_id: str, resolved: Status) -> None:
        """Record how a call that ended ``unknown`` really ended."""
        with self._lock:
            st = self._unknowns.get(call_id) or self._recent.get(call_id)
            if st is not None:
                self._store(CallStatus(call_id, st.tool, st.status, resolved, st.summary))
            else:
                self._pending[call_id] = resolved

    def _store(self, st: CallStatus) -> None:
        """Replace the call's status wherever it is kept (under the lock)."""
        for table in (self._unknowns, self._recent):
            if st.call_id in table:
                table[st.call_id] = st

    def next_late_seq(self, call_id: str) -> int:
        """The sequence number of the call's next late step (from ``FIRST_LATE_SEQ``)."""
        with self._lock:
            seq = self._late_seq.get(call_id, FIRST_LATE_SEQ)
            self._late_seq[call_id] = seq + 1
            if len(self._late_seq) > 10_000:
                self._late_seq.pop(next(iter(self._late_seq)))
        return seq

    def claim(self, call_id: str, running: Container[str]) -> bool:
        """Take a caller-supplied call id for one call; False when it is ``running`` or was
        recorded (a generated id is new by construction and is not looked up)."""
        if call_id in self._recent or call_id in self._unknowns or call_id in running:
            return False
        claimed = self._claimed
        ticket = next(self._tickets)
        # setdefault is one atomic operation: of two calls racing with one id, one wins.
        if claimed.setdefault(call_id, ticket) != ticket:
            return False
        if len(claimed) > self._claimed_cap:
            with contextlib.suppress(KeyError, StopIteration):
                self._forget(claimed.popitem(last=False)[0])
        return True

    def mint(self) -> str:
        """A fresh UUIDv7 id that ``vouched`` answers True for once (the last ``minted``
        ones: an id minted long ago and never used is looked up like any other)."""
        call_id = new_call_id()
        minted = self._minted
        minted[call_id] = True
        if len(minted) > self._minted_cap:
            with contextlib.suppress(KeyError):
                minted.popitem(last=False)
        return call_id

    def vouched(self, call_id: str) -> bool:
        """Whether ``call_id`` was minted here and not used yet (it is used now): made after
        the registry started, by this process, it cannot be in an earlier trail."""
        return self._minted.pop(call_id, False)

    def _forget(self, call_id: str) -> None:
        """Raise ``forgotten`` to a UUIDv7 id a table let go (other UUIDs carry no time and are
        always looked up)."""
        if call_id[14:15] == "7" and call_id > self.forgotten:
            self.forgotten = call_id
