"""A call's span context: where its parent comes from, its ids, its sampling, making it current.

Ids are minted before the tool runs, as a child of the current span (else of a ``TRACEPARENT``
inherited from the launching process, else a new trace), and sampled as the provider's sampler
decides. ``SpanHandle.attach`` makes a non-recording span with those ids current, so nested
work joins the trace; the real span is built from the finished record later
(``_spanbuild``). ``traceparent()`` and ``context_from_traceparent()`` carry a trace across a
process boundary in the W3C format.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.sampling import Sampler

__all__ = [
    "SAMPLED",
    "TRACEPARENT_ENV",
    "SpanHandle",
    "SpanMinter",
    "context_from_traceparent",
    "sampling_decider",
    "traceparent",
]

#: W3C trace context handed to a child process (see ``traceparent()``).
TRACEPARENT_ENV: Final = "TRACEPARENT"
#: Trace flags of a sampled span.
SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED: Final = TraceFlags(TraceFlags.DEFAULT)
_EMPTY_STATE: Final = TraceState()


def traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, or None when no valid span is current.

    Put it in a child process's environment as ``TRACEPARENT`` so its calls join this trace.
    """
    sc = trace.get_current_span().get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags) & 0xFF:02x}"


def context_from_traceparent(value: str | None) -> SpanContext | None:
    """Parse a W3C ``traceparent`` string into a remote ``SpanContext``; None if malformed."""
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return None
    version, tid, sid, flags = parts[:4]
    if len(tid) != 32 or len(sid) != 16 or len(flags) != 2 or (version == "00" and len(parts) != 4):
        return None
    try:
        sc = SpanContext(int(tid, 16), int(sid, 16), True, TraceFlags(int(flags, 16) & 0xFF))
    except ValueError:
        return None
    return sc if sc.is_valid else None


class SpanHandle:
    """The span opened for one call (a ``tooltrace.telemetry.OpenSpan``).

    Ids are lowercase hex as the W3C format writes them; ``attach`` makes a non-recording span
    with these ids current so nested work becomes its child.
    """

    __slots__ = ("_sid", "_state", "_tid", "parent_span_id", "sampled", "span_id", "trace_id")

    def __init__(
        self, tid: int, sid: int, parent_sid: int | None, sampled: bool, state: TraceState
    ) -> None:
        self._tid = tid
        self._sid = sid
        self._state = state
        self.trace_id = f"{tid:032x}"
        self.span_id = f"{sid:016x}"
        self.parent_span_id = None if parent_sid is None else f"{parent_sid:016x}"
        self.sampled = sampled

    @property
    def span_context(self) -> SpanContext:
        """The OpenTelemetry ``SpanContext`` of this call's span."""
        flags = SAMPLED if self.sampled else _NOT_SAMPLED
        return SpanContext(self._tid, self._sid, False, flags, self._state)

    def attach(self) -> object:
        """Make this span's context current; return the token for ``detach``."""
        return otel_context.attach(trace.set_span_in_context(NonRecordingSpan(self.span_context)))

    def detach(self, token: Any) -> None:
        """Restore the context that was current before ``attach``."""
        otel_context.detach(token)


def sampling_decider(sampler: Sampler) -> Callable[[SpanContext | None, int, str], bool]:
    """A cheap ``(parent, trace_id, tool) -> sampled`` for the common samplers.

    The stock samplers are recognised by identity and decided without building a
    ``SamplingResult``; any other sampler is asked properly (with the current context).
    """
    from opentelemetry.sdk.trace import sampling

    if sampler is sampling.ALWAYS_ON:
        return lambda parent, tid, tool: True
    if sampler is sampling.ALWAYS_OFF:
        return lambda parent, tid, tool: False
    if sampler is sampling.DEFAULT_ON or sampler is sampling.DEFAULT_OFF:
        root = sampler is sampling.DEFAULT_ON
        return lambda parent, tid, tool: root if parent is None else parent.trace_flags.sampled

    sampled_decisions = (sampling.Decision.RECORD_AND_SAMPLE,)

    def ask(parent: SpanContext | None, tid: int, tool: str) -> bool:
        ctx = None if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
        res = sampler.should_sample(ctx, tid, f"execute_tool {tool}", SpanKind.INTERNAL)
        return res.decision in sampled_decisions

    return ask


class SpanMinter:
    """Mints the ids of a call's span and decides whether it is sampled.

    The parent is the current span when one is valid, else ``fallback`` (a context inherited
    through ``TRACEPARENT``); with neither, the call starts a new trace.
    """

    def __init__(self, sampler: Sampler, fallback: SpanContext | None) -> None:
        self._decide = sampling_decider(sampler)
        self._fallback = fallback

    def mint(self, tool: str) -> SpanHandle:
        """The handle of a new span for a call of ``tool``, child of the current context."""
        parent: SpanContext | None = trace.get_current_span().get_span_context()
        if parent is None or not parent.is_valid:
            parent = self._fallback
        if parent is None:
            tid = random.getrandbits(128) or 1
            sampled = self._decide(None, tid, tool)
            return SpanHandle(tid, random.getrandbits(64) or 1, None, sampled, _EMPTY_STATE)
        tid = parent.trace_id
        sampled = self._decide(parent, tid, tool)
        return SpanHandle(tid, random.getrandbits(64) or 1, parent.span_id, sampled,
                          parent.trace_state)
