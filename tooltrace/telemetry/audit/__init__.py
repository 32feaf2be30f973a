"""The audit trail: durable, tamper-evident records of every call, queryable with DuckDB.

Writing (``AuditSink``) needs only the standard library and orjson; reading (``AuditStore``,
``compact``) imports DuckDB and pyarrow when first used.
"""

from typing import TYPE_CHECKING

from ._auditsink import TOOLTRACE_AUDIT_FSYNC, TOOLTRACE_AUDIT_STRICT, AuditSink
from ._format import TOOLTRACE_AUDIT_KEY
from ._recover import Recovered, recover_dead_segments
from ._writer import Ack, FsyncPolicy

if TYPE_CHECKING:
    from ._compact import CompactionResult, compact
    from ._verify import Finding, VerifyReport, verify, verify_audit
    from .autopsy import Autopsy, explain
    from .query import AmbiguousCallId, AuditStore, CallDetail, CallNotFound, open_store

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
    "AuditStore": "query",
    "CallNotFound": "query",
    "AmbiguousCallId": "query",
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
