"""Validators: cheap checks that keep well-formed but benign text from being redacted.

The detectors (``_detectors``) and the key-name rules (``_keyrules``) ask
them whether a value is a stand-in (``None``, ``<password>``, ``${X}``), a benign id (a UUID, a
git SHA, a sha256 digest), a name in code (``ec.EllipticCurvePrivateKey``, ``get_password``,
``SecretStr``) or a token that looks machine-made.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from urllib.parse import unquote

__all__ = [
    "IDENT",
    "PCT_ESCAPE",
    "basic_credentials",
    "benign_value",
    "char_classes",
    "code_name",
    "mixed",
    "placeholder",
    "prose_word",
    "random_looking",
    "type_name",
    "variable_name",
]

_HEX40_64 = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_PLACEHOLDER = re.compile(
    r"(?i)(?:none|null|nil|n/a|true|false|undefined|redacted|example|changeme|your[_-].*|"
    r"x+|\*+|\.+|<.*>|\{.*\}|[$%#]|#\s.*|env|os\.environ.*|process\.env.*|"
    r"pass|passwd|pwd|pw|password|secret|token|string|str|value|empty|dummy|test|placeholder|"
    r"hidden|bearer|basic|\[redacted.*)"
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


# -- names in code ------------------------------------------------------------------------------
#
# A name in code reads as words once split at "_", "." and its case changes
# (EllipticCurvePrivateKey -> Elliptic Curve Private Key, HTTPSConnection -> HTTPS Connection,
# Ed25519PrivateKey -> Ed 25519 Private Key). A random token of the same alphabet flips case or
# class every character or two, so its pieces are short, its capitals come in several runs and
# its digits in several groups. Shape alone is not enough, though: about one random 20-character
# password in a hundred splits into capitalised pieces (NBBZonZO40Vwm02MkmTO -> NBB Zon ZO 40
# Vwm 02 Mkm TO). So a bare name is taken for a type only when its last word is a noun type names
# end in (Key, Token, Str, Url ...), and for a variable's name only when it is snake_case,
# SCREAMING_CASE with an underscore, or camelCase ending in such a noun. Of two million random
# tokens of 12 to 40 letters and digits, one passes for either (measured 2026-12-06). A random
# lower-case word of 8 letters reads as snake_case about once in a thousand, so the key rules
# take a lower-case word alone for a variable only when it names a secret (passwd, authkey).
_PIECE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_VOWELS = frozenset("aeiouyAEIOUY")
# "h" joins a consonant to its neighbour (passphrase, lengths), so it does not count.
_CONSONANT_RUN = re.compile(r"[b-df-gj-np-tv-xzB-DF-GJ-NP-TV-XZ]{5,}")
# Nouns a type's name ends in. Few of three letters: a random token ends in each of those
# about once in 240,000.
_TYPE_NOUNS = frozenset(
    {
        "key", "keys", "token", "tokens", "secret", "secrets", "password", "passphrase",
        "str", "string", "bytes", "bool", "integer", "float", "number", "date", "time",
        "url", "uri", "auth", "authorization", "authentication", "authorizer", "session",
        "sessions", "credential", "credentials", "cookie", "cookies", "jar", "header", "headers",
        "type", "types", "provider", "store", "manager", "config", "settings", "handler", "info",
        "data", "value", "values", "param", "params", "model", "field", "source", "resource",
        "client", "factory", "context", "base", "error", "exception", "mixin", "protocol",
        "callback", "callable", "dict", "list", "mapping", "sequence", "tuple", "path", "object",
        "class", "result", "response", "request", "event", "message", "state", "status",
        "option", "options", "policy", "scheme", "method", "mode", "kind", "signature", "hash",
        "digest", "cert", "certificate", "pair", "spec", "wrapper", "builder", "loader",
        "reader", "writer", "proxy", "backend", "service", "interface", "alias", "identity",
        "identifier", "argument", "arguments", "parameters", "metadata", "details", "update",
        "prop", "property", "properties",
    }
)
_BUILTIN_TYPES = frozenset(
    {
        "str", "bytes", "int", "float", "bool", "complex", "object", "dict", "list", "tuple",
        "set", "frozenset", "bytearray", "memoryview", "type", "None", "Any", "UUID", "Path",
        "any", "string", "number", "boolean", "unknown", "Optional", "Union", "Callable",
        "Literal", "Annotated", "ClassVar", "Final", "Never", "NoReturn", "Self", "TypeAlias",
    }
)
_SNAKE = re.compile(r"_*[a-z][a-z0-9]*(?:_+[a-z0-9]+)*_*")
_SCREAMING = re.compile(r"_*[A-Z][A-Z0-9]*(?:_+[A-Z0-9]+)*_*")
_LOWER_CHUNK = re.compile(r"[a-z][a-z0-9]*")
_UPPER_CHUNK = re.compile(r"[A-Z][A-Z0-9]*")
_CAMEL = re.compile(r"[a-z]+[0-9]*(?:[A-Z][a-z]+[0-9]*|[A-Z]+[0-9]*(?![a-z]))+")
_CAPITALISED = re.compile(r"(?:[A-Z][a-z]+)+")


def _reads_as_words(chunk: str, *, spelled: bool) -> bool:
    """Whether a name between underscores and dots splits into words rather than the short
    pieces of a random token. ``spelled``: a word of four or more letters also has a vowel and
    no five consonants in a row (``grpc`` and ``httpx`` are names in a dotted path, not alone)."""
    pieces = _PIECE.findall(chunk)
    if not pieces or pieces[0].isdigit():
        return False
    digit_groups = singles = acronyms = letters = words = 0
    after_digits = False
    for piece in pieces:
        if piece.isdigit():
            digit_groups += 1
            after_digits = True
            continue
        if spelled and after_digits and piece[0].islower():
            return False  # t47uedmh: in a name, digits end it or a word (Ed25519Key, utf8)
        after_digits = False
        words += 1
        letters += len(piece)
        if len(piece) == 1:
            singles += 1
        elif piece.isupper():
            acronyms += 1
        elif spelled and (
            (len(piece) >= 4 and _VOWELS.isdisjoint(piece))
            or _CONSONANT_RUN.search(piece) is not None
        ):
            return False
    if words > 1 and (singles > 1 or acronyms > max(1, words // 2) or letters < 3 * words):
        return False
    return digit_groups <= 1


def _chunks(value: str) -> list[str]:
    return [c for part in value.split(".") for c in part.split("_") if c]


def _attribute(name: str) -> bool:
    """An attribute after a dot: a type's, a variable's, a class's or a constant's name."""
    return len(name) >= 2 and (
        type_name(name)
        or variable_name(name)
        or (
            (_SCREAMING.fullmatch(name) is not None or _CAPITALISED.fullmatch(name) is not None)
            and _reads_as_words(name, spelled=True)
        )
    )


def code_name(value: str) -> bool:
    """A dotted path of identifiers in code (``ec.EllipticCurvePrivateKey``, ``os.environ``,
    ``settings.API_KEY``, ``Token.Name.Builtin``): a module, object or class first (``np``,
    ``httpx``, ``self``, ``Session``: any name made of words), then attributes."""
    if IDENT.fullmatch(value) is None:
        return False
    parts = value.split(".")
    first, attributes = parts[0], parts[1:]
    return (
        (_SNAKE.fullmatch(first) is not None or first[:1].isupper() or variable_name(first))
        and all(_reads_as_words(c, spelled=False) for c in first.split("_") if c)
        and all(_attribute(a) for a in attributes)
    )


def _ends_in_type_noun(value: str) -> bool:
    pieces = _PIECE.findall(value)
    if len(pieces) > 1 and pieces[-1] == "T":
        pieces.pop()  # a type variable: CredentialsT
    last = pieces[-1]
    return last[:1].isupper() and last.lower() in _TYPE_NOUNS


def type_name(value: str) -> bool:
    """A type in an annotation: a builtin (``str``, ``Any``) or capitalised words ending in a
    noun type names end in (``SecretStr``, ``APIKey``, ``Ed25519PrivateKey``, ``HttpUrl``)."""
    if value in _BUILTIN_TYPES:
        return True
    value = value.lstrip("_")  # a private type: _Credentials
    return (
        value[:1].isupper()
        and IDENT.fullmatch(value) is not None
        and "_" not in value
        and "." not in value
        and _ends_in_type_noun(value)
        and _reads_as_words(value, spelled=False)
    )


def variable_name(value: str) -> bool:
    """A variable's name in code: snake_case or SCREAMING_CASE words (``user_password``,
    ``DB_PASSWORD``, ``passwd``), camelCase ending in a type noun (``userPassword``,
    ``user_apiKey``) or a type name; not a token of random letters."""
    if IDENT.fullmatch(value) is None or "." in value:
        return False
    if type_name(value):
        return True
    chunks = [c for c in value.split("_") if c]
    if not chunks:
        return False
    if all(_UPPER_CHUNK.fullmatch(c) is not None for c in chunks):
        # A constant has an underscore (DB_PASSWORD); one upper-case word may be a password.
        return len(chunks) > 1 and all(_reads_as_words(c, spelled=True) for c in chunks)
    return all(
        (_LOWER_CHUNK.fullmatch(c) is not None or (
            _CAMEL.fullmatch(c) is not None and _ends_in_type_noun(c)
        ))
        and _reads_as_words(c, spelled=True)
        for c in chunks
    )


# A sentence may start with a name: "LangSmith API key", "OpenRouter API key".
_BRAND = re.compile(r"[A-Z][a-z]{2,}(?:[A-Z][a-z]{2,}|[A-Z]{2})")
_ACRONYM = re.compile(r"[A-Z]{2,5}")


def prose_word(value: str) -> bool:
    """A word a sentence may start with (``determine``, ``Whether``, ``HTTP``, ``LangSmith``):
    spelled like a word, or a short acronym."""
    if _ACRONYM.fullmatch(value) is not None:
        return True
    if _BRAND.fullmatch(value) is not None:
        return _reads_as_words(value, spelled=True)
    return (
        value.isalpha()
        and value[1:].islower()
        and len(value) <= 14
        and not _VOWELS.isdisjoint(value)
        and _reads_as_words(value.lower(), spelled=True)
    )


def mixed(value: str) -> bool:
    return char_classes(value) >= 3


def basic_credentials(value: str) -> bool:
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in raw
