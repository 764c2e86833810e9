"""Schemas in the form OpenAI's strict mode (``"strict": true``) accepts.

Strict mode makes the provider constrain its sampling to the schema, but it
accepts only a subset of JSON Schema: every object closed and every property
listed in ``required``. An optional parameter is therefore sent as required
*and nullable*, and the host reads a ``null`` for it as "not given" (the
function's default applies). A schema that strict mode cannot express (an
open dict, ``oneOf``, ``minLength``, a nested optional field that is not
nullable) is sent without ``strict``: the host's own gate is the same either
way, strict mode only makes invalid calls rarer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Keywords strict mode rejects; a schema using one is sent non-strict.
_UNSUPPORTED = frozenset(
    {
        "allOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "uniqueItems",
        "contains",
        "prefixItems",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedProperties",
        "minLength",
        "maxLength",
    }
)
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMAS = ("items", "anyOf", "additionalProperties")


class _NotStrict(Exception):
    pass


def strict_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]] | None:
    """The strict form of an object schema and the optional top-level names made nullable, or None.

    The names are those whose own schema does not accept ``null``: a
    ``null`` for one of them means "not given" and is dropped before the
    host validates the arguments against the original schema.
    """
    try:
        nullable: set[str] = set()
        out = _strict(schema, nullable)
    except _NotStrict:
        return None
    return out, frozenset(nullable)


def drop_nulls(arguments: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
    """``arguments`` without the ``null`` values strict mode sent for optional parameters."""
    if not names:
        return arguments
    return {k: v for k, v in arguments.items() if not (v is None and k in names)}


def _accepts_null(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return schema is True
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_accepts_null(s) for s in schema.get("anyOf", ()))


def _strict(node: Any, top_nullable: set[str] | None) -> Any:
    """``top_nullable`` collects the top level's optional names; nested optional fields must accept null."""
    if isinstance(node, list):
        return [_strict(n, None) for n in node]
    if not isinstance(node, Mapping):
        return node
    if _UNSUPPORTED & node.keys():
        raise _NotStrict
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "default":
            continue  # strict mode rejects it; the host applies defaults itself
        if key in _SCHEMA_MAPS:
            out[key] = {name: _strict(sub, None) for name, sub in value.items()}
        elif key in _SUBSCHEMAS:
            out[key] = _strict(value, None)
        else:
            out[key] = value
    if node.get("type") == "object" or "properties" in node:
        if out.get("additionalProperties", False) is not False:
            raise _NotStrict  # an open dict cannot be strict
        out["additionalProperties"] = False
        properties: dict[str, Any] = out.setdefault("properties", {})
        required = set(node.get("required", ()))
        for name in list(properties):
            if name in required or _accepts_null(properties[name]):
                continue
            if top_nullable is None:
                raise _NotStrict  # a null could not be told from "not given" below the top level
            top_nullable.add(name)
            properties[name] = {"anyOf": [properties[name], {"type": "null"}]}
        out["required"] = list(properties)
    return out
