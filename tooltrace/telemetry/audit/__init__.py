"""The audit trail: durable, tamper-evident records of every call, queryable with DuckDB.

Writing (``AuditSink``) needs only the standard library and orjson; reading (``AuditStore``,
``compact``) imports DuckDB and pyarrow when first used.
"""

from ._auditsink import TOOLTRACE_AUDIT_FSYNC, TOOLTRACE_AUDIT_STRICT, AuditSink
from ._format import TOOLTRACE_AUDIT_KEY
from ._recover import Recovered, recover_dead_segments
from ._writer import Ack, FsyncPolicy

__all__ = [
    "TOOLTRACE_AUDIT_FSYNC",
    "TOOLTRACE_AUDIT_KEY",
    "TOOLTRACE_AUDIT_STRICT",
    "Ack",
    "AuditSink",
    "FsyncPolicy",
    "Recovered",
    "recover_dead_segments",
]
