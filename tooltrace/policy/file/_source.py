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
                where = (no, line.index("[") + 1)
                if h.group(1) == "[[":
                    base = tuple(keys)
                    i = counts.get(base, 0)
                    counts[base] = i + 1
                    keys.append(i)
                    # The array itself is where its first element is (``[[limit]]``, a typo,
                    # is reported there).
                    self._at.setdefault(self._arrays(base, counts), where)
                prefix = self._arrays(tuple(keys), counts)
                self._at.setdefault(prefix, where)
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


@dataclass(frozen=True, slots=True)
class _Unclosed:
    """A string, array or inline table left open: where it opens, and where that shows."""

    what: str
    line: int
    column: int
    seen_at: int
    """The line where the text can no longer belong to it (a new line for a string or an
    inline table, the next statement for an array); 0: the end of the file."""


_STATEMENT = re.compile(rf"^\s*(?:\[\[?\s*{_BARE}(?:\s*\.\s*{_BARE})*\s*\]\]?\s*(?:#.*)?$"
                        rf"|{_DOTTED}\s*=)")
_QUOTES = ('"""', "'''", '"', "'")


def _unclosed(lines: list[str]) -> _Unclosed | None:
    """The first string, array or inline table the text leaves open, found by a scan that
    knows only what can open and close them (strings, comments, brackets, statements)."""
    stack: list[tuple[str, int, int]] = []
    multi: tuple[str, int, int] | None = None
    for no, line in enumerate(lines, 1):
        i = 0
        if multi is None and stack and _STATEMENT.match(line):
            what, at, col = stack[-1]
            return _Unclosed("array" if what == "[" else "inline table", at, col, no)
        if multi is None and not stack and line.lstrip().startswith("["):
            continue  # a table header
        while i < len(line):
            if multi is not None:
                end = line.find(multi[0], i)
                if end < 0:
                    break
                multi, i = None, end + 3
                continue
            c = line[i]
            if c == "#":
                break
            quote = next((q for q in _QUOTES if line.startswith(q, i)), None)
            if quote is not None and len(quote) == 3:
                multi, i = (quote, no, i + 1), i + 3
                continue
            if quote is not None:
                j = i + 1
                while j < len(line) and line[j] != quote:
                    j += 2 if quote == '"' and line[j] == "\\" else 1
                if j >= len(line):
                    return _Unclosed("string", no, i + 1, no)
                i = j + 1
                continue
            if c in "[{":
                stack.append((c, no, i + 1))
            elif c in "]}" and stack:
                stack.pop()
            i += 1
        if stack and stack[-1][0] == "{" and multi is None:
            return _Unclosed("inline table", stack[-1][1], stack[-1][2], no)
    if multi is not None:
        return _Unclosed("multi-line string", multi[1], multi[2], 0)
    if stack:
        what, at, col = stack[-1]
        return _Unclosed("array" if what == "[" else "inline table", at, col, 0)
    return None


def _syntax_problem(file: str, text: str, line: int, col: int, message: str) -> Problem:
    """The parser's error (``col`` counted from 0), or the string, array or inline table left
    open that it comes from, at the place it opens."""
    open_ = _unclosed(text.splitlines())
    at_end = message.startswith("Unexpected end of file") or "'\\x00'" in message
    if open_ is not None and (open_.seen_at <= line if open_.seen_at else at_end):
        close = {"string": "its closing quote on the same line",
                 "multi-line string": "its closing triple quote",
                 "array": "its closing ]", "inline table": "its closing } on the same line"}
        return Problem(file, open_.line, open_.column,
                       f"TOML syntax: unclosed {open_.what}: it opens here and lacks"
                       f" {close[open_.what]}")
    if message == "Unexpected character: '\\n'":
        message = "unexpected end of line"
    return Problem(file, line, col + 1, f"TOML syntax: {message}")


def parse_text(text: str, file: str) -> tuple[Mapping[str, Any] | None, Positions, list[Problem]]:
    """The document as plain Python values, its positions, and the syntax error if any."""
    import tomlkit
    from tomlkit.exceptions import ParseError

    pos = Positions(text)
    try:
        doc = tomlkit.parse(text)
    except ParseError as exc:
        msg = str(exc).split(" at line ")[0]
        return None, pos, [_syntax_problem(file, text, exc.line, exc.col, msg)]
    return doc.unwrap(), pos, []
