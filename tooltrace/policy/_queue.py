"""A durable approval queue in the home: any process may wait on a request, any process answer it.

``ApprovalQueue`` is an approver (``ToolRegistry(approver=ApprovalQueue(home))``, or
``approver="queue"`` in a policy file's ``[approvals]``): when a policy rule asks, it writes a
pending request (tool, principal, rule, redacted arguments and their sha256, the call and run,
when it expires) under ``<home>/approvals/queue/`` and waits until the request is answered or
expires. An answer comes from any process: ``tooltrace approvals answer``, the console
(``tooltrace serve``) or a signed webhook callback to the console. Expiry denies, and is
recorded as such (``who`` is ``expired@queue``). The first answer wins: an answer file is made
with a hard link, which fails when one is already there, so two answerers (or an answer and the
expiry) never both count.

The files are plain JSON readable only by their owner; requests hold what the audit trail holds
(redacted arguments), never a raw argument. The waiting call's approval step, and the approval
record in the trail, name who answered (``alice@console``, ``alice@cli``, ``ops@webhook.ops``).

Errors: ``ApprovalNotFound`` (no request has this id), ``AlreadyAnswered`` (another answer came
first) and ``ApprovalExpired`` (too late), all ``QueueError``.
"""

from __future__ import annotations

import getpass
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson

from .. import _settings
from .._files import create_whole
from .._ids import new_call_id
from ._rules import ApprovalDecision, ApprovalRequest

__all__ = [
    "AlreadyAnswered",
    "ApprovalExpired",
    "ApprovalNotFound",
    "ApprovalQueue",
    "PendingApproval",
    "QueueAnswer",
    "QueueError",
    "answerer",
    "queue_dir",
]

#: Who an expired request's denial names.
EXPIRED_WHO = "expired@queue"
_ID = re.compile(r"^[0-9a-f-]{36}$")
_WHO = re.compile(r"[^A-Za-z0-9@._-]")


class QueueError(Exception):
    """A request could not be answered as asked (see the subclasses for what to do next)."""


class ApprovalNotFound(QueueError, LookupError):
    """No request has this id in this home: check the id (``tooltrace approvals pending``)."""


class AlreadyAnswered(QueueError):
    """Another answer came first; it stands (``answer`` holds it)."""

    def __init__(self, answer: QueueAnswer) -> None:
        super().__init__(f"already answered by {answer.who}")
        self.answer = answer


class ApprovalExpired(QueueError):
    """The request expired before this answer: the call was denied."""


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A request in the queue: what the call asks, for whom, and until when it waits."""

    approval_id: str
    """The request's id (what ``tooltrace approvals answer`` takes)."""
    call_id: str
    """The call waiting for the answer."""
    run_id: str
    """The run the call belongs to."""
    tool: str
    """The tool's name."""
    rule: str
    """The policy rule that asked."""
    reason: str
    """The rule's reason (redacted)."""
    arguments: dict[str, Any]
    """The call's arguments, redacted as the trail records them."""
    arguments_sha256: str
    """The digest the approval covers."""
    principal: dict[str, Any] | None
    """Whom the call acts for (``Principal.to_dict()``)."""
    asked_at_us: int
    """When the request was made (microseconds since the epoch)."""
    expires_at_us: int
    """When the request expires unanswered (and the call is denied)."""
    pid: int
    """The waiting process."""

    def expired(self, now_us: int | None = None) -> bool:
        """True once the request's time is up."""
        return (now_us if now_us is not None else _now_us()) >= self.expires_at_us


@dataclass(frozen=True, slots=True)
class QueueAnswer:
    """An answer to a request: who decided what, why, when and through which channel."""

    approval_id: str
    """The request answered."""
    approved: bool
    """True lets the call run."""
    who: str
    """The authenticated identity that answered (``user@channel``)."""
    reason: str
    """Why (redacted before it is stored)."""
    ttl_s: float | None
    """Time to live of the approval for later calls with the same arguments (None: this call)."""
    answered_at_us: int
    """When the answer was stored."""
    via: str
    """``cli``, ``console``, ``webhook``, ``api`` or ``expiry``."""


def _now_us() -> int:
    return time.time_ns() // 1000


def queue_dir(home: str | os.PathLike[str] | None = None) -> Path:
    """The folder of a home's approval queue (``<home>/approvals/queue``)."""
    return _settings.resolve_home(home) / "approvals" / "queue"


def answerer(channel: str, user: str | None = None) -> str:
    """The identity an answer is recorded under: ``<user>@<channel>`` (the OS user by default),
    in the characters an approval record keeps."""
    name = user if user is not None else getpass.getuser()
    return _WHO.sub("_", f"{name}@{channel}")[:64]


def _write_once(path: Path, data: dict[str, Any]) -> bool:
    """Write ``data`` as ``path`` unless it exists (True if this call made it), whole."""
    return create_whole(path, orjson.dumps(data), 0o600)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = orjson.loads(path.read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _pending(data: dict[str, Any]) -> PendingApproval:
    return PendingApproval(**{k: data[k] for k in PendingApproval.__slots__})


def _answer(data: dict[str, Any]) -> QueueAnswer:
    return QueueAnswer(**{k: data[k] for k in QueueAnswer.__slots__})


Notify = Callable[[PendingApproval], None]


class ApprovalQueue:
    """The home's approval queue; calling it with an ``ApprovalRequest`` asks and waits.

    ``timeout``: how long a request waits before it expires (seconds or a ``timedelta``;
    default 300 s). ``notify``: called (on a thread of its own, errors swallowed) with each new
    request, e.g. a ``tooltrace.policy.WebhookNotifier``. ``poll_s``: how often a waiting
    call looks for its answer.
    """

    def __init__(self, home: str | os.PathLike[str] | None = None, *,
                 timeout: timedelta | float = 300.0, notify: Sequence[Notify] = (),
                 poll_s: float = 0.1) -> None:
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
        if not seconds > 0:
            raise ValueError("timeout must be a positive number of seconds")
        self.dir = queue_dir(home)
        self.timeout_s = seconds
        self.notify = tuple(notify)
        self.poll_s = poll_s

    def _ensure(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _request_path(self, approval_id: str) -> Path:
        if not _ID.match(approval_id):
            raise ApprovalNotFound(f"{approval_id[:40]!r} is not a request id")
        return self.dir / f"{approval_id}.request.json"

    def _answer_path(self, approval_id: str) -> Path:
        return self.dir / f"{approval_id}.answer.json"

    # -- asking -------------------------------------------------------------------------------

    def submit(self, request: ApprovalRequest) -> PendingApproval:
        """Put a request in the queue (without waiting); return it."""
        self._ensure()
        now = _now_us()
        p = PendingApproval(
            new_call_id(), request.call_id, request.run_id, request.tool, request.rule,
            request.reason, dict(orjson.loads(orjson.dumps(request.arguments, default=str))),
            request.arguments_sha256,
            None if request.principal is None else request.principal.to_dict(),
            now, now + int(self.timeout_s * 1_000_000), os.getpid(),
        )
        _write_once(self._request_path(p.approval_id), asdict(p))
        for fn in self.notify:
            threading.Thread(target=_quietly, args=(fn, p), daemon=True,
                             name="tooltrace-approval-notify").start()
        return p

    def wait(self, pending: PendingApproval) -> QueueAnswer:
        """Wait until the request is answered, or expires (then the expiry is its answer)."""
        path = self._answer_path(pending.approval_id)
        while True:
            data = _read(path)
            if data is not None:
                return _answer(data)
            if pending.expired():
                return self._expire(pending)
            left = (pending.expires_at_us - _now_us()) / 1e6
            time.sleep(max(0.005, min(self.poll_s, left)))

    def _expire(self, pending: PendingApproval) -> QueueAnswer:
        ans = QueueAnswer(pending.approval_id, False, EXPIRED_WHO,
                          f"no answer within {self.timeout_s:g} s", None, _now_us(), "expiry")
        path = self._answer_path(pending.approval_id)
        if _write_once(path, asdict(ans)):
            return ans
        data = _read(path)
        return _answer(data) if data is not None else ans

    def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        """Ask and wait: the approver protocol of ``ToolRegistry(approver=...)``."""
        ans = self.wait(self.submit(request))
        return ApprovalDecision(ans.approved, who=ans.who, reason=ans.reason, ttl=ans.ttl_s)

    # -- answering ----------------------------------------------------------------------------

    def get(self, approval_id: str) -> tuple[PendingApproval, QueueAnswer | None]:
        """A request and its answer (None while unanswered)."""
        data = _read(self._request_path(approval_id))
        if data is None:
            raise ApprovalNotFound(f"no approval request {approval_id[:40]!r} in this home")
        ans = _read(self._answer_path(approval_id))
        return _pending(data), None if ans is None else _answer(ans)

    def answer(self, approval_id: str, *, approved: bool, who: str, reason: str = "",
               ttl_s: float | None = None, via: str = "api") -> QueueAnswer:
        """Answer a request. Raises ``ApprovalNotFound``, ``ApprovalExpired`` or
        ``AlreadyAnswered`` (the first answer stands)."""
        from ..redaction import default_redactor

        pending, existing = self.get(approval_id)
        if existing is not None:
            raise AlreadyAnswered(existing)
        if pending.expired():
            self._expire(pending)
            raise ApprovalExpired(f"request {approval_id} expired unanswered")
        if ttl_s is not None and not ttl_s > 0:
            raise ValueError("ttl must be a positive number of seconds")
        ans = QueueAnswer(approval_id, bool(approved), _WHO.sub("_", who)[:64],
                          default_redactor().redact_text(reason)[:300], ttl_s, _now_us(), via)
        if not _write_once(self._answer_path(approval_id), asdict(ans)):
            _, first = self.get(approval_id)
            assert first is not None
            raise AlreadyAnswered(first)
        return ans

    # -- reading ------------------------------------------------------------------------------

    def entries(self) -> Iterator[tuple[PendingApproval, QueueAnswer | None]]:
        """Every request with its answer (None while unanswered), newest first."""
        try:
            names = sorted((n for n in os.listdir(self.dir) if n.endswith(".request.json")),
                           reverse=True)
        except FileNotFoundError:
            return
        for name in names:
            try:
                yield self.get(name.removesuffix(".request.json"))
            except ApprovalNotFound:
                continue

    def pending(self) -> list[PendingApproval]:
        """The requests still waiting for an answer (not expired), newest first."""
        now = _now_us()
        return [p for p, a in self.entries() if a is None and not p.expired(now)]

    def answered(self, limit: int = 100) -> list[tuple[PendingApproval, QueueAnswer]]:
        """Answered requests (expired ones included), newest first."""
        out: list[tuple[PendingApproval, QueueAnswer]] = []
        now = _now_us()
        for p, a in self.entries():
            if a is None and p.expired(now):
                a = self._expire(p)  # its waiter is gone: record the expiry it would have
            if a is not None:
                out.append((p, a))
                if len(out) >= limit:
                    break
        return out


def _quietly(fn: Notify, pending: PendingApproval) -> None:
    """A notifier never raises into the waiting call."""
    try:
        fn(pending)
    except Exception:  # a failed notification must not fail the waiting call
        pass
