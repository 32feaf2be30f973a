"""The registration check's fast tier: every schema it vouches for passes the full 2020-12
metaschema check and compiles with fastjsonschema; what it cannot vouch for goes to the full
check; the schemas of the built-in tools and of typical ``@tool`` functions take the fast tier,
and their validators are compiled only when a call first needs them."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, Literal

import fastjsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import SchemaError, validators

from tooltrace import InvalidSchemaError, ToolCall, ToolRegistry, tool
from tooltrace.builtins import register_builtins
from tooltrace.model import CompiledSchema, compile_schema
from tooltrace.model._schemacheck import plainly_valid

_KEYS = st.sampled_from(["a", "b", "path", "é", "x y", "'", '"', "\\", "def", "$ref"])
# Values of every JSON kind and a few that JSON has not (a tuple, a set, NaN, infinity, bytes):
# the fast tier must refuse those, never vouch for them.
_ODD = st.sampled_from([(1,), frozenset({1}), float("nan"), float("inf"), b"x", Path("p")])
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 1 << 70), st.floats(allow_nan=False, width=32),
    st.text(max_size=4), _ODD,
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=6,
)
_TYPES = st.sampled_from(["string", "integer", "number", "boolean", "null", "array", "object",
                          "nope", "Integer"])
_VALUE_KEYWORDS: dict[str, st.SearchStrategy[Any]] = {
    "type": _TYPES | st.lists(_TYPES, max_size=3) | _VALUES,
    "title": st.text(max_size=4) | _VALUES,
    "description": st.text(max_size=4) | _VALUES,
    "default": _VALUES,
    "const": _VALUES,
    "enum": st.lists(_VALUES, max_size=3) | _VALUES,
    "examples": st.lists(_VALUES, max_size=2) | _VALUES,
    "deprecated": st.booleans() | _VALUES,
    "required": st.lists(_KEYS, max_size=3) | _VALUES,
    "pattern": st.sampled_from(["^a", "[", "a{2,}", "(?P<x>a)", "\\d+", "(", "\\p{L}"]) | _VALUES,
    "minLength": st.integers(-2, 5) | _VALUES,
    "maxItems": st.integers(-2, 5) | st.floats(0, 3) | _VALUES,
    "uniqueItems": st.booleans() | _VALUES,
    "minimum": st.integers(-5, 5) | st.floats() | _VALUES,
    "exclusiveMaximum": st.floats(allow_nan=False) | _VALUES,
    "multipleOf": st.integers(-2, 3) | st.floats(-1, 2) | _VALUES,
    "format": st.sampled_from(["date-time", "uri", "nope", "regex", "email"]) | _VALUES,
    "nullable": st.booleans(),
    "$ref": st.sampled_from(["#/$defs/a", "#/$defs/missing", "#/definitions/a", "#",
                             "http://127.0.0.1:1/x", "#/properties/a"]),
}


def _schemas(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keyword = st.sampled_from(sorted(_VALUE_KEYWORDS)).flatmap(
        lambda k: st.tuples(st.just(k), _VALUE_KEYWORDS[k]))
    nested = st.one_of(
        st.tuples(st.sampled_from(["items", "additionalProperties", "not", "contains"]), inner),
        st.tuples(st.sampled_from(["anyOf", "oneOf", "allOf"]), st.lists(inner, max_size=3)),
        st.tuples(st.sampled_from(["properties", "$defs", "definitions"]),
                  st.dictionaries(_KEYS, inner, max_size=3)),
    )
    return st.lists(keyword | nested, max_size=5).map(dict) | st.booleans()


_SCHEMA = st.recursive(st.booleans() | st.just({}), _schemas, max_leaves=12)
_DIALECT = st.sampled_from([
    None, "https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema", "http://json-schema.org/draft-04/schema#",
    "https://json-schema.org/draft/2019-09/schema",
])
_TOP = st.tuples(st.dictionaries(_KEYS, _SCHEMA, max_size=4), _schemas(_SCHEMA), _DIALECT).map(
    lambda t: {**(t[1] if isinstance(t[1], dict) else {}), "type": "object",
               "properties": t[0], **({"$schema": t[2]} if t[2] else {})}
)


def _metaschema_check(schema: dict[str, Any]) -> None:
    """The full check, as registration runs it: the metaschema the schema names."""
    validators.validator_for(schema).check_schema(schema)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_TOP)
def test_a_schema_the_fast_tier_vouches_for_passes_the_metaschema_and_compiles(
    schema: dict[str, Any],
) -> None:
    if not plainly_valid(schema):
        return
    _metaschema_check(schema)
    validate = fastjsonschema.compile(schema, use_default=True)
    for value in ({}, {"a": 1}, {"path": "x", "b": [None]}):
        try:
            validate(dict(value))
        except fastjsonschema.JsonSchemaValueException:
            pass


@settings(max_examples=600, deadline=None)
@given(schema=_TOP)
def test_compile_schema_refuses_exactly_what_the_metaschema_refuses(
    schema: dict[str, Any],
) -> None:
    try:
        _metaschema_check(schema)
        valid = True
    except SchemaError:
        valid = False
    except Exception:  # the metaschema check itself cannot judge it (an odd Python value)
        return
    if not valid:
        with pytest.raises(InvalidSchemaError):
            compile_schema(schema, tool="t")
        return
    try:
        compile_schema(schema, tool="t")
    except InvalidSchemaError as exc:
        # Valid under the metaschema but not compilable: refused at registration, as before.
        assert "cannot be compiled" in str(exc)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"x": {"type": "nope"}}},
    {"type": "object", "required": ["a", "a"]},
    {"type": "object", "properties": {"x": {"minLength": -1}}},
    {"type": "object", "properties": {"x": {"pattern": "["}}},
    {"type": "object", "properties": {"x": {"items": [{"type": "string"}]}}},
    {"type": "object", "properties": {"x": {"anyOf": []}}},
    {"type": "object", "properties": {"x": {"multipleOf": 0}}},
])
def test_the_fast_tier_never_vouches_for_an_invalid_schema_and_the_full_check_refuses_it(
    schema: dict[str, Any],
) -> None:
    assert not plainly_valid(schema)
    with pytest.raises(InvalidSchemaError, match="invalid at"):
        compile_schema(schema, tool="t")


def test_a_reference_the_compiler_cannot_resolve_is_refused_at_registration() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    assert not plainly_valid(schema)
    with pytest.raises(InvalidSchemaError, match="cannot be compiled"):
        compile_schema(schema, tool="t")


def test_a_schema_that_fails_to_compile_on_first_use_refuses_the_call_with_a_clear_rule() -> None:
    cs = CompiledSchema({"type": "object", "properties": {"a": {"$ref": "#/nope"}}}, tool="t")
    _, err = cs.validate({"a": 1})
    assert err is not None and err.rule == "schema" and "cannot be compiled" in err.message


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@tool
def typical(
    path: Annotated[str, "a workspace path"],
    count: int = 3,
    ratio: float | None = None,
    tags: list[str] | None = None,
    mode: Literal["fast", "slow"] = "fast",
    colour: Colour = Colour.RED,
    meta: dict[str, int] | None = None,
) -> str:
    """A tool with the usual kinds of parameters."""
    return path


def test_builtin_and_typical_tool_schemas_take_the_fast_tier(tmp_path: Path) -> None:
    registry = register_builtins(ToolRegistry(workspace=tmp_path))
    try:
        names = [r.name for r in registry.resolution()]
        assert len(names) >= 6
        for name in names:
            definition = registry.definition(name)
            assert definition is not None
            assert plainly_valid(dict(definition.parameters)), name
    finally:
        registry.shutdown()
    assert plainly_valid(dict(typical.definition.parameters))
    # A schema as pydantic writes it: titles, $defs and references, anyOf with null.
    generated = {
        "$defs": {"Item": {"properties": {"n": {"title": "N", "type": "integer"}},
                           "required": ["n"], "title": "Item", "type": "object"}},
        "properties": {"items": {"items": {"$ref": "#/$defs/Item"}, "title": "Items",
                                 "type": "array"},
                       "note": {"anyOf": [{"type": "string"}, {"type": "null"}],
                                "default": None, "title": "Note"}},
        "required": ["items"], "title": "addArguments", "type": "object",
    }
    assert plainly_valid(generated)
    # As zod writes it (TypeScript MCP servers): draft-07, formats.
    zod = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
           "properties": {"url": {"type": "string", "format": "uri"},
                          "when": {"type": "string", "format": "date-time"}},
           "required": ["url"], "additionalProperties": False}
    assert plainly_valid(zod)
    # Draft-04 reads some keywords differently (a boolean exclusiveMinimum): the full check.
    assert not plainly_valid({**zod, "$schema": "http://json-schema.org/draft-04/schema#"})


def test_validators_are_compiled_when_a_call_first_needs_them(tmp_path: Path) -> None:
    registry = ToolRegistry(workspace=tmp_path)
    try:
        registry.register(typical)
        entry = registry.environment.tools.active["typical"]
        assert entry.schema._validate is None  # registered, not yet compiled
        env = registry.call(ToolCall("typical", {"path": "a", "count": "many"}))
        assert env.status == "rejected" and env.reject_stage == "params"
        assert entry.schema._validate is not None
        env = registry.call(ToolCall("typical", {"path": "a", "tags": ["x"], "mode": "slow"}))
        assert env.status == "ok" and env.data == "a"
    finally:
        registry.shutdown()

