"""``$ref`` in a tool's schema: refused when the tool is made if it cannot be followed, bounded when it recurses.

A cycle of references that never moves into the value, and a reference that
does not resolve inside the schema, used to pass tool construction and then
crash the gate on the first call (``RecursionError``, jsonschema's internal
referencing error, and a remote reference fetched). A schema recursive
through the value (a tree) must keep working, and checking a deep value
against it must end in a refusal, never a ``RecursionError``. References
that double the work at each level on one value are refused too, and so are
those that check one part of the value against two subschemas that both
recurse (the work doubles with each level the value nests).
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from typing_extensions import TypeAliasType

from tether import Agent, OpenAIChatModel
from tether.core import ErrorCode, ToolCall, ToolDefinitionError
from tether.core.machine import Accepted, Rejected
from tether.core.nesting import MAX_DEPTH
from tether.testing.fake_server import FakeServer, text, tool_calls
from tether.tools import Toolbox, tool, tool_from_schema
from tether.tools.refs import MAX_IN_PLACE_VISITS, MAX_NESTED_VISITS


def _echo(**arguments: Any) -> Any:
    return arguments


def schema_with(x: Any, **defs: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": x}, "$defs": defs}


def check(t: Any, arguments: Any) -> Accepted | Rejected:
    return Toolbox([t]).check(ToolCall("c1", t.name, json.dumps(arguments)))


REF_A = {"$ref": "#/$defs/a"}


@pytest.mark.parametrize(
    ("schema", "cycle"),
    [
        (schema_with(REF_A, a={"$ref": "#/$defs/b"}, b=REF_A), "#/$defs/a -> #/$defs/b -> #/$defs/a"),
        (schema_with(REF_A, a=REF_A), "#/$defs/a -> #/$defs/a"),
        (schema_with(REF_A, a={"anyOf": [{"type": "string"}, REF_A]}), "#/$defs/a -> #/$defs/a"),
        (schema_with(REF_A, a={"allOf": [{"$ref": "#/$defs/b"}]}, b={"not": REF_A}), "#/$defs/a -> #/$defs/b"),
        (schema_with(REF_A, a={"if": {"type": "string"}, "then": REF_A}), "#/$defs/a -> #/$defs/a"),
        ({"type": "object", "properties": {}, "allOf": [{"$ref": "#"}]}, "# -> #"),
        ({"type": "object", "dependentSchemas": {"k": {"$ref": "#"}}}, "# -> #"),
    ],
)
def test_a_reference_cycle_on_the_same_value_is_refused_when_the_tool_is_made(schema: Any, cycle: str) -> None:
    with pytest.raises(ToolDefinitionError, match="never reaches into the value") as caught:
        tool_from_schema("f", schema, _echo)
    assert str(caught.value).startswith(f"tool f: the $ref cycle {cycle}")


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("https://schemas.example.com/x.json", "is not inside the schema (tether never fetches a schema)"),
        ("other.json#/a", "is not inside the schema (tether never fetches a schema)"),
        ("#/$defs/missing", "points to nothing in the schema"),
        ("#nowhere", "names no anchor in the schema"),
        ("#/required/0", "points to a value that is not a schema"),
    ],
)
def test_a_reference_that_does_not_resolve_inside_the_schema_is_refused(ref: str, why: str) -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": ref}}, "required": ["x"]}
    with pytest.raises(ToolDefinitionError) as caught:
        tool_from_schema("f", schema, _echo)
    assert str(caught.value) == f"tool f: $ref {ref!r} at #/properties/x {why}"


@pytest.fixture
def web_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server serving a schema, and the paths it was asked for."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = json.dumps({"type": "integer"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/schema.json", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_remote_reference_is_never_fetched(web_server: tuple[str, list[str]]) -> None:
    url, asked = web_server
    schema = {"type": "object", "properties": {"x": {"$ref": url}}}
    try:
        made = tool_from_schema("f", schema, _echo)
    except ToolDefinitionError as exc:
        assert "tether never fetches a schema" in str(exc)
    else:  # the unfixed gate: made, then the first invalid call fetched the URL to explain itself
        check(made, {"x": "not an integer"})
    assert asked == []


TREE = {
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/node"}},
    "required": ["root"],
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"v": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        }
    },
}


def tree(levels: int, leaf: dict[str, Any]) -> dict[str, Any]:
    """Arguments whose objects and arrays are nested ``levels`` deep (the arguments object counts)."""
    node = leaf
    for _ in range((levels - 2) // 2):
        node = {"children": [node]}
    return {"root": node}


def test_a_schema_recursive_through_the_value_keeps_working() -> None:
    made = tool_from_schema("plant", TREE, _echo)
    assert isinstance(check(made, tree(10, {"v": 1})), Accepted)
    refused = check(made, tree(10, {"v": "1"}))
    assert isinstance(refused, Rejected) and refused.code == ErrorCode.INVALID_ARGUMENTS
    assert refused.message.endswith(".children.0.v: expected integer, got string")
    assert isinstance(check(made, {"root": {"children": [{"w": 1}]}}), Rejected)  # closed objects still closed
    # References that resolve: an anchor, and a pointer into properties.
    anchored = {"type": "object", "properties": {"x": {"$ref": "#word"}}, "$defs": {"w": {"$anchor": "word"}}}
    assert isinstance(check(tool_from_schema("a", anchored, _echo), {"x": "y"}), Accepted)
    pointer = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"$ref": "#/properties/a"}}}
    assert isinstance(check(tool_from_schema("p", pointer, _echo), {"a": "x", "b": 5}), Rejected)
    # A definition is checked only when referred to: one that refers to the root loops nowhere.
    unused = {"type": "object", "properties": {"a": {"type": "string"}}, "$defs": {"back": {"$ref": "#"}}}
    assert isinstance(check(tool_from_schema("u", unused, _echo), {"a": "x"}), Accepted)


def doubling(levels: int, keyword: str) -> dict[str, Any]:
    """Each definition checks the value in place against the next one twice: 2**levels visits for one value."""
    defs = {f"d{n}": {keyword: [{"$ref": f"#/$defs/d{n + 1}"}] * 2} for n in range(levels)}
    return schema_with({"$ref": "#/$defs/d0"}, **defs, **{f"d{levels}": {"type": "string"}})


@pytest.mark.parametrize("keyword", ["allOf", "anyOf", "oneOf"])
def test_references_that_double_the_work_at_each_level_are_refused_when_the_tool_is_made(keyword: str) -> None:
    """Forty levels in 2 KB: checking {"x": 1} against it took days (the fast check's and jsonschema's alike)."""
    with pytest.raises(ToolDefinitionError, match=f"would visit more than {MAX_IN_PLACE_VISITS} of its subschemas"):
        tool_from_schema("doubling", doubling(40, keyword), _echo, untrusted_schema=True)
    with pytest.raises(ToolDefinitionError, match="would visit more than"):
        tool_from_schema("doubling", doubling(40, keyword), _echo)  # the host's own schema too
    # A few levels, and a wide union of definitions, cost little and are kept.
    made = tool_from_schema("few", doubling(4, keyword), _echo)
    assert isinstance(check(made, {"x": 1}), Rejected)
    models = {f"m{n}": {"type": "object", "properties": {"k": {"const": n}}} for n in range(500)}
    union = schema_with({"anyOf": [{"$ref": f"#/$defs/{name}"} for name in models]}, **models)
    assert isinstance(check(tool_from_schema("union", union, _echo), {"x": {"k": 499}}), Accepted)


BACK = {"$ref": "#/$defs/n"}


def nesting(**node: Any) -> dict[str, Any]:
    """A schema whose field ``x`` is the definition ``n``, with ``node``'s keywords."""
    return {"type": "object", "properties": {"x": BACK}, "required": ["x"], "$defs": {"n": node}}


def chain(depth: int, key: str, leaf: Any) -> Any:
    """``leaf`` inside ``depth`` objects, each holding the next under ``key``."""
    value = leaf
    for _ in range(depth):
        value = {key: value}
    return value


def arrays(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def terms(depth: int) -> Any:
    value: Any = {"k": "add"}
    for _ in range(depth):
        value = {"k": "mul", "left": value}
    return value


LIMITED = re.compile(r"arguments: nested more than (\d+) levels deep, past which this schema's check costs too much")


@pytest.mark.parametrize(
    ("schema", "deep"),
    [
        (nesting(type="object", properties={"a": BACK}, patternProperties={"^a$": BACK}), lambda d: chain(d, "a", {})),
        (nesting(type="array", items=BACK, contains=BACK), arrays),
        (nesting(allOf=[{"properties": {"a": BACK}}, {"properties": {"a": BACK}}]), lambda d: chain(d, "a", {})),
        (nesting(patternProperties={"^a": BACK, "b$": BACK}), lambda d: chain(d, "ab", {})),
        (nesting(patternProperties={"^ab": BACK, "^a[bc]": BACK}), lambda d: chain(d, "ab", {})),
        (nesting(allOf=[{"additionalProperties": BACK}, {"properties": {"a": BACK}}]), lambda d: chain(d, "a", {})),
        # jsonschema checks each branch again to learn what it evaluated
        (nesting(allOf=[{"properties": {"a": BACK}}], unevaluatedProperties=False), lambda d: chain(d, "a", {})),
        (nesting(prefixItems=[BACK], items=BACK, unevaluatedItems=BACK), arrays),
        # A union of two models that name one recursive field (an expression tree): oneOf checks every branch.
        (nesting(oneOf=[{"properties": {"k": {"const": m}, "left": BACK}} for m in ("add", "mul")]), terms),
    ],
    ids=[
        "properties-pattern",
        "items-contains",
        "allof-properties",
        "patterns",
        "prefixed-patterns",
        "additional-properties",
        "unevaluated",
        "prefix-items",
        "union",
    ],
)
def test_references_that_check_one_part_twice_at_each_level_bound_how_deep_a_value_may_nest(
    schema: Any, deep: Callable[[int], Any]
) -> None:
    """Each level of the value is checked twice per check of the level above: 2**depth, and values 64 deep passed
    the depth gate (eighteen levels of the first schema took seven seconds, the fast check's and jsonschema's).
    The tool is kept, and a value nested deeper than its schema checks within ``MAX_NESTED_VISITS`` is refused
    before either check runs; a shallower one is checked."""
    agent = Agent(OpenAIChatModel("fake", base_url="http://127.0.0.1:9/v1", api_key="x"), [], output_type=schema)
    for made in (tool_from_schema("f", schema, _echo, untrusted_schema=True), tool_from_schema("f", schema, _echo)):
        [refused] = made.validation_errors({"x": deep(40)})
        limit = LIMITED.fullmatch(refused)
        assert limit is not None and 4 <= int(limit.group(1)) < MAX_DEPTH, refused
        assert not any("nested more than" in e for e in made.validation_errors({"x": deep(2)}))
    assert agent is not None  # an output type of that shape is kept too


def test_references_that_multiply_the_work_past_a_shallow_value_are_refused_when_the_tool_is_made() -> None:
    """A hundred and fifty branches that each check one property against the node: the arguments and one level
    inside would already cost more than ``MAX_NESTED_VISITS`` subschemas."""
    wide = nesting(allOf=[{"properties": {"a": BACK}}] * 150)
    message = rf"^tool f: a value nested [12] levels? deep would be checked against more than {MAX_NESTED_VISITS} "
    with pytest.raises(ToolDefinitionError, match=message):
        tool_from_schema("f", wide, _echo, untrusted_schema=True)
    with pytest.raises(ToolDefinitionError, match=message):
        tool_from_schema("f", wide, _echo)  # the host's own schema too
    with pytest.raises(ToolDefinitionError, match=r"^output_type: a value nested [12] levels? deep"):
        Agent(OpenAIChatModel("fake", base_url="http://127.0.0.1:9/v1", api_key="x"), [], output_type=wide)


JSON_VALUE = {
    "anyOf": [
        {"type": ["string", "number", "boolean", "null"]},
        {"type": "object", "additionalProperties": BACK},
        {"type": "array", "items": BACK},
    ]
}


def test_references_that_check_each_part_once_are_kept_and_check_values() -> None:
    """Recursive schemas whose work grows with the value, not with 2**depth: each still checks its values."""
    both = nesting(type="object", properties={"a": BACK, "b": BACK, "c": {"type": "integer"}})
    made = tool_from_schema("both", both, _echo, untrusted_schema=True)
    assert made.validation_errors({"x": {"a": chain(40, "b", {"c": 1}), "b": {}}}) == []
    assert made.validation_errors({"x": chain(40, "a", {"c": "1"})}) == [
        f"x{'.a' * 40}.c: expected integer, got string"
    ]

    value = tool_from_schema("value", nesting(**JSON_VALUE), _echo, untrusted_schema=True)
    assert value.validation_errors({"x": chain(30, "k", [1, "s", None, {"m": [True]}])}) == []
    assert value.validation_errors({"x": chain(30, "k", [{}])}) == []
    assert value.validation_errors({"x": chain(70, "k", [1])}) == ["arguments: nested more than 64 levels deep"]

    # Patterns whose literal prefixes differ never match one name; beside additionalProperties for the rest.
    prefixed = nesting(patternProperties={"^a-": BACK, "^b-": BACK}, additionalProperties={"type": "integer"})
    made = tool_from_schema("prefixed", prefixed, _echo, untrusted_schema=True)
    assert made.validation_errors({"x": chain(40, "a-1", {"b-2": {"z": 1}})}) == []
    assert made.validation_errors({"x": chain(40, "b-1", {"z": "1"})}) != []
    # Properties and additionalProperties of one schema check different names; prefixItems and items, items.
    mixed = nesting(properties={"a": {"type": "integer"}}, additionalProperties=BACK)
    assert tool_from_schema("mixed", mixed, _echo).validation_errors({"x": chain(40, "b", {"a": 1})}) == []
    array = nesting(type="array", prefixItems=[{"type": "integer"}], items=BACK)
    assert tool_from_schema("array", array, _echo).validation_errors({"x": [1, [2, [3, []]]]}) == []

    # A union of 500 models, each referring back through its own field, and the tree.
    models = {f"m{n}": {"type": "object", "properties": {f"f{n}": BACK}} for n in range(500)}
    union = {**nesting(anyOf=[{"$ref": f"#/$defs/m{n}"} for n in range(500)])}
    union["$defs"] = {**union["$defs"], **models}
    made = tool_from_schema("union", union, _echo, untrusted_schema=True)
    assert made.validation_errors({"x": {"f499": {"f3": {}}}}) == []
    assert isinstance(
        check(tool_from_schema("plant", TREE, _echo, untrusted_schema=True), tree(60, {"v": 1})), Accepted
    )


@pytest.mark.parametrize("leaf", [{}, {"v": "not an integer"}])
def test_a_deep_value_gets_the_documented_refusal_never_a_recursion_error(leaf: dict[str, Any]) -> None:
    made = tool_from_schema("plant", TREE, _echo)
    assert isinstance(check(made, tree(MAX_DEPTH, {"v": 1})), Accepted)
    for levels in (MAX_DEPTH + 2, 400, 900):
        # As a call's text, the decoder refuses it first (tether.core.nesting) ...
        refused = check(made, tree(levels, leaf))
        assert isinstance(refused, Rejected), levels
        assert refused.code == ErrorCode.INVALID_JSON
        assert refused.message == "arguments are nested more than 64 levels deep"
        # ... and as a value handed over already decoded (an MCP client's arguments), the schema check does.
        assert made.validation_errors(tree(levels, leaf)) == ["arguments: nested more than 64 levels deep"]


class Node(BaseModel):
    name: str
    children: list[Node] = []


Either = TypeAliasType("Either", "int | Either")  # type: ignore[misc]  # a type that only refers to itself


def test_the_typed_path_bounds_a_recursive_model_and_refuses_a_cycle() -> None:
    @tool
    def plant(root: Node) -> str:
        """Plant a tree."""
        return root.name

    deep: dict[str, Any] = {"name": "leaf"}
    for _ in range(300):
        deep = {"name": "n", "children": [deep]}
    assert isinstance(check(plant, {"root": {"name": "a", "children": [{"name": "b"}]}}), Accepted)
    refused = check(plant, {"root": deep})
    assert isinstance(refused, Rejected) and refused.message == "arguments are nested more than 64 levels deep"
    assert plant.validation_errors({"root": deep}) == ["arguments: nested more than 64 levels deep"]

    with pytest.raises(ToolDefinitionError, match=r"the \$ref cycle #/\$defs/Either -> #/\$defs/Either"):

        @tool
        def pick(x: Either) -> None:  # type: ignore[valid-type]
            """Pick one."""


async def test_a_run_answers_a_deep_call_with_a_controlled_error() -> None:
    """Through the whole loop over HTTP: the model gets invalid_json, and the run goes on."""
    made = tool_from_schema("plant", TREE, _echo, read_only=True)
    deep = json.dumps(tree(600, {}))
    async with FakeServer([tool_calls([("c1", "plant", deep)]), text("done")]) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="x")
        async with Agent(model, [made]) as agent:
            result = await agent.run("plant it")
    assert result.status.value == "completed"
    sent = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert json.loads(sent[0]["content"])["error"] == {
        "code": "invalid_json",
        "message": "arguments are nested more than 64 levels deep",
        "retryable": True,
    }


def test_an_output_type_schema_gets_the_same_checks() -> None:
    cyclic = schema_with(REF_A, a={"$ref": "#/$defs/b"}, b=REF_A)
    with pytest.raises(ToolDefinitionError, match=r"^output_type: the \$ref cycle #/\$defs/a -> #/\$defs/b"):
        Agent(OpenAIChatModel("fake", base_url="http://127.0.0.1:9/v1", api_key="x"), [], output_type=cyclic)
    remote = {"type": "object", "properties": {"x": {"$ref": "https://schemas.example.com/x.json"}}}
    with pytest.raises(ToolDefinitionError, match="tether never fetches a schema"):
        Agent(OpenAIChatModel("fake", base_url="http://127.0.0.1:9/v1", api_key="x"), [], output_type=remote)
