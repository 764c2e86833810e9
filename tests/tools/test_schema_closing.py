"""Raw schemas are closed where they declare their properties, and only there.

``tool_from_schema`` closes objects so that a model cannot slip in fields the
schema does not name. It must never make a valid call invalid: a free-form
object (a map) stays open, and objects combined with ``allOf`` (or extended
by ``anyOf``/``oneOf`` branches) are closed as a whole, with
``unevaluatedProperties: false``, never branch by branch.

The last tests run every tool schema of the recorded provider interactions
and of the BFCL data through ``tool_from_schema`` and check that a valid call
still validates: an instance built from the schema (every declared property,
one key in each free-form map) and, for BFCL, the ground-truth calls.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tether.core import ToolCall, ToolDefinitionError
from tether.core.machine import Accepted, Rejected
from tether.tools import Toolbox, tool_from_schema

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"
BFCL = FIXTURES / "bfcl"


def _echo(**arguments: Any) -> dict[str, Any]:
    return arguments


def check(schema: dict[str, Any], arguments: dict[str, Any]) -> Accepted | Rejected:
    t = tool_from_schema("t", schema, _echo)
    return Toolbox([t]).check(ToolCall("c1", "t", json.dumps(arguments)))


def test_a_free_form_object_parameter_stays_open() -> None:
    schema = {
        "type": "object",
        "properties": {"labels": {"type": "object", "description": "any string labels"}},
        "required": ["labels"],
    }
    assert isinstance(check(schema, {"labels": {"env": "prod", "team": "core"}}), Accepted)
    assert isinstance(check(schema, {"labels": {}}), Accepted)
    # The object that declares its properties is still closed.
    extra = check(schema, {"labels": {}, "other": 1})
    assert isinstance(extra, Rejected) and "unexpected field(s) 'other'" in extra.message


def test_arguments_that_declare_no_properties_take_none() -> None:
    """``{"type": "object"}`` alone (what MCP servers send for a tool without parameters) takes ``{}`` only; a map
    the schema asks for (``additionalProperties`` a schema) stays one."""
    for schema in ({"type": "object"}, {"type": "object", "properties": {}}):
        assert isinstance(check(schema, {}), Accepted)
        extra = check(schema, {"anything": 1})
        assert isinstance(extra, Rejected) and "unexpected field(s) 'anything'" in extra.message
    labels = {"type": "object", "additionalProperties": {"type": "string"}}
    assert isinstance(check(labels, {"env": "prod"}), Accepted)


def test_all_of_two_object_branches_accepts_fields_of_both_and_refuses_others() -> None:
    schema = {
        "type": "object",
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}}},
        ],
    }
    assert isinstance(check(schema, {"a": "x", "b": 1}), Accepted)
    extra = check(schema, {"a": "x", "b": 1, "c": True})
    assert isinstance(extra, Rejected) and "unexpected field(s) 'c'" in extra.message
    wrong = check(schema, {"a": "x", "b": "1"})
    assert isinstance(wrong, Rejected) and "b: expected integer, got string" in wrong.message


def test_all_of_through_refs_and_nested_inside_a_property() -> None:
    schema = {
        "type": "object",
        "properties": {
            "item": {"allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"size": {"type": "integer"}}}]},
        },
        "$defs": {"Base": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    }
    assert isinstance(check(schema, {"item": {"name": "n", "size": 2}}), Accepted)
    extra = check(schema, {"item": {"name": "n", "colour": "red"}})
    assert isinstance(extra, Rejected) and "item: unexpected field(s) 'colour'" in extra.message


def test_branches_that_extend_an_object_with_properties_are_not_closed_alone() -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "string"}, "email": {"type": "string"}},
        "anyOf": [{"type": "object", "required": ["id"]}, {"type": "object", "required": ["email"]}],
    }
    assert isinstance(check(schema, {"email": "a@b.c"}), Accepted)
    assert isinstance(check(schema, {"id": "7"}), Accepted)
    assert isinstance(check(schema, {}), Rejected)
    extra = check(schema, {"id": "7", "x": 1})
    assert isinstance(extra, Rejected) and "unexpected field(s) 'x'" in extra.message


def test_a_union_of_complete_shapes_keeps_each_shape_closed() -> None:
    schema = {
        "type": "object",
        "properties": {
            "target": {
                "oneOf": [
                    {"type": "object", "properties": {"user": {"type": "string"}}, "required": ["user"]},
                    {"type": "object", "properties": {"group": {"type": "string"}}, "required": ["group"]},
                ]
            }
        },
    }
    assert isinstance(check(schema, {"target": {"user": "u"}}), Accepted)
    assert isinstance(check(schema, {"target": {"group": "g"}}), Accepted)
    # With both fields, neither closed shape matches.
    assert isinstance(check(schema, {"target": {"user": "u", "group": "g"}}), Rejected)


# --- every tool schema in the fixtures -------------------------------------------------

# BFCL's own type words, converted minimally; "any" means no type constraint.
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def bfcl_to_json_schema(schema: Any) -> Any:
    """A BFCL parameter document as JSON Schema: type words only, walked structurally."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            if value != "any":
                out[key] = _BFCL_TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: bfcl_to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = bfcl_to_json_schema(value)
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            out[key] = [bfcl_to_json_schema(sub) for sub in value]
        else:
            out[key] = value
    return out


def recorded_schemas() -> Iterator[dict[str, Any]]:
    for name in ("openai_chat.jsonl", "anthropic_messages.jsonl"):
        for line in (FIXTURES / "recorded" / name).read_text().splitlines():
            request = json.loads(line).get("request")
            for entry in (request or {}).get("tools") or () if isinstance(request, dict) else ():
                if not isinstance(entry, dict):
                    continue
                schema = (entry.get("function") or {}).get("parameters", entry.get("input_schema"))
                if isinstance(schema, dict) and schema.get("type") == "object":
                    yield schema


@functools.cache
def bfcl_entries() -> tuple[tuple[str, dict[str, Any], list[Any]], ...]:
    """(category file, entry, ground truth or []) for every BFCL entry."""
    return tuple(_read_bfcl())


def _read_bfcl() -> Iterator[tuple[str, dict[str, Any], list[Any]]]:
    for path in sorted(BFCL.glob("BFCL_v4_*.json")):
        answers_path = BFCL / "possible_answer" / path.name
        answers: dict[str, Any] = {}
        if answers_path.exists():
            for line in answers_path.read_text().splitlines():
                answer = json.loads(line)
                answers[answer["id"]] = answer["ground_truth"]
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            yield path.name, entry, answers.get(entry["id"], [])


def example(schema: Any, root: dict[str, Any]) -> Any:
    """An instance of ``schema``: every declared property, one key in each free-form map."""
    if not isinstance(schema, dict):
        return "x"
    if "$ref" in schema and isinstance(schema["$ref"], str) and schema["$ref"].startswith("#/"):
        target: Any = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return _merge(example(target, root), example(rest, root) if rest else None)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "allOf" in schema:
        value = None
        for branch in schema["allOf"]:
            value = _merge(value, example(branch, root))
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        return _merge(value, example(rest, root)) if _kind(rest) else value
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            rest = {k: v for k, v in schema.items() if k != key}
            first = example(schema[key][0], root)
            return _merge(first, example(rest, root)) if _kind(rest) == "object" else first
    kind = _kind(schema)
    if kind == "object":
        props = schema.get("properties") or {}
        value = {name: example(sub, root) for name, sub in props.items()}
        extra = schema.get("additionalProperties", True)
        if not props and extra is not False:
            value["some_key"] = example(extra, root) if isinstance(extra, dict) else "v"
        return value
    if kind == "array":
        items = schema.get("items")
        return [example(items, root) if isinstance(items, dict) else 1] * max(1, schema.get("minItems", 1))
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.5))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "x" * max(1, schema.get("minLength", 1))


def _kind(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind is None and "properties" in schema:
        kind = "object"
    return kind if isinstance(kind, str) else None


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **b}
    return b if a is None else a


def test_a_built_instance_of_every_fixture_schema_still_validates() -> None:
    schemas = list(recorded_schemas())
    recorded = len(schemas)
    for _, entry, _ in bfcl_entries():
        schemas.extend(bfcl_to_json_schema(f["parameters"]) for f in entry["function"])
    assert recorded > 100 and len(schemas) > 4000
    tested = 0
    failures = []
    for index, schema in enumerate(schemas):
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError:
            continue
        # A tool that declares no parameters (``properties: {}``) takes none: its call is ``{}``.
        instance = {} if schema.get("properties") == {} else example(schema, schema)
        if not jsonschema.Draft202012Validator(schema).is_valid(instance):
            continue  # the builder cannot satisfy every keyword (patterns, formats); skip those
        try:
            t = tool_from_schema("t", schema, _echo)
        except ToolDefinitionError:
            continue
        tested += 1
        problems = t.validation_errors(instance)
        if problems:
            failures.append((index, problems, schema))
    assert tested > 0.9 * len(schemas)
    assert not failures, f"{len(failures)} of {tested} valid instances refused, e.g. {failures[:3]}"


def _truth_value(acceptable: Any) -> tuple[bool, Any]:
    """The first acceptable ground-truth value; (False, None) when the parameter may be left out."""
    if not isinstance(acceptable, list) or not acceptable:
        return True, acceptable
    first = acceptable[0]
    if first == "" and len(acceptable) == 1:
        return False, None
    if first == "":
        first = acceptable[1]
    if isinstance(first, dict):
        nested = {}
        for key, value in first.items():
            present, chosen = _truth_value(value)
            if present:
                nested[key] = chosen
        return True, nested
    return True, first


def names_only_declared(schema: Any, value: Any) -> bool:
    """Whether every object in ``value`` whose schema names its properties uses only those names."""
    if not isinstance(schema, dict):
        return True
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        if props and set(value) - set(props):
            return False
        return all(names_only_declared(props.get(k), v) for k, v in value.items())
    if isinstance(value, list):
        return all(names_only_declared(schema.get("items"), v) for v in value)
    return True


@pytest.mark.parametrize("category", sorted(p.name for p in BFCL.glob("BFCL_v4_*.json") if "irrelevance" not in p.name))
def test_bfcl_ground_truth_calls_that_are_valid_json_schema_instances_still_validate(category: str) -> None:
    tested = 0
    failures = []
    for name, entry, truth in bfcl_entries():
        if name != category:
            continue
        functions = {f["name"]: bfcl_to_json_schema(f["parameters"]) for f in entry["function"]}
        for answer in truth:
            for function_name, params in answer.items():
                schema = functions.get(function_name)
                if schema is None:
                    continue
                arguments = {}
                for param, acceptable in params.items():
                    present, value = _truth_value(acceptable)
                    if present:
                        arguments[param] = value
                if not jsonschema.Draft202012Validator(schema).is_valid(arguments):
                    continue  # BFCL accepts values JSON Schema does not (e.g. an int for an enum of strings)
                if not names_only_declared(schema, arguments):
                    continue  # a field an object does not name is refused by design (DESIGN.md §3)
                tested += 1
                problems = tool_from_schema("t", schema, _echo).validation_errors(arguments)
                if problems:
                    failures.append((entry["id"], problems))
    assert tested > 50
    assert not failures, f"{len(failures)} of {tested} ground-truth calls refused, e.g. {failures[:3]}"


def test_dependent_schemas_and_conditionals_are_parts_of_one_closed_object() -> None:
    schema = {
        "type": "object",
        "properties": {"card": {"type": "string"}},
        "dependentSchemas": {"card": {"properties": {"cvc": {"type": "string"}}, "required": ["cvc"]}},
        "if": {"properties": {"card": {"const": "amex"}}},
        "then": {"properties": {"pin": {"type": "string"}}},
    }
    assert isinstance(check(schema, {"card": "visa", "cvc": "123"}), Accepted)
    assert isinstance(check(schema, {"card": "amex", "cvc": "1234", "pin": "9"}), Accepted)
    extra = check(schema, {"card": "visa", "cvc": "123", "other": 1})
    assert isinstance(extra, Rejected) and "unexpected field(s) 'other'" in extra.message
