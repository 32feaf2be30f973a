"""The finished span of one call, built from its ``CallRecord`` off the call path.

The SDK's ``ReadableSpan`` is built directly from the record, in the tracing sink's background
batch, so the call itself only mints ids (``_propagation``). The span follows the GenAI
conventions: name ``execute_tool {tool}``, the ``gen_ai.*`` attributes, tooltrace's own under
``tooltrace.*`` (``tooltrace.sandbox`` for a command: the sandbox its execute step records),
status ERROR for failed and unknown calls, one event per pipeline step and one
``tooltrace.progress`` event per progress mark the record keeps (bounded); arguments and result
(already redacted) only with content capture on. Every string is bounded, and valid Unicode:
the OTLP encoder refuses a whole batch of spans for one lone surrogate in any of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson
from opentelemetry.trace import SpanContext, SpanKind
from opentelemetry.trace.status import Status as OtelStatus
from opentelemetry.trace.status import StatusCode

from .._jsonsafe import valid_text, writable
from ..model import Status, StepName
from ..runtime import sandbox_label
from ._propagation import SAMPLED

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan

    from ..model import CallRecord

__all__ = ["CAPTURE_CONTENT_ENV", "ERROR_STATUSES", "SpanBuilder", "capture_flag"]

#: GenAI content capture switch: ``true`` puts redacted arguments and results on spans.
CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: Record statuses whose span has status ERROR and an ``error.type``.
ERROR_STATUSES: Final = frozenset({Status.FAILED, Status.UNKNOWN})

_TRUE: Final = frozenset({"true", "1", "yes", "on", "span_only", "span_and_event"})
_MAX_EXTRA_ATTRIBUTES: Final = 64
_MAX_KEY_CHARS: Final = 255
_MAX_DETAIL_CHARS: Final = 1024
_UNSET_STATUS: Final = OtelStatus(StatusCode.UNSET)


def capture_flag(value: str | None) -> bool:
    """Whether a ``CAPTURE_CONTENT_ENV`` value turns content capture on."""
    return value is not None and value.strip().lower() in _TRUE


def _bounded(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: max(0, limit - 1)] + "\u2026"


def _json(value: Any, limit: int) -> str:
    try:
        text = orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS).decode()
    except Exception:  # what orjson refuses (a lone surrogate ...): the encoders' fallback
        text = orjson.dumps(writable(value), option=orjson.OPT_SORT_KEYS).decode()
    return _bounded(text, limit)


def _valid(attrs: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` with every key and text value (in a list too) made valid Unicode (U+FFFD for a
    lone surrogate: the OTLP encoder refuses a whole batch for one)."""
    for key, value in list(attrs.items()):
        if isinstance(value, str):
            if not value.isascii():
                attrs[key] = valid_text(value)
        elif isinstance(value, (list, tuple)):
            attrs[key] = [valid_text(v) if isinstance(v, str) else v for v in value]
        if not key.isascii() and (fixed := valid_text(key)) != key:
            attrs[fixed] = attrs.pop(key)
    return attrs


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tooltrace")
    except Exception:
        return "0"


class SpanBuilder:
    """Turns finished records into SDK ``ReadableSpan`` objects for one resource.

    Args:
        resource: the resource every span carries (the provider's).
        capture_content: put redacted, bounded arguments, results and step details on spans.
        max_attribute_chars: longest string attribute value; longer ones are cut with an
            ellipsis.
    """

    __slots__ = ("_event_cls", "_span_cls", "capture_content", "max_attribute_chars",
                 "resource", "scope")

    def __init__(self, resource: Resource, capture_content: bool, max_attribute_chars: int) -> None:
        # The SDK is imported here, when a sink is made, so ``import tooltrace`` stays free of it.
        from opentelemetry.sdk.trace import Event as _Event
        from opentelemetry.sdk.trace import ReadableSpan as _ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self._event_cls: type[Event] = _Event
        self._span_cls: type[ReadableSpan] = _ReadableSpan
        #: The resource of every span built.
        self.resource = resource
        #: The instrumentation scope of every span built (``tooltrace`` and its version).
        self.scope = InstrumentationScope("tooltrace", _version())
        #: Whether redacted arguments and results go on spans.
        self.capture_content = capture_content
        #: Longest string attribute value.
        self.max_attribute_chars = max_attribute_chars

    def build(self, rec: CallRecord) -> ReadableSpan:
        """The finished SDK span of one record."""
        limit = self.max_attribute_chars
        tid = int(rec.trace_id or "0", 16)
        ctx = SpanContext(tid, int(rec.span_id or "0", 16), False, SAMPLED)
        parent = (
            None
            if rec.parent_span_id is None
            else SpanContext(tid, int(rec.parent_span_id, 16), False, SAMPLED)
        )
        tool = rec.tool if len(rec.tool) <= _MAX_KEY_CHARS else _bounded(rec.tool, _MAX_KEY_CHARS)
        tool = valid_text(tool)
        attrs = _attributes(rec, tool, limit)
        if rec.status in ERROR_STATUSES:
            status = OtelStatus(StatusCode.ERROR, valid_text(rec.error_type or str(rec.status)))
        else:
            status = _UNSET_STATUS
        if self.capture_content:
            _add_content(attrs, rec, limit)
        start_ns = rec.started_at_us * 1000
        return self._span_cls(
            name=f"execute_tool {tool}",
            context=ctx,
            parent=parent,
            resource=self.resource,
            attributes=_valid(attrs),
            events=self._events(rec, limit),
            kind=SpanKind.INTERNAL,
            status=status,
            start_time=start_ns,
            end_time=start_ns + rec.elapsed_us * 1000,
            instrumentation_scope=self.scope,
        )

    def _events(self, rec: CallRecord, limit: int) -> list[Event]:
        event_cls = self._event_cls
        content = self.capture_content
        events = []
        for st in rec.steps:
            decider, decision = st.decider, st.decision
            ev: dict[str, Any] = {
                "tooltrace.step": st.step,
                "tooltrace.step.seq": st.seq,
                "tooltrace.decider": (
                    decider if len(decider) <= _MAX_KEY_CHARS else _bounded(decider, _MAX_KEY_CHARS)
                ),
                "tooltrace.decision": (
                    decision
                    if len(decision) <= _MAX_KEY_CHARS
                    else _bounded(decision, _MAX_KEY_CHARS)
                ),
                "tooltrace.elapsed_ms": st.elapsed_us / 1000.0,
            }
            if content and st.detail:
                ev["tooltrace.detail"] = _json(st.detail, min(limit, _MAX_DETAIL_CHARS))
            events.append(event_cls(st.step, _valid(ev), st.started_at_us * 1000))
        for m in rec.progress:  # bounded by the registry (tooltrace.runtime.MAX_MARKS)
            pev: dict[str, Any] = {"tooltrace.progress.done": m.done,
                                   "tooltrace.progress.seq": m.seq}
            if m.total is not None:
                pev["tooltrace.progress.total"] = m.total
            if m.message:
                pev["tooltrace.progress.message"] = _bounded(m.message, limit)
            events.append(event_cls("tooltrace.progress", _valid(pev), m.at_us * 1000))
        return events


def _attributes(rec: CallRecord, tool: str, limit: int) -> dict[str, Any]:
    """The span's attributes without content: the front end's, GenAI's, then tooltrace's."""
    attrs: dict[str, Any] = {}
    for i, (key, value) in enumerate(rec.attributes.items()):
        if i >= _MAX_EXTRA_ATTRIBUTES:
            break
        attrs[_bounded(str(key), _MAX_KEY_CHARS)] = (
            _bounded(value, limit) if isinstance(value, str) else value
        )
    attrs["gen_ai.operation.name"] = "execute_tool"
    attrs["gen_ai.tool.name"] = tool
    attrs["gen_ai.tool.call.id"] = rec.call_id
    attrs["gen_ai.tool.type"] = rec.tool_type
    if rec.description:
        attrs["gen_ai.tool.description"] = _bounded(rec.description, limit)
    # str() of a StrEnum member is its value, without the enum's slow .value property.
    attrs["tooltrace.status"] = str(rec.status)
    if rec.reject_stage is not None:
        attrs["tooltrace.reject_stage"] = str(rec.reject_stage)
    attrs["tooltrace.source"] = rec.source
    attrs["tooltrace.run_id"] = rec.run_id
    attrs["tooltrace.mode"] = rec.mode
    p = rec.principal
    if p is not None:
        for key, who in (("user", p.user), ("agent", p.agent), ("tenant", p.tenant)):
            if who is not None:
                attrs[f"tooltrace.principal.{key}"] = who
        if p.roles:
            attrs["tooltrace.principal.roles"] = list(p.roles)
    attrs["tooltrace.execution_started"] = rec.execution_started
    if rec.parent_call_id is not None:
        attrs["tooltrace.parent_call_id"] = rec.parent_call_id
        attrs["tooltrace.depth"] = rec.depth
    if rec.hook_modified:
        attrs["tooltrace.hook_modified"] = True
    sandbox = _sandbox(rec)
    if sandbox is not None:
        attrs["tooltrace.sandbox"] = sandbox
    art = rec.artifact
    if art is not None:
        attrs["tooltrace.artifact.sha256"] = art.sha256
        attrs["tooltrace.artifact.chars"] = art.chars
    if rec.status in ERROR_STATUSES:
        attrs["error.type"] = _bounded(rec.error_type or "_OTHER", _MAX_KEY_CHARS)
    return attrs


def _sandbox(rec: CallRecord) -> str | None:
    """The sandbox a command ran in, as its execute step recorded it (closed set of names)."""
    for st in rec.steps:
        if st.step == StepName.EXECUTE:
            return sandbox_label(st.detail.get("sandbox")) if st.detail else None
    return None


def _add_content(attrs: dict[str, Any], rec: CallRecord, limit: int) -> None:
    """The redacted arguments and result, bounded (content capture on)."""
    if rec.args_redacted is not None:
        attrs["gen_ai.tool.call.arguments"] = _json(rec.args_redacted, limit)
    art = rec.artifact
    if art is not None:
        # The full result lives in the artifact store; the span names it by digest, and the
        # reference survives bounding (only the preview after it is cut).
        ref = f"[artifact sha256={art.sha256} chars={art.chars}] "
        preview = _bounded(rec.result_preview or "", max(0, limit - len(ref)))
        attrs["gen_ai.tool.call.result"] = ref + preview
    elif rec.result_preview is not None:
        attrs["gen_ai.tool.call.result"] = _bounded(rec.result_preview, limit)
