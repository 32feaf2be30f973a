"""The scale-out audit archive: sealed segments shipped exactly once to object storage.

Two targets, one layout (see ``_layout``): a DuckLake table set (``ducklake:postgres:...``,
catalog in PostgreSQL, Parquet on S3, written concurrently by a fleet) and plain Parquet
partitioned by day (``s3://bucket/prefix``) for any engine that reads Parquet.

- ``ship(home, archive)`` / ``tooltrace audit ship``: move sealed segments, exactly once.
- ``ArchiveShipper``: the same on a background thread, as a sink placed after ``AuditSink``.
- ``ArchiveStore`` / ``open_archive``: the ``tool_calls`` / ``tool_call_steps`` views over the
  archive, with the helpers every CLI reader uses.
- ``verify_archive``: hash chains and keyed checkpoints over shipped and local records.
- ``ship_anchors`` / ``tooltrace audit ship-anchors``: the home's signed checkpoint heads to
  S3 under a COMPLIANCE Object Lock; ``fetch_anchors`` reads them back for ``verify``.

Everything here imports DuckDB and pyarrow only when used; the DuckDB extensions come from the
``archive`` extra (``pip install 'tooltrace[archive]'``).
"""

from typing import TYPE_CHECKING

from ._connect import TOOLTRACE_ARCHIVE, TOOLTRACE_ARCHIVE_DATA_PATH, ArchiveError, parse_target

if TYPE_CHECKING:
    from ._anchors import AnchorShipResult, fetch_anchors, ship_anchors
    from ._ship import ArchiveShipper, ShipResult, ship
    from ._store import ArchiveStore, open_archive
    from ._verify import verify_archive

__all__ = [
    "TOOLTRACE_ARCHIVE",
    "TOOLTRACE_ARCHIVE_DATA_PATH",
    "AnchorShipResult",
    "ArchiveError",
    "ArchiveShipper",
    "ArchiveStore",
    "ShipResult",
    "fetch_anchors",
    "open_archive",
    "parse_target",
    "ship",
    "ship_anchors",
    "verify_archive",
]

from .._lazy import lazy_exports

_LAZY = {
    "AnchorShipResult": "_anchors",
    "fetch_anchors": "_anchors",
    "ship_anchors": "_anchors",
    "ArchiveShipper": "_ship",
    "ShipResult": "_ship",
    "ship": "_ship",
    "ArchiveStore": "_store",
    "open_archive": "_store",
    "verify_archive": "_verify",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
