"""The post-mortem SQL files shipped with tooltrace, and how to run one with parameters.

Each file starts with a comment block::

    -- Question: which tools reject the most calls, and at which stage?
    -- @param since TIMESTAMP = 1970-01-01 : only calls started at or after this (UTC)
    -- Columns: tool, stage, rejections, calls, share

A ``@param`` line names a ``$name`` placeholder, its type (documentation only: values arrive
as text and the SQL casts them) and an optional default (``NULL`` for none); a parameter
without ``=`` is required.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MissingParameter", "Param", "SqlFile", "find_sql", "load_sql", "shipped_sql"]

_PARAM = re.compile(r"^--\s*@param\s+(\w+)\s+(\w+)(?:\s*=\s*(.*?))?\s*:\s*(.*)$")
_QUESTION = re.compile(r"^--\s*Question:\s*(.*)$")
_PLACEHOLDER = re.compile(r"\$([A-Za-z_]\w*)")
_PREPARE = re.compile(r"^\s*PREPARE\b", re.IGNORECASE)
_EXECUTE = re.compile(r"(\bEXECUTE\s+[A-Za-z_]\w*\s*\()([^)]*)\)", re.IGNORECASE)
_ARG_NAME = re.compile(r"(?<![\w\"$])([A-Za-z_]\w*)(\s*:=)")
_DIRS = (
    Path(__file__).resolve().parent / "sql",
    # A source checkout keeps the files at the repository root.
    Path(__file__).resolve().parents[2] / "queries",
)


class MissingParameter(ValueError):
    """A required ``$name`` parameter was not given."""


@dataclass(frozen=True, slots=True)
class Param:
    """One documented parameter of a SQL file."""

    name: str
    type: str
    default: str | None
    required: bool
    help: str


@dataclass(frozen=True, slots=True)
class SqlFile:
    """A SQL text with its documented question and parameters."""

    name: str
    question: str
    params: tuple[Param, ...]
    text: str

    def bind(self, given: dict[str, str]) -> dict[str, str | None]:
        """Parameters for DuckDB: the given values, else defaults; only placeholders used.

        Raises ``MissingParameter`` for a required one not given, ``ValueError`` for a name
        the SQL does not use.
        """
        used = _own_placeholders(self.text)
        unknown = sorted(set(given) - used)
        if unknown:
            raise ValueError(f"unknown parameter(s): {', '.join(unknown)}"
                             f" (this query takes: {', '.join(sorted(used)) or 'none'})")
        out: dict[str, str | None] = {}
        docs = {p.name: p for p in self.params}
        for name in sorted(used):
            if name in given:
                out[name] = given[name]
            elif name in docs and not docs[name].required:
                out[name] = docs[name].default
            else:
                raise MissingParameter(f"missing parameter {name}: pass --param {name}=...")
        return out


def _strip_comments(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _own_placeholders(text: str) -> set[str]:
    """The ``$name`` placeholders tooltrace fills: not those in the body of a ``PREPARE``,
    which belong to the prepared statement (its ``EXECUTE`` gives them)."""
    return {name for stmt in _strip_comments(text).split(";") if not _PREPARE.match(stmt)
            for name in _PLACEHOLDER.findall(stmt)}


def _quote_execute_names(text: str) -> str:
    """``EXECUTE q(limit := 5)`` as DuckDB parses it: each parameter name in an ``EXECUTE``
    quoted (``"limit" := 5``), since a name that is a keyword (``limit``, ``offset``,
    ``order``) is otherwise a syntax error."""
    return _EXECUTE.sub(lambda m: m[1] + _ARG_NAME.sub(r'"\1"\2', m[2]) + ")", text)


def load_sql(text: str, name: str = "<sql>") -> SqlFile:
    """Parse the header of a SQL text."""
    question = ""
    params: list[Param] = []
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if not s.startswith("--"):
            break
        m = _QUESTION.match(s)
        if m:
            question = m[1].strip()
        m = _PARAM.match(s)
        if m:
            default = m[3]
            required = default is None
            if default is not None and default.upper() == "NULL":
                default = None
            params.append(Param(m[1], m[2], default, required, m[4].strip()))
    return SqlFile(name, question, tuple(params), _quote_execute_names(text))


def shipped_sql() -> list[SqlFile]:
    """Every shipped query, by name."""
    seen: dict[str, SqlFile] = {}
    for d in _DIRS:
        if not d.is_dir():
            continue
        for p in sorted(d.glob("*.sql")):
            if p.stem not in seen:
                seen[p.stem] = load_sql(p.read_text(), p.stem)
    return [seen[k] for k in sorted(seen)]


#: What a shipped query's name looks like: a word of letters, digits, ``_`` and ``-``.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}")


def find_sql(name: str) -> SqlFile | None:
    """A shipped query by name (with or without ``.sql``), or None (also for anything that is
    not a plain name: SQL text or a path is never looked up as a file)."""
    stem = name[:-4] if name.endswith(".sql") else name
    if _NAME.fullmatch(stem) is None:
        return None
    for d in _DIRS:
        p = d / f"{stem}.sql"
        if p.is_file():
            return load_sql(p.read_text(), stem)
    return None
