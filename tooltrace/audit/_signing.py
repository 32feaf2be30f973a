"""Ed25519 signatures: the home's signing key, and what it signs.

The hash chains prove what a segment holds and the HMAC (``_format.checkpoint_mac``) that
nobody without the audit key re-chained it; but whoever holds the audit key can re-seal a
rewritten trail. The signatures close that: every checkpoint and seal line, every approval
line and every digest entry carries ``kid`` (the key id) and ``sig``, an Ed25519 signature
by the home's private key, and ``verify`` needs only the public key to check them.

What is signed is a canonical JSON object (keys sorted, no spaces) behind a tag naming its
kind, so a signature over one kind of thing never verifies as another:

- a line (``ckpt``, ``seal``, ``a``): the line's fields without ``sig``, ``mac`` and ``h``,
  with ``writer``, ``segment`` and ``seq`` (``head`` is the chain hash of the line before);
  the same object with ``sig`` added is the line's *anchor* (``_anchors``);
- a digest entry: its fields without ``sig``, ``mac`` and ``h``, with ``seq`` and ``prev`` (the
  hash of the entry before).

The private key is ``TOOLTRACE_SIGNING_KEY`` (a file) if set, else
``<home>/keys/signing.ed25519``, created 0600 (its directory 0700) on first use, PKCS#8 PEM;
the public key beside it as ``<file>.pub`` (SubjectPublicKeyInfo PEM). A key id is the first
16 hex digits of the sha256 of the raw 32-byte public key.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from .._files import create_whole, fsync_path
from .._settings import TOOLTRACE_SIGNING_KEY, signing_key_file
from ..exceptions import ConfigurationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ._anchors import AnchorLog

__all__ = [
    "SIGNED_KINDS",
    "TOOLTRACE_SIGNING_KEY",
    "PublicKey",
    "Signer",
    "Trust",
    "digest_payload",
    "line_payload",
    "load_public_key",
    "load_signer",
    "resolve_signer",
    "secret_values",
    "signing_key_path",
]

#: Line kinds that carry a signature: checkpoints, seals and approvers' answers.
SIGNED_KINDS = frozenset({"ckpt", "seal", "a"})
_KEY_FILE = Path("keys") / "signing.ed25519"
_LINE_TAG = b"tooltrace-line-v1\n"
_DIGEST_TAG = b"tooltrace-digest-v1\n"
_UNSIGNED = frozenset({"sig", "mac", "h"})
_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def _default(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return dict(obj)
    return str(obj)


def _canonical(fields: Mapping[str, Any]) -> bytes:
    return orjson.dumps({k: v for k, v in fields.items() if k not in _UNSIGNED},
                        default=_default, option=_OPTS)


def line_payload(writer: str, segment: int, seq: int, fields: Mapping[str, Any]) -> bytes:
    """What a signed line's signature covers: its fields (without ``sig``, ``mac``, ``h``)
    with the writer, segment number and seq it has in the chain."""
    return _LINE_TAG + _canonical({**fields, "writer": writer, "segment": segment, "seq": seq})


def digest_payload(prev: str, seq: int, fields: Mapping[str, Any]) -> bytes:
    """What a digest entry's signature covers: its fields (without ``sig``, ``mac``, ``h``)
    with its seq and the hash of the entry before it."""
    return _DIGEST_TAG + _canonical({**fields, "seq": seq, "prev": prev})


def _key_id(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class PublicKey:
    """An Ed25519 public key: ``raw`` 32 bytes, and the file it was read from (if any)."""

    raw: bytes
    path: Path | None = None

    @property
    def hex(self) -> str:
        """The raw key as 64 hex digits (what ``--pubkey`` takes and ``where`` prints)."""
        return self.raw.hex()

    @property
    def kid(self) -> str:
        """The key id lines carry: the first 16 hex digits of sha256 of the raw key."""
        return _key_id(self.raw)

    def pem(self) -> str:
        """The key as SubjectPublicKeyInfo PEM (what ``openssl pkey -pubin`` reads)."""
        from cryptography.hazmat.primitives import serialization

        pem: bytes = self._key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        return pem.decode()

    def _key(self) -> Any:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        return Ed25519PublicKey.from_public_bytes(self.raw)

    def verify(self, payload: bytes, sig: object) -> bool:
        """Whether ``sig`` (a line's ``sig`` field, whatever it holds) is this key's signature
        of ``payload``."""
        from cryptography.exceptions import InvalidSignature

        if not isinstance(sig, str) or len(sig) != 128:
            return False
        try:
            raw = bytes.fromhex(sig)
        except ValueError:
            return False
        try:
            self._key().verify(raw, payload)
        except InvalidSignature:
            return False
        return True

    @classmethod
    def parse(cls, spec: str | os.PathLike[str]) -> PublicKey:
        """A public key from 64 hex digits or from a file holding them, a PEM public key
        (SubjectPublicKeyInfo) or the raw 32 bytes. Raises ``ConfigurationError`` otherwise."""
        text = os.fspath(spec)
        if isinstance(text, str) and _is_hex_key(text.strip()):
            return cls(bytes.fromhex(text.strip()))
        path = Path(text)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigurationError(
                f"public key {str(text)[:80]!r} is neither 64 hex digits nor a readable file"
                f" ({exc.strerror or type(exc).__name__})") from None
        return cls(_public_from_bytes(data, str(path)), path)


def _is_hex_key(text: str) -> bool:
    return len(text) == 64 and not text.lower().strip("0123456789abcdef")


def _public_from_bytes(data: bytes, where: str) -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    stripped = data.strip()
    if _is_hex_key(stripped.decode("ascii", "replace")):
        return bytes.fromhex(stripped.decode())
    if len(data) == 32:
        return data
    if stripped.startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(stripped)
        except ValueError:
            key = None
        if isinstance(key, Ed25519PublicKey):
            return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    raise ConfigurationError(
        f"{where} holds no Ed25519 public key (64 hex digits, a PEM public key, or 32 bytes)")


@dataclass(frozen=True, slots=True)
class Trust:
    """What ``verify`` checks signatures against: the trusted public keys by key id, and
    whether lines without a signature (a trail written before signatures) are only warned of.
    """

    keys: Mapping[str, PublicKey]
    allow_unsigned: bool = False

    @classmethod
    def of(cls, keys: Iterable[PublicKey], *, allow_unsigned: bool = False) -> Trust:
        """Trust ``keys``."""
        return cls({k.kid: k for k in keys}, allow_unsigned)

    def describe(self) -> str:
        """The trusted key ids, for messages."""
        return ", ".join(sorted(self.keys)) or "none"


class Signer:
    """The home's private key: signs lines and digest entries, and appends every signed
    checkpoint head to the home's anchors file (``anchors``, when there is one)."""

    __slots__ = ("_private", "anchors", "path", "public")

    def __init__(self, private: Ed25519PrivateKey, *, path: Path | None = None,
                 anchors: AnchorLog | None = None) -> None:
        from cryptography.hazmat.primitives import serialization

        self._private = private
        self.path = path
        self.anchors = anchors
        raw = private.public_key().public_bytes(serialization.Encoding.Raw,
                                                serialization.PublicFormat.Raw)
        pub = _pub_path(path) if path is not None else None
        self.public = PublicKey(raw, pub if pub is not None and pub.exists() else None)

    @property
    def kid(self) -> str:
        """The key id this signer's lines carry."""
        return self.public.kid

    @classmethod
    def generate(cls, anchors: AnchorLog | None = None) -> Signer:
        """A signer with a fresh key that is kept nowhere (tests, one-off tools)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate(), anchors=anchors)

    def sign(self, payload: bytes) -> str:
        """The signature of ``payload``, as 128 hex digits."""
        return self._private.sign(payload).hex()

    def sign_line(self, writer: str, segment: int, seq: int,
                  fields: dict[str, Any]) -> dict[str, Any]:
        """Add ``kid`` and ``sig`` to a line's fields (``head`` must be in them already);
        return the line's anchor (what the signature covers, and the signature)."""
        fields["kid"] = self.kid
        fields["sig"] = self.sign(line_payload(writer, segment, seq, fields))
        return {**{k: v for k, v in fields.items() if k != "mac"}, "writer": writer,
                "segment": segment, "seq": seq}

    def sign_entry(self, prev: str, seq: int, fields: dict[str, Any]) -> dict[str, Any]:
        """Add ``kid`` and ``sig`` to a digest entry's fields."""
        fields["kid"] = self.kid
        fields["sig"] = self.sign(digest_payload(prev, seq, fields))
        return fields

    def __repr__(self) -> str:  # never the key itself
        return f"Signer(kid={self.kid!r})"


def signing_key_path(home: Path) -> Path:
    """Where the private key is: ``TOOLTRACE_SIGNING_KEY`` > ``<home>/keys/signing.ed25519``."""
    return signing_key_file() or home / _KEY_FILE


def _pub_path(path: Path) -> Path:
    return path.with_name(path.name + ".pub")


def _load_private(path: Path) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = path.read_bytes().strip()
    if _is_hex_key(data.decode("ascii", "replace")):
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(data.decode()))
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigurationError(
            f"the signing key file {path} holds no Ed25519 private key (PKCS#8 PEM, or 64 hex"
            " digits of the seed)")
    return key


def _create(path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    create_whole(path, pem, 0o600)
    fsync_path(path.parent)


def load_signer(home: Path, *, create: bool) -> Signer | None:
    """The home's signer (its anchors go to ``<home>/anchors/anchors.jsonl``); None when
    there is no key and ``create`` is False. With ``create`` a missing key file in the home is
    made (0600); a ``TOOLTRACE_SIGNING_KEY`` naming a missing file is a ``ConfigurationError``.
    """
    from ._anchors import AnchorLog, anchors_path

    path = signing_key_path(home)
    explicit = signing_key_file() is not None
    if not path.exists():
        if explicit:
            raise ConfigurationError(f"{TOOLTRACE_SIGNING_KEY} names {path}, which does not"
                                     " exist")
        if not create:
            return None
        _create(path)
    private = _load_private(path)
    pub = _pub_path(path)
    if not pub.exists():
        # Derivable from the private key, so a lost or never-written public file is rewritten.
        with contextlib.suppress(OSError):
            create_whole(pub, Signer(private).public.pem().encode(), 0o644)
    return Signer(private, path=path, anchors=AnchorLog(anchors_path(home)))


def resolve_signer(signer: Signer | Literal["home"] | None, adir: Path, *,
                   create: bool) -> Signer | None:
    """``signer`` as given, or for ``"home"`` the signer of the home ``adir`` (``<home>/audit``)
    belongs to (``load_signer``)."""
    return load_signer(adir.parent, create=create) if signer == "home" else signer


def load_public_key(home: Path) -> PublicKey | None:
    """The home's public key: ``<key file>.pub``, else derived from the private key; None when
    the home has neither."""
    path = signing_key_path(home)
    pub = _pub_path(path)
    if pub.exists():
        return PublicKey(_public_from_bytes(pub.read_bytes(), str(pub)), pub)
    if path.exists():
        return Signer(_load_private(path), path=path).public
    return None


def secret_values(home: str | os.PathLike[str] | Path) -> tuple[str, ...]:
    """The secret values of a home's keys, in every form they are written in, for a redactor
    to register (``Redactor.register_value``): the audit key (HMAC) as stored, and the signing
    key's seed as hex, its PKCS#8 PEM and the PEM's base64 body. Creates nothing; a key that
    does not exist contributes nothing."""
    from ._format import load_key

    h = Path(home)
    out: list[str] = []
    hmac_key = load_key(h, create=False)
    if hmac_key:
        out.append(hmac_key.decode("utf-8", "replace"))
    path = signing_key_path(h)
    if path.exists():
        from cryptography.hazmat.primitives import serialization

        private = _load_private(path)
        seed = private.private_bytes(serialization.Encoding.Raw,
                                     serialization.PrivateFormat.Raw,
                                     serialization.NoEncryption())
        pem = private.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
        body = "".join(ln for ln in pem.splitlines() if not ln.startswith("-----"))
        stored = path.read_text("ascii", "replace").strip()
        out += [seed.hex(), pem.strip(), body,
                base64.b64encode(seed).decode()]
        if stored not in out:
            out.append(stored)
    return tuple(dict.fromkeys(v for v in out if v))
