"""Misuse of the public API is a tether error at construction, naming the fix; a failed run never looks like success."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tether import Agent, Budget, OpenAIChatModel, RunFailed, ScriptedModel, Status, TetherError, tool
from tether.models.scripted import reply_calls, reply_text
from tether.testing import FakeServer
from tether.testing.fake_server import text as wire_text
from tether.testing.fake_server import tool_calls as wire_calls


def test_a_model_given_as_a_string_names_the_model_classes() -> None:
    with pytest.raises(TetherError, match=r"OpenAIChatModel\('gpt-4o-mini'\)"):
        Agent("openai:gpt-4o-mini")  # type: ignore[arg-type]


def test_a_plain_function_in_tools_names_the_decorator() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    with pytest.raises(TetherError, match=r"add is not a Tool: decorate it with @tool"):
        Agent(ScriptedModel([]), [add])  # type: ignore[list-item]


def test_a_principal_given_as_a_string_names_the_class() -> None:
    with pytest.raises(TetherError, match=r"Principal\('alice'\)"):
        Agent(ScriptedModel([]), principal="alice")  # type: ignore[arg-type]


def test_two_tools_with_one_name_name_the_fix() -> None:
    @tool(read_only=True)
    def lookup(key: str) -> str:
        """One."""
        return key

    def other(key: str) -> str:
        """Two."""
        return key

    other_tool = tool(name="lookup")(other)
    with pytest.raises(TetherError, match=r"two tools are named 'lookup'.*@tool\(name=\.\.\.\)"):
        Agent(ScriptedModel([]), [lookup, other_tool])


def power(base: int, exponent: int) -> int:
    """Raise base to exponent."""
    return int(base**exponent)


async def test_a_partial_becomes_a_tool_without_its_bound_arguments() -> None:
    square = tool(read_only=True, name="square")(functools.partial(power, exponent=2))

    assert list(square.parameters["properties"]) == ["base"]
    assert square.description == "Raise base to exponent."
    unnamed = tool(functools.partial(power, exponent=3))
    assert unnamed.name == "power"
    result = await Agent(
        ScriptedModel([reply_calls(("c1", "square", '{"base": 12}')), reply_text("144")]), [square]
    ).run("go")
    assert result.status is Status.COMPLETED
    assert result.state.messages[-2].content == '{"ok": true, "result": 144}'


def test_a_default_that_is_not_json_names_the_parameter_and_the_fix() -> None:
    def configure(name: str, settings: Any = object()) -> str:  # noqa: B008
        """Configure."""
        return name

    with pytest.raises(TetherError, match=r"configure: the default of settings .* is not JSON.*None"):
        tool(configure)


def test_budget_mistakes_are_tether_errors() -> None:
    with pytest.raises(TetherError, match="max_steps must be at least 1"):
        Budget(max_steps=0)


async def test_a_failed_run_is_not_ok_has_no_output_and_raises_on_request() -> None:
    script = [wire_calls([("c1", "nope", "{}")]), wire_calls([("c2", "nope", "{}")])]
    async with FakeServer(script) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        async with Agent(model, budget=Budget(max_repairs=1)) as agent:
            result = await agent.run("go")

    assert result.status is Status.REPAIR_EXHAUSTED
    assert result.ok is False
    assert result.output is None  # not a fallback sentence that reads like an answer
    expected = r"run \w+ ended repair_exhausted: 2 replies in a row had invalid calls"
    with pytest.raises(RunFailed, match=expected) as info:
        result.raise_for_status()
    assert info.value.result is result


async def test_the_fallback_answer_only_when_asked_for() -> None:
    script = [reply_calls(("c1", "nope", "{}")), reply_calls(("c2", "nope", "{}"))]
    agent = Agent(ScriptedModel(script), budget=Budget(max_repairs=1), fallback_answer="Sorry.")
    result = await agent.run("go")
    assert (result.status, result.output, result.ok) == (Status.REPAIR_EXHAUSTED, "Sorry.", False)


async def test_a_completed_run_is_ok_and_raise_for_status_returns_it() -> None:
    async with FakeServer([wire_text("hi")]) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        async with Agent(model) as agent:
            result = await agent.run("go")
    assert result.ok is True
    assert result.raise_for_status() is result
    assert str(result.status) == "completed"
