"""The edges of each credential detector: prefixes, shortest and longest tokens, lookalikes,
the checks that veto a benign match, overlapping finds and long text."""

from __future__ import annotations

import base64
import random
import string

import pytest

from tooltrace.redaction import Redactor, _detectors, marker

_rng = random.Random(20261206)

UPPER_DIGITS = string.ascii_uppercase + string.digits
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "_-"
HEX = "0123456789abcdef"


def _rand(alphabet: str, n: int) -> str:
    # Every class of the alphabet appears, so a token is as mixed as a real one.
    while True:
        s = "".join(_rng.choice(alphabet) for _ in range(n))
        if all(
            any(c in s for c in cls) or not any(c in alphabet for c in cls)
            for cls in (string.ascii_lowercase, string.ascii_uppercase, string.digits)
        ):
            return s


def _redact(text: str) -> str:
    return Redactor().redact_text(text)


def _pem(label: str, lines: int = 3, end: bool = True) -> str:
    body = "\n".join(_rand(ALNUM + "+/", 64) for _ in range(lines))
    block = f"-----BEGIN {label}-----\n{body}\n"
    return block + f"-----END {label}-----" if end else block


# -- prefixes -----------------------------------------------------------------------------------

_AWS = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "AROA", "APKA")
_GITLAB = ("glpat-", "gldt-", "glrt-", "glcbt-", "glptt-", "glft-", "glimt-", "gloas-", "glsoat-")

PREFIXED: list[tuple[str, str]] = [
    *[("aws_access_key", p + _rand(UPPER_DIGITS, 16)) for p in _AWS],
    *[("github_token", p + _rand(ALNUM, 36)) for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")],
    ("github_token", "github_pat_11" + _rand(ALNUM, 20) + "_" + _rand(ALNUM, 59)),
    *[("gitlab_token", p + _rand(URLSAFE, 20)) for p in _GITLAB],
    *[("slack_token", f"xox{c}-" + _rand(ALNUM, 10)) for c in "abposre"],
    ("slack_token", "xapp-1-A0" + _rand(UPPER_DIGITS, 9) + "-" + _rand(ALNUM, 20)),
    *[
        ("stripe_key", f"{p}_{mode}_" + _rand(ALNUM, 16))
        for p in ("sk", "rk", "pk")
        for mode in ("live", "test")
    ],
    ("stripe_key", "whsec_" + _rand(ALNUM, 24)),
    *[
        ("openai_key", "sk-" + infix + _rand(ALNUM, 20))
        for infix in ("", "proj-", "svcacct-", "admin-", "None-")
    ],
    ("anthropic_key", "sk-ant-api03-" + _rand(URLSAFE, 20)),
    ("anthropic_key", "sk-ant-admin01-" + _rand(URLSAFE, 20)),
    ("gcp_api_key", "AIza" + _rand(URLSAFE, 35)),
    ("gcp_oauth_token", "ya29." + _rand(URLSAFE, 20)),
    ("gcp_client_secret", "GOCSPX-" + _rand(URLSAFE, 20)),
    ("twilio_key", "SK" + _rand(HEX, 32)),
    ("sendgrid_key", "SG." + _rand(URLSAFE, 16) + "." + _rand(URLSAFE, 16)),
    ("npm_token", "npm_" + _rand(ALNUM, 36)),
    ("pypi_token", "pypi-AgEIcHlwaS5vcmc" + _rand(URLSAFE, 35)),
    ("huggingface_token", "hf_" + _rand(ALNUM, 30)),
    ("azure_client_secret", _rand(ALNUM, 3) + "7Q~" + _rand(ALNUM + "_~.-", 31)),
    (
        "jwt",
        "eyJ" + _rand(URLSAFE, 8) + ".eyJ" + _rand(URLSAFE, 8) + "." + _rand(URLSAFE, 43),
    ),
    ("jwt", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."),  # unsigned: no third part
]


@pytest.mark.parametrize(("kind", "token"), PREFIXED, ids=[t[:12] for _k, t in PREFIXED])
def test_every_prefix_of_a_format_is_redacted_whole(kind: str, token: str) -> None:
    assert _redact(f"got {token} here") == f"got {marker(kind)} here"


@pytest.mark.parametrize(("kind", "token"), PREFIXED, ids=[t[:12] for _k, t in PREFIXED])
def test_a_token_glued_to_a_file_name_by_underscore_or_dash_is_redacted(
    kind: str, token: str
) -> None:
    assert _redact(f"backup_{token}.txt") == f"backup_{marker(kind)}.txt"
    assert _redact(f"notes-{token}") == f"notes-{marker(kind)}"


_GLUED = [(k, t) for k, t in PREFIXED if k != "azure_client_secret"]


@pytest.mark.parametrize(("kind", "token"), _GLUED, ids=[t[:12] for _k, t in _GLUED])
def test_a_prefix_inside_a_longer_word_is_no_token(kind: str, token: str) -> None:
    for text in (f"x{token}", f"9{token}"):
        assert marker(kind) not in _redact(text), text


_KEY86 = _rand(ALNUM + "+/", 86)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"AccountKey={_KEY86}==;x", f"AccountKey={marker('azure_key')};x"),
        (f"SharedAccessKey={_KEY86}=", f"SharedAccessKey={marker('azure_key')}"),
        (f"sharedaccesssignature={_KEY86}%3D", f"sharedaccesssignature={marker('azure_key')}"),
        (f"https://a.blob/c?sig={_KEY86}", f"https://a.blob/c?sig={marker('azure_key')}"),
        (
            f"https://a.blob/c?sv=1&sig={_KEY86}&x=1",
            f"https://a.blob/c?sv=1&sig={marker('azure_key')}&x=1",
        ),
        (f"Endpoint=x;sig={_KEY86}", f"Endpoint=x;sig={marker('azure_key')}"),
        *[
            (
                f"https://hooks.slack.com/{kind}/T0ABCDEF/B0GHIJKL/{_rand(ALNUM, 24)}",
                f"https://hooks.slack.com/{kind}/{marker('slack_webhook')}",
            )
            for kind in ("services", "workflows", "triggers")
        ],
    ],
)
def test_a_named_value_is_redacted_and_its_name_kept(text: str, expected: str) -> None:
    assert _redact(text) == expected


@pytest.mark.parametrize(
    "label",
    [
        "PRIVATE KEY",
        "RSA PRIVATE KEY",
        "EC PRIVATE KEY",
        "DSA PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
        "ENCRYPTED PRIVATE KEY",
        "PGP PRIVATE KEY BLOCK",
    ],
)
def test_every_kind_of_private_key_block_is_redacted_whole(label: str) -> None:
    assert _redact(f"key:\n{_pem(label)}\nok") == f"key:\n{marker('private_key')}\nok"


@pytest.mark.parametrize("label", ["PUBLIC KEY", "CERTIFICATE", "RSA PUBLIC KEY"])
def test_public_keys_and_certificates_are_kept(label: str) -> None:
    text = f"cert:\n{_pem(label)}\nok"
    assert _redact(text) == text


# -- lengths ------------------------------------------------------------------------------------

# Tokens long enough for each format's longest; a row cuts the piece it needs.
_UPPER16 = _rand(UPPER_DIGITS, 16)
_URLSAFE40 = _rand(URLSAFE, 40)
_URLSAFE64 = _rand(URLSAFE, 64)
_URLSAFE300 = _rand(URLSAFE, 300)
_ALNUM200 = _rand(ALNUM, 200)
_ALNUM255 = _rand(ALNUM, 255)
_PAT255 = _rand(ALNUM + "_", 255)
_AZURE = _rand(ALNUM, 3) + "5Q~" + _rand(ALNUM + "_~.-", 34)
_HEX32 = _rand(HEX, 32)
_JWT = "eyJ" + _rand(URLSAFE, 8) + ".eyJ" + _rand(URLSAFE, 8) + "."

# (kind, the shortest token taken, the longest (a long one when unbounded), one character too
# short, one too long or None when unbounded)
LENGTHS: list[tuple[str, str, str, str, str | None]] = [
    (
        "aws_access_key",
        "AKIA" + _UPPER16,
        "AKIA" + _UPPER16,
        "AKIA" + _UPPER16[:15],
        "AKIA" + _UPPER16 + "Q",
    ),
    (
        "gcp_api_key",
        "AIza" + _URLSAFE40[:35],
        "AIza" + _URLSAFE40,
        "AIza" + _URLSAFE40[:34],
        "AIza" + _URLSAFE40 + "x",
    ),
    (
        "gcp_oauth_token",
        "ya29." + _URLSAFE300[:20],
        "ya29." + _URLSAFE300,
        "ya29." + _URLSAFE300[:19],
        None,
    ),
    (
        "gcp_client_secret",
        "GOCSPX-" + _URLSAFE300[:20],
        "GOCSPX-" + _URLSAFE300,
        "GOCSPX-" + _URLSAFE300[:19],
        None,
    ),
    ("azure_client_secret", _AZURE[:37], _AZURE, _AZURE[:36], _AZURE + "x"),
    (
        "github_token",
        "ghp_" + _ALNUM255[:36],
        "ghp_" + _ALNUM255,
        "ghp_" + _ALNUM255[:35],
        "ghp_" + _ALNUM255 + "x",
    ),
    (
        "github_token",
        "github_pat_" + _PAT255[:22],
        "github_pat_" + _PAT255,
        "github_pat_" + _PAT255[:21],
        "github_pat_" + _ALNUM255 + "x",
    ),
    (
        "gitlab_token",
        "glpat-" + _URLSAFE300[:20],
        "glpat-" + _URLSAFE300,
        "glpat-" + _URLSAFE300[:19],
        None,
    ),
    ("slack_token", "xoxb-" + _ALNUM200[:10], "xoxb-" + _ALNUM200, "xoxb-" + _ALNUM200[:9], None),
    (
        "slack_token",
        "xapp-1-" + _ALNUM200[:10],
        "xapp-1-" + _ALNUM200,
        "xapp-1-" + _ALNUM200[:9],
        None,
    ),
    (
        "stripe_key",
        "sk_live_" + _ALNUM200[:16],
        "sk_live_" + _ALNUM200,
        "sk_live_" + _ALNUM200[:15],
        None,
    ),
    (
        "stripe_key",
        "whsec_" + _ALNUM200[:24],
        "whsec_" + _ALNUM200,
        "whsec_" + _ALNUM200[:23],
        None,
    ),
    (
        "anthropic_key",
        "sk-ant-" + _ALNUM200[:20],
        "sk-ant-" + _ALNUM200,
        "sk-ant-" + _ALNUM200[:19],
        None,
    ),
    ("openai_key", "sk-" + _ALNUM200[:20], "sk-" + _ALNUM200, "sk-" + _ALNUM200[:19], None),
    (
        "openai_key",
        "sk-proj-" + _ALNUM200[:20],
        "sk-proj-" + _ALNUM200,
        "sk-proj-" + _ALNUM200[:11],
        None,
    ),
    (
        "sendgrid_key",
        "SG." + _URLSAFE64[:16] + "." + _URLSAFE64[:16],
        "SG." + _URLSAFE64[:32] + "." + _URLSAFE64,
        "SG." + _URLSAFE64[:16] + "." + _URLSAFE64[:15],
        None,
    ),
    (
        "npm_token",
        "npm_" + _ALNUM255[:36],
        "npm_" + _ALNUM255[:36],
        "npm_" + _ALNUM255[:35],
        "npm_" + _ALNUM255[:37],
    ),
    (
        "pypi_token",
        "pypi-" + _URLSAFE300[:50],
        "pypi-" + _URLSAFE300,
        "pypi-" + _URLSAFE300[:49],
        None,
    ),
    ("huggingface_token", "hf_" + _ALNUM200[:30], "hf_" + _ALNUM200, "hf_" + _ALNUM200[:29], None),
    ("twilio_key", "SK" + _HEX32, "SK" + _HEX32, "SK" + _HEX32[:31], "SK" + _HEX32 + "a"),
    # A JWT's two first parts have eight characters or more after "eyJ"; the signature may be
    # empty (an unsigned token).
    ("jwt", _JWT, _JWT + _ALNUM200, _JWT[:-2] + ".", None),
]


@pytest.mark.parametrize(
    ("kind", "shortest", "longest", "too_short", "too_long"),
    LENGTHS,
    ids=[f"{row[0]}-{row[1][:6]}" for row in LENGTHS],
)
def test_each_format_takes_tokens_from_its_shortest_to_its_longest(
    kind: str, shortest: str, longest: str, too_short: str, too_long: str | None
) -> None:
    assert _redact(f"id {shortest} end") == f"id {marker(kind)} end"
    assert _redact(f"id {longest} end") == f"id {marker(kind)} end"
    assert marker(kind) not in _redact(f"id {too_short} end")
    if too_long is not None:
        assert marker(kind) not in _redact(f"id {too_long} end")


def test_an_aws_secret_key_is_exactly_forty_characters_after_its_name() -> None:
    secret = _rand(ALNUM + "/+", 40)
    assert _redact(f"AWS_KEY={secret}") == f"AWS_KEY={marker('aws_secret_key')}"
    assert _redact(f'aws-secret: "{secret}"') == f'aws-secret: "{marker("aws_secret_key")}"'
    for other in (secret[:39], secret + "A"):
        assert _redact(f"AWS_KEY={other}") == f"AWS_KEY={other}"


def test_an_aws_secret_key_must_mix_three_kinds_of_character() -> None:
    # Two kinds (letters of both cases) is a word-like value, not a key.
    two = _rand(string.ascii_letters, 40)
    assert _redact(f"AWS_KEY={two}") == f"AWS_KEY={two}"
    three = two[:39] + "7"
    assert _redact(f"AWS_KEY={three}") == f"AWS_KEY={marker('aws_secret_key')}"


def test_an_openai_style_key_must_hold_more_than_lower_case_letters() -> None:
    # "sk-" starts names too (scikit-learn's packages): lower-case letters and dashes only.
    for name in ("sk-learn-model-selection-tools", "sk-abcdefghijklmnopqrstuvwxyz"):
        assert _redact(f"pip show {name}") == f"pip show {name}"
    assert _redact("k sk-abcdefghijklmnopqrst1 z") == f"k {marker('openai_key')} z"
    # A lookalike refused first does not hide a key after it.
    assert _redact("pip show sk-learn-model-selection-tools; k sk-abcdefghijklmnopqrst1") == (
        f"pip show sk-learn-model-selection-tools; k {marker('openai_key')}"
    )
    assert _redact("k sk-abcdefghijklmnopqrsT z") == f"k {marker('openai_key')} z"


def test_a_twilio_key_is_lower_case_hex() -> None:
    upper = "SK" + _rand(HEX, 32).upper()
    assert _redact(f"sid {upper}") == f"sid {upper}"
    token = _rand(HEX, 32)
    assert _redact(f"twilio_secret: {token}") == f"twilio_secret: {marker('twilio_key')}"
    assert _redact(f"TWILIO = '{token}'") == f"TWILIO = '{marker('twilio_key')}'"


def test_a_slack_webhook_path_has_at_least_eight_characters() -> None:
    assert _redact("hooks.slack.com/services/T0ABCDE") == "hooks.slack.com/services/T0ABCDE"
    assert _redact("hooks.slack.com/services/T0ABCDEF") == (
        f"hooks.slack.com/services/{marker('slack_webhook')}"
    )


def test_an_azure_key_is_at_least_twenty_characters() -> None:
    value = _rand(ALNUM, 20)
    assert _redact(f"x?sig={value}") == f"x?sig={marker('azure_key')}"
    assert marker("azure_key") not in _redact(f"x?sig={value[:19]}")


# -- the checks that tell a credential from prose ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Outside a header, sixteen characters with a digit and another kind of character.
        ("the bearer aaaaaaaaaaaaaaa1 here", f"the bearer {marker('authorization')} here"),
        ("the bearer aaaaaaaaaaaaaa1 here", None),
        ("the bearer aaaaaaaaaaaaaa-1 here", f"the bearer {marker('authorization')} here"),
        ("the bearer abc12345 here", None),
        ("the bearer abcdefghijklmnopq here", None),
        ("the bearer aaaaaaaaaaaaaaaaaaaaaa1 here", f"the bearer {marker('authorization')} here"),
        # Mixed case without a digit: twenty characters look machine-made, nineteen do not.
        ("the bearer AbCdEfGhIjKlMnOpQrSt here", f"the bearer {marker('authorization')} here"),
        ("the bearer AbCdEfGhIjKlMnOpQrS here", None),
        # After the header name any token is the credential, unless it is a stand-in or an id.
        ("Authorization: Bearer abcdefghij", f"Authorization: Bearer {marker('authorization')}"),
        ("Authorization: Bearer placeholder", None),
        ("Authorization: Bearer 0123456789abcdef0123456789abcdef01234567", None),
        ("Authorization: Bearer 123456789012", None),
        ("Authorization: Basic abcdefghij", f"Authorization: Basic {marker('authorization')}"),
        # "basic" in prose: only base64 of "user:password" is a credential.
        ("the basic abcdefghij plan", None),
        (
            "use basic " + base64.b64encode(b"user:pass").decode() + " here",
            f"use basic {marker('authorization')} here",
        ),
    ],
)
def test_a_token_after_bearer_or_basic_is_a_credential_in_a_header_or_when_machine_made(
    text: str, expected: str | None
) -> None:
    assert _redact(text) == (text if expected is None else expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Cookie: none", None),
        ('Cookie: "",', None),
        ("Cookie: see", None),
        ("Cookie: session see", None),
        ("Authorization: see the docs", None),
        ("Cookie: a=b", f"Cookie: {marker('cookie')}"),
        ("Cookie: abcdefghijklmnopqrstu", f"Cookie: {marker('cookie')}"),
        ("Cookie: session abc123", f"Cookie: {marker('cookie')}"),
        ("Cookie: session abc123 path", f"Cookie: {marker('cookie')}"),
        ("Authorization: Custom abc123 realm", f"Authorization: {marker('authorization')}"),
        ("Authorization: Digest username=bob", f"Authorization: {marker('authorization')}"),
        ("Authorization: Negotiate abc123", f"Authorization: {marker('authorization')}"),
    ],
)
def test_a_header_value_is_a_credential_unless_it_reads_as_prose_or_a_stand_in(
    text: str, expected: str | None
) -> None:
    assert _redact(text) == (text if expected is None else expected)


@pytest.mark.parametrize(
    "url",
    [
        "postgres://user:${DB_PASSWORD}@db/app",
        "https://user:****@host",
        "https://user:<password>@host",
        "redis://default:%24%7BREDIS_PASSWORD%7D@cache:6379",
    ],
)
def test_a_stand_in_for_the_password_in_a_url_is_kept(url: str) -> None:
    assert _redact(url) == url


# -- overlapping finds and long text ------------------------------------------------------------


_GH = "ghp_" + _rand(ALNUM, 36)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Authorization: Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
            f"Authorization: Bearer {marker('jwt')}",
        ),
        (
            f"git clone https://x:{_GH}@github.com/r",
            f"git clone https://x:{marker('url_password')}@github.com/r",
        ),
        ('token = "Bearer abc123DEF456ghi789JKL"', f'token = "{marker("authorization")}"'),
        ('auth = "Basic dXNlcjpwYXNzd29yZA=="', f'auth = "{marker("authorization")}"'),
        (
            "Authorization: Basic AKIAABCDEFGHIJKLMNOP",
            f"Authorization: Basic {marker('aws_access_key')}",
        ),
        ("Authorization: AKIAABCDEFGHIJKLMNOP", f"Authorization: {marker('aws_access_key')}"),
        (f"Cookie: {_GH}", f"Cookie: {marker('github_token')}"),
        (f'{{"Cookie": "sid={_GH}"}}', f'{{"Cookie": "{marker("github_token")}"}}'),
        ("Cookie: sid=Zx81kLmQ9aa11bb22cc; path=/", f"Cookie: {marker('cookie')}"),
        # JSON-escaped: the key rule's value stops at the backslash, the cookie's does not.
        ('cookie = "sid=Zx81kLmQ9aa11bb22\\x"', f'cookie = "{marker("cookie")}"'),
        # A secret found once, then one found by two formats.
        (
            "AKIAABCDEFGHIJKLMNOP and Authorization: Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
            f"{marker('aws_access_key')} and Authorization: Bearer {marker('jwt')}",
        ),
        # Two formats as specific as each other: the first names the marker.
        (
            "Authorization: Custom cookie='sid=Zx81kLmQ9aa11'",
            f"Authorization: {marker('authorization')}",
        ),
        (
            "sk-ant-api03-" + _rand(URLSAFE, 24) + _pem("PRIVATE KEY"),
            marker("anthropic_key"),
        ),
    ],
)
def test_where_finds_overlap_the_most_specific_format_names_the_one_marker(
    text: str, expected: str
) -> None:
    assert _redact(text) == expected


def test_a_key_block_cut_off_at_the_end_hides_all_that_follows_under_its_name() -> None:
    rest = "then postgres://app:Pw-9x8y7z6w5v@db/app and sk-ant-api03-" + _rand(URLSAFE, 40)
    text = "log:\n" + _pem("PRIVATE KEY", end=False) + rest
    assert _redact(text) == "log:\n" + marker("private_key")


def test_two_secrets_side_by_side_get_a_marker_each() -> None:
    # A paste that lost its line break: a token, then a key block.
    token = "ghp_" + _rand(ALNUM, 36)
    assert _redact(f"{token}{_pem('PRIVATE KEY')}\nok") == (
        f"{marker('github_token')}{marker('private_key')}\nok"
    )


def test_letters_that_lower_case_to_two_characters_do_not_shift_a_redaction() -> None:
    # "İ".lower() is two characters: the key rules' offsets must still fit the text.
    text = "İ" * 16 + " password = 'Xk2pQ9rT7vW'"
    assert _redact(text) == "İ" * 16 + f" password = '{marker('secret_assignment')}'"


@pytest.mark.parametrize(
    "text",
    [
        "aws_secret_access_key:\n  " + _rand(ALNUM + "/+", 40),
        "AWS_SECRET_KEY\n=\n" + _rand(ALNUM + "/+", 40),
        "aws_secret_key\n\n  ::\n\n\"" + _rand(ALNUM + "/+", 40),
        "Authorization: Bearer\n  abcdefghij",
        "Authorization:\n  Bearer abcdefghij",
        "Authorization:\nBearer abcdefghij",
        "Authorization:\n\n\t\nBearer abcdefghij",
        "Authorization:\n\t\nBearer abcdefghij",
        " Authorization:\n\t\nBearer abcdefghij",
        "Authorization\n:\n'Bearer abcdefghij",
        "twilio_token =\n\n   " + _rand(HEX, 32),
        "TWILIO_TOKEN\n=\n" + _rand(HEX, 32),
        "Proxy-Authorization: Basic\n\tabcdefghij",
    ],
)
def test_a_value_below_its_name_is_redacted_in_long_text_too(text: str) -> None:
    # Text over 4 KiB is scanned around each anchor only: the window reaches over the lines
    # between a name and its value that hold only blanks, ":" or "=" and quotes.
    short = _redact(text)
    assert short != text and "[REDACTED:" in short
    filler = "ordinary output line with words, numbers 12345 and a path notes/a.txt\n" * 100
    for long in (filler + text + "\n" + filler, filler + text, text + "\n" + filler):
        assert len(long) > 4096
        assert _redact(long) == long.replace(text, short)


def test_text_up_to_four_kib_is_scanned_whole() -> None:
    # Longer text is scanned around its anchors only; up to 4,096 characters all of it is.
    secret = _rand(ALNUM + "/+", 40)
    block = "AWS_SECRET_KEY\n=\n" + secret
    text = "x" * (4096 - len(block) - 1) + "\n" + block
    assert len(text) == 4096
    assert _redact(text) == text.replace(secret, marker("aws_secret_key"))
    assert _redact(block) == block.replace(secret, marker("aws_secret_key"))


@pytest.mark.parametrize("n", [8192 - 5, 8192, 20_000])
def test_a_long_token_in_a_long_line_is_redacted_whole(n: int) -> None:
    token = "ya29." + _rand(URLSAFE, n)
    line = "x " * 3000 + token + " y" * 3000
    assert _redact(line) == "x " * 3000 + marker("gcp_oauth_token") + " y" * 3000


def test_a_long_bearer_token_far_from_its_header_name_is_redacted_whole() -> None:
    token = _rand(ALNUM, 12_000)
    line = "x " * 3000 + "Authorization:" + " " * 9000 + "Bearer " + token + " y" * 3000
    assert _redact(line) == line.replace(token, marker("authorization"))


@pytest.mark.parametrize("space", ["\x0b", "\x0c", "\xa0", "\u2003"])
def test_a_cookie_after_any_kind_of_space_is_redacted(space: str) -> None:
    # A form feed or a no-break space before the value is as good as a blank.
    assert _redact(f"Cookie: {space}sid=Zx81kLmQ9 see") == f"Cookie: {marker('cookie')}"


def test_a_url_starting_just_before_the_eight_kib_mark_of_a_long_line_is_redacted() -> None:
    head = "x " * 4095
    line = head + "postgres://app:Pw-9x8y7z6w5v@db/app" + " y" * 100
    assert _redact(line) == head + f"postgres://app:{marker('url_password')}@db/app" + " y" * 100


@pytest.mark.parametrize("gap", [8192 - 14, 20_000])
def test_a_header_name_far_before_its_bearer_on_one_line_still_counts(gap: int) -> None:
    line = "Authorization:" + " " * gap + "Bearer abcdefghij"
    assert _redact(line) == line.replace("abcdefghij", marker("authorization"))


def test_a_twilio_account_id_is_redacted_wherever_it_stands() -> None:
    account = "AC" + _rand(HEX, 32)
    filler = "ordinary output line with words, numbers 12345 and a path notes/a.txt\n" * 200
    for text in (f"sid {account}", f"sid {account}\n{filler}", f"{filler}sid {account}\n{filler}"):
        assert _redact(text) == text.replace(account, marker("twilio_key"))


@pytest.mark.parametrize("space", [" ", "\t", " \t "])
def test_token_then_blanks_or_tabs_then_a_machine_made_value_is_a_credential(space: str) -> None:
    value = "gh" + _rand(ALNUM, 30)
    for text in (f"Authorization: token{space}{value}", f"token{space}{value} ok"):
        assert _redact(text) == text.replace(value, marker("authorization"))
    # A tab once counted only when "token " stood elsewhere in the text.
    assert _redact(f"token\t{value}") == f"token\t{marker('authorization')}"


@pytest.mark.parametrize("space", ["\n", "\x0c", "\xa0"])
def test_token_is_a_scheme_only_before_a_blank_or_a_tab(space: str) -> None:
    value = "gh" + _rand(ALNUM, 30)
    for text in (f"token{space}{value} ok", f"token {value}\ntoken{space}{value}"):
        assert _redact(text).count(marker("authorization")) == text.count("token ")


@pytest.mark.parametrize("lookalike", ["aw\u017f", "\u0430ws"])
def test_a_name_spelled_with_lookalike_letters_is_not_an_aws_name(lookalike: str) -> None:
    # The names' letters are ASCII, matched without regard to case: a long s (U+017F) is no
    # "s", whether or not "aws" appears elsewhere in the text (it once decided).
    secret = _rand(ALNUM + "/+", 40)
    name = f"{lookalike}_secret_key"
    for text in (f"{name} = {secret}", f"aws cli\n{name} = {secret}"):
        assert marker("aws_secret_key") not in _redact(text)


def test_an_anchor_starting_the_last_line_of_a_window_takes_the_window_on() -> None:
    # A "Bearer" opens a window that ends with the next one's line; that one's value is on the
    # line after it: at the text's start, then after windows of its own further on.
    v = ["Zx81kLmQ9aa11bb22c" + c for c in "0123"]
    filler = "ordinary output line with words, numbers 12345 and a path notes/a.txt\n" * 100
    for sep in ("\n", "\n=\n", "\n\n  \n"):
        text = (f"Bearer{sep}Bearer\n{v[0]}\n{filler}Bearer {v[1]}\n{filler}"
                f"Bearer{sep}Bearer\n{v[2]}\n{filler}")
        assert _redact(text) == _replaced(text, v)


def test_windows_that_touch_are_merged_and_every_one_is_scanned() -> None:
    # Each "Bearer" line's window reaches the line after it; the third's reaches back to the
    # second line, so the two windows merge, after a first window far above.
    v = ["Zx81kLmQ9aa11bb22c" + c for c in "0123"]
    filler = "ordinary output line with words, numbers 12345 and a path notes/a.txt\n" * 100
    text = f"{filler}Bearer {v[0]}\n{filler}Bearer {v[1]}\nword\nBearer {v[2]}\nBearer\n{v[3]}\n"
    assert _redact(text) == _replaced(text, v)


def _replaced(text: str, values: list[str]) -> str:
    for value in values:
        text = text.replace(value, marker("authorization"))
    return text


# The pieces long text is made of in the comparison below: names, separators, values, tokens,
# lookalike letters, blanks and filler, so that names and values fall on lines apart, tokens run
# past any fixed reach, and anchors stand far from one another.
_PIECES = (
    "aws_secret_access_key", "AWS_KEY", "twilio_token", "Authorization", "Proxy-Authorization",
    "Cookie", "Set-Cookie", "AccountKey=", "token", "Token", "Bearer", "basic", "sig=", "SK", "AC",
    "token ", "TOKEN\t", "tokens",
    " ", "=", ":", " = ", "\n", "\n\n", "\n=\n", "\n:\n", "\t", "\x0c", "\xa0", "'", '"', "\r\n",
    "\u017f", "\u212a", "\u0130", "\u0131", "sid=Zx81kLmQ9", "abcdefghij", "dXNlcjpwYXNz",
    "postgres://app:Pw-9x8y7z6w5v@db/app", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
)


def _piece(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.5:
        return rng.choice(_PIECES)
    if roll < 0.65:
        return "".join(rng.choice(ALNUM + "/+") for _ in range(rng.choice((32, 40, 41))))
    if roll < 0.75:
        return rng.choice(("SK", "AC", "")) + "".join(rng.choice(HEX) for _ in range(32))
    if roll < 0.82:
        prefix = rng.choice(("ya29.", "ghp_", "xoxb-", "sk-ant-api03-", "glpat-", "hf_"))
        return prefix + "".join(rng.choice(ALNUM) for _ in range(rng.choice((36, 9000, 17000))))
    if roll < 0.85:  # tokens glued into one another, some past their longest
        return rng.choice("-_.").join(
            rng.choice(("ghp_", "glpat-", "sk-", "xoxb-", "SK", "AKIA", "eyJ", "twilio="))
            + "".join(rng.choice(ALNUM) for _ in range(rng.choice((16, 32, 40, 250, 300))))
            for _ in range(rng.randrange(2, 6)))
    if roll < 0.95:
        return rng.choice(("x ", "word ", "line\n", " \n", "\n\t\n")) * rng.randrange(1, 6000)
    return "".join(rng.choice(string.printable) for _ in range(rng.randrange(1, 200)))


def test_long_text_finds_exactly_what_a_scan_of_the_whole_text_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Over 4 KiB a detector runs only on the lines around its anchors; that must change how
    # long the scan takes, never what it finds. The reference scans every text whole.
    rng = random.Random(39)
    texts = []
    while len(texts) < 300:
        text = "".join(_piece(rng) for _ in range(rng.randrange(5, 40)))
        if len(text) > 4096:
            texts.append(text)
    windowed = [_detectors.detect(t) for t in texts]
    monkeypatch.setattr(_detectors, "_WINDOW_MIN_TEXT", 1 << 62)
    whole = [_detectors.detect(t) for t in texts]
    differ = [i for i, (w, r) in enumerate(zip(windowed, whole, strict=True)) if w != r]
    first = texts[differ[0]] if differ else ""
    assert differ == [], f"{len(differ)} of {len(texts)} differ, the first: {first!r:.400}"
    assert sum(n for _t, n in whole) > 300  # the texts hold secrets to find


def test_every_token_of_one_format_in_long_text_is_redacted() -> None:
    # One early, then two on one line far below: each gets its own window or shares one.
    first, second, third = ("ghp_" + _rand(ALNUM, 36) for _ in range(3))
    filler = "ordinary output line with words, numbers 12345 and a path notes/a.txt\n" * 100
    text = f"{first}\n{filler}{second} and {third}\n{filler}"
    gh = marker("github_token")
    assert _redact(text) == f"{gh}\n{filler}{gh} and {gh}\n{filler}"
