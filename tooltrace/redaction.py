"""Secret redaction, bounded previews and content-addressed artifacts.

Every argument and result passes through :class:`Redactor` before any sink, hook view, log or
model sees it, so the common case (no secret) is kept cheap: one scan with a pre-filter regex
of literal anchors; only text that contains an anchor goes through the full detectors.

A redaction replaces the secret with a marker ``[REDACTED:<kind>]``. The marker never holds
the secret or any part of it (no "first four characters" hints): ``kind`` names the detector.

Three kinds of rule:

* **detectors** for well-known credential formats (cloud keys, VCS and SaaS tokens, JWTs, PEM
  private key blocks, passwords in URLs, ``Authorization`` headers, cookies) and for values
  assigned to key-like names in text (``api_key = "..."``, ``"token": "..."``, ``SECRET=...``);
* **key rules** for structured values: a mapping key such as ``password`` or ``accessToken``
  has its whole value replaced by :meth:`Redactor.redact` (the key itself is text like any
  other and is redacted as such);
* **registered values**: secrets the operator knows (``register_value``), matched raw and in
  their base64, URL-encoded and JSON-escaped forms.

Benign text is left alone on purpose: UUIDs, git SHAs (40 hex) and sha256 digests (64 hex) are
never treated as secrets, not even next to a key-like name.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

from mypy_extensions import mypyc_attr

from tooltrace import _build
from tooltrace.envelope import Artifact

__all__ = [
    "DEFAULT_KEY_PATTERNS",
    "ArtifactStore",
    "Redactor",
    "default_redactor",
    "marker",
    "preview",
]

_MAX_EXCEPTION_CHARS = 500
_MIN_REGISTERED_CHARS = 4


def marker(kind: str) -> str:
    """The replacement text for a secret of ``kind``."""
    return f"[REDACTED:{kind}]"


# --------------------------------------------------------------------------------------------
# Validators: cheap checks that keep well-formed but benign text from being redacted
# --------------------------------------------------------------------------------------------

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
_PCT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _entropy(value: str) -> float:
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _classes(value: str) -> int:
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


def _placeholder(value: str) -> bool:
    """A stand-in for a value (``None``, ``<password>``, a template), raw or percent-encoded
    (``%24%7BX%7D``): ``%23Xk2...`` is ``#Xk2...``, a value."""
    if _PLACEHOLDER.fullmatch(value) is not None or _template(value):
        return True
    if "%" not in value or _PCT_ESCAPE.search(value) is None:
        return False
    plain = unquote(value)
    return plain != value and _placeholder(plain)


def _benign_value(value: str) -> bool:
    """Values never redacted by the generic key-name rule."""
    return (
        value.isdigit()
        or _HEX40_64.fullmatch(value) is not None
        or _UUID.fullmatch(value) is not None
        or _placeholder(value)
    )


def _random_looking(value: str) -> bool:
    """A token that looks machine-generated rather than a word or identifier."""
    if len(value) < 16 or _entropy(value) < 3.0:
        return False
    digit = any(c.isdigit() for c in value)
    alpha = any(c.isalpha() for c in value)
    upper = any(c.isupper() for c in value)
    lower = any(c.islower() for c in value)
    return (digit and alpha) or (upper and lower and len(value) >= 20)


def _mixed(value: str) -> bool:
    return _classes(value) >= 3


def _basic_credentials(value: str) -> bool:
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in raw


# --------------------------------------------------------------------------------------------
# Detectors
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Detector:
    """One credential format.

    ``regex`` group ``s`` (when present) is the secret, else the whole match is. The detector
    runs only when one of its anchors is in the text (``cs``: case-sensitive literals) or in
    its lower-cased copy (``lc``). ``check`` vetoes a match that is well-formed but benign.
    ``rank`` orders overlapping finds: the most specific format names the marker.
    """

    kind: str
    regex: re.Pattern[str]
    cs: tuple[str, ...] = ()
    lc: tuple[str, ...] = ()
    check: Callable[[re.Match[str], str], bool] | None = None
    rank: int = 2


def _check_random(_m: re.Match[str], value: str) -> bool:
    return _mixed(value)


def _check_not_placeholder(_m: re.Match[str], value: str) -> bool:
    return not _placeholder(value)


def _check_bearer(m: re.Match[str], value: str) -> bool:
    if _benign_value(value):
        return False
    if m.group("hdr"):
        return True
    # Outside a header, "bearer <word>" is often prose: the token must look machine-made
    # (a digit is one sign of that, mixed case in a long token another).
    return _random_looking(value) or (
        len(value) >= 16 and _classes(value) >= 2 and any(c.isdigit() for c in value)
    )


# A header value is credentials when it is one token (a raw key), ``name=value`` pairs
# (cookies), or an auth scheme followed by a token or by ``name=value`` parameters (RFC 9110
# 11.4: Negotiate <token68>, Digest username="..", AWS4-HMAC-SHA256 Credential=..). After the
# header name in documentation comes prose instead: "see the docs at ...", "see below".
_PARAM_START = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+[ \t]*=")
# A word of prose: not longer than "authentication" (a long lower-case token is a
# credential), or a link.
_PROSE_WORD = re.compile(
    r"[(\"']*(?:[A-Za-z][a-z]{0,13}|[A-Z]{2,5})[.,:;!?)\"']*|[A-Za-z][A-Za-z0-9+.\-]*://\S*"
)


def _check_header_value(_m: re.Match[str], value: str) -> bool:
    # The header may sit in a quoted string: "Cookie: none",
    value = value.strip(" \t\"',")
    if _placeholder(value):
        return False
    if _PARAM_START.match(value) is not None:
        return True
    words = value.split(None, 2)
    if len(words) < 2:
        return bool(words) and _PROSE_WORD.fullmatch(words[0]) is None
    # "<scheme> <credentials>": prose when a plain word follows the first one.
    return _PARAM_START.match(words[1]) is not None or _PROSE_WORD.fullmatch(words[1]) is None


def _check_basic(m: re.Match[str], value: str) -> bool:
    return bool(m.group("hdr")) or _basic_credentials(value)


# Where a prefixed token may start: not inside a run of letters and digits, but right after
# "_" or "-" (file names glue words so: backup_ghp_..., notes-AKIA...), which \b would refuse.
_GLUE = r"(?<![A-Za-z0-9])"
_HDR = r"(?P<hdr>(?i:authorization|proxy-authorization)[\"']?\s*[:=]\s*[\"']?)?"
_AWS_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "AROA")

_PEM_RE = re.compile(
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?s:.*?)(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
)

_DETECTORS: tuple[_Detector, ...] = (
    _Detector(
        "private_key",
        _PEM_RE,
        cs=("PRIVATE KEY",),
        rank=3,
    ),
    _Detector(
        "jwt",
        re.compile(_GLUE + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
        cs=("eyJ",),
    ),
    _Detector(
        "aws_access_key",
        re.compile(_GLUE + r"(?:" + "|".join(_AWS_PREFIXES) + r"|APKA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        cs=(*_AWS_PREFIXES, "APKA"),
    ),
    _Detector(
        "aws_secret_key",
        re.compile(
            r"(?i:aws)[A-Za-z0-9_\-]{0,20}(?i:secret|key)[A-Za-z0-9_\-]{0,20}[\"']?\s*[:=]+\s*"
            r"[\"']?(?P<s>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
        lc=("aws",),
        check=_check_random,
    ),
    _Detector(
        "gcp_api_key", re.compile(_GLUE + r"AIza[0-9A-Za-z_\-]{35,40}(?![0-9A-Za-z_\-])"), ("AIza",)
    ),
    _Detector("gcp_oauth_token", re.compile(_GLUE + r"ya29\.[0-9A-Za-z_\-]{20,}"), ("ya29.",)),
    _Detector("gcp_client_secret", re.compile(_GLUE + r"GOCSPX-[0-9A-Za-z_\-]{20,}"), ("GOCSPX-",)),
    _Detector(
        "azure_key",
        re.compile(
            r"(?i:AccountKey|SharedAccessKey|SharedAccessSignature|[?&;]sig)="
            r"(?P<s>[A-Za-z0-9%/+]{20,}(?:={1,2}|%3[Dd]){0,2})"
        ),
        lc=("accountkey=", "sharedaccess", "sig="),
    ),
    _Detector(
        "azure_client_secret",
        re.compile(
            # Anchored by its "<digit>Q~": it may follow "-" or "_" and be followed by "."
            # (a file name: notes-<secret>.txt).
            r"(?<![A-Za-z0-9])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}"
            r"(?![A-Za-z0-9_~\-])"
        ),
        cs=("Q~",),
    ),
    _Detector(
        "github_token",
        re.compile(
            _GLUE + r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"
            r"(?![A-Za-z0-9])"
        ),
        cs=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _Detector(
        "gitlab_token",
        re.compile(_GLUE + r"gl(?:pat|dt|rt|cbt|ptt|ft|imt|oas|soat)-[A-Za-z0-9_\-]{20,}"),
        cs=("glpat-", "gldt-", "glrt-", "glcbt-", "glptt-", "glft-", "glimt-", "gloas-", "glsoat-"),
    ),
    _Detector(
        "slack_token",
        re.compile(_GLUE + r"(?:xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})"),
        cs=("xox", "xapp-"),
    ),
    _Detector(
        "slack_webhook",
        re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9/_\-]{8,})"),
        cs=("hooks.slack.com",),
    ),
    _Detector(
        "stripe_key",
        re.compile(
            _GLUE + r"(?:(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,})"
        ),
        cs=("_live_", "_test_", "whsec_"),
    ),
    _Detector(
        "anthropic_key", re.compile(_GLUE + r"sk-ant-[A-Za-z0-9_\-]{20,}"), ("sk-ant-",), rank=3
    ),
    _Detector(
        "openai_key",
        re.compile(_GLUE + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}"),
        cs=("sk-",),
        check=_check_random,
    ),
    _Detector(
        "twilio_key",
        re.compile(_GLUE + r"(?:SK|AC)[0-9a-f]{32}(?![A-Za-z0-9])"
                   r"|(?i:twilio)[A-Za-z_]*[\"']?\s*[:=]\s*[\"']?"
                   r"(?P<s>[0-9a-f]{32})\b"),
        cs=("SK",),
        lc=("twilio",),
    ),
    _Detector(
        "sendgrid_key",
        re.compile(_GLUE + r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64}"),
        cs=("SG.",),
    ),
    _Detector("npm_token", re.compile(_GLUE + r"npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"), ("npm_",)),
    _Detector("pypi_token", re.compile(_GLUE + r"pypi-[A-Za-z0-9_\-]{50,}"), ("pypi-",)),
    _Detector(
        "huggingface_token", re.compile(_GLUE + r"hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])"), ("hf_",)
    ),
    _Detector(
        "url_password",
        re.compile(
            r"\b[A-Za-z][A-Za-z0-9+.\-]{1,20}://[^\s:/@\"'<>]{1,256}:"
            r"(?P<s>[^\s@/\"'<>]{1,256})@"
        ),
        cs=("://",),
        check=_check_not_placeholder,
        rank=3,
    ),
    _Detector(
        "authorization",
        re.compile(_HDR + r"(?i:bearer|token)\s+(?P<s>[A-Za-z0-9_\-.~+/]{8,}=*)"),
        lc=("bearer", "token "),
        check=_check_bearer,
        rank=1,
    ),
    _Detector(
        "authorization",
        re.compile(_HDR + r"(?i:basic)\s+(?P<s>[A-Za-z0-9+/]{8,}={0,2})"),
        lc=("basic",),
        check=_check_basic,
        rank=1,
    ),
    _Detector(
        # Any other scheme (Digest, AWS4-HMAC-SHA256, Negotiate ...): the whole header value.
        "authorization",
        re.compile(
            r"(?im:^[ \t\"']*(?:proxy-)?authorization[ \t]*:[ \t]*"
            r"(?!(?:bearer|basic|token)\s)(?P<s>[^\s][^\r\n]*))"
        ),
        lc=("authorization",),
        check=_check_header_value,
        rank=1,
    ),
    _Detector(
        "cookie",
        re.compile(r"(?im:^[ \t\"']*(?:set-)?cookie[ \t]*:[ \t]*(?P<s>[^\r\n]+))"),
        lc=("cookie",),
        check=_check_header_value,
        rank=1,
    ),
    _Detector(
        "cookie",
        re.compile(
            r"(?i:(?:set-)?cookie)[\"']?[ \t]*[:=][ \t]*[\"']"
            r"(?P<s>[^\"'\r\n\s,;)+][^\"'\r\n]*=[^\"'\r\n]*)[\"']"
        ),
        lc=("cookie",),
        rank=1,
    ),
)

# Text without any anchor skips the detectors: one scan per case.
_CS_ANCHORS = re.compile("|".join(re.escape(a) for d in _DETECTORS for a in d.cs))

# -- values assigned to key-like names ------------------------------------------------------

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
_KEYWORDS = re.compile(r"pass|pwd|secret|key|token|auth|cookie|credential|session|sid|sig")
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
_LC_ANCHORS = re.compile(
    "|".join(
        [_KEYWORDS.pattern, "aws|twilio|accountkey=|sharedaccess|bearer|basic"]
    )
)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


# A CamelCase type name (SecretStr, HttpUrl, UUID, Int64) after "key:" is an annotation;
# a random-looking token that merely starts with a capital is not.
# A type name after "key:" (SecretStr, APIKey, Ed25519PrivateKey); no trailing digits, which
# are the mark of a human-chosen password (Hunter2, Summer2024).
_TYPE_LIKE = re.compile(r"(?:[A-Z][a-z]+|[A-Z]{2,4}(?![a-z])|[0-9]+(?=[A-Z]))+")
_TYPE_NAMES = frozenset(
    {"str", "bytes", "int", "float", "bool", "None", "object", "dict", "list", "tuple", "any"}
)


def _dotted_name(value: str) -> bool:
    """A dotted name in code (``module.Class``, ``self.attr``), not a token with a suffix
    (``<random key>.txt``): no part looks machine-made."""
    return _IDENT.fullmatch(value) is not None and not any(
        _random_looking(part) for part in value.split(".")
    )


def _assignment_ok(text: str, key: str, op: str, quoted: bool, value: str, end: int) -> bool:
    if _benign_value(value):
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
    if not quoted:
        nxt = text[end : end + 1]
        if nxt in ("(", "[", "."):
            return False  # code: a call or an index, not a literal
        env_style = key.isupper() and "=" in op and " " not in op
        if "." in value and not env_style and _dotted_name(value):
            return False  # code: a dotted name (module.Class, self.attr)
        if "=" not in op:
            # "key: value" is YAML/JSON-ish config, or a type annotation in code.
            if value in _TYPE_NAMES or _TYPE_LIKE.fullmatch(value) or nxt in ("|", ",", ")", "="):
                return False
            if nxt == " " and value.isalpha() and value.islower():
                return False  # prose: "First pass: determine the ..."
        elif (
            _IDENT.fullmatch(value)
            and not env_style
            and not _mixed(value)
            and (" " in op or "_" in value)
        ):
            return False  # code: another variable's name, not a literal
    if _STRONG_KEY.search(lower) is not None:
        return len(value) >= 4
    if _WEAK_WORD.search(lower) is None:
        return False
    return _random_looking(value)


def _find_assignments(text: str, low: str, found: list[tuple[int, int, int, str]]) -> None:
    """Find ``<key-like name> [:=] <value>`` with the name located from keyword hits."""
    seen_to = -1
    for hit in _KEYWORDS.finditer(low):
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
            if len(value) >= 4 and not _benign_value(value):
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


# In long text a detector's regex runs only on the lines around its anchors (a scan of the
# whole text costs a few ms per detector; the anchors are found with str.find). A window is the
# anchor's line, cut to _WINDOW_REACH characters either side: every format's secret lies within
# a few hundred characters of its anchor. The multi-line PEM block is always scanned whole.
_WINDOW_MIN_TEXT = 4096
_WINDOW_REACH = 8192


def _anchor_windows(text: str, low: str, det: _Detector) -> list[tuple[int, int]]:
    hits: list[int] = []
    for source, anchors in ((text, det.cs), (low, det.lc)):
        for a in anchors:
            i = source.find(a)
            while i >= 0:
                hits.append(i)
                i = source.find(a, i + 1)
    hits.sort()
    windows: list[tuple[int, int]] = []
    n = len(text)
    for i in hits:
        start = max(text.rfind("\n", 0, i) + 1, i - _WINDOW_REACH)
        end = text.find("\n", i)
        end = min(n if end < 0 else end, i + _WINDOW_REACH)
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], end))
        else:
            windows.append((start, end))
    return windows


def _detect(text: str) -> tuple[str, int]:
    """Run the detectors whose anchors occur in ``text``; replace what they find."""
    low = text.lower() if text.isascii() else text.translate(_ASCII_LOWER)
    found: list[tuple[int, int, int, str]] = []  # (start, end, rank, kind)
    small = len(text) <= _WINDOW_MIN_TEXT
    for det in _DETECTORS:
        if not (any(a in text for a in det.cs) or any(a in low for a in det.lc)):
            continue
        if small or det.regex is _PEM_RE:
            spans: list[tuple[int, int]] = [(0, len(text))]
        else:
            spans = _anchor_windows(text, low, det)
        for w_start, w_end in spans:
            for m in det.regex.finditer(text, w_start, w_end):
                if m.groupdict().get("s") is not None:
                    start, end = m.span("s")
                else:
                    start, end = m.span()
                if det.check is not None and not det.check(m, text[start:end]):
                    continue
                found.append((start, end, det.rank, det.kind))
    if _KEYWORDS.search(low) is not None:
        _find_assignments(text, low, found)
    if not found:
        return text, 0
    # Merge overlapping finds into one redaction named by the most specific detector.
    found.sort()
    merged: list[list[Any]] = []
    for start, end, rank, kind in found:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            if rank > last[2]:
                last[2], last[3] = rank, kind
        else:
            merged.append([start, end, rank, kind])
    out: list[str] = []
    pos = 0
    for start, end, _rank, kind in merged:
        out.append(text[pos:start])
        out.append(marker(kind))
        pos = end
    out.append(text[pos:])
    return "".join(out), len(merged)


# -- encoded secrets ---------------------------------------------------------------------------
# A secret often travels encoded: a base64 config blob or Kubernetes secret, a percent-encoded
# URL or form body. Runs that look encoded are decoded and scanned like any other text; only a
# run whose decoded text holds a secret is replaced, so benign blobs (images, digests, ids)
# stay as they are. Binary (non-UTF-8 or unprintable) decodings are never scanned.

_B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")
# Tried only at token starts (the lookbehind), so a long token is not rescanned per position.
_PCT_TOKEN = re.compile(r"(?<![^\s\"'<>`\\])[^\s\"'<>`\\]*%[0-9A-Fa-f]{2}[^\s\"'<>`\\]*")
_MAX_ENCODED_DEPTH = 2


# A blob may start at its run's start or right after any of the run's non-alphanumeric
# characters: they are path and name separators as well as base64 characters, so the run the
# regex finds often begins with a path or a name ("com/cb/<blob>", "token_<blob>") and is
# misaligned there. Base64 decodes in independent groups of four characters, so the run is
# decoded once per alignment it has starts at, and a start's bytes are a slice of that. A start
# whose first bytes are binary (an image, a misaligned start) costs a 12-byte check.
_B64_MIN = 24  # the shortest run _B64_RUN finds: no blob is shorter
_B64_HEAD = 12  # bytes (16 characters)
_B64_SEP = re.compile(r"[+/_-]")
_B64_TO_STD = str.maketrans("-_", "+/")
# UTF-8 text without control characters (a multi-byte character cut at the end is fine).
_TEXT_HEAD = re.compile(
    rb"(?:[\t\n\r\x20-\x7e]|[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}"
    rb"|[\xf0-\xf4][\x80-\xbf]{3})*(?:[\xc2-\xf4][\x80-\xbf]{0,2})?"
)


def _text_prefix(raw: bytes) -> tuple[str, int]:
    """The UTF-8 text ``raw`` starts with and its length in bytes."""
    try:
        return raw.decode("utf-8"), len(raw)
    except UnicodeDecodeError as exc:
        return raw[: exc.start].decode("utf-8"), exc.start


def _printable(text: str) -> bool:
    shown = sum(1 for ch in text if ch.isprintable() or ch in "\n\r\t")
    return shown >= len(text) * 0.95


def _b64_bytes(std: str, align: int) -> bytes:
    """``std[align:]`` decoded (standard alphabet, no padding; a lone last character dropped)."""
    body = std[align:]
    if len(body) % 4 == 1:
        body = body[:-1]
    return binascii.a2b_base64(body + "=" * (-len(body) % 4))


def _b64_pieces(run: str) -> list[tuple[int, int, str]]:
    """The texts base64 in ``run`` encodes: (start, end, text) for each, in order.

    Each piece's text runs as far as the bytes are text: what follows a blob decodes to junk.
    The piece ends at the next separator after the last character that carries its text. A
    start inside a piece is passed over: it decodes to a part of its text (already scanned)
    or, misaligned, to nothing.
    """
    pieces: list[tuple[int, int, str]] = []
    n = len(run)
    # Either alphabet: a URL-safe blob is the standard one with two characters swapped.
    std = run.rstrip("=").translate(_B64_TO_STD)
    decoded: dict[int, bytes] = {}
    start = 0
    while n - start >= _B64_MIN:
        align = start % 4
        raw = decoded.get(align)
        if raw is None:
            raw = decoded[align] = _b64_bytes(std, align)
        off = (start - align) // 4 * 3
        if _TEXT_HEAD.fullmatch(raw, off, off + _B64_HEAD) is not None:
            text, used = _text_prefix(raw[off:])
            if text and _printable(text):
                sep = _B64_SEP.search(run, start + -(-used * 4 // 3))
                end = n if sep is None else sep.start()
                pieces.append((start, end, text))
                start = end
        sep = _B64_SEP.search(run, start)
        if sep is None:
            break
        start = sep.end()
    return pieces


def _unquote(token: str) -> list[tuple[int, int, str]]:
    """The text a percent-encoded token stands for, as its one piece (none if the token is not
    valid UTF-8 once decoded)."""
    try:
        text = unquote_plus(token, errors="strict")
    except UnicodeDecodeError:
        return []
    return [] if text == token else [(0, len(token), text)]


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


def _encoded_forms(value: str) -> set[str]:
    raw = value.encode("utf-8", "surrogatepass")
    forms = {value, quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1]}
    for enc in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = enc.decode("ascii")
        forms.add(text)
        forms.add(text.rstrip("="))
    forms.add(raw.hex())
    return {f for f in forms if len(f) >= _MIN_REGISTERED_CHARS}


_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")


def _holds_nothing(value: Any) -> bool:
    """Values a key rule leaves alone: no secret in them, or already redacted."""
    return (
        value is None
        or value == ""
        or isinstance(value, bool)
        or (isinstance(value, str) and _MARKER_RE.fullmatch(value) is not None)
    )


# Python subclasses of the compiled class are allowed (it is public API).
@mypyc_attr(allow_interpreted_subclasses=True)
class Redactor:
    """Find and replace secrets in text and in JSON-like values.

    ``extra_values``: secrets to register up front (see :meth:`register_value`).
    ``key_patterns``: regexes matched (``re.search``) against normalised mapping keys
    (camelCase split, lower case, ``-``/``.``/space turned into ``_``); ``None`` means
    :data:`DEFAULT_KEY_PATTERNS`. ``detectors=False`` keeps only key rules and registered
    values. Thread-safe; the compiled rules are shared and swapped atomically.
    """

    __slots__ = (
        "_detectors",
        "_dirty",
        "_key_re",
        "_keys",
        "_lock",
        "_registered",
        "_values",
    )

    def __init__(
        self,
        *,
        extra_values: Iterable[str] = (),
        key_patterns: Iterable[str] | None = None,
        detectors: bool = True,
    ) -> None:
        patterns = DEFAULT_KEY_PATTERNS if key_patterns is None else tuple(key_patterns)
        self._key_re: re.Pattern[str] | None = (
            re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE) if patterns else None
        )
        # Mapping keys repeat from call to call: what the structured pass needs to know of a key
        # (secret-naming?, may a number under it be a secret?, the key text redacted, count) is
        # decided once. Cleared when a value is registered (the key text may now hold one).
        self._keys: dict[str, tuple[bool, bool, str, int]] = {}
        self._detectors = detectors
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._registered: re.Pattern[str] | None = None
        self._dirty = False
        for value in extra_values:
            self.register_value(value)

    def register_value(self, value: str) -> None:
        """Register a secret the operator knows; it is redacted raw and encoded.

        Values shorter than 4 characters are refused (``ValueError``): they would redact
        ordinary text.
        """
        if not isinstance(value, str) or len(value) < _MIN_REGISTERED_CHARS:
            raise ValueError(f"a registered secret must be a string of >= {_MIN_REGISTERED_CHARS}")
        forms = _encoded_forms(value)
        with self._lock:
            self._values |= forms
            # Compiled on the next use, so registering many values costs one compile.
            self._dirty = True
            self._keys = {}

    def _registered_re(self) -> re.Pattern[str] | None:
        if self._dirty:
            with self._lock:
                if self._dirty:
                    ordered = sorted(self._values, key=len, reverse=True)
                    self._registered = re.compile("|".join(re.escape(v) for v in ordered))
                    self._dirty = False
        return self._registered

    # -- text ---------------------------------------------------------------------------------

    def redact_text(self, text: str) -> str:
        """Return ``text`` with secrets replaced; the same object when nothing was found."""
        return self._redact_text(text)[0]

    def _redact_text(self, text: str, depth: int = 0) -> tuple[str, int]:
        if len(text) < _MIN_REGISTERED_CHARS:
            # Nothing shorter than a registered value (>= 4 chars) holds a secret any rule
            # finds (tests/test_redaction.py checks every 1-3 character ASCII string).
            return text, 0
        count = 0
        registered = self._registered_re()
        if registered is not None and registered.search(text) is not None:
            text, count = registered.subn(marker("registered"), text)
        if self._detectors and (
            _CS_ANCHORS.search(text) is not None
            or _LC_ANCHORS.search(text.lower() if text.isascii() else text.translate(_ASCII_LOWER))
            is not None
        ):
            text, n = _detect(text)
            count += n
        if self._detectors and depth < _MAX_ENCODED_DEPTH:
            # The cheap escape search gates the token regex (which is slow on long text).
            if "%" in text and _PCT_ESCAPE.search(text) is not None:
                text, n = self._redact_encoded(text, _PCT_TOKEN, _unquote, depth, decoded=True)
                count += n
            if _B64_RUN.search(text) is not None:
                text, n = self._redact_encoded(text, _B64_RUN, _b64_pieces, depth, decoded=False)
                count += n
        return text, count

    def _redact_encoded(
        self,
        text: str,
        runs: re.Pattern[str],
        pieces: Callable[[str], list[tuple[int, int, str]]],
        depth: int,
        *,
        decoded: bool,
    ) -> tuple[str, int]:
        """Decode the pieces of each run and scan them; replace pieces that hold a secret.

        ``decoded``: put the redacted decoded text in the piece's place (percent-encoding,
        which stays readable); otherwise the piece becomes one marker (base64).
        """
        count = 0
        out: list[str] = []
        pos = 0
        for m in runs.finditer(text):
            base = m.start()
            for start, end, plain in pieces(m.group()):
                red, n = self._redact_text(plain, depth + 1)
                if not n:
                    continue
                count += n
                out.append(text[pos : base + start])
                out.append(red if decoded else marker("encoded_secret"))
                pos = base + end
        if not count:
            return text, 0
        out.append(text[pos:])
        return "".join(out), count

    # -- structured values --------------------------------------------------------------------

    def _decide_key(self, key: str) -> bool:
        if self._key_re is None:
            return False
        norm = _normalise_key(key)
        m = self._key_re.search(norm)
        if m is None:
            return False
        # "token_type", "auth_method", "password_policy" talk about a secret; "session_id",
        # "db_password" hold one (the secret word ends the key).
        return m.end() >= len(norm) or _META_SUFFIX.search(norm) is None

    def _key_info(self, key: str) -> tuple[bool, bool, str, int]:
        info = self._keys.get(key)
        if info is None:
            info = self._decide_key_info(key)
            keys = self._keys
            if len(keys) < 4096:
                keys[key] = info
        return info

    def _decide_key_info(self, key: str) -> tuple[bool, bool, str, int]:
        secret = self._decide_key(key)
        numeric = secret and _NUMERIC_KEY.search(_normalise_key(key)) is not None
        shown, n = self._redact_text(key)
        return secret, numeric, shown, n

    def redact(self, value: Any, depth: int = 0) -> tuple[Any, int]:
        """Deep-redact a JSON-like value; return (redacted copy, number of redactions).

        Mapping keys are redacted as text; keys matching the key rules also get their whole
        value replaced (``None``, booleans and empty strings are kept: they hold no secret).
        Unchanged sub-objects are shared with the input; the input is never mutated. Other
        types are returned as they are. (``depth`` is the recursion's own; callers leave it
        out.)
        """
        t = type(value)
        if t is str:
            return self._redact_text(value)
        if t is int or t is float or t is bool or value is None:
            return value, 0
        if depth > 64:
            return marker("too_deep"), 1
        if t is dict or isinstance(value, Mapping):
            changed = False
            total = 0
            items: list[tuple[Any, Any]] = []
            for k, v in value.items():
                nk = k
                if isinstance(k, str):
                    # The key is text like any other (it may hold a secret itself) and it
                    # names its value's rule. A str subclass is not cached on its identity.
                    secret, numeric, nk, nkc = (
                        (self._keys.get(k) or self._key_info(k))
                        if type(k) is str
                        else self._decide_key_info(k)
                    )
                    if nkc:
                        total += nkc
                        changed = True
                    if (
                        secret
                        and not _holds_nothing(v)
                        and (numeric or not isinstance(v, (int, float)))
                    ):
                        items.append((nk, marker("secret_field")))
                        total += 1
                        changed = True
                        continue
                vt = type(v)
                if vt is int or vt is bool or vt is float or v is None:
                    items.append((nk, v))
                    continue
                nv, n = self.redact(v, depth + 1)
                if n:
                    changed = True
                    total += n
                items.append((nk, nv))
            if not changed:
                return value, 0
            return dict(items), total
        if t is list or t is tuple or isinstance(value, (list, tuple)):
            total = 0
            new: list[Any] | None = None
            for i, v in enumerate(value):
                nv, n = self.redact(v, depth + 1)
                if n:
                    if new is None:
                        new = list(value[:i])
                    total += n
                if new is not None:
                    new.append(nv)
            if new is None:
                return value, 0
            return (tuple(new) if isinstance(value, tuple) else new), total
        return value, 0

    def bounded(self, text: str, limit: int) -> str:
        """At most ``limit`` characters of ``text``, redacted first and then cut: cut first,
        a secret would no longer be recognised and its first characters would remain."""
        text = self.redact_text(text)
        return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."

    def redact_exception(self, exc: BaseException) -> str:
        """``"<ExceptionType>: <message>"`` with secrets redacted and the message bounded."""
        name = type(exc).__name__
        try:
            message = str(exc)
        except Exception:
            message = "<unprintable message>"
        if not message:
            return name
        message = self.redact_text(message)
        return f"{name}: {preview(message, _MAX_EXCEPTION_CHARS)}"


# --------------------------------------------------------------------------------------------
# Previews and artifacts
# --------------------------------------------------------------------------------------------


_default: Redactor | None = None


def default_redactor() -> Redactor:
    """A shared ``Redactor`` with the default rules, for messages made where no registry's
    redactor is at hand (a registry redacts them again with its own, which also knows the
    operator's registered values)."""
    global _default
    if _default is None:
        _default = Redactor()
    return _default


def preview(text: str, limit_chars: int) -> str:
    """At most ``limit_chars`` characters of ``text``, with a note when it was cut.

    The note (``"... [truncated: N of M chars shown]"``) counts against the limit. Redact
    before previewing: cutting can split a secret so that detectors no longer see it.
    """
    if limit_chars < 0:
        raise ValueError("limit_chars must be >= 0")
    n = len(text)
    if n <= limit_chars:
        return text
    note_len = len(f" ... [truncated: {limit_chars} of {n} chars shown]")
    keep = max(limit_chars - note_len, 0)
    note = f" ... [truncated: {keep} of {n} chars shown]"
    if len(note) > limit_chars:
        return text[:limit_chars]
    return text[:keep] + note


# Python subclasses of the compiled class are allowed (it is public API).
@mypyc_attr(allow_interpreted_subclasses=True)
class ArtifactStore:
    """Content-addressed storage for results too big to keep inline.

    Files live at ``<root>/<first two hex>/<sha256>.txt``; the returned
    :class:`~tooltrace.envelope.Artifact` path is relative to ``relative_to`` (default: the
    parent of ``root``, i.e. the tooltrace home), never a full host path. Writes are atomic
    (temporary file, fsync, rename), identical content is stored once.
    """

    __slots__ = ("_fsync", "_prefix", "root")

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        relative_to: str | os.PathLike[str] | None = None,
        fsync: bool = True,
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        base = os.path.dirname(self.root) if relative_to is None else os.fspath(relative_to)
        self._prefix = os.path.relpath(self.root, os.path.abspath(base)).replace(os.sep, "/")
        self._fsync = fsync

    def path_for(self, sha256: str) -> str:
        """The host path where content with this digest is (or would be) stored."""
        if not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise ValueError("not a sha256 hex digest")
        return os.path.join(self.root, sha256[:2], sha256 + ".txt")

    def put(self, text: str) -> Artifact:
        """Store ``text`` (UTF-8) under its sha256 and describe it."""
        data = text.encode("utf-8", "surrogatepass")
        digest = hashlib.sha256(data).hexdigest()
        final = self.path_for(digest)
        rel = f"{self._prefix}/{digest[:2]}/{digest}.txt"
        art = Artifact(path=rel, chars=len(text), bytes=len(data), sha256=digest)
        try:
            if os.stat(final).st_size == len(data):
                return art  # dedup: same digest and size means same content
        except FileNotFoundError:
            pass
        directory = os.path.dirname(final)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{digest[:16]}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                if self._fsync:
                    os.fsync(fh.fileno())
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return art

    def read(self, sha256: str) -> str:
        """The stored text for a digest (``FileNotFoundError`` if absent)."""
        with open(self.path_for(sha256), "rb") as fh:
            return fh.read().decode("utf-8", "surrogatepass")


_build.keep_docs(__name__, globals())
