"""Regular expressions from an untrusted schema run in RE2, in time linear in the text they check.

A JSON Schema's ``pattern`` and ``patternProperties`` are regular
expressions, which ``jsonschema`` and the gate's fast check run with
Python's ``re``: a backtracking engine, in which ``^(a+)+$`` takes hours to
refuse forty ``a`` and a ``!``, holding the GIL, so the whole host freezes.
Python's ``re`` even fails to compile some patterns (groups nested a few
hundred deep raise ``RecursionError``). A schema the host's own code writes
is trusted with that; one an MCP server sends is not. For such a schema
(``tool_from_schema(..., untrusted_schema=True)``) Python's ``re`` never
sees a pattern:

- ``check_patterns`` compiles every pattern of the schema in RE2 when the
  tool is made: one RE2 cannot run (a backreference, a lookaround, a
  repetition past ``{1000}``) is a ``ToolDefinitionError`` naming it.
- ``linear_validator`` turns a jsonschema validator class (the gate's) into
  one whose every keyword that runs a regex runs RE2: ``pattern``,
  ``patternProperties``, and ``additionalProperties`` and
  ``unevaluatedProperties``, which match property names against
  ``patternProperties``. ``regex_format`` judges the meta-schema's
  ``"format": "regex"`` with RE2 too.
- ``compile_pattern`` compiles one for the gate's fast check.

RE2 runs in time linear in the text whatever the pattern, and releases the
GIL while it runs. Its syntax is close to ECMA-262's, the dialect JSON
Schema names: ``\\d`` and ``\\w`` are ASCII there as in ECMA-262 (Python's
``re`` takes any Unicode digit for ``\\d``).

re2 (the ``google-re2`` package, in the ``mcp`` extra) is imported on first
use: ``import tether`` never loads it.
"""

from __future__ import annotations

import functools
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

from tether.core.errors import ConfigurationError, ToolDefinitionError
from tether.tools import refs


class PatternError(re.error):
    """A pattern RE2 cannot run; a ``re.error``, as Python's ``re`` raises for one it cannot compile."""


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (an object with ``search``, as ``re.compile`` returns); raises ``PatternError``."""
    re2 = _re2()
    options = re2.Options()
    options.log_errors = False  # RE2 would write each refused pattern to stderr itself
    options.never_capture = True  # only whether it matches is asked: no submatch tracking, whose cost grows with groups
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "not a pattern"
        raise PatternError(reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) from None
    except UnicodeEncodeError:
        raise PatternError("it holds a lone UTF-16 surrogate") from None


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, as ``re.search`` would say; False for a pattern RE2
    cannot run (``check_patterns`` refused any such the schema holds where it is read, so this is the rare
    one reached only through a ``$ref`` into data: the value is refused, never waved through)."""
    try:
        regex = compile_pattern(pattern)
    except PatternError:
        return False
    try:
        return regex.search(text) is not None
    except UnicodeEncodeError:  # a lone surrogate: RE2 reads UTF-8, so read the bytes Python writes for it
        return regex.search(text.encode("utf-8", "surrogatepass")) is not None


def _re2() -> Any:
    try:
        import re2
    except ImportError:
        raise ConfigurationError("MCP tools need the mcp extra (google-re2): pip install 'tether[mcp]'") from None
    return re2


# Keywords whose value is one subschema, a list of them, or a map of names (or patterns) to them: the subschemas
# ``tether.tools.refs`` walks, whether they check the value itself or a part of it.
_ONE = refs.IN_PLACE_ONE + refs.INTO_ONE
_MANY = refs.IN_PLACE_MANY + refs.INTO_MANY
_MAP = refs.INTO_MAP + refs.DEFINITIONS + refs.IN_PLACE_MAP


def check_patterns(schema: Any, what: str) -> int:
    """Compile every ``pattern`` and ``patternProperties`` key of ``schema`` in RE2; how many there are.

    A pattern RE2 cannot run is a ``ToolDefinitionError`` that names it, where it is and why, in ``what``'s
    words (``tool lookup``).
    """
    found = 0
    for pattern, where in _patterns(schema):
        found += 1
        if not isinstance(pattern, str):
            continue  # not a pattern at all: the meta-schema check words that
        try:
            compile_pattern(pattern)
        except PatternError as exc:
            raise ToolDefinitionError(
                f"{what}: the pattern {_shown(pattern)} at {where} cannot run in RE2 ({exc}); tether runs an "
                "MCP server's patterns only in RE2, whose time is linear (no backreferences, no lookaround)"
            ) from None
    return found


def _patterns(schema: Any) -> Iterator[tuple[Any, str]]:
    """Each pattern in ``schema`` where a validator reads one, with its place: ``(pattern, "#/properties/a")``."""
    stack: list[tuple[Any, str]] = [(schema, "#")]
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict):
            continue
        if "pattern" in node:
            yield node["pattern"], f"{where}/pattern"
        if isinstance(node.get("patternProperties"), dict):
            for pattern in node["patternProperties"]:
                yield pattern, f"{where}/patternProperties"
        for key, value in node.items():
            if key in _MAP and isinstance(value, dict):
                stack.extend((sub, f"{where}/{key}/{_escaped(name)}") for name, sub in value.items())
            elif key in _MANY and isinstance(value, list):
                stack.extend((sub, f"{where}/{key}/{index}") for index, sub in enumerate(value))
            elif key in _ONE:
                stack.append((value, f"{where}/{key}"))


def _escaped(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _shown(pattern: str) -> str:
    return repr(pattern) if len(pattern) <= 80 else f"{pattern[:80]!r}… ({len(pattern)} characters)"


class _RE2Module:
    """What jsonschema's keyword functions ask of the ``re`` module (``re.search``), answered by RE2."""

    search = staticmethod(search)


# The keywords of 2020-12 that run a regex, and jsonschema's helpers they run it in.
_KEYWORDS = ("pattern", "patternProperties", "additionalProperties", "unevaluatedProperties")
_HELPERS = ("find_additional_properties", "find_evaluated_property_keys_by_schema")


@functools.cache
def linear_validator(base: Any) -> Any:
    """The 2020-12 validator class ``base`` (the gate's ``strict_validator``) with every keyword that runs a
    regex running RE2.

    Those keywords are jsonschema's own functions, so their semantics and
    messages stay jsonschema's: each is rebound to a copy of its module's
    globals in which ``re`` is RE2's, and so are the helpers they match
    property names in (``find_additional_properties``, and
    ``find_evaluated_property_keys_by_schema`` with its own recursive calls).
    """
    import jsonschema._utils

    helpers = {helper: _rebound(getattr(jsonschema._utils, helper), {}) for helper in _HELPERS}
    for rebound in helpers.values():
        rebound.__globals__.update(helpers)  # a helper's calls to itself and to the other are rebound too
    keywords = {keyword: _rebound(base.VALIDATORS[keyword], helpers) for keyword in _KEYWORDS}
    return jsonschema.validators.extend(base, keywords)  # type: ignore[no-untyped-call]


def _rebound(function: Callable[..., Any], helpers: dict[str, Any]) -> Callable[..., Any]:
    """``function`` reading a copy of its module's globals in which ``re`` is RE2's and ``helpers`` are rebound."""
    names = {**function.__globals__, "re": _RE2Module, **helpers}
    return types.FunctionType(function.__code__, names, function.__name__, function.__defaults__, function.__closure__)


@functools.cache
def regex_format() -> Any:
    """The 2020-12 meta-schema's format checker, with ``"format": "regex"`` judged by RE2.

    ``check_schema(schema, format_checker=regex_format())`` then never hands
    a pattern to Python's ``re``.
    """
    import jsonschema

    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)
    checker.checks("regex", raises=PatternError)(_runs_in_re2)
    return checker


def _runs_in_re2(value: object) -> bool:
    """The ``regex`` format: a string RE2 compiles (raises ``PatternError`` for one it cannot); any other value."""
    return not isinstance(value, str) or compile_pattern(value) is not None


def untrusted_validator(schema: Any, what: str) -> Any:
    """A validator for a whole untrusted ``schema`` (an MCP tool's ``outputSchema``), the schema checked first.

    It is JSON Schema 2020-12's as jsonschema has it (3.0 is an integer, as
    for the SDK's own check), with its patterns run in RE2.

    A pattern RE2 cannot run, a schema the 2020-12 meta-schema refuses, or
    a reference that resolves to nothing or loops in place is a
    ``ToolDefinitionError`` in ``what``'s words; a reference is never
    fetched.
    """
    import jsonschema
    from jsonschema.exceptions import SchemaError
    from referencing import Registry

    check_patterns(schema, what)
    validator = linear_validator(jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema, format_checker=regex_format())
    except SchemaError as exc:
        raise ToolDefinitionError(f"{what}: invalid JSON Schema: {exc.message}") from None
    refs.check_references(schema, what)
    return validator(schema, registry=Registry())
