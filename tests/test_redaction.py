"""Redaction detectors, key rules, registered values, previews and the artifact store."""

from __future__ import annotations

import base64
import copy
import glob
import hashlib
import json
import os
import random
import re
import string
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import uuid_utils

from tooltrace import Status, ToolCall, ToolRegistry
from tooltrace.model import Artifact
from tooltrace.redaction import ArtifactStore, Redactor, marker, preview
from tooltrace.testing import RecordingSink

MARKER = re.compile(r"\[REDACTED:([a-z0-9_]+)\]")
_rng = random.Random(20261202)


def _rand(alphabet: str, n: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "_-"
HEX = "0123456789abcdef"

# (kind, text containing the secret, the secret part that must disappear). Values are made
# up at import time in each format's shape.
_jwt_body = base64.urlsafe_b64encode(b'{"sub":"1234567890","name":"x"}').decode().rstrip("=")
SECRETS: list[tuple[str, str]] = [
    ("aws_access_key", "AKIA" + _rand(string.ascii_uppercase + string.digits, 16)),
    ("aws_access_key", "ASIA" + _rand(string.ascii_uppercase + string.digits, 16)),
    ("gcp_api_key", "AIza" + _rand(URLSAFE, 35)),
    ("gcp_oauth_token", "ya29." + _rand(URLSAFE, 60)),
    ("gcp_client_secret", "GOCSPX-" + _rand(URLSAFE, 28)),
    ("azure_client_secret", _rand(ALNUM, 3) + "8Q~" + _rand(ALNUM + "_~.-", 34)),
    ("github_token", "ghp_" + _rand(ALNUM, 36)),
    ("github_token", "gho_" + _rand(ALNUM, 36)),
    ("github_token", "ghs_" + _rand(ALNUM, 36)),
    ("github_token", "github_pat_" + _rand(ALNUM, 22) + "_" + _rand(ALNUM, 59)),
    ("gitlab_token", "glpat-" + _rand(URLSAFE, 20)),
    ("slack_token", "xoxb-" + _rand(string.digits, 12) + "-" + _rand(ALNUM, 24)),
    ("slack_token", "xoxp-" + _rand(string.digits, 12) + "-" + _rand(ALNUM, 32)),
    ("stripe_key", "sk_live_" + _rand(ALNUM, 24)),
    ("stripe_key", "rk_live_" + _rand(ALNUM, 24)),
    ("stripe_key", "pk_live_" + _rand(ALNUM, 24)),
    ("stripe_key", "whsec_" + _rand(ALNUM, 32)),
    ("openai_key", "sk-proj-" + _rand(ALNUM, 20) + "T3BlbkFJ" + _rand(ALNUM, 20)),
    ("openai_key", "sk-" + _rand(ALNUM, 20) + "T3BlbkFJ" + _rand(ALNUM, 20)),
    ("anthropic_key", "sk-ant-api03-" + _rand(URLSAFE, 93) + "AA"),
    ("twilio_key", "SK" + _rand(HEX, 32)),
    ("sendgrid_key", "SG." + _rand(URLSAFE, 22) + "." + _rand(URLSAFE, 43)),
    ("npm_token", "npm_" + _rand(ALNUM, 36)),
    ("pypi_token", "pypi-AgEIcHlwaS5vcmc" + _rand(URLSAFE, 70)),
    ("huggingface_token", "hf_" + _rand(ALNUM, 34)),
    ("jwt", f"eyJhbGciOiJIUzI1NiJ9.{_jwt_body}.{_rand(URLSAFE, 43)}"),
]

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + "\n".join(_rand(ALNUM + "+/", 64) for _ in range(5))
    + "\n-----END RSA PRIVATE KEY-----"
)


def _contexts(secret: str) -> list[str]:
    """The same secret raw, in JSON, in a URL, in a header, in a shell line and in prose."""
    return [
        secret,
        json.dumps({"data": secret, "n": 1}),
        f"https://api.example.com/v1/items?q={secret}&page=2",
        f"X-Custom-Header: {secret}",
        f"curl -s -d '{secret}' https://example.com",
        f"the value was {secret}, as logged.",
    ]


def _assert_gone(out: str, secret: str) -> None:
    assert secret not in out
    # No fragment of the secret survives either (markers carry no prefix or suffix hint).
    core = secret.split("_", 1)[-1] if "_" in secret[:12] else secret
    for i in range(0, max(len(core) - 8, 1), 4):
        assert core[i : i + 8] not in out, (core[i : i + 8], out)


@pytest.fixture()
def redactor() -> Redactor:
    return Redactor()


@pytest.mark.parametrize(("kind", "secret"), SECRETS, ids=[f"{k}-{s[:6]}" for k, s in SECRETS])
def test_each_detector_catches_its_format_in_every_context(
    redactor: Redactor, kind: str, secret: str
) -> None:
    for text in _contexts(secret):
        out = redactor.redact_text(text)
        _assert_gone(out, secret)
        assert marker(kind) in out, (kind, text, out)
        kinds = MARKER.findall(out)
        assert kinds and all(k == kind for k in kinds)


def test_redacting_twice_changes_nothing_more(redactor: Redactor) -> None:
    texts = [c for _kind, secret in SECRETS for c in _contexts(secret)]
    texts += [
        "Cookie: a=b; c=d",
        "Authorization: Bearer abc123DEF456ghi789JKL",
        "postgres://u:pw-Secret1@h/db",
        '"password": "hunter22"',
        PEM,
    ]
    for text in texts:
        once = redactor.redact_text(text)
        assert once is not text
        assert redactor.redact_text(once) is once, once
    value = {"password": "x1234", "note": "ghp_" + "c" * 36}
    once_value, _ = redactor.redact(value)
    assert redactor.redact(once_value) == (once_value, 0)


def test_secrets_inside_long_text_and_long_lines(redactor: Redactor) -> None:
    # Long text takes the windowed path (detectors run only around their anchors).
    filler = "ordinary output line with words, numbers 12345 and a path notes/a.txt\n" * 300
    one_line = json.dumps({"rows": [{"id": i, "name": f"row {i}"} for i in range(2000)]})
    assert len(filler) > 4096 and len(one_line) > 20_000 and "\n" not in one_line
    extra = [
        ("url_password", "postgres://app:Pw-9x8y7z6w5v@db:5432/app", "Pw-9x8y7z6w5v"),
        ("cookie", "Cookie: sid=Zx81kLmQ9; csrftoken=aa11bb22cc33", "Zx81kLmQ9"),
        ("authorization", "Authorization: Bearer abc123DEF456ghi789JKL", "abc123DEF456ghi789JKL"),
        ("private_key", PEM, PEM.splitlines()[2]),
    ]
    cases = [(k, s_, s_) for k, s_ in SECRETS] + extra
    for kind, placed, secret in cases:
        for text in (
            filler + placed + "\n" + filler,
            placed + "\n" + filler,
            filler + placed,
            one_line[:12_000] + " " + placed + " " + one_line[12_000:],
        ):
            if kind == "cookie" and not text.startswith(placed) and "\n" + placed not in text:
                continue  # a cookie header is recognised at the start of a line
            out = redactor.redact_text(text)
            assert secret not in out, (kind, len(text))
            assert marker(kind) in out, (kind, len(text))
    assert redactor.redact_text(filler + one_line) is not None


def test_pem_private_key_block_is_replaced_whole(redactor: Redactor) -> None:
    text = f"before\n{PEM}\nafter"
    out = redactor.redact_text(text)
    assert out == f"before\n{marker('private_key')}\nafter"
    # JSON-escaped (a service account file) and cut off without its END line.
    sa = json.dumps({"type": "service_account", "private_key": PEM + "\n"})
    out = redactor.redact_text(sa)
    assert "PRIVATE KEY" not in out.replace("[REDACTED:private_key]", "")
    assert all(line not in out for line in PEM.splitlines()[1:-1])
    cut = redactor.redact_text("key: " + PEM[:150])
    assert cut == "key: " + marker("private_key")


def test_aws_secret_key_next_to_its_name(redactor: Redactor) -> None:
    secret = _rand(ALNUM + "/+", 38) + "Ab"
    for text in (
        f"aws_secret_access_key = {secret}",
        f'{{"AWS_SECRET_ACCESS_KEY": "{secret}"}}',
        f"export AWS_SECRET_ACCESS_KEY={secret}",
    ):
        out = redactor.redact_text(text)
        _assert_gone(out, secret)
        assert marker("aws_secret_key") in out


def test_azure_connection_strings_and_sas_signatures(redactor: Redactor) -> None:
    key = _rand(ALNUM + "+/", 86) + "=="
    conn = f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={key};EndpointSuffix=x"
    out = redactor.redact_text(conn)
    _assert_gone(out, key)
    assert out.startswith("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=[REDACTED")
    assert out.endswith(";EndpointSuffix=x")
    sig = _rand(ALNUM, 40) + "%2B%3D"
    out = redactor.redact_text(f"https://a.blob.core.windows.net/c/b?sv=2022-11-02&sig={sig}")
    _assert_gone(out, sig)
    assert marker("azure_key") in out


def test_slack_webhook_keeps_the_host(redactor: Redactor) -> None:
    path = f"T{_rand(ALNUM, 10)}/B{_rand(ALNUM, 10)}/{_rand(ALNUM, 24)}"
    out = redactor.redact_text(f"POST https://hooks.slack.com/services/{path}")
    assert out == f"POST https://hooks.slack.com/services/{marker('slack_webhook')}"


def test_twilio_token_next_to_its_name(redactor: Redactor) -> None:
    token = _rand(HEX, 32)
    out = redactor.redact_text(f"TWILIO_AUTH_TOKEN={token}")
    assert token not in out and "[REDACTED:" in out


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        ("postgres://alice:s3cr3t-Pa55@db.internal:5432/app", "s3cr3t-Pa55", "alice"),
        ("https://bob:hunter2hunter2@example.com/x", "hunter2hunter2", "example.com"),
        ('{"dsn": "redis://default:Zq9xLm2Pw@cache:6379/0"}', "Zq9xLm2Pw", "cache:6379"),
        ("git clone https://user:ghx-token-value9@git.example/r.git", "ghx-token-value9", "user"),
    ],
)
def test_password_in_url_keeps_user_and_host(
    redactor: Redactor, text: str, secret: str, kept: str
) -> None:
    out = redactor.redact_text(text)
    assert secret not in out
    assert kept in out
    assert marker("url_password") in out


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer abc123DEF456ghi789JKL", "abc123DEF456ghi789JKL"),
        ('headers = {"Authorization": "Bearer tok.en-value_123456"}', "tok.en-value_123456"),
        ("authorization: token 0123456789abcdefXYZ", "0123456789abcdefXYZ"),
        (
            "Authorization: Basic " + base64.b64encode(b"admin:Opensesame1").decode(),
            base64.b64encode(b"admin:Opensesame1").decode(),
        ),
        (
            "curl -u x -H 'Basic " + base64.b64encode(b"svc:pw-12345").decode() + "'",
            base64.b64encode(b"svc:pw-12345").decode(),
        ),
        ("Proxy-Authorization: Bearer q1w2e3r4t5y6u7i8", "q1w2e3r4t5y6u7i8"),
        (
            'Authorization: Digest username="bob", response="6629fae49393a05397450978507c4ef1"',
            "6629fae49393a05397450978507c4ef1",
        ),
    ],
)
def test_authorization_headers(redactor: Redactor, text: str, secret: str) -> None:
    out = redactor.redact_text(text)
    assert secret not in out
    assert marker("authorization") in out


def test_cookie_headers(redactor: Redactor) -> None:
    out = redactor.redact_text("Cookie: sessionid=Zx81kLmQ; csrftoken=aa11bb22\nAccept: */*")
    assert out == f"Cookie: {marker('cookie')}\nAccept: */*"
    out = redactor.redact_text('{"Set-Cookie": "sid=9f8e7d6c; HttpOnly"}')
    assert "9f8e7d6c" not in out


@pytest.mark.parametrize(
    "line",
    [
        "Authorization: see the docs at https://example.com/auth",
        "Authorization: required for every request",
        "Authorization: See below.",
        "Authorization: see RFC 7235, section 4.2",
        "Authorization: Negotiate",
        "Proxy-Authorization: not needed inside the cluster",
        "Cookie: see below",
        "Set-Cookie: is sent by the login endpoint",
        "Authorization: <token>",
    ],
)
def test_prose_after_a_header_name_is_not_a_credential(redactor: Redactor, line: str) -> None:
    assert redactor.redact_text(line) is line


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (
            "Authorization: Negotiate YIIGhgYGKwYBBQUCoIIGejCCBnagMDAuBgkqhkiC9xIBAgIG",
            "YIIGhgYGKwYBBQUCoIIGejCCBnagMDAuBgkqhkiC9xIBAgIG",
        ),
        (
            "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/"
            "aws4_request, SignedHeaders=host;x-amz-date, Signature=5d672d79c15b13162d9279b0855"
            "cfba6789a8edb4c82c400e06b5924a6f2b5d7",
            "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
        ),
        ("Authorization: SSWS 00QCjAl4MlV-WPXM-0123456789abcdef", "00QCjAl4MlV-WPXM-0123456789"),
        ("Authorization: sk-live-0123456789abcdef", "0123456789abcdef"),
        ("Authorization: Custom abcdefghijklmnopqrstu", "abcdefghijklmnopqrstu"),
        ("Authorization: Digest-ish response=hunter22, realm=x", "hunter22"),
        ("Cookie: sid=Zx81kLmQ9", "Zx81kLmQ9"),
        ("Set-Cookie: ZX81KLMQ9QWE7", "ZX81KLMQ9QWE7"),
    ],
)
def test_a_credential_after_a_header_name_is_redacted_whatever_its_scheme(
    redactor: Redactor, text: str, secret: str
) -> None:
    out = redactor.redact_text(text)
    assert secret not in out and "[REDACTED:" in out, out


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ('api_key = "abcd1234efgh5678"', "abcd1234efgh5678"),
        ("API_KEY=abcd1234efgh5678", "abcd1234efgh5678"),
        ('{"token": "Zx8fK2mQ9pL4vT7rW1sY3nB6"}', "Zx8fK2mQ9pL4vT7rW1sY3nB6"),
        ("SECRET=foo123", "foo123"),
        ("DB_PASSWORD=correcthorse", "correcthorse"),
        ("password: hunter2", "hunter2"),
        ('"password": "correct horse battery staple"', "correct horse battery staple"),
        ('{\\"password\\": \\"hunter22\\"}', "hunter22"),
        ("client_secret='s3cr3t-v4lue'", "s3cr3t-v4lue"),
        ("?user=bob&access_token=Ab3dEf6hIj9kLm2n&x=1", "Ab3dEf6hIj9kLm2n"),
        ("accessToken: 'Q2xpZW50U2VjcmV0MTIz'", "Q2xpZW50U2VjcmV0MTIz"),
        ("private_key := 'k3y-m4t3r14l'", "k3y-m4t3r14l"),
        ("connect(password='pa55word!')", "pa55word!"),
        ("session_token => Rk9vQmFyQmF6MTIzNDU2", "Rk9vQmFyQmF6MTIzNDU2"),
        ("password: 'abc", "abc"[:0] + "abc"),
        ("password: Hunter2", "Hunter2"),
        ('def connect(password: str = "hunter2x"):', "hunter2x"),
        ("db_password: Optional[str] = 's3cr3t-pw'", "s3cr3t-pw"),
    ],
)
def test_values_next_to_key_like_names(redactor: Redactor, text: str, secret: str) -> None:
    out = redactor.redact_text(text)
    if len(secret) >= 4:
        assert secret not in out, out
        assert "[REDACTED:" in out
    else:
        # Too short to tell from ordinary text: documented minimum length.
        assert out is text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("password: %Xk2!pQ9zLmW", "Xk2!pQ9zLmW"),
        ('{"password": "#Xk2pQ9zLmW"}', "Xk2pQ9zLmW"),
        ('{\\"password\\": \\"%dXk2pQ9zLmW\\"}', "Xk2pQ9zLmW"),
        ("password=%25Xk2%21pQ9zLmW", "Xk2%21pQ9zLmW"),
        ("https://example.com/login?user=bob&password=%23Xk2pQ9zLmW", "Xk2pQ9zLmW"),
        ("DB_PASSWORD=$Xk2!pQ9zLmW", "Xk2!pQ9zLmW"),
        ("postgres://app:%23Xk2pQ9zLm@db:5432/app", "Xk2pQ9zLm"),
        ("aws_secret_access_key = %2FwJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKE", "wJalrXUtnFEMI"),
        ("aws_secret_access_key = %2BwJalrXUtnFEMI%2FK7MDENG%2BbPxRfiCYEXAMPLE", "wJalrXUtnFEMI"),
    ],
)
def test_a_value_starting_with_a_template_sigil_is_no_placeholder(
    redactor: Redactor, text: str, secret: str
) -> None:
    out = redactor.redact_text(text)
    assert secret not in out and "[REDACTED:" in out, out


@pytest.mark.parametrize(
    "line",
    [
        "password: %(pw)s",
        "password = '%(password)s'",
        "password: '%s:%s'",
        "password: %PASSWORD%",
        "password: '%env(DB_PASSWORD)%'",
        "password: #{pw}",
        'password: "#{pw}"',
        "password: # set below",
        "password: ${X}",
        'password: "${{ secrets.DB_PASSWORD }}"',
        "DB_PASSWORD=$DB_PASSWORD_FROM_VAULT",
        "password=%24%7BDB_PASSWORD%7D",
        "postgres://app:${DB_PASSWORD}@db:5432/app",
    ],
)
def test_template_placeholders_stay(redactor: Redactor, line: str) -> None:
    assert redactor.redact_text(line) is line


def test_machine_made_tokens_without_a_digit_or_with_a_suffix(redactor: Redactor) -> None:
    letters = "KeJsAbcdefGhijkLmnoPqrs-tuvWxyz~cmj"
    out = redactor.redact_text(f"use Bearer {letters} now")
    assert out == f"use Bearer {marker('authorization')} now"
    token = _rand(ALNUM, 32)
    for suffix in (".txt", ".json", ".pem.bak"):
        out = redactor.redact_text(f"api_key={token}{suffix}")
        assert token not in out and "[REDACTED:" in out, out
    # Prose after "bearer" and code that names a value stay.
    for line in (
        "Bearer tokens are sent in the Authorization header.",
        "the bearer authentication scheme",
        "api_key = settings.API_KEY",
        "API_KEY = config.API_KEY",
    ):
        assert redactor.redact_text(line) is line


# Code next to a name that holds a secret: annotations, dotted names, calls, other variables.
CODE_NEXT_TO_SECRET_NAMES = [
    "private_key: ec.EllipticCurvePrivateKey",
    "private_key: Ed25519PrivateKey",
    "    private_key: ed25519.Ed25519PrivateKey = field(repr=False)",
    "password=get_password()",
    "password = getpass.getpass('Password: ')",
    "key: str",
    "token: Optional[str]",
    "token: str | None = None",
    "api_key: SecretStr",
    "credentials: CredentialsT",
    "session: requests.Session",
    "def login(self, password: SecretStr, retries: int = 0) -> None:",
    'secret = os.environ["X"]',
    "secret = os.getenv('X')",
    "password = None",
    "api_key = settings.API_KEY",
    "secret_key = config.SECRET_KEY",
    "token = self.token",
    "password = user_password",
    "apiKey = user_apiKey",
    "client_secret = DEFAULT_CLIENT_SECRET",
    '    "password": new_password,',
    "{'api_key': api_key, 'timeout': 30}",
    "password = await vault.read(path)",
    "secret = secrets.token_hex(32)",
    "passphrase = user_passphrase",
    "token = Token.Name.Builtin",
    "First pass: determine the layout of the page.",
    "    api_key: Your API key for the service.",
    "    password: Redis password (optional).",
]


@pytest.mark.parametrize("line", CODE_NEXT_TO_SECRET_NAMES)
def test_code_next_to_a_secret_name_is_left_alone(redactor: Redactor, line: str) -> None:
    assert redactor.redact_text(line) is line


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        # The passwords: the first splits into capitalised pieces (NBB Zon ZO 40 ...).
        ("note password: NBBZonZO40Vwm02MkmTO end", "NBBZonZO40Vwm02MkmTO"),
        ("note password: abcdefGHIJ1234klmnOP end", "abcdefGHIJ1234klmnOP"),
        ("password: NBBZonZO40Vwm02MkmTO", "NBBZonZO40Vwm02MkmTO"),
        ("private_key: Kq3vEllipticZt9wPrivate", "Kq3vEllipticZt9wPrivate"),
        ("password = ZWeqhFWCEPyYngFb", "ZWeqhFWCEPyYngFb"),
        ("api_key: QPegENBQDqJDSuzHE0dRymCiarm83yM4", "QPegENBQDqJDSuzHE0dRymCiarm83yM4"),
        ("{password: Xk3jd9Lq, user: bob}", "Xk3jd9Lq"),
        ("password: Xk2pQ9.zLmWv8", "Xk2pQ9.zLmWv8"),
        ("password: Summer2024 for the staging db", "Summer2024"),
        ("client_secret = hunter2hunter", "hunter2hunter"),
        ("DB_PASSWORD=app_user_pw", "app_user_pw"),  # a .env line holds literals
    ],
)
def test_a_value_in_a_code_like_place_is_still_redacted(
    redactor: Redactor, text: str, secret: str
) -> None:
    out = redactor.redact_text(text)
    assert secret not in out and "[REDACTED:secret_assignment]" in out, out


def test_random_tokens_seldom_read_as_names_in_code() -> None:
    """The shapes that make a value code (a type, another variable's name) are ones a
    generated password of 12 to 40 letters and digits does not take: none of 20,000 does
    (about one in a hundred once passed for a type name). A word of prose (which also needs
    two more words after it) or a dotted name takes one in several thousand at most."""
    from tooltrace.redaction._benign import code_name, prose_word, type_name, variable_name

    rng = random.Random(32)
    tokens = [_rand_with(rng, ALNUM, rng.randint(12, 40)) for _ in range(20_000)]
    for check in (type_name, variable_name):
        assert not [t for t in tokens if check(t)], check.__name__
    assert len([t for t in tokens if prose_word(t)]) <= 10
    dotted = [f"{t[: len(t) // 2]}.{t[len(t) // 2 :]}" for t in tokens]
    assert len([t for t in dotted if code_name(t)]) <= 20  # about 1 in 4,000
    names = ["EllipticCurvePrivateKey", "SecretStr", "HttpUrl", "Ed25519PrivateKey", "APIKey",
             "OpenAIChatGPTCredentials", "CancellationToken", "UUID", "str", "Optional"]
    assert all(type_name(n) for n in names)
    assert all(variable_name(n) for n in ["user_password", "DB_PASSWORD", "userPassword",
                                          "passwd", "_creds", "user_apiKey", "api_key2"])
    assert all(code_name(n) for n in ["ec.EllipticCurvePrivateKey", "os.environ", "self.api_key",
                                      "settings.API_KEY", "grpc.ChannelCredentials", "t.Any"])


def _rand_with(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def test_code_in_arguments_results_and_artifacts_is_left_alone(tmp_path: Path) -> None:
    from tooltrace import Status, ToolCall, ToolRegistry, tool
    from tooltrace.testing import RecordingSink

    source = "\n".join([*CODE_NEXT_TO_SECRET_NAMES, "password: NBBZonZO40Vwm02MkmTO"])

    @tool(capability="read")
    def review(code: str, copies: int) -> str:
        """Return the code it was given, ``copies`` times (many copies go to an artifact)."""
        return "\n".join([code] * copies)

    sink = RecordingSink()
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", sinks=[sink])
    reg.register(review)
    for copies in (1, 40):
        env = reg.call(ToolCall("review", {"code": source, "copies": copies}))
        assert env.status is Status.OK
        (record,) = sink.by_id(env.call_id)
        shown = [record.args_redacted["code"], record.result_preview or ""]
        if copies > 1:
            assert env.artifact is not None
            shown.append(reg.artifacts.read(env.artifact.sha256))
        else:
            shown.append(env.data)
        for text in shown:
            for line in CODE_NEXT_TO_SECRET_NAMES:
                assert line in text, (line, text[:300])
            assert "NBBZonZO40Vwm02MkmTO" not in text
            assert "password: [REDACTED:secret_assignment]" in text
    reg.shutdown()


BENIGN = [
    "def get_token(self) -> str:",
    "token = self.get_token()",
    "password = request.form['password']",
    "if not password:",
    "secret = os.environ['SECRET']",
    "api_key = settings.API_KEY",
    'author = "Jane Doe"',
    "max_tokens=1000",
    "tokenizer = AutoTokenizer.from_pretrained(name)",
    "for key, value in mapping.items():",
    "Basic usage of the library is shown below.",
    "Bearer token authentication is required for this endpoint.",
    'token_type = "bearer"',
    'PASSWORD_FIELD_NAME = "password"',
    "session: requests.Session | None = None,",
    "private_key: ec.EllipticCurvePrivateKey,",
    "password: SecretStr",
    "api_key: APIKey | None = None",
    "def f(token: Optional[str] = None) -> None:",
    "# pass the secret sauce to the next step",
    "The passenger walked past the bypass.",
    "git commit -m 'fix: rotate keys' && git push",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "call_id=0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6b status=ok",
    "request_id: 3fa85f64-5717-4562-b3fc-2c963f66afa6",
    "https://example.com/path?page=2&sort=asc",
    "https://user@example.com/repo.git",
    "ssh://git@github.com:org/repo.git",
    "https://user:pass@host:port/path  (placeholder in docs)",
    "task-runner-queue-worker-0001 started",
    "x = {'key': 'value', 'other': 2}",
    "SELECT id, token_count FROM usage WHERE session_id = $1",
    "Traceback (most recent call last):",
    "kubectl get secrets -n default",
    "The quick brown fox jumps over the lazy dog.",
    "int main(void) { return 0; }",
    'const msg = "Hello, world";',
]


@pytest.mark.parametrize("line", BENIGN)
def test_benign_lines_are_returned_unchanged(redactor: Redactor, line: str) -> None:
    assert redactor.redact_text(line) is line


def test_digests_ids_and_images_are_never_altered(redactor: Redactor) -> None:
    for i in range(2000):
        sha = hashlib.sha256(str(i).encode()).hexdigest()
        git = hashlib.sha1(str(i).encode()).hexdigest()
        for line in (
            f"call_id={uuid_utils.uuid7()} sha256={sha} commit {git}",
            f'{{"call_id": "{uuid_utils.uuid7()}", "sha256": "{sha}", "trace": "{uuid.uuid4()}"}}',
            f'"token": "{uuid_utils.uuid7()}"',
            f"secret_sha256={sha} session_id={uuid.uuid4()}",
            "data:image/png;base64," + base64.b64encode(random.Random(i).randbytes(240)).decode(),
            sha.upper(),
        ):
            assert redactor.redact_text(line) is line, line


def _stdlib_lines() -> list[str]:
    lib = os.path.dirname(os.__file__)
    out: list[str] = []
    for path in sorted(glob.glob(lib + "/**/*.py", recursive=True)):
        if "/test" in path or "site-packages" in path or "idlelib" in path:
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                out.extend(line for line in fh.read().splitlines() if line.strip())
        except (UnicodeDecodeError, OSError):
            continue
    return out


def test_benign_corpus_false_positive_rate_is_tiny(redactor: Redactor) -> None:
    lines = _stdlib_lines()
    assert len(lines) > 50_000
    sample = random.Random(7).sample(lines, 100_000) if len(lines) > 100_000 else lines
    altered = [line for line in sample if redactor.redact_text(line) is not line]
    # The Python standard library (outside its tests) as ordinary source code and prose.
    assert len(altered) / len(sample) <= 0.0005, altered[:20]


# -- structured values ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "password", "Password", "passwd", "pwd", "secret", "client_secret", "token",
        "access_token", "accessToken", "refreshToken", "api_key", "apiKey", "apikey",
        "X-Api-Key", "Authorization", "auth", "cookie", "Set-Cookie", "private_key",
        "privateKey", "credentials", "credential", "aws_access_key_id", "AWS_SECRET_ACCESS_KEY",
        "db.password", "session_id", "x-auth-token",
    ],
)
def test_key_rules_replace_the_whole_value(redactor: Redactor, key: str) -> None:
    value: dict[str, Any] = {key: "plain words", "nested": {key: {"a": [1, 2]}}}
    out, n = redactor.redact(value)
    assert out[key] == marker("secret_field")
    assert out["nested"][key] == marker("secret_field")
    assert n == 2


@pytest.mark.parametrize(
    "key",
    [
        "author", "tokenizer", "max_tokens", "keyboard", "passenger", "name", "path",
        "token_type", "auth_method", "password_policy", "secret_name", "call_id", "is_private",
    ],
)
def test_key_rules_leave_ordinary_keys(redactor: Redactor, key: str) -> None:
    value = {key: "plain words"}
    out, n = redactor.redact(value)
    assert out is value and n == 0


def test_numbers_are_kept_unless_the_key_names_a_numeric_secret(redactor: Redactor) -> None:
    out, n = redactor.redact({"token_count": 5, "token": 7, "pin": 1234, "password": 99})
    assert out == {
        "token_count": 5, "token": 7, "pin": marker("secret_field"),
        "password": marker("secret_field"),
    }
    assert n == 2


def test_redact_deep_copy_shares_unchanged_parts_and_never_mutates(redactor: Redactor) -> None:
    gh = "ghp_" + _rand(ALNUM, 36)
    unchanged = {"a": [1, 2, {"b": "c"}], "t": ("x", "y")}
    value = {
        "keep": unchanged,
        "list": ["fine", f"token is {gh}", ("ok", {"password": "pw-1234"})],
        "password": None,
        "token": "",
        "auth": True,
        gh: 1,
    }
    before = copy.deepcopy(value)
    out, n = redactor.redact(value)
    assert value == before  # input untouched
    assert out["keep"] is unchanged  # unchanged sub-objects are shared
    assert out["list"][0] == "fine"
    assert out["list"][1] == f"token is {marker('github_token')}"
    assert isinstance(out["list"][2], tuple)
    assert out["list"][2][1] == {"password": marker("secret_field")}
    assert out["password"] is None and out["token"] == "" and out["auth"] is True
    assert marker("github_token") in out  # secrets in keys are redacted too
    assert n == 3
    assert gh not in json.dumps(out)


def test_a_key_that_names_a_secret_is_redacted_as_text_too(redactor: Redactor) -> None:
    key = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    out, n = redactor.redact({key: "v", "note": {key: None}})
    assert "wJalrXUtnFEMI" not in json.dumps(out)
    shown = f"aws_secret_access_key = {marker('aws_secret_key')}"
    # The value rule still applies (None holds nothing, so it stays).
    assert out == {shown: marker("secret_field"), "note": {shown: None}}
    assert n == 3
    gh = "ghp_" + _rand(ALNUM, 36)
    out, n = redactor.redact({f"password for {gh}": "hunter22"})
    assert out == {f"password for {marker('github_token')}": marker("secret_field")} and n == 2


def test_str_subclass_keys_follow_the_same_rules(redactor: Redactor) -> None:
    class Key(str):
        pass

    gh = "ghp_" + _rand(ALNUM, 36)
    out, n = redactor.redact({Key("password"): "hunter22", Key(f"note {gh}"): 1, Key("a"): "b"})
    assert out == {
        "password": marker("secret_field"), f"note {marker('github_token')}": 1, "a": "b"
    }
    assert n == 2


def test_redact_returns_the_same_object_when_clean(redactor: Redactor) -> None:
    value = {"path": "notes/a.txt", "limit": 10, "items": [1, "two", {"x": None}]}
    out, n = redactor.redact(value)
    assert out is value and n == 0
    text = "nothing to see here"
    assert redactor.redact_text(text) is text
    assert redactor.redact(5) == (5, 0)
    assert redactor.redact(None) == (None, 0)


def test_custom_key_patterns_and_detectors_off() -> None:
    r = Redactor(key_patterns=[r"^ssn$"], detectors=False)
    out, n = r.redact({"ssn": "123-45-6789", "password": "x", "note": "ghp_" + "a" * 36})
    assert out == {"ssn": marker("secret_field"), "password": "x", "note": "ghp_" + "a" * 36}
    assert n == 1


# -- registered values ----------------------------------------------------------------------


def test_registered_values_raw_and_encoded() -> None:
    secret = 'op-Secret/with "quotes" & ünï+code'
    r = Redactor(extra_values=[secret])
    raw = secret.encode()
    forms = [
        secret,
        base64.b64encode(raw).decode(),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode(),
        quote(secret, safe=""),
        quote_plus(secret),
        json.dumps(secret)[1:-1],
        raw.hex(),
    ]
    for form in forms:
        out = r.redact_text(f"before {form} after")
        assert out == f"before {marker('registered')} after", form
    out, n = r.redact({"msg": json.dumps({"v": secret})})
    assert secret not in json.dumps(out) and n == 1


def _ed25519_key() -> tuple[str, bytes]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())
    return pem, seed


def _key_forms(pem: str, seed: bytes, hmac_hex: str) -> dict[str, str]:
    """Every text form of the HMAC key and the Ed25519 key a tool might print."""
    raw = bytes.fromhex(hmac_hex)
    body = "".join(ln for ln in pem.splitlines() if not ln.startswith("-----"))
    return {
        "hmac hex": hmac_hex,
        "hmac HEX": hmac_hex.upper(),
        "hmac base64": base64.b64encode(raw).decode(),
        "pem": pem,
        "pem stripped": pem.strip(),
        "pem body": body,
        "seed hex": seed.hex(),
        "seed HEX": seed.hex().upper(),
        "seed base64": base64.b64encode(seed).decode(),
        "seed base64 unpadded": base64.b64encode(seed).decode().rstrip("="),
        "seed base64url": base64.urlsafe_b64encode(seed).decode().rstrip("="),
    }


def _material(forms: dict[str, str]) -> list[str]:
    """Pieces of key material of which none may be left: every 16 characters of every form."""
    out: list[str] = []
    for form in forms.values():
        for line in form.splitlines():
            if line.startswith("-----"):
                continue
            out += [line[i : i + 16] for i in range(0, max(len(line) - 15, 1), 8)]
    return out


@pytest.mark.parametrize(
    "registered",
    ["hmac hex", "hmac base64", "pem", "pem stripped", "seed hex", "seed base64"],
)
def test_a_registered_key_is_redacted_in_every_form_it_is_printed(registered: str) -> None:
    """A key registered in one of its forms (an HMAC key as hex or base64, an Ed25519 key as
    PEM, or its seed as hex or base64; as read from a file, or stripped) is redacted in the
    forms its bytes take: hex in either case, base64 in either alphabet with or without
    padding; a PEM's body and the seed inside it too. Each raw, URL-encoded, JSON-escaped and
    base64-encoded, alone or in longer text, with the detectors off."""
    pem, seed = _ed25519_key()
    forms = _key_forms(pem, seed, os.urandom(32).hex())
    kind = registered.split()[0]
    group = {k: v for k, v in forms.items() if k.split()[0] == kind or (
        kind == "pem" and k.startswith("seed"))}
    r = Redactor(detectors=False, extra_values=[forms[registered] + "\n"])  # as read from a file
    material = _material(group)
    for name, form in group.items():
        for shown in (
            form,
            f"{form}\n",
            json.dumps({"stdout": f"{form}\n", "exit_code": 0}),
            f"key={quote(form, safe='')}&next=1",
            base64.b64encode(f"secret: {form}\n".encode()).decode(),
            f"the key is {form} (rotate monthly)",
        ):
            out = r.redact_text(shown)
            assert marker("registered") in out or marker("encoded_secret") in out, (name, shown)
            assert not [m for m in material if m in out], (name, out)
    # Another key's forms are not this key: nothing else is redacted.
    for name, form in forms.items():
        if name not in group and not name.startswith("pem"):
            assert r.redact_text(f"x {form} y") == f"x {form} y", name


def test_registered_keys_never_leave_a_command_run(registry: ToolRegistry, workspace: Path,
                                                  sink: RecordingSink) -> None:
    """Keys a real ``cat`` prints (with the file's trailing newline, in JSON, base64-encoded)
    reach no result, record or artifact."""
    pem, seed = _ed25519_key()
    forms = _key_forms(pem, seed, os.urandom(32).hex())
    for value in (forms["hmac hex"], pem, forms["seed hex"]):
        registry.redactor.register_value(value + "\n")
    (workspace / "keys").mkdir()
    files = {
        "hmac.key": forms["hmac hex"] + "\n",
        "signing.pem": pem,
        "seed.txt": f"{forms['seed hex']}\n{forms['seed base64']}\n",
        "keys.json": json.dumps({name: form for name, form in forms.items()}),
        "keys.b64": base64.b64encode(json.dumps(forms).encode()).decode() + "\n",
        "big.txt": ("ordinary line of output\n" * 1000) + forms["seed HEX"] + "\n",
    }
    for name, text in files.items():
        (workspace / "keys" / name).write_text(text)
    material = _material(forms)
    for name in files:
        env = registry.call(ToolCall("run_command", {"argv": ["cat", f"keys/{name}"]}))
        assert env.status is Status.OK, env.summary
        (record,) = sink.by_id(env.call_id)
        shown = [json.dumps(env.data), record.result_preview or ""]
        if env.artifact is not None:
            shown.append(registry.artifacts.read(env.artifact.sha256))
        for text in shown:
            assert not [m for m in material if m in text], (name, text[:400])
        assert "[REDACTED:" in json.dumps(env.data) or env.artifact is not None, name


def test_register_value_refuses_short_values() -> None:
    r = Redactor()
    with pytest.raises(ValueError):
        r.register_value("abc")
    with pytest.raises(ValueError):
        r.register_value("")


def test_register_value_is_thread_safe() -> None:
    r = Redactor()
    values = [f"registered-value-{i:04d}-{_rand(ALNUM, 12)}" for i in range(40)]
    errors: list[BaseException] = []

    def register(chunk: list[str]) -> None:
        try:
            for v in chunk:
                r.register_value(v)
                assert v not in r.redact_text(f"x {v} y")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=register, args=(values[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    text = " ".join(values)
    assert r.redact_text(text) == " ".join([marker("registered")] * len(values))


# -- encoded secrets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "place",
    [
        "https://example.com/cb/{b}",
        "https://example.com/cb/{b}?x=1",
        "/tmp/uploads/{b}",
        "s3://bucket/a/b/{b}",
        "open state_{b} now",
        "x-{b}",
        "+{b}",
    ],
)
@pytest.mark.parametrize("urlsafe", [False, True], ids=["standard", "urlsafe"])
def test_base64_secret_right_after_a_separator(
    redactor: Redactor, place: str, urlsafe: bool
) -> None:
    # "/", "_", "-" and "+" are base64 characters and separators: the blob starts after one.
    token = "ghp_" + _rand(ALNUM, 36)
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    for plain in (token, f"token={token}", json.dumps({"token": token}), f"a {token}\n"):
        enc = encode(plain.encode()).decode()
        for blob in (enc, enc.rstrip("=")):
            text = place.format(b=blob)
            out = redactor.redact_text(text)
            head, tail = place.split("{b}")
            assert out == head + marker("encoded_secret") + tail, (text, out)


def test_base64_secret_followed_by_more_of_the_path(redactor: Redactor) -> None:
    token = "ghp_" + _rand(ALNUM, 36)
    for pad in range(3):  # every length modulo 3 of the encoded text
        blob = base64.b64encode(f"token={token}{' ' * pad}".encode()).decode().rstrip("=")
        out = redactor.redact_text(f"https://example.com/cb/{blob}/callback")
        assert out.startswith(f"https://example.com/cb/{marker('encoded_secret')}"), out
        assert all(blob[i : i + 8] not in out for i in range(0, len(blob) - 8, 4)), out


def test_benign_base64_after_a_separator_stays(redactor: Redactor) -> None:
    rng = random.Random(4)
    for i in range(300):
        words = base64.b64encode(f"report {i}: all checks passed, nothing to see".encode())
        image = base64.b64encode(rng.randbytes(rng.randint(30, 600)))
        for blob in (words.decode(), image.decode(), image.decode().rstrip("=")):
            for text in (f"https://example.com/files/{blob}", f"/tmp/{blob}/x", f"id_{blob}"):
                assert redactor.redact_text(text) is text, text


# -- exceptions -----------------------------------------------------------------------------


def test_redact_exception_names_type_and_hides_secrets(redactor: Redactor) -> None:
    gh = "ghp_" + _rand(ALNUM, 36)
    msg = redactor.redact_exception(ValueError(f"bad credentials {gh} for user"))
    assert msg == f"ValueError: bad credentials {marker('github_token')} for user"
    assert redactor.redact_exception(KeyError()) == "KeyError"
    long = redactor.redact_exception(RuntimeError("x" * 10_000 + gh))
    assert len(long) <= 600 and gh not in long and "truncated" in long

    class Weird(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert redactor.redact_exception(Weird()) == "Weird: <unprintable message>"


# -- previews -------------------------------------------------------------------------------


def test_preview_bounds() -> None:
    assert preview("short", 10) == "short"
    text = "abcdefghij" * 100
    p = preview(text, 80)
    assert len(p) <= 80
    assert p.startswith("abcdefghij")
    assert "truncated" in p and "1000" in p
    assert preview(text, 5) == "abcde"
    assert preview("", 0) == ""
    with pytest.raises(ValueError):
        preview("x", -1)


# -- artifacts ------------------------------------------------------------------------------


def test_artifact_store_is_content_addressed(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    text = "h\u00e9llo w\u00f6rld\n" * 1000
    art = store.put(text)
    data = text.encode()
    digest = hashlib.sha256(data).hexdigest()
    assert art == Artifact(
        path=f"artifacts/{digest[:2]}/{digest}.txt", chars=len(text), bytes=len(data),
        sha256=digest,
    )
    assert not os.path.isabs(art.path)
    assert (tmp_path / art.path).read_bytes() == data
    assert store.read(digest) == text


def test_artifact_store_dedups_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    first = store.put("same content")
    path = tmp_path / first.path
    stat1 = path.stat()
    second = store.put("same content")
    assert second == first
    assert path.stat().st_ino == stat1.st_ino  # not rewritten
    store.put("other content")
    files = sorted(p.name for p in (tmp_path / "artifacts").rglob("*") if p.is_file())
    assert len(files) == 2 and all(f.endswith(".txt") and not f.startswith(".") for f in files)


def test_artifact_store_concurrent_puts_are_atomic(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "home" / "artifacts", relative_to=tmp_path)
    text = "x" * 200_000 + "end"
    results: list[Artifact] = []

    def put() -> None:
        results.append(store.put(text))

    threads = [threading.Thread(target=put) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.path for r in results}) == 1
    assert results[0].path.startswith("home/artifacts/")
    assert (tmp_path / results[0].path).read_text() == text
    leftovers = [p for p in (tmp_path / "home").rglob("*.tmp")]
    assert leftovers == []


def test_artifact_store_rejects_bad_digests(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    with pytest.raises(ValueError):
        store.read("../../etc/passwd")


def test_no_rule_finds_anything_in_text_shorter_than_a_registered_value() -> None:
    """_redact_text skips text of 1-3 characters; this is why that is safe."""
    import itertools

    from tooltrace.redaction._detectors import ASCII_LOWER as _ASCII_LOWER
    from tooltrace.redaction._detectors import CS_ANCHORS as _CS_ANCHORS
    from tooltrace.redaction._detectors import LC_ANCHORS as _LC_ANCHORS
    from tooltrace.redaction._detectors import detect as _detect
    from tooltrace.redaction._encoded import B64_RUN as _B64_RUN
    from tooltrace.redaction._encoded import PCT_TOKEN as _PCT_TOKEN
    from tooltrace.redaction._redactor import MIN_REGISTERED_CHARS as _MIN_REGISTERED_CHARS

    assert _MIN_REGISTERED_CHARS == 4
    with pytest.raises(ValueError):
        Redactor().register_value("abc")
    alphabet = [chr(c) for c in range(32, 127)] + ["é", "ß", "\u00a0", "\u2028"]
    for n in (1, 2, 3):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            # The detectors run only where an anchor is found (as in _redact_text).
            low = text.lower() if text.isascii() else text.translate(_ASCII_LOWER)
            if _CS_ANCHORS.search(text) or _LC_ANCHORS.search(low):
                assert _detect(text)[1] == 0, text
            assert _B64_RUN.search(text) is None, text
            m = _PCT_TOKEN.search(text)  # decodes to at most one character
            assert m is None or len(m.group()) <= 3, text


def test_is_clean_agrees_with_redact_text_and_forgets_on_register() -> None:
    r = Redactor()
    run = "run-2026-12-04.build:7"
    aws = "AKIA" + "Q3EGRIT5NLKW7XPA"
    assert r.is_clean(run) and r.is_clean(run)  # the second answer is the remembered one
    assert not r.is_clean(aws) and not r.is_clean(aws)
    assert r.is_clean("x" * 300)  # longer than what is remembered: decided each time
    r.register_value("build:7")
    assert not r.is_clean(run)  # registered after the verdict: the verdict is not kept
    assert r.redact_text(run) != run


def test_a_run_id_or_principal_that_became_a_secret_is_refused(tmp_path: Path) -> None:
    from tooltrace import Principal, Status, ToolCall, ToolRegistry, tool

    @tool()
    def ping() -> str:
        """Answer pong."""
        return "pong"

    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", sinks=[])
    reg.register(ping)
    who = Principal(user="ops-deployer")
    assert reg.call(ToolCall("ping", {}, run_id="deploy-42")).status is Status.OK
    assert reg.call(ToolCall("ping", {}, run_id="r1", principal=who)).status is Status.OK
    reg.redactor.register_value("deploy-42")
    reg.redactor.register_value("ops-deployer")
    env = reg.call(ToolCall("ping", {}, run_id="deploy-42"))
    assert env.status is Status.REJECTED and "run_id" in env.summary
    env = reg.call(ToolCall("ping", {}, run_id="r2", principal=who))
    assert env.status is Status.REJECTED and "principal" in env.summary


def test_attributes_are_redacted_as_a_mapping_whether_or_not_their_verdicts_are_remembered(
) -> None:
    """Span attributes come with call after call: what the redactor remembers of their keys and
    values (``is_plain_key``, ``is_clean``) gives what redacting them whole gives, and a value
    registered later is redacted in attributes that were clean before."""
    from tooltrace import ToolRegistry
    from tooltrace.pipeline._sanitise import clean_attributes

    reg = ToolRegistry()
    build = "0f3a9c2e4b5d6e7f8a9b0c1d2e3f4a5b"  # hex: a base64 run, decoded and scanned
    plain = {"build.digest": build, "network.transport": "pipe", "jsonrpc.request.id": "12",
             "retry": 3, "cached": True}
    for _ in range(2):  # the second time from the remembered verdicts
        assert clean_attributes(reg.environment, plain) == plain
    aws = "AKIA" + "Q3EGRIT5NLKW7XPA"
    tainted = {**plain, "note": f"key {aws}", "aws_secret_access_key": "looks-harmless",
               "mcp.session.id": "s-1", "pin_code": 1234, f"x_{aws}": "y"}
    for _ in range(2):
        got = clean_attributes(reg.environment, tainted)
        whole = reg.redactor.redact(tainted)[0]
        assert got == {k: v for k, v in whole.items() if k in tainted}  # less the secret key
        assert aws not in got["note"] and got["aws_secret_access_key"] != "looks-harmless"
        assert got["mcp.session.id"] != "s-1" and len(got) == len(tainted) - 1
        assert {k: got[k] for k in plain} == plain
    reg.redactor.register_value(build)
    assert clean_attributes(reg.environment, plain)["build.digest"] != build
    reg.redactor = Redactor()  # another redactor, other rules: nothing remembered carries over
    assert clean_attributes(reg.environment, plain) == plain
    reg.redactor = r = Redactor(extra_values=["pipe-secret"])
    assert clean_attributes(reg.environment, {"network.transport": "pipe-secret"}) == {
        "network.transport": r.redact_text("pipe-secret")}
    for i in range(5000):  # request ids never repeat: a full memory starts over
        assert clean_attributes(reg.environment, {"jsonrpc.request.id": f"r-{i}"}) == {
            "jsonrpc.request.id": f"r-{i}"}
    assert 0 < len(reg.environment.attributes.for_redactor(r)) <= 4096
    reg.redactor.register_value(build)
    r = reg.redactor
    assert r.is_plain_key("build.digest") and not r.is_plain_key("aws_secret_access_key")
    assert not r.is_plain_key(f"x_{aws}")  # the key holds a secret itself


def test_a_full_memory_of_clean_texts_starts_over() -> None:
    """``is_clean`` remembers at most 4,096 verdicts; texts that never repeat (request ids)
    cannot keep a later text's verdict from being remembered."""
    r = Redactor()
    for i in range(5000):
        assert r.is_clean(f"request-{i}")
    assert 0 < len(r._plain) <= 4096
    assert r.is_clean("late-session-id") and "late-session-id" in r._plain
