"""Nesting depth of JSON from outside: measured before decoding, refused past the limit, never a RecursionError."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tether.core import ErrorCode, ToolCall
from tether.core.machine import Accepted, Rejected
from tether.core.nesting import (
    MAX_DEPTH,
    MAX_REPLY_DEPTH,
    NestedTooDeep,
    containers_past,
    loads,
    nested_deeper,
    value_nested_deeper,
)
from tether.tools import InvalidJson, Toolbox, result_envelope, strict_loads, tool, tool_from_schema


def depth(value: Any) -> int:
    """The reference: levels of lists and dicts, recursively (fine for the small values it is given)."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


# Strings that look like structure: brackets, quotes and backslashes inside JSON strings are text.
TRICKY = ["[", "{", "]]", '"', "\\", '\\"', '"[', "\\\\", '{"a": [', "é[", "\u2028", "\x00", ""]


def random_value(rng: random.Random, levels: int) -> Any:
    roll = rng.random()
    if levels > 0 and roll < 0.35:
        return [random_value(rng, levels - 1) for _ in range(rng.randint(0, 3))]
    if levels > 0 and roll < 0.7:
        return {rng.choice(TRICKY) + str(i): random_value(rng, levels - 1) for i in range(rng.randint(0, 3))}
    return rng.choice([*TRICKY, 0, -1.5e300, True, None])


def nested(levels: int, leaf: str = "1", kind: str = "[") -> str:
    """JSON text ``levels`` deep: arrays, objects, or both in turn."""
    opens = {"[": ["["], "{": ['{"k":'], "mixed": ["[", '{"k":']}[kind]
    closes = {"[": "]", '{"k":': "}"}
    parts = [opens[i % len(opens)] for i in range(levels)]
    return "".join(parts) + leaf + "".join(closes[p] for p in reversed(parts))


def test_the_measure_is_exact_for_valid_json() -> None:
    rng = random.Random(17)
    for _ in range(2000):
        value = random_value(rng, rng.randint(0, 12))
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
            for limit in range(14):
                assert nested_deeper(text, limit) == (depth(value) > limit), (text, limit)
                assert value_nested_deeper(value, limit) == (depth(value) > limit), (text, limit)


def containers(value: Any) -> int:
    """The reference: lists and dicts in ``value``, recursively."""
    if isinstance(value, dict):
        return 1 + sum(containers(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(containers(v) for v in value)
    return 0


def test_the_count_of_arrays_and_objects_is_exact_for_valid_json_as_text_and_as_utf8() -> None:
    rng = random.Random(29)
    for _ in range(2000):
        value = random_value(rng, rng.randint(0, 10))
        held = containers(value)
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
            for limit in {0, 1, held // 2, held - 1, held, held + 1} - {-1}:
                assert containers_past(text, limit) == (held > limit), (text, limit)
                assert containers_past(text.encode(), limit) == (held > limit), (text, limit)


def test_brackets_in_strings_are_not_arrays_and_objects() -> None:
    text = json.dumps({"a": "[{" * 10_000, "b": [['\\"[[[', '"]]]']] * 1000, "é[": [[], {}]})
    held = 1 + 1 + 1000 + 3
    assert not containers_past(text, held) and not containers_past(text.encode(), held)
    assert containers_past(text, held - 1) and containers_past(text.encode(), held - 1)


def test_closing_more_than_was_opened_ends_the_count() -> None:
    """Invalid from there: the decoder stops before it, having made no more than were counted."""
    assert not containers_past("[], ]" + ", []" * 100, 50)
    assert containers_past("[]" + ", []" * 100 + "]", 50)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"a": "[" * 10_000 + "{" * 10_000, "b": ['\\"[[[', '"]]]']})
    assert not nested_deeper(text, 2)
    assert strict_loads(text)["b"] == ['\\"[[[', '"]]]']


@pytest.mark.parametrize("kind", ["[", "{", "mixed"])
def test_strict_loads_takes_the_limit_and_refuses_one_more(kind: str) -> None:
    inside = nested(MAX_DEPTH - 1, kind=kind)
    assert depth(strict_loads('{"a":' + inside + "}")) == MAX_DEPTH
    with pytest.raises(InvalidJson, match=f"nested more than {MAX_DEPTH} levels deep"):
        strict_loads('{"a":' + nested(MAX_DEPTH, kind=kind) + "}")


@pytest.mark.parametrize(
    "text",
    [
        '{"a":' + "[" * 100_000 + "]" * 100_000 + "}",  # valid, and far past Python's recursion limit
        '{"a":' + "[" * 100_000,  # never closed
        '{"a":' + '{"b":' * 50_000 + "1" + "}" * 50_000 + "}",
        '{"a":' + "[" * 5_000 + '"' + '\\"' * 50_000,  # an escaped quote after another, in a string never closed
        "[" * 5_000 + "NaN",
    ],
    ids=["arrays", "unclosed", "objects", "unclosed-string", "not-an-object"],
)
def test_strict_loads_refuses_any_deep_text_as_invalid_json(text: str) -> None:
    with pytest.raises(InvalidJson, match="nested more than 64 levels deep"):
        strict_loads(text)
    with pytest.raises(InvalidJson, match="nested more than 64 levels deep"):
        strict_loads(text.encode())  # bytes take the same way


def test_loads_raises_a_value_error_naming_the_limit() -> None:
    with pytest.raises(NestedTooDeep) as caught:
        loads(b"[" * 300 + b"]" * 300, MAX_REPLY_DEPTH)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == "nested more than 128 levels deep"
    assert loads(b'{"a": [1]}', 2) == {"a": [1]}
    assert loads('{"a": 1}'.encode("utf-16"), 1) == {"a": 1}  # decoded as json.loads decodes bytes


# ------------------------------------------------------------------ the gate and the schema checks


node_schema: dict[str, Any] = {
    "type": "object",
    "properties": {"tree": {"$ref": "#/$defs/node"}},
    "required": ["tree"],
    "additionalProperties": False,
    "$defs": {
        "node": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                    "additionalProperties": False,
                },
                {"type": "integer"},
            ]
        }
    },
}
tree = tool_from_schema("tree", node_schema, lambda **kwargs: "ok", read_only=True)


@tool(read_only=True)
def anything(value: Any) -> str:
    """Takes any JSON."""
    return "ok"


@tool(read_only=True)
def numbers(values: list[list[int]]) -> int:
    """A list of lists of integers."""
    return 0


def kids(levels: int, leaf: str) -> str:
    return '{"kids":[' * levels + leaf + "]}" * levels


@pytest.mark.parametrize("leaf", ["1", '"x"'], ids=["valid", "invalid-at-the-bottom"])
def test_a_recursive_schema_is_checked_at_the_deepest_arguments_the_gate_lets_through(leaf: str) -> None:
    toolbox = Toolbox([tree])
    levels = (MAX_DEPTH - 1) // 2  # each node is an object and an array
    verdict = toolbox.check(ToolCall("c1", "tree", '{"tree":' + kids(levels, leaf) + "}"))
    if leaf == "1":
        assert isinstance(verdict, Accepted)
    else:
        assert isinstance(verdict, Rejected) and verdict.code is ErrorCode.INVALID_ARGUMENTS
    deeper = toolbox.check(ToolCall("c2", "tree", '{"tree":' + kids(5_000, leaf) + "}"))
    assert isinstance(deeper, Rejected) and deeper.code is ErrorCode.INVALID_JSON


@pytest.mark.parametrize("name", ["anything", "numbers"])
def test_the_gate_answers_deep_arguments_for_any_schema(name: str) -> None:
    toolbox = Toolbox([anything, numbers])
    key = "value" if name == "anything" else "values"
    for levels in (MAX_DEPTH - 1, MAX_DEPTH, 1_000, 100_000):
        verdict = toolbox.check(ToolCall("c1", name, f'{{"{key}":' + nested(levels) + "}"))
        if levels < MAX_DEPTH:
            assert isinstance(verdict, Accepted | Rejected)
        else:
            assert verdict == Rejected(
                ErrorCode.INVALID_JSON, f"arguments are nested more than {MAX_DEPTH} levels deep"
            )


# ------------------------------------------------------------------ results


def deep_list(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 200, 5_000])
def test_a_result_nested_deeper_than_the_limit_is_a_tool_failure_naming_it(levels: int) -> None:
    content = result_envelope({"rows": deep_list(levels)}, 20_000)
    assert json.loads(content) == {
        "ok": False,
        "error": {
            "code": "tool_failed",
            "message": f"the tool returned a value nested more than {MAX_DEPTH} levels deep",
            "retryable": False,
        },
    }


def test_a_result_at_the_limit_is_returned() -> None:
    content = result_envelope({"rows": deep_list(MAX_DEPTH - 1)}, 20_000)
    assert json.loads(content)["ok"] is True
