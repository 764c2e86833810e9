"""Structured output over real HTTP against FakeServer: native response_format, the final-answer tool, prompted JSON."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

import pydantic
import pytest
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from tether import Agent, Budget, OpenAIChatModel, Status, TetherError, tool
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls
from tether.tools.output import OutputSpec


class Invoice(pydantic.BaseModel):
    customer: str
    total: int
    note: str | None = None


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Pair(TypedDict):
    name: str
    count: int


@tool(read_only=True)
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def repair_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user" and "final answer" in m["content"]]


async def run_with(script: list[Any], output_type: Any, prompt: str = "go", **options: Any) -> tuple[Any, FakeServer]:
    async with FakeServer(script) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        agent = Agent(model, options.pop("tools", []), output_type=output_type, **options)
        try:
            result = await agent.run(prompt)
        finally:
            await agent.aclose()
    return result, server


# ------------------------------------------------------------------ native


async def test_native_answer_is_a_validated_instance_and_the_request_carries_a_strict_json_schema() -> None:
    result, server = await run_with([text('{"customer": "ACME", "total": 3720}')], Invoice)

    assert result.status is Status.COMPLETED
    assert result.output == Invoice(customer="ACME", total=3720)
    assert isinstance(result.output, Invoice)
    sent = server.requests[0]["response_format"]
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["strict"] is True
    assert sent["json_schema"]["name"] == "Invoice"
    schema = sent["json_schema"]["schema"]
    assert schema["required"] == ["customer", "total", "note"]  # strict mode: every property required
    assert schema["additionalProperties"] is False
    assert "tools" not in server.requests[0]


async def test_invalid_twice_then_valid_is_repaired_within_the_repair_budget() -> None:
    script = [
        text('{"customer": "ACME", "total": true}'),  # true is not an integer
        text('{"customer": "ACME", "total": 1, "total": 2}'),  # duplicate key
        text('{"customer": "ACME", "total": 3720, "note": null}'),  # null for an optional field: not given
    ]
    result, server = await run_with(script, Invoice, budget=Budget(max_repairs=2))

    assert result.status is Status.COMPLETED, result.reason
    assert result.output == Invoice(customer="ACME", total=3720)
    assert len(server.requests) == 3
    first, second = repair_messages(server.requests[1]), repair_messages(server.requests[2])
    assert len(first) == 1 and "total: expected integer, got boolean" in first[0]
    assert "duplicate key 'total'" in second[-1]


async def test_an_answer_that_stays_invalid_ends_repair_exhausted_with_no_value() -> None:
    script = [text('{"customer": "ACME"}'), text("not json at all")]
    result, server = await run_with(script, Invoice, budget=Budget(max_repairs=1))

    assert result.status is Status.REPAIR_EXHAUSTED
    assert result.output is None
    assert "invalid" in (result.reason or "")
    assert len(server.requests) == 2


async def test_an_answer_cut_at_length_has_no_value_even_when_it_parses() -> None:
    result, _ = await run_with([text('{"customer": "ACME", "total": 1}', finish_reason="length")], Invoice)

    assert result.status is Status.TRUNCATED
    assert result.output is None


async def test_content_filter_has_no_value() -> None:
    result, _ = await run_with([text('{"customer": "A", "total": 1}', finish_reason="content_filter")], Invoice)

    assert result.status is Status.CONTENT_FILTERED
    assert result.output is None


async def test_nan_in_an_answer_is_refused_like_in_tool_arguments() -> None:
    script = [text('{"result": NaN}'), text('{"result": 1.5}')]
    result, server = await run_with(script, float)

    assert result.output == 1.5
    assert "NaN is not valid JSON" in repair_messages(server.requests[1])[0]


@pytest.mark.parametrize(
    ("output_type", "answer", "expected"),
    [
        (int, '{"result": 42}', 42),
        (list[str], '{"result": ["a", "b"]}', ["a", "b"]),
        (Point, '{"x": 1, "y": 2}', Point(1, 2)),
        (Pair, '{"name": "n", "count": 3}', {"name": "n", "count": 3}),
        (
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            '{"city": "Oslo"}',
            {"city": "Oslo"},
        ),
    ],
    ids=["int", "list", "dataclass", "typeddict", "raw-schema"],
)
async def test_each_kind_of_output_type_becomes_its_value(output_type: Any, answer: str, expected: Any) -> None:
    result, _ = await run_with([text(answer)], output_type)

    assert result.status is Status.COMPLETED, result.reason
    assert result.output == expected
    assert type(result.output) is type(expected)


async def test_a_scalar_answer_is_not_taken_unwrapped() -> None:
    result, server = await run_with([text("42"), text('{"result": "42"}')], int)

    assert result.status is Status.REPAIR_EXHAUSTED
    assert "must be a JSON object" in repair_messages(server.requests[1])[0]


# -------------------------------------------------------------------- tool


async def test_tool_mode_offers_a_strict_final_answer_tool_and_repairs_its_arguments() -> None:
    script = [
        tool_calls([("c1", "multiply", '{"a": 248, "b": 15}')]),
        tool_calls([("c2", "final_answer", '{"customer": "ACME", "total": "3720"}')]),
        tool_calls([("c3", "final_answer", '{"customer": "ACME", "total": 3720}')]),
    ]
    result, server = await run_with(script, Invoice, output_mode="tool", tools=[multiply], strict_tools=True)

    assert result.status is Status.COMPLETED, result.reason
    assert result.output == Invoice(customer="ACME", total=3720)
    offered = {t["function"]["name"]: t["function"] for t in server.requests[0]["tools"]}
    assert set(offered) == {"multiply", "final_answer"}
    assert offered["final_answer"]["strict"] is True
    assert "response_format" not in server.requests[0]
    refused = json.loads(server.requests[2]["messages"][-1]["content"])
    assert refused["error"]["code"] == "invalid_arguments"
    assert "total: expected integer, got string" in refused["error"]["message"]
    # Every call got its one tool message, the final answer included.
    assert [m.role for m in result.state.messages][-2:] == ["assistant", "tool"]


async def test_tool_mode_text_instead_of_the_tool_is_repaired_then_exhausted() -> None:
    result, server = await run_with([text("3720"), text("still 3720")], Invoice, output_mode="tool")

    assert result.status is Status.REPAIR_EXHAUSTED
    assert result.output is None
    # A server that does not enforce strict mode gets the answer's own schema (the optional note stays optional).
    offered = server.requests[0]["tools"][0]["function"]
    assert "strict" not in offered and offered["parameters"]["required"] == ["customer", "total"]
    assert "calling the tool final_answer" in repair_messages(server.requests[1])[0]


async def test_tool_mode_calls_beside_a_valid_final_answer_are_not_executed() -> None:
    ran: list[int] = []

    @tool
    def record(n: int) -> int:
        """Record a number."""
        ran.append(n)
        return n

    script = [tool_calls([("c1", "final_answer", '{"result": 7}'), ("c2", "record", '{"n": 1}')])]
    result, _ = await run_with(script, int, output_mode="tool", tools=[record])

    assert result.output == 7
    assert ran == []
    tool_messages = [m for m in result.state.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["c1", "c2"]


# ----------------------------------------------------------------- prompted


async def test_prompted_mode_puts_the_schema_in_a_system_message_and_reads_a_fenced_answer() -> None:
    result, server = await run_with([text('```json\n{"x": 3, "y": 4}\n```')], Point, output_mode="prompted")

    assert result.output == Point(3, 4)
    system = [m["content"] for m in server.requests[0]["messages"] if m["role"] == "system"]
    assert len(system) == 1 and '"required":["x","y"]' in system[0]
    assert "response_format" not in server.requests[0]


# ------------------------------------------------------------- at the door


class NotSchemable:
    pass


def test_an_output_type_that_cannot_become_a_schema_is_refused_at_construction() -> None:
    with pytest.raises(TetherError, match=r"cannot become a JSON Schema.*use a pydantic model"):
        OutputSpec(NotSchemable)
    with pytest.raises(TetherError, match="not a valid JSON Schema"):
        OutputSpec({"type": "objekt"})
    with pytest.raises(TetherError, match="output_mode must be one of"):
        OutputSpec(int, mode="xml")  # type: ignore[arg-type]


def test_a_tool_named_like_the_final_answer_tool_is_refused() -> None:
    @tool
    def final_answer(x: int) -> int:
        """Clashes."""
        return x

    from tether import ScriptedModel

    with pytest.raises(TetherError, match="rename the tool"):
        Agent(ScriptedModel([]), [final_answer], output_type=int, output_mode="tool")


def test_an_optional_nested_field_keeps_the_schema_non_strict() -> None:
    class Inner(pydantic.BaseModel):
        a: int = 1

    class Outer(pydantic.BaseModel):
        inner: Inner

    assert OutputSpec(Outer).strict is False
    assert OutputSpec(Invoice).strict is True


# ------------------------------------------------------------ short route


class Plain(pydantic.BaseModel):
    name: str
    count: int
    ratio: float = 1.0
    done: bool | None = None
    note: Optional[str] = None  # noqa: UP045 -- the typing.Union spelling is recognised too


class Checked(pydantic.BaseModel):
    count: int

    @pydantic.field_validator("count", mode="before")
    @classmethod
    def digits(cls, value: Any) -> Any:
        return int(value) if isinstance(value, str) else value  # would let "248" through a strict check


class Bounded(pydantic.BaseModel):
    count: int = pydantic.Field(ge=0)


class Nested(pydantic.BaseModel):
    plain: Plain


class Aliased(pydantic.BaseModel):
    count: int = pydantic.Field(alias="n")


PLAIN_ANSWERS = [
    '{"name": "a", "count": 1}',
    '{"name": "a", "count": 1, "ratio": 2, "done": true, "note": "x"}',
    '{"name": "a", "count": 1, "note": null}',
    '{"name": "a", "count": "1"}',
    '{"name": "a", "count": true}',
    '{"name": "a", "count": 1.0}',
    '{"name": "a", "count": 10000000000000000000000}',
    '{"name": null, "count": 1}',
    '{"name": "a"}',
    '{"name": "a", "count": 1, "extra": 1}',
    '{"name": "a", "count": 1, "ratio": true}',
    '{"name": "a", "count": 1, "done": 1}',
    '{"name": 5, "count": 1}',
]


@pytest.mark.parametrize("answer", PLAIN_ANSWERS)
def test_the_short_route_for_a_plain_model_accepts_exactly_what_the_schema_check_accepts(answer: str) -> None:
    short, long = OutputSpec(Plain), OutputSpec(Plain)
    long._plain = None
    assert short._plain == {"name", "count", "ratio", "done", "note"}

    refused_short, refused_long = short.check_answer(answer), long.check_answer(answer)
    assert refused_short == refused_long
    if refused_short is None:
        value = short.decode(answer)
        assert value == long.decode(answer)
        assert type(value.ratio) is float


@pytest.mark.parametrize("output_type", [Checked, Bounded, Nested, Aliased, Pair, Point, int])
def test_a_model_with_validators_constraints_nesting_or_aliases_takes_the_long_route(output_type: Any) -> None:
    assert OutputSpec(output_type)._plain is None
    assert OutputSpec(Checked).check_answer('{"count": "248"}') is not None  # the schema check refuses it
