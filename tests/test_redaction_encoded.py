"""The forms a registered secret is redacted in: a private key's PEM, its body and lines, the key
bytes inside its DER in hex and base64; and how DER that is cut short, nested deep or not DER at
all is read (never raising)."""

from __future__ import annotations

import base64
import enum
import functools
import hashlib
import json
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa, x25519

from tooltrace.redaction import Redactor, marker

REGISTERED = marker("registered")


def _bytes(label: str, n: int = 32) -> bytes:
    """``n`` fixed bytes that look random (a key's bytes, a filler)."""
    out = b""
    while len(out) < n:
        out += hashlib.sha256(f"{label}/{len(out)}".encode()).digest()
    return out[:n]


KEY = _bytes("key")


def _byte_forms(raw: bytes) -> dict[str, str]:
    """The forms a program prints a key's bytes in."""
    b64 = base64.b64encode(raw).decode()
    url = base64.urlsafe_b64encode(raw).decode()
    return {
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "base64": b64,
        "base64 unpadded": b64.rstrip("="),
        "base64url": url,
        "base64url unpadded": url.rstrip("="),
        "base64 URL-quoted": quote(b64, safe=""),
    }


def _redacted(r: Redactor, form: str) -> bool:
    text = f"the key: {form} (rotate monthly)"
    out = r.redact_text(text)
    if out == text:
        return False
    assert out == f"the key: {REGISTERED} (rotate monthly)", (form, out)
    return True


def _redacted_forms(r: Redactor, raw: bytes) -> set[str]:
    return {name for name, form in _byte_forms(raw).items() if _redacted(r, form)}


ALL_FORMS = set(_byte_forms(KEY))


def _pem(der: bytes, label: str = "PRIVATE KEY") -> str:
    body = base64.b64encode(der).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n"


def _tlv(tag: int, content: bytes, width: int = 0) -> bytes:
    """A DER element; ``width`` > 0 writes its length in the long form, in that many bytes."""
    if width == 0:
        assert len(content) < 0x80
        return bytes([tag, len(content)]) + content
    return bytes([tag, 0x80 | width]) + len(content).to_bytes(width, "big") + content


def _holding(der: bytes) -> Redactor:
    """A redactor with a PEM key of these DER bytes registered, as read from its file."""
    return Redactor(detectors=False, extra_values=[_pem(der)])


# -- real keys ------------------------------------------------------------------------------

_NO_ENCRYPTION = serialization.NoEncryption()
_PKCS8 = serialization.PrivateFormat.PKCS8
_TRADITIONAL = serialization.PrivateFormat.TraditionalOpenSSL
_DER = serialization.Encoding.DER


@functools.cache
def _private_key(kind: str) -> ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | (
        rsa.RSAPrivateKey):
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if kind == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _inner_bytes(kind: str, fmt: serialization.PrivateFormat) -> dict[str, bytes]:
    """The key bytes inside the PEM a program may print on their own."""
    key = _private_key(kind)
    if isinstance(key, ed25519.Ed25519PrivateKey):
        raw = serialization.PrivateFormat.Raw
        return {"seed": key.private_bytes(serialization.Encoding.Raw, raw, _NO_ENCRYPTION)}
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return {"scalar": key.private_numbers().private_value.to_bytes(32, "big")}
    if fmt is _PKCS8:  # PKCS#8 wraps the RSAPrivateKey of PKCS#1 in an OCTET STRING
        return {"pkcs1 der": key.private_bytes(_DER, _TRADITIONAL, _NO_ENCRYPTION)}
    return {}


KEYS = [
    pytest.param("ed25519", _PKCS8, id="ed25519-pkcs8"),
    pytest.param("ec", _PKCS8, id="ec-p256-pkcs8"),
    pytest.param("ec", _TRADITIONAL, id="ec-p256-sec1"),
    pytest.param("rsa", _PKCS8, id="rsa-pkcs8"),
    pytest.param("rsa", _TRADITIONAL, id="rsa-pkcs1"),
]


@pytest.mark.parametrize(("kind", "fmt"), KEYS)
def test_a_registered_private_key_is_redacted_in_every_form_a_program_prints_it(
    kind: str, fmt: serialization.PrivateFormat
) -> None:
    """The whole PEM, its body as one line and each of its lines, its DER in hex, and the key
    bytes inside it (an Ed25519 seed, an EC scalar in PKCS#8 or SEC 1, RSA's PKCS#1 key in
    PKCS#8) in hex and base64 of either alphabet, padded or not, URL-quoted."""
    key = _private_key(kind)
    pem = key.private_bytes(serialization.Encoding.PEM, fmt, _NO_ENCRYPTION).decode()
    der = key.private_bytes(_DER, fmt, _NO_ENCRYPTION)
    r = Redactor(detectors=False, extra_values=[pem])
    lines = [ln for ln in pem.splitlines() if not ln.startswith("-----")]
    body = "".join(lines)
    shown = {"pem": pem, "pem stripped": pem.strip(), "body": body,
             "body URL-quoted": quote(body, safe=""), "der hex": der.hex(),
             "DER HEX": der.hex().upper()}
    shown |= {f"body line {i}": ln for i, ln in enumerate(lines)}
    for name, raw in _inner_bytes(kind, fmt).items():
        shown |= {f"{name} {form_name}": form for form_name, form in _byte_forms(raw).items()}
    for name, form in shown.items():
        assert _redacted(r, form), name
        out = r.redact_text(json.dumps({"stdout": form}))
        assert form not in out and REGISTERED in out, name


def _public_forms(kind: str) -> dict[str, str]:
    public = _private_key(kind).public_key()
    spki = public.public_bytes(_DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    forms = {"spki hex": spki.hex(), "SPKI HEX": spki.hex().upper()}
    if isinstance(public, ec.EllipticCurvePublicKey):
        point = public.public_bytes(serialization.Encoding.X962,
                                    serialization.PublicFormat.UncompressedPoint)
        forms["point hex"] = point.hex()
    elif isinstance(public, rsa.RSAPublicKey):
        pkcs1 = public.public_bytes(_DER, serialization.PublicFormat.PKCS1)
        forms["pkcs1 hex"] = pkcs1.hex()
        forms["modulus hex"] = f"{public.public_numbers().n:x}"
    else:
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        forms["raw hex"] = raw.hex()
    return forms


@pytest.mark.parametrize(("kind", "fmt"), KEYS)
def test_the_public_half_of_a_registered_private_key_stays_readable(
    kind: str, fmt: serialization.PrivateFormat
) -> None:
    """Only OCTET STRINGs are taken for key bytes: the public key (in a BIT STRING, or RSA's
    modulus in an INTEGER) and the algorithm's identifiers are not secrets and are printed to
    be shared. (In base64 they may share a PEM line with the private key: an EC key's last
    line in SEC 1 is its public point, and it is redacted wherever it is printed.)"""
    key = _private_key(kind)
    pem = key.private_bytes(serialization.Encoding.PEM, fmt, _NO_ENCRYPTION).decode()
    r = Redactor(detectors=False, extra_values=[pem])
    for name, form in _public_forms(kind).items():
        text = f"public key: {form}\n"
        assert r.redact_text(text) == text, name


# -- DER read by hand -----------------------------------------------------------------------


@pytest.mark.parametrize("width", [1, 2, 3])
def test_a_key_is_found_whatever_the_width_of_its_long_form_length(width: int) -> None:
    """DER writes a length of 128 or more in 1 to 3 bytes after 0x8N; a key whose OCTET STRING
    or enclosing SEQUENCE is written so is found, first in its structure or after other
    elements (as in an RSA key)."""
    alone = _tlv(0x04, KEY, width)
    assert _redacted_forms(_holding(alone), KEY) == ALL_FORMS
    filler = _tlv(0x02, _bytes("filler", 100), width)
    after = _tlv(0x30, _tlv(0x02, b"\x00") + filler + _tlv(0x04, KEY, width), width)
    assert _redacted_forms(_holding(after), KEY) == ALL_FORMS


@pytest.mark.parametrize(
    "der",
    [
        # an indefinite length (BER's 0x80, with end-of-contents): not DER
        b"\x30\x80" + _tlv(0x04, KEY) + b"\x00\x00",
        # a length in 4 bytes
        b"\x30\x84" + (34).to_bytes(4, "big") + _tlv(0x04, KEY),
        # the same length, its content only a key
        b"\x04\x84" + (32).to_bytes(4, "big") + KEY,
    ],
    ids=["indefinite", "four-byte-sequence", "four-byte-octets"],
)
def test_a_length_of_no_width_or_of_four_bytes_ends_the_reading(der: bytes) -> None:
    """Lengths DER does not use for a key stop the reading of the structure there: nothing
    after them is taken for key bytes, and registering the PEM does not raise."""
    r = _holding(der)
    assert _redacted_forms(r, KEY) == set()
    assert _redacted(r, der.hex())


@pytest.mark.parametrize(
    "tail",
    [
        b"\x30",  # one byte: a tag without its length
        b"\x04\x82\x01",  # a two-byte length cut after its first byte
        b"\x04\x20" + _bytes("cut", 20),  # 32 bytes announced, 20 there
        b"\x04\x82\x01\x00" + _bytes("cut", 32),  # 256 announced in the long form, 32 there
        b"\x30\x40" + _tlv(0x04, _bytes("cut", 32)),  # a SEQUENCE of 64 bytes holding 34
        b"\x30\x00\x04\x00",  # empty elements
        b"\x30\x03\x04\x01",  # a SEQUENCE whose OCTET STRING runs past its end
    ],
    ids=["tag-only", "length-cut", "content-cut", "long-content-cut", "sequence-cut", "empty",
         "inner-cut"],
)
def test_der_cut_short_is_read_up_to_the_cut_without_raising(tail: bytes) -> None:
    """A key file cut short (or followed by junk): registering it does not raise, the key
    before the cut is found, and the bytes of an element that runs past the end are not
    taken for a key."""
    der = _tlv(0x30, _tlv(0x04, KEY)) + tail
    r = _holding(der)
    assert _redacted_forms(r, KEY) == ALL_FORMS
    assert _redacted_forms(r, _bytes("cut", 20)) == set()
    assert _redacted_forms(r, _bytes("cut", 32)) == set()


@pytest.mark.parametrize("container", [0x30, 0x31, 0xA0, 0x04], ids=["sequence", "set", "[0]",
                                                                     "octet-string"])
def test_a_key_nested_three_levels_deep_is_found_and_one_four_deep_is_not(
    container: int,
) -> None:
    """The reading goes three elements deep (PKCS#8 holding SEC 1 puts an EC scalar there);
    deeper, a structure is not read, so nesting cannot make registering slow."""
    der = _tlv(0x04, KEY)
    for _ in range(3):
        der = _tlv(container, der)
    assert _redacted_forms(_holding(der), KEY) == ALL_FORMS
    assert _redacted_forms(_holding(_tlv(container, der)), KEY) == set()


@pytest.mark.parametrize("tag", [0x02, 0x03, 0x05, 0x81], ids=["integer", "bit-string", "null",
                                                               "[1]-primitive"])
def test_bytes_inside_an_element_that_is_neither_octets_nor_constructed_are_no_key(
    tag: int,
) -> None:
    """An INTEGER, a BIT STRING (where a public key sits) or a primitive [1] (RFC 5958's
    public key) is not read into, even when its bytes look like an OCTET STRING."""
    der = _tlv(0x30, _tlv(0x02, b"\x01") + _tlv(tag, _tlv(0x04, KEY)))
    r = _holding(der)
    assert _redacted_forms(r, KEY) == set()
    assert _redacted(r, der.hex())


def test_an_octet_string_of_sixteen_bytes_is_a_key_and_one_of_fifteen_is_not() -> None:
    """16 bytes is the shortest key: shorter contents are too likely to be ordinary values."""
    short, exact = _bytes("fifteen", 15), _bytes("sixteen", 16)
    r = _holding(_tlv(0x30, _tlv(0x04, short) + _tlv(0x04, exact)))
    assert _redacted_forms(r, exact) == ALL_FORMS
    assert _redacted_forms(r, short) == set()


@pytest.mark.parametrize(("size", "last_line"), [(60, 16), (57, 12)])
def test_a_pem_line_of_sixteen_characters_is_redacted_alone_and_a_shorter_one_is_not(
    size: int, last_line: int
) -> None:
    """Each line of a PEM body is redacted on its own (a program may print one), from 16
    characters: a shorter last line is too likely to be ordinary text."""
    der = _tlv(0x30, _tlv(0x04, _bytes("pem", size - 4)))
    pem = _pem(der)
    first, last = [ln for ln in pem.splitlines() if not ln.startswith("-----")]
    assert (len(first), len(last)) == (64, last_line)
    r = Redactor(detectors=False, extra_values=[pem])
    assert _redacted(r, first)
    assert _redacted(r, last) is (last_line >= 16)


@pytest.mark.parametrize(("n", "found"), [(15, False), (16, True), (17, True)])
@pytest.mark.parametrize("encode", [bytes.hex, lambda b: base64.b64encode(b).decode()],
                         ids=["hex", "base64"])
def test_a_hex_or_base64_value_of_sixteen_bytes_or_more_is_registered_in_its_other_forms(
    n: int, found: bool, encode: object
) -> None:
    """A registered hex or base64 value of 16 bytes or more is a key: its bytes' other forms
    are redacted too. A shorter one is more likely a word that happens to be hex or base64:
    only its own forms are."""
    raw = _bytes(f"value-{n}", n)
    value = encode(raw)  # type: ignore[operator]
    r = Redactor(detectors=False, extra_values=[value + "\n"])
    assert _redacted(r, value)
    expected = set(_byte_forms(raw)) if found else {
        name for name, form in _byte_forms(raw).items() if form in (value, quote(value, safe=""))}
    assert _redacted_forms(r, raw) == expected


def test_a_secret_read_from_a_file_is_redacted_with_and_without_its_newline() -> None:
    """A password read from a file keeps its newline; its uses drop it. Both are redacted,
    raw and encoded."""
    secret = "correct horse battery staple"
    r = Redactor(detectors=False, extra_values=[secret + "\n"])
    for value in (secret, secret + "\n"):
        raw = value.encode()
        for form in (value, quote(value, safe=""), json.dumps(value)[1:-1],
                     base64.b64encode(raw).decode(), raw.hex()):
            out = r.redact_text(f"<{form}>")
            assert out == f"<{REGISTERED}>", (value, form, out)


def test_the_shortest_secret_accepted_is_redacted() -> None:
    """A secret of 4 characters (the least ``register_value`` accepts) is redacted, raw and
    URL-quoted."""
    r = Redactor(detectors=False, extra_values=["Zq9!"])
    assert r.redact_text("pin Zq9! end") == f"pin {REGISTERED} end"
    assert r.redact_text("pin=Zq9%21&x=1") == f"pin={REGISTERED}&x=1"


class _Field(enum.StrEnum):
    UNSET = ""
    HIDDEN = "[REDACTED:secret_field]"


def test_an_empty_or_already_redacted_value_under_a_secret_name_is_kept_whatever_its_str_type(
) -> None:
    """An empty password (or one redacted before) holds no secret: it is kept as it is, also
    when it is a ``str`` subclass (a ``StrEnum`` member), so the reader sees it was empty."""
    r = Redactor()
    for value in ("", _Field.UNSET, "[REDACTED:secret_field]", _Field.HIDDEN, None, False):
        data = {"password": value}
        out, n = r.redact(data)
        assert (out, n) == (data, 0), value
        assert out["password"] is value
    assert r.redact({"password": "x"}) == ({"password": marker("secret_field")}, 1)


def test_an_exception_message_is_shown_up_to_500_characters() -> None:
    r = Redactor()
    whole = "m" * 500
    assert r.redact_exception(ValueError(whole)) == f"ValueError: {whole}"
    cut = r.redact_exception(ValueError("m" * 501))
    assert len(cut) == len("ValueError: ") + 500
    assert cut.startswith("ValueError: mmm") and "of 501 chars shown" in cut


@pytest.mark.parametrize(("kind", "registered", "printed"), [
    pytest.param("rsa", _PKCS8, _TRADITIONAL, id="rsa-pkcs8-as-pkcs1"),
    pytest.param("rsa", _TRADITIONAL, _PKCS8, id="rsa-pkcs1-as-pkcs8"),
    pytest.param("ec", _PKCS8, _TRADITIONAL, id="ec-pkcs8-as-sec1"),
    pytest.param("ec", _TRADITIONAL, _PKCS8, id="ec-sec1-as-pkcs8"),
])
def test_a_registered_private_key_converted_to_its_other_pem_format_is_redacted(
    kind: str, registered: serialization.PrivateFormat, printed: serialization.PrivateFormat
) -> None:
    """``openssl pkey -traditional`` (or ``openssl pkey`` of a traditional key) prints the same
    key in the other format: its PEM, body, each line and DER in hex are redacted too."""
    key = _private_key(kind)
    pem = key.private_bytes(serialization.Encoding.PEM, registered, _NO_ENCRYPTION).decode()
    other = key.private_bytes(serialization.Encoding.PEM, printed, _NO_ENCRYPTION).decode()
    der = key.private_bytes(_DER, printed, _NO_ENCRYPTION)
    r = Redactor(detectors=False, extra_values=[pem])
    lines = [ln for ln in other.splitlines() if not ln.startswith("-----")]
    shown = {"body": "".join(lines), "der hex": der.hex()}
    shown |= {f"body line {i}": ln for i, ln in enumerate(lines) if len(ln) >= 16}
    for name, form in shown.items():
        assert _redacted(r, form), name
    out = r.redact_text(other)  # the BEGIN and END lines stay, each line of the body goes
    assert out.splitlines()[0] == other.splitlines()[0]
    assert [ln for ln in lines if len(ln) >= 16 and ln in out] == []


@pytest.mark.parametrize("printed", [_PKCS8, _TRADITIONAL], ids=["pkcs8", "traditional"])
def test_a_registered_key_printed_by_base64_at_76_columns_is_redacted_line_by_line(
    printed: serialization.PrivateFormat, tmp_path: Path
) -> None:
    """``base64 key.der`` (coreutils) wraps at 76 columns, not PEM's 64: each of its lines is a
    piece of the key a log may show alone."""
    key = _private_key("rsa")
    pem = key.private_bytes(serialization.Encoding.PEM, _PKCS8, _NO_ENCRYPTION).decode()
    (tmp_path / "key.der").write_bytes(key.private_bytes(_DER, printed, _NO_ENCRYPTION))
    shown = subprocess.run(["base64", str(tmp_path / "key.der")], capture_output=True,
                           text=True, check=True).stdout
    lines = shown.splitlines()
    assert len(lines[0]) == 76
    r = Redactor(detectors=False, extra_values=[pem])
    out = r.redact_text(shown)
    assert [ln for ln in lines if len(ln) >= 16 and ln in out] == []
    for ln in lines[:-1]:  # each alone too
        assert _redacted(r, ln)


def _encrypted_pem() -> str:
    encryption = serialization.BestAvailableEncryption(b"passphrase")
    return _private_key("ec").private_bytes(serialization.Encoding.PEM, _PKCS8,
                                            encryption).decode()


def _pkcs8(oid: str) -> bytes:
    algorithm = _tlv(0x30, _tlv(0x06, bytes.fromhex(oid)))
    return _tlv(0x30, _tlv(0x02, b"\x00") + algorithm + _tlv(0x04, _tlv(0x04, KEY)))


@pytest.mark.parametrize(
    "pem",
    [
        _pem(_tlv(0x30, _tlv(0x02, b"\x00") + _tlv(0x04, KEY))),  # DER, but no key
        _pem(_tlv(0x30, _tlv(0x04, KEY)), "CERTIFICATE"),
        _pem(_pkcs8("2b0601040182370a0305")),  # an algorithm cryptography does not know
        _pem(_pkcs8("2b6571")),  # Ed448 (57 bytes) holding 32 bytes
        "encrypted",
    ],
    ids=["no-key", "certificate", "unknown-algorithm", "short-ed448", "encrypted"],
)
def test_a_pem_block_that_is_no_readable_private_key_is_registered_as_it_is(pem: str) -> None:
    """A block no conversion reads (no key, not a private key, an unknown algorithm, a
    malformed key, encrypted) registers without raising, in its own forms and with the key
    bytes its DER holds."""
    pem = _encrypted_pem() if pem == "encrypted" else pem
    r = Redactor(detectors=False, extra_values=[pem])
    lines = [ln for ln in pem.splitlines() if not ln.startswith("-----")]
    for form in [pem, "".join(lines), *lines[:-1]]:
        assert _redacted(r, form), form
    if "ENCRYPTED" not in pem:
        assert _redacted_forms(r, KEY) == ALL_FORMS


def test_a_key_with_no_format_of_its_own_is_registered_as_pkcs8() -> None:
    """X25519 (like Ed25519 and DH) is written only as PKCS#8: its key bytes are found."""
    key = x25519.X25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, _PKCS8, _NO_ENCRYPTION).decode()
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            _NO_ENCRYPTION)
    r = Redactor(detectors=False, extra_values=[pem])
    assert _redacted_forms(r, raw) == ALL_FORMS
