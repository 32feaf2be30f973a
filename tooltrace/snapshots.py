"""Snapshots before writes: what a file held before a call wrote it, and what the call left.

A tool that declares the path arguments it writes (``ToolDefinition.writes``; ``write_text``
does) gets each of those files read by the registry right before it runs: the previous content
is stored as a content-addressed artifact (``ArtifactStore.put_bytes``) and a ``snapshot`` step
records the path, sha256 and size (``created`` when there was no file). After the tool returns,
the registry reads the file again, and keeps both states in a small manifest,
``<home>/snapshots/<call id>.json``, which ``tooltrace restore`` and ``autopsy --diff`` read.

Files are read through :meth:`Workspace.open_read` (an ``O_NOFOLLOW`` walk from the workspace
root), so a snapshot never follows a symlink swapped in after the policy decided. A tool that
writes through the same walk can check it replaces the very file that was snapshotted
(``FileSnapshot.device`` and ``inode``, and the sha256): ``write_text`` refuses to write when
they differ. Snapshot and manifest hold the file's raw content (an exact restore needs it); they
live under the tooltrace home, owner-only, and nothing of them is shown unredacted.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from . import _settings
from ._files import replace_whole
from .policy import PathPolicyError, Workspace
from .redaction import ArtifactStore

__all__ = [
    "FileSnapshot",
    "FileState",
    "SnapshotNotFound",
    "SnapshotRecord",
    "SnapshotStore",
    "file_diff",
    "read_state",
]

_ID = re.compile(r"^[0-9A-Za-z._-]{1,128}$")


class SnapshotNotFound(LookupError):
    """No snapshot manifest for this call id (or the prefix matches none, or several)."""


@dataclass(frozen=True, slots=True)
class FileState:
    """A file's content at one moment: absent, present and kept, or present and too large."""

    exists: bool
    """Whether there was a regular file at the path."""
    sha256: str | None = None
    """The hex sha256 of its bytes (None when absent or too large to read)."""
    size: int | None = None
    """Its size in bytes (None when absent)."""
    kept: bool = False
    """Whether its content is stored as an artifact (under the size bound)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the manifest keeps."""
        return {"exists": self.exists, "sha256": self.sha256, "size": self.size,
                "kept": self.kept}

    @classmethod
    def from_dict(cls, raw: Any) -> FileState:
        """Read the manifest's form back (``ValueError`` if it is not one)."""
        if not isinstance(raw, dict):
            raise ValueError("not a file state")
        return cls(bool(raw.get("exists")), raw.get("sha256"), raw.get("size"),
                   bool(raw.get("kept")))


@dataclass(frozen=True, slots=True)
class FileSnapshot:
    """One written file of a call: where, what it held before and what the call left."""

    param: str
    """The argument that named the file."""
    path: str
    """The file, relative to the workspace root."""
    before: FileState
    """What the file held right before the tool ran (``exists`` False: the call created it)."""
    after: FileState | None = None
    """What it held right after the tool returned (None: not known)."""
    device: int = 0
    """``st_dev`` of the snapshotted file (0 when absent): a writer checks it is the same."""
    inode: int = 0
    """``st_ino`` of the snapshotted file (0 when absent)."""

    @property
    def created(self) -> bool:
        """Whether the call found no file there (restoring it means deleting it)."""
        return not self.before.exists

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the manifest keeps."""
        return {"param": self.param, "path": self.path, "before": self.before.to_dict(),
                "after": self.after.to_dict() if self.after is not None else None}


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """Every file one call wrote, as its manifest keeps them."""

    call_id: str
    """The call that wrote them."""
    tool: str
    """The tool that call ran."""
    workspace: str
    """The workspace root the paths are relative to (a host path: never shown)."""
    files: tuple[FileSnapshot, ...]
    """The written files, in the order of the tool's ``writes``."""


def read_state(
    workspace: Workspace, relative: str, max_bytes: int
) -> tuple[FileState, bytes | None, tuple[int, int]]:
    """Read a workspace file without following any symlink: (its state, its bytes when it is
    at most ``max_bytes``, (st_dev, st_ino)). A missing file (or parent) is absent; a file that
    cannot be read safely raises ``PathPolicyError`` (``symlink_race``, ``not_regular``, ...).
    """
    rp = workspace.resolve(relative, must_exist=False)
    try:
        fd = workspace.open_read(rp)
    except PathPolicyError as exc:
        if exc.reason == "not_found":
            return FileState(False), None, (0, 0)
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # open_read checked it; fstat again costs nothing
            raise PathPolicyError("not_regular", "not a regular file")
        ident = (st.st_dev, st.st_ino)
        if st.st_size > max_bytes:
            return FileState(True, None, st.st_size, False), None, ident
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            if sum(map(len, chunks)) > max_bytes:  # grew while being read
                return FileState(True, None, st.st_size, False), None, ident
        data = b"".join(chunks)
        return FileState(True, hashlib.sha256(data).hexdigest(), len(data), True), data, ident
    finally:
        os.close(fd)


class SnapshotStore:
    """Where snapshots go: contents, content-addressed, under ``<home>/snapshots/content``
    (apart from the offloaded results in ``<home>/artifacts``, which are redacted: a snapshot is
    the file as it was), and one manifest per call under ``<home>/snapshots``, all owner-only.
    ``max_bytes`` bounds the size of a file kept (larger ones are
    recorded, not kept): explicit > ``TOOLTRACE_SNAPSHOT_MAX_BYTES`` > 8 MiB. A registry's
    store is ``registry.snapshots``."""

    __slots__ = ("artifacts", "max_bytes", "root")

    def __init__(self, home: str | os.PathLike[str], max_bytes: int | None = None) -> None:
        self.root = Path(home) / "snapshots"
        self.artifacts = ArtifactStore(self.root / "content", relative_to=home)
        self.max_bytes = _settings.snapshot_max_bytes(max_bytes)

    def keep(self, data: bytes) -> None:
        """Store a file's bytes under their sha256 (the folder made owner-only first)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.artifacts.put_bytes(data)

    def _path(self, call_id: str) -> Path:
        if not _ID.match(call_id):
            raise SnapshotNotFound(f"not a call id: {call_id[:40]!r}")
        return self.root / f"{call_id}.json"

    def save(self, record: SnapshotRecord) -> None:
        """Write the call's manifest atomically (owner-only)."""
        body = orjson.dumps({
            "call_id": record.call_id, "tool": record.tool, "workspace": record.workspace,
            "files": [f.to_dict() for f in record.files],
        })
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = self._path(record.call_id)
        replace_whole(final, body, mode=0o600)

    def find(self, prefix: str) -> str:
        """The full call id of the one manifest whose id starts with ``prefix``
        (``SnapshotNotFound`` if none or several)."""
        if not _ID.match(prefix):
            raise SnapshotNotFound(f"not a call id: {prefix[:40]!r}")
        try:
            names = sorted(p.name[:-5] for p in self.root.iterdir()
                           if p.name.endswith(".json") and p.name.startswith(prefix))
        except FileNotFoundError:
            names = []
        if len(names) != 1:
            what = "no call" if not names else f"{len(names)} calls"
            raise SnapshotNotFound(f"{what} with snapshots match {prefix[:40]!r}")
        return names[0]

    def load(self, call_id: str) -> SnapshotRecord:
        """The manifest of a call (``SnapshotNotFound`` if there is none)."""
        try:
            raw = orjson.loads(self._path(call_id).read_bytes())
        except FileNotFoundError:
            raise SnapshotNotFound(f"no snapshots for call {call_id[:40]!r}") from None
        files = tuple(
            FileSnapshot(
                str(f["param"]), str(f["path"]), FileState.from_dict(f["before"]),
                FileState.from_dict(f["after"]) if f.get("after") is not None else None,
            )
            for f in raw["files"]
        )
        return SnapshotRecord(str(raw["call_id"]), str(raw["tool"]), str(raw["workspace"]),
                              files)

    def content(self, state: FileState) -> bytes | None:
        """The kept bytes of a state (None when it was absent or not kept)."""
        if not state.kept or state.sha256 is None:
            return None
        return self.artifacts.read_bytes(state.sha256)


def file_diff(store: SnapshotStore, snap: FileSnapshot) -> tuple[str, str | None]:
    """The change a call made to one file as a unified diff (not yet redacted: redact it
    before showing it), and a note when part of it cannot be shown (not kept, not text)."""
    before = store.content(snap.before) if snap.before.exists else b""
    after_state = snap.after
    if after_state is None:
        return "", "what the call left is not known"
    after = store.content(after_state) if after_state.exists else b""
    if before is None or after is None:
        return "", "the file was over the snapshot limit: its content was not kept"
    if b"\0" in before or b"\0" in after:
        return "", "binary content: not shown"
    import difflib  # only readers of a diff pay for it

    old = before.decode("utf-8", "replace").splitlines(keepends=True)
    new = after.decode("utf-8", "replace").splitlines(keepends=True)
    a = "/dev/null" if not snap.before.exists else f"a/{snap.path}"
    b = "/dev/null" if not after_state.exists else f"b/{snap.path}"
    lines = difflib.unified_diff(old, new, a, b)
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)
    return text, None if text else "no change"
