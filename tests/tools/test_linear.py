"""An untrusted schema's patterns run only in RE2 (``tether.tools.linear``); the host's own keep Python's ``re``.

The catastrophic cases run in a child interpreter killed after a minute:
Python's ``re`` holds the GIL while it backtracks, so a freeze inside the
test process could never be turned into a failure.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from tether.core.errors import ToolDefinitionError
from tether.tools import tool_from_schema

# Builds each schema as an untrusted tool and prints the gate's answer for each value.
GATE = """
import json, sys
from tether.tools import tool_from_schema

answers = []
for schema, value in json.loads(sys.argv[1]):
    made = tool_from_schema("t", schema, lambda **kwargs: None, untrusted_schema=True)
    answers.append(made.validation_errors(value))
print(json.dumps(answers))
"""

EVIL = "^(a+)+$"
EVIL_TEXT = "a" * 40 + "!"
UNEXPECTED = [f"arguments: unexpected field(s) {EVIL_TEXT!r}"]


def obj(properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **more}


CASES = [
    # the fast check's pattern: refused, and valid although Python's re would backtrack before finding the match
    (obj({"w": {"type": "string", "pattern": EVIL}}), {"w": EVIL_TEXT}, [f"w: must match {EVIL}"]),
    (obj({"w": {"type": "string", "pattern": "(a+)+b"}}), {"w": EVIL_TEXT + "ab"}, []),
    # jsonschema's: patternProperties, additionalProperties and unevaluatedProperties match names against them
    (obj({}, patternProperties={EVIL: {"type": "integer"}}), {EVIL_TEXT: 1}, UNEXPECTED),
    (
        obj({"k": {"type": "string"}}, patternProperties={EVIL: {}}, additionalProperties=False),
        {EVIL_TEXT: 1},
        UNEXPECTED,
    ),
    (
        obj({"k": {"type": "string"}}, allOf=[{"patternProperties": {EVIL: {}}}]),
        {EVIL_TEXT: 1},
        UNEXPECTED,
    ),
    # a pattern reached through a reference
    (
        obj({"w": {"$ref": "#/$defs/w"}}, **{"$defs": {"w": {"pattern": EVIL}}}),
        {"w": EVIL_TEXT},
        [f"w: must match {EVIL}"],
    ),
    # RE2's classes: a Unicode letter class, which Python's re does not know
    (obj({}, patternProperties={r"^\p{L}+$": {"type": "integer"}}), {"héllo": 1}, []),
]


def test_an_untrusted_schema_answers_a_catastrophic_pattern_at_once_under_every_keyword() -> None:
    cases = [[schema, value] for schema, value, _ in CASES]
    try:
        done = subprocess.run(
            [sys.executable, "-c", GATE, json.dumps(cases)], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the gate froze: still checking after 60s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == [errors for _, _, errors in CASES]


def test_a_pattern_re2_cannot_run_is_refused_in_an_untrusted_schema_and_kept_in_the_hosts_own() -> None:
    schema = obj({"w": {"type": "string", "pattern": r"^(a)\1$"}})
    own = tool_from_schema("own", schema, lambda w: w)
    assert own.validation_errors({"w": "aa"}) == [] and own.validation_errors({"w": "ab"}) != []
    refused = r"tool theirs: the pattern '^(a)\\1$' at #/properties/w/pattern cannot run in RE2 (invalid escape"
    with pytest.raises(ToolDefinitionError, match=re.escape(refused)):
        tool_from_schema("theirs", schema, lambda w: w, untrusted_schema=True)
    nested = obj({"m": obj({}, patternProperties={"(?<=a)b": {}})})
    with pytest.raises(ToolDefinitionError, match=r"at #/properties/m/patternProperties cannot run in RE2"):
        tool_from_schema("theirs", nested, lambda m: m, untrusted_schema=True)


def _reads_of_re(function: types.FunctionType, seen: set[int]) -> Iterator[tuple[str, Any]]:
    """What ``re`` is to ``function`` and to every jsonschema function it calls by a global name."""
    if id(function) in seen:
        return
    seen.add(id(function))
    codes = [function.__code__]
    while codes:  # the function's own code and what it nests (generator expressions, lambdas)
        code = codes.pop()
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        for name in code.co_names:
            value = function.__globals__.get(name)
            if name == "re":
                yield function.__name__, value
            elif isinstance(value, types.FunctionType) and value.__module__.startswith("jsonschema"):
                yield from _reads_of_re(value, seen)


@pytest.mark.parametrize("base", ["gate", "2020-12"])
def test_every_keyword_of_the_untrusted_validator_that_reads_re_reads_re2(base: str) -> None:
    """Guards the rebinding against a jsonschema release that runs a regex in one more place."""
    import jsonschema

    from tether.tools.linear import linear_validator, search
    from tether.tools.tool import strict_validator

    trusted = strict_validator() if base == "gate" else jsonschema.Draft202012Validator
    seen: set[int] = set()
    reads = [read for f in linear_validator(trusted).VALIDATORS.values() for read in _reads_of_re(f, seen)]
    assert {name for name, _ in reads} == {
        "pattern",
        "patternProperties",
        "find_additional_properties",
        "find_evaluated_property_keys_by_schema",
    }
    assert all(getattr(value, "search", None) is search for _, value in reads)
    # the class it was made from is jsonschema's, untouched
    assert all(value is re for _, value in _reads_of_re(trusted.VALIDATORS["pattern"], set()))
