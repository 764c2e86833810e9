"""@tool schemas, strict decoding and validation, the envelope and truncation."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from tether.core import ErrorCode, PendingCall, ToolCall, ToolDefinitionError
from tether.core.machine import Accepted, Rejected
from tether.tools import (
    InvalidJson,
    Principal,
    Toolbox,
    ToolContext,
    ToolError,
    strict_loads,
    tool,
    tool_from_schema,
)


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Line(BaseModel):
    sku: str
    qty: Annotated[int, Field(ge=1)]


@tool(read_only=True)
def order(
    customer: str,
    lines: list[Line],
    color: Color = Color.RED,
    kind: Literal["normal", "rush"] = "normal",
    note: str | None = None,
    tags: dict[str, int] | None = None,
    count: Annotated[int, Field(ge=0, le=10)] = 1,
    ratio: float = 1.0,
    ref: Annotated[str, Field(pattern=r"^R-[0-9]{3}$")] = "R-000",
    ctx: ToolContext | None = None,
) -> dict[str, object]:
    """Place an order.

    Args:
        customer: who orders
        lines: what to order
    """
    return {"customer": customer, "qty": sum(line.qty for line in lines), "color": color.value}


@tool
def who(context: ToolContext) -> str:
    """Report the injected context."""
    return f"{context.principal.id}/{context.idempotency_key}"


def check(tb: Toolbox, name: str, arguments: str) -> Accepted | Rejected:
    return tb.check(ToolCall("c1", name, arguments))


def test_schema_from_type_hints() -> None:
    schema = order.parameters
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["customer", "lines"]
    props = schema["properties"]
    assert props["customer"] == {"type": "string", "description": "who orders"}
    assert props["count"]["minimum"] == 0 and props["count"]["maximum"] == 10
    assert props["kind"]["enum"] == ["normal", "rush"]
    assert schema["$defs"]["Color"]["enum"] == ["red", "blue"]
    assert schema["$defs"]["Line"]["additionalProperties"] is False
    assert {"type": "null"} in props["note"]["anyOf"]
    assert props["tags"]["anyOf"][0]["additionalProperties"] == {"type": "integer"}
    assert props["ref"]["pattern"] == "^R-[0-9]{3}$"
    assert "ctx" not in props and "title" not in json.dumps(schema)
    assert order.description == "Place an order."
    assert order.read_only and not who.read_only  # side-effecting unless marked


def test_context_parameter_is_hidden_and_injected() -> None:
    assert who.parameters["properties"] == {}
    tb = Toolbox([who], Principal("alice"))
    assert isinstance(check(tb, "who", "{}"), Accepted)


async def test_context_carries_idempotency_key() -> None:
    tb = Toolbox([who], Principal("alice"))
    content = await tb.invoke(PendingCall("c9", "who", {}, "fp", execute=True), "run1")
    assert json.loads(content) == {"ok": True, "result": "alice/run1:c9"}


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        ('{"customer": "a", "lines": []', ErrorCode.INVALID_JSON, "not valid JSON"),
        (
            '{"customer": "a", "customer": "b", "lines": []}',
            ErrorCode.INVALID_JSON,
            "duplicate key 'customer'",
        ),
        ('{"customer": "a", "lines": [], "ratio": NaN}', ErrorCode.INVALID_JSON, "NaN"),
        ('{"customer": "a", "lines": [], "ratio": Infinity}', ErrorCode.INVALID_JSON, "Infinity"),
        ('["a"]', ErrorCode.INVALID_JSON, "must be a JSON object, got array"),
        (
            '{"customer": "a", "lines": [], "count": true}',
            ErrorCode.INVALID_ARGUMENTS,
            "count: expected integer, got boolean",
        ),
        (
            '{"customer": "a", "lines": [], "count": "3"}',
            ErrorCode.INVALID_ARGUMENTS,
            "count: expected integer, got string",
        ),
        (
            '{"customer": "a", "lines": [], "count": 3.5}',
            ErrorCode.INVALID_ARGUMENTS,
            "count: expected integer",
        ),
        ('{"customer": "a", "lines": [], "count": 11}', ErrorCode.INVALID_ARGUMENTS, "count: must be <= 10"),
        (
            '{"customer": "a", "lines": [], "extra": 1}',
            ErrorCode.INVALID_ARGUMENTS,
            "unexpected field(s) 'extra'",
        ),
        ('{"customer": "a"}', ErrorCode.INVALID_ARGUMENTS, "'lines' is required"),
        (
            '{"customer": "a", "lines": [], "kind": "slow"}',
            ErrorCode.INVALID_ARGUMENTS,
            "kind: must be one of",
        ),
        (
            '{"customer": "a", "lines": [], "color": "green"}',
            ErrorCode.INVALID_ARGUMENTS,
            "color: must be one of",
        ),
        ('{"customer": "a", "lines": [], "ref": "X-1"}', ErrorCode.INVALID_ARGUMENTS, "ref: must match"),
        (
            '{"customer": "a", "lines": [{"sku": "x", "qty": 0}]}',
            ErrorCode.INVALID_ARGUMENTS,
            "lines.0.qty: must be >= 1",
        ),
        (
            '{"customer": "a", "lines": [{"sku": "x", "qty": 1, "p": 2}]}',
            ErrorCode.INVALID_ARGUMENTS,
            "lines.0: unexpected",
        ),
        (
            '{"customer": "a", "lines": [], "tags": {"x": "1"}}',
            ErrorCode.INVALID_ARGUMENTS,
            "tags.x: expected integer",
        ),
    ],
)
def test_strict_decoding_and_validation(arguments: str, code: ErrorCode, message: str) -> None:
    verdict = check(Toolbox([order]), "order", arguments)
    assert isinstance(verdict, Rejected), verdict
    assert verdict.code == code
    assert message in verdict.message


async def test_valid_call_converts_to_python_types() -> None:
    tb = Toolbox([order])
    arguments = '{"customer": "a", "lines": [{"sku": "x", "qty": 2}], "color": "blue", "ratio": 2}'
    verdict = check(tb, "order", arguments)
    assert isinstance(verdict, Accepted) and verdict.read_only
    content = await tb.invoke(PendingCall("c1", "order", verdict.arguments, "fp", execute=True), "r")
    assert json.loads(content)["result"] == {"customer": "a", "qty": 2, "color": "blue"}


def test_unknown_tool_names_only_offered_tools() -> None:
    @tool(scopes={"admin"})
    def wipe() -> str:
        """Wipe everything."""
        return "wiped"

    tb = Toolbox([order, wipe], Principal("bob", scopes=frozenset({"user"})))
    assert [s["function"]["name"] for s in tb.specs] == ["order"]
    verdict = check(tb, "wipe", "{}")
    assert isinstance(verdict, Rejected) and verdict.code == ErrorCode.UNKNOWN_TOOL
    assert "wipe" not in verdict.message.split("available:")[1]


def test_strict_loads_rejects_lenient_json() -> None:
    assert strict_loads('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    for bad in ('{"a": -Infinity}', '{"a": {"b": 1, "b": 2}}', '"x"', "", "{"):
        with pytest.raises(InvalidJson):
            strict_loads(bad)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1} x', "Extra data"),
        ('{"a": 1}{"b": 2}', "Extra data"),
        ('{"a": 1}\x0b', "Extra data"),  # vertical tab: whitespace to Python, not to JSON
        ('{"a": {"b": 1, "b": 2}}', "duplicate key 'b'"),
        ("[1, 2]", "got array"),
        ('{"a": 1', "Expecting"),
        ("{a: 1}", "Expecting property name"),
        ("\ufeff{}", "BOM"),
    ],
)
def test_strict_loads_reads_the_value_and_nothing_after_it(text: str, message: str) -> None:
    """The decoder's scanner is called directly for text starting with its value; what follows is still checked."""
    with pytest.raises(InvalidJson, match=message):
        strict_loads(text)
    assert strict_loads('{"a": 1} \n\t\r') == {"a": 1} == strict_loads(' \n{"a": 1}')


def test_raw_schema_tool() -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "minLength": 2}, "k": {"type": "integer", "minimum": 1}},
        "required": ["q"],
    }
    search = tool_from_schema("search", schema, lambda q, k=1: [q] * k, description="Search.", read_only=True)
    tb = Toolbox([search])
    assert search.parameters["additionalProperties"] is False
    assert isinstance(check(tb, "search", '{"q": "ab", "k": 2}'), Accepted)
    bad = check(tb, "search", '{"q": "ab", "k": false}')
    assert isinstance(bad, Rejected) and "k: expected integer, got boolean" in bad.message
    with pytest.raises(ToolDefinitionError):
        tool_from_schema("bad", {"type": "object", "properties": {"q": {"type": 5}}}, print)
    with pytest.raises(ToolDefinitionError):
        tool_from_schema("bad", {"type": "array"}, print)
    with pytest.raises(ToolDefinitionError):
        tool_from_schema("bad.name", {"type": "object"}, print)


def test_definition_errors() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(ToolDefinitionError, match="type hint"):
        tool(untyped)
    with pytest.raises(ToolDefinitionError, match="must match"):
        tool(name="has space")(untyped)
    with pytest.raises(ToolDefinitionError, match=r"\*args"):

        @tool
        def spread(*values: int) -> int:
            return 0


@tool(read_only=True, max_result_chars=50)
def big(n: int) -> str:
    """A long text."""
    return "x" * n


@tool(read_only=True, timeout=0.05)
async def slow() -> str:
    """Never answers in time."""
    import asyncio

    await asyncio.sleep(5)
    return "late"


@tool
def broken(secret: str) -> str:
    """Fails with a message that must not leak."""
    raise RuntimeError(f"password={secret}")


@tool
def refusing() -> str:
    """Fails with a message meant for the model."""
    raise ToolError("the ticket is closed")


async def invoke(tb: Toolbox, name: str, arguments: dict[str, object]) -> dict[str, object]:
    content = await tb.invoke(PendingCall("c1", name, arguments, "fp", execute=True), "run")
    data: dict[str, object] = json.loads(content)
    return data


async def test_results_are_envelopes_never_tracebacks() -> None:
    tb = Toolbox([big, slow, broken, refusing])
    short = await invoke(tb, "big", {"n": 10})
    assert short == {"ok": True, "result": "x" * 10}
    cut = await invoke(tb, "big", {"n": 500})
    assert cut["ok"] is True
    assert str(cut["result"]).startswith("x" * 50 + "…[truncated: showing 50 of 500 characters]")
    assert await invoke(tb, "slow", {}) == {
        "ok": False,
        "error": {"code": "timeout", "message": "slow did not finish within 0.05s", "retryable": True},
    }
    failed = await invoke(tb, "broken", {"secret": "hunter2"})
    assert failed["error"] == {
        "code": "tool_failed",
        "message": "broken failed (RuntimeError)",
        "retryable": False,
    }
    assert "hunter2" not in json.dumps(failed) and "Traceback" not in json.dumps(failed)
    refused = await invoke(tb, "refusing", {})
    assert refused["error"]["message"] == "the ticket is closed"  # type: ignore[index]


def test_approval_predicate() -> None:
    @tool(approval=lambda args: args["amount"] > 100)
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    tb = Toolbox([pay])
    small, large = check(tb, "pay", '{"amount": 5}'), check(tb, "pay", '{"amount": 500}')
    assert isinstance(small, Accepted) and not small.needs_approval
    assert isinstance(large, Accepted) and large.needs_approval


def test_numbers_a_lenient_parser_lets_through() -> None:
    tb = Toolbox([order])
    for arguments, message in (
        ('{"customer": "a", "lines": [], "ratio": 1e400}', "out of range"),
        ('{"customer": "a", "lines": [], "count": ' + "9" * 5000 + "}", "too large"),
    ):
        verdict = check(tb, "order", arguments)
        assert isinstance(verdict, Rejected) and verdict.code == ErrorCode.INVALID_JSON
        assert message in verdict.message
    float_for_int = check(tb, "order", '{"customer": "a", "lines": [], "count": 3.0}')
    assert isinstance(float_for_int, Rejected) and "count: expected integer, got number" in float_for_int.message


def test_raw_schema_nested_objects_are_closed() -> None:
    schema = {
        "type": "object",
        "properties": {"filter": {"type": "object", "properties": {"a": {"type": "string"}}}},
    }
    t = tool_from_schema("find", schema, lambda filter: filter)
    assert t.parameters["properties"]["filter"]["additionalProperties"] is False
    verdict = check(Toolbox([t]), "find", '{"filter": {"a": "x", "b": 1}}')
    assert isinstance(verdict, Rejected) and "filter: unexpected field(s) 'b'" in verdict.message


async def test_side_effecting_timeout_is_not_retryable() -> None:
    @tool(timeout=0.05)
    def stuck() -> str:
        """Blocks in a thread."""
        import time

        time.sleep(0.3)
        return "done"

    result = await invoke(Toolbox([stuck]), "stuck", {})
    assert result["error"] == {
        "code": "timeout",
        "message": "stuck did not finish within 0.05s; its effect is unknown, do not repeat it",
        "retryable": False,
    }


async def test_a_plain_function_runs_on_a_worker_thread_unless_declared_inline() -> None:
    """A function that may block never holds up the loop; one declared ``inline`` skips the thread hop."""
    import threading

    from tether.core.machine import PendingCall
    from tether.tools import Toolbox

    seen: dict[str, int] = {}

    @tool(read_only=True)
    def blocking(x: int) -> int:
        """May block."""
        seen["blocking"] = threading.get_ident()
        return x

    @tool(read_only=True, inline=True)
    def quick(x: int) -> int:
        """Only computes."""
        seen["quick"] = threading.get_ident()
        return x

    box = Toolbox([blocking, quick])
    for name in ("blocking", "quick"):
        result = await box.execute(PendingCall("c1", name, {"x": 3}, "fp", read_only=True, execute=True), "r1")
        assert result.content == '{"ok": true, "result": 3}'
    assert seen["quick"] == threading.get_ident()
    assert seen["blocking"] != threading.get_ident()
