"""A fast yes/no check for the JSON Schema subset that generated schemas use.

``jsonschema`` costs tens of microseconds even for a three-field object,
which is most of a run's host CPU when a structured answer is validated.
``fast_valid`` answers True or False for schemas built only from the
keywords below, with the same strict semantics as the gate's validator (no
``true`` for an integer, no ``3.0`` for an integer), and None for anything
else. A False (or None) answer goes to ``jsonschema``, which decides and
writes the messages, so only the common valid case is served from here.
"""

from __future__ import annotations

import math
import re
from typing import Any

_IGNORED = frozenset({"title", "description", "default", "examples", "format", "$defs", "definitions"})
_SUPPORTED = _IGNORED | frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
    }
)


class _Unsupported(Exception):
    pass


def fast_valid(schema: dict[str, Any], value: Any) -> bool | None:
    """Whether ``value`` is valid against ``schema``; None when the schema uses other keywords."""
    try:
        return _valid(schema, value, schema)
    except (_Unsupported, RecursionError):
        return None


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    raise _Unsupported


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _same(a: Any, b: Any) -> bool:
    """JSON equality for scalars: a boolean never equals a number."""
    if not (_scalar(a) and _scalar(b)):
        raise _Unsupported
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _valid(schema: Any, value: Any, root: dict[str, Any]) -> bool:
    if schema is True:
        return True
    if schema is False:
        return False
    if not isinstance(schema, dict) or not schema.keys() <= _SUPPORTED:
        raise _Unsupported
    if "$ref" in schema:
        ref = schema["$ref"]
        if len(schema) > 1 and not (schema.keys() - {"$ref"}) <= _IGNORED:
            raise _Unsupported
        if not isinstance(ref, str) or not ref.startswith(("#/$defs/", "#/definitions/")):
            raise _Unsupported
        section, _, name = ref[2:].partition("/")
        return _valid(root.get(section, {}).get(name), value, root)
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_type_ok(k, value) for k in kinds):
            return False
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        return False
    if "const" in schema and not _same(value, schema["const"]):
        return False
    if "anyOf" in schema and not any(_valid(branch, value, root) for branch in schema["anyOf"]):
        return False
    if isinstance(value, dict):
        return _object_valid(schema, value, root)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", math.inf):
            return False
        items = schema.get("items")
        return items is None or all(_valid(items, v, root) for v in value)
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", math.inf):
            return False
        return "pattern" not in schema or re.search(schema["pattern"], value) is not None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return bool(
            value >= schema.get("minimum", -math.inf)
            and value <= schema.get("maximum", math.inf)
            and value > schema.get("exclusiveMinimum", -math.inf)
            and value < schema.get("exclusiveMaximum", math.inf)
        )
    return True


def _object_valid(schema: dict[str, Any], value: dict[str, Any], root: dict[str, Any]) -> bool:
    properties = schema.get("properties", {})
    if any(name not in value for name in schema.get("required", ())):
        return False
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        sub = properties.get(name, extra)
        if not _valid(sub, item, root):
            return False
    return True
