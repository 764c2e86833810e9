"""GBNF grammars for tool calls, built from each tool's JSON Schema.

The local model decodes a tool call under a grammar, so what it writes is
the shape the host will accept: the tool's name, then arguments with the
schema's types, enums, required keys and patterns. llama-cpp-python's own
converter (``llama_cpp.llama_grammar.SchemaConverter``) ignores numeric
ranges; this module adds them for integers, so a model cannot write
``1000000000000000`` for an operand bounded by 1,000,000. Ranges of
non-integer numbers are not expressed (the host's validation still refuses
them).

Length bounds above ``MAX_REPEAT`` (a ticket's body: 5,000 characters) are
left out of the grammar: llama.cpp refuses a grammar that repeats a rule
about 2,000 times, and no call within ``CALL_MAX_TOKENS`` gets that long.

The grammar constrains the shape, not the meaning: the host validates every
call as strictly as one from any remote model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

CALL_RULE = "call"
# The longest string or list bound written into a grammar (as that many nested optionals); a longer one is
# left to the host's validation. llama.cpp refuses ~2,000 (MAX_REPETITION_THRESHOLD in its grammar parser).
MAX_REPEAT = 256
_UPPER_BOUNDS = ("maxLength", "maxItems")


def _digits(count: int) -> str:
    return " ".join(["[0-9]"] * count)


def _same_length(low: str, high: str) -> str:
    """Digit strings of ``len(low)`` between ``low`` and ``high`` (leading zeros allowed past the first call)."""
    if low == high:
        return f'"{low}"'
    if len(low) == 1:
        return f"[{low}-{high}]"
    shared = 0
    while low[shared] == high[shared]:
        shared += 1
    if shared:
        return f'"{low[:shared]}" ({_same_length(low[shared:], high[shared:])})'
    rest = len(low) - 1
    first_low, first_high = int(low[0]), int(high[0])
    if low[1:] == "0" * rest and high[1:] == "9" * rest:
        return f"[{first_low}-{first_high}] {_digits(rest)}"
    options = [f'"{low[0]}" ({_same_length(low[1:], "9" * rest)})']
    if first_high - first_low > 1:
        options.append(f"[{first_low + 1}-{first_high - 1}] {_digits(rest)}")
    options.append(f'"{high[0]}" ({_same_length("0" * rest, high[1:])})')
    return " | ".join(options)


def _natural(low: int, high: int | None) -> str:
    """Integers ``low <= n <= high`` (``high`` None: unbounded) written without sign or leading zeros."""
    options: list[str] = []
    top = len(str(high)) if high is not None else len(str(low))
    for length in range(len(str(low)), top + 1):
        first = 10 ** (length - 1) if length > 1 else 0
        last = 10**length - 1 if high is None else min(high, 10**length - 1)
        if max(low, first) <= last:
            options.append(f"({_same_length(str(max(low, first)), str(last))})")
    if high is None:
        options.append(f"[1-9] {_digits(top)} [0-9]*")
    return " | ".join(options)


def integer_range(minimum: int | None, maximum: int | None) -> str:
    """A GBNF expression for the JSON integers in ``[minimum, maximum]`` (None: unbounded on that side)."""
    options: list[str] = []
    if maximum is None or maximum >= 0:
        options.append(_natural(max(minimum, 0) if minimum is not None else 0, maximum))
    if minimum is None or minimum < 0:
        smallest = -maximum if maximum is not None and maximum < 0 else 1
        options.append(f'"-" ({_natural(smallest, -minimum if minimum is not None else None)})')
    return " | ".join(f"({o})" for o in options) if options else '"0" "0"'  # an empty range: nothing parses


def _bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    low = schema.get("minimum")
    high = schema.get("maximum")
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        low = schema["exclusiveMinimum"] + 1 if low is None else max(low, schema["exclusiveMinimum"] + 1)
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        high = schema["exclusiveMaximum"] - 1 if high is None else min(high, schema["exclusiveMaximum"] - 1)
    return (math.ceil(low) if low is not None else None, math.floor(high) if high is not None else None)


def _too_long(bound: Any) -> bool:
    return isinstance(bound, int) and bound > MAX_REPEAT


def _converter() -> Any:
    from llama_cpp import llama_grammar

    base: Any = llama_grammar.SchemaConverter  # untyped upstream

    class RangedConverter(base):  # type: ignore[misc]
        """llama-cpp-python's converter, plus integer ranges."""

        def visit(self, schema: dict[str, Any], name: str) -> str:
            if isinstance(schema, dict) and any(_too_long(schema.get(k)) for k in _UPPER_BOUNDS):
                schema = {k: v for k, v in schema.items() if not (k in _UPPER_BOUNDS and _too_long(v))}
            ranged = any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
            if schema.get("type") == "integer" and ranged and not ({"enum", "const"} & schema.keys()):
                rule = f"({integer_range(*_bounds(schema))}) space"
                return str(self._add_rule(f"{name or 'root'}-int", rule))
            return str(super().visit(schema, name))

    return RangedConverter(prop_order={"name": 0, "arguments": 1}, allow_fetch=False, dotall=False, raw_pattern=False)


def call_schema(tools: Sequence[dict[str, Any]], arguments_key: str = "arguments") -> dict[str, Any]:
    """One JSON Schema for ``{"name": ..., "arguments": {...}}`` over the offered tools."""
    options = []
    for spec in tools:
        function = spec["function"]
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": function["name"]}, arguments_key: parameters},
                "required": ["name", arguments_key],
                "additionalProperties": False,
            }
        )
    return options[0] if len(options) == 1 else {"anyOf": options}


def call_grammar(
    tools: Sequence[dict[str, Any]], root: str = f"root ::= {CALL_RULE}", arguments_key: str = "arguments"
) -> str:
    """GBNF for ``root``, in which the rule ``call`` is one call of an offered tool as JSON."""
    converter = _converter()
    schema = converter.resolve_refs(call_schema(tools, arguments_key), "tool")
    converter.visit(schema, CALL_RULE)
    return f"{root}\n{converter.format_grammar()}"


def prefixed_grammar(tools: Sequence[dict[str, Any]], prefix: str) -> str:
    """GBNF for one call written ``<prefix><name>:`` and a newline, then the arguments as JSON."""
    converter = _converter()
    options = []
    for spec in tools:
        function = spec["function"]
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        rule = converter.visit(converter.resolve_refs(parameters, function["name"]), f"{function['name']}-arguments")
        options.append(f"{json.dumps(prefix + function['name'] + ':' + chr(10))} {rule}")
    return f"root ::= {' | '.join(options)}\n{converter.format_grammar()}"
