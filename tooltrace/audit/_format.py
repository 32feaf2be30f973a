"""The on-disk layout of audit segments: one JSON object per line, hash-chained.

Every line is ``{...fields..., "h": "<sha256 hex>"}`` where ``h = sha256(prev_h + body)`` and
``body`` is the line's bytes without the trailing ``,"h":"..."`` (closed with ``}``). The first
line of a writer's first segment chains from a genesis hash derived from the writer id; the first
line of every later segment chains from the previous segment's last line, so a deleted segment
breaks the chain. Checkpoint and seal lines carry an HMAC over (writer, segment, seq, head), keyed
with a secret only the operator holds, so a rewritten chain is detected too.

Line kinds (``k``):

- ``open``  segment header: writer id, segment number, pid, format version.
- ``c``     one finished call: the ``CallRecord`` fields as they are (``tool_calls`` row), its
            ``steps`` as ``[seq, step, started_at_us, elapsed_us, decider, decision, detail]``
            arrays (``tool_call_steps`` rows).
- ``i``     strict-mode intent: the call is about to execute.
- ``s``     a late step of a call that already returned (a job's end; ``resolved`` for a call
            that ended ``unknown``, whose decision is the final status).
- ``a``     an approver's answer (``ApprovalRecord``): who, why, when, the tool, rule and
            principal, the sha256 of the redacted arguments it covers, its expiry
            (``approvals`` rows).
- ``ckpt``  keyed checkpoint over the chain head.
- ``seal``  last line of a segment (a checkpoint that also says why the segment ended).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import orjson

from .._files import create_whole
from .._jsonsafe import writable
from .._settings import TOOLTRACE_AUDIT_KEY, audit_key
from ..model import CallRecord, Step
from ..sinks import ApprovalRecord, LateStep

__all__ = [
    "FORMAT_VERSION",
    "HASH_SUFFIX_LEN",
    "RECORD_PREFIXES",
    "TOOLTRACE_AUDIT_KEY",
    "chain_hash",
    "checkpoint_mac",
    "dumps",
    "encode_approval",
    "encode_call",
    "encode_call_bytes",
    "encode_late",
    "genesis_hash",
    "load_key",
    "mac_matches",
    "seal_line",
    "split_hash",
]

FORMAT_VERSION = 1
_H_PREFIX = b',"h":"'
#: ``,"h":"`` + 64 hex + ``"}``
HASH_SUFFIX_LEN = len(_H_PREFIX) + 64 + 2
_KEY_FILE = "audit.key"
#: How a record line (a call, an intent, a late step, an approval) begins: every line is written
#: with its kind first, so records are counted without parsing them.
RECORD_PREFIXES = (b'{"k":"c"', b'{"k":"i"', b'{"k":"s"', b'{"k":"a"')


def _default(obj: Any) -> Any:
    # Records are JSON-ready already; this only covers tuples-of-fields and read-only mappings
    # that orjson does not take natively, and stringifies anything else rather than failing.
    if isinstance(obj, tuple):
        return list(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(map(str, obj))
    return str(obj)


_OPTS = orjson.OPT_NON_STR_KEYS


def dumps(obj: Any) -> bytes:
    """Serialise one line body (no hash, no newline). A value orjson refuses (text that is not
    valid Unicode, nesting past its limit, an integer past 64 bits, a key it does not take) is
    written as ``tooltrace._jsonsafe.writable`` makes it, so a record is never lost for what it
    holds."""
    try:
        return orjson.dumps(obj, default=_default, option=_OPTS)
    except TypeError:  # orjson.JSONEncodeError
        return orjson.dumps(writable(obj), option=_OPTS)


def genesis_hash(writer: str) -> str:
    """The hash a writer's first line chains from."""
    return hashlib.sha256(b"tooltrace-audit-v1|" + writer.encode()).hexdigest()


def chain_hash(prev: str, body: bytes) -> str:
    """``sha256(prev_hex + body)`` as hex."""
    h = hashlib.sha256(prev.encode())
    h.update(body)
    return h.hexdigest()


def seal_line(body: bytes, h: str) -> bytes:
    """Append the hash field and the newline to a body."""
    return body[:-1] + _H_PREFIX + h.encode() + b'"}\n'


def split_hash(line: bytes) -> tuple[bytes, str] | None:
    """Split a stored line (without newline) into (body, hash); None if it has no hash field."""
    if len(line) < HASH_SUFFIX_LEN + 2 or not line.endswith(b'"}'):
        return None
    cut = len(line) - HASH_SUFFIX_LEN
    if line[cut : cut + len(_H_PREFIX)] != _H_PREFIX:
        return None
    return line[:cut] + b"}", line[cut + len(_H_PREFIX) : -2].decode("ascii", "replace")


# Fields of a checkpoint line that its MAC does not cover: the MAC itself, the chain hash and
# the values already in the MAC's fixed part.
_MAC_SKIP = frozenset({"mac", "h", "seq", "head"})


def checkpoint_mac(
    key: bytes,
    writer: str,
    segment: int,
    seq: int,
    head: str,
    fields: Mapping[str, Any] | None = None,
) -> str:
    """The keyed MAC a checkpoint carries over the chain head it covers and over the
    checkpoint's own fields (kind, ``final``, ``reason``, ...): a seal re-chained without the
    key, say one turned ``final`` to hide the segments deleted after it, no longer verifies."""
    msg = f"{writer}|{segment}|{seq}|{head}".encode()
    if fields:
        own = {k: v for k, v in fields.items() if k not in _MAC_SKIP}
        msg += b"|" + orjson.dumps(own, default=_default, option=_OPTS | orjson.OPT_SORT_KEYS)
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def mac_matches(expected: str, found: object) -> bool:
    """Whether ``found`` (a line's ``mac`` field, whatever it holds) is the ``expected`` MAC,
    compared in constant time."""
    return isinstance(found, str) and found.isascii() and hmac.compare_digest(expected, found)


def load_key(home: Path, *, create: bool) -> bytes | None:
    """The checkpoint key: ``TOOLTRACE_AUDIT_KEY`` > ``<home>/audit.key`` (created 0600 when
    ``create``). None when there is no key and ``create`` is False."""
    env = audit_key()
    if env is not None:
        return env
    path = home / _KEY_FILE
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        if not create:
            return None
    home.mkdir(parents=True, exist_ok=True)
    # A process that loses the race to create it uses the winner's key, as everybody does.
    create_whole(path, os.urandom(32).hex().encode(), 0o600)
    return path.read_bytes().strip()


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return dict(obj)
    return str(obj)


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)
_CALL_PREFIX = b'{"k":"c",'


def encode_call_bytes(record: CallRecord) -> bytes:
    """One finished call as its line's JSON object (no seq, no hash).

    The record is encoded as it is (msgspec encodes the struct directly, about twice as fast
    as building a dict for orjson) with the line kind spliced in front.
    """
    try:
        return _CALL_PREFIX + _ENCODER.encode(record)[1:]
    except Exception:
        # Something in the arguments, a result, a detail or an attribute msgspec will not take
        # (text that is not valid Unicode, absurd nesting, a value whose str() raises): the
        # slower, forgiving encoder writes the same fields.
        return dumps(encode_call(record))


def _steps(steps: tuple[Step, ...]) -> list[tuple[Any, ...]]:
    return [tuple(s) for s in steps]


def encode_call(record: CallRecord, kind: str = "c") -> dict[str, Any]:
    """The line fields of one finished call, as a dict (the fallback of ``encode_call_bytes``:
    same field names; steps as ``[seq, step, started_at_us, elapsed_us, decider, decision,
    detail]`` arrays)."""
    art = record.artifact
    return {
        "k": kind,
        "call_id": record.call_id,
        "run_id": record.run_id,
        "tool": record.tool,
        "source": record.source,
        "status": record.status,
        "reject_stage": record.reject_stage,
        "summary": record.summary,
        "error_type": record.error_type,
        "started_at_us": record.started_at_us,
        "elapsed_us": record.elapsed_us,
        "execution_started": record.execution_started,
        "args_redacted": record.args_redacted,
        "result_preview": record.result_preview,
        "artifact": None if art is None else {
            "path": art.path, "chars": art.chars, "bytes": art.bytes, "sha256": art.sha256},
        "mode": record.mode,
        "tool_type": record.tool_type,
        "description": record.description,
        "capability": record.capability,
        "effect": record.effect,
        "trace_id": record.trace_id,
        "span_id": record.span_id,
        "parent_span_id": record.parent_span_id,
        "trace_sampled": record.trace_sampled,
        "hook_modified": record.hook_modified,
        "attributes": record.attributes,
        "parent_call_id": record.parent_call_id,
        "depth": record.depth,
        "progress": [msgspec.structs.astuple(m) for m in record.progress],
        "principal": None if record.principal is None else record.principal.to_dict(),
        "steps": _steps(record.steps),
    }


def encode_late(late: LateStep) -> dict[str, Any]:
    """The line fields of a late step (job end, or ``resolved`` for a call that ended
    ``unknown``): it joins its call's ``tool_call_steps``; a ``resolved`` step's decision is
    the call's final status."""
    return {
        "k": "s",
        "call_id": late.call_id,
        "run_id": late.run_id,
        "tool": late.tool,
        "step": tuple(late.step),
    }


def encode_approval(a: ApprovalRecord) -> dict[str, Any]:
    """The line fields of an approver's answer (``approvals`` rows)."""
    return {
        "k": "a",
        "approval_id": a.approval_id,
        "call_id": a.call_id,
        "run_id": a.run_id,
        "tool": a.tool,
        "rule": a.rule,
        "approved": a.approved,
        "who": a.who,
        "reason": a.reason,
        "args_sha256": a.args_sha256,
        "at_us": a.at_us,
        "expires_at_us": a.expires_at_us,
        "principal": a.principal,
        "args": a.arguments,
    }
