"""The checks every value of a policy file goes through, each problem placed at line:column.

A ``Checker`` walks the parsed document with the positions of its keys; each reader returns the
value in the type wanted, or None after recording a problem, so one pass reports every problem
in the file rather than the first.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from ._source import Path, Positions, Problem

__all__ = ["Checker"]

E = TypeVar("E", bound=enum.Enum)
_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _close(word: str, choices: Iterable[str]) -> str:
    import difflib

    near = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


class Checker:
    """Reads typed values out of a parsed policy file, recording every problem with its place."""

    def __init__(self, file: str, positions: Positions) -> None:
        self.file = file
        self.pos = positions
        #: Everything wrong so far, in the order found.
        self.problems: list[Problem] = []
        #: Rules that load but do not say what they seem to (they can never match or decide).
        self.warnings: list[Problem] = []

    def problem(self, path: Path, message: str, value: Any = None) -> None:
        """Record a problem at ``path`` (at ``value``'s text when given)."""
        line, col = self.pos.of(path, value)
        self.problems.append(Problem(self.file, line, col, message))

    def warn(self, path: Path, message: str, value: Any = None) -> None:
        """Record a warning at ``path`` (at ``value``'s text when given)."""
        line, col = self.pos.of(path, value)
        self.warnings.append(Problem(self.file, line, col, message, "warning"))

    def table(self, path: Path, value: Any, keys: Iterable[str]) -> Mapping[str, Any]:
        """``value`` as a table whose keys are all among ``keys`` (an unknown one is reported
        and ignored); an empty table if it is no table."""
        if not isinstance(value, Mapping):
            self.problem(path, f"{self.name(path)} must be a table")
            return {}
        allowed = tuple(keys)
        for k in value:
            if k not in allowed:
                self.problem((*path, k), f"unknown key {k!r} in {self.name(path)}"
                             f"{_close(str(k), allowed)}; allowed: {', '.join(allowed)}")
        return {k: v for k, v in value.items() if k in allowed}

    @staticmethod
    def name(path: Path) -> str:
        """How a place is named in messages: ``rules[2].args``."""
        out = ""
        for p in path:
            out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
        return out or "the file"

    def string(self, path: Path, value: Any) -> str | None:
        """A string."""
        if isinstance(value, str):
            return value
        self.problem(path, f"{self.name(path)} must be a string")
        return None

    def strings(self, path: Path, value: Any) -> tuple[str, ...] | None:
        """A list of strings."""
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem(path, f"{self.name(path)} must be a list of strings")
            return None
        return tuple(value)

    def integer(self, path: Path, value: Any, minimum: int = 1) -> int | None:
        """An integer of at least ``minimum``."""
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.problem(path, f"{self.name(path)} must be an integer >= {minimum}")
            return None
        return value

    def boolean(self, path: Path, value: Any) -> bool | None:
        """True or false."""
        if not isinstance(value, bool):
            self.problem(path, f"{self.name(path)} must be true or false")
            return None
        return value

    def choice(self, path: Path, value: Any, choices: tuple[str, ...]) -> str | None:
        """One of ``choices``."""
        if value in choices:
            return str(value)
        self.problem(path, f"{self.name(path)} must be one of {', '.join(choices)}, not"
                     f" {value!r}{_close(str(value), choices)}", value)
        return None

    def members(self, path: Path, value: Any, kind: type[E]) -> frozenset[E] | None:
        """A list of an enum's values (capabilities, effects)."""
        items = self.strings(path, value)
        if items is None:
            return None
        known = tuple(str(m.value) for m in kind)
        out = set()
        for i, v in enumerate(items):
            if v not in known:
                self.problem((*path, i), f"unknown {kind.__name__.lower()} {v!r}"
                             f"{_close(v, known)}; known: {', '.join(known)}", v)
            else:
                out.add(kind(v))
        return frozenset(out)

    def names(self, path: Path, value: Any, known: frozenset[str], what: str) -> frozenset[str]:
        """A list of names each of which is in ``known`` (tools, modes)."""
        items = self.strings(path, value) or ()
        for i, v in enumerate(items):
            if v not in known:
                self.problem((*path, i), f"unknown {what} {v!r}{_close(v, known)}", v)
        return frozenset(items)

    def pattern(self, path: Path, value: Any) -> re.Pattern[str] | None:
        """A regular expression that compiles."""
        text = self.string(path, value)
        if text is None:
            return None
        try:
            return re.compile(text)
        except re.error as exc:
            self.problem(path, f"bad pattern in {self.name(path)}: {exc.msg}", text)
            return None

    def rule_id(self, path: Path, value: Any, taken: set[str]) -> str | None:
        """A rule id: 1-64 characters of ``[A-Za-z0-9_.-]``, unique in the file."""
        if value is None:
            self.problem(path, f"{self.name(path[:-1])} needs an id")
            return None
        if not isinstance(value, str) or not _ID_RE.match(value):
            self.problem(path, f"{self.name(path)} must be 1-64 characters of"
                         " [A-Za-z0-9_.-]", value if isinstance(value, str) else None)
            return None
        if value in taken:
            self.problem(path, f"rule id {value!r} is used twice (or is a built-in rule's)",
                         value)
            return None
        taken.add(value)
        return value
