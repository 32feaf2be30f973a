"""The first stage: make what the caller sent a ``ToolCall`` whose own fields are fit to record.

A call arrives as a ``ToolCall``, a mapping, JSON text or bytes, and is as untrusted as model
output either way: its ids are queried by type, and any field may hold a secret. A malformed call
is refused (stage ``params``) under an id of its own, and so is a call that reuses a call id this
registry has seen: a call id is an identity.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import uuid_utils

from .._ids import new_call_id
from ..exceptions import MalformedCallError
from ..model import Stage, StepName, ToolCall, principal_problem
from ._record import UNREGISTERED, Builder, redact_args, safe_name

if TYPE_CHECKING:
    from ..redaction import Redactor
    from ._environment import Environment

__all__ = ["AttributeMemo", "check_call", "clean_attributes", "sanitise"]

_uuid7 = uuid_utils.uuid7
_UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
_TOKEN_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def sanitise(
    env: Environment, b: Builder, raw: ToolCall | Mapping[str, Any] | str | bytes
) -> ToolCall | None:
    """The call, with its id, run, mode and attributes on the builder; None if refused."""
    if type(raw) is ToolCall or isinstance(raw, ToolCall):
        call = raw
    else:
        try:
            call = ToolCall.parse(raw)
        except MalformedCallError as exc:
            _malformed(env, b, {"reason": exc.reason}, str(exc))
            return None
    bad = check_call(env, call)
    if bad is not None:
        _malformed(env, b, {"reason": bad}, bad)
        return None
    if call.call_id:
        cid = call.call_id.lower()
        why = _taken(env, cid)
        if why is not None:
            _malformed(env, b, {"reason": why, "call_id": cid}, f"call_id {_WHY[why]} ({why})")
            return None
        b.call_id = cid
    else:
        # str(uuid7()) is new_call_id() without a function call, on every call.
        b.call_id = str(_uuid7())
    b.run_id = call.run_id or env.run_id
    b.mode = call.mode
    if call.attributes:
        b.attributes = clean_attributes(env, call.attributes)
    if call.principal is not None or env.principals.used:
        principal, ok = env.principals.bind(b.run_id, call.principal)
        if not ok:
            _switch_refused(env, b, call, principal)
            return None
        b.principal = principal
    return call


def _switch_refused(env: Environment, b: Builder, call: ToolCall, bound: Any) -> None:
    """Refuse a call that names another user, tenant or roles than its run is bound to, and
    keep the evidence: the tool it named, whom it asked to act for, its redacted arguments and
    whom the run is bound to (the call is well formed: it keeps its own id)."""
    b.principal = call.principal
    b.args_redacted = redact_args(env, call.arguments)
    name = call.name
    entry = env.tools.active.get(name) if type(name) is str else None
    if entry is not None:
        b.entry = entry  # the record names the tool and where it came from
    tool = entry.definition.name if entry is not None else UNREGISTERED
    if env.tracer is not None:
        b.span = env.tracer.open_span(tool)
    shown = safe_name(name)
    if env.redactor.redact_text(shown) != shown:  # a name may itself be a secret
        shown = "the requested tool"
    run = {"user": bound.user, "tenant": bound.tenant, "roles": list(bound.roles)} \
        if bound is not None else None
    detail: dict[str, Any] = {"reason": "principal_mismatch", "run_principal": run}
    if entry is None:
        detail["requested"] = shown
    b.step(StepName.RESOLVE, b.t0, "registry", "reject", detail)
    why = "its principal names another user, tenant or roles than its run is bound to"
    b.reject(Stage.PARAMS, why, tool, shown_name=shown)


_WHY = {
    "duplicate_call_id": "is already in use",
    "call_id_unverifiable": "could not be checked against the audit trail",
}


def _taken(env: Environment, cid: str) -> str | None:
    """Why a caller-supplied call id cannot be used, or None (and it is now taken).

    The registry remembers the ids of its own recent calls and of the caller-supplied ids it
    took; an id it may have forgotten (at or below the status table's watermark), one made
    before the registry started, and any UUID that is not a UUIDv7 (no time to go by) is also
    looked up in the trail (``TrailSink``), unless the registry minted it
    (``ToolRegistry.new_call_id``). A trail that cannot be read refuses the id: a call without
    an id of its own still runs."""
    st = env.book.statuses
    if not st.claim(cid, env.book.active):
        return "duplicate_call_id"
    if not st.vouched(cid) and env.emitter.trail_sinks and (
            cid[14] != "7" or cid <= st.forgotten or cid < env.trail_from):
        try:
            if any(sink.recorded(cid) for sink in env.emitter.trail_sinks):
                return "duplicate_call_id"
        except OSError:
            return "call_id_unverifiable"
    return None


def _malformed(env: Environment, b: Builder, detail: dict[str, Any], why: str) -> None:
    """Refuse a malformed call, recorded under an id of its own (so no reader can take the
    refusal, or another call with the id it named, for the other)."""
    b.call_id = new_call_id()
    if env.tracer is not None:
        b.span = env.tracer.open_span(UNREGISTERED)
    b.step(StepName.RESOLVE, b.t0, "registry", "reject", detail)
    b.reject(Stage.PARAMS, f"malformed tool call: {why}", UNREGISTERED)


def check_call(env: Environment, call: ToolCall) -> str | None:
    """Why a ToolCall's own fields are unusable, or None."""
    # A caller may have put anything in a ToolCall's fields: each is checked here.
    c = call
    cid, rid, mode = c.call_id, c.run_id, c.mode
    if cid is not None and (type(cid) is not str or not _UUID_RE.match(cid)):
        return "call_id must be a UUID string"
    if rid is not None and (
        type(rid) is not str or not _TOKEN_RE.match(rid) or not env.redactor.is_clean(rid)
    ):
        return "run_id must be 1-128 characters of [A-Za-z0-9._:-] and not a secret"
    if mode not in env.policy.modes and (
        type(mode) is not str or not _TOKEN_RE.match(mode) or not env.redactor.is_clean(mode)
    ):
        return "mode must be 1-128 characters of [A-Za-z0-9._:-] and not a secret"
    t = c.timeout_s
    if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or not t > 0):
        return "timeout_s must be a positive number"
    if not isinstance(c.background, bool):
        return "background must be a boolean"
    attrs = c.attributes
    if type(attrs) is not dict and not isinstance(attrs, Mapping):
        return "attributes must be a mapping"
    if c.principal is not None:
        return principal_problem(c.principal, env.redactor.is_clean)
    return None


def clean_attributes(env: Environment, attrs: Mapping[str, Any]) -> dict[str, str | int | bool]:
    """Extra span attributes, bounded and redacted (they reach every sink).

    Each attribute is redacted as a mapping's item is, so key rules apply (a value under
    ``aws_secret_access_key`` is hidden whatever it looks like) and a key that is itself a
    secret is dropped. Values are redacted, then cut to 256 characters. The same attributes
    come with call after call (a transport, a server's name): what became of a key with a
    short text value is remembered (``AttributeMemo``), not worked out again."""
    redactor = env.redactor
    memo = env.attributes.for_redactor(redactor)
    out: dict[str, str | int | bool] = {}
    for k, v in list(attrs.items())[:32]:
        short = type(v) is str and len(v) <= _REMEMBERED_CHARS
        if short:
            got = memo.get((k, v), _UNSEEN)
            if got is not _UNSEEN:
                if got is not _DROPPED:
                    out[k] = got
                continue
        cleaned = _clean_attribute(redactor, k, v)
        if short:
            if len(memo) >= _REMEMBERED:
                memo.clear()
            memo[(k, v)] = cleaned
        if cleaned is not _DROPPED:
            out[k] = cleaned
    return out


def _clean_attribute(redactor: Redactor, k: Any, v: Any) -> Any:
    """One attribute's value as recorded, or ``_DROPPED`` (a key that is no attribute name
    or holds a secret)."""
    if type(k) is not str or not _TOKEN_RE.match(k):
        return _DROPPED
    # Only the first 256 characters are kept: what lies beyond 4096 cannot reach them.
    v = v if isinstance(v, bool | int) else str(v)[:_SCANNED_CHARS]
    if redactor.is_plain_key(k):
        if type(v) is str and not redactor.is_clean(v):
            v = redactor.redact_text(v)
    else:
        item, _n = redactor.redact({k: v})
        if k not in item:  # the key held a secret: its redacted text is no attribute name
            return _DROPPED
        v = item[k]
    if isinstance(v, str) and len(v) > _ATTRIBUTE_CHARS:
        v = v[: _ATTRIBUTE_CHARS - 3] + "..."
    return v


class AttributeMemo:
    """What ``clean_attributes`` made of each ``(key, short text value)`` it saw, under one
    redactor's rules: forgotten when the registry's redactor is replaced or a secret is
    registered with it (``Redactor.generation``), and when full (4,096 entries: values that
    never repeat, such as request ids, cannot keep the others out for long)."""

    __slots__ = ("_generation", "_redactor", "_seen")

    def __init__(self) -> None:
        self._redactor: Redactor | None = None
        self._generation = -1
        self._seen: dict[tuple[Any, str], Any] = {}

    def for_redactor(self, redactor: Redactor) -> dict[tuple[Any, str], Any]:
        """The remembered values, valid for ``redactor`` as it is now."""
        if redactor is not self._redactor or redactor.generation != self._generation:
            self._seen = {}
            self._redactor, self._generation = redactor, redactor.generation
        return self._seen


_UNSEEN = object()
_DROPPED = object()
_REMEMBERED = 4096
_REMEMBERED_CHARS = 128
_ATTRIBUTE_CHARS = 256
_SCANNED_CHARS = 4096
