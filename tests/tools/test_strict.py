"""Tool schemas in OpenAI's strict mode where the schema allows and the server enforces it, and what the host does
with strict mode's nulls."""

from __future__ import annotations

import json
from typing import Any

import pydantic

from tether import Agent, OpenAIChatModel, Status, tool
from tether.models.providers import PROVIDERS, provider
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls
from tether.tools.strict import strict_schema


@tool(read_only=True)
def search(query: str, limit: int = 5, lang: str | None = None) -> dict[str, Any]:
    """Search."""
    return {"query": query, "limit": limit, "lang": lang}


class Filter(pydantic.BaseModel):
    field: str
    exact: bool = False  # optional, not nullable: below the top level a null could not mean "not given"


@tool(read_only=True)
def filtered(filter: Filter) -> str:
    """Filter."""
    return filter.field


@tool(read_only=True)
def tagged(tags: dict[str, str]) -> int:
    """An open dict."""
    return len(tags)


def test_optional_parameters_are_required_and_nullable_in_the_strict_spec() -> None:
    function = search.spec(strict=True)["function"]

    assert function["strict"] is True
    params = function["parameters"]
    assert params["required"] == ["query", "limit", "lang"]
    assert params["additionalProperties"] is False
    assert params["properties"]["limit"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert "default" not in json.dumps(params)
    assert search.strict_nulls == {"limit"}  # lang accepts null already: its null is its value
    assert search.spec()["function"]["parameters"] == search.parameters  # non-strict: as declared


def test_schemas_strict_mode_cannot_express_are_sent_without_strict() -> None:
    assert "strict" not in filtered.spec(strict=True)["function"]
    assert "strict" not in tagged.spec(strict=True)["function"]
    assert strict_schema({"type": "object", "properties": {"s": {"type": "string", "minLength": 2}}}) is None


async def test_over_http_a_null_for_an_optional_parameter_means_its_default() -> None:
    script = [
        tool_calls(
            [
                ("c1", "search", '{"query": "q", "limit": null, "lang": null}'),
                ("c2", "search", '{"query": null, "limit": 1, "lang": "en"}'),  # null for a required one
            ]
        ),
        text("done"),
    ]
    async with FakeServer(script) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k", strict_tools=True)  # as OpenAI's
        async with Agent(model, [search]) as agent:
            result = await agent.run("go")

    assert result.status is Status.COMPLETED
    sent = server.requests[0]["tools"][0]["function"]
    assert sent["strict"] is True
    first, second = (json.loads(m.content or "") for m in result.state.messages if m.role == "tool")
    assert first == {"ok": True, "result": {"query": "q", "limit": 5, "lang": None}}
    assert second["error"]["code"] == "invalid_arguments"
    assert "query: expected string, got null" in second["error"]["message"]


async def test_strict_tools_off_sends_the_schema_as_declared_and_keeps_null_an_error() -> None:
    script = [tool_calls([("c1", "search", '{"query": "q", "limit": null}')]), text("done")]
    async with FakeServer(script) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        async with Agent(model, [search], strict_tools=False) as agent:
            result = await agent.run("go")

    assert "strict" not in server.requests[0]["tools"][0]["function"]
    refused = json.loads(result.state.messages[2].content or "")
    assert refused["error"]["code"] == "invalid_arguments"


async def test_a_server_that_does_not_enforce_strict_mode_gets_the_schema_as_declared() -> None:
    """Only OpenAI's own endpoint, or a profile saying so, gets the strict form: a rewrite nobody enforces is a
    schema nobody wrote."""
    script = [tool_calls([("c1", "search", '{"query": "q", "limit": null}')]), text("done")]
    async with FakeServer(script) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        async with Agent(model, [search]) as agent:
            result = await agent.run("go")

    assert server.requests[0]["tools"][0]["function"] == {
        "name": "search",
        "description": "Search.",
        "parameters": search.parameters,
    }
    refused = json.loads(result.state.messages[2].content or "")
    assert refused["error"]["code"] == "invalid_arguments"  # null is not "not given" for the schema as declared
    assert OpenAIChatModel("m", api_key="k").strict_tools is True  # api.openai.com enforces it
    assert provider("openai").strict_tools is True
    assert not any(p.strict_tools for p in PROVIDERS.values() if p.name != "openai")


def test_the_fast_check_agrees_with_the_gate_validator() -> None:
    """fast_valid answers only what jsonschema (with the gate's strict integers) would answer."""
    from tether.tools.fastcheck import fast_valid
    from tether.tools.tool import _StrictValidator

    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0},
            "x": {"type": "number", "exclusiveMaximum": 10},
            "tag": {"enum": ["a", "b", 1]},
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "maxItems": 2},
            "note": {"anyOf": [{"type": "string", "pattern": "^n", "maxLength": 3}, {"type": "null"}]},
        },
        "required": ["n"],
        "additionalProperties": False,
        "$defs": {"Item": {"type": "object", "properties": {"k": {"const": True}}, "additionalProperties": False}},
    }
    # Checks merged into one: a pure-type anyOf (str | None), a type list, an object typed and with properties.
    schema["properties"] |= {
        "maybe": {"anyOf": [{"type": "string", "title": "M"}, {"type": "null"}]},
        "flag": {"type": ["boolean", "integer"]},
        "bag": {"type": ["array", "object"]},
        "inner": {"type": "object", "properties": {"z": {"type": "integer"}}, "required": ["z"]},
    }
    values: list[Any] = [
        {"n": 1},
        {"n": True},
        {"n": 3.0},
        {"n": -1},
        {"n": 1, "x": 10},
        {"n": 1, "x": 9.5},
        {"n": 1, "tag": True},
        {"n": 1, "tag": 1},
        {"n": 1, "tag": "c"},
        {"n": 1, "items": [{"k": True}, {"k": 1}]},
        {"n": 1, "items": [{"k": True}, {}, {}]},
        {"n": 1, "note": "no"},
        {"n": 1, "note": "yes"},
        {"n": 1, "note": "nope"},
        {"n": 1, "note": None},
        {"n": 1, "extra": 0},
        {"n": 1, "maybe": None, "flag": True, "bag": [], "inner": {"z": 1}},
        {"n": 1, "maybe": "m", "flag": 2, "bag": {}},
        {"n": 1, "maybe": 1},
        {"n": 1, "maybe": []},
        {"n": 1, "flag": 1.5},
        {"n": 1, "flag": None},
        {"n": 1, "bag": "x"},
        {"n": 1, "inner": []},
        {"n": 1, "inner": None},
        {"n": 1, "inner": {}},
        {"n": 1, "inner": {"z": True}},
        {},
        [],
    ]
    gate = _StrictValidator(schema)
    for value in values:
        assert fast_valid(schema, value) == gate.is_valid(value), value
    assert fast_valid({"type": "object", "oneOf": []}, {}) is None
