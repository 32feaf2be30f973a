"""Where in a Cedar policy a problem is: cedarpy's errors carry no position, so it is found.

A parse error is placed by parsing ever longer prefixes of the policy (a prefix that only stops
early fails "at end of input"; the shortest one that fails otherwise ends just past the
offending token) and looking back for the token the message names. A schema error is placed at
what its message names (an attribute, an entity type, a function) where the policy's body
first writes it. Annotation problems are placed at the annotation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Statement"]

_FRAGMENT = re.compile(r"`([^`]+)`|'([^']+)'")
_EFFECT = re.compile(r"\b(?:permit|forbid)\s*\(")
_AT_END = "unexpected end of input"


@dataclass(frozen=True, slots=True)
class Statement:
    """One policy's text and where it starts in its file."""

    line: int
    """The line it starts on, from 1."""
    column: int
    """The column it starts at, from 1."""
    text: str
    """Its text, up to and with its ``;``."""

    def at(self, offset: int) -> tuple[int, int]:
        """The file's line and column of a character of the statement."""
        before = self.text[:offset]
        breaks = before.count("\n")
        if not breaks:
            return self.line, self.column + offset
        return self.line + breaks, offset - before.rfind("\n")

    def body(self) -> int:
        """Where the policy itself starts, past its annotations (``permit`` or ``forbid``)."""
        m = _EFFECT.search(self.text)
        return m.start() if m else 0

    def annotation(self, key: str) -> tuple[int, int]:
        """Where ``@key(`` is written (the policy's start when it is not)."""
        m = re.search(rf"@{re.escape(key)}\s*\(", self.text)
        return self.at(m.start() if m else self.body())

    def schema_error(self, message: str) -> tuple[int, int]:
        """Where what a schema error names is first written in the policy's body."""
        start = self.body()
        for frag in _fragments(message):
            hit = _first(self.text, frag, start)
            if hit is not None:
                return self.at(hit)
        return self.at(start)

    def syntax_error(self, cedarpy: Any, message: str) -> tuple[int, int]:
        """Where a parse error of the statement (alone) is."""
        text = self.text
        if message.startswith(_AT_END):
            return self.at(max(len(text.rstrip()) - 1, 0))
        n = _shortest_failing(cedarpy, text)
        if n is None:
            return self.schema_error(message)
        for frag in _fragments(message):
            hit = _last(text, frag, n)
            if hit is not None:
                return self.at(hit)
        return self.at(_token_start(text, n))


def _fragments(message: str) -> list[str]:
    """What a message names: quoted fragments, else a last word after a colon."""
    out = [a or b for a, b in _FRAGMENT.findall(message)]
    if not out and ": " in message:
        tail = message.rsplit(": ", 1)[1].strip()
        if tail and " " not in tail:
            out.append(tail)
    return out


def _pattern(frag: str) -> re.Pattern[str]:
    # An attribute is written after a dot (or `has`); a name is not part of a longer one.
    word = frag[:1].isalnum() or frag[:1] == "_"
    left, right = (r"(?<![\w:])", r"(?![\w])") if word else ("", "")
    return re.compile(rf"{left}{re.escape(frag)}{right}")


def _first(text: str, frag: str, start: int) -> int | None:
    dotted = re.compile(rf"\.\s*{re.escape(frag)}\b")
    m = dotted.search(text, start) or _pattern(frag).search(text, start)
    if m is None:
        return None
    return m.end() - len(frag)


def _last(text: str, frag: str, end: int) -> int | None:
    hits = list(_pattern(frag).finditer(text, 0, end))
    return hits[-1].start() if hits else None


def _fails(cedarpy: Any, text: str) -> bool:
    """Whether ``text`` fails to parse for a reason other than stopping early."""
    try:
        cedarpy.PolicySet.from_str(text)
    except ValueError as exc:
        return not str(exc).startswith(_AT_END)
    return False


def _shortest_failing(cedarpy: Any, text: str) -> int | None:
    """The length of the shortest prefix that fails other than at its end (None: only the
    whole statement fails, or it does not)."""
    if not _fails(cedarpy, text):
        return None
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi) // 2
        if _fails(cedarpy, text[:mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _token_start(text: str, end: int) -> int:
    """The start of the last token before ``end``."""
    i = end - 1
    while i > 0 and text[i].isspace():
        i -= 1
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_") and text[i].isalnum():
        i -= 1
    return max(i, 0)
