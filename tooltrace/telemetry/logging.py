"""Structured log lines for tool calls, written off the call path with structlog.

One line per finished call (``event="tool_call"``) and one extra line per step whose decision
is ``warn`` or ``block`` (``event="tool_step"``). Records reach the sink already redacted; lines
are rendered and written in batches on a ``BatchWorker`` thread, so a slow or broken stream
never slows or breaks a call.

Configuration, explicit argument > environment variable > default:

- ``TOOLTRACE_LOG_LEVEL``: ``debug`` | ``info`` (default) | ``warning`` | ``error``.
- ``TOOLTRACE_LOG_FORMAT``: ``json`` (default; one JSON object per line, orjson) | ``console``.
"""

from __future__ import annotations

import io
import logging as _stdlib_logging
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import IO, Any, Final

import orjson
import structlog

from .._jsonsafe import valid_text, writable
from .._settings import TOOLTRACE_LOG_FORMAT, TOOLTRACE_LOG_LEVEL, log_format, log_level
from ..model import CallRecord, Status
from ._worker import BatchWorker

__all__ = [
    "STEP_DECISIONS",
    "TOOLTRACE_LOG_FORMAT",
    "TOOLTRACE_LOG_LEVEL",
    "LoggingSink",
]

#: Step decisions that get a line of their own.
STEP_DECISIONS: Final = frozenset({"warn", "block"})

_LEVELS: Final = {
    "debug": _stdlib_logging.DEBUG,
    "info": _stdlib_logging.INFO,
    "warning": _stdlib_logging.WARNING,
    "warn": _stdlib_logging.WARNING,
    "error": _stdlib_logging.ERROR,
    "critical": _stdlib_logging.CRITICAL,
}
_FORMATS: Final = ("json", "console")
# How loud each final status is: a rejection is the system working, a failure or an
# unconfirmed outcome needs a person.
_STATUS_LEVEL: Final = {
    Status.OK: "info",
    Status.CANCELLED: "info",
    Status.REJECTED: "warning",
    Status.FAILED: "error",
    Status.UNKNOWN: "error",
}


#: (second, "YYYY-MM-DDTHH:MM:SS") of the last timestamp formatted: a batch's lines mostly
#: share their second. One tuple, replaced whole, so threads never see a torn pair.
_ISO_SECOND: tuple[int, str] = (-1, "")


def _iso(us: int) -> str:
    """RFC 3339 UTC with microseconds (``2026-12-02T17:20:17.123456Z``); the text of the
    second is kept, since log lines come many to a second."""
    global _ISO_SECOND
    sec, micro = divmod(us, 1_000_000)
    cached = _ISO_SECOND
    if cached[0] != sec:
        try:
            cached = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
        except (OverflowError, OSError, ValueError):  # outside what the C library can format
            return datetime.fromtimestamp(us / 1e6, UTC).isoformat(
                timespec="microseconds"
            ).replace("+00:00", "Z")
        _ISO_SECOND = cached
    return f"{cached[1]}.{micro:06d}Z"


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "\u2026"


class _LineBuffer:
    """A structlog 'logger' that collects rendered lines so a batch is written at once."""

    def __init__(self) -> None:
        self.lines: list[Any] = []

    def msg(self, line: Any) -> None:
        # A console line holds the values as they are: a lone surrogate, which no stream can
        # encode, would fail the write of the whole batch.
        if type(line) is str and not line.isascii():
            line = valid_text(line)
        self.lines.append(line)

    debug = info = warning = warn = error = critical = exception = msg


def _resolve_level(level: str | int | None) -> int:
    level = log_level(level)
    if isinstance(level, int):
        return level
    try:
        return _LEVELS[level.strip().lower()]
    except KeyError:
        raise ValueError(f"log level must be one of {sorted(_LEVELS)}, not {level!r}") from None


def _resolve_format(fmt: str | None) -> str:
    fmt = log_format(fmt)
    fmt = fmt.strip().lower()
    if fmt not in _FORMATS:
        raise ValueError(f"log format must be one of {_FORMATS}, not {fmt!r}")
    return fmt


class LoggingSink:
    """Write one structured line per finished call (and per warn/block step) off the call path.

    Args:
        stream: where lines go: a text or binary file object; ``sys.stderr`` when None.
        level: minimum level written (name or ``logging`` number); None reads
            ``TOOLTRACE_LOG_LEVEL``, default ``info``. Calls log at ``info`` (ok, cancelled),
            ``warning`` (rejected) or ``error`` (failed, unknown); step lines at ``warning``.
        fmt: ``"json"`` or ``"console"``; None reads ``TOOLTRACE_LOG_FORMAT``, default json.
        step_decisions: step decisions that get their own ``tool_step`` line.
        max_summary_chars: longest summary written; longer ones are cut with an ellipsis.
        max_queue, max_batch, interval_s: the background worker's bounds.
    """

    name = "logging"

    def __init__(
        self,
        stream: IO[str] | IO[bytes] | None = None,
        *,
        level: str | int | None = None,
        fmt: str | None = None,
        step_decisions: Iterable[str] = STEP_DECISIONS,
        max_summary_chars: int = 1000,
        max_queue: int = 65536,
        max_batch: int = 1024,
        interval_s: float = 0.2,
    ) -> None:
        #: Minimum level (a ``logging`` number).
        self.level = _resolve_level(level)
        #: ``json`` or ``console``.
        self.format = _resolve_format(fmt)
        self._stream: Any = sys.stderr if stream is None else stream
        self._binary = not isinstance(self._stream, io.TextIOBase) and not hasattr(
            self._stream, "encoding"
        )
        self._step_decisions = frozenset(step_decisions)
        # Which records have a line at this level: their status line, or a step line (warning).
        self._status_written = frozenset(
            st for st, name in _STATUS_LEVEL.items() if _LEVELS[name] >= self.level)
        self._steps_written = _LEVELS["warning"] >= self.level
        self._late_written = _LEVELS["info"] >= self.level  # tool_late_step lines
        self._max_summary = max_summary_chars
        self._buffer = _LineBuffer()
        renderer: Any
        if self.format == "json":
            if self._binary:
                renderer = structlog.processors.JSONRenderer(serializer=_dumps)
            else:
                renderer = structlog.processors.JSONRenderer(serializer=_dumps_str)
        else:
            renderer = structlog.dev.ConsoleRenderer(colors=False, pad_event_to=0)
        processors: list[Any] = [structlog.processors.add_log_level, renderer]
        if self._binary and self.format != "json":
            processors.append(_console_bytes)
        # bind() turns the lazy proxy into the bound logger itself: each line then skips the
        # proxy's __getattr__.
        self._log = structlog.wrap_logger(
            self._buffer,
            processors=processors,
            wrapper_class=structlog.make_filtering_bound_logger(self.level),
        ).bind()
        #: Lines that could not be written (stream closed or failing), counted, never raised.
        self.export_failures = 0
        # Holds CallRecords and late steps (see emit_late).
        self._worker: BatchWorker[Any] = BatchWorker(
            "logging", self._write_batch, max_queue=max_queue, max_batch=max_batch,
            interval_s=interval_s,
        )

    @property
    def dropped(self) -> int:
        """Records dropped because the queue was full or the sink was shut down."""
        return self._worker.dropped

    @property
    def depth(self) -> int:
        """Records waiting to be written."""
        return self._worker.depth

    def emit(self, record: CallRecord) -> None:
        """Queue a finished record for writing (never blocks, never raises). A record none of
        whose lines reaches the sink's level (an ``ok`` call under ``error``) is not queued."""
        try:
            if record.status in self._status_written or (
                    self._steps_written
                    and any(st.decision in self._step_decisions for st in record.steps)):
                self._worker.submit(record)
        except Exception:
            self._worker.dropped += 1

    def emit_late(self, late: Any) -> None:
        """Queue a step recorded after its call returned (``tool_late_step`` line).

        ``late`` has ``call_id``, ``run_id``, ``tool`` and ``step`` (a ``Step``): for example
        the confirmed end state of a call first reported as ``unknown``, or a job's end.
        """
        try:
            if self._late_written:
                self._worker.submit(late)
        except Exception:
            self._worker.dropped += 1

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Write everything queued; False if the deadline passed first."""
        return self._worker.flush(timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Write what is queued within the deadline, then stop (the stream is left open)."""
        self._worker.shutdown(timeout_s)

    # -- background worker ----------------------------------------------------------------------

    def _write_batch(self, batch: list[Any]) -> None:
        lines = self._buffer.lines
        lines.clear()
        log = self._log
        # In slices that hand the interpreter back to the calls (see BatchWorker.paced).
        for item in self._worker.paced(batch):
            try:
                if isinstance(item, CallRecord):
                    self._render(log, item)
                else:
                    self._render_late(log, item)
            except Exception:
                self.export_failures += 1
        if not lines:
            return
        sep: Any = b"\n" if self._binary else "\n"
        # An empty last element gives the trailing newline: one batch-sized string, not a
        # second copy of it (``join(...) + sep``) that glibc may keep resident afterwards.
        lines.append(sep[:0])
        data = sep.join(lines)
        lines.clear()
        try:
            self._stream.write(data)
            self._stream.flush()
        except Exception:
            self.export_failures += len(batch)

    def _render(self, log: Any, rec: CallRecord) -> None:
        fields: dict[str, Any] = {
            "timestamp": _iso(rec.started_at_us + rec.elapsed_us),
            "call_id": rec.call_id,
            "run_id": rec.run_id,
            "tool": rec.tool,
            "status": str(rec.status),
            "stage": None if rec.reject_stage is None else str(rec.reject_stage),
            "elapsed_ms": round(rec.elapsed_us / 1000.0, 3),
            "trace_id": rec.trace_id,
            "span_id": rec.span_id,
            "summary": _bounded(rec.summary, self._max_summary),
        }
        if rec.error_type:
            fields["error_type"] = rec.error_type
        if rec.source:
            fields["source"] = rec.source
        if rec.mode != "default":
            fields["mode"] = rec.mode
        if rec.artifact is not None:
            fields["artifact_sha256"] = rec.artifact.sha256
        if rec.hook_modified:
            fields["hook_modified"] = True
        if rec.principal is not None:
            fields["principal"] = rec.principal.to_dict()
        getattr(log, _STATUS_LEVEL.get(rec.status, "info"))("tool_call", **fields)
        decisions = self._step_decisions
        for st in rec.steps:
            if st.decision not in decisions:
                continue
            step_fields: dict[str, Any] = {
                "timestamp": _iso(st.started_at_us),
                "call_id": rec.call_id,
                "run_id": rec.run_id,
                "tool": rec.tool,
                "step": st.step,
                "seq": st.seq,
                "decider": st.decider,
                "decision": st.decision,
                "elapsed_ms": round(st.elapsed_us / 1000.0, 3),
                "trace_id": rec.trace_id,
                "span_id": rec.span_id,
            }
            if st.detail:
                step_fields["detail"] = dict(st.detail)
            log.warning("tool_step", **step_fields)

    def _render_late(self, log: Any, late: Any) -> None:
        st = late.step
        fields: dict[str, Any] = {
            "timestamp": _iso(st.started_at_us),
            "call_id": late.call_id,
            "run_id": late.run_id,
            "tool": late.tool,
            "step": st.step,
            "seq": st.seq,
            "decider": st.decider,
            "decision": st.decision,
        }
        if st.detail:
            fields["detail"] = dict(st.detail)
        log.info("tool_late_step", **fields)


def _dumps(obj: Any, **_: Any) -> bytes:
    try:
        return orjson.dumps(obj, default=str)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, an integer past 64 bits ...
        return orjson.dumps(writable(obj))


def _console_bytes(_logger: Any, _method: str, line: str) -> bytes:
    """A console line for a binary stream."""
    return valid_text(line).encode()


def _dumps_str(obj: Any, **_: Any) -> str:
    return _dumps(obj).decode()
