"""The path policy's syntax layer: what an input may look like, decided without system calls.

NUL bytes, control characters, percent-escapes of path syntax, ``~`` and ``$VAR``/``%VAR%``
(never expanded: refused), Unicode look-alikes of path syntax and Windows forms are refused
here with a :class:`PathPolicyError` whose ``reason`` comes from the closed set ``REASONS``.
What is left is split into components for the real-path walk in :mod:`tooltrace.policy`.
"""

from __future__ import annotations

import os
import re
import unicodedata
from urllib.parse import unquote_to_bytes

from ..exceptions import TooltraceError
from ..redaction import default_redactor

__all__ = ["REASONS", "PathPolicyError", "canonical_form"]

_MAX_INPUT_CHARS = 4096
_MAX_COMPONENT_BYTES = 255
_MAX_DECODE_ROUNDS = 3
_SHOWN_CHARS = 60
# How much of a refused input a message looks at (it is redacted whole, then shown whole if it
# fits in _SHOWN_CHARS); beyond this the input is long enough to be refused as such.
_SCANNED_CHARS = 8192

# Reasons form a closed set (they end up in step details and may be counted).
REASONS = frozenset(
    {
        "invalid",
        "too_long",
        "nul_byte",
        "control_char",
        "encoded_traversal",
        "env_expansion",
        "home_expansion",
        "lookalike",
        "windows_path",
        "stream_name",
        "device_name",
        "short_name",
        "trailing_dot_space",
        "outside_workspace",
        "symlink_escape",
        "symlink_loop",
        "symlink_race",
        "not_found",
        "not_a_directory",
        "not_regular",
        "bad_extension",
        "hardlink",
        "too_large",
        "read_only",
        "protected",
    }
)


class PathPolicyError(TooltraceError, ValueError):
    """A path was refused by the workspace policy.

    ``reason`` is a short code from a closed set (``outside_workspace``, ``symlink_escape``,
    ``nul_byte``, ...). ``str(e)`` is a readable message that never holds a full host path:
    only the user's input (sanitised, shortened, absolute inputs reduced to their last
    component) or a workspace-relative path.
    """

    reason: str

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_PCT_U = re.compile(r"%[uU][0-9A-Fa-f]{4}")
# Bytes that, once decoded from an escape, would change the path's structure.
_SYNTAX_BYTES = frozenset(b"./\\:")
_ENV_DOLLAR = re.compile(r"(?<!:)\$(?:[A-Za-z_{(]|\d)")  # "::$DATA" is a stream
_ENV_PERCENT = re.compile(r"%[A-Za-z_][A-Za-z0-9_()]*%")
_DRIVE = re.compile(r"^[A-Za-z]:")
_DEVICE = re.compile(
    r"^(?:con|prn|aux|nul|com[0-9\u00b9\u00b2\u00b3]|lpt[0-9\u00b9\u00b2\u00b3]"
    r"|conin\$|conout\$|clock\$)[ .]*(?:\..*)?$",
    re.IGNORECASE,
)
_SHORT_NAME = re.compile(r"^[^~/ ]{1,6}~[0-9]+(?:\.[^.]{0,3})?$")
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")
# ASCII characters that carry path meaning; a non-ASCII character whose compatibility form
# contains one of them is a look-alike (U+FF0E FULLWIDTH FULL STOP, U+2215 DIVISION SLASH ...).
_SYNTAX_CHARS = frozenset("./\\:~%$")
# Separator look-alikes that have no compatibility mapping, so NFKC alone misses them.
_CONFUSABLES = frozenset("\u2215\u2044\u29f8\u2216\u29f5\u29f9\u2571\u2572\u01c0")


def _show(user_path: str) -> str:
    """The user's input as it may appear in a message: printable, redacted, no host path, and
    whole or not at all. It is never cut: a cut secret is no longer recognised, neither by the
    default detectors here nor by a registry's redactor, which redacts the message again with
    the operator's registered values (so a long input is described by its length only)."""
    text = "".join(ch if ch.isprintable() else "?" for ch in user_path[:_SCANNED_CHARS])
    if text.startswith(("/", "\\")) or _DRIVE.match(text):
        # An absolute input may be (part of) a host path: keep only its last component.
        last = re.split(r"[/\\]+", text.rstrip("/\\"))[-1] if text.strip("/\\") else ""
        text = "<absolute>/" + last
    text = default_redactor().redact_text(text)
    if len(text) > _SHOWN_CHARS:
        return f"<{len(user_path)} characters>"
    return repr(text)


def _fail(reason: str, user_path: str, what: str) -> PathPolicyError:
    return PathPolicyError(reason, f"path {_show(user_path)} refused ({reason}): {what}")


def _check_percent(user_path: str) -> None:
    """Refuse percent-escapes (at any depth up to 3) that decode to path syntax or NUL."""
    if _PCT_U.search(user_path):
        raise _fail("encoded_traversal", user_path, "%u escapes are not accepted")
    text = user_path
    for _ in range(_MAX_DECODE_ROUNDS):
        codes = _PCT.findall(text)
        if not codes:
            return
        values = [int(c, 16) for c in codes]
        if 0 in values:
            raise _fail("nul_byte", user_path, "an escaped NUL byte is not accepted")
        if any(v in _SYNTAX_BYTES for v in values):
            raise _fail(
                "encoded_traversal", user_path, "percent-escaped path syntax is not accepted"
            )
        raw = unquote_to_bytes(text)
        if any(v >= 0x80 for v in values):
            # Overlong UTF-8 (%c0%ae for '.') and other invalid sequences.
            try:
                decoded = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise _fail(
                    "encoded_traversal", user_path, "percent-escapes are not valid UTF-8"
                ) from None
            if _has_lookalike(decoded):
                raise _fail("encoded_traversal", user_path, "escaped look-alike of path syntax")
        text = raw.decode("utf-8", "replace")
    if _PCT.search(text):
        raise _fail("encoded_traversal", user_path, "too many layers of percent-encoding")


def _has_lookalike(text: str) -> bool:
    for ch in text:
        if ch in _CONFUSABLES:
            return True
        if ch >= "\x80":
            folded = unicodedata.normalize("NFKC", ch)
            if folded != ch and any(c in _SYNTAX_CHARS for c in folded):
                return True
    return False


def _syntax(user_path: object) -> tuple[bool, list[str]]:
    """Check the input's syntax; return (is_absolute, components) with ``.``/empty dropped.

    ``..`` components are kept: whether they escape depends on symlinks, decided by the walk.
    """
    if not isinstance(user_path, str):
        raise PathPolicyError("invalid", "path must be a string")
    if not user_path:
        raise _fail("invalid", user_path, "empty path")
    if len(user_path) > _MAX_INPUT_CHARS:
        raise _fail("too_long", user_path, f"longer than {_MAX_INPUT_CHARS} characters")
    if "\x00" in user_path:
        raise _fail("nul_byte", user_path, "NUL bytes are not accepted")
    if not user_path.isascii():
        for ch in user_path:
            if "\ud800" <= ch <= "\udfff":
                raise _fail("invalid", user_path, "not valid Unicode (lone surrogate)")
            if ch in _BIDI or unicodedata.category(ch) == "Cc":
                raise _fail("control_char", user_path, "control characters are not accepted")
        if _has_lookalike(user_path):
            raise _fail("lookalike", user_path, "a Unicode look-alike of path syntax")
    elif not user_path.isprintable():
        raise _fail("control_char", user_path, "control characters are not accepted")
    if "%" in user_path:
        _check_percent(user_path)
        if _ENV_PERCENT.search(user_path):
            raise _fail("env_expansion", user_path, "%VAR% is not expanded")
    if "$" in user_path and _ENV_DOLLAR.search(user_path):
        raise _fail("env_expansion", user_path, "$VAR is not expanded")
    path = user_path.replace("\\", "/") if "\\" in user_path else user_path
    if path.startswith("//"):
        raise _fail("windows_path", user_path, "UNC and device paths are outside the workspace")
    if _DRIVE.match(path):
        raise _fail("windows_path", user_path, "drive paths are outside the workspace")
    absolute = path[0] == "/"
    parts: list[str] = []
    for comp in path.split("/"):
        if not comp or comp == ".":
            continue
        if comp != "..":
            _check_component(comp, user_path)
        parts.append(comp)
    return absolute, parts


def _check_component(comp: str, user_path: str) -> None:
    if comp[0] == "~":
        # Refused anywhere, not only at the start: "./~" must decide like its canonical "~".
        raise _fail("home_expansion", user_path, "~ is not expanded")
    if ":" in comp:
        raise _fail("stream_name", user_path, "':' (alternate data stream) is not accepted")
    if comp[-1] in ". ":
        raise _fail("trailing_dot_space", user_path, "a name may not end with a dot or space")
    if len(comp) > 3 and "~" in comp and _SHORT_NAME.match(comp):
        raise _fail("short_name", user_path, "8.3 short names are not accepted")
    if len(comp) >= 3 and _DEVICE.match(comp):
        raise _fail("device_name", user_path, "reserved device names are not accepted")
    if len(comp) * 4 > _MAX_COMPONENT_BYTES and len(os.fsencode(comp)) > _MAX_COMPONENT_BYTES:
        raise _fail("too_long", user_path, f"a name is longer than {_MAX_COMPONENT_BYTES} bytes")


def canonical_form(user_path: str) -> str:
    """The lexical canonical form of a path: ``/`` separators, no empty or ``.`` components.

    ``..`` is kept (its meaning depends on symlinks). Raises :class:`PathPolicyError` for
    inputs refused on syntax alone. A path and its canonical form always get the same decision.
    """
    absolute, parts = _syntax(user_path)
    body = "/".join(parts)
    if absolute:
        return "/" + body
    return body or "."
