"""The record builder: the steps and facts of one call, made into its envelope and record, and
handed to the sinks.

The builder owns redaction of what a record holds: every step detail and the summary pass the
redactor when the record is made, whichever stage wrote them (``recorded_steps``, ``scrub``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..model import (
    Artifact,
    CallRecord,
    Principal,
    ProgressMark,
    Retry,
    Stage,
    Status,
    Step,
    Timing,
    ToolResultEnvelope,
)
from ..redaction import Redactor

if TYPE_CHECKING:
    from ..model import Entry
    from ..sinks import OpenSpan
    from ._environment import Environment

__all__ = [
    "UNREGISTERED",
    "Builder",
    "Made",
    "WatchedBuilder",
    "detached",
    "error_text",
    "recorded_steps",
    "redact_args",
    "redact_detail",
    "safe_name",
    "scrub",
    "scrub_made",
]

# Enum members every call reads, as module constants (a member looked up on its class
# costs 72 ns in CPython 3.11, timeit; a global 7 ns).
_OK = Status.OK

#: The ``tool`` of a call that names no registered tool (a closed metric label value).
UNREGISTERED = "_unregistered"


class Made(dict[str, Any]):
    """A step detail the pipeline made itself, only of numbers, words from a closed set and
    text it already redacted (``redact_detail``): the record keeps it as it is. A detail a tool,
    a hook or a rule hands over is never one (``redact_detail`` copies it into a plain dict)."""

    __slots__ = ()

_SUMMARY_CHARS = 500
# How many scrubbed texts of the registry's own making a registry remembers (scrub_made).
_MADE_TEXTS = 1024
_NO_ATTRIBUTES: Mapping[str, str | int | bool] = {}  # shared, never mutated
_ABS_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s'\"`:,;()\[\]{}<>]+/)+[^\s'\"`:,;()\[\]{}<>]*")
_NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")


class Builder:
    """Collects the steps and facts of one call and makes its envelope and record."""

    __slots__ = (
        "args_redacted",
        "attributes",
        "call_id",
        "depth",
        "entry",
        "env",
        "error_type",
        "execution_started",
        "hook_modified",
        "last",
        "mode",
        "parent_call_id",
        "parent_tool",
        "principal",
        "progress",
        "refusal",
        "run_id",
        "span",
        "steps",
        "t0",
        "t_wall",
    )

    def __init__(self, env: Environment, t_wall: int, t0: int) -> None:
        self.env = env
        self.t_wall = t_wall
        self.t0 = t0
        self.steps: list[Step] = []
        self.last = t0  # when the last step ended (perf ns)
        self.call_id = ""
        self.run_id = env.run_id
        self.mode = "default"
        self.principal: Principal | None = None
        self.attributes: Mapping[str, str | int | bool] = _NO_ATTRIBUTES
        self.args_redacted: Any = None
        self.entry: Entry | None = None
        self.span: OpenSpan | None = None
        self.execution_started = False
        self.hook_modified = False
        self.error_type: str | None = None
        #: The envelope of the refusal, once a stage refused the call (``reject``).
        self.refusal: ToolResultEnvelope | None = None
        #: Nesting: 0 and None unless a tool made this call through its context.
        self.depth = 0
        self.parent_call_id: str | None = None
        self.parent_tool: str | None = None
        #: The progress marks the tool reported (set when it returns).
        self.progress: tuple[ProgressMark, ...] = ()

    def us(self, perf_ns: int) -> int:
        """Wall-clock microseconds of a ``perf_counter_ns`` reading."""
        return self.t_wall + (perf_ns - self.t0) // 1000

    def us_mono(self, mono_ns: int) -> int:
        """Wall-clock microseconds of a ``monotonic_ns`` reading (via the perf counter)."""
        delta = mono_ns - time.monotonic_ns()
        return self.us(time.perf_counter_ns() + delta)

    def step(
        self, name: str, t: int, decider: str, decision: str, detail: Mapping[str, Any] | None
    ) -> int:
        """Append a step that began at ``t`` (perf ns) and ends now; return now, which is
        where the next step begins. Its detail is redacted when the record is made."""
        now = self.last = time.perf_counter_ns()
        steps = self.steps
        steps.append(
            Step(
                len(steps),
                name,
                self.t_wall + (t - self.t0) // 1000,
                (now - t) // 1000,
                decider,
                decision,
                detail,
            )
        )
        return now

    def reject(
        self,
        stage: Stage,
        why: str,
        tool: str,
        *,
        shown_name: Any = None,
        retry: Retry | None = None,
    ) -> ToolResultEnvelope:
        """The envelope of a call refused at ``stage`` (execution never started), emitted."""
        # Redacted and cut once, with the whole summary, in envelope().
        label = tool if tool != UNREGISTERED else safe_name(shown_name)
        summary = f"{label} was rejected ({stage.value}): {why}"
        self.error_type = stage.value
        if retry is None:
            retry = Retry(
                stage in (Stage.PARAMS, Stage.RESOLVE, Stage.ADMISSION),
                after_ms=250 if stage is Stage.ADMISSION else 0,
                requires_inspection=stage in (Stage.AUDIT, Stage.HOOK),
            )
        envelope = self.envelope(
            Status.REJECTED, summary, None, None, stage, None, retry=retry, tool_override=tool
        )
        self.refusal = envelope
        return self.emit(envelope)

    def refused(self) -> ToolResultEnvelope:
        """The refusal a stage made (a stage that makes a product returns None instead)."""
        assert self.refusal is not None
        return self.refusal

    def envelope(
        self,
        status: Status,
        summary: str,
        data: Any,
        artifact: Artifact | None,
        stage: Stage | None,
        result_preview: str | None,
        *,
        retry: Retry,
        tool_override: str | None = None,
        made: bool = False,
    ) -> ToolResultEnvelope:
        """The call's envelope and record as they stand now (not emitted); ``made``: the
        registry made the summary from its own parts (``scrub_made``)."""
        e = self.entry
        d = e.definition if e is not None else None
        tool = tool_override or (d.name if d else UNREGISTERED)
        elapsed = (time.perf_counter_ns() - self.t0) // 1000
        span = self.span
        env = self.env
        # Nothing a stage wrote (a step's detail, a summary) reaches a record, and so any sink,
        # before the redactor has seen all of it. Redact, then cut: a secret cut first is no
        # longer recognised.
        summary = (scrub_made(env, summary) if made else scrub(env, summary))[:_SUMMARY_CHARS]
        # Positional: 12k of ~150k CPU instructions per call fewer than keywords (callgrind,
        # docs/internals/performance-analysis.md); the field order is pinned by
        # tests/test_record_integrity.py.
        record = CallRecord(
            self.call_id,
            self.run_id,
            tool,
            d.source if d else "",
            status,
            stage,
            summary,
            self.error_type if status is not _OK else None,
            self.t_wall,
            elapsed,
            self.execution_started,
            self.args_redacted,
            result_preview,
            artifact,
            recorded_steps(env, self.steps),
            self.mode,
            d.tool_type if d else "function",
            d.description[:500] if d else None,
            span.trace_id if span else None,
            span.span_id if span else None,
            span.parent_span_id if span else None,
            span.sampled if span else False,
            self.hook_modified,
            self.attributes,
            self.parent_call_id,
            self.depth,
            self.progress,
            self.principal,
            d.capability if d else None,
            d.effect if d else None,
        )
        return ToolResultEnvelope(
            self.call_id,
            tool,
            status,
            summary,
            data,
            artifact,
            retry,
            Timing(self.t_wall, elapsed / 1000.0),
            record,
        )

    def emit(self, envelope: ToolResultEnvelope) -> ToolResultEnvelope:
        """Hand the record to every sink (a sink's error is counted, never raised) and
        remember the call's status; return the envelope."""
        env = self.env
        rec = envelope.record
        env.emitter.emit(rec)
        env.book.statuses.remember(envelope)
        if env.hub.finished:
            env.hub.call_finished(rec)
        return envelope


class WatchedBuilder(Builder):
    """A ``Builder`` that also publishes each step to the registry's step subscribers (the
    pipeline makes one only when someone subscribed to steps, so a call nobody watches does
    not check for them at every step)."""

    __slots__ = ()

    def step(
        self, name: str, t: int, decider: str, decision: str, detail: Mapping[str, Any] | None
    ) -> int:
        """``Builder.step``, then the step handed to the subscribers."""
        now = Builder.step(self, name, t, decider, decision, detail)
        e = self.entry
        self.env.hub.call_step(
            self.call_id, self.run_id, e.definition.name if e else UNREGISTERED, self.steps[-1]
        )
        return now


def recorded_steps(env: Environment, steps: list[Step]) -> tuple[Step, ...]:
    """The steps as a record holds them: every detail (paths, reasons, errors, diffs) has been
    through the redactor here, whichever stage wrote it, but a ``Made`` one."""
    redact = env.redactor.redact
    for i, s in enumerate(steps):
        detail = s.detail
        if detail is None or type(detail) is Made:
            continue
        try:
            red, n = redact(detail)
        except Exception:
            red, n = {"_redaction_error": True}, 1
        if n:
            steps[i] = s._replace(detail=detached(red))
    return tuple(steps)


def redact_args(env: Environment, args: Any) -> Any:
    """Arguments as records and hooks see them (a redactor failure hides them all)."""
    try:
        red, _ = env.redactor.redact(args)
    except Exception:
        return {"_redaction_error": True}
    return red


def redact_detail(env: Environment, detail: Mapping[str, Any]) -> Any:
    """A redacted, detached copy of a detail a tool, a hook or a rule handed over."""
    return detached(env.redactor.redact(detail)[0])


def scrub(env: Environment, text: str | None) -> str:
    """Redact secrets and hide host paths in readable text."""
    if not text:
        return ""
    text = env.redactor.redact_text(str(text))
    root, home = env.root_text, env.home_text
    if root in text:
        text = text.replace(root + os.sep, "").replace(root, ".")
    if home in text:
        text = text.replace(home, "<home>")
    return _ABS_PATH.sub("<path>", text)


def scrub_made(env: Environment, text: str) -> str:
    """``scrub`` of a text the registry made from its own parts (a registered tool's name and
    numbers, never a tool's or a caller's text), remembered per text while the redactor's
    rules stand: the same text always scrubs to the same result, and tools return results of
    the same size again and again."""
    red = env.redactor
    if type(red) is not Redactor:  # a subclass's redaction may depend on more than the text
        return scrub(env, text)
    memo = env.made_texts
    hit = memo.get(text)
    gen = red.generation
    if hit is not None and hit[0] is red and hit[1] == gen:
        return hit[2]
    # The generation read before scrubbing: a value registered meanwhile makes the entry stale.
    out = scrub(env, text)
    if len(memo) >= _MADE_TEXTS:
        memo.clear()
    memo[text] = (red, gen, out)
    return out


def error_text(env: Environment, exc: BaseException | None) -> str:
    """An error as records show it: redacted, host paths hidden, cut to 500 characters."""
    if exc is None:
        return "error"
    return scrub(env, env.redactor.redact_exception(exc))[:500]


def safe_name(name: Any) -> str:
    """A requested tool name fit to show, or a neutral phrase."""
    if isinstance(name, str) and _NAME_RE.fullmatch(name):
        return name
    return "the requested tool"


def detached(value: Any, depth: int = 0) -> Any:
    """A copy of a step detail that shares no container with the caller or the tool.

    Steps are not tracked by the garbage collector, so nothing they hold may refer back to a
    record or an envelope; redaction shares unchanged sub-objects with its input, and a tool's
    or hook's list could later be given the envelope. Mappings and sequences are copied (as dict
    and list, what the detail encodes as anyway); values other than JSON scalars become text.
    """
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    if depth > 64:
        return "<too deep>"
    if isinstance(value, Mapping):
        return {str(k): detached(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [detached(v, depth + 1) for v in value]
    if isinstance(value, str | int | float):  # subclasses (StrEnum members, IntEnums)
        return value
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"
