"""A fast answer to "is this surely a valid JSON Schema?" for the common keywords.

``jsonschema``'s meta-schema check (``check_schema``) walks the 2020-12
meta-schema's dynamic references: 2–8 ms for a small tool schema, which is
most of what building a tool costs (``tether eval`` builds one per BFCL
function document). ``plainly_valid`` answers True only for schemas made of
the keywords below, each holding a value of the type the meta-schema asks
for; anything else (another keyword, ``$ref``, a value it is not sure of)
gets False, and the caller runs ``check_schema``, which decides and words
the error. So True is never wrong, and False costs what it always did.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 64
_TYPE_NAMES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})


def plainly_valid(schema: Any) -> bool:
    """True when ``schema`` is surely valid under the 2020-12 meta-schema; False when not sure."""
    return _plain(schema, 0)


def _plain(node: Any, depth: int) -> bool:
    if isinstance(node, bool):
        return True
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        return False
    for key, value in node.items():
        check = _KEYWORDS.get(key)
        if check is None or not check(value, depth + 1):
            return False
    return True


def _type(value: Any, _: int) -> bool:
    if isinstance(value, str):
        return value in _TYPE_NAMES
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, str) and v in _TYPE_NAMES for v in value)
        and len(set(value)) == len(value)
    )


def _schemas_by_name(value: Any, depth: int) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _plain(s, depth) for k, s in value.items())


def _names(value: Any, _: int) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value) and len(set(value)) == len(value)


def _schema_list(value: Any, depth: int) -> bool:
    return isinstance(value, list) and bool(value) and all(_plain(s, depth) for s in value)


def _number(value: Any, _: int) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: Any, _: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _string(value: Any, _: int) -> bool:
    return isinstance(value, str)


def _regex(value: Any, _: int) -> bool:
    if not isinstance(value, str):
        return False
    try:
        re.compile(value)  # the meta-schema's "format": "regex", as jsonschema checks it
    except re.error:
        return False
    return True


def _anything(_value: Any, _depth: int) -> bool:
    return True


_KEYWORDS: dict[str, Callable[[Any, int], bool]] = {
    "type": _type,
    "properties": _schemas_by_name,
    "required": _names,
    "additionalProperties": _plain,
    "items": _plain,
    "anyOf": _schema_list,
    "enum": lambda v, _: isinstance(v, list),
    "const": _anything,
    "default": _anything,
    "examples": lambda v, _: isinstance(v, list),
    "description": _string,
    "title": _string,
    "format": _string,
    "pattern": _regex,
    "minimum": _number,
    "maximum": _number,
    "exclusiveMinimum": _number,
    "exclusiveMaximum": _number,
    "minItems": _count,
    "maxItems": _count,
    "minLength": _count,
    "maxLength": _count,
    "uniqueItems": lambda v, _: isinstance(v, bool),
}
