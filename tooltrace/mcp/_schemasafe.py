"""Redacted structured content that stays valid for the tool's output schema.

A key rule replaces the whole value under a secret-naming key (``pin``, ``credentials``,
``secrets``) with the string ``[REDACTED:secret_field]``. Where that value was a number, an
object or an array, a client that validates ``structuredContent`` against the tool's
``outputSchema`` (both official SDKs do) would reject the result. So in structured content such
a value is redacted *keeping its type*: a number becomes ``0``; an object keeps its keys (redacted
as text) with every value redacted the same way; an array keeps its length with every item
redacted the same way; text becomes the marker; booleans and nulls stay (a key rule keeps them
anyway). Nothing of the secret is left, and the shape is the schema's.

A text block that is the JSON of the structured content (what the MCP specification asks a tool
with structured output to send too) would still carry the values a key rule replaced (text
detectors cannot tell that ``"pin": 4821`` is a secret): when the structured content needs a
key-rule redaction, such a block is rewritten as the JSON of the redacted structured content,
in the same layout, before the registry (audit trail, artifacts) or the client sees it.

A schema may still refuse a redacted value (an ``enum``, ``pattern``, ``minimum`` or ``format``
that a marker or a ``0`` does not meet). Then the result is not sent: the client gets an
``isError`` result saying it was withheld, with the call id, and the audit trail has the
redacted result. A secret never leaks, and a client never gets a result that breaks its
schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..redaction import marker

if TYPE_CHECKING:
    from ..redaction import Redactor

__all__ = ["redact_mirrors", "retype_redacted", "schema_errors"]

_MARK = marker("secret_field")
_ANY_MARK = re.compile(r"\[REDACTED:[a-z0-9_]+\]")


def retype_redacted(redacted: Any, original: Any, redactor: Redactor) -> tuple[Any, int]:
    """``redacted`` (the key-rule redaction of ``original``) with every marker that replaced a
    number, object or array replaced by a redaction of the same type; and how many were."""
    if isinstance(redacted, str):
        if original is not redacted and not isinstance(original, str) and (
                _ANY_MARK.fullmatch(redacted)):
            return _scrub(original, redactor), 1
        return redacted, 0
    if isinstance(redacted, dict) and isinstance(original, Mapping) and len(
            redacted) == len(original):
        out: dict[str, Any] = {}
        total = 0
        # The redactor keeps the order of keys (and may have redacted a key's text).
        for (k, v), ov in zip(redacted.items(), original.values(), strict=True):
            out[k], n = retype_redacted(v, ov, redactor)
            total += n
        return (out, total) if total else (redacted, 0)
    if isinstance(redacted, list) and isinstance(original, list | tuple) and len(
            redacted) == len(original):
        pairs = [retype_redacted(v, ov, redactor) for v, ov in zip(redacted, original,
                                                                   strict=True)]
        total = sum(n for _, n in pairs)
        return ([v for v, _ in pairs], total) if total else (redacted, 0)
    return redacted, 0


def _scrub(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return 0
    if isinstance(value, Mapping):
        return {redactor.redact_text(str(k)): _scrub(v, redactor) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v, redactor) for v in value]
    return _MARK


def redact_mirrors(content: list[Any], structured: Any, redactor: Redactor) -> None:
    """Rewrite (in place) the text blocks of ``content`` that are the JSON of ``structured``
    as the JSON of its typed redaction, when a key rule redacts anything in it."""
    redacted, n = redactor.redact(structured)
    if not n:
        return  # nothing to hide: the blocks stay byte for byte
    redacted, _ = retype_redacted(redacted, structured, redactor)
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "text":
            continue
        text = block.get("text")
        if not isinstance(text, str) or text[:1] not in ("{", "["):
            continue
        try:
            same = json.loads(text) == structured
        except ValueError:
            continue
        if same:
            block["text"] = _dumps_like(text, structured, redacted)


def _dumps_like(text: str, original: Any, value: Any) -> str:
    """``value`` as JSON in the layout ``text`` (the JSON of ``original``) has."""
    layouts: list[dict[str, Any]] = [
        {"indent": 2}, {}, {"separators": (",", ":")}, {"indent": 2, "ensure_ascii": False},
        {"ensure_ascii": False}, {"separators": (",", ":"), "ensure_ascii": False}]
    for layout in layouts:
        if json.dumps(original, **layout) == text:
            return json.dumps(value, **layout)
    return json.dumps(value, indent=2 if "\n" in text else None, ensure_ascii=False)


def schema_errors(value: Any, schema: Mapping[str, Any]) -> int:
    """How many ways ``value`` breaks ``schema`` (0: valid; a schema that cannot be used
    counts as no error, as the clients cannot use it either)."""
    from jsonschema import exceptions, validators

    try:
        cls = validators.validator_for(schema)
        return sum(1 for _ in cls(schema).iter_errors(value))
    except (exceptions.SchemaError, exceptions.RefResolutionError, TypeError, ValueError):
        return 0
