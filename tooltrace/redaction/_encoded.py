"""Encoded secrets: the text that base64 and percent-encoded runs stand for.

A secret often travels encoded: a base64 config blob or Kubernetes secret, a percent-encoded
URL or form body. ``Redactor`` finds runs that look encoded (:data:`B64_RUN`,
:data:`PCT_TOKEN`), decodes them into pieces (:func:`b64_pieces`, :func:`unquote_pieces`) and
scans those like any other text; only a run whose decoded text holds a secret is replaced, so
benign blobs (images, digests, ids) stay as they are. Binary (non-UTF-8 or unprintable)
decodings are never scanned.
"""

from __future__ import annotations

import binascii
import re
from urllib.parse import unquote_plus

__all__ = ["B64_RUN", "MAX_ENCODED_DEPTH", "PCT_TOKEN", "b64_pieces", "unquote_pieces"]

B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")
# Tried only at token starts (the lookbehind), so a long token is not rescanned per position.
PCT_TOKEN = re.compile(r"(?<![^\s\"'<>`\\])[^\s\"'<>`\\]*%[0-9A-Fa-f]{2}[^\s\"'<>`\\]*")
MAX_ENCODED_DEPTH = 2


# A blob may start at its run's start or right after any of the run's non-alphanumeric
# characters: they are path and name separators as well as base64 characters, so the run the
# regex finds often begins with a path or a name ("com/cb/<blob>", "token_<blob>") and is
# misaligned there. Base64 decodes in independent groups of four characters, so the run is
# decoded once per alignment it has starts at, and a start's bytes are a slice of that. A start
# whose first bytes are binary (an image, a misaligned start) costs a 12-byte check.
_B64_MIN = 24  # the shortest run B64_RUN finds: no blob is shorter
_B64_HEAD = 12  # bytes (16 characters)
_B64_SEP = re.compile(r"[+/_-]")
_B64_TO_STD = str.maketrans("-_", "+/")
# UTF-8 text without control characters (a multi-byte character cut at the end is fine).
_TEXT_HEAD = re.compile(
    rb"(?:[\t\n\r\x20-\x7e]|[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}"
    rb"|[\xf0-\xf4][\x80-\xbf]{3})*(?:[\xc2-\xf4][\x80-\xbf]{0,2})?"
)


def _text_prefix(raw: bytes) -> tuple[str, int]:
    """The UTF-8 text ``raw`` starts with and its length in bytes."""
    try:
        return raw.decode("utf-8"), len(raw)
    except UnicodeDecodeError as exc:
        return raw[: exc.start].decode("utf-8"), exc.start


def _printable(text: str) -> bool:
    shown = sum(1 for ch in text if ch.isprintable() or ch in "\n\r\t")
    return shown >= len(text) * 0.95


def _b64_bytes(std: str, align: int) -> bytes:
    """``std[align:]`` decoded (standard alphabet, no padding; a lone last character dropped)."""
    body = std[align:]
    if len(body) % 4 == 1:
        body = body[:-1]
    return binascii.a2b_base64(body + "=" * (-len(body) % 4))


def b64_pieces(run: str) -> list[tuple[int, int, str]]:
    """The texts base64 in ``run`` encodes: (start, end, text) for each, in order.

    Each piece's text runs as far as the bytes are text: what follows a blob decodes to junk.
    The piece ends at the next separator after the last character that carries its text. A
    start inside a piece is passed over: it decodes to a part of its text (already scanned)
    or, misaligned, to nothing.
    """
    pieces: list[tuple[int, int, str]] = []
    n = len(run)
    # Either alphabet: a URL-safe blob is the standard one with two characters swapped.
    std = run.rstrip("=").translate(_B64_TO_STD)
    decoded: dict[int, bytes] = {}
    start = 0
    while n - start >= _B64_MIN:
        align = start % 4
        raw = decoded.get(align)
        if raw is None:
            raw = decoded[align] = _b64_bytes(std, align)
        off = (start - align) // 4 * 3
        if _TEXT_HEAD.fullmatch(raw, off, off + _B64_HEAD) is not None:
            text, used = _text_prefix(raw[off:])
            if text and _printable(text):
                sep = _B64_SEP.search(run, start + -(-used * 4 // 3))
                end = n if sep is None else sep.start()
                pieces.append((start, end, text))
                start = end
        sep = _B64_SEP.search(run, start)
        if sep is None:
            break
        start = sep.end()
    return pieces


def unquote_pieces(token: str) -> list[tuple[int, int, str]]:
    """The text a percent-encoded token stands for, as its one piece (none if the token is not
    valid UTF-8 once decoded)."""
    try:
        text = unquote_plus(token, errors="strict")
    except UnicodeDecodeError:
        return []
    return [] if text == token else [(0, len(token), text)]
