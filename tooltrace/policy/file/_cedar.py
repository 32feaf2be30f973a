"""Reading Cedar policy files: parsed and validated by cedarpy, every problem placed.

cedarpy's errors carry no position, so a file is cut into its statements (a policy ends at a
``;`` outside strings, comments and brackets) and each problem is placed within its statement
(``_cedarplace``): a parse error at the offending token, a schema error at the attribute or
entity type it names, an annotation's problem at the annotation. A file with a statement that
does not parse still has its other statements checked. Each policy is named by its
``@id("...")`` annotation, else by cedarpy's positional id (``policy0``, ``policy1``, ...
counted over all the files, in order, as if they were one), and decides as its annotations
say:

- ``forbid`` denies; ``@decision("ask")`` on a forbid asks for approval instead;
- ``@mode("observe")`` on a forbid records what it would do (``observe_deny`` /
  ``observe_ask``) and lets the call go on;
- ``@reason("...")`` is the reason recorded in the step;
- ``@ttl("15m")`` beside ``@decision("ask")``: how long an approval also covers later calls
  of the same tool, principal and arguments (seconds or ``90s``, ``15m``, ``8h``, ``1d``);
- ``permit`` policies matter only with ``default = "deny"`` (a call no permit matches is
  denied, by the rule ``cedar``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._cedarplace import Statement
from ._compile import duration_seconds
from ._source import Problem

__all__ = ["CedarPolicy", "CedarSet", "load_cedar", "statements"]

_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_POLICY_RE = re.compile(r"policy `?(policy\d+)`?,?\s*")
_CHOICES = {"decision": ("deny", "ask"), "mode": ("enforce", "observe")}


@dataclass(frozen=True, slots=True)
class CedarPolicy:
    """One Cedar policy: its id, effect and what its annotations ask for."""

    id: str
    """``@id`` or the positional id: the rule id in decisions (``policy:<id>``)."""
    effect: str
    """``permit`` or ``forbid``."""
    decision: str = "deny"
    """What a matching forbid answers: ``deny`` or ``ask``."""
    observe: bool = False
    """``@mode("observe")``: record, do not enforce."""
    reason: str = ""
    """``@reason``, or empty."""
    ttl: float | None = None
    """``@ttl`` in seconds (an ``ask`` policy's approval time to live), or None."""
    file: str = ""
    """The file it was read from."""
    line: int = 1
    """Where it starts in that file."""


@dataclass(frozen=True, slots=True)
class CedarSet:
    """Checked Cedar policies: each policy's facts, and the set to evaluate in cedarpy's JSON
    form (every policy as a ``permit``, so one evaluation names every policy that matches;
    the forbid-overrides-permit rule is applied by ``CedarRule``)."""

    policies: tuple[CedarPolicy, ...]
    """In file order."""
    evaluation_json: str
    """The policy set for ``cedarpy.PolicySet.from_json_str``."""


def statements(text: str) -> list[tuple[int, int, str]]:
    """The statements of a Cedar policy text: ``(line, column, text)``, each up to and with
    its ``;`` (a last one may lack it); comments and blank text between them are skipped."""
    out: list[tuple[int, int, str]] = []
    i, n, depth, start = 0, len(text), 0, -1
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if start < 0 and not c.isspace():
            start = i
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth = max(0, depth - 1)
        elif c == ";" and depth == 0 and start >= 0:
            out.append((*_place(text, start), text[start:i + 1]))
            start = -1
        i += 1
    if start >= 0:
        out.append((*_place(text, start), text[start:]))
    return out


def _place(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _syntax(cedarpy: Any, name: str, text: str, problems: list[Problem]) -> list[Statement]:
    """Report each statement that does not parse, at its offending token; return the others."""
    good: list[Statement] = []
    found = False
    for line, col, stmt in statements(text):
        st = Statement(line, col, stmt)
        try:
            cedarpy.PolicySet.from_str(stmt)
        except ValueError as exc:
            found = True
            problems.append(Problem(name, *st.syntax_error(cedarpy, str(exc)),
                                    f"Cedar syntax: {exc}"))
        else:
            good.append(st)
    if not found:
        problems.append(Problem(name, 1, 1, "Cedar syntax: the file does not parse"))
    return good


def _annotations(name: str, st: Statement, pid: str, raw: Mapping[str, Any],
                 effect: str, problems: list[Problem]) -> dict[str, str]:
    ann = {k: str(v) for k, v in (raw.get("annotations") or {}).items()}

    def problem(key: str, message: str) -> None:
        problems.append(Problem(name, *st.annotation(key), f"policy {pid}: {message}"))

    for key, choices in _CHOICES.items():
        if key in ann and ann[key] not in choices:
            problem(key, f"@{key} must be one of {', '.join(choices)}, not {ann[key]!r}")
        elif key in ann and effect != "forbid":
            problem(key, f"@{key} is for forbid policies (a permit only matters with"
                    " default = deny)")
    if "ttl" in ann:
        if duration_seconds(ann["ttl"]) is None:
            problem("ttl", "@ttl must be a number of seconds or a duration such as 90s, 15m,"
                    f" 8h, 1d, not {ann['ttl']!r}")
        elif ann.get("decision") != "ask":
            problem("ttl", '@ttl is only for policies with @decision("ask")')
    return ann


def _validate(cedarpy: Any, name: str, text: str, schema: Any, places: list[Statement],
              ids: Mapping[str, str], problems: list[Problem]) -> None:
    result = cedarpy.validate_policies(text, schema)
    for err in result.errors:
        m = re.fullmatch(r"policy(\d+)", err.policy_id or "")
        k = int(m.group(1)) if m else -1
        msg = _POLICY_RE.sub("", str(err.error)).removeprefix("for ")
        where = places[k].schema_error(msg) if 0 <= k < len(places) else (1, 1)
        who = ids.get(err.policy_id, err.policy_id or "?")
        problems.append(Problem(name, *where, f"Cedar schema: policy {who}: {msg}"))


def _parse(cedarpy: Any, name: str, text: str, problems: list[Problem]
           ) -> tuple[str, dict[str, Any], list[Statement]] | None:
    """The file's policies in cedarpy's JSON form with the statement of each; a statement
    that does not parse is reported and left out (the others are still checked)."""
    try:
        est = json.loads(cedarpy.policies_to_json_str(text))
        return text, est, [Statement(*x) for x in statements(text)]
    except ValueError:
        good = _syntax(cedarpy, name, text, problems)
    if not good:
        return None
    # The statements that parse, in order: cedarpy's policyN is the Nth of them.
    kept = "".join(f"{st.text}\n" for st in good)
    try:
        return kept, json.loads(cedarpy.policies_to_json_str(kept)), good
    except ValueError:
        return None


def load_cedar(files: Iterable[tuple[str, Path]], schema_text: str | None,
               taken: set[str]) -> tuple[CedarSet | None, list[Problem]]:
    """Parse, annotate and (with ``schema_text``) validate the named Cedar files; ``taken``
    holds the rule ids already in use (the policies' ids are added to it)."""
    import cedarpy

    problems: list[Problem] = []
    schema = None
    if schema_text is not None:
        try:
            schema = cedarpy.Schema.from_str(schema_text)
        except ValueError as exc:  # the tools' names or arguments do not make a schema
            problems.append(Problem("<schema>", 1, 1, f"Cedar schema: {exc}"))
    out: list[CedarPolicy] = []
    evaluation: dict[str, Any] = {}
    for name, path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or type(exc).__name__
            problems.append(Problem(name, 1, 1, f"cannot read the Cedar file: {why}"))
            continue
        parsed = _parse(cedarpy, name, text, problems)
        if parsed is None:
            continue
        text, est, places = parsed
        if est.get("templates"):
            problems.append(Problem(name, 1, 1, "Cedar templates (?principal, ?resource)"
                                    " are not supported: write static policies"))
        ids: dict[str, str] = {}
        static = est.get("staticPolicies") or {}
        for local in sorted(static, key=lambda x: int(x.removeprefix("policy"))):
            raw = static[local]
            k = int(local.removeprefix("policy"))
            st = places[k] if k < len(places) else Statement(1, 1, "")
            line = st.line
            pid = (raw.get("annotations") or {}).get("id") or f"policy{len(out)}"
            ann = _annotations(name, st, pid, raw, raw["effect"], problems)
            if not _ID_RE.match(pid):
                problems.append(Problem(name, *st.annotation("id"), f"policy @id {pid!r} must"
                                        " be 1-64 characters of [A-Za-z0-9_.-]"))
            elif pid in taken:
                problems.append(Problem(name, *st.annotation("id"), f"policy id {pid!r} is"
                                        " used twice (or is a TOML or built-in rule's)"))
            taken.add(pid)
            ids[local] = pid
            out.append(CedarPolicy(pid, raw["effect"], ann.get("decision", "deny"),
                                   ann.get("mode") == "observe", ann.get("reason", ""),
                                   duration_seconds(ann.get("ttl")), name, line))
            evaluation[pid] = {**raw, "effect": "permit"}
        if schema is not None:
            _validate(cedarpy, name, text, schema, places, ids, problems)
    if problems:
        return None, problems
    doc = {"staticPolicies": evaluation, "templates": {}, "templateLinks": []}
    return CedarSet(tuple(out), json.dumps(doc)), []
