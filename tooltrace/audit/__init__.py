"""The audit trail: durable, tamper-evident records of every call, queryable with DuckDB.

This package is the trail itself: the line format and its hash chains, the segment files and the
writer that appends to them, the digest of every writer and segment, the store and the shipped
queries that read it, autopsy, compaction into Parquet, verification and crash recovery. It
knows nothing of the registry or of the other sinks.

What feeds it is the audit sink, ``tooltrace.telemetry.AuditSink``: a subscriber of finished
call records like the other sinks, which hands each record to a ``SegmentWriter`` (with
``encode_call_bytes`` / ``encode_late``) on a background worker. ``tooltrace.telemetry.audit``,
where the trail used to live, still offers every name it offered (the sink's among them).

Writing needs only the standard library, orjson and msgspec; reading (``AuditStore``) imports
DuckDB when first used, ``compact`` pyarrow. Every name loads on first use, so a reader does not
pay for the writer (nor the writer for the reader).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._autopsy import Autopsy, explain
    from ._compact import CompactionResult, compact
    from ._format import TOOLTRACE_AUDIT_KEY, encode_call_bytes, encode_late, load_key
    from ._recover import Recovered, recover_dead_segments
    from ._segments import audit_dir
    from ._store import (
        AmbiguousCallId,
        AuditStore,
        CallDetail,
        CallNotFound,
        DuplicateCallId,
        open_store,
    )
    from ._verify import Finding, VerifyReport, verify, verify_audit
    from ._writer import Ack, FsyncPolicy, SegmentWriter

__all__ = [
    "TOOLTRACE_AUDIT_KEY",
    "Ack",
    "AmbiguousCallId",
    "AuditStore",
    "Autopsy",
    "CallDetail",
    "CallNotFound",
    "CompactionResult",
    "DuplicateCallId",
    "Finding",
    "FsyncPolicy",
    "Recovered",
    "SegmentWriter",
    "VerifyReport",
    "audit_dir",
    "compact",
    "encode_call_bytes",
    "encode_late",
    "explain",
    "load_key",
    "open_store",
    "recover_dead_segments",
    "verify",
    "verify_audit",
]

from .._lazy import lazy_exports

_LAZY = {
    # reading
    "AuditStore": "_store",
    "CallNotFound": "_store",
    "AmbiguousCallId": "_store",
    "DuplicateCallId": "_store",
    "CallDetail": "_store",
    "open_store": "_store",
    "explain": "_autopsy",
    "Autopsy": "_autopsy",
    # upkeep
    "compact": "_compact",
    "CompactionResult": "_compact",
    "verify": "_verify",
    "verify_audit": "_verify",
    "VerifyReport": "_verify",
    "Finding": "_verify",
    "Recovered": "_recover",
    "recover_dead_segments": "_recover",
    # writing (the audit sink)
    "TOOLTRACE_AUDIT_KEY": "_format",
    "encode_call_bytes": "_format",
    "encode_late": "_format",
    "load_key": "_format",
    "audit_dir": "_segments",
    "Ack": "_writer",
    "FsyncPolicy": "_writer",
    "SegmentWriter": "_writer",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
