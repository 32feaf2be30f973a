"""The audit trail: durable, tamper-evident records of every call, queryable with DuckDB.

Writing (``AuditSink``) needs only the standard library and orjson; reading (``AuditStore``)
imports DuckDB when first used, ``compact`` pyarrow. Every name loads on first use, so a reader
does not pay for the writer (nor the writer for the reader).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._auditsink import TOOLTRACE_AUDIT_FSYNC, TOOLTRACE_AUDIT_STRICT, AuditSink
    from ._compact import CompactionResult, compact
    from ._format import TOOLTRACE_AUDIT_KEY
    from ._recover import Recovered, recover_dead_segments
    from ._verify import Finding, VerifyReport, verify, verify_audit
    from ._writer import Ack, FsyncPolicy
    from .autopsy import Autopsy, explain
    from .query import (
        AmbiguousCallId,
        AuditStore,
        CallDetail,
        CallNotFound,
        DuplicateCallId,
        open_store,
    )

__all__ = [
    "TOOLTRACE_AUDIT_FSYNC",
    "TOOLTRACE_AUDIT_KEY",
    "TOOLTRACE_AUDIT_STRICT",
    "Ack",
    "AmbiguousCallId",
    "AuditSink",
    "AuditStore",
    "Autopsy",
    "CallDetail",
    "CallNotFound",
    "CompactionResult",
    "DuplicateCallId",
    "Finding",
    "FsyncPolicy",
    "Recovered",
    "VerifyReport",
    "compact",
    "explain",
    "open_store",
    "recover_dead_segments",
    "verify",
    "verify_audit",
]

from ..._lazy import lazy_exports

_LAZY = {
    "TOOLTRACE_AUDIT_FSYNC": "_auditsink",
    "TOOLTRACE_AUDIT_STRICT": "_auditsink",
    "AuditSink": "_auditsink",
    "TOOLTRACE_AUDIT_KEY": "_format",
    "Recovered": "_recover",
    "recover_dead_segments": "_recover",
    "Ack": "_writer",
    "FsyncPolicy": "_writer",
    "AuditStore": "query",
    "CallNotFound": "query",
    "AmbiguousCallId": "query",
    "DuplicateCallId": "query",
    "CallDetail": "query",
    "open_store": "query",
    "compact": "_compact",
    "CompactionResult": "_compact",
    "verify": "_verify",
    "verify_audit": "_verify",
    "VerifyReport": "_verify",
    "Finding": "_verify",
    "explain": "autopsy",
    "Autopsy": "autopsy",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
