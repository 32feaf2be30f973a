"""Bounded previews and content-addressed artifacts: where a result too big to keep inline goes.

A result over the inline limit is stored whole by :class:`ArtifactStore` (already redacted) and
a :func:`preview` of it stays in the envelope.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from tooltrace.model import Artifact

from .._files import replace_whole

__all__ = ["ArtifactStore", "preview"]


def preview(text: str, limit_chars: int) -> str:
    """At most ``limit_chars`` characters of ``text``, with a note when it was cut.

    The note (``"... [truncated: N of M chars shown]"``) counts against the limit. Redact
    before previewing: cutting can split a secret so that detectors no longer see it.
    """
    if limit_chars < 0:
        raise ValueError("limit_chars must be >= 0")
    n = len(text)
    if n <= limit_chars:
        return text
    note_len = len(f" ... [truncated: {limit_chars} of {n} chars shown]")
    keep = max(limit_chars - note_len, 0)
    note = f" ... [truncated: {keep} of {n} chars shown]"
    if len(note) > limit_chars:
        return text[:limit_chars]
    return text[:keep] + note


# Python subclasses of the compiled class are allowed (it is public API).
class ArtifactStore:
    """Content-addressed storage for results too big to keep inline.

    Files live at ``<root>/<first two hex>/<sha256>.txt``; the returned
    :class:`~tooltrace.model.Artifact` path is relative to ``relative_to`` (default: the
    parent of ``root``, i.e. the tooltrace home), never a full host path. Writes are atomic
    (temporary file, fsync, rename), identical content is stored once.
    """

    __slots__ = ("_fsync", "_prefix", "root")

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        relative_to: str | os.PathLike[str] | None = None,
        fsync: bool = True,
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        base = os.path.dirname(self.root) if relative_to is None else os.fspath(relative_to)
        self._prefix = os.path.relpath(self.root, os.path.abspath(base)).replace(os.sep, "/")
        self._fsync = fsync

    def path_for(self, sha256: str) -> str:
        """The host path where content with this digest is (or would be) stored."""
        if not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise ValueError("not a sha256 hex digest")
        return os.path.join(self.root, sha256[:2], sha256 + ".txt")

    def put(self, text: str) -> Artifact:
        """Store ``text`` (UTF-8) under its sha256 and describe it."""
        return self.put_bytes(text.encode("utf-8", "surrogatepass"), chars=len(text))

    def put_bytes(self, data: bytes, *, chars: int | None = None) -> Artifact:
        """Store ``data`` as it is (a file's snapshot) under its sha256 and describe it
        (``chars``: the length of the text it encodes, else the number of bytes)."""
        digest = hashlib.sha256(data).hexdigest()
        final = self.path_for(digest)
        rel = f"{self._prefix}/{digest[:2]}/{digest}.txt"
        art = Artifact(
            path=rel, chars=len(data) if chars is None else chars, bytes=len(data), sha256=digest
        )
        try:
            if os.stat(final).st_size == len(data):
                return art  # dedup: same digest and size means same content
        except FileNotFoundError:
            pass
        directory = os.path.dirname(final)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        replace_whole(Path(final), data, mode=0o600, sync=self._fsync)
        return art

    def read(self, sha256: str) -> str:
        """The stored text for a digest (``FileNotFoundError`` if absent)."""
        return self.read_bytes(sha256).decode("utf-8", "surrogatepass")

    def read_bytes(self, sha256: str) -> bytes:
        """The stored bytes for a digest (``FileNotFoundError`` if absent, ``ValueError`` if
        the stored content no longer has that digest)."""
        with open(self.path_for(sha256), "rb") as fh:
            data = fh.read()
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError(f"artifact {sha256[:12]} does not match its digest")
        return data
