"""BFCL function documents as tether tools: every document of every category converts, reversibly named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bfcl_oracle import DATA

from tether.core.errors import ToolDefinitionError
from tether.core.messages import ToolCall
from tether.eval import SINGLE_TURN, bfcl_name, load, parameters_schema, tool_from_document, tool_name
from tether.eval.bfcl import language_of
from tether.tools import Toolbox

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "bfcl"


def _files() -> list[Path]:
    fixtures = sorted(FIXTURES.glob("BFCL_v4_*.json"))
    assert fixtures, f"fixture missing: {FIXTURES}"
    return fixtures + [DATA / f"BFCL_v4_{c}.json" for c in SINGLE_TURN]


def _documents(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every function document of a file, read raw (not through tether.eval.load)."""
    category = path.stem.split("_v4_")[1]
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for document in json.loads(line)["function"]:
            found.append((language_of(category), document))
    return found


@pytest.mark.parametrize("path", _files(), ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_every_function_document_becomes_a_tool(path: Path) -> None:
    documents = _documents(path)
    assert documents
    for language, document in documents:
        made = tool_from_document(document, language)  # compiles the schema: raises if it is not valid
        assert bfcl_name(made.name) == document["name"]
        assert made.parameters["type"] == "object"
        assert set(made.parameters["properties"]) == set(document["parameters"]["properties"])
        assert made.description.startswith(document["description"])
    assert len(load(path)) == len(path.read_text(encoding="utf-8").splitlines())


def test_names_with_dots_round_trip_and_a_dash_is_refused() -> None:
    assert tool_name("math.factorial") == "math-factorial"
    assert bfcl_name("math-factorial") == "math.factorial"
    assert tool_name("a.b.c_d") == "a-b-c_d"
    with pytest.raises(ToolDefinitionError, match="reversibly"):
        tool_name("already-dashed")
    with pytest.raises(ToolDefinitionError, match="valid tool name"):
        tool_name("spaces are not allowed")


def _accepts(document: dict[str, Any], arguments: dict[str, Any], language: str = "python") -> list[str]:
    made = tool_from_document(document, language)
    return made.validation_errors(arguments)


DOC = {
    "name": "demo.fn",
    "description": "Demo.",
    "parameters": {
        "type": "dict",
        "properties": {
            "ratio": {"type": "float", "description": "A ratio."},
            "pair": {"type": "tuple", "items": {"type": "integer"}, "description": "Two numbers."},
            "anything": {"type": "any", "description": "Any value."},
            "free": {"type": "dict", "description": "Free-form."},
            "closed": {
                "type": "dict",
                "properties": {"a": {"type": "integer"}},
                "required": ["a"],
                "description": "Closed.",
            },
            "maybe": {"type": "string", "description": "Optional.", "default": None, "enum": ["x", "y"]},
        },
        "required": ["ratio"],
    },
}


def test_bfcl_type_words_become_json_schema() -> None:
    schema = parameters_schema(DOC)
    assert schema["properties"]["ratio"]["type"] == "number"
    assert schema["properties"]["pair"] == {
        "type": "array",
        "description": "Two numbers.",
        "items": {"type": "integer"},
    }
    assert schema["properties"]["anything"]["type"] == "string"
    assert schema["additionalProperties"] is False
    assert not _accepts(DOC, {"ratio": 2})  # an integer is a number, as BFCL allows
    assert not _accepts(DOC, {"ratio": 2.5, "pair": [1, 2], "anything": "x"})
    assert _accepts(DOC, {"ratio": "2.5"}) == ["ratio: expected number, got string"]
    assert _accepts(DOC, {}) == ["arguments: 'ratio' is required"]
    assert _accepts(DOC, {"ratio": 1, "other": 1}) == ["arguments: unexpected field(s) 'other'"]


def test_a_dict_without_properties_is_free_form_and_one_with_them_is_closed() -> None:
    assert not _accepts(DOC, {"ratio": 1, "free": {"any": 1, "keys": [2]}})
    assert not _accepts(DOC, {"ratio": 1, "closed": {"a": 1}})
    assert _accepts(DOC, {"ratio": 1, "closed": {"a": 1, "b": 2}}) == ["closed: unexpected field(s) 'b'"]


def test_a_parameter_defaulting_to_none_accepts_null() -> None:
    assert not _accepts(DOC, {"ratio": 1, "maybe": None})
    assert not _accepts(DOC, {"ratio": 1, "maybe": "x"})
    assert _accepts(DOC, {"ratio": 1, "maybe": "z"})


JAVA = {
    "name": "Util.sum",
    "description": "Sum.",
    "parameters": {
        "type": "dict",
        "properties": {
            "values": {"type": "Array", "items": {"type": "integer"}, "description": "Values."},
            "flag": {"type": "boolean", "description": "Flag."},
        },
        "required": ["values"],
    },
}


@pytest.mark.parametrize("language", ["java", "javascript"])
def test_java_and_javascript_parameters_are_source_text(language: str) -> None:
    schema = parameters_schema(JAVA, language)
    assert {p["type"] for p in schema["properties"].values()} == {"string"}
    assert "in string representation" in schema["properties"]["flag"]["description"]
    assert not _accepts(JAVA, {"values": "new int[]{1, 2}", "flag": "true"}, language)
    assert _accepts(JAVA, {"values": [1, 2]}, language) == ["values: expected string, got array"]
    assert tool_from_document(JAVA, language).description.endswith("syntax.")


def test_the_gate_judges_calls_by_tool_name() -> None:
    """A model calls the mangled name; the toolbox knows it, and not the dotted original."""
    box = Toolbox([tool_from_document(DOC)])
    assert box.check(ToolCall("c1", "demo-fn", '{"ratio": 1}')).__class__.__name__ == "Accepted"
    refused = box.check(ToolCall("c2", "demo.fn", '{"ratio": 1}'))
    assert getattr(refused, "code", None) == "unknown_tool"
