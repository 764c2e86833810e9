"""Every recorded real reply, served over HTTP, gives a reply or a precise error.

The 381 interactions come from 17 OpenAI-compatible providers (see
../shared/fixtures/README.md). Each is replayed by the replay server, read
by the real adapter, then handed to the run state machine with the
recorded request's own tools: nothing may escape as an unhandled exception.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest

from tether.core import Begin, Compat, ModelError, ModelReplied, Run, RunConfig, ToolDefinitionError, Usage
from tether.core.messages import Message, ModelReply
from tether.models import ModelRequest
from tether.models.openai_chat import OpenAIChatModel
from tether.models.providers import provider
from tether.testing import FakeServer, ReplayServer, Reply
from tether.tools import Toolbox, tool_from_schema


def _echo(**arguments: Any) -> dict[str, Any]:
    return arguments


def _toolbox(request: dict[str, Any]) -> Toolbox:
    tools = []
    for entry in (request or {}).get("tools") or ():
        function = entry.get("function", {})
        try:
            tools.append(tool_from_schema(function["name"], function.get("parameters") or {"type": "object"}, _echo))
        except (ToolDefinitionError, KeyError):
            continue
    return Toolbox(tools)


def _judge(reply: ModelReply, request: dict[str, Any], compat: Compat | None = None) -> str:
    config = RunConfig(compat=compat or Compat())
    run = Run.new("replay", [Message("user", "replayed")], _toolbox(request), config)
    run.send(Begin(0.0))
    command = run.send(ModelReplied(reply, 1.0))
    return run.status.value if command else "none"


async def test_every_recorded_reply_is_a_reply_or_a_precise_error(recorded_openai: Path) -> None:
    outcomes: collections.Counter[str] = collections.Counter()
    with ReplayServer(recorded_openai) as server:
        assert len(server) == 381
        for index, interaction in enumerate(server.interactions):
            streamed = "sse" in interaction
            model = OpenAIChatModel(
                "replay", base_url=server.base_url_for(index), api_key="x", stream=streamed, max_retries=0
            )
            try:
                reply = await model.complete(ModelRequest([Message("user", "hi")]))
            except ModelError as exc:
                assert str(exc), f"#{index}: an error without a message"
                outcomes[f"error:{type(exc).__name__}"] += 1
                continue
            finally:
                await model.aclose()
            outcomes[f"status:{_judge(reply, interaction['request'])}"] += 1
    assert sum(outcomes.values()) == 381
    # The recordings hold 11 HTTP errors and 2 error events inside streams.
    assert outcomes["error:ModelHTTPError"] == 11
    assert outcomes["error:ModelResponseError"] >= 2
    assert outcomes["status:awaiting_tools"] + outcomes["status:completed"] > 300
    print(dict(outcomes))


SNOWFLAKE_TOOL_CALL = "test_snowflake/test_snowflake_tool_calling.yaml#0"


async def test_snowflakes_empty_finish_reason_with_calls_runs_only_with_its_profile(recorded_openai: Path) -> None:
    with ReplayServer(recorded_openai) as server:
        index = next(i for i, x in enumerate(server.interactions) if x["source"].endswith(SNOWFLAKE_TOOL_CALL))
        model = OpenAIChatModel("replay", base_url=server.base_url_for(index), api_key="x", max_retries=0)
        try:
            reply = await model.complete(ModelRequest([Message("user", "What is the weather in Mexico City?")]))
        finally:
            await model.aclose()
        request = server.interactions[index]["request"]

    # The raw behaviour: valid calls, and a finish_reason that is neither "tool_calls" nor anything else.
    assert reply.finish_reason == ""
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", '{"city":"Mexico City"}')]
    assert _judge(reply, request) == "protocol_error"
    assert _judge(reply, request, provider("snowflake").compat) == "awaiting_tools"
    assert provider("snowflake").compat == Compat(accept_empty_finish_reason_with_calls=True)


def _as_spec(response: dict[str, Any]) -> Reply | None:
    """The recorded reply as a fake-server spec, when it can be expressed exactly."""
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    message, reason = choices[0].get("message") or {}, choices[0].get("finish_reason")
    if not isinstance(message.get("content"), str | None) or not reason:
        return None
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        if not all(isinstance(v, str) and v for v in (call.get("id"), function.get("name"))):
            return None
        if not isinstance(function.get("arguments"), str):
            return None
        calls.append((call["id"], function["name"], function["arguments"]))
    usage = response.get("usage") or {}
    return Reply(
        content=message.get("content"),
        tool_calls=tuple(calls),
        finish_reason=reason,
        usage=(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)),
    )


@pytest.fixture(scope="module")
def recorded_specs(recorded_openai: Path) -> list[Reply]:
    specs = []
    for line in recorded_openai.read_text().splitlines():
        interaction = json.loads(line)
        if interaction.get("status") == 200 and isinstance(interaction.get("response"), dict):
            spec = _as_spec(interaction["response"])
            if spec is not None:
                specs.append(spec)
    return specs


async def test_streamed_and_plain_forms_of_recorded_content_are_equal(recorded_specs: list[Reply]) -> None:
    assert len(recorded_specs) > 250
    script = [spec for spec in recorded_specs for _ in (0, 1)]
    with FakeServer(script) as server:
        plain = OpenAIChatModel("fake", base_url=server.base_url, api_key="x")
        streamed = OpenAIChatModel("fake", base_url=server.base_url, api_key="x", stream=True)
        try:
            for spec in recorded_specs:
                request = ModelRequest([Message("user", "hi")])
                a, b = await plain.complete(request), await streamed.complete(request)
                assert a == b, spec
                assert a.usage == Usage(*spec.usage) if spec.usage else True
        finally:
            await plain.aclose()
            await streamed.aclose()
