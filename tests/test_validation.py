"""Schema compilation and validation, and parsing of raw tool calls."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooltrace import InvalidSchemaError, MalformedCallError, ToolCall
from tooltrace.model import compile_schema, parse_tool_call

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "mode": {"enum": ["r", "w"], "default": "r"},
        "opts": {"type": "object", "properties": {"n": {"type": "integer", "default": 3}}},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def test_defaults_are_filled_without_mutating_input() -> None:
    cs = compile_schema(SCHEMA, tool="t")
    args: dict[str, Any] = {"path": "a.txt", "opts": {}}
    out, err = cs.validate(args)
    assert err is None and out == {"path": "a.txt", "mode": "r", "opts": {"n": 3}}
    assert args == {"path": "a.txt", "opts": {}}


@pytest.mark.parametrize(
    ("args", "rule"),
    [({}, "required"), ({"path": 1}, "type"), ({"path": ""}, "minLength"),
     ({"path": "a", "mode": "x"}, "enum"), ({"path": "a", "extra": 1}, "additionalProperties")],
)
def test_errors_name_the_rule_and_never_echo_the_value(args: dict[str, Any], rule: str) -> None:
    secret = "ghp_" + "Z" * 36
    if "path" in args and isinstance(args["path"], str) and args["path"]:
        args = {**args, "extra_secret": secret} if rule == "additionalProperties" else args
    cs = compile_schema(SCHEMA, tool="t")
    _, err = cs.validate(args)
    assert err is not None and err.rule == rule
    assert secret not in err.message and "argument $" in err.message


def test_value_of_wrong_type_is_not_echoed() -> None:
    cs = compile_schema({"type": "object", "properties": {"n": {"type": "integer"}}}, tool="t")
    _, err = cs.validate({"n": "sk_live_abcdefghijklmnopqrstuvwx"})
    assert err is not None and "sk_live" not in err.message and "integer" in err.message


@pytest.mark.parametrize(
    "schema",
    [{"type": "array"}, {"type": "object", "properties": {"x": {"type": "nope"}}},
     {"type": "object", "required": "x"}, {"type": "object", "minProperties": -1}],
)
def test_invalid_schemas_are_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(InvalidSchemaError):
        compile_schema(schema, tool="t")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [("{", "json"), (b"\xff", "encoding"), ("[]", "shape"), ('{"arguments": {}}', "name"),
     ('{"name": "x", "arguments": 3}', "shape"), ('{"name": "x", "zzz": 1}', "unknown_field"),
     ('{"name": "x", "arguments": "{bad"}', "json"),
     ('{"name": "x", "arguments": ' + "[" * 100 + "]" * 100 + "}", "shape")],
)
def test_malformed_calls_raise_typed_errors(raw: str | bytes, reason: str) -> None:
    with pytest.raises(MalformedCallError) as ei:
        ToolCall.parse(raw)
    assert ei.value.reason == reason


def test_size_and_depth_limits() -> None:
    with pytest.raises(MalformedCallError) as ei:
        parse_tool_call('{"name": "x", "arguments": {"a": "' + "x" * 100 + '"}}', max_bytes=50)
    assert ei.value.reason == "too_large"
    deep: dict[str, Any] = {}
    cur = deep
    for _ in range(80):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(MalformedCallError) as ei:
        parse_tool_call({"name": "x", "arguments": deep})
    assert ei.value.reason == "too_deep"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                              lambda c: st.lists(c, max_size=4)
                              | st.dictionaries(st.text(max_size=5), c, max_size=4),
                              max_leaves=20)))
def test_parse_never_raises_anything_but_malformed(raw: Any) -> None:
    try:
        call = ToolCall.parse(raw if isinstance(raw, str | bytes | dict) else str(raw))
    except MalformedCallError:
        return
    assert isinstance(call.name, str) and isinstance(call.arguments, dict)


FLAT_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "n": {"type": "number"},
            "b": {"type": "boolean"},
            "o": {"type": ["string", "null"]},
        },
        "required": ["s", "i"],
        "additionalProperties": False,
    },
    {"type": "object", "properties": {"i": {"type": "integer"}}},  # open: extra keys allowed
]
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


@settings(max_examples=400, deadline=None)
@given(
    which=st.integers(0, len(FLAT_SCHEMAS) - 1),
    args=st.dictionaries(st.sampled_from(["s", "i", "n", "b", "o", "x"]), _VALUES, max_size=6),
)
def test_flat_schema_fast_path_agrees_with_the_full_validator(
    which: int, args: dict[str, Any]
) -> None:
    import fastjsonschema

    schema = FLAT_SCHEMAS[which]
    cs = compile_schema(schema, tool="t")
    assert cs._flat is not None  # these schemas take the one-pass check
    full = fastjsonschema.compile(schema)
    try:
        full(dict(args))
        expected_ok = True
    except fastjsonschema.JsonSchemaValueException:
        expected_ok = False
    out, err = cs.validate(args)
    assert (err is None) == expected_ok, (schema, args, err)
    if err is None:
        assert out == args


def test_schemas_with_more_than_plain_types_always_take_the_full_validator() -> None:
    assert compile_schema(SCHEMA, tool="t")._flat is None  # minLength, enum, defaults, nesting
    cs = compile_schema(
        {"type": "object", "properties": {"p": {"type": "string", "pattern": "^a"}}}, tool="t"
    )
    assert cs._flat is None
    assert cs.validate({"p": "b"})[1] is not None
