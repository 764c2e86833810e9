"""``plainly_valid`` never says yes to a schema jsonschema's meta-schema check refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tether.core.errors import ToolDefinitionError
from tether.tools import tool_from_schema
from tether.tools.metacheck import plainly_valid
from tether.tools.tool import _close

BFCL = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "bfcl"


def _meta_valid(schema: Any) -> bool:
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError:
        return False
    return True


def test_every_converted_bfcl_schema_is_plainly_valid_and_really_valid() -> None:
    from tether.eval.bfcl import language_of
    from tether.eval.functions import parameters_schema

    files = sorted(BFCL.glob("BFCL_v4_*.json"))
    assert files, f"fixture missing: {BFCL}"
    seen = plain = 0
    for path in files:
        language = language_of(path.stem.split("_v4_")[1])
        for line in path.read_text(encoding="utf-8").splitlines():
            for document in json.loads(line)["function"]:
                schema = _close(parameters_schema(document, language))
                seen += 1
                if plainly_valid(schema):
                    plain += 1
                    assert _meta_valid(schema), document["name"]
    assert seen > 3000
    assert plain == seen  # the conversion only writes the keywords the fast check knows


REFUSED = [
    {"type": "dict"},
    {"type": []},
    {"type": ["string", "string"]},
    {"type": "object", "properties": {"a": 3}},
    {"type": "object", "properties": {"a": {"type": "float"}}},
    {"type": "object", "required": "a"},
    {"type": "object", "required": ["a", "a"]},
    {"type": "object", "required": [1]},
    {"type": "object", "additionalProperties": "no"},
    {"type": "array", "items": [{"type": "string"}]},
    {"type": "array", "items": {"type": "array", "items": {"type": "list"}}},
    {"type": "array", "minItems": -1},
    {"type": "array", "maxItems": "3"},
    {"type": "string", "maxLength": 2.5},
    {"type": "string", "pattern": "("},
    {"type": "string", "enum": "a"},
    {"type": "number", "minimum": "1"},
    {"type": "number", "maximum": True},
    {"type": "string", "description": 3},
    {"type": "string", "format": 3},
    {"anyOf": []},
    {"anyOf": {"type": "string"}},
    {"type": "array", "uniqueItems": "yes"},
    {"type": "object", "examples": {}},
]


@pytest.mark.parametrize("schema", REFUSED, ids=lambda s: json.dumps(s))
def test_an_invalid_schema_is_never_plainly_valid(schema: dict[str, Any]) -> None:
    assert not _meta_valid(schema)  # the premise: jsonschema refuses it
    assert not plainly_valid(schema)


ACCEPTED = [
    {"type": "object", "properties": {"a": {"type": ["string", "null"], "enum": ["x", None]}}, "required": ["a"]},
    {"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": 0}, {"const": "all"}]}, "maxItems": 3},
    {"type": "string", "pattern": "^[a-z]+$", "minLength": 1, "default": "a", "examples": ["b"], "title": "t"},
    {"type": "object", "additionalProperties": True},
    True,
]


@pytest.mark.parametrize("schema", ACCEPTED, ids=lambda s: json.dumps(s))
def test_common_schemas_are_plainly_valid(schema: Any) -> None:
    assert _meta_valid(schema)
    assert plainly_valid(schema)


def test_other_keywords_go_to_jsonschema() -> None:
    assert not plainly_valid({"type": "object", "$defs": {"a": {"type": "string"}}})
    assert not plainly_valid({"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}})
    assert not plainly_valid({"type": "object", "unevaluatedProperties": False})
    assert not plainly_valid({"type": "number", "multipleOf": 2})


def test_a_tool_with_an_invalid_schema_is_still_refused() -> None:
    for schema in ({"type": "object", "properties": {"n": {"type": "number", "minimum": "1"}}}, REFUSED[4]):
        with pytest.raises(ToolDefinitionError, match="invalid JSON Schema"):
            tool_from_schema("t", schema, lambda **_: None)
