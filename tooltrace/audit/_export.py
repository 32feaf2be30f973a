"""Export the audit trail as OCSF events (``_ocsf``), for the SIEM a security team already
runs.

``ocsf_batches`` reads a home's trail the way ``tooltrace tail`` does, with one reader for what
is already there and what comes next: the compacted Parquet files listed in the compaction
manifest first, then every segment not compacted, line by line, by writer and segment number
(a segment sealed meanwhile is found under its new name). So a follow never repeats a record
and never skips one, however the reading is split into looks at the trail.

What the trail holds is redacted already; every event is passed through the redactor once
more (``tooltrace.redaction.default_redactor``), as every other sink's output is, so a secret
that reached a summary by some other path cannot leave through the export either.

``OtlpLogShipper`` sends events to an OTLP/HTTP logs endpoint (the ``otlp`` extra): one log
record per event, its body the event's JSON text.
"""

from __future__ import annotations

import datetime as dt
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .._settings import resolve_home
from ..exceptions import TooltraceError
from ._follow import Follower
from ._manifest import read_manifest
from ._ocsf import EventContext, TrailApproval, TrailCall, approval_event, call_event
from ._segments import audit_dir, list_segments
from ._tables import read_by_name

if TYPE_CHECKING:
    from ..redaction import Redactor

__all__ = [
    "DeliveryError",
    "OtlpLogShipper",
    "ocsf_batches",
]

#: Events per Parquet read and per OTLP request.
_BATCH = 512


class DeliveryError(TooltraceError):
    """Events could not be delivered to where they were sent: nothing after the events
    reported as delivered left; export again from there once the receiver is back."""


# --- reading the trail ------------------------------------------------------------------------

_CALLS_SQL = """
SELECT c.call_id, c.run_id, c.tool, c.source, c.status, c.reject_stage, c.summary,
       c.error_type, epoch_us(c.started_at), c.elapsed_ms, c.execution_started, c.args_redacted,
       c.result_preview, c.artifact_path, c.artifact_sha256, c.artifact_chars, c.artifact_bytes,
       c.mode, c.tool_type, c.trace_id, c.span_id, c.parent_span_id, c.parent_call_id, c.depth,
       c.principal_user, c.principal_agent, c.principal_tenant, c.principal_roles,
       c.capability, c.effect, p.decider
FROM ({calls}) c LEFT JOIN (
  SELECT call_id, arg_min(decider, seq) AS decider FROM ({steps}) WHERE step = 'policy'
  GROUP BY call_id) p ON p.call_id = c.call_id
WHERE c.started_at >= make_timestamp($since)
ORDER BY c.started_at, c.call_id
"""
_APPROVALS_SQL = """
SELECT approval_id, call_id, run_id, tool, rule, decision, approver, reason, args_sha256,
       epoch_us(approved_at), epoch_us(expires_at), principal_user, principal_agent,
       principal_tenant, principal_roles, args_redacted
FROM ({approvals})
WHERE approved_at >= make_timestamp($since)
ORDER BY approved_at, approval_id
"""


def _compacted(adir: Path, files: Mapping[str, Any], since_us: int
               ) -> Iterator[list[TrailCall | TrailApproval]]:
    """The calls and approvals in the compacted files (``files``: the manifest's lists), in
    batches, each table in time order."""
    def paths(t: str) -> list[str]:
        listed = files.get(t) or []
        return [str(adir / rel) for rel in listed if isinstance(rel, str)]

    calls, steps, approvals = paths("calls"), paths("steps"), paths("approvals")
    if not calls and not approvals:
        return
    import duckdb

    def source(t: str, ps: list[str]) -> str:
        quoted = ", ".join("'" + p.replace("'", "''") + "'" for p in ps)
        return read_by_name(t, f"read_parquet([{quoted}], union_by_name = true)")

    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")  # DuckDB draws it on standard output
    try:
        queries: list[tuple[str, Any]] = []
        if calls:
            steps_src = source("steps", steps) if steps else read_by_name(
                "steps", "(SELECT NULL AS call_id LIMIT 0)")
            queries.append((_CALLS_SQL.format(calls=source("calls", calls), steps=steps_src),
                            TrailCall.from_row))
        if approvals:
            queries.append((_APPROVALS_SQL.format(approvals=source("approvals", approvals)),
                            TrailApproval.from_row))
        for sql, make in queries:
            cur = con.execute(sql, {"since": since_us})
            while rows := cur.fetchmany(_BATCH):
                yield [make(r) for r in rows]
    finally:
        con.close()


def _since_us(home: Path, since: dt.datetime | None, since_call: str | None) -> int:
    """The earliest time exported, in microseconds: ``since`` (naive means UTC), or the
    start of the call ``since_call`` (a full id or a unique prefix; ``CallNotFound`` or
    ``AmbiguousCallId`` otherwise)."""
    if since_call is not None:
        from ._store import AuditStore

        with AuditStore(home) as store:
            rec = store.call(since_call).record
        started = rec.get("started_at") if rec else None
        if not isinstance(started, dt.datetime):
            from ._storerecords import CallNotFound

            raise CallNotFound(f"no finished call with id {since_call[:40]!r}")
        since = started
    if since is None:
        return 0
    if since.tzinfo is None:
        since = since.replace(tzinfo=dt.UTC)
    return int(since.timestamp() * 1_000_000)


def ocsf_batches(
    home: str | Path | None = None,
    *,
    since: dt.datetime | None = None,
    since_call: str | None = None,
    follow: bool = False,
    interval: float = 0.2,
    hostname: str | None = None,
    redactor: Redactor | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """The OCSF events of a home's trail (``home``: argument > ``TOOLTRACE_HOME`` > the
    default home), redacted, as lists: the compacted records first (calls, then approvals,
    each in time order), then the records of each segment as its writer wrote them.

    ``since``: only the calls that started (and the answers given) at or after that time;
    ``since_call``: at or after the start of that call (a full id or a unique prefix), the
    call itself included. ``follow``: once everything there is has been read, keep looking
    every ``interval`` seconds and yield what was written since, an empty list when nothing
    was (a chance to stop: the caller ends the follow by no longer iterating). Each record
    is yielded exactly once. ``hostname``: the machine the calls ran on (``src_endpoint``;
    default: this machine's name).
    """
    from .. import __version__
    from ..redaction import default_redactor

    root = resolve_home(home)
    adir = audit_dir(root)
    since_us = _since_us(root, since, since_call)
    ctx = EventContext(hostname or socket.gethostname(), __version__)
    redact = (redactor or default_redactor()).redact
    manifest = read_manifest(adir)
    compacted = {(str(s.get("writer")), int(s["n"])) for s in manifest.get("segments") or []
                 if isinstance(s, Mapping) and isinstance(s.get("n"), int)}
    # Made before the compacted files are read: a segment compacted while they are read is
    # one this follower reads, and the files read are the ones the manifest listed.
    follower = Follower(root, from_start=True, done=compacted, kinds=("c", "a"))

    def events(records: Iterable[TrailCall | TrailApproval]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for r in records:
            if isinstance(r, TrailCall):
                if r.started_at_us >= since_us:
                    out.append(redact(call_event(r, ctx))[0])
            elif r.at_us >= since_us:
                out.append(redact(approval_event(r, ctx))[0])
        return out

    # Without follow, the export is of what was there now: it ends once the segments are read
    # this far, even while writers go on writing.
    snapshot = {} if follow else _sizes(adir, compacted)
    for batch in _compacted(adir, manifest.get("files") or {}, since_us):
        yield events(batch)
    while True:
        lines = follower.poll().lines
        if lines:
            yield events(TrailCall.from_line(o) if o.get("k") == "c" else TrailApproval.from_line(o)
                         for o in lines)
        if not follow and (not lines or follower.reached(snapshot)):
            return
        if not lines:  # (a poll reads at most a few MiB of a segment: with lines, look again)
            yield []
            time.sleep(interval)


def _sizes(adir: Path, skip: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The size of each segment not in ``skip`` (by writer and number)."""
    out: dict[tuple[str, int], int] = {}
    for info in list_segments(adir):
        key = (info.writer, info.n)
        if key not in skip:
            try:
                out[key] = info.path.stat().st_size
            except FileNotFoundError:  # sealed meanwhile: its lines are read under the new name
                continue
    return out


# --- shipping ---------------------------------------------------------------------------------

#: OCSF severity -> OpenTelemetry severity number (``SeverityNumber``'s values).
_OTEL_SEVERITY = {1: 9, 2: 13, 3: 14, 4: 17, 5: 21, 6: 22}


class OtlpLogShipper:
    """Sends OCSF events to an OTLP/HTTP logs endpoint
    (``http://127.0.0.1:4318/v1/logs``): one log record per event, its body the event's JSON
    text, its time the event's, its severity from the event's, its trace and span those of the
    call when it had a span, and the attributes ``ocsf.class_uid``, ``ocsf.type_uid`` and
    ``ocsf.uid``. Needs the ``otlp`` extra. Headers come from ``headers`` or the usual
    ``OTEL_EXPORTER_OTLP_LOGS_HEADERS``, the timeout from ``timeout`` or
    ``OTEL_EXPORTER_OTLP_LOGS_TIMEOUT`` (10 s); the exporter retries what the endpoint answers
    with a retryable status until then.

    ``send`` raises ``DeliveryError`` when a batch is not accepted: every event before that
    batch was delivered.
    """

    def __init__(self, endpoint: str, *, headers: Mapping[str, str] | None = None,
                 timeout: float | None = None) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        except ImportError as exc:
            raise TooltraceError("shipping to OTLP needs the otlp extra:"
                                 " pip install 'tooltrace[otlp]'") from exc
        from .. import __version__

        self.endpoint = endpoint
        self.delivered = 0
        self._exporter = OTLPLogExporter(endpoint=endpoint, headers=dict(headers or {}) or None,
                                         timeout=timeout)
        self._resource = Resource.create({"service.name": "tooltrace",
                                          "service.version": __version__})
        self._scope = InstrumentationScope("tooltrace.audit.export", __version__)

    def _record(self, event: Mapping[str, Any], body: str) -> Any:
        from opentelemetry._logs import LogRecord, SeverityNumber
        from opentelemetry.sdk._logs import ReadableLogRecord

        sev = event.get("severity_id")
        trace = event.get("trace")
        trace_id = span_id = None
        if isinstance(trace, Mapping):
            span = trace.get("span")
            try:
                trace_id = int(str(trace.get("uid")), 16)
                span_id = int(str(span.get("uid")), 16) if isinstance(span, Mapping) else None
            except ValueError:
                trace_id = span_id = None
        meta = event.get("metadata")
        record = LogRecord(
            timestamp=int(event.get("time") or 0) * 1_000_000,
            observed_timestamp=time.time_ns(),
            trace_id=trace_id, span_id=span_id,
            severity_number=SeverityNumber(_OTEL_SEVERITY.get(sev, 0))
            if isinstance(sev, int) else SeverityNumber.UNSPECIFIED,
            severity_text=str(event.get("severity") or ""),
            body=body,
            attributes={"ocsf.class_uid": int(event.get("class_uid") or 0),
                        "ocsf.type_uid": int(event.get("type_uid") or 0),
                        "ocsf.uid": str(meta.get("uid")) if isinstance(meta, Mapping) else ""},
        )
        return ReadableLogRecord(log_record=record, resource=self._resource,
                                 instrumentation_scope=self._scope)

    def send(self, events: Sequence[Mapping[str, Any]], bodies: Sequence[str] | None = None
             ) -> None:
        """Deliver ``events`` (``bodies``: their JSON text, when the caller has it already),
        a request per 512 events at most."""
        from opentelemetry.sdk._logs.export import LogRecordExportResult

        texts = bodies if bodies is not None else [orjson.dumps(e).decode() for e in events]
        for i in range(0, len(events), _BATCH):
            chunk = [self._record(e, b) for e, b in
                     zip(events[i:i + _BATCH], texts[i:i + _BATCH], strict=True)]
            if self._exporter.export(chunk) is not LogRecordExportResult.SUCCESS:
                raise DeliveryError(f"the OTLP endpoint {self.endpoint} did not accept"
                                    f" {len(chunk)} events ({self.delivered} delivered before)")
            self.delivered += len(chunk)

    def close(self) -> None:
        """Release the exporter's connection."""
        self._exporter.shutdown()  # type: ignore[no-untyped-call]
