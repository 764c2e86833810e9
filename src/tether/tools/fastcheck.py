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
from collections.abc import Callable
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


Check = Callable[[Any], bool]
# Compiles a ``pattern`` into an object whose ``search`` answers; raises ``re.error`` for one it cannot.
Compile = Callable[[str], Any]


def compile_check(schema: dict[str, Any], regex: Compile = re.compile) -> Check | None:
    """A yes/no function for ``schema``, compiled once; None when it uses other keywords.

    ``regex`` compiles its patterns: ``re.compile``, or RE2's for a schema
    from outside (``tether.tools.linear``).
    """
    try:
        return _compile(schema, schema, {}, regex)
    except (_Unsupported, RecursionError, re.error):
        return None


def fast_valid(schema: dict[str, Any], value: Any) -> bool | None:
    """Whether ``value`` is valid against ``schema``; None when the schema uses other keywords."""
    check = compile_check(schema)
    return None if check is None else check(value)


_TYPES: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _same(a: Any, b: Any) -> bool:
    """JSON equality for scalars: a boolean never equals a number."""
    return _scalar(a) and isinstance(a, bool) == isinstance(b, bool) and a == b


def _compile(node: Any, root: dict[str, Any], refs: dict[str, Check | None], regex: Compile) -> Check:
    if node is True:
        return lambda v: True
    if node is False:
        return lambda v: False
    if not isinstance(node, dict) or not node.keys() <= _SUPPORTED:
        raise _Unsupported
    if "$ref" in node:
        return _compile_ref(node, root, refs, regex)
    checks: list[Check] = []
    kind = node.get("type")
    names = _type_names(kind) if kind is not None else None
    # An object with properties: its object check tests the type too (one call per value, not three).
    typed_object = names == ["object"] and _OBJECT_KEYS & node.keys()
    if names is not None and not typed_object:
        checks.append(_of_types(names))
    if "enum" in node:
        options = list(node["enum"])
        if not all(_scalar(o) for o in options):
            raise _Unsupported
        checks.append(lambda v: any(_same(v, o) for o in options))
    if "const" in node:
        const = node["const"]
        if not _scalar(const):
            raise _Unsupported
        checks.append(lambda v: _same(v, const))
    if "anyOf" in node:
        branches = node["anyOf"]
        if isinstance(branches, list) and branches and all(_only_a_type(b) for b in branches):
            checks.append(_of_types([n for b in branches for n in _type_names(b["type"])]))  # e.g. str | None
        else:
            checks.append(_any_of([_compile(b, root, refs, regex) for b in branches]))
    checks.extend(_by_kind(node, root, refs, regex, bool(typed_object)))

    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:  # the usual pair: the type and what that type must satisfy
        first, second = checks
        return lambda v: first(v) and second(v)

    def check(value: Any) -> bool:
        for c in checks:  # noqa: SIM110 -- a loop, not all() over a generator: this runs for every answer
            if not c(value):
                return False
        return True

    return check


_OBJECT_KEYS = frozenset({"properties", "required", "additionalProperties"})
# Types that one isinstance test decides (a boolean is an int to Python: integer and number are not here).
_PLAIN: dict[str, type] = {"string": str, "object": dict, "array": list, "boolean": bool}


def _type_names(kind: Any) -> list[str]:
    names = kind if isinstance(kind, list) else [kind]
    if not names or not all(isinstance(n, str) and n in _TYPES for n in names):
        raise _Unsupported
    return names


def _only_a_type(node: Any) -> bool:
    return isinstance(node, dict) and "type" in node and node.keys() <= _IGNORED | {"type"}


def _of_types(names: list[str]) -> Check:
    """One check for a value of any of the JSON types ``names``."""
    if len(set(names)) == 1:
        return _TYPES[names[0]]
    if not all(n in _PLAIN or n == "null" for n in names):
        return _any_of([_TYPES[n] for n in dict.fromkeys(names)])
    types = tuple(_PLAIN[n] for n in dict.fromkeys(names) if n != "null")
    if "null" in names:
        return lambda v: v is None or isinstance(v, types)
    return lambda v: isinstance(v, types)


def _any_of(branches: list[Check]) -> Check:
    def check(value: Any) -> bool:
        for branch in branches:  # noqa: SIM110 -- as above
            if branch(value):
                return True
        return False

    return check


def _compile_ref(node: dict[str, Any], root: dict[str, Any], refs: dict[str, Check | None], regex: Compile) -> Check:
    ref = node["$ref"]
    if not (node.keys() - {"$ref"}) <= _IGNORED:
        raise _Unsupported
    if not isinstance(ref, str) or not ref.startswith(("#/$defs/", "#/definitions/")):
        raise _Unsupported
    if ref not in refs:
        refs[ref] = None  # a recursive schema refers to itself: look it up when called
        section, _, name = ref[2:].partition("/")
        refs[ref] = _compile(root.get(section, {}).get(name), root, refs, regex)
    found = refs[ref]
    if found is not None:
        return found

    def late(value: Any) -> bool:
        resolved = refs[ref]
        return resolved is not None and resolved(value)

    return late


def _by_kind(
    node: dict[str, Any],
    root: dict[str, Any],
    refs: dict[str, Check | None],
    regex: Compile,
    typed_object: bool = False,
) -> list[Check]:
    """The checks that apply to one kind of value (objects, arrays, strings, numbers).

    ``typed_object``: the node's type is ``object``, so the object check refuses anything but a dict.
    """
    checks: list[Check] = []
    if "properties" in node or "required" in node or "additionalProperties" in node:
        properties = {n: _compile(s, root, refs, regex) for n, s in node.get("properties", {}).items()}
        names = node.get("required", ())
        if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
            raise _Unsupported
        required = frozenset(names)
        extra = node.get("additionalProperties", True)
        other = None if extra is True else _compile(extra, root, refs, regex)

        def object_ok(value: Any) -> bool:
            if not isinstance(value, dict):
                return not typed_object
            if not value.keys() >= required:
                return False
            for name, item in value.items():
                sub = properties.get(name, other)
                if sub is not None and not sub(item):
                    return False
            return True

        checks.append(object_ok)
    if "items" in node or "minItems" in node or "maxItems" in node:
        items = _compile(node["items"], root, refs, regex) if "items" in node else None
        low, high = node.get("minItems", 0), node.get("maxItems", math.inf)
        checks.append(
            lambda v: not isinstance(v, list) or (low <= len(v) <= high and (items is None or all(map(items, v))))
        )
    if "minLength" in node or "maxLength" in node or "pattern" in node:
        shortest, longest = node.get("minLength", 0), node.get("maxLength", math.inf)
        pattern = regex(node["pattern"]) if "pattern" in node else None
        checks.append(
            lambda v: (
                not isinstance(v, str)
                or (shortest <= len(v) <= longest and (pattern is None or pattern.search(v) is not None))
            )
        )
    bounds = [node.get(k) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")]
    if any(b is not None for b in bounds):
        lo, hi, xlo, xhi = (b if b is not None else d for b, d in zip(bounds, _OPEN, strict=True))
        checks.append(
            lambda v: not isinstance(v, int | float) or isinstance(v, bool) or (lo <= v <= hi and xlo < v < xhi)
        )
    return checks


_OPEN = (-math.inf, math.inf, -math.inf, math.inf)
