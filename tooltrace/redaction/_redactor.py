"""The ``Redactor``: detectors, key rules and registered values applied to text and to
JSON-like values; and the shared default redactor."""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

from tooltrace.redaction._artifacts import preview
from tooltrace.redaction._benign import PCT_ESCAPE
from tooltrace.redaction._detectors import ASCII_LOWER, CS_ANCHORS, LC_ANCHORS, detect, marker
from tooltrace.redaction._encoded import (
    B64_RUN,
    MAX_ENCODED_DEPTH,
    PCT_TOKEN,
    b64_pieces,
    unquote_pieces,
)
from tooltrace.redaction._keyrules import key_pattern, may_be_numeric, names_secret

__all__ = ["MIN_REGISTERED_CHARS", "Redactor", "default_redactor"]

_MAX_EXCEPTION_CHARS = 500
MIN_REGISTERED_CHARS = 4


# A key's bytes travel as hex or base64 and one form is registered: the others are added. Below
# 16 bytes a "key" is more likely a word that happens to be hex or base64.
_MIN_KEY_BYTES = 16
_HEX_KEY = re.compile(r"(?:[0-9a-fA-F]{2}){16,}")
_B64_KEY = re.compile(r"[A-Za-z0-9+/]{22,}={0,2}|[A-Za-z0-9_-]{22,}={0,2}")
_URLSAFE_TO_STD = str.maketrans("-_", "+/")
_PEM_BLOCK = re.compile(
    r"-----BEGIN [A-Z0-9 ]+-----(?P<body>[A-Za-z0-9+/=\s]+?)-----END [A-Z0-9 ]+-----"
)


def _key_bytes(value: str) -> bytes | None:
    """The bytes a hex or base64 key stands for (None when ``value`` is neither, or short)."""
    try:
        if _HEX_KEY.fullmatch(value) is not None:
            raw = bytes.fromhex(value)
        elif _B64_KEY.fullmatch(value) is not None:
            std = value.translate(_URLSAFE_TO_STD).rstrip("=")
            raw = base64.b64decode(std + "=" * (-len(std) % 4), validate=True)
        else:
            return None
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) >= _MIN_KEY_BYTES else None


def _byte_forms(raw: bytes) -> set[str]:
    """A key's bytes as text: hex in either case, base64 in either alphabet, padded or not."""
    forms = {raw.hex(), raw.hex().upper()}
    for enc in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = enc.decode("ascii")
        forms |= {text, text.rstrip("=")}
    return forms


def _text_forms(value: str) -> set[str]:
    raw = value.encode("utf-8", "surrogatepass")
    forms = {value, quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1]}
    for enc in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = enc.decode("ascii")
        forms.add(text)
        forms.add(text.rstrip("="))
    forms.add(raw.hex())
    return forms


def _der_octets(der: bytes, depth: int = 0) -> list[bytes]:
    """The contents of the OCTET STRINGs in DER, nested ones included: where a private key's
    bytes sit (PKCS#8 wraps the key's own structure in one; an Ed25519 seed is the inner one,
    an EC key's scalar one in SEC 1). Stops quietly at anything that is not DER."""
    out: list[bytes] = []
    i = 0
    while i + 2 <= len(der) and depth < 4:
        tag, size = der[i], der[i + 1]
        i += 2
        if size & 0x80:
            width = size & 0x7F
            if not 0 < width <= 3 or i + width > len(der):
                break
            size = int.from_bytes(der[i : i + width], "big")
            i += width
        if i + size > len(der):
            break
        content = der[i : i + size]
        i += size
        if tag == 0x04:
            if len(content) >= _MIN_KEY_BYTES:
                out.append(content)
            out += _der_octets(content, depth + 1)
        elif tag & 0x20:  # constructed: SEQUENCE, SET, [n]
            out += _der_octets(content, depth + 1)
    return out


def _pem_lines(lines: Iterable[str]) -> set[str]:
    """The lines of a PEM body a program may print one by one (a last line shorter than 16
    characters is more likely ordinary text)."""
    return {ln for ln in lines if len(ln) >= _MIN_KEY_BYTES}


# The widths a base64 body is wrapped at: PEM's 64, and MIME's 76 (``base64`` and
# ``openssl base64 -e`` print a DER file so).
_WRAP_WIDTHS = (64, 76)


def _wrapped_lines(body: str) -> set[str]:
    """The lines of a base64 body wrapped at each of ``_WRAP_WIDTHS``."""
    return _pem_lines(body[i : i + w] for w in _WRAP_WIDTHS for i in range(0, len(body), w))


def _other_pem_formats(pem: str) -> list[bytes]:
    """The DER of the private key in ``pem`` as PKCS#8 and as its algorithm's own format
    (PKCS#1, SEC 1): what a conversion prints (``openssl pkey -traditional``). Empty when
    ``cryptography`` reads no unencrypted private key there."""
    from cryptography.hazmat.primitives import serialization as ser  # only a PEM needs it

    try:
        key = ser.load_pem_private_key(pem.encode("ascii"), password=None)
    except Exception:
        # Not a private key, encrypted, unsupported or malformed (ValueError, TypeError,
        # UnsupportedAlgorithm, and InternalError for a short Ed448 key): the block registers
        # as it is.
        return []
    out: list[bytes] = []
    for fmt in (ser.PrivateFormat.PKCS8, ser.PrivateFormat.TraditionalOpenSSL):
        try:
            out.append(key.private_bytes(ser.Encoding.DER, fmt, ser.NoEncryption()))
        except ValueError:  # Ed25519, X25519 and DH keys have no format of their own
            pass
    return out


def _encoded_forms(value: str) -> set[str]:
    """Every form a registered secret is matched in: as given and without surrounding
    whitespace (a key read from a file ends in a newline that its uses drop), each raw and
    URL-, JSON-, base64- or hex-encoded; a hex or base64 key's bytes in the other forms too;
    a PEM block's body as one line and line by line (as given, and wrapped at 64 and 76
    characters), and the key bytes inside it (an Ed25519 seed, an EC scalar) in hex and base64;
    a PEM private key also as its other PEM format (PKCS#8 or PKCS#1 / SEC 1) writes it, its
    body's lines at both widths, and that DER in hex."""
    stripped = value.strip()
    forms = _text_forms(value) | _text_forms(stripped)
    derived: set[str] = set()
    pem = _PEM_BLOCK.search(stripped)
    if pem is not None:
        lines = pem.group("body").split()
        derived |= _pem_lines(lines)
        stripped = "".join(lines)
        derived.add(stripped)
        derived |= _wrapped_lines(stripped)
        for der in _other_pem_formats(pem.group()):
            derived |= _wrapped_lines(base64.b64encode(der).decode("ascii"))
            derived |= _byte_forms(der)
    raw = _key_bytes(stripped)
    if raw is not None:
        derived |= _byte_forms(raw)
        if pem is not None:
            for octets in _der_octets(raw):
                derived |= _byte_forms(octets)
    # Hex and base64 are plain ASCII; only base64's "+/=" change when URL-encoded.
    forms |= derived | {quote(f, safe="") for f in derived}
    return {f for f in forms if len(f) >= MIN_REGISTERED_CHARS}


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
        "_generation",
        "_key_re",
        "_keys",
        "_lock",
        "_plain",
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
        self._key_re: re.Pattern[str] | None = key_pattern(key_patterns)
        # Mapping keys repeat from call to call: what the structured pass needs to know of a key
        # (secret-naming?, may a number under it be a secret?, the key text redacted, count) is
        # decided once. Cleared when a value is registered (the key text may now hold one).
        self._keys: dict[str, tuple[bool, bool, str, int]] = {}
        # Identifiers checked on every call (run ids, modes, principals' names) repeat too:
        # whether each holds a secret is decided once (``is_clean``), until a value is registered.
        self._plain: dict[str, bool] = {}
        self._detectors = detectors
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._registered: re.Pattern[str] | None = None
        self._dirty = False
        self._generation = 0
        for value in extra_values:
            self.register_value(value)

    def register_value(self, value: str) -> None:
        """Register a secret the operator knows; it is redacted raw and encoded, with or
        without surrounding whitespace, and a hex, base64 or PEM key also in the other forms
        its bytes take (``_encoded_forms`` lists them).

        Values shorter than 4 characters (surrounding whitespace aside) are refused
        (``ValueError``): they would redact ordinary text.
        """
        if not isinstance(value, str) or len(value.strip()) < MIN_REGISTERED_CHARS:
            raise ValueError(f"a registered secret must be a string of >= {MIN_REGISTERED_CHARS}")
        forms = _encoded_forms(value)
        with self._lock:
            self._values |= forms
            # Compiled on the next use, so registering many values costs one compile.
            self._dirty = True
            self._keys = {}
            self._plain = {}
            self._generation += 1

    @property
    def generation(self) -> int:
        """How many times a value was registered (0: never): text redacted before may redact
        differently now (a caller remembering redacted text checks it)."""
        return self._generation

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

    def is_clean(self, text: str) -> bool:
        """Whether ``text`` holds nothing to redact (``redact_text(text) == text``); the
        verdict for a text of up to 128 characters is remembered until a value is registered
        (the last 4,096 or fewer: a full memory starts over, so texts that never repeat, such
        as request ids, cannot keep later ones out)."""
        if type(text) is not str:  # a subclass may bring its own equality: never remembered
            return self._redact_text(text)[0] == text
        plain = self._plain  # taken first: a verdict reached under older rules dies with it
        verdict = plain.get(text)
        if verdict is None:
            verdict = self._redact_text(text)[0] == text
            if len(text) <= 128:
                if len(plain) >= 4096:
                    plain.clear()
                plain[text] = verdict
        return verdict

    def is_plain_key(self, key: str) -> bool:
        """Whether a mapping key leaves its value to the text rules alone: it names no secret
        (no key rule matches it) and holds none; decided once per key, as ``redact`` does."""
        secret, _numeric, _shown, found = (
            self._key_info(key) if type(key) is str else self._decide_key_info(key)
        )
        return not secret and not found

    def _redact_text(self, text: str, depth: int = 0) -> tuple[str, int]:
        if len(text) < MIN_REGISTERED_CHARS:
            # Nothing shorter than a registered value (>= 4 chars) holds a secret any rule
            # finds (tests/test_redaction.py checks every 1-3 character ASCII string).
            return text, 0
        count = 0
        registered = self._registered_re()
        if registered is not None and registered.search(text) is not None:
            text, count = registered.subn(marker("registered"), text)
        if self._detectors and (
            CS_ANCHORS.search(text) is not None
            or LC_ANCHORS.search(text.lower() if text.isascii() else text.translate(ASCII_LOWER))
            is not None
        ):
            text, n = detect(text)
            count += n
        # Encoded text is decoded for registered values too, also with the detectors off.
        if (self._detectors or registered is not None) and depth < MAX_ENCODED_DEPTH:
            # The cheap escape search gates the token regex (which is slow on long text).
            if "%" in text and PCT_ESCAPE.search(text) is not None:
                text, n = self._redact_encoded(text, PCT_TOKEN, unquote_pieces, depth, decoded=True)
                count += n
            if B64_RUN.search(text) is not None:
                text, n = self._redact_encoded(text, B64_RUN, b64_pieces, depth, decoded=False)
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

    def _key_info(self, key: str) -> tuple[bool, bool, str, int]:
        keys = self._keys  # taken first: a key decided under older rules dies with them
        info = keys.get(key)
        if info is None:
            info = self._decide_key_info(key)
            if len(keys) < 4096:
                keys[key] = info
        return info

    def _decide_key_info(self, key: str) -> tuple[bool, bool, str, int]:
        secret = names_secret(self._key_re, key)
        numeric = secret and may_be_numeric(key)
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
        a secret would no longer be recognised and its first characters would remain. A cut
        ends in "..." (below a limit of 3 it is a plain cut, as ``preview`` makes); a
        negative limit is refused (``ValueError``)."""
        if limit < 0:
            raise ValueError("limit must be >= 0")
        text = self.redact_text(text)
        if len(text) <= limit:
            return text
        return text[: limit - 3] + "..." if limit >= 3 else text[:limit]

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


_default: Redactor | None = None


def default_redactor() -> Redactor:
    """A shared ``Redactor`` with the default rules, for messages made where no registry's
    redactor is at hand (a registry redacts them again with its own, which also knows the
    operator's registered values)."""
    global _default
    if _default is None:
        _default = Redactor()
    return _default
