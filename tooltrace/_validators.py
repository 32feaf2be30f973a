"""Validators: cheap checks that keep well-formed but benign text from being redacted.

The detectors (``tooltrace._detectors``) and the key-name rules (``tooltrace._keyrules``) ask
them whether a value is a stand-in (``None``, ``<password>``, ``${X}``), a benign id (a UUID, a
git SHA, a sha256 digest) or a token that looks machine-made.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from urllib.parse import unquote

from tooltrace import _build

__all__ = [
    "IDENT",
    "PCT_ESCAPE",
    "basic_credentials",
    "benign_value",
    "char_classes",
    "mixed",
    "placeholder",
    "random_looking",
]

_HEX40_64 = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_PLACEHOLDER = re.compile(
    r"(?i)(?:none|null|nil|n/a|true|false|undefined|redacted|example|changeme|your[_-].*|"
    r"x+|\*+|\.+|<.*>|\{.*\}|[$%#]|#\s.*|env|os\.environ.*|process\.env.*|"
    r"pass|passwd|pwd|pw|password|secret|token|string|str|value|empty|dummy|test|placeholder|"
    r"hidden|\[redacted.*)"
)
# References a template fills in: ${X}, $(cmd), $NAME, %(pw)s, %s, %-8d, %PASSWORD%,
# %env(X)%, %{x}, #{pw}, #NAME#, {{ x }}, {name}. A value that only starts with a sigil is no
# template: about one random password in thirty starts with $, % or #.
_TEMPLATE_REF = re.compile(
    r"\$\{[^{}]*\}|\$\([^()]*\)|\$[A-Za-z_]\w*|\$\d+|"
    r"%[A-Za-z_]\w+(?:\([\w.:]*\))?%|%(?:\(\w+\))?[-#0 +]*\d*(?:\.\d+)?[sdiouxXeEfFgGcr]|"
    r"%\{[^{}]*\}|#\{[^{}]*\}|#\w+#|\{\{[^{}]*\}\}|\{\w*\}"
)
PCT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _entropy(value: str) -> float:
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def char_classes(value: str) -> int:
    return (
        any(c.islower() for c in value)
        + any(c.isupper() for c in value)
        + any(c.isdigit() for c in value)
        + any(not c.isalnum() for c in value)
    )


def _template(value: str) -> bool:
    """Template references and punctuation only (``${X}``, ``%(user)s:%(pw)s``); not
    ``%Xk2!pQ9``, whose ``%X`` is chance."""
    rest = _TEMPLATE_REF.sub("", value)
    return rest != value and not any(c.isalnum() for c in rest)


def placeholder(value: str) -> bool:
    """A stand-in for a value (``None``, ``<password>``, a template), raw or percent-encoded
    (``%24%7BX%7D``): ``%23Xk2...`` is ``#Xk2...``, a value."""
    if _PLACEHOLDER.fullmatch(value) is not None or _template(value):
        return True
    if "%" not in value or PCT_ESCAPE.search(value) is None:
        return False
    plain = unquote(value)
    return plain != value and placeholder(plain)


def benign_value(value: str) -> bool:
    """Values never redacted by the generic key-name rule."""
    return (
        value.isdigit()
        or _HEX40_64.fullmatch(value) is not None
        or _UUID.fullmatch(value) is not None
        or placeholder(value)
    )


def random_looking(value: str) -> bool:
    """A token that looks machine-generated rather than a word or identifier."""
    if len(value) < 16 or _entropy(value) < 3.0:
        return False
    digit = any(c.isdigit() for c in value)
    alpha = any(c.isalpha() for c in value)
    upper = any(c.isupper() for c in value)
    lower = any(c.islower() for c in value)
    return (digit and alpha) or (upper and lower and len(value) >= 20)


def mixed(value: str) -> bool:
    return char_classes(value) >= 3


def basic_credentials(value: str) -> bool:
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in raw


_build.keep_docs(__name__, globals())
