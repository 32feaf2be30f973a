"""Key rules: names that hold a secret, as a mapping's key or assigned to in text.

Two uses of one vocabulary:

* **in text**, a value assigned to a key-like name (``api_key = "..."``, ``"token": "..."``,
  ``SECRET=...``) is a secret (:func:`find_assignments`, run by the detectors' scan);
* **in structured values**, a mapping key matching the key patterns (``password``,
  ``accessToken``; :data:`DEFAULT_KEY_PATTERNS` unless the operator gives others) has its whole
  value replaced by ``Redactor.redact`` (:func:`names_secret`).

Names that talk *about* a secret (``token_type``, ``password_file``) hold none; nor does code
after a name (``private_key: ec.EllipticCurvePrivateKey``, ``password = get_password()``), a
shape :func:`find_assignments` tells from a literal with ``tooltrace.redaction._benign``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tooltrace.redaction._benign import (
    IDENT,
    benign_value,
    code_name,
    prose_word,
    random_looking,
    type_name,
    variable_name,
)

__all__ = [
    "DEFAULT_KEY_PATTERNS",
    "KEYWORDS",
    "find_assignments",
    "key_pattern",
    "may_be_numeric",
    "names_secret",
]

# -- values assigned to key-like names in text -------------------------------------------------

# "Strong" names hold secrets whatever their value looks like; "weak" names (token, auth,
# session ...) are also used for benign things, so their values must look machine-made.
_STRONG_KEY = re.compile(
    r"pass(?:word|wd|phrase)|pass(?![a-z])|pwd|secret|api[_-]?key|apikey|private[_-]?key|"
    r"(?:access|secret|signing|encryption|master|account|client|app|auth|service)[_-]?key|"
    r"client[_-]?secret|credentials?|(?:auth|access|refresh|bearer|session|id)[_-]?token"
)
_WEAK_WORD = re.compile(
    r"(?:^|[^a-z])(?:token|auth|cookie|session(?:[_-]?id)?|sid|sig)(?:$|[^a-z])"
)
# Keywords that start a key-like name (searched in the lower-cased text).
KEYWORDS = re.compile(r"pass|pwd|secret|key|token|auth|cookie|credential|session|sid|sig")
# Names that talk *about* a secret rather than hold one (token_type, password_file ...).
_META_SUFFIX = re.compile(
    r"[_\-.]?(?:types?|header|hdr|names?|file|path|dir|url|uri|len|length|count|mgr|manager|"
    r"handler|class|kind|field|label|prefix|suffix|format|policy|pattern|regex|prompt|hint|"
    r"min|max|size|expires?|expiry|ttl|endpoint|mode|method|scheme|source|location|required|"
    r"enabled|index|idx|param|arg|attr|col|column|env|var|tag|version|algorithm|alg|"
    r"validator|widget|input|form|reset|changed|timeout|store|cache|provider|backend|"
    r"dialog|error|errors|message|msg)$"
)
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_KEY_REST = re.compile(r"[A-Za-z0-9_\-]*")
# The value is either quoted (spaces allowed, up to the quote, a backslash or the line's end,
# so JSON-escaped and truncated text is covered) or a bare token. A "quoted value" starting
# with a comma, parenthesis or space is the end of a string the key-like word sat in.
_ASSIGN = re.compile(
    r"\\?[\"']?(?P<op>(?:[ \t]*(?::=|=>|=)|:)[ \t]*)"
    r"(?:\\?(?P<q>[\"'])(?P<qs>[^\"'\\\r\n\s,;)+][^\"'\\\r\n]{0,511})"
    r"|(?P<s>[^\s\"',;&<>(){}\[\]`\\]{1,512}))"
)
_ANNOTATED_DEFAULT = re.compile(
    r"[\"']?[ \t]*:[ \t]*[A-Za-z_][\w.\[\], |]{0,60}?[ \t]*=(?!=)[ \t]*"
    r"(?P<q>[\"'])(?P<qs>[^\"'\\\r\n]{1,512})"
)
_ASSIGN_RANK = 0
_ASSIGN_KIND = "secret_assignment"

# After "name:" a sentence may go on: "First pass: determine the layout", "api_key: Your API
# key.", "password: Redis password (optional)": two more words follow the first.
_PROSE_GOES_ON = re.compile(r"(?: +[(\"'`]*[A-Za-z][A-Za-z'-]*[.,;:!?)\"'`]*){2}")
# What ends a name in a dict, a call's arguments or a union: "password": user_password,
_CODE_AFTER_NAME = frozenset(",)}]|")
# Code goes on after a name: "x = y if z", "a = b = None", "u = name + ':'", "a, b = c, d".
_EXPRESSION_GOES_ON = re.compile(
    r",|[ \t]+(?:=(?!=)|[-+*/%|&]=?|if|else|or|and|is|in|not|for)[ \t]"
)
# Keywords that start an expression: "password = await vault.read()", "token: new Token()".
_LANGUAGE_WORDS = frozenset({"await", "lambda", "not", "yield", "new", "typeof"})


def _other_name(value: str) -> bool:
    """Another variable's name (``user_password``, ``authToken``, ``_creds``, ``passwd``): a
    lower-case word alone only when it names a secret itself, as a lower-case password may
    be a word."""
    if type_name(value):
        return True
    return variable_name(value) and (
        "_" in value or not value.islower() or KEYWORDS.search(value) is not None
    )


def _reads_as_code(text: str, op: str, value: str, end: int, *, env_style: bool) -> bool:
    """Whether an unquoted value is code rather than a literal: a call or an index
    (``get_password()``, ``os.environ["X"]``, ``Optional[str]``), a dotted name
    (``ec.EllipticCurvePrivateKey``, ``self.api_key``), a type after ``name:`` (``str``,
    ``SecretStr``), another variable's name (``password = user_password``,
    ``"password": user_password,``), or the first word of a sentence after ``name:``.
    ``tooltrace.redaction._benign`` says how rarely a random password takes one of these shapes."""
    nxt = text[end : end + 1]
    if nxt in ("(", "[") and IDENT.fullmatch(value) is not None:
        return True
    if value in _LANGUAGE_WORDS and nxt == " ":
        return True
    if "." in value and not env_style and code_name(value):
        return True
    if "=" not in op:
        # "key: value" is YAML-ish config, an annotation or a dict entry in code, or prose.
        return (
            type_name(value)
            or (_other_name(value) and ("_" in value or nxt in _CODE_AFTER_NAME))
            or (prose_word(value) and _PROSE_GOES_ON.match(text, end) is not None)
        )
    # "key = other_name" in code; "KEY=value" (a .env line) is always a literal.
    return (
        not env_style
        and (" " in op or "_" in value)
        and (
            _other_name(value)
            or (variable_name(value) and _EXPRESSION_GOES_ON.match(text, end) is not None)
        )
    )


def _assignment_ok(text: str, key: str, op: str, quoted: bool, value: str, end: int) -> bool:
    if benign_value(value):
        return False
    lower = key.lower()
    if (
        "author" in lower
        or "tokeniz" in lower
        or "max_token" in lower
        or "keyword" in lower
        or "passthrough" in lower
        or "bypass" in lower
        or "compass" in lower
        or "passenger" in lower
        # The name itself, or re-exported: "X = module.X", "api_key=self.ApiKey".
        or value.rpartition(".")[2].replace("_", "").lower() == lower.replace("_", "")
        or _META_SUFFIX.search(lower) is not None
    ):
        return False
    if not quoted and _reads_as_code(
        text, op, value, end, env_style=key.isupper() and "=" in op and " " not in op
    ):
        return False
    if _STRONG_KEY.search(lower) is not None:
        return len(value) >= 4
    if _WEAK_WORD.search(lower) is None:
        return False
    return random_looking(value)


def find_assignments(text: str, low: str, found: list[tuple[int, int, int, str]]) -> None:
    """Find ``<key-like name> [:=] <value>`` with the name located from keyword hits."""
    seen_to = -1
    for hit in KEYWORDS.finditer(low):
        start = hit.start()
        if start < seen_to:
            continue  # a second keyword inside a name already examined
        while start > 0 and text[start - 1] in _KEY_CHARS:
            start -= 1
        rest = _KEY_REST.match(text, hit.end())
        key_end = rest.end() if rest else hit.end()
        seen_to = key_end
        key = text[start:key_end]
        d = _ANNOTATED_DEFAULT.match(text, key_end)
        if d is not None and _STRONG_KEY.search(key.lower()) is not None:
            # "password: str = 'hunter2'": the annotation is code, the default is the secret.
            value = d.group("qs")
            if len(value) >= 4 and not benign_value(value):
                found.append((d.start("qs"), d.end("qs"), _ASSIGN_RANK, _ASSIGN_KIND))
                seen_to = d.end("qs")
                continue
        m = _ASSIGN.match(text, key_end)
        if m is None:
            continue
        quoted = m.group("q") is not None
        group = "qs" if quoted else "s"
        value = m.group(group)
        s_start, s_end = m.span(group)
        if _assignment_ok(text, key, m.group("op"), quoted, value, s_end):
            found.append((s_start, s_end, _ASSIGN_RANK, _ASSIGN_KIND))
            seen_to = s_end


# -- mapping keys -----------------------------------------------------------------------------

DEFAULT_KEY_PATTERNS: tuple[str, ...] = (
    r"(?:^|_)(?:password|passwd|pass|pwd|passphrase|secret|secrets|token)(?:$|_)",
    r"(?:^|_)(?:api_?key|apikey|private_?key|access_?key|secret_?key|signing_?key)(?:$|_)",
    r"(?:^|_)(?:client_?secret|credentials?|authorization|auth|cookie|cookies)(?:$|_)",
    r"(?:^|_)(?:session_?id|session_?token|refresh_?token|access_?token|id_?token)(?:$|_)",
    r"(?:^|_)(?:auth_?token|bearer|pin|otp|card_?number|cvv)(?:$|_)",
)
# Numbers are kept unless the key names a secret that can be numeric (a PIN, a passcode).
_NUMERIC_KEY = re.compile(r"(?:^|_)(?:pass\w*|pwd|pin|otp|cvv|secret\w*|card_?number)(?:$|_)")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


def _normalise_key(key: str) -> str:
    return _CAMEL.sub(r"\1_\2", key).replace("-", "_").replace(" ", "_").replace(".", "_").lower()


def key_pattern(patterns: Iterable[str] | None) -> re.Pattern[str] | None:
    """The key rules as one regex: ``patterns`` (``None``: :data:`DEFAULT_KEY_PATTERNS`),
    matched case-insensitively; ``None`` when there are none."""
    chosen = DEFAULT_KEY_PATTERNS if patterns is None else tuple(patterns)
    if not chosen:
        return None
    return re.compile("|".join(f"(?:{p})" for p in chosen), re.IGNORECASE)


def names_secret(key_re: re.Pattern[str] | None, key: str) -> bool:
    """Whether the mapping key ``key`` names a secret under the rules ``key_re``."""
    if key_re is None:
        return False
    norm = _normalise_key(key)
    m = key_re.search(norm)
    if m is None:
        return False
    # "token_type", "auth_method", "password_policy" talk about a secret; "session_id",
    # "db_password" hold one (the secret word ends the key).
    return m.end() >= len(norm) or _META_SUFFIX.search(norm) is None


def may_be_numeric(key: str) -> bool:
    """Whether a number under the secret-naming key ``key`` may be the secret (a PIN)."""
    return _NUMERIC_KEY.search(_normalise_key(key)) is not None
