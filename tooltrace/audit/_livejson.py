"""Segments not compacted yet, parsed by DuckDB's own JSON reader (``read_json``).

A sealed segment never changes and every line of it is whole (it ends with its seal line), so
DuckDB can parse it in bulk instead of Python parsing each line (``_livescan``) and writing it
out again as CSV (``_livetables``): the per-line cost drops by an order of magnitude
(docs/internals/performance-history.md, "Reads over a large backlog"). Each segment is read by
one statement into a private temporary Parquet file holding the fields the asked-for tables need
(``copy_segment``); the tables' rows are then SQL over those files (``table_sql``). A segment
still being written is read the same way from a copy of its complete lines (what follows the
last newline is in flight, or torn when its writer died).

The mapping from a record to its columns is ``_tables.build_columns``; ``table_sql`` says the
same in SQL, and ``tests/test_audit_livejson.py`` pins the two equal over every record kind.
What the SQL cannot promise to turn into the same values goes back to the Python path, a whole
segment at a time (``copy_segment`` returns False):

- a line DuckDB refuses (not a JSON object, a value of the wrong type for its field, a line
  longer than ``MAX_LINE``), or an empty line (DuckDB skips it, which would shift the line
  numbers the rows carry: DuckDB then reads fewer rows than the file has newlines);
- JSON text DuckDB would write differently from ``orjson`` (an escaped control character,
  whose hex digits DuckDB writes in upper case; a number with an exponent or beyond 16
  digits, which the two format differently): ``_DIFFERS``.

A sealed segment never changes, so what DuckDB parsed of it is kept for the next reader
(``ParsedCache``): ``<audit>/readcache/<segment>.<size>-<mtime ns>.<tables>.<mac>.parquet``,
written under a temporary name and renamed whole, its MAC (keyed with the audit key) checked
before a reader reads its own copy of it. A reader uses only the files of the segments it lists
as not compacted (never counted twice: a segment compaction took is read from Parquet) and
removes those of segments compacted or gone.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

from ._lookupfile import read_key
from ._segments import SegmentInfo

if TYPE_CHECKING:
    import duckdb

__all__ = ["CACHE_DIR", "MAX_LINE", "ParsedCache", "copy_segment", "raw_fields", "table_sql"]

#: The longest line DuckDB is asked to parse; a segment with a longer one is read by Python.
MAX_LINE = 4 * 1024 * 1024
#: Where readers keep what DuckDB parsed of sealed segments, inside the audit directory.
CACHE_DIR = "readcache"
#: A file being written there that is older than this was left by a reader that died.
_STALE_S = 3600.0
_PERSON = b"tooltrace-rcache"

# Each field of a record line that some table reads, with the type DuckDB reads it as: text
# fields as VARCHAR (a number or an object as its JSON text, as the CSV path writes it),
# times and counts as BIGINT, JSON kept as JSON (written back as text by the tables).
_FIELDS: dict[str, str] = {
    "k": "VARCHAR", "call_id": "VARCHAR", "run_id": "VARCHAR", "tool": "VARCHAR",
    "source": "VARCHAR", "status": "VARCHAR", "reject_stage": "VARCHAR", "summary": "VARCHAR",
    "error_type": "VARCHAR", "started_at_us": "BIGINT", "elapsed_us": "DOUBLE",
    "execution_started": "BOOLEAN", "trace_id": "VARCHAR", "span_id": "VARCHAR",
    "parent_span_id": "VARCHAR", "trace_sampled": "BOOLEAN", "args_redacted": "JSON",
    "args": "JSON", "result_preview": "VARCHAR", "artifact": "JSON", "mode": "VARCHAR",
    "tool_type": "VARCHAR", "hook_modified": "BOOLEAN", "attributes": "JSON",
    "parent_call_id": "VARCHAR", "depth": "BIGINT", "progress": "JSON", "principal": "JSON",
    "capability": "VARCHAR", "effect": "VARCHAR", "steps": "JSON[][]", "step": "JSON[]",
    "approval_id": "VARCHAR", "rule": "VARCHAR", "reason": "VARCHAR", "args_sha256": "VARCHAR",
    "approved": "JSON", "who": "VARCHAR", "at_us": "BIGINT", "expires_at_us": "BIGINT",
}
_PRINCIPAL = ("principal",)
# The fields each table reads (``k`` and ``call_id`` always; ``step`` for resolutions).
_NEEDS: dict[str, tuple[str, ...]] = {
    "calls": ("run_id", "tool", "source", "status", "reject_stage", "summary", "error_type",
              "started_at_us", "elapsed_us", "execution_started", "trace_id", "span_id",
              "parent_span_id", "trace_sampled", "args_redacted", "args", "result_preview",
              "artifact", "mode", "tool_type", "hook_modified", "attributes", "parent_call_id",
              "depth", "progress", "capability", "effect", *_PRINCIPAL),
    "steps": ("steps", "step"),
    "intents": ("run_id", "tool", "started_at_us", "args"),
    "resolutions": ("step",),
    "approvals": ("approval_id", "run_id", "tool", "rule", "reason", "args_sha256", "approved",
                  "who", "at_us", "expires_at_us", "args", *_PRINCIPAL),
}
# The JSON fields written back as JSON text (the others are taken apart).
_AS_TEXT = ("args_redacted", "args", "attributes", "progress", "principal")
# JSON text DuckDB would write differently from orjson: an escaped control character (DuckDB:
# upper-case hex digits), a number with an exponent or of 16 digits and more before its point
# (DuckDB writes 1e20 as 100000000000000000000.0 and 1e300 as 1e300, orjson 1e+20, 1e+300).
_DIFFERS = (r"\\u00|[:,\[]-?[0-9]+(\.[0-9]+)?[eE][-+]?[0-9]+[,}\]]"
            r"|[:,\[]-?[0-9]{16,}\.[0-9]+[,}\]]")


def raw_fields(tables: Collection[str]) -> list[str]:
    """The fields of a record line that ``tables`` read, in ``_FIELDS`` order."""
    want = {"k", "call_id"}
    for t in tables:
        want.update(_NEEDS[t])
    return [f for f in _FIELDS if f in want]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _lines(path: str) -> int | None:
    """How many newlines the file has, when it ends with one; else None. (DuckDB skips an
    empty line: then it reads fewer rows than this, and the segment goes to Python.)"""
    count, last = 0, b"\n"
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(8 * 1024 * 1024):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count if last == b"\n" else None


def copy_segment(con: duckdb.DuckDBPyConnection, info: SegmentInfo, fields: list[str],
                 out: str, source: str | None = None) -> bool:
    """Parse sealed segment ``info`` (or ``source``, a copy of its complete lines) with DuckDB
    into Parquet file ``out``: one row per line (``line`` its number), the ``fields`` of each.
    False when the segment must be read by Python instead (see the module's docstring;
    ``out`` is then not left behind)."""
    import duckdb

    path = source or str(info.path)
    try:
        lines = _lines(path)
    except OSError:
        return False
    if not lines:
        return False
    cols = ", ".join(f"{_quote(f)}: {_quote(_FIELDS[f])}" for f in fields)
    keep = ", ".join(f'"{f}"' for f in fields)
    try:
        con.execute(
            f"COPY (SELECT {keep}, {_quote(info.writer)} AS _writer, {_quote(info.name)}"
            f" AS _segment, ordinality AS line FROM read_json({_quote(path)},"
            f" format = 'newline_delimited', records = true, maximum_object_size = {MAX_LINE},"
            f" columns = {{{cols}}}) WITH ORDINALITY) TO {_quote(out)}"
            " (FORMAT parquet)")
        texts = [f'"{f}"::VARCHAR' for f in fields if f in _AS_TEXT]
        if "steps" in fields:
            texts.append("list_transform(steps, s -> s[7])::VARCHAR")
        if "step" in fields:
            texts.append("step[7]::VARCHAR")
        differs = " OR ".join(f"regexp_matches({t}, {_quote(_DIFFERS)})" for t in texts)
        row = con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE {differs or 'false'})"
            f" FROM read_parquet({_quote(out)})").fetchone()
    except (duckdb.Error, OSError):
        row = None
    if row is None or row[0] != lines or row[1]:
        try:
            os.unlink(out)
        except FileNotFoundError:
            pass
        return False
    return True


def _truthy(col: str) -> str:
    """SQL: whether JSON value ``col`` is what Python takes as true (``x or None``)."""
    return (f"({col} IS NOT NULL AND {col}::VARCHAR NOT IN"
            " ('null', 'false', '0', '0.0', '-0.0', '\"\"', '[]', '{}'))")


def _or_none(col: str) -> str:
    """``_json(x or None)``: the JSON text of a JSON value Python takes as true, else NULL."""
    return f"CASE WHEN {_truthy(col)} THEN {col}::VARCHAR END"


def _json_text(col: str) -> str:
    """``_json(x)``: the JSON text, NULL for JSON null."""
    return f"CASE WHEN {col} IS NOT NULL AND {col}::VARCHAR <> 'null' THEN {col}::VARCHAR END"


def _ts(expr: str) -> str:
    return f"make_timestamp(TRY_CAST({expr} AS BIGINT))"


def _principal() -> str:
    p = "principal"
    obj = f"json_type({p}) = 'OBJECT'"
    roles = f"({p} -> '$.roles')"
    return (f"CASE WHEN {obj} THEN ({p} ->> '$.user') END AS principal_user,"
            f" CASE WHEN {obj} THEN ({p} ->> '$.agent') END AS principal_agent,"
            f" CASE WHEN {obj} THEN ({p} ->> '$.tenant') END AS principal_tenant,"
            f" CASE WHEN {obj} THEN {_or_none(roles)} END AS principal_roles")


def _artifact(part: str, i: int) -> str:
    a = "artifact"
    return (f"CASE WHEN json_type({a}) = 'OBJECT' THEN ({a} ->> '$.{part}')"
            f" WHEN json_type({a}) = 'ARRAY' AND json_array_length({a}) = 4"
            f" THEN ({a} ->> '$[{i}]') END")


def table_sql(t: str, source: str) -> str:
    """A SELECT of table ``t``'s rows (``COLUMNS[t]`` in order) from ``source``, a FROM item
    over files ``copy_segment`` wrote."""
    w, s = "_writer", "_segment"
    if t == "calls":
        return (
            "SELECT call_id, run_id, tool, source, status, reject_stage, summary, error_type,"
            f" {_ts('started_at_us')} AS started_at,"
            " coalesce(elapsed_us, 0) / 1000.0 AS elapsed_ms,"
            " coalesce(execution_started, false) AS execution_started, trace_id, span_id,"
            " parent_span_id, coalesce(trace_sampled, false) AS trace_sampled,"
            f" coalesce({_json_text('args_redacted')}, {_json_text('args')}) AS args_redacted,"
            f" result_preview, {_artifact('path', 0)} AS artifact_path,"
            f" {_artifact('sha256', 3)} AS artifact_sha256,"
            f" TRY_CAST({_artifact('chars', 1)} AS BIGINT) AS artifact_chars,"
            f" TRY_CAST({_artifact('bytes', 2)} AS BIGINT) AS artifact_bytes,"
            " mode, tool_type, coalesce(hook_modified, false) AS hook_modified,"
            f" {_or_none('attributes')} AS attributes, {w} AS writer, {s} AS segment, line,"
            " parent_call_id, TRY_CAST(coalesce(depth, 0) AS INTEGER) AS depth,"
            f" {_or_none('progress')} AS progress, {_principal()}, capability, effect"
            f" FROM {source} WHERE k = 'c'")
    if t == "steps":
        one = ("SELECT call_id, TRY_CAST(r[1]::VARCHAR AS INTEGER) AS seq, (r[2] ->> '$') AS step,"
               f" {_ts('r[3]::VARCHAR')} AS started_at,"
               " TRY_CAST(r[4]::VARCHAR AS DOUBLE) / 1000.0 AS elapsed_ms,"
               " (r[5] ->> '$') AS decider, (r[6] ->> '$') AS decision,"
               f" {_json_text('r[7]')} AS detail")
        return (f"{one} FROM (SELECT call_id, unnest(steps) AS r FROM {source} WHERE k = 'c')"
                f" UNION ALL {one} FROM (SELECT call_id, step AS r FROM {source}"
                " WHERE k = 's' AND len(step) >= 6)")
    if t == "intents":
        return (f"SELECT call_id, run_id, tool, {_ts('started_at_us')} AS started_at,"
                f" {_json_text('args')} AS args_redacted, {w} AS writer, {s} AS segment, line"
                f" FROM {source} WHERE k = 'i'")
    if t == "resolutions":
        err = "CASE WHEN json_type(step[7]) = 'OBJECT' THEN (step[7] ->> '$.error_type') END"
        return ("SELECT call_id, (step[6] ->> '$') AS status, 'resolved later as ' ||"
                f" (step[6] ->> '$') || CASE WHEN coalesce({err}, '') NOT IN ('', 'false', '0')"
                f" THEN ' (' || ({err}) || ')' ELSE '' END AS summary,"
                f" {_ts('step[3]::VARCHAR')} AS resolved_at, {s} AS segment, line"
                f" FROM {source} WHERE k = 's' AND len(step) >= 6"
                " AND (step[2] ->> '$') = 'resolved'")
    if t == "approvals":
        return ("SELECT approval_id, call_id, run_id, tool, rule,"
                " CASE WHEN approved::VARCHAR = 'true' THEN 'approve' ELSE 'deny' END"
                " AS decision, who AS approver, reason, args_sha256,"
                f" {_ts('at_us')} AS approved_at, {_ts('expires_at_us')} AS expires_at,"
                f" {_principal()}, {w} AS writer, {s} AS segment, line,"
                f" {_json_text('args')} AS args_redacted FROM {source} WHERE k = 'a'")
    raise ValueError(f"no such table: {t}")


def _key(info: SegmentInfo) -> str | None:
    """The start of the names of ``info``'s files: its name, size and change time."""
    try:
        st = os.stat(info.path)
    except OSError:
        return None
    return f"{info.name}.{st.st_size}-{st.st_mtime_ns}."


class ParsedCache:
    """What DuckDB parsed of sealed segments not compacted yet, kept in the audit directory's
    ``readcache`` for the readers that come next.

    Each file's name ends with a keyed BLAKE2b MAC (of the audit key) over the rest of its name
    (its segment's name, size and change time, its tables) and its bytes. A reader reads a kept
    file only once it checked the MAC, and from a copy in its own temporary directory, so a
    file forged or swapped afterwards is never read. Without an audit key nothing is kept."""

    def __init__(self, adir: Path, home: Path) -> None:
        self.dir = adir / CACHE_DIR
        self._home = home
        self._names: list[str] | None = None
        self._mac_key: bytes | None = None
        self._keyed = False

    def _listing(self) -> list[str]:
        if self._names is None:
            try:
                self._names = os.listdir(self.dir)
            except OSError:
                self._names = []
        return self._names

    def _key(self) -> bytes | None:
        if not self._keyed:
            # hashlib loads here, with the views: a lookup (autopsy) never needs it.
            from hashlib import blake2b

            self._keyed = True
            key = read_key(self._home)
            # BLAKE2b keys are at most 64 bytes: the audit key is hashed down to 32 first.
            self._mac_key = None if key is None else blake2b(
                key, digest_size=32, person=_PERSON).digest()
        return self._mac_key

    def _mac(self, key: bytes, base: str, data: bytes) -> str:
        from hashlib import blake2b

        h = blake2b(key=key, digest_size=16, person=_PERSON)
        h.update(base.encode())
        h.update(b"\x00")
        h.update(data)
        return h.hexdigest()

    def find(self, info: SegmentInfo, tables: Collection[str],
             into: Callable[[], str]) -> dict[str, str]:
        """For each of ``tables`` that a kept file of sealed segment ``info`` holds (its MAC
        checked), a private copy of that file, written where ``into()`` says."""
        key, start = self._key(), _key(info)
        if key is None or start is None:
            return {}
        held: list[tuple[set[str], str, str]] = []
        for name in self._listing():
            if name.startswith(start) and name.endswith(".parquet"):
                base, _dot, mac = name[:-len(".parquet")].rpartition(".")
                held.append((set(base[len(start):].split("+")), base, mac))
        held.sort(key=lambda h: -len(h[0] & set(tables)))
        import hmac

        out: dict[str, str] = {}
        for ts, base, mac in held:
            need = [t for t in tables if t in ts and t not in out]
            if not need:
                continue
            try:
                data = (self.dir / f"{base}.{mac}.parquet").read_bytes()
            except OSError:
                continue  # removed meanwhile
            if not hmac.compare_digest(self._mac(key, base, data), mac):
                continue  # not what a reader kept: parsed again instead
            path = into()
            with open(path, "wb") as f:
                f.write(data)
            out.update(dict.fromkeys(need, path))
        return out

    def keep(self, info: SegmentInfo, tables: Collection[str], path: str) -> None:
        """Keep a copy of ``path`` (what DuckDB parsed of ``tables`` of sealed segment
        ``info``) for the next reader, written under a temporary name and renamed whole;
        nothing when there is no audit key or the directory cannot be written."""
        key, start = self._key(), _key(info)
        if key is None or start is None:
            return
        tmp: Path | None = None
        try:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            with open(path, "rb") as f:
                data = f.read()
            base = f"{start}{'+'.join(sorted(tables))}"
            final = self.dir / f"{base}.{self._mac(key, base, data)}.parquet"
            tmp = self.dir / f".{final.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, final)
        except OSError:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink()

    def sweep(self, compacted: Collection[str], segments: Path) -> None:
        """Remove the files of segments compaction took (``compacted``: their names) or that
        are gone from ``segments``, and files readers that died left half written."""
        now = time.time()
        for name in self._listing():
            path = self.dir / name
            try:
                if name.startswith("."):
                    if name.endswith(".tmp") and now - path.stat().st_mtime > _STALE_S:
                        path.unlink()
                    continue
                seg = name.split(".jsonl.", 1)[0] + ".jsonl"
                if seg in compacted or not (segments / seg).exists():
                    path.unlink()
            except OSError:
                continue  # removed meanwhile by another reader
