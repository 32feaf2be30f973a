"""Fake secrets ("canaries") of many kinds, their encodings, and a search of raw sink bytes.

A canary is a made-up credential in its real format, unique per instance. ``text`` is what is
placed (the secret in its usual context: a header, a connection string, an assignment);
``secret`` is what must never reach a sink; ``core`` is its random part (the fixed prefix of a
format, such as ``AKIA``, is public knowledge and not searched for).

**Found** means: some sink's raw bytes contain at least 24 consecutive characters of a
canary's core in any of these forms: as is, JSON-escaped (once or twice), percent-encoded, or
base64 (standard or URL-safe, at each of the three alignments a secret can have inside a
larger base64 text). The search slides a 16-character window with stride 8 over each form, so
any leaked run of 24 or more characters is caught whatever surrounds it; a core shorter than 24
characters is searched for whole.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
URLSAFE = ALNUM + "_-"
B64 = ALNUM + "+/"
HEX = "0123456789abcdef"

WINDOW = 16
STRIDE = 8


@dataclass(frozen=True, slots=True)
class Canary:
    """One fake secret: its kind, the text placed, the secret and its random core."""

    kind: str
    text: str
    secret: str
    core: str
    registered: bool = False


def _r(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _pem(rng: random.Random, label: str) -> tuple[str, str, str]:
    lines = [_r(rng, B64, 64) for _ in range(6)]
    body = "\n".join(lines)
    text = f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n"
    return text, text.strip(), body


def _jwt(rng: random.Random) -> tuple[str, str, str]:
    payload = json.dumps({"sub": _r(rng, ALNUM, 24), "iat": rng.randint(1, 2**31)})
    p = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
    sig = _r(rng, URLSAFE, 43)
    tok = f"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.{p}.{sig}"
    return tok, tok, f"{p}.{sig}"


# kind -> maker(rng) -> (text placed, secret, random core)
Maker = Callable[[random.Random], tuple[str, str, str]]


def _simple(prefix: str, alphabet: str, n: int, context: str = "{s}") -> Maker:
    def make(rng: random.Random) -> tuple[str, str, str]:
        core = _r(rng, alphabet, n)
        secret = prefix + core
        return context.format(s=secret), secret, core

    return make


def _aws_secret(rng: random.Random) -> tuple[str, str, str]:
    core = _r(rng, ALNUM + "/+", 38) + rng.choice("ABCDEF") + rng.choice("0123456789")
    return f"aws_secret_access_key = {core}", core, core


def _gcp_service_account(rng: random.Random) -> tuple[str, str, str]:
    pem, _secret, body = _pem(rng, "PRIVATE KEY")
    doc = {
        "type": "service_account",
        "project_id": "demo-project",
        "private_key_id": _r(rng, HEX, 40),
        "private_key": pem,
        "client_email": "bot@demo-project.iam.gserviceaccount.com",
    }
    text = json.dumps(doc)
    return text, body, body


def _azure_storage(rng: random.Random) -> tuple[str, str, str]:
    core = _r(rng, B64, 86) + "=="
    text = (
        "DefaultEndpointsProtocol=https;AccountName=demoacct;"
        f"AccountKey={core};EndpointSuffix=core.windows.net"
    )
    return text, core, core[:86]


def _azure_client_secret(rng: random.Random) -> tuple[str, str, str]:
    core = _r(rng, ALNUM, 3) + rng.choice(string.digits) + "Q~" + _r(rng, ALNUM + "_~.-", 34)
    return f"client secret {core} for the app", core, core


def _slack_webhook(rng: random.Random) -> tuple[str, str, str]:
    core = f"T{_r(rng, UPPER_DIGITS, 10)}/B{_r(rng, UPPER_DIGITS, 10)}/{_r(rng, ALNUM, 24)}"
    return f"https://hooks.slack.com/services/{core}", core, core


def _url_password(rng: random.Random) -> tuple[str, str, str]:
    core = _r(rng, ALNUM, 12) + rng.choice("!*-_.") + _r(rng, ALNUM, 11)
    return f"postgres://app_user:{core}@db.internal.example:5432/app", core, core


def _bearer(rng: random.Random) -> tuple[str, str, str]:
    core = _r(rng, URLSAFE, 40)
    return f"Authorization: Bearer {core}", core, core


def _basic(rng: random.Random) -> tuple[str, str, str]:
    pw = _r(rng, ALNUM, 20)
    token = base64.b64encode(f"svc:{pw}".encode()).decode()
    return f"Authorization: Basic {token}", token, token


def _generic_assignment(rng: random.Random) -> tuple[str, str, str]:
    core = _r(rng, ALNUM, 32)
    name = rng.choice(["api_key", "client_secret", "DB_PASSWORD", "signing_key", "auth_token"])
    style = rng.choice(['{n} = "{v}"', "{n}={v}", '"{n}": "{v}"', "{n}: {v}"])
    return style.format(n=name, v=core), core, core


def _b64_after_slash(rng: random.Random) -> tuple[str, str, str]:
    # A base64 blob as a path segment: the "/" before it is a base64 character too. The blob
    # is what is placed, so it is the core (the search finds it raw and encoded once more).
    token = "ghp_" + _r(rng, ALNUM, 36)
    plain = rng.choice(["{s}", "token={s}", '{{"token": "{s}"}}']).format(s=token)
    enc = rng.choice([base64.b64encode, base64.urlsafe_b64encode])(plain.encode()).decode()
    if rng.random() < 0.5:
        enc = enc.rstrip("=")
    place = rng.choice([
        "https://example.com/cb/{b}", "https://example.com/cb/{b}/done?x=1", "/tmp/uploads/{b}",
        "s3://bucket/state/{b}", "open state_{b} now",
    ])
    return place.format(b=enc), token, enc.rstrip("=")


def _mapping_key(rng: random.Random) -> tuple[str, str, str]:
    # Placed as a mapping key too (see test_canaries): a key that names a secret and holds one.
    core = _r(rng, ALNUM + "/+", 38) + rng.choice("ABCDEF") + rng.choice("0123456789")
    name = rng.choice(["aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", "password", "api_key"])
    style = rng.choice(["{n} = {v}", "{n}={v}", "{n}: {v}"])
    return style.format(n=name, v=core), core, core


def _sigil_password(rng: random.Random) -> tuple[str, str, str]:
    # A password that starts with the sigil of a template (%PASSWORD%, #{pw}) without being one,
    # raw or percent-encoded as in a URL or a form body. The core leaves the sigil out ("#"
    # ends a run of the search); a leak of the rest is a leak of the password.
    core = _r(rng, ALNUM, 12) + rng.choice("-_.~") + _r(rng, ALNUM, 13)
    pw = rng.choice("%#") + core
    style = rng.choice([
        "password: {v}", '{{"password": "{v}"}}', "DB_PASSWORD={v}", "password={q}",
        "https://example.com/login?user=bob&password={q}", 'secret = "{v}"',
    ])
    return style.format(v=pw, q=quote(pw, safe="")), pw, core


def _aws_secret_urlencoded(rng: random.Random) -> tuple[str, str, str]:
    core = _r(rng, ALNUM, 37) + rng.choice("ABCDEF") + rng.choice("0123456789")
    secret = rng.choice("/+") + core
    return f"aws_secret_access_key = {quote(secret, safe='')}", secret, core


def _bearer_no_digit(rng: random.Random) -> tuple[str, str, str]:
    core = _r(rng, string.ascii_letters + "-_.~", 40)
    return f"use Bearer {core} now", core, core


def _key_with_suffix(rng: random.Random) -> tuple[str, str, str]:
    core = _r(rng, ALNUM, 32)
    return f"api_key={core}{rng.choice(['.txt', '.json', '.pem'])}", core, core


# A generated password (letters and digits, 12 to 40 of them) after a name that says what it
# is. About one in a hundred such passwords splits into capitalised pieces that once read as a
# type name (NBBZonZO40Vwm02MkmTO after "password:").
PASSWORD_LENGTHS = (12, 40)
PASSWORD_STYLES = (
    "note password: {v} end", "password: {v}", "password={v}", '"password": "{v}"',
    "password = {v}",
)


def random_password(rng: random.Random) -> str:
    """A password as a generator makes it: letters and digits, 12 to 40 of them."""
    return _r(rng, ALNUM, rng.randint(*PASSWORD_LENGTHS))


def _password(rng: random.Random) -> tuple[str, str, str]:
    core = random_password(rng)
    return rng.choice(PASSWORD_STYLES).format(v=core), core, core


def _registered(rng: random.Random) -> tuple[str, str, str]:
    core = "op-" + _r(rng, ALNUM, 28)
    return f"the deploy passphrase is {core} (rotate monthly)", core, core[3:]


KINDS: dict[str, Maker] = {
    "aws_access_key": _simple("AKIA", UPPER_DIGITS, 16, "aws_access_key_id {s}"),
    "aws_secret_key": _aws_secret,
    "gcp_service_account": _gcp_service_account,
    "gcp_api_key": _simple("AIza", URLSAFE, 35),
    "azure_storage_key": _azure_storage,
    "azure_client_secret": _azure_client_secret,
    "github_token": _simple("ghp_", ALNUM, 36),
    "github_pat": _simple("github_pat_", ALNUM, 22),
    "gitlab_token": _simple("glpat-", URLSAFE, 20),
    "slack_token": _simple("xoxb-", string.digits, 12),
    "slack_webhook": _slack_webhook,
    "stripe_key": _simple("sk_live_", ALNUM, 24),
    "openai_key": _simple("sk-proj-", ALNUM, 48),
    "anthropic_key": _simple("sk-ant-api03-", URLSAFE, 80),
    "npm_token": _simple("npm_", ALNUM, 36),
    "huggingface_token": _simple("hf_", ALNUM, 34),
    "sendgrid_key": _simple("SG.", URLSAFE, 22),
    "jwt": _jwt,
    "pem_rsa": lambda rng: _pem(rng, "RSA PRIVATE KEY"),
    "pem_openssh": lambda rng: _pem(rng, "OPENSSH PRIVATE KEY"),
    "pem_ec": lambda rng: _pem(rng, "EC PRIVATE KEY"),
    "url_password": _url_password,
    "bearer_header": _bearer,
    "basic_header": _basic,
    "generic_assignment": _generic_assignment,
    "registered": _registered,
    "b64_after_slash": _b64_after_slash,
    "mapping_key": _mapping_key,
    "sigil_password": _sigil_password,
    "aws_secret_urlencoded": _aws_secret_urlencoded,
    "bearer_no_digit": _bearer_no_digit,
    "key_with_suffix": _key_with_suffix,
    "password": _password,
}


def _fix_compound(kind: str, rng: random.Random, text: str, secret: str, core: str) -> Canary:
    # A few formats have a second random part after the prefix-and-core; add it here so the
    # table above stays one line per kind.
    if kind == "github_pat":
        tail = _r(rng, ALNUM, 59)
        secret = secret + tail
        text, core = secret, core + "_" + tail
    elif kind == "slack_token":
        tail = _r(rng, ALNUM, 24)
        secret = secret + "-" + tail
        text, core = secret, core + "-" + tail
    elif kind == "sendgrid_key":
        tail = _r(rng, URLSAFE, 43)
        secret = secret + "." + tail
        text, core = f"SENDGRID {secret}", core + "." + tail
    return Canary(kind, text, secret, core, registered=kind == "registered")


def make_canaries(n: int, seed: int) -> list[Canary]:
    """``n`` canaries cycling through every kind (unique random values)."""
    rng = random.Random(seed)
    kinds = sorted(KINDS)
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        text, secret, core = KINDS[kind](rng)
        out.append(_fix_compound(kind, rng, text, secret, core))
    return out


# -- encodings ---------------------------------------------------------------------------------

ENCODINGS: dict[str, Callable[[str], str]] = {
    "raw": lambda s: s,
    "base64": lambda s: base64.b64encode(s.encode()).decode(),
    "url": lambda s: quote(s, safe=""),
    "json": lambda s: json.dumps(s)[1:-1],
}


def _json_escaped(s: str) -> str:
    return json.dumps(s)[1:-1]


def _b64_alignments(core: str) -> list[str]:
    """Base64 text that any base64 holding ``core`` contains, at each alignment."""
    raw = core.encode()
    out = []
    for shift in range(3):
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            text = enc(b"\x00" * shift + raw).decode().rstrip("=")
            # Drop the characters mixed with the unknown neighbours on either side.
            lead = (shift * 8 + 5) // 6
            out.append(text[lead:-2])
    return out


def forms(core: str) -> list[str]:
    """Every form in which a leaked core is recognised."""
    base = [core, _json_escaped(core), _json_escaped(_json_escaped(core))]
    base += [quote(core, safe=""), quote(core), quote_plus(core)]
    base += _b64_alignments(core)
    # A multi-line core (a PEM body) may reach a sink line by line.
    if "\n" in core:
        base += [ln for ln in core.split("\n") if len(ln) >= WINDOW]
    return [f for f in dict.fromkeys(base) if f]


def windows(form: str) -> list[str]:
    """16-character windows at stride 8 (plus the last one): a 24-char leak contains one."""
    if len(form) <= 24:
        return [form]
    out = [form[i : i + WINDOW] for i in range(0, len(form) - WINDOW + 1, STRIDE)]
    out.append(form[-WINDOW:])
    return out


# Characters of every form above: a leaked run is a substring of a run of these, at least as
# long as the shortest core (a generated password of 12).
_RUN = re.compile(rb"[A-Za-z0-9+/=_\-.~%\\!*]{12,}")
_HEXISH = re.compile(rb"[0-9a-f\-]+")


class Finder:
    """Search raw bytes for any canary, in any recognised form (see the module docstring)."""

    def __init__(self, canaries: Iterable[Canary]) -> None:
        self.by_window: dict[bytes, Canary] = {}
        self.short: dict[bytes, Canary] = {}
        for c in canaries:
            for f in forms(c.core):
                for w in windows(f):
                    b = w.encode()
                    if len(b) == WINDOW:
                        self.by_window[b] = c
                    else:
                        self.short[b] = c
        self._short_lens = sorted({len(b) for b in self.short})

    def find(self, data: bytes) -> list[tuple[Canary, int]]:
        """Canaries found in ``data`` with the offset of the first hit of each.

        Runs are collected and de-duplicated by the regex engine first; runs of lowercase hex
        and dashes (ids, digests: no canary form is one) are not windowed.
        """
        hits: dict[str, tuple[Canary, int]] = {}
        win = self.by_window
        short = self.short
        lens = self._short_lens
        for run in set(_RUN.findall(data)):
            if _HEXISH.fullmatch(run):
                continue
            n = len(run)
            for i in range(n):
                c = win.get(run[i : i + WINDOW]) if i + WINDOW <= n else None
                if c is not None and c.core not in hits:
                    hits[c.core] = (c, data.find(run))
                for ln in lens:
                    if ln > n - i:
                        break
                    c = short.get(run[i : i + ln])
                    if c is not None and c.core not in hits:
                        hits[c.core] = (c, data.find(run))
        return list(hits.values())
