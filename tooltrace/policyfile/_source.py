"""Reading a policy file: TOML parsed by tomlkit, and where each key and value stands in it.

tomlkit reports a syntax error's line and column; a key's place is found by a scan of the
text that follows table headers (``[a.b]``, ``[[rules]]``) and ``key =`` lines, so that every
problem found later (an unknown key, a bad pattern) is reported as ``file:line:column``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Path", "Positions", "Problem", "parse_text"]

#: Where a value sits in the document: table keys and array indexes, outermost first.
Path = tuple[str | int, ...]

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_KEYPART = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_KEYPART}(?:\s*\.\s*{_KEYPART})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?")
_KEYLINE = re.compile(rf"^(\s*)({_DOTTED})\s*=\s*")
_INLINE_KEY = re.compile(rf"[{{,]\s*({_BARE})\s*=")


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a policy file, and where: ``file:line:column: message``."""

    file: str
    """The file's name as it was given."""
    line: int
    """The line, from 1."""
    column: int
    """The column, from 1."""
    message: str
    """What is wrong, and what would be right."""
    severity: str = "error"
    """``error`` (the file is refused) or ``warning`` (it loads, but a rule does not say what
    it seems to: it can never match, or never decide)."""

    def __str__(self) -> str:
        kind = "warning: " if self.severity == "warning" else ""
        return f"{self.file}:{self.line}:{self.column}: {kind}{self.message}"


def _split(dotted: str) -> list[str]:
    parts = re.findall(_KEYPART, dotted)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


class Positions:
    """Line and column of each key in the text (and of values searched for by their text)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines()
        self._at: dict[Path, tuple[int, int]] = {}
        self._scan()

    def _scan(self) -> None:
        prefix: Path = ()
        counts: dict[Path, int] = {}
        for no, line in enumerate(self.lines, 1):
            h = _HEADER.match(line)
            if h is not None and not _KEYLINE.match(line):
                keys: list[str | int] = list(_split(h.group(2)))
                if h.group(1) == "[[":
                    base = tuple(keys)
                    i = counts.get(base, 0)
                    counts[base] = i + 1
                    keys.append(i)
                prefix = self._arrays(tuple(keys), counts)
                self._at.setdefault(prefix, (no, line.index("[") + 1))
                continue
            k = _KEYLINE.match(line)
            if k is None:
                continue
            path = prefix + tuple(_split(k.group(2)))
            self._at.setdefault(path, (no, len(k.group(1)) + 1))
            rest = line[k.end():]
            if rest.startswith("{"):
                for m in _INLINE_KEY.finditer(rest):
                    self._at.setdefault((*path, m.group(1)), (no, k.end() + m.start(1) + 1))

    @staticmethod
    def _arrays(keys: Path, counts: dict[Path, int]) -> Path:
        """A header inside an array of tables (``[rules.url_hosts]`` after ``[[rules]]``)
        belongs to the array's last element."""
        out: list[str | int] = []
        for k in keys:
            out.append(k)
            n = counts.get(tuple(x for x in out if isinstance(x, str)))
            if n and isinstance(k, str) and len(out) < len(keys) and not isinstance(
                keys[len(out)], int
            ):
                out.append(n - 1)
        return tuple(out)

    def of(self, path: Path, value: Any = None) -> tuple[int, int]:
        """Where ``path`` is written (the nearest enclosing key that is); with ``value`` (a
        string), where that value is written after it."""
        p = path
        while p and p not in self._at:
            p = p[:-1]
        line, col = self._at.get(p, (1, 1))
        if isinstance(value, str):
            hit = self._find(value, line, col)
            if hit is not None:
                return hit
        return line, col

    def _find(self, value: str, line: int, col: int) -> tuple[int, int] | None:
        needles = (f'"{value}"', f"'{value}'", value) if value else ('""', "''")
        for no in range(line, min(line + 200, len(self.lines)) + 1):
            text = self.lines[no - 1]
            start = col - 1 if no == line else 0
            for n in needles:
                i = text.find(n, start)
                if i >= 0:
                    return no, i + 1
        return None


def parse_text(text: str, file: str) -> tuple[Mapping[str, Any] | None, Positions, list[Problem]]:
    """The document as plain Python values, its positions, and the syntax error if any."""
    import tomlkit
    from tomlkit.exceptions import ParseError

    pos = Positions(text)
    try:
        doc = tomlkit.parse(text)
    except ParseError as exc:
        msg = str(exc).split(" at line ")[0]
        return None, pos, [Problem(file, exc.line, exc.col, f"TOML syntax: {msg}")]
    return doc.unwrap(), pos, []
