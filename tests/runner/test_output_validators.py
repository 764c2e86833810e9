"""Output validators and tools that raise Retry, over real HTTP against FakeServer (a real SQLite file to resume).

What goes back to the model is asserted on the request bodies FakeServer
records: the correction after a refused answer, the ``tool_failed`` result
of a tool's Retry. Both count against the repair budget as the docs say.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import pytest

from tether import Agent, Budget, OpenAIChatModel, Retry, RunContext, SQLiteStore, Status, decide, tool
from tether.core.errors import ConfigurationError
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls


class Invoice(pydantic.BaseModel):
    customer: str
    total: int


@dataclass
class Deps:
    known: set[str]


def model_on(server: FakeServer, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("m", base_url=server.base_url, api_key="k", **options)


def last_content(request: dict[str, Any]) -> str:
    return str(request["messages"][-1]["content"])


def tool_result(request: dict[str, Any], call_id: str) -> dict[str, Any]:
    found = next(m for m in request["messages"] if m["role"] == "tool" and m["tool_call_id"] == call_id)
    data: dict[str, Any] = json.loads(found["content"])
    return data


# ------------------------------------------------------------------ output validators


async def test_a_refused_text_answer_goes_back_as_a_correction_and_the_corrected_one_is_taken() -> None:
    seen: list[str] = []
    async with FakeServer([text("yo"), text("Good afternoon.")]) as server:
        agent = Agent(model_on(server))

        @agent.output_validator
        def polite(answer: str) -> None:
            seen.append(answer)
            if not answer.endswith("."):
                raise Retry("answer in a full sentence")

        result = await agent.run("greet me")
        await agent.aclose()
    assert result.status is Status.COMPLETED and result.output == "Good afternoon."
    assert seen == ["yo", "Good afternoon."]
    assert last_content(server.requests[1]) == (
        "Your final answer was refused: answer in a full sentence. Please give a corrected answer."
    )


async def test_refusals_count_against_the_repair_budget() -> None:
    async with FakeServer([text("a"), text("b"), text("c")]) as server:
        agent = Agent(model_on(server), budget=Budget(max_repairs=1), fallback_answer="Sorry.")
        agent.output_validator(lambda answer: (_ for _ in ()).throw(Retry("never good enough")))
        result = await agent.run("go")
        await agent.aclose()
    assert result.status is Status.REPAIR_EXHAUSTED
    assert result.reason == "2 answers in a row were refused: never good enough"
    assert result.output == "Sorry."  # a plain text run's fallback, as for invalid calls
    assert len(server.requests) == 2


async def test_a_typed_answer_reaches_the_validator_with_the_run_context_and_may_be_replaced() -> None:
    calls: list[tuple[str, int]] = []
    answers = [text('{"customer": "nobody", "total": 5}'), text('{"customer": "acme", "total": 5}')]
    async with FakeServer(answers) as server:
        agent = Agent(model_on(server), output_type=Invoice)

        @agent.output_validator
        async def known_customer(ctx: RunContext[Deps], invoice: Invoice) -> Invoice:
            calls.append((invoice.customer, ctx.step))
            if invoice.customer not in ctx.deps.known:
                raise Retry(f"no customer named {invoice.customer!r}; known: {', '.join(sorted(ctx.deps.known))}")
            return invoice.model_copy(update={"customer": invoice.customer.upper()})

        result = await agent.run("bill acme 5", deps=Deps({"acme"}))
        await agent.aclose()
    assert result.output == Invoice(customer="ACME", total=5)
    assert calls == [("nobody", 1), ("acme", 2)]
    assert last_content(server.requests[1]) == (
        "Your final answer was refused: no customer named 'nobody'; known: acme. "
        "Please reply with only the corrected JSON."
    )
    assert json.loads(result.state.output or "") == {"customer": "ACME", "total": 5}  # the run records the replacement
    assert (
        result.state.messages[-1].content == '{"customer": "acme", "total": 5}'
    )  # the transcript: what the model said


async def test_in_tool_mode_the_refusal_is_the_final_answer_calls_result() -> None:
    script = [
        tool_calls([("a1", "final_answer", '{"customer": "nobody", "total": 5}')]),
        tool_calls([("a2", "final_answer", '{"customer": "acme", "total": 5}')]),
    ]
    async with FakeServer(script) as server:
        agent = Agent(model_on(server, output_mode="tool"), output_type=Invoice)

        @agent.output_validator
        def known(invoice: Invoice) -> None:
            if invoice.customer != "acme":
                raise Retry("unknown customer")

        result = await agent.run("bill acme")
        await agent.aclose()
    assert result.output == Invoice(customer="acme", total=5)
    assert tool_result(server.requests[1], "a1") == {
        "ok": False,
        "error": {"code": "tool_failed", "message": "answer refused: unknown customer", "retryable": True},
    }


async def test_validators_see_only_answers_the_run_would_take() -> None:
    """A truncated reply or a schema-invalid answer never reaches a validator; a call step neither."""
    seen: list[Any] = []
    script = [text('{"customer": "x"', finish_reason="length")]
    async with FakeServer(script) as server:
        agent = Agent(model_on(server), output_type=Invoice)
        agent.output_validator(seen.append)
        result = await agent.run("go")
        await agent.aclose()
    assert result.status is Status.TRUNCATED and seen == []
    async with FakeServer([text('{"customer": "x", "total": "5"}'), text('{"customer": "x", "total": 5}')]) as server:
        agent = Agent(model_on(server), output_type=Invoice)
        agent.output_validator(seen.append)
        result = await agent.run("go")
        await agent.aclose()
    assert seen == [Invoice(customer="x", total=5)]


async def test_a_validator_that_fails_otherwise_stops_the_run_with_its_error() -> None:
    async with FakeServer([text("x")]) as server:
        agent = Agent(model_on(server))

        @agent.output_validator
        def broken(answer: str) -> str:
            raise KeyError("bug")

        with pytest.raises(KeyError):
            await agent.run("go")

        @agent.output_validator
        def wrong_type(answer: str) -> int:
            return 3

        agent.output_validators.remove(next(v for v in agent.output_validators if v.function is broken))
        server.script.append(text("y"))
        with pytest.raises(ConfigurationError, match="returned int for a run without an output_type"):
            await agent.run("go")
        await agent.aclose()


# ------------------------------------------------------------------ a tool's Retry

ASKED: list[str] = []


@tool(read_only=True, retries=2)
def find_city(name: str) -> str:
    """Find a city by its exact name."""
    ASKED.append(name)
    if name != "Paris":
        raise Retry(f"no city named {name!r}; try its name in English")
    return "found Paris"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ASKED.clear()


async def test_a_tools_retry_goes_back_as_a_retryable_tool_failed_within_its_retries() -> None:
    script = [
        tool_calls([("c1", "find_city", '{"name": "Parigi"}')]),
        tool_calls([("c2", "find_city", '{"name": "Paname"}')]),
        tool_calls([("c3", "find_city", '{"name": "Paris"}')]),
        text("Paris it is."),
    ]
    async with FakeServer(script) as server:
        agent = Agent(model_on(server), [find_city], budget=Budget(max_repairs=0))
        result = await agent.run("find paris")
        await agent.aclose()
    assert result.status is Status.COMPLETED and ASKED == ["Parigi", "Paname", "Paris"]
    assert tool_result(server.requests[1], "c1") == {
        "ok": False,
        "error": {
            "code": "tool_failed",
            "message": "no city named 'Parigi'; try its name in English",
            "retryable": True,
        },
    }
    assert tool_result(server.requests[3], "c3") == {"ok": True, "result": "found Paris"}
    assert result.state.retries == {"find_city": 2}


async def test_past_its_retries_a_tools_retry_is_a_failed_repair() -> None:
    script = [tool_calls([(f"c{i}", "find_city", f'{{"name": "P{i}"}}')]) for i in range(3)] + [text("gave up")]
    async with FakeServer(script) as server:
        agent = Agent(model_on(server), [find_city], budget=Budget(max_repairs=0))
        result = await agent.run("find paris")
        await agent.aclose()
    assert result.status is Status.REPAIR_EXHAUSTED
    assert result.reason == "find_city asked for a retry after its 2 allowed; 1 failed repairs in a row"
    assert len(server.requests) == 3
    last = json.loads(result.state.messages[-1].content or "")
    assert last["error"]["code"] == "tool_failed" and last["error"]["retryable"] is False


@tool(approval=True)
def confirm(what: str) -> str:
    """Confirm something (a person approves it first)."""
    return f"confirmed {what}"


async def test_a_resumed_run_goes_on_counting_a_tools_retries(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    script = [
        tool_calls([("c1", "find_city", '{"name": "A"}')]),
        tool_calls([("c2", "find_city", '{"name": "B"}')]),
        tool_calls([("k1", "confirm", '{"what": "x"}')]),
        tool_calls([("c3", "find_city", '{"name": "C"}')]),
        text("done"),
    ]
    async with FakeServer(script) as server:
        agent = Agent(model_on(server), [find_city, confirm], store=store, budget=Budget(max_repairs=3))
        paused = await agent.run("go", run_id="run-r")
        assert paused.status is Status.AWAITING_APPROVAL and paused.state.retries == {"find_city": 2}
        decide(store, "run-r", "k1", approved=True)
        resumed = await agent.resume("run-r").run()
        await agent.aclose()
    assert resumed.status is Status.COMPLETED
    assert tool_result(server.requests[4], "c3")["error"]["retryable"] is False  # the third: past its 2
    assert store.load("run-r").state.retries == {"find_city": 3}
    assert store.verify("run-r") == []


def test_retries_must_be_a_whole_number() -> None:
    from tether.core.errors import ToolDefinitionError

    def noop() -> None:
        """Nothing."""

    for wrong in (-1, True, 1.5):
        with pytest.raises(ToolDefinitionError, match="tool noop: retries must be a whole number"):
            tool(retries=wrong)(noop)  # type: ignore[arg-type]
