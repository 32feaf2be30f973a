"""Validate OCSF events against the OCSF schema, offline.

The schema is the one the OCSF server exports (``/export/schema``), as PyPI's
``ocsf-json-schema`` ships it for each release; ``ocsf-lib`` (``ocsf.schema.from_file``)
loads it into its typed model, and ``validate`` walks an event against that model: the class
(by ``class_uid``) and its category, ``type_uid``, every attribute known to the class or object
(profile attributes only when the event lists the profile in ``metadata.profiles``), every
required attribute present, each value of its type (the scalar types' regular expressions,
ranges and lengths included), enum values among the enum's, an enum's sibling caption, and the
``at_least_one`` / ``just_one`` constraints.
"""

from __future__ import annotations

import importlib.resources
import re
from functools import cache
from typing import Any

from .components import require_module

__all__ = ["schema", "validate"]

_HINT = "pip install 'tooltrace[test]' (ocsf-lib and ocsf-json-schema)"


@cache
def schema(version: str) -> Any:
    """The OCSF schema ``version`` (an ``ocsf.schema.OcsfSchema``), from the bundled export."""
    loader = require_module("ocsf.schema", _HINT)
    require_module("ocsf_json_schema", _HINT)
    path = importlib.resources.files("ocsf_json_schema") / "ocsf" / f"{version}.json"
    return loader.from_file(str(path))


_PRIMITIVE: dict[str, tuple[type, ...]] = {
    "string_t": (str,), "integer_t": (int,), "long_t": (int,), "float_t": (int, float),
    "boolean_t": (bool,), "timestamp_t": (int,),
}


def _base(s: Any, type_name: str) -> tuple[str, Any]:
    """(primitive type, the type's own definition) of a scalar type name."""
    t = s.types.get(type_name)
    if t is None:
        return type_name, None
    return (t.type or type_name), t


def _applies(attr: Any, profiles: set[str]) -> bool:
    p = attr.profile
    if p is None:
        return True
    wanted = [p] if isinstance(p, str) else list(p)
    return any(x in profiles for x in wanted)


def _check_scalar(s: Any, type_name: str, value: Any, where: str, out: list[str]) -> None:
    if type_name == "json_t":
        return
    base, own = _base(s, type_name)
    kinds = _PRIMITIVE.get(base)
    if kinds is None:
        out.append(f"{where}: unknown type {type_name}")
        return
    if isinstance(value, bool) and bool not in kinds:
        out.append(f"{where}: {value!r} is not a {type_name}")
        return
    if not isinstance(value, kinds):
        out.append(f"{where}: {value!r} is not a {type_name}")
        return
    if own is None:
        return
    if own.regex and isinstance(value, str) and not re.search(own.regex, value):
        out.append(f"{where}: {value!r} does not match {type_name}'s pattern")
    if own.max_len and isinstance(value, str) and len(value) > own.max_len:
        out.append(f"{where}: longer than {own.max_len}")
    if own.range and isinstance(value, int) and not own.range[0] <= value <= own.range[1]:
        out.append(f"{where}: {value} outside {own.range}")


def _check_value(s: Any, attr: Any, value: Any, where: str, profiles: set[str],
                 out: list[str]) -> None:
    if attr.is_array:
        if not isinstance(value, list):
            out.append(f"{where}: an array is expected, not {type(value).__name__}")
            return
        for i, v in enumerate(value):
            _check_one(s, attr, v, f"{where}[{i}]", profiles, out)
        return
    _check_one(s, attr, value, where, profiles, out)


def _check_one(s: Any, attr: Any, value: Any, where: str, profiles: set[str],
               out: list[str]) -> None:
    obj_type = attr.object_type or (attr.type if attr.type not in s.types
                                    and attr.type != "json_t" else None)
    if obj_type is not None:
        if not isinstance(value, dict):
            out.append(f"{where}: an object ({obj_type}) is expected")
            return
        if obj_type == "object":  # OCSF's free-form object (``unmapped``)
            return
        obj = s.objects.get(obj_type)
        if obj is None:
            out.append(f"{where}: unknown object type {obj_type}")
            return
        _check_attributes(s, obj.attributes, obj.constraints, value, where, profiles, out)
        return
    _check_scalar(s, attr.type, value, where, out)
    if attr.enum is not None and str(value) not in attr.enum:
        out.append(f"{where}: {value!r} is not among {sorted(attr.enum)}")


def _check_attributes(s: Any, attributes: dict[str, Any], constraints: Any,
                      value: dict[str, Any], where: str, profiles: set[str],
                      out: list[str]) -> None:
    known = {k: a for k, a in attributes.items() if _applies(a, profiles)}
    for k, v in value.items():
        attr = known.get(k)
        path = f"{where}.{k}" if where else k
        if attr is None:
            out.append(f"{path}: not an attribute here"
                       + (" (its profile is not listed)" if k in attributes else ""))
            continue
        if v is None:
            continue
        _check_value(s, attr, v, path, profiles, out)
        if attr.enum is not None and attr.sibling and attr.sibling in value:
            member = attr.enum.get(str(v))
            if member is not None and str(v) != "99" and value[attr.sibling] != member.caption:
                out.append(f"{path}: sibling {attr.sibling} {value[attr.sibling]!r} is not"
                           f" the caption {member.caption!r}")
    for k, a in known.items():
        if a.requirement == "required" and value.get(k) is None:
            out.append(f"{where}.{k}: required" if where else f"{k}: required")
    for kind, names in (constraints or {}).items():
        present = [n for n in names if value.get(n) is not None]
        if kind == "at_least_one" and not present:
            out.append(f"{where or 'event'}: at least one of {names} is required")
        if kind == "just_one" and len(present) != 1:
            out.append(f"{where or 'event'}: just one of {names} is allowed, not {present}")


def validate(event: dict[str, Any]) -> list[str]:
    """What is wrong with ``event`` against the OCSF schema its ``metadata.version`` names
    (empty when nothing is)."""
    version = (event.get("metadata") or {}).get("version")
    if not isinstance(version, str):
        return ["metadata.version: required"]
    s = schema(version)
    cls = next((c for c in s.classes.values() if c.uid == event.get("class_uid")), None)
    if cls is None:
        return [f"class_uid: no class {event.get('class_uid')!r} in OCSF {version}"]
    out: list[str] = []
    # A class's uid is its category's times 1,000 plus its number in the category.
    if event.get("category_uid") != cls.uid // 1000:
        out.append(f"category_uid: {event.get('category_uid')!r}, not {cls.uid // 1000}")
    activity = event.get("activity_id")
    if isinstance(activity, int) and event.get("type_uid") != cls.uid * 100 + activity:
        out.append(f"type_uid: {event.get('type_uid')!r}, not {cls.uid * 100 + activity}")
    profiles = set((event.get("metadata") or {}).get("profiles") or ())
    unknown = profiles - set(cls.profiles or ())
    if unknown:
        out.append(f"metadata.profiles: {sorted(unknown)} do not apply to {cls.name}")
    _check_attributes(s, cls.attributes, cls.constraints, event, "", profiles, out)
    return out
