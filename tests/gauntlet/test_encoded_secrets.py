"""Regression: secrets that travel base64- or percent-encoded are redacted like raw ones (in
text and in mapping keys), and benign encoded text (images, digests, ids, ordinary URLs) is left
exactly as it was."""

from __future__ import annotations

import base64
import hashlib
import json
import random
from urllib.parse import quote, quote_plus

import pytest
import uuid_utils

from tooltrace.redaction import Redactor

from ._canaries import ENCODINGS, KINDS, Finder, make_canaries


@pytest.mark.parametrize("encoding", ["base64", "url"])
def test_every_kind_encoded_is_redacted(encoding: str) -> None:
    canaries = make_canaries(len(KINDS) * 3, seed=11)
    red = Redactor(extra_values=[c.secret for c in canaries if c.registered])
    finder = Finder(canaries)
    fn = ENCODINGS[encoding]
    for c in canaries:
        placed = fn(c.text)
        assert finder.find(placed.encode()), c.kind  # the placed text holds the canary
        out = red.redact_text(placed)
        assert not finder.find(out.encode()), (c.kind, placed[:120], out[:200])
        assert "[REDACTED:" in out or "%5BREDACTED%3A" in out


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_every_kind_as_a_mapping_key_is_redacted(encoding: str) -> None:
    # Keys are text like values; a key that names a secret keeps its value rule as well.
    canaries = make_canaries(len(KINDS) * 3, seed=12)
    red = Redactor(extra_values=[c.secret for c in canaries if c.registered])
    finder = Finder(canaries)
    fn = ENCODINGS[encoding]
    for c in canaries:
        placed = fn(c.text)
        value = {placed: c.text, "nested": [{placed: {"note": placed}}]}
        out, n = red.redact(value)
        assert n >= 3, (c.kind, placed[:120])
        assert not finder.find(json.dumps(out).encode()), (c.kind, placed[:120], out)
        if c.kind == "mapping_key" and encoding == "raw" and " = " in c.text:
            # "password = <secret>": the key also names a secret, so its value goes too.
            assert next(iter(out.values())) == "[REDACTED:secret_field]", out


def test_encoded_inside_larger_text_and_structures() -> None:
    key = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
    blob = base64.b64encode(f"[auth]\ntoken = {key}\n".encode()).decode()
    red = Redactor()
    out = red.redact_text(f"config: {blob} (from the cluster)")
    assert blob not in out and "[REDACTED:encoded_secret]" in out
    assert out.startswith("config: ") and out.endswith(" (from the cluster)")
    url = "https://api.example.com/cb?state=" + quote(f"bearer {key}", safe="")
    out = red.redact_text(url)
    assert key not in out and quote(key) not in out and "api.example.com" in out
    value, n = red.redact({"items": [{"data": blob}], "form": quote_plus(f"x=1&k={key}")})
    assert n == 2 and key not in repr(value) and blob not in repr(value)


def test_benign_encoded_text_is_untouched() -> None:
    red = Redactor()
    rng = random.Random(5)
    for i in range(500):
        png = "data:image/png;base64," + base64.b64encode(rng.randbytes(300)).decode()
        sha = hashlib.sha256(str(i).encode()).hexdigest()
        text_b64 = base64.b64encode(f"hello world number {i}, nothing secret".encode()).decode()
        for line in (
            png,
            f"sha256:{sha} id={uuid_utils.uuid7()}",
            f"payload {text_b64}",
            "https://example.com/search?q=" + quote_plus(f"tooltrace redaction {i}"),
            "https://example.com/files/" + quote(f"report {i} (final).txt"),
            "VeryLongIdentifierNameThatLooksLikeBase64ButIsNot_" + str(i),
        ):
            assert red.redact_text(line) is line, line


def test_yaml_style_value_starting_with_a_capital_is_a_secret_not_a_type() -> None:
    red = Redactor()
    for value in ("QPegENBQDqJDSuzHE0dRymCiarm83yM4", "Zx81kLmQ0pRt5vWy2AbCdEfGh3JkLmN4"):
        for key in ("api_key", "signing_key", "client_secret", "DB_PASSWORD"):
            assert value not in red.redact_text(f"{key}: {value}"), key
    for annotation in ("api_key: SecretStr", "password: HttpUrl", "token: UUID"):
        assert red.redact_text(annotation) == annotation
