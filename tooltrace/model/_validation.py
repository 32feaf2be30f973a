"""JSON Schema validation of tool arguments, and parsing of raw tool calls.

Each schema is checked when its tool is registered: in one walk when it is made of the keywords
tools use (``_schemacheck``), else against its metaschema. It is compiled into a fast
validator (``fastjsonschema`` generates Python code for it) once, when a call first needs it; a
schema the walk did not vouch for is compiled at registration, so whatever it could not compile
is refused there. Validation messages are rebuilt so they never echo an argument's value: a
model that put a secret in the wrong field must not see it come back in the error, and neither
may any sink.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from ..exceptions import InvalidSchemaError, MalformedCallError
from ..redaction import default_redactor
from ._schemacheck import plainly_valid

if TYPE_CHECKING:
    import fastjsonschema

__all__ = [
    "ArgumentsError",
    "CompiledSchema",
    "compile_schema",
    "parse_tool_call",
]

MAX_CALL_BYTES = 8 * 1024 * 1024
MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class ArgumentsError:
    """Why arguments did not validate: a JSON path, the rule broken, a value-free message."""

    path: str
    rule: str
    message: str


class CompiledSchema:
    """A checked arguments schema and its validator (compiled when a call first needs it, unless
    given)."""

    __slots__ = ("_fills", "_flat", "_tool", "_validate", "schema")

    def __init__(
        self,
        schema: Mapping[str, Any],
        validate: Callable[[Any], Any] | None = None,
        *,
        tool: str = "",
    ) -> None:
        self.schema = schema
        self._validate = validate
        self._tool = tool
        # The compiled validator writes only defaults into the data: a schema without any
        # validates the caller's mapping as it is, with no copy.
        self._fills = _has_default(schema)
        self._flat = _flat_shape(schema)

    def validate(self, arguments: dict[str, Any]) -> tuple[dict[str, Any], ArgumentsError | None]:
        """Return ``(arguments with defaults filled in, None)`` or ``(arguments, error)``.

        The input mapping is never mutated; when the schema has no defaults the returned
        arguments may be the input mapping itself.
        """
        flat = self._flat
        if flat is not None and type(arguments) is dict:
            # Flat schemas of plain types (most tools): accept what plainly conforms in one
            # pass; anything else (a wrong type, a missing or unknown key, a float standing
            # for an integer) goes to the full validator, which decides and explains.
            types, required, closed = flat
            for k, v in arguments.items():
                allowed = types.get(k)
                if allowed is None:
                    if closed:
                        break
                elif type(v) not in allowed:
                    break
            else:
                for k in required:
                    if k not in arguments:
                        break
                else:
                    return arguments, None
        validate = self._validate
        if validate is None:
            try:
                validate = self._validate = _compile(self.schema, self._tool)
            except InvalidSchemaError:
                # The registration walk vouches that these schemas compile (a property test
                # pins it); should one not, its calls are refused, never run unchecked.
                return arguments, ArgumentsError(
                    "$", "schema", "the tool's arguments schema cannot be compiled"
                )
        try:
            if not self._fills:
                data: dict[str, Any] = arguments if type(arguments) is dict else dict(arguments)
            elif _has_nested(arguments):
                data = copy.deepcopy(arguments)  # RecursionError on absurd nesting: below
            else:
                data = dict(arguments)
            out = validate(data)
        except _value_exception() as exc:  # evaluated only when the validator raised
            return arguments, _sanitise(exc)
        except RecursionError:
            return arguments, ArgumentsError("$", "depth", "arguments are nested too deeply")
        if not isinstance(out, dict):
            return arguments, ArgumentsError("$", "type", "arguments must be an object")
        return out, None


def _has_nested(arguments: Mapping[str, Any]) -> bool:
    # fastjsonschema fills defaults in place, also inside nested objects: copy only when needed.
    return any(isinstance(v, dict | list) for v in arguments.values())


_PLAIN_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
_FLAT_TOP = frozenset(
    {"type", "properties", "required", "additionalProperties", "description", "title", "$schema"}
)
_FLAT_PROP = frozenset({"type", "description", "title"})


def _flat_shape(
    schema: Mapping[str, Any],
) -> tuple[dict[str, frozenset[type]], tuple[str, ...], bool] | None:
    """``({property: exact types}, required, closed)`` when the schema is an object of
    plain-typed properties and nothing else, else None (the full validator always runs)."""
    if not set(schema) <= _FLAT_TOP or schema.get("type", "object") != "object":
        return None
    props = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if (
        not isinstance(props, Mapping)
        or not isinstance(required, list)
        or extra
        not in (
            True,
            False,
        )
    ):
        return None
    types: dict[str, frozenset[type]] = {}
    for name, sub in props.items():
        if not isinstance(sub, Mapping) or not set(sub) <= _FLAT_PROP or "type" not in sub:
            return None
        names = sub["type"] if isinstance(sub["type"], list) else [sub["type"]]
        allowed: set[type] = set()
        for n in names:
            if n not in _PLAIN_TYPES:
                return None
            allowed.update(_PLAIN_TYPES[n])
        types[name] = frozenset(allowed)
    if not all(isinstance(r, str) for r in required):
        return None
    return types, tuple(required), extra is False


def _has_default(schema: Any) -> bool:
    """Whether a ``default`` keyword appears anywhere in the schema (a property that happens to
    be named "default" also counts: that only costs a copy)."""
    if isinstance(schema, Mapping):
        return "default" in schema or any(_has_default(v) for v in schema.values())
    if isinstance(schema, list | tuple):
        return any(_has_default(v) for v in schema)
    return False


_RULE_TEXT = {
    "type": "has the wrong type",
    "required": "is missing a required property",
    "additionalProperties": "has a property the schema does not allow",
    "enum": "is not one of the allowed values",
    "const": "is not the allowed value",
    "pattern": "does not match the required pattern",
    "format": "is not in the required format",
    "minLength": "is too short",
    "maxLength": "is too long",
    "minimum": "is too small",
    "maximum": "is too large",
    "exclusiveMinimum": "is too small",
    "exclusiveMaximum": "is too large",
    "minItems": "has too few items",
    "maxItems": "has too many items",
    "uniqueItems": "has duplicate items",
    "minProperties": "has too few properties",
    "maxProperties": "has too many properties",
    "anyOf": "matches none of the allowed shapes",
    "oneOf": "does not match exactly one allowed shape",
    "not": "matches a shape that is not allowed",
    "multipleOf": "is not a multiple of the required number",
}

_PATH_SAFE = re.compile(r"[^A-Za-z0-9_.\[\]$-]")


def _sanitise(exc: fastjsonschema.JsonSchemaValueException) -> ArgumentsError:
    rule = str(exc.rule or "invalid")
    path = str(exc.name or "data")
    path = "$" + path[4:] if path.startswith("data") else path
    # Property names come from the caller: redacted, then cut.
    path = default_redactor().bounded(_PATH_SAFE.sub("?", path), 120)
    text = _RULE_TEXT.get(rule, "is invalid")
    definition = exc.rule_definition
    if rule == "type":
        text = f"must be {definition}" if isinstance(definition, str | list) else text
    elif rule == "required" and isinstance(definition, list):
        text = f"must have properties {', '.join(map(str, definition))}"[:200]
    elif rule in ("minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems"):
        text = f"{text} (limit {definition})"
    elif rule == "enum" and isinstance(definition, list) and len(definition) <= 20:
        text = f"must be one of {', '.join(map(str, definition))}"[:200]
    return ArgumentsError(path, rule, f"argument {path} {text}")


def compile_schema(schema: Mapping[str, Any], *, tool: str) -> CompiledSchema:
    """Check ``schema`` (an object schema valid under its metaschema) and prepare its validator;
    raise ``InvalidSchemaError`` saying where it is wrong."""
    if not isinstance(schema, Mapping):
        raise InvalidSchemaError(f"tool {tool!r}: the arguments schema must be an object")
    if schema.get("type", "object") != "object":
        raise InvalidSchemaError(f"tool {tool!r}: the arguments schema must have type object")
    plain = dict(schema)
    if plainly_valid(plain):
        return CompiledSchema(schema, tool=tool)
    _check_metaschema(plain, tool)
    return CompiledSchema(schema, _compile(plain, tool), tool=tool)


def _check_metaschema(schema: dict[str, Any], tool: str) -> None:
    from jsonschema import exceptions as js_exceptions
    from jsonschema import validators

    try:
        cls = validators.validator_for(schema)
        cls.check_schema(schema)
    except js_exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise InvalidSchemaError(
            f"tool {tool!r}: arguments schema is invalid at {where}: {exc.message[:200]}"
        ) from None


def _value_exception() -> type[fastjsonschema.JsonSchemaValueException]:
    """fastjsonschema's "the data is invalid" exception (the package loads with the first
    validator a call needs, not with tooltrace)."""
    import fastjsonschema

    return fastjsonschema.JsonSchemaValueException


def _compile(schema: Mapping[str, Any], tool: str) -> Callable[[Any], Any]:
    import fastjsonschema

    try:
        return fastjsonschema.compile(dict(schema), use_default=True)  # type: ignore[no-any-return]
    except fastjsonschema.JsonSchemaDefinitionException as exc:
        raise InvalidSchemaError(
            f"tool {tool!r}: arguments schema cannot be compiled: {exc}"
        ) from None
    except Exception as exc:
        raise InvalidSchemaError(
            f"tool {tool!r}: arguments schema cannot be compiled ({type(exc).__name__})"
        ) from None


_CALL_FIELDS = frozenset(
    {"name", "arguments", "call_id", "id", "run_id", "mode", "timeout_s", "background", "type"}
)


def _depth_ok(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return False
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return True


def parse_tool_call(
    raw: str | bytes | bytearray | Mapping[str, Any],
    *,
    max_bytes: int = MAX_CALL_BYTES,
    max_depth: int = MAX_DEPTH,
    strict_fields: bool = True,
) -> dict[str, Any]:
    """Parse a model's tool call (JSON text or a mapping) into a checked plain dict.

    Accepts ``{"name": ..., "arguments": {...} | "<json>"}`` (OpenAI-style arguments as a JSON
    string too). Raises ``MalformedCallError`` with a closed-set ``reason``; never echoes values.
    """
    if isinstance(raw, bytes | bytearray | str):
        size = len(raw)
        if size > max_bytes:
            raise MalformedCallError("too_large", f"tool call is {size} bytes, limit {max_bytes}")
        if isinstance(raw, bytes | bytearray):
            try:
                raw = bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                raise MalformedCallError("encoding", "tool call is not valid UTF-8") from None
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise MalformedCallError(
                "json", f"tool call is not valid JSON ({_json_where(exc)})"
            ) from None
    else:
        obj = raw
    if not isinstance(obj, Mapping):
        raise MalformedCallError("shape", "tool call must be a JSON object")
    if strict_fields:
        unknown = sorted(
            default_redactor().bounded(str(k), 40) for k in obj if k not in _CALL_FIELDS
        )
        if unknown:
            raise MalformedCallError(
                "unknown_field", f"tool call has unknown fields: {unknown[:5]}"
            )
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise MalformedCallError("name", "tool call needs a non-empty string 'name'")
    args = obj.get("arguments", {})
    if isinstance(args, str):
        if len(args) > max_bytes:
            raise MalformedCallError("too_large", "tool call arguments are too large")
        try:
            args = orjson.loads(args) if args.strip() else {}
        except orjson.JSONDecodeError as exc:
            raise MalformedCallError(
                "json", f"tool call arguments are not valid JSON ({_json_where(exc)})"
            ) from None
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise MalformedCallError("shape", "tool call 'arguments' must be a JSON object")
    if not _depth_ok(args, max_depth):
        raise MalformedCallError("too_deep", f"tool call arguments nest deeper than {max_depth}")
    out = dict(obj)
    out["arguments"] = dict(args)
    return out


def _json_where(exc: orjson.JSONDecodeError) -> str:
    return f"line {exc.lineno} column {exc.colno}"
