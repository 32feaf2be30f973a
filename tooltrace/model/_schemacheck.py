"""The registration check of an arguments schema, in two tiers.

``plainly_valid`` recognises the schemas tools are made of (objects of typed properties, arrays,
enums, bounds, ``anyOf``, local ``$defs`` references...) in one walk and says yes only when every
keyword it meets is one whose value it can check exactly: such a schema is valid under its
metaschema (JSON Schema 2020-12, or draft-07 when its ``$schema`` says so) and compiles with
``fastjsonschema`` (both pinned by a property test against the real checks). Anything else, an
unknown keyword, another dialect, a non-JSON value, gets a "no" and the full metaschema check,
which decides and explains.

Why two tiers: the full check resolves the metaschema's dynamic references keyword by keyword
and costs about a millisecond per small schema, which dominated registering many tools.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

__all__ = ["plainly_valid"]

_SIMPLE_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
# Beyond this nesting the full check decides (a tool's schema is a few levels deep).
_MAX_DEPTH = 24
# The dialects the walk knows: for every keyword it accepts, its test is at least as strict as
# both metaschemas (draft-04 and -06 differ: a boolean exclusiveMinimum, for one). No
# ``$schema`` means 2020-12, as for jsonschema; zod and other generators write draft-07.
_DIALECTS = frozenset({
    "https://json-schema.org/draft/2020-12/schema",
    "http://json-schema.org/draft-07/schema",
    "http://json-schema.org/draft-07/schema#",
})
# "#/$defs/<name>" (or the older "definitions"): the references a generated schema uses.
_LOCAL_REF = re.compile(r"#/(\$defs|definitions)/([A-Za-z0-9_.-]{1,128})")


def _plain_json(value: Any, depth: int = 0) -> bool:
    """A value JSON can carry as it is: dicts with string keys, lists, strings, finite numbers,
    booleans and null (a default, a const, an enum member)."""
    if depth > _MAX_DEPTH:
        return False
    t = type(value)
    if t is str or t is bool or t is int or value is None:
        return True
    if t is float:
        return math.isfinite(value)
    if t is list:
        return all(_plain_json(v, depth + 1) for v in value)
    if t is dict:
        return all(type(k) is str and _plain_json(v, depth + 1) for k, v in value.items())
    return False


def _string(value: Any) -> bool:
    return type(value) is str


def _flag(value: Any) -> bool:
    return type(value) is bool


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _number(value: Any) -> bool:
    return (type(value) is int) or (type(value) is float and math.isfinite(value))


def _positive(value: Any) -> bool:
    return _number(value) and value > 0


def _type(value: Any) -> bool:
    if type(value) is str:
        return value in _SIMPLE_TYPES
    return (
        type(value) is list
        and len(value) > 0
        and all(type(v) is str and v in _SIMPLE_TYPES for v in value)
        and len(set(value)) == len(value)
    )


def _names(value: Any) -> bool:
    return (
        type(value) is list
        and all(type(v) is str for v in value)
        and len(set(value)) == len(value)
    )


def _regex(value: Any) -> bool:
    if type(value) is not str:
        return False
    try:
        re.compile(value)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _examples(value: Any) -> bool:
    return type(value) is list and _plain_json(value)


def _enum(value: Any) -> bool:
    return type(value) is list and _plain_json(value)


# Keywords whose value is not a schema, with the exact test of the 2020-12 metaschema (or a
# stricter one: a "no" only sends the schema to the full check).
_VALUE_KEYWORDS: dict[str, Callable[[Any], bool]] = {
    "type": _type,
    "title": _string,
    "description": _string,
    "$comment": _string,
    "default": _plain_json,
    "const": _plain_json,
    "enum": _enum,
    "examples": _examples,
    "deprecated": _flag,
    "readOnly": _flag,
    "writeOnly": _flag,
    "required": _names,
    "pattern": _regex,
    "format": _string,
    "minLength": _count,
    "maxLength": _count,
    "minItems": _count,
    "maxItems": _count,
    "minProperties": _count,
    "maxProperties": _count,
    "uniqueItems": _flag,
    "minimum": _number,
    "maximum": _number,
    "exclusiveMinimum": _number,
    "exclusiveMaximum": _number,
    "multipleOf": _positive,
}
# Keywords whose value is one schema, a non-empty list of schemas, or a map of schemas.
_ONE_SCHEMA = frozenset({"items", "additionalProperties", "not", "contains"})
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf"})
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions"})


class _Walk:
    """One walk over a schema; ``defs`` are the top level's ``$defs`` and ``definitions``."""

    __slots__ = ("defs",)

    def __init__(self, root: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = {}
        for key in ("$defs", "definitions"):
            table = root.get(key)
            if type(table) is dict:
                self.defs.update({f"#/{key}/{name}": sub for name, sub in table.items()})

    def schema(self, node: Any, depth: int) -> bool:
        if type(node) is bool:
            return True
        if type(node) is not dict or depth > _MAX_DEPTH:
            return False
        for key, value in node.items():
            check = _VALUE_KEYWORDS.get(key)
            if check is not None:
                if not check(value):
                    return False
            elif key in _ONE_SCHEMA:
                if not self.schema(value, depth + 1):
                    return False
            elif key in _SCHEMA_LISTS:
                if type(value) is not list or not value:
                    return False
                if not all(self.schema(v, depth + 1) for v in value):
                    return False
            elif key in _SCHEMA_MAPS:
                if type(value) is not dict:
                    return False
                if not all(type(k) is str and self.schema(v, depth + 1) for k, v in value.items()):
                    return False
            elif key == "$ref":
                # Only references the compiler resolves inside the document itself: anything
                # else (a URL, a pointer into another keyword) gets the full check.
                if type(value) is not str or not _LOCAL_REF.fullmatch(value):
                    return False
                if value not in self.defs:
                    return False
            else:
                return False
        # fastjsonschema refuses to compile a schema whose falsy ``additionalProperties``
        # (``false``, or ``{}``, which it reads as ``false``) forbids a name it ``required``s.
        closed = not node.get("additionalProperties", True)
        return not (closed and "required" in node and (
            "patternProperties" in node
            or any(r not in node.get("properties", {}) for r in node["required"])))


def plainly_valid(schema: dict[str, Any]) -> bool:
    """Whether ``schema`` is valid under its metaschema (2020-12, or draft-07 when it says so)
    and compiles, by a walk over the keywords tools use; ``False`` means "not known", never
    "invalid": run the full check."""
    if "$schema" in schema:
        dialect = schema["$schema"]
        if type(dialect) is not str or dialect not in _DIALECTS:
            return False
        schema = {k: v for k, v in schema.items() if k != "$schema"}
    return _Walk(schema).schema(schema, 0)
