"""The ``Redactor`` on values: registration, cuts, encoded text, nested values and their bounds."""

from __future__ import annotations

import base64
import collections
import types
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import pytest

from tooltrace.redaction import Redactor, marker

TOKEN = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
AWS = "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_SHOWN = f"aws_secret_access_key={marker('aws_secret_key')}"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# -- cuts -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit", "cut"),
    [
        ("abcdef", 100, "abcdef"),
        ("abcdef", 7, "abcdef"),
        ("abcdef", 6, "abcdef"),  # a text of exactly the limit is whole
        ("abcdef", 5, "ab..."),
        ("abcdef", 4, "a..."),
        ("abcdef", 3, "..."),
        ("abcdef", 2, "ab"),  # the dots do not fit: a plain cut
        ("abcdef", 1, "a"),
        ("abcdef", 0, ""),
        ("", 0, ""),
        ("abcdefghijklmnopqrst", 10, "abcdefg..."),
        ("abcdefghijklmnopqrst", 19, "abcdefghijklmnop..."),
        ("abcdefghijklmnopqrst", 20, "abcdefghijklmnopqrst"),
    ],
)
def test_bounded_text_is_at_most_the_limit_and_marks_its_cut(
    text: str, limit: int, cut: str
) -> None:
    out = Redactor().bounded(text, limit)
    assert out == cut
    assert len(out) <= limit


def test_bounded_refuses_a_negative_limit() -> None:
    with pytest.raises(ValueError, match="limit"):
        Redactor().bounded("abcdef", -1)


def test_bounded_redacts_a_secret_before_cutting_through_it() -> None:
    r = Redactor()
    text = f"key {TOKEN} and then more words"
    # cut first, "key ghp_aB3dE6gH9..." would keep the token's head
    assert r.bounded(text, 20) == "key [REDACTED:git..."
    assert r.bounded(text, 200) == f"key {marker('github_token')} and then more words"
    assert "ghp_" not in r.bounded(text, 8) and r.bounded(text, 8) == "key [..."


# -- registered values ------------------------------------------------------------------------


def test_a_redactor_takes_its_options_by_name() -> None:
    with pytest.raises(TypeError):
        Redactor(["a-registered-secret"])  # type: ignore[call-arg]
    assert Redactor(extra_values=["a-registered-secret"]).redact_text(
        "x a-registered-secret y") == f"x {marker('registered')} y"


def test_a_registered_value_of_the_minimum_length_is_kept_and_redacted_even_alone() -> None:
    r = Redactor()
    for short in ("abc", " abc ", "ab\n", "\t\n  ", ""):
        with pytest.raises(ValueError, match=">= 4"):
            r.register_value(short)
    with pytest.raises(ValueError):
        r.register_value(b"abcd")  # type: ignore[arg-type]
    assert r.generation == 0  # a refused value is not registered
    r.register_value("k9#z")  # 4 characters: accepted
    assert r.redact_text("k9#z") == marker("registered")  # a text of exactly 4 characters
    assert r.redact_text("pin k9#z.") == f"pin {marker('registered')}."
    assert r.redact_text("k9#") == "k9#"
    assert r.redact("k9#z") == (marker("registered"), 1)


def test_generation_counts_the_values_registered() -> None:
    r = Redactor()
    assert r.generation == 0
    r.register_value("first-secret")
    assert r.generation == 1
    r.register_value("first-secret")  # registered again: the rules are rebuilt all the same
    r.register_value("second-secret")
    assert r.generation == 3
    assert Redactor(extra_values=["one-secret", "two-secret"]).generation == 2


def test_a_registered_value_that_extends_another_is_redacted_whole() -> None:
    for order in (["hunter22", "hunter22-prod"], ["hunter22-prod", "hunter22"]):
        r = Redactor(extra_values=order)
        assert r.redact_text("pw hunter22-prod, then hunter22") == (
            f"pw {marker('registered')}, then {marker('registered')}")


def test_is_clean_is_true_exactly_when_redaction_gives_the_same_text() -> None:
    r = Redactor()
    assert r.is_clean("plain words") and not r.is_clean(f"t {TOKEN}")
    # A text may redact to itself: a registered value that reads like a marker.
    shown = marker("registered")
    r.register_value(shown)
    assert r.redact_text(shown) == shown
    assert r.is_clean(shown) and r.is_clean(shown) and r.is_clean(_Header(shown))


# -- encoded text -----------------------------------------------------------------------------


def test_a_percent_encoded_secret_is_redacted_in_place_and_stays_readable() -> None:
    r = Redactor()
    url = "https://example.com/cb?q=" + quote(AWS, safe="") + "&page=2"
    assert r.redact_text(url) == f"https://example.com/cb?q={AWS_SHOWN}&page=2"
    assert r.redact(url) == (f"https://example.com/cb?q={AWS_SHOWN}&page=2", 1)
    # With the detectors off a registered value is looked for in decoded text too.
    reg = Redactor(detectors=False, extra_values=["s3cr3t value"])
    assert reg.redact_text("q=" + quote(quote("s3cr3t value"))) == (
        f"q={marker('registered')}")


def test_encoded_text_is_opened_two_layers_deep_and_no_deeper() -> None:
    """Each layer of encoding costs a decoding: two are opened, a third is left as it is."""
    r = Redactor()
    once, twice = _b64(f"token={TOKEN}"), _b64(_b64(f"token={TOKEN}"))
    assert r.redact(f"blob {once} end") == (f"blob {marker('encoded_secret')} end", 1)
    assert r.redact(f"blob {twice} end") == (f"blob {marker('encoded_secret')} end", 1)
    thrice = f"blob {_b64(twice)} end"
    assert r.redact(thrice) == (thrice, 0)
    pct2 = "q=" + quote(quote(AWS, safe=""), safe="")
    assert r.redact_text(pct2) == f"q={AWS_SHOWN}"
    pct3 = "q=" + quote(quote(quote(AWS, safe=""), safe=""), safe="")
    assert r.redact_text(pct3) == pct3


def test_thousands_of_layers_of_percent_encoding_are_returned_as_they_are() -> None:
    text = "%" + "25" * 3000 + "41"  # "%41" ("A") escaped 3,000 times over
    r = Redactor()
    assert r.redact_text(text) is text
    assert r.redact({"q": text}) == ({"q": text}, 0)


def test_a_secret_after_a_harmless_blob_in_the_same_run_is_redacted() -> None:
    r = Redactor()
    # 36 bytes: no padding, so the harmless blob, a "/" and the secret make one base64 run
    harmless = _b64("report: all checks passed, all fine.")
    secret = _b64(f"token={TOKEN}")
    for path in (f"{harmless}/{secret}", f"{harmless}/{harmless}/{secret}"):
        url = f"https://example.com/cb/{path}"
        head = url.rsplit("/", 1)[0]
        assert r.redact(url) == (f"{head}/{marker('encoded_secret')}", 1)


def test_harmless_encoded_looking_values_count_no_redaction() -> None:
    r = Redactor()
    digest = "0f3a9c2e4b5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5"
    image = _b64("report: all checks passed, nothing to see here at all")
    for text in (digest, image, f"https://example.com/files/{image}", "100%25 done"):
        assert r.redact(text) == (text, 0)
        value = {"digest": text, "items": [text, (text,)]}
        out, n = r.redact(value)
        assert out is value and n == 0
    value = {"a": digest, "b": _b64(f"token={TOKEN}"), "c": [image, _b64(f"token={TOKEN}")]}
    assert r.redact(value) == (
        {"a": digest, "b": marker("encoded_secret"), "c": [image, marker("encoded_secret")]}, 2)


# -- nested values ----------------------------------------------------------------------------


def _nest(inner: Any, levels: int, kind: str) -> Any:
    for _ in range(levels):
        inner = {"k": inner} if kind == "dict" else [inner] if kind == "list" else (inner,)
    return inner


def _at(value: Any, levels: int) -> Any:
    for _ in range(levels):
        value = value["k"] if isinstance(value, dict) else value[0]
    return value


@pytest.mark.parametrize("kind", ["dict", "list", "tuple"])
def test_a_container_nested_deeper_than_64_levels_is_replaced_never_left_raw(kind: str) -> None:
    r = Redactor()
    deepest = [1, 2.5, True, None, "plain words", f"t {TOKEN}"]
    # 64 levels down the container is redacted as any other: plain values kept, text redacted.
    out, n = r.redact(_nest(deepest, 64, kind))
    assert _at(out, 64) == [1, 2.5, True, None, "plain words", f"t {marker('github_token')}"]
    assert n == 1
    # One level further it is replaced whole, counted once, whatever it holds.
    for inner in (deepest, ["plain words", 7], {"note": "plain"}):
        value = _nest(inner, 65, kind)
        out, n = r.redact(value)
        assert _at(out, 65) == marker("too_deep") and n == 1
        assert TOKEN not in repr(out) and "plain words" not in repr(out)
        assert type(_at(out, 64)) is type(_at(value, 64))


def test_a_value_that_contains_itself_is_cut_at_the_depth_limit() -> None:
    loop: dict[str, Any] = {"note": "plain"}
    loop["self"] = loop
    out, n = Redactor().redact(loop)
    assert n == 1
    assert _at_key(out, "self", 64)["note"] == "plain"
    assert _at_key(out, "self", 65) == marker("too_deep")
    ring: list[Any] = ["plain"]
    ring.append(ring)
    out, n = Redactor().redact(ring)
    assert n == 1
    inner = out
    for _ in range(64):
        inner = inner[1]
    assert inner[0] == "plain" and inner[1] == marker("too_deep")


def _at_key(value: Any, key: str, levels: int) -> Any:
    for _ in range(levels):
        value = value[key]
    return value


def test_tuples_stay_tuples_and_named_tuples_come_back_as_plain_tuples() -> None:
    r = Redactor()
    pair = collections.namedtuple("pair", "name value")
    out, n = r.redact({"t": ("ok", f"t {TOKEN}"), "nt": pair("x", f"t {TOKEN}")})
    assert out == {"t": ("ok", f"t {marker('github_token')}"),
                   "nt": ("x", f"t {marker('github_token')}")}
    assert type(out["t"]) is tuple and type(out["nt"]) is tuple and n == 2

    class Rows(list[Any]):
        pass

    out, n = r.redact(Rows(["ok", f"t {TOKEN}"]))
    assert out == ["ok", f"t {marker('github_token')}"] and type(out) is list and n == 1


class _Settings(Mapping[str, Any]):
    """A read-only mapping that is not a dict."""

    def __init__(self, **items: Any) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def test_mappings_that_are_not_dicts_are_redacted_as_dicts() -> None:
    r = Redactor()
    for value in (types.MappingProxyType({"password": "hunter22", "n": 1}),
                  _Settings(password="hunter22", n=1)):
        out, n = r.redact({"settings": value})
        assert out == {"settings": {"password": marker("secret_field"), "n": 1}} and n == 1
        assert type(out["settings"]) is dict


def test_values_of_other_types_are_returned_as_they_are() -> None:
    r = Redactor()

    class Opaque:
        def __repr__(self) -> str:
            return f"Opaque({TOKEN})"

    for other in (object(), Opaque(), 3 + 4j, b"bytes"):
        assert r.redact(other) == (other, 0) and r.redact(other)[0] is other
        value = {"x": other, "l": [other], "t": (other, "plain")}
        out, n = r.redact(value)
        assert out is value and n == 0


class _Header(str):
    """A header name: equal to and hashed as any spelling of it, shown as written."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and self.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.lower())


def test_a_key_of_a_str_subclass_is_judged_and_shown_by_its_own_text() -> None:
    r = Redactor()
    first, n = r.redact({_Header("x-request-id"): "r-1", "password": "hunter22"})
    assert n == 1 and list(first) == ["x-request-id", "password"]
    out, n = r.redact({_Header("X-Request-Id"): "r-2", "password": "hunter22"})
    assert n == 1
    assert [str.__str__(k) for k in out] == ["X-Request-Id", "password"]


def test_a_text_or_key_of_a_str_subclass_never_takes_a_verdict_remembered_for_another() -> None:
    r = Redactor()
    token = TOKEN[:4] + TOKEN[4:].lower()  # a token in lower case; "GHP_..." is none
    assert r.is_clean(_Header(token.upper()))  # equal to the token under its own equality
    assert not r.is_clean(token) and not r.is_clean(token)
    assert not r.is_clean(_Header(token)) and not r.is_clean(_Header("id AKIAQ3EGRIT5NLKW7XPA"))
    assert r.is_plain_key(_Header("Note")) and r.is_plain_key(_Header("Note"))
    assert not r.is_plain_key(_Header("Password")) and not r.is_plain_key(_Header(f"k {token}"))
    out, n = r.redact({"note": f"t {token}"})
    assert n == 1 and [str.__str__(k) for k in out] == ["note"]
