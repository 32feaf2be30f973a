"""The audit trail: durable, tamper-evident records of every call, queryable with DuckDB.

This package is the trail itself: the line format and its hash chains, the segment files and the
writer that appends to them, the digest of every writer and segment, the store and the shipped
queries that read it, autopsy, compaction into Parquet, verification and crash recovery. It
knows nothing of the registry or of the sinks.

What feeds it is the audit sink, ``tooltrace.telemetry.AuditSink``: a subscriber of finished
call records and approvals like the other sinks, which hands each record to a
``SegmentWriter`` (encoded with ``encode_call_bytes`` / ``encode_late`` / ``encode_approval``)
on a background worker. ``tooltrace.telemetry.audit``, where the trail used to live, still
offers every name it offered (the sink's among them).

The public names, by who needs them:

- Reading: ``recorded`` (is a call id in the trail?), ``AuditStore`` / ``open_store``
  (DuckDB views ``tool_calls``, ``tool_call_steps``, ``tool_call_intents``, ``approvals``),
  ``list_approvals``, ``explain`` /
  ``Autopsy``, the lookup errors, and the shipped post-mortem queries (``shipped_sql``,
  ``find_sql``, ``load_sql``, ``SqlFile``, ``Param``).
- Exporting: ``ocsf_batches`` (the trail as OCSF events, ``OCSF_VERSION``; ``tooltrace
  export``) and ``OtlpLogShipper`` (to an OTLP logs endpoint; ``DeliveryError``).
- Upkeep: ``compact`` (run in the background by writers: ``BackgroundCompaction``, with the
  backlog each writer reports, ``WriterBacklog`` / ``CompactionBacklog``), ``verify`` /
  ``verify_audit`` (with ``Trust`` / ``trust_for``: the
  public keys signatures must verify with), ``recover_dead_segments``, ``parse_head``.
- Signatures and anchors: ``load_signer`` / ``Signer`` (the home's Ed25519 key, which signs
  checkpoints, seals, approvals and digest entries), ``load_public_key`` / ``PublicKey``,
  ``signing_key_path``, ``secret_values`` (the keys' secret forms, for a redactor); the anchors
  file (``anchors_path``, ``AnchorLog``) and the check of a trail against anchors
  (``parse_anchors``, ``ParsedAnchors``, ``Anchor``, ``check_anchors``, ``AnchorGap``).
- Writing (the audit sink): ``SegmentWriter``, ``FsyncPolicy``, ``Ack``, ``encode_call_bytes``,
  ``encode_late``, ``encode_approval``, ``load_key``.
- Moving the trail elsewhere (``tooltrace.archive``): the segment files (``audit_dir``,
  ``list_segments``, ``read_segment``, ``segment_name``, ``SegmentInfo``, ``ParsedSegment``),
  their table rows (``TABLES``, ``build_tables``, ``empty_tables``, ``schemas``) and the digest
  (``read_digest``, ``append_digest``, ``digest_entry`` with the fates ``COMPACTED``,
  ``SHIPPED``, ``PRUNED``, ``SegmentFate``, ``Digest``, ``digest_path``).

Writing needs only the standard library, orjson and msgspec; reading (``AuditStore``) imports
DuckDB when first used, ``compact`` and the table builders pyarrow. Every name loads on first
use, so a reader does not pay for the writer (nor the writer for the reader).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._anchorcheck import Anchor, AnchorGap, ParsedAnchors, check_anchors, parse_anchors
    from ._anchors import AnchorLog, anchors_path
    from ._approvalrows import list_approvals
    from ._autocompact import BackgroundCompaction, CompactionBacklog, WriterBacklog
    from ._autopsy import Autopsy, explain
    from ._compact import CompactionResult, compact
    from ._export import DeliveryError, OtlpLogShipper, ocsf_batches
    from ._family import call_family
    from ._findings import Finding, VerifyReport
    from ._follow import Follower, Poll
    from ._format import (
        TOOLTRACE_AUDIT_KEY,
        encode_approval,
        encode_call_bytes,
        encode_late,
        load_key,
    )
    from ._idprefix import (
        MIN_PREFIX,
        AmbiguousPrefix,
        SeenIds,
        ambiguous,
        cut,
        match_prefix,
        unique_prefixes,
    )
    from ._live import LiveProgress, live_dir, read_live
    from ._lookup import recorded
    from ._manifest import (
        COMPACTED,
        PRUNED,
        SHIPPED,
        Digest,
        SegmentFate,
        append_digest,
        digest_entry,
        digest_path,
        parse_head,
        read_digest,
    )
    from ._ocsf import OCSF_VERSION
    from ._recover import Recovered, recover_dead_segments
    from ._segments import (
        ParsedSegment,
        SegmentInfo,
        audit_dir,
        list_segments,
        read_segment,
        segment_name,
    )
    from ._signing import (
        PublicKey,
        Signer,
        Trust,
        load_public_key,
        load_signer,
        secret_values,
        signing_key_path,
    )
    from ._sqlfiles import MissingParameter, Param, SqlFile, find_sql, load_sql, shipped_sql
    from ._store import AuditStore, open_store
    from ._storerecords import AmbiguousCallId, CallDetail, CallNotFound, DuplicateCallId
    from ._tables import TABLES, build_tables, empty_tables, schemas
    from ._verify import trust_for, verify, verify_audit
    from ._writer import Ack, FsyncPolicy, SegmentWriter

__all__ = [
    "COMPACTED",
    "MIN_PREFIX",
    "OCSF_VERSION",
    "PRUNED",
    "SHIPPED",
    "TABLES",
    "TOOLTRACE_AUDIT_KEY",
    "Ack",
    "AmbiguousCallId",
    "AmbiguousPrefix",
    "Anchor",
    "AnchorGap",
    "AnchorLog",
    "AuditStore",
    "Autopsy",
    "BackgroundCompaction",
    "CallDetail",
    "CallNotFound",
    "CompactionBacklog",
    "CompactionResult",
    "DeliveryError",
    "Digest",
    "DuplicateCallId",
    "Finding",
    "Follower",
    "FsyncPolicy",
    "LiveProgress",
    "MissingParameter",
    "OtlpLogShipper",
    "Param",
    "ParsedAnchors",
    "ParsedSegment",
    "Poll",
    "PublicKey",
    "Recovered",
    "SeenIds",
    "SegmentFate",
    "SegmentInfo",
    "SegmentWriter",
    "Signer",
    "SqlFile",
    "Trust",
    "VerifyReport",
    "WriterBacklog",
    "ambiguous",
    "anchors_path",
    "append_digest",
    "audit_dir",
    "build_tables",
    "call_family",
    "check_anchors",
    "compact",
    "cut",
    "digest_entry",
    "digest_path",
    "empty_tables",
    "encode_approval",
    "encode_call_bytes",
    "encode_late",
    "explain",
    "find_sql",
    "list_approvals",
    "list_segments",
    "live_dir",
    "load_key",
    "load_public_key",
    "load_signer",
    "load_sql",
    "match_prefix",
    "ocsf_batches",
    "open_store",
    "parse_anchors",
    "parse_head",
    "read_digest",
    "read_live",
    "read_segment",
    "recorded",
    "recover_dead_segments",
    "schemas",
    "secret_values",
    "segment_name",
    "shipped_sql",
    "signing_key_path",
    "trust_for",
    "unique_prefixes",
    "verify",
    "verify_audit",
]

from .._lazy import lazy_exports

_LAZY = {
    # reading
    "MIN_PREFIX": "_idprefix",
    "AmbiguousPrefix": "_idprefix",
    "SeenIds": "_idprefix",
    "ambiguous": "_idprefix",
    "cut": "_idprefix",
    "match_prefix": "_idprefix",
    "unique_prefixes": "_idprefix",
    "AuditStore": "_store",
    "CallNotFound": "_storerecords",
    "AmbiguousCallId": "_storerecords",
    "DuplicateCallId": "_storerecords",
    "CallDetail": "_storerecords",
    "open_store": "_store",
    "recorded": "_lookup",
    "explain": "_autopsy",
    "LiveProgress": "_live",
    "Follower": "_follow",
    "Poll": "_follow",
    "live_dir": "_live",
    "read_live": "_live",
    "call_family": "_family",
    "list_approvals": "_approvalrows",
    "Autopsy": "_autopsy",
    "SqlFile": "_sqlfiles",
    "Param": "_sqlfiles",
    "MissingParameter": "_sqlfiles",
    "find_sql": "_sqlfiles",
    "load_sql": "_sqlfiles",
    "shipped_sql": "_sqlfiles",
    # exporting
    "OCSF_VERSION": "_ocsf",
    "DeliveryError": "_export",
    "OtlpLogShipper": "_export",
    "ocsf_batches": "_export",
    # upkeep
    "compact": "_compact",
    "CompactionResult": "_compact",
    "BackgroundCompaction": "_autocompact",
    "CompactionBacklog": "_autocompact",
    "WriterBacklog": "_autocompact",
    "verify": "_verify",
    "verify_audit": "_verify",
    "VerifyReport": "_findings",
    "Finding": "_findings",
    "Recovered": "_recover",
    "recover_dead_segments": "_recover",
    "parse_head": "_manifest",
    "trust_for": "_verify",
    # signatures and anchors
    "Signer": "_signing",
    "PublicKey": "_signing",
    "Trust": "_signing",
    "load_signer": "_signing",
    "load_public_key": "_signing",
    "secret_values": "_signing",
    "signing_key_path": "_signing",
    "Anchor": "_anchorcheck",
    "AnchorGap": "_anchorcheck",
    "AnchorLog": "_anchors",
    "ParsedAnchors": "_anchorcheck",
    "anchors_path": "_anchors",
    "check_anchors": "_anchorcheck",
    "parse_anchors": "_anchorcheck",
    # writing (the audit sink)
    "TOOLTRACE_AUDIT_KEY": "_format",
    "encode_call_bytes": "_format",
    "encode_approval": "_format",
    "encode_late": "_format",
    "load_key": "_format",
    "Ack": "_writer",
    "FsyncPolicy": "_writer",
    "SegmentWriter": "_writer",
    # the segment files, their rows and the digest (the archive)
    "audit_dir": "_segments",
    "list_segments": "_segments",
    "read_segment": "_segments",
    "segment_name": "_segments",
    "SegmentInfo": "_segments",
    "ParsedSegment": "_segments",
    "TABLES": "_tables",
    "build_tables": "_tables",
    "empty_tables": "_tables",
    "schemas": "_tables",
    "COMPACTED": "_manifest",
    "SHIPPED": "_manifest",
    "PRUNED": "_manifest",
    "Digest": "_manifest",
    "SegmentFate": "_manifest",
    "append_digest": "_manifest",
    "digest_entry": "_manifest",
    "digest_path": "_manifest",
    "read_digest": "_manifest",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
