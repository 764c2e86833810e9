"""Integer ranges in GBNF (tether.models.local_grammar), checked exhaustively around each bound.

The expressions use only literals, character classes, groups, alternation
and ``*``, which read the same as a regular expression; each is checked
against every integer near its bounds. The grammar as llama.cpp applies it
is tested against the real model in tests/models/test_local.py.
"""

from __future__ import annotations

import re

import pytest

from tether.models.local_grammar import call_schema, integer_range


def as_regex(gbnf: str) -> re.Pattern[str]:
    pattern = re.sub(r'"([^"]*)"', lambda m: re.escape(m.group(1)), gbnf).replace(" ", "")
    return re.compile(pattern)


@pytest.mark.parametrize(
    ("low", "high"),
    [(-1000, 1000), (0, 0), (0, 9), (1, 100), (17, 4321), (-250, -17), (-5, 3), (10, 10), (99, 101), (0, 1_000_000)],
)
def test_exactly_the_integers_in_range_match(low: int, high: int) -> None:
    regex = as_regex(integer_range(low, high))
    candidates = set(range(low - 1200, low + 1200)) | set(range(high - 1200, high + 1200))
    for n in sorted(candidates):
        assert bool(regex.fullmatch(str(n))) == (low <= n <= high), (n, low, high)
    assert not regex.fullmatch("01") and not regex.fullmatch("-0") and not regex.fullmatch("+1")


def test_a_bounded_operand_cannot_be_written_with_more_digits() -> None:
    regex = as_regex(integer_range(-1_000_000, 1_000_000))
    assert regex.fullmatch("1000000") and regex.fullmatch("-999999")
    assert not regex.fullmatch("1000000000000000") and not regex.fullmatch("1000001")


@pytest.mark.parametrize(("low", "high"), [(0, None), (-3, None), (None, 12), (None, -7), (None, None)])
def test_open_ranges(low: int | None, high: int | None) -> None:
    regex = as_regex(integer_range(low, high))
    for n in range(-3000, 3000):
        assert bool(regex.fullmatch(str(n))) == ((low is None or n >= low) and (high is None or n <= high)), n
    assert bool(regex.fullmatch("123456789012")) == (high is None)


def test_one_schema_covers_every_offered_tool() -> None:
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
        for n in ("add", "current_time")
    ]
    schema = call_schema(tools)
    assert [o["properties"]["name"] for o in schema["anyOf"]] == [{"const": "add"}, {"const": "current_time"}]
    assert call_schema(tools[:1], "parameters")["required"] == ["name", "parameters"]
