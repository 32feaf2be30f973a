"""What verifying the audit trail reports: each :class:`Finding` and the :class:`VerifyReport`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._anchorcheck import AnchorGap

__all__ = ["Finding", "VerifyReport"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: where (segment file name, line number, seq) and what."""

    severity: str  # "error" | "warning"
    kind: str  # edited | deleted | reordered | inserted | truncated | torn | corrupt | ...
    segment: str
    line: int | None
    seq: int | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "severity": self.severity,
            "kind": self.kind,
            "segment": self.segment,
            "line": self.line,
            "seq": self.seq,
            "message": self.message,
        }


@dataclass(slots=True)
class VerifyReport:
    """What ``verify_audit`` checked and found."""

    writers: int = 0
    segments: int = 0
    records: int = 0
    checkpoints: int = 0
    keyed: bool = True
    findings: list[Finding] = field(default_factory=list)
    #: ``<seq>:<hash>`` of the segment digest's last entry: keep it outside the home and pass
    #: it back as ``expect`` to catch a rollback or replacement of the whole home.
    head: str = ""
    #: Lookup files re-derived from their Parquet files and compared (``_lookupfile``).
    lookups: int = 0
    #: Signatures (checkpoints, seals, approvals, digest entries) that verified.
    signatures: int = 0
    #: Ids of the public keys signatures were checked against (empty: none was known).
    key_ids: list[str] = field(default_factory=list)
    #: Whether the trail was checked against anchors (``check_anchors``).
    anchor_checked: bool = False
    #: Anchors whose signature verified, and how many writers they name.
    anchors: int = 0
    anchored_writers: int = 0
    #: Anchored records the trail no longer holds, by writer and seq.
    gaps: list[AnchorGap] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing of severity ``error`` was found."""
        return not any(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "ok": self.ok,
            "writers": self.writers,
            "segments": self.segments,
            "records": self.records,
            "checkpoints": self.checkpoints,
            "keyed": self.keyed,
            "head": self.head,
            "lookups": self.lookups,
            "signatures": self.signatures,
            "key_ids": list(self.key_ids),
            "anchors": None if not self.anchor_checked else {
                "anchors": self.anchors,
                "writers": self.anchored_writers,
                "gaps": [g.to_dict() for g in self.gaps],
            },
            "findings": [f.to_dict() for f in self.findings],
        }
