"""FallbackModel over real HTTP: two FakeServers, the first of them failing the way providers fail.

The next model is asked after a connection error, a timeout, 429 or 5xx; a
reply (cut at ``length``, filtered, or with calls the gates refuse) is the
run's to judge and no other model is asked. Each step's ``model_replied``
event names the model that answered, and why the ones before it gave none.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tether import Agent, FallbackModel, OpenAIChatModel, Status, tool
from tether.core import (
    Budget,
    ConfigurationError,
    FallbackExhausted,
    Message,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ServerError,
)
from tether.core.events import MODEL_REPLIED, TEXT, RunEvent
from tether.drivers.local.stream import StepFinished, TextDelta
from tether.models import AnthropicModel, ModelRequest, ScriptedModel
from tether.models.scripted import reply_text
from tether.testing import FakeServer, raw, text, tool_calls
from tether.testing.fake_server import multiply as multiply_scenario

DOWN = {"error": {"message": "upstream overloaded", "type": "server_error"}}


def unavailable(request: dict[str, Any]) -> Any:
    """A provider that is down: 503 to everything, retry at once."""
    return raw(DOWN, 503, {"Retry-After": "0"})


def closed_port() -> int:
    """A loopback port nobody listens on (bound and released at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def chat(name: str, base_url: str, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel(name, base_url=base_url, api_key="x", **options)


SERVERS: list[FakeServer] = []  # a server a tool shuts down mid-run


@tool(read_only=True)
def multiply(a: int, b: int) -> int:
    """Multiply two integers; shuts the first model's server down (the primary is gone by the next step)."""
    while SERVERS:
        SERVERS.pop().__exit__(None, None, None)
    return a * b


class Events:
    def __init__(self) -> None:
        self.seen: list[RunEvent] = []

    def __call__(self, event: RunEvent) -> None:
        self.seen.append(event)

    def replied(self) -> list[dict[str, Any]]:
        return [e.data for e in self.seen if e.kind == MODEL_REPLIED]


async def test_a_503_then_a_refused_connection_and_the_run_completes_on_the_second_model() -> None:
    primary = FakeServer(unavailable).__enter__()
    SERVERS.append(primary)
    events = Events()
    with FakeServer(multiply_scenario) as second:
        model = FallbackModel(chat("primary-model", primary.base_url), chat("second-model", second.base_url))
        agent = Agent(model, [multiply])
        try:
            result = await agent.run("What is 248 times 15?", on_event=events)
        finally:
            await agent.aclose()
            while SERVERS:
                SERVERS.pop().__exit__(None, None, None)
        assert len(second.requests) == 2
    assert result.status is Status.COMPLETED and "3720" in str(result.output)
    assert len(primary.requests) == 3  # the primary retried its 503s as configured before the next was asked
    step_1, step_2 = events.replied()
    assert step_1["model"] == step_2["model"] == "second-model"
    assert step_1["skipped"] == ["primary-model: ServerError: HTTP 503: upstream overloaded"]
    assert len(step_2["skipped"]) == 1 and step_2["skipped"][0].startswith(
        "primary-model: ModelConnectionError: cannot connect to"
    )
    assert model.name == "fallback:primary-model,second-model"


async def test_a_model_that_answers_is_named_in_every_step_and_no_fallback_is_noted() -> None:
    events = Events()
    with FakeServer(multiply_scenario) as first, FakeServer(multiply_scenario) as second:
        agent = Agent(FallbackModel(chat("first", first.base_url), chat("second", second.base_url)), [multiply])
        try:
            assert (await agent.run("What is 248 times 15?", on_event=events)).status is Status.COMPLETED
        finally:
            await agent.aclose()
        assert second.requests == []
    assert events.replied()[0]["model"] == "first" and "skipped" not in events.replied()[0]
    plain = Events()
    with FakeServer([text("hi")]) as only:
        agent = Agent(chat("plain-model", only.base_url))
        try:
            await agent.run("hi", on_event=plain)
        finally:
            await agent.aclose()
    assert plain.replied()[0]["model"] == "plain-model"  # every model is named, not only a fallback chain's


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        (tool_calls([("c1", "multiply", '{"a": 248, "b"')], finish_reason="length"), Status.TRUNCATED),
        (text("I cannot help", finish_reason="content_filter"), Status.CONTENT_FILTERED),
    ],
    ids=["length-with-calls", "content-filter"],
)
async def test_a_cut_or_filtered_reply_is_a_reply_and_the_fallback_is_never_asked(reply: Any, status: Status) -> None:
    with FakeServer([reply]) as primary, FakeServer(multiply_scenario) as second:
        agent = Agent(FallbackModel(chat("primary", primary.base_url), chat("second", second.base_url)), [multiply])
        try:
            result = await agent.run("What is 248 times 15?")
        finally:
            await agent.aclose()
        assert result.status is status
        assert second.requests == []


async def test_a_call_the_gates_refuse_goes_back_to_the_same_model_not_the_next() -> None:
    script = [tool_calls([("c1", "divide", '{"a": 1}')]), text("sorry, no divide")]
    with FakeServer(script) as primary, FakeServer(multiply_scenario) as second:
        agent = Agent(FallbackModel(chat("primary", primary.base_url), chat("second", second.base_url)), [multiply])
        try:
            result = await agent.run("divide")
        finally:
            await agent.aclose()
        assert result.status is Status.COMPLETED and result.output == "sorry, no divide"
        assert len(primary.requests) == 2 and second.requests == []


async def test_what_falls_back_is_narrowed_or_widened_by_on() -> None:
    refused = raw({"error": {"message": "bad key"}}, 401)
    with FakeServer(lambda r: refused) as primary, FakeServer(lambda r: text("from second")) as second:
        chains = {
            "default": FallbackModel(chat("p", primary.base_url), chat("s", second.base_url)),
            "widened": FallbackModel(chat("p", primary.base_url), chat("s", second.base_url), on=(ModelError,)),
            "predicate": FallbackModel(
                chat("p", primary.base_url),
                chat("s", second.base_url),
                on=lambda e: isinstance(e, ModelHTTPError) and e.status == 401,
            ),
            "narrowed": FallbackModel(chat("p", primary.base_url), chat("s", second.base_url), on=(ModelHTTPError,)),
        }
        results = {}
        for name, model in chains.items():
            agent = Agent(model)
            try:
                results[name] = await agent.run("hi")
            finally:
                await agent.aclose()
        assert len(second.requests) == 3
    assert results["default"].status is Status.MODEL_ERROR and "401" in str(results["default"].reason)
    for name in ("widened", "predicate", "narrowed"):
        assert results[name].output == "from second", name


async def test_when_every_model_fails_the_step_fails_naming_each() -> None:
    with FakeServer(unavailable) as first:
        port = closed_port()
        model = FallbackModel(
            chat("first", first.base_url, max_retries=0), chat("second", f"http://127.0.0.1:{port}/v1", max_retries=0)
        )
        agent = Agent(model)
        try:
            result = await agent.run("hi")
        finally:
            await agent.aclose()
    assert result.status is Status.MODEL_ERROR
    assert str(result.reason).startswith("FallbackExhausted: every model failed (first: ServerError: HTTP 503")
    assert "second: ModelConnectionError: cannot connect" in str(result.reason)
    down = [ScriptedModel([ServerError(503, "x")], name="a"), ScriptedModel([ModelConnectionError("y")], name="b")]
    with pytest.raises(FallbackExhausted) as caught:
        await FallbackModel(*down).complete(ModelRequest([Message("user", "hi")]))
    assert [(name, type(error)) for name, error in caught.value.errors] == [
        ("a", ServerError),
        ("b", ModelConnectionError),
    ]
    refusing = FallbackModel(ScriptedModel([ServerError(503, "x")], name="a"), ScriptedModel([], name="b"))
    with pytest.raises(ModelResponseError, match="the script has only 0 replies") as refused:
        await refusing.complete(ModelRequest([Message("user", "hi")]))  # not a fallback error: raised as it is
    assert "asked before it: a: ServerError: HTTP 503: x" in refused.value.__notes__


async def test_a_stream_that_fails_before_its_first_piece_falls_back() -> None:
    with FakeServer(unavailable) as primary, FakeServer([text("streamed answer")]) as second:
        model = FallbackModel(chat("primary", primary.base_url, max_retries=0), chat("second", second.base_url))
        agent = Agent(model)
        try:
            streamed = [e async for e in agent.stream("hi")]
        finally:
            await agent.aclose()
        assert second.requests[0]["stream"] is True
    assert "".join(e.text for e in streamed if isinstance(e, TextDelta)) == "streamed answer"
    assert [e.model for e in streamed if isinstance(e, StepFinished)] == ["second"]


async def test_a_stream_that_fails_midway_is_the_steps_error_even_when_on_would_fall_back() -> None:
    broken = text("the first half of it", stream_error={"message": "connection reset", "type": "server_error"})
    events = Events()
    with FakeServer([broken]) as primary, FakeServer([text("second")]) as second:
        first = chat("primary", primary.base_url, stream=True)
        model = FallbackModel(first, chat("second", second.base_url), on=(ModelError,))
        agent = Agent(model)
        try:
            result = await agent.run("hi", on_event=events)
        finally:
            await agent.aclose()
        assert second.requests == []  # what listeners were shown cannot be taken back
    assert result.status is Status.MODEL_ERROR
    assert [e for e in events.seen if e.kind == TEXT]


async def test_no_model_is_asked_after_the_runs_deadline() -> None:
    with FakeServer([text("late", latency=2.0)]) as primary, FakeServer([text("second")]) as second:
        model = FallbackModel(chat("primary", primary.base_url, max_retries=0), chat("second", second.base_url))
        agent = Agent(model, budget=Budget(deadline_seconds=0.3))
        try:
            result = await agent.run("hi")
        finally:
            await agent.aclose()
        assert second.requests == []
    assert result.status is Status.BUDGET_EXHAUSTED and "deadline" in str(result.reason)


async def test_a_chain_within_a_chain_names_the_member_that_answered() -> None:
    inner = FallbackModel(ScriptedModel([ServerError(503, "x")], name="b"), ScriptedModel([reply_text("hi")], name="c"))
    outer = FallbackModel(ScriptedModel([ModelConnectionError("y")], name="a"), inner)
    reply = await outer.complete(ModelRequest([Message("user", "hi")]))
    assert reply.answered_by == "c"
    assert reply.skipped == ("a: ModelConnectionError: y", "b: ServerError: HTTP 503: x")


def test_the_chain_asks_for_structured_output_and_strict_tools_as_all_its_models_can() -> None:
    openai = OpenAIChatModel("gpt-4o-mini", api_key="sk-x")  # api.openai.com: strict tools, native output
    claude = AnthropicModel("claude", api_key="x")
    assert (openai.output_mode, openai.strict_tools) == ("native", True)
    mixed = FallbackModel(openai, claude)
    assert mixed.output_modes == ("tool", "prompted") and mixed.output_mode == "tool"
    assert mixed.strict_tools is False
    alone = FallbackModel(openai, OpenAIChatModel("gpt-4o", api_key="sk-x"))
    assert (alone.output_mode, alone.strict_tools) == ("native", True)


def test_a_fallback_of_something_that_is_not_a_model_or_a_bad_on_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="takes Model objects"):
        FallbackModel(ScriptedModel([reply_text("x")]), "gpt-4o")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="ModelError classes"):
        FallbackModel(ScriptedModel([]), on=(ValueError,))  # type: ignore[arg-type]
