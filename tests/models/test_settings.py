"""Model settings reach each protocol's wire body exactly, per model, per agent and per run, over real HTTP.

The fake server records each request body as received: the tests assert the
fields it got, on ``/v1/chat/completions`` and on ``/v1/messages``. A
setting a protocol has no field for is refused before any request is sent
and before any run is recorded, never dropped.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tether.core import ConfigurationError, Message
from tether.core.machine import Status
from tether.core.redact import redact
from tether.core.settings import stored_settings, with_settings
from tether.drivers.local.runner import Agent
from tether.models import ModelRequest, ModelSettings, ScriptedModel
from tether.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel
from tether.models.openai_chat import OpenAIChatModel
from tether.models.openai_responses import OpenAIResponsesModel
from tether.models.scripted import reply_text
from tether.store import SQLiteStore
from tether.testing import FakeServer, text
from tether.tools import tool

SAMPLING = (
    "temperature",
    "max_tokens",
    "max_output_tokens",
    "top_p",
    "seed",
    "stop",
    "stop_sequences",
    "parallel_tool_calls",
    "user",
)


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def sent(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling fields of a request body as the server received it."""
    return {k: v for k, v in body.items() if k in SAMPLING}


def openai(server: FakeServer, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("fake", base_url=server.base_url, api_key="x", max_retries=0, **options)


def anthropic(server: FakeServer, **options: Any) -> AnthropicModel:
    return AnthropicModel("fake", base_url=server.origin, api_key="x", max_retries=0, **options)


# ----------------------------------------------------------------------- the value


def test_settings_merge_field_by_field_and_extra_key_by_key() -> None:
    base = ModelSettings(temperature=0.9, top_p=0.5, stop="END", extra={"a": 1, "b": 2})
    over = ModelSettings(temperature=0.1, seed=3, extra={"b": 20, "c": 30})
    assert base.merged(over) == ModelSettings(
        temperature=0.1, top_p=0.5, seed=3, stop=("END",), extra={"a": 1, "b": 20, "c": 30}
    )
    assert base.merged(None) is base
    assert ModelSettings.from_dict(base.to_dict()) == base
    assert ModelSettings().to_dict() == {}


@pytest.mark.parametrize(
    "bad",
    [
        {"temperature": -0.1},
        {"temperature": math.nan},
        {"temperature": "0.2"},
        {"top_p": 0},
        {"top_p": 1.5},
        {"max_tokens": 0},
        {"max_tokens": True},
        {"max_tokens": 2.5},
        {"seed": "7"},
        {"stop": ""},
        {"stop": []},
        {"stop": ["ok", 3]},
        {"parallel_tool_calls": 1},
        {"extra": {"x": object()}},
        {"extra": {"x": math.inf}},
        {"extra": {1: "x"}},
    ],
)
def test_a_bad_setting_is_a_configuration_error_naming_it(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match=f"ModelSettings.{next(iter(bad))}"):
        ModelSettings(**bad)


def test_an_unknown_stored_setting_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="unknown model setting 'temp'"):
        ModelSettings.from_dict({"temp": 1})


def test_settings_are_stored_with_the_setup_whole_and_a_run_without_them_is_stored_as_before() -> None:
    settings = ModelSettings(temperature=0.2, stop=("a", "b"), extra={"stop_token_ids": [7]})
    setup = {"model": "m"}
    assert with_settings(setup, None) is setup
    stored = redact(with_settings(setup, settings))  # the setup is redacted as it is stored
    assert stored_settings(stored) == settings  # a key that looks like a token is not a secret: kept whole
    assert stored_settings({"model": "m"}) is None
    assert with_settings(with_settings(setup, settings), None) == setup  # a stored run's are not the next run's
    secret = redact(with_settings(setup, ModelSettings(extra={"header": "Bearer abcdefghijklmnop"})))
    with pytest.raises(ConfigurationError, match="held a secret, which was not stored"):
        stored_settings(secret)


# ------------------------------------------------------------ chat completions


async def test_chat_completions_get_every_setting_and_each_layer_overrides_the_one_before() -> None:
    with FakeServer([text("one"), text("two"), text("three")]) as server:
        model = openai(server, settings=ModelSettings(temperature=0.9, top_p=0.5, extra={"user": "u1"}))
        agent = Agent(model, [lookup], model_settings=ModelSettings(temperature=0.5, seed=1, stop=["END"]))
        try:
            per_run = ModelSettings(temperature=0.2, max_tokens=50, parallel_tool_calls=False, stop="STOP")
            assert (await agent.run("a", model_settings=per_run)).status is Status.COMPLETED
            assert (await agent.run("b")).status is Status.COMPLETED
            await agent.run("c", model_settings=ModelSettings(extra={"user": "u2", "logit_bias": {"50256": -100}}))
        finally:
            await agent.aclose()
        bodies = server.requests
    assert sent(bodies[0]) == {
        "temperature": 0.2,  # the run's, over the agent's and the model's
        "top_p": 0.5,  # the model's: nobody above it set one
        "seed": 1,  # the agent's
        "stop": ["STOP"],
        "max_tokens": 50,
        "parallel_tool_calls": False,  # tools are offered
        "user": "u1",  # the model's extra
    }
    assert sent(bodies[1]) == {"temperature": 0.5, "top_p": 0.5, "seed": 1, "stop": ["END"], "user": "u1"}
    assert sent(bodies[2])["user"] == "u2" and bodies[2]["logit_bias"] == {"50256": -100}


async def test_parallel_tool_calls_goes_only_with_tools_and_nothing_is_sent_unset() -> None:
    with FakeServer([text("x"), text("y")]) as server:
        model = openai(server)
        try:
            settings = ModelSettings(parallel_tool_calls=True)
            await model.complete(ModelRequest([Message("user", "hi")], settings=settings))
            await model.complete(ModelRequest([Message("user", "hi")]))
        finally:
            await model.aclose()
    assert sent(server.requests[0]) == {}  # OpenAI refuses parallel_tool_calls in a request without tools
    assert sent(server.requests[1]) == {}


async def test_the_old_shorthands_still_work_and_a_typed_setting_wins_over_extra() -> None:
    with FakeServer([text("x"), text("y")]) as server:
        agent = Agent(openai(server, extra_body={"temperature": 0.3, "top_k": 4}), max_tokens=7)
        try:
            await agent.run("a")
            await agent.run("b", model_settings=ModelSettings(temperature=0.6))
        finally:
            await agent.aclose()
    assert sent(server.requests[0]) == {"temperature": 0.3, "max_tokens": 7}
    assert server.requests[0]["top_k"] == 4
    assert sent(server.requests[1]) == {"temperature": 0.6, "max_tokens": 7}
    assert agent.max_tokens == 7


def test_max_tokens_given_twice_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_tokens is given twice"):
        Agent(ScriptedModel([]), max_tokens=7, model_settings=ModelSettings(max_tokens=8))


# ------------------------------------------------------------------ messages


async def test_the_messages_api_gets_its_own_fields() -> None:
    with FakeServer([text("one"), text("two")]) as server:
        agent = Agent(
            anthropic(server, settings=ModelSettings(top_p=0.8, extra={"top_k": 5})),
            [lookup],
            model_settings=ModelSettings(temperature=0.4, stop=["END", "FIN"]),
        )
        try:
            per_run = ModelSettings(temperature=0.1, max_tokens=99, parallel_tool_calls=False)
            await agent.run("a", model_settings=per_run)
            await agent.run("b")
        finally:
            await agent.aclose()
        first, second = server.requests
    assert {k: first[k] for k in ("temperature", "top_p", "max_tokens", "stop_sequences", "top_k")} == {
        "temperature": 0.1,
        "top_p": 0.8,
        "max_tokens": 99,
        "stop_sequences": ["END", "FIN"],
        "top_k": 5,
    }
    assert first["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert "stop" not in first and "seed" not in first
    assert second["temperature"] == 0.4 and second["max_tokens"] == DEFAULT_MAX_TOKENS
    assert "tool_choice" not in second  # parallel calls allowed: the API's default, nothing to send


async def test_a_seed_for_the_messages_api_is_refused_before_anything_is_sent_or_stored(tmp_path: Path) -> None:
    with FakeServer([text("x")]) as server:
        with pytest.raises(ConfigurationError, match="the Messages API has no seed"):
            anthropic(server, settings=ModelSettings(seed=1))
        with pytest.raises(ConfigurationError, match="the Messages API has no seed"):
            Agent(anthropic(server), model_settings=ModelSettings(seed=1))
        store = SQLiteStore(tmp_path / "runs.db")
        agent = Agent(anthropic(server), store=store)
        try:
            with pytest.raises(ConfigurationError, match="the Messages API has no seed"):
                await agent.run("hi", model_settings=ModelSettings(seed=1))
            with pytest.raises(ConfigurationError, match="takes 0 to 1"):
                await agent.run("hi", model_settings=ModelSettings(temperature=1.5))
        finally:
            await agent.aclose()
        assert server.requests == []
        assert store.list_runs() == []


# ----------------------------------------------------------------- responses


def responses(server: FakeServer, **options: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("fake", base_url=server.base_url, api_key="x", max_retries=0, **options)


async def test_the_responses_api_gets_its_own_fields() -> None:
    with FakeServer([text("one"), text("two")]) as server:
        agent = Agent(
            responses(server, settings=ModelSettings(top_p=0.8, extra={"truncation": "auto"})),
            [lookup],
            model_settings=ModelSettings(temperature=0.4),
        )
        try:
            await agent.run(
                "a", model_settings=ModelSettings(temperature=0.1, max_tokens=99, parallel_tool_calls=False)
            )
            await agent.run("b")
        finally:
            await agent.aclose()
        first, second = server.requests
    assert sent(first) == {"temperature": 0.1, "top_p": 0.8, "max_output_tokens": 99, "parallel_tool_calls": False}
    assert first["truncation"] == "auto"
    assert sent(second) == {"temperature": 0.4, "top_p": 0.8}


@pytest.mark.parametrize("setting", [ModelSettings(seed=1), ModelSettings(stop=["END"])])
async def test_a_seed_or_stop_for_the_responses_api_is_refused_before_anything_is_sent_or_stored(
    tmp_path: Path, setting: ModelSettings
) -> None:
    with FakeServer([text("x")]) as server:
        with pytest.raises(ConfigurationError, match=r"the Responses API has no (seed|stop)"):
            responses(server, settings=setting)
        with pytest.raises(ConfigurationError, match=r"the Responses API has no (seed|stop)"):
            Agent(responses(server), model_settings=setting)
        store = SQLiteStore(tmp_path / "runs.db")
        agent = Agent(responses(server), store=store)
        try:
            with pytest.raises(ConfigurationError, match=r"the Responses API has no (seed|stop)"):
                await agent.run("hi", model_settings=setting)
        finally:
            await agent.aclose()
        assert server.requests == []
        assert store.list_runs() == []


def test_the_scripted_model_records_what_it_was_asked() -> None:
    model = ScriptedModel([reply_text("a"), reply_text("b")], settings=ModelSettings(temperature=0.7, seed=3))
    agent = Agent(model, model_settings=ModelSettings(seed=4))
    agent.run_sync("x", model_settings=ModelSettings(max_tokens=9))
    agent.run_sync("y")
    assert model.settings_asked == [
        ModelSettings(temperature=0.7, seed=4, max_tokens=9),
        ModelSettings(temperature=0.7, seed=4),
    ]


async def test_a_streamed_run_and_a_conversations_turn_take_their_own_settings_too() -> None:
    model = ScriptedModel([reply_text("a"), reply_text("b"), reply_text("c")])
    agent = Agent(model, model_settings=ModelSettings(temperature=0.5))
    async for _ in agent.stream("x", model_settings=ModelSettings(seed=1)):
        pass
    conversation = agent.conversation()
    await conversation.send("y", model_settings=ModelSettings(temperature=0.1))
    await conversation.send("z")
    assert model.settings_asked == [
        ModelSettings(temperature=0.5, seed=1),
        ModelSettings(temperature=0.1),
        ModelSettings(temperature=0.5),
    ]


# ------------------------------------------------------------------ durable runs


PAY: list[int] = []


@tool(approval=True)
def pay(amount: int) -> str:
    """Pay an amount (needs approval)."""
    PAY.append(amount)
    return f"paid {amount}"


async def test_a_resumed_run_sends_the_settings_it_was_started_with(tmp_path: Path) -> None:
    """The run's settings are stored with its setup: an Agent built anew, with other settings, resumes it with the
    run's own."""
    from tether.drivers.local.durable import decide
    from tether.testing import tool_calls

    PAY.clear()
    script = [tool_calls([("c1", "pay", '{"amount": 5}')]), text("done")]
    with FakeServer(script) as server:
        store = SQLiteStore(tmp_path / "runs.db")
        first = Agent(openai(server), [pay], store=store, model_settings=ModelSettings(temperature=0.2, seed=7))
        try:
            paused = await first.run("pay 5", model_settings=ModelSettings(top_p=0.9))
        finally:
            await first.aclose()
        assert paused.status is Status.AWAITING_APPROVAL
        decide(store, paused.run_id, "c1", approved=True)
        other = ModelSettings(temperature=0.9)  # the resuming Agent's own settings are not the run's
        again = Agent(openai(server), [pay], store=SQLiteStore(tmp_path / "runs.db"), model_settings=other)
        try:
            result = await again.resume(paused.run_id)
        finally:
            await again.aclose()
    assert result.status is Status.COMPLETED and PAY == [5]
    assert [sent(b) for b in server.requests] == [{"temperature": 0.2, "seed": 7, "top_p": 0.9}] * 2


async def test_a_resume_with_a_model_that_cannot_send_the_runs_settings_is_refused_and_leaves_the_run(
    tmp_path: Path,
) -> None:
    from tether.testing import tool_calls

    with FakeServer([tool_calls([("c1", "pay", '{"amount": 5}')])]) as server:
        store = SQLiteStore(tmp_path / "runs.db")
        first = Agent(openai(server), [pay], store=store, model_settings=ModelSettings(seed=7))
        try:
            paused = await first.run("pay 5")
        finally:
            await first.aclose()
        other = Agent(anthropic(server), [pay], store=store)
        with pytest.raises(ConfigurationError, match="no seed"):
            other.resume(paused.run_id)
        assert store.load(paused.run_id).state.status is Status.AWAITING_APPROVAL
        store.acquire(paused.run_id)  # released again: nobody holds it
        store.release(paused.run_id)
