"""Every recorded Anthropic Messages reply, served over HTTP, gives a reply or a precise error.

The 202 interactions were recorded from api.anthropic.com (see
../shared/fixtures/README.md): tool_use blocks, thinking, server tools
(web search, code execution, MCP), citations, ``pause_turn`` and
``stop_sequence``, streamed and not. Each is replayed by the replay server,
read by ``AnthropicModel`` and handed to the run state machine with the
recorded request's own tools. Then every non-streamed reply is rendered by
the fake server both ways and must read the same streamed and not, and the
same as the recording itself.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

from tether import Agent
from tether.core import Begin, ModelError, ModelReplied, Run, ToolDefinitionError
from tether.core.messages import Message, ModelReply
from tether.models import ModelRequest
from tether.models.anthropic import AnthropicModel
from tether.testing import FakeServer, ReplayServer, Reply, text
from tether.tools import Tool, Toolbox, tool_from_schema

FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length", "refusal": "content_filter"}


def _echo(**arguments: Any) -> dict[str, Any]:
    return arguments


def _tools(request: dict[str, Any]) -> list[Tool]:
    tools = []
    for entry in (request or {}).get("tools") or ():
        if "input_schema" not in entry:
            continue  # a server tool (web search, code execution): the API runs it, not the host
        try:
            tools.append(tool_from_schema(entry["name"], entry["input_schema"], _echo))
        except (ToolDefinitionError, KeyError):
            continue
    return tools


def _toolbox(request: dict[str, Any]) -> Toolbox:
    return Toolbox(_tools(request))


def _judge(reply: ModelReply, request: dict[str, Any]) -> str:
    run = Run.new("replay", [Message("user", "replayed")], _toolbox(request))
    run.send(Begin(0.0))
    command = run.send(ModelReplied(reply, 1.0))
    return run.status.value if command else "none"


async def _replayed(server: ReplayServer, index: int, stream: bool) -> ModelReply:
    model = AnthropicModel("replay", base_url=server.base_url_for(index), api_key="x", stream=stream, max_retries=0)
    try:
        return await model.complete(ModelRequest([Message("user", "hi")]))
    finally:
        await model.aclose()


async def test_every_recorded_reply_is_a_reply_or_a_precise_error(recorded_anthropic: Path) -> None:
    outcomes: collections.Counter[str] = collections.Counter()
    errors: dict[int, str] = {}
    with ReplayServer(recorded_anthropic) as server:
        assert len(server) == 202
        for index, interaction in enumerate(server.interactions):
            try:
                reply = await _replayed(server, index, "sse" in interaction)
            except ModelError as exc:
                errors[index] = f"{type(exc).__name__}: {exc}"
                outcomes[f"error:{type(exc).__name__}"] += 1
                continue
            outcomes[f"status:{_judge(reply, interaction['request'])}"] += 1
    print(dict(outcomes), errors)
    assert sum(outcomes.values()) == 202
    # Two HTTP errors (a misspelt model, an unsupported effort) and two turns the server paused: the replay
    # answers every continuation with the same pause, so the adapter gives up with a precise error.
    assert sorted(errors.values()) == [
        "ModelHTTPError: HTTP 400: This model does not support effort level 'xhigh'. Supported levels: high, "
        "low, max, medium.",
        "ModelHTTPError: HTTP 404: model: claude-sonet-4-5",
        *["ModelResponseError: the model paused its turn 4 times (stop_reason pause_turn); gave up continuing it"] * 2,
    ]
    assert outcomes["status:awaiting_tools"] + outcomes["status:completed"] == 198
    assert outcomes["status:awaiting_tools"] >= 60


def _as_spec(response: dict[str, Any]) -> Reply | None:
    """The recorded reply as a fake-server spec: its text, its tool_use blocks, its stop reason and usage."""
    reason = response.get("stop_reason")
    if reason is None or reason == "pause_turn":
        return None
    blocks = response.get("content") or []
    text = "".join(b["text"] for b in blocks if b.get("type") == "text")
    calls = tuple(
        (b["id"], b["name"], json.dumps(b["input"], ensure_ascii=False)) for b in blocks if b.get("type") == "tool_use"
    )
    usage = response.get("usage") or {}
    counted = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    return Reply(
        content=text or None,
        tool_calls=calls,
        finish_reason=FINISH.get(reason, reason),
        usage=(sum(usage.get(k) or 0 for k in counted), usage.get("output_tokens", 0)),
    )


async def test_streamed_plain_and_recorded_forms_are_equal(recorded_anthropic: Path) -> None:
    compared = 0
    with ReplayServer(recorded_anthropic) as replay, FakeServer() as fake:
        for index, interaction in enumerate(replay.interactions):
            response = interaction.get("response")
            if interaction["status"] != 200 or not isinstance(response, dict):
                continue
            spec = _as_spec(response)
            if spec is None:
                continue
            fake.script = [spec, spec]
            fake.requests.clear()
            name = response["model"]
            plain = AnthropicModel(name, base_url=fake.origin, api_key="x", max_retries=0)
            streamed = AnthropicModel(name, base_url=fake.origin, api_key="x", stream=True, max_retries=0)
            try:
                request = ModelRequest([Message("user", "hi")])
                a, b = await plain.complete(request), await streamed.complete(request)
            finally:
                await plain.aclose()
                await streamed.aclose()
            recorded = await _replayed(replay, index, stream=False)
            assert a == b == recorded, index
            compared += 1
    assert compared == 183  # every non-streamed 200 reply but the paused one


async def test_every_recorded_tool_is_offered_its_own_schema(recorded_anthropic: Path) -> None:
    """An Agent over AnthropicModel sends each tool the schema it was declared with, never OpenAI's strict rewrite.

    The Messages API does not enforce OpenAI's strict mode, so the rewrite (every property required, the
    optional ones nullable) would be a schema nobody wrote; the host validates against the tool's own.
    """
    cases = offered = 0
    other: list[str] = []
    with ReplayServer(recorded_anthropic) as replay, FakeServer() as fake:
        for index, interaction in enumerate(replay.interactions):
            tools = _tools(interaction["request"])
            if not tools:
                continue
            cases += 1
            fake.script = [text("ok")]
            fake.requests.clear()
            async with Agent(AnthropicModel("m", base_url=fake.origin, api_key="x", max_retries=0), tools) as agent:
                await agent.run("hi")
            sent = {t["name"]: t for t in fake.requests[0]["tools"]}
            for t in tools:
                offered += 1
                if sent[t.name] != {"name": t.name, "input_schema": t.parameters, **_description(t)}:
                    other.append(f"{index}:{t.name}")
    assert (cases, offered) == (115, 198)
    assert other == []


def _description(t: Tool) -> dict[str, str]:
    return {"description": t.description} if t.description else {}
