"""``tooltrace.telemetry.audit``: where the audit trail used to live, kept for existing imports.

The trail is ``tooltrace.audit`` and the sink that writes it ``tooltrace.telemetry.AuditSink``.
Every name this module offered before still imports from here, and loads on first use as it
did; its former submodules (``query``, ``autopsy``) are gone: import their names from here or
from ``tooltrace.audit``. New code imports from those two places.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ..audit import (
        TOOLTRACE_AUDIT_KEY,
        Ack,
        AmbiguousCallId,
        AuditStore,
        Autopsy,
        CallDetail,
        CallNotFound,
        CompactionResult,
        DuplicateCallId,
        Finding,
        FsyncPolicy,
        Recovered,
        VerifyReport,
        compact,
        explain,
        open_store,
        recover_dead_segments,
        verify,
        verify_audit,
    )
    from ._auditsink import TOOLTRACE_AUDIT_FSYNC, TOOLTRACE_AUDIT_STRICT, AuditSink

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

_SINK = ("AuditSink", "TOOLTRACE_AUDIT_FSYNC", "TOOLTRACE_AUDIT_STRICT")
# Module names are relative to this module: "..." is tooltrace, ".." tooltrace.telemetry.
_LAZY = {name: ".._auditsink" if name in _SINK else "...audit" for name in __all__}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
