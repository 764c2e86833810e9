"""Recorded real replies, changed the way a misbehaving server would change them, run none of their calls.

Each test takes a reply recorded from a real provider (../shared/fixtures/recorded), changes one thing,
serves the bytes over HTTP from the FakeServer to a real ``Agent`` whose tools are side-effecting and
record whether they ran, and checks the run's status. The unchanged reply runs its calls, so a test
that finds nothing ran has changed what it meant to.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tether import Agent
from tether.models.anthropic import AnthropicModel
from tether.models.openai_chat import OpenAIChatModel
from tether.testing import FakeServer, raw, text
from tether.tools import tool_from_schema

SSE = {"Content-Type": "text/event-stream"}
# OpenAI's gpt-4o asking for get_weather(city="Paris"), not streamed.
CHAT_CALL = "test_openai_tool_call_roundtrip_wire_stable[ag_ui].yaml#0"
# OpenAI's gpt-4o asking for get_country() and get_product_name(), streamed.
CHAT_STREAMED_CALLS = "test_dbos/test_complex_agent_run_sequential_tool.yaml#0"
# Claude asking for get_exchange_rate(USD, EUR) after its own tool search, streamed.
ANTHROPIC_STREAMED_CALL = "test_anthropic_native_tool_search_streaming.yaml#0"


def recorded(path: Path, source: str) -> dict[str, Any]:
    for line in path.read_text(encoding="utf-8").splitlines():
        interaction = json.loads(line)
        if interaction["source"].endswith(source):
            return dict(interaction)
    raise AssertionError(f"no recording {source} in {path}")


def events(sse: str) -> list[tuple[str | None, Any]]:
    """The SSE text's events as (event name, decoded data); ``[DONE]`` kept as text."""
    found: list[tuple[str | None, Any]] = []
    for block in re.split(r"\n\n+", sse.strip()):
        name = next((line[6:].strip() for line in block.splitlines() if line.startswith("event:")), None)
        data = "\n".join(line[5:].lstrip() for line in block.splitlines() if line.startswith("data:"))
        found.append((name, data if data == "[DONE]" else json.loads(data)))
    return found


def sse(stream: list[tuple[str | None, Any]]) -> str:
    return "".join(
        (f"event: {name}\n" if name else "") + f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
        for name, data in stream
    )


async def outcome(protocol: str, reply: str, names: list[str], *, stream: bool) -> tuple[str, list[str]]:
    """The run's status and the tools that ran, when the model's first reply is the bytes ``reply``."""
    ran: list[str] = []

    def side_effect(name: str) -> Any:
        def effect(**arguments: Any) -> str:
            ran.append(name)
            return "done"

        return tool_from_schema(name, {"type": "object", "additionalProperties": True}, effect, "A side effect.")

    with FakeServer([raw(reply, headers=SSE if stream else None), text("done")]) as server:
        model: Any
        if protocol == "chat":
            model = OpenAIChatModel("m", base_url=server.base_url, api_key="k", stream=stream, max_retries=0)
        else:
            model = AnthropicModel("m", base_url=server.origin, api_key="k", stream=stream, max_retries=0)
        async with Agent(model, [side_effect(n) for n in names]) as agent:
            result = await agent.run("go")
    return result.status.value, ran


# --- OpenAI chat completions: a refusal is a content filter --------------------


@pytest.fixture
def chat_call(recorded_openai: Path) -> dict[str, Any]:
    body: dict[str, Any] = recorded(recorded_openai, CHAT_CALL)["response"]
    return body


async def test_the_recorded_chat_call_runs(chat_call: dict[str, Any]) -> None:
    assert await outcome("chat", json.dumps(chat_call), ["get_weather"], stream=False) == ("completed", ["get_weather"])


@pytest.mark.parametrize("with_calls", [True, False])
async def test_a_chat_refusal_is_a_content_filter(chat_call: dict[str, Any], with_calls: bool) -> None:
    """OpenAI's ``message.refusal``, as the Responses API's refusal part: never a call, never a plain answer."""
    body = copy.deepcopy(chat_call)
    message = body["choices"][0]["message"]
    message["refusal"] = "I'm sorry, I can't help with that."
    if not with_calls:
        del message["tool_calls"]
        body["choices"][0]["finish_reason"] = "stop"
    assert await outcome("chat", json.dumps(body), ["get_weather"], stream=False) == ("content_filtered", [])


async def test_an_empty_chat_refusal_is_none(chat_call: dict[str, Any]) -> None:
    """Snowflake sends ``"refusal": ""`` with every reply."""
    body = copy.deepcopy(chat_call)
    body["choices"][0]["message"]["refusal"] = ""
    assert await outcome("chat", json.dumps(body), ["get_weather"], stream=False) == ("completed", ["get_weather"])


async def test_a_chat_refusal_that_is_not_text_is_a_model_error(chat_call: dict[str, Any]) -> None:
    body = copy.deepcopy(chat_call)
    body["choices"][0]["message"]["refusal"] = {"reason": "policy"}
    assert await outcome("chat", json.dumps(body), ["get_weather"], stream=False) == ("model_error", [])


@pytest.fixture
def chat_stream(recorded_openai: Path) -> list[tuple[str | None, Any]]:
    return events(recorded(recorded_openai, CHAT_STREAMED_CALLS)["sse"])


async def test_a_streamed_chat_refusal_is_a_content_filter(chat_stream: list[tuple[str | None, Any]]) -> None:
    names = ["get_country", "get_product_name"]
    assert await outcome("chat", sse(chat_stream), names, stream=True) == ("completed", names)
    first = chat_stream[0][1]["choices"][0]
    first["delta"]["refusal"] = "I can't help with that."
    assert await outcome("chat", sse(chat_stream), names, stream=True) == ("content_filtered", [])


# --- Anthropic: a streamed content block is started once and closed once -----------


@pytest.fixture
def anthropic_stream(recorded_anthropic: Path) -> list[tuple[str | None, Any]]:
    return events(recorded(recorded_anthropic, ANTHROPIC_STREAMED_CALL)["sse"])


def tool_use(stream: list[tuple[str | None, Any]]) -> tuple[int, int]:
    """The positions of the recorded call's content_block_start and content_block_stop."""
    start = next(i for i, (_, e) in enumerate(stream) if e.get("content_block", {}).get("type") == "tool_use")
    index = stream[start][1]["index"]
    stop = next(i for i, (_, e) in enumerate(stream) if e.get("type") == "content_block_stop" and e["index"] == index)
    return start, stop


async def test_the_recorded_anthropic_call_runs(anthropic_stream: list[tuple[str | None, Any]]) -> None:
    reply = sse(anthropic_stream)
    assert await outcome("anthropic", reply, ["get_exchange_rate", "wire_money"], stream=True) == (
        "completed",
        ["get_exchange_rate"],
    )


@pytest.mark.parametrize("where", ["before its stop", "after its stop"])
async def test_an_anthropic_block_started_twice_is_a_model_error(
    anthropic_stream: list[tuple[str | None, Any]], where: str
) -> None:
    """A second start of the call's block would run another tool, or drop the call, under the same arguments."""
    start, stop = tool_use(anthropic_stream)
    again = copy.deepcopy(anthropic_stream[start])
    again[1]["content_block"].update(id="toolu_other", name="wire_money")
    anthropic_stream.insert(stop if where == "before its stop" else stop + 1, again)
    reply = sse(anthropic_stream)
    assert await outcome("anthropic", reply, ["get_exchange_rate", "wire_money"], stream=True) == ("model_error", [])


async def test_an_anthropic_delta_after_its_block_stopped_is_a_model_error(
    anthropic_stream: list[tuple[str | None, Any]],
) -> None:
    """Arguments added to a closed call would replace the ones the model finished writing."""
    start, stop = tool_use(anthropic_stream)
    index = anthropic_stream[start][1]["index"]
    late = {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": "{}"}}
    anthropic_stream.insert(stop + 1, ("content_block_delta", late))
    reply = sse(anthropic_stream)
    assert await outcome("anthropic", reply, ["get_exchange_rate", "wire_money"], stream=True) == ("model_error", [])
