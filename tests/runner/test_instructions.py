"""Instructions and output types per run, over real HTTP against FakeServer (and a real SQLite file to resume).

Instructions are computed before each model request from the run's context
and sent with that request only: the request bodies FakeServer records show
them, the transcript (in memory and in the store) never holds them, and a
resumed run computes them again from what it is given then.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import pytest

from tether import (
    Agent,
    AnthropicModel,
    ConversationBudget,
    OpenAIChatModel,
    Principal,
    RunContext,
    SQLiteStore,
    Status,
    decide,
    tool,
)
from tether.core.errors import ConfigurationError
from tether.drivers.local.stream import RunFinished
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls


@tool(read_only=True)
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@tool(approval=True)
def transfer(amount: int) -> str:
    """Move money (a person approves it first)."""
    return f"moved {amount}"


class Invoice(pydantic.BaseModel):
    customer: str
    total: int


@dataclass
class Deps:
    tier: str


def model_on(server: FakeServer, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("m", base_url=server.base_url, api_key="k", **options)


def systems(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "system"]


def tier(ctx: RunContext[Deps]) -> str:
    return f"Customer tier: {ctx.deps.tier}; principal {ctx.principal.id}; step {ctx.step}; run {ctx.run_id}."


async def brief() -> str:
    await asyncio.sleep(0)
    return "Be brief."


async def test_instructions_go_with_each_request_after_the_system_message_and_are_never_stored() -> None:
    async with FakeServer([tool_calls([("c1", "multiply", '{"a": 6, "b": 7}')]), text("42")]) as server:
        agent = Agent(
            model_on(server), [multiply], system="You are a calculator.", instructions=["Static.", tier, brief]
        )
        result = await agent.run("6 times 7?", deps=Deps("gold"), principal=Principal("ann"), run_id="r1")
        await agent.aclose()

    assert result.status is Status.COMPLETED
    first, second = server.requests
    assert first["messages"][:3] == [
        {"role": "system", "content": "You are a calculator."},
        {"role": "system", "content": "Static.\n\nCustomer tier: gold; principal ann; step 1; run r1.\n\nBe brief."},
        {"role": "user", "content": "6 times 7?"},
    ]
    assert systems(second) == [
        "You are a calculator.",
        "Static.\n\nCustomer tier: gold; principal ann; step 2; run r1.\n\nBe brief.",
    ]
    stored = [m.content for m in result.state.messages if m.role == "system"]
    assert stored == ["You are a calculator."]
    assert result.all_messages() == result.state.messages


async def test_run_instructions_replace_the_agents_for_that_run_only_and_the_decorator_adds_to_them() -> None:
    async with FakeServer([text("a"), text("b"), text("c")]) as server:
        agent = Agent(model_on(server), instructions="Agent's.")

        @agent.instructions
        def more() -> str | None:
            return "More."

        await agent.run("1")
        await agent.run("2", instructions=[lambda ctx: f"Run's, step {ctx.step}.", lambda: None])
        await agent.run("3")
        await agent.aclose()

    assert [systems(r) for r in server.requests] == [["Agent's.\n\nMore."], ["Run's, step 1."], ["Agent's.\n\nMore."]]


async def test_instructions_that_give_nothing_send_nothing_and_a_wrong_type_is_a_configuration_error() -> None:
    async with FakeServer([text("a")]) as server:
        agent = Agent(model_on(server), instructions=lambda ctx: None)
        await agent.run("1")
        assert systems(server.requests[0]) == []
        with pytest.raises(ConfigurationError, match="the instruction function <lambda> returned int"):
            await agent.run("2", instructions=lambda ctx: 42)
        await agent.aclose()
    with pytest.raises(ConfigurationError, match="an instruction must be a string or a function"):
        Agent(model_on(server), instructions=["ok", 3])  # type: ignore[list-item]


def test_run_sync_stream_and_a_conversation_take_instructions_and_an_output_type() -> None:
    script = [text("sync"), text('{"customer": "ACME", "total": 5}'), text("turn one"), text("streamed")]
    with FakeServer(script) as server:
        agent = Agent(model_on(server))
        assert agent.run_sync("a", instructions="For run_sync.").output == "sync"
        conv = agent.conversation(budget=ConversationBudget(max_turns=5))
        turn = asyncio.run(conv.send("b", instructions="For the turn.", output_type=Invoice))
        assert turn.output == Invoice(customer="ACME", total=5)
        assert asyncio.run(conv.send("c")).output == "turn one"

        async def streamed() -> Any:
            async for event in agent.stream("d", instructions="For the stream."):
                if isinstance(event, RunFinished):
                    return event.result.output
            return None

        assert asyncio.run(streamed()) == "streamed"
    assert [systems(r) for r in server.requests] == [["For run_sync."], ["For the turn."], [], ["For the stream."]]
    assert "response_format" in server.requests[1] and "response_format" not in server.requests[2]


async def test_the_messages_api_gets_the_instructions_in_its_system_field() -> None:
    async with FakeServer([text("ok")]) as server:
        model = AnthropicModel("claude", base_url=server.origin, api_key="k")
        agent = Agent(model, system="Static system.", instructions=lambda ctx: f"step {ctx.step}")
        await agent.run("hi")
        await agent.aclose()
    assert server.requests[0]["system"] == "Static system.\n\nstep 1"
    assert [m["role"] for m in server.requests[0]["messages"]] == ["user"]


async def test_a_resumed_run_computes_its_instructions_again_and_the_store_holds_none(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    script = [tool_calls([("c1", "transfer", '{"amount": 5}')]), text("done")]
    async with FakeServer(script) as server:
        agent = Agent(model_on(server), [transfer], store=store, instructions=tier)
        paused = await agent.run("move 5", deps=Deps("silver"), run_id="run-a")
        assert paused.status is Status.AWAITING_APPROVAL
        decide(store, "run-a", "c1", approved=True)
        again = Agent(model_on(server), [transfer], store=store, instructions=tier)
        resumed = await again.resume("run-a", deps=Deps("platinum")).run()
        await agent.aclose()
        await again.aclose()

    assert resumed.status is Status.COMPLETED and resumed.output == "done"
    assert systems(server.requests[0]) == ["Customer tier: silver; principal local; step 1; run run-a."]
    assert systems(server.requests[1]) == ["Customer tier: platinum; principal local; step 2; run run-a."]
    stored = store.load("run-a").state.messages
    assert not [m for m in stored if m.role == "system"]
    assert store.verify("run-a") == []


async def test_resume_takes_instructions_and_an_output_type_for_the_rest_of_the_run(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    script = [tool_calls([("c1", "transfer", '{"amount": 5}')]), text('{"customer": "ACME", "total": 5}')]
    async with FakeServer(script) as server:
        agent = Agent(model_on(server), [transfer], store=store)
        paused = await agent.run("move 5", output_type=Invoice, instructions="First.", run_id="run-b")
        assert paused.status is Status.AWAITING_APPROVAL
        decide(store, "run-b", "c1", approved=True)
        resumed = await agent.resume("run-b", output_type=Invoice, instructions="Second.").run()
        await agent.aclose()
    assert resumed.output == Invoice(customer="ACME", total=5)
    assert [systems(r) for r in server.requests] == [["First."], ["Second."]]
    assert all(r["response_format"]["json_schema"]["name"] == "Invoice" for r in server.requests)


# ------------------------------------------------------------------ output type per run


class Point(pydantic.BaseModel):
    x: int
    y: int


async def test_an_output_type_per_run_asks_for_that_type_in_that_run_only() -> None:
    script = [text('{"customer": "ACME", "total": 3720}'), text("plain"), text('{"x": 1, "y": 2}'), text("again")]
    async with FakeServer(script) as server:
        agent = Agent(model_on(server))
        typed = await agent.run("invoice", output_type=Invoice)
        plain = await agent.run("chat")
        point = await agent.run("point", output_type=Point)
        plain_again = await agent.run("chat")
        await agent.aclose()
    assert typed.output == Invoice(customer="ACME", total=3720)
    assert plain.output == "plain" and plain_again.output == "again"
    assert point.output == Point(x=1, y=2)
    formats = [r.get("response_format", {}).get("json_schema", {}).get("name") for r in server.requests]
    assert formats == ["Invoice", None, "Point", None]
    assert agent.output is None


async def test_a_runs_output_type_replaces_the_agents_and_in_tool_mode_its_final_answer_tool_is_that_runs() -> None:
    script = [
        tool_calls([("a1", "final_answer", '{"x": 1, "y": 2}')]),
        tool_calls([("a2", "final_answer", '{"customer": "ACME", "total": 1}')]),
    ]
    async with FakeServer(script) as server:
        agent = Agent(model_on(server, output_mode="tool"), [multiply], output_type=Invoice)
        point = await agent.run("point", output_type=Point)
        invoice = await agent.run("invoice")
        await agent.aclose()
    assert point.output == Point(x=1, y=2) and invoice.output == Invoice(customer="ACME", total=1)
    answer_tools = [
        next(t["function"]["parameters"] for t in r["tools"] if t["function"]["name"] == "final_answer")
        for r in server.requests
    ]
    assert set(answer_tools[0]["properties"]) == {"x", "y"}
    assert set(answer_tools[1]["properties"]) == {"customer", "total"}
    assert agent.output_spec(Point) is agent.output_spec(Point)  # built once per type


async def test_an_output_type_per_run_is_checked_as_the_agents_is() -> None:
    async with FakeServer([text('{"x": 1, "y": "2"}'), text('{"x": 1, "y": 2}')]) as server:
        agent = Agent(model_on(server))
        result = await agent.run("point", output_type=Point)
        await agent.aclose()
    assert result.output == Point(x=1, y=2)
    assert "Your final answer is invalid (invalid_arguments)" in server.requests[1]["messages"][-1]["content"]
    # An output_mode without an output_type is for the runs that give one; it is checked all the same.
    with pytest.raises(ConfigurationError, match="cannot ask for a structured answer with output_mode='native'"):
        Agent(AnthropicModel("c", base_url=server.origin, api_key="k"), output_mode="native")


async def test_an_agents_output_mode_applies_to_the_output_types_given_per_run() -> None:
    async with FakeServer([tool_calls([("a1", "final_answer", '{"x": 1, "y": 2}')])]) as server:
        agent = Agent(model_on(server), output_mode="tool")
        result = await agent.run("point", output_type=Point)
        await agent.aclose()
    assert result.output == Point(x=1, y=2)
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["final_answer"]
    assert "response_format" not in server.requests[0]
