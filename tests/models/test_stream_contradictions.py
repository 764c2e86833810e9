"""A streamed reply that contradicts itself runs none of its calls, on every protocol.

The same reply sent whole is judged by its one finish reason; a stream can
say two things ("length", then "tool_calls"), speak for two choices, change
a call's id between its fragments, or go on after it has finished. Each of
those is a ``ModelResponseError`` (the run ends ``model_error``), or, for a
second choice, is not read at all: the truncated first choice decides, as
it would unstreamed. Real HTTP against the FakeServer, an Agent with a
side-effecting tool that records what it did.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether import Agent, tool
from tether.core import Message
from tether.models.anthropic import AnthropicModel
from tether.models.base import ModelRequest
from tether.models.openai_chat import OpenAIChatModel
from tether.models.openai_responses import OpenAIResponsesModel
from tether.testing import FakeServer, raw, text

SSE = {"Content-Type": "text/event-stream"}
ARGUMENTS = '{"amount": 5, "to": "ann"}'
CALL = {"index": 0, "id": "c1", "type": "function", "function": {"name": "transfer", "arguments": ""}}


def chat_stream(*chunks: dict[str, Any], done: bool = True) -> Any:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + ("data: [DONE]\n\n" if done else "")
    return raw(body, headers=SSE)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, index: int = 0) -> dict[str, Any]:
    choice = {"index": index, "delta": delta or {}, "finish_reason": finish}
    return {"object": "chat.completion.chunk", "choices": [choice]}


def named_stream(*events: dict[str, Any]) -> Any:
    return raw("".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events), headers=SSE)


async def outcome(protocol: str, reply: Any) -> tuple[str, list[tuple[int, str]]]:
    """The run's status and what its ``transfer`` tool did, when the model's first reply is ``reply``."""
    done: list[tuple[int, str]] = []

    @tool
    def transfer(amount: int, to: str) -> str:
        """Move money (a side effect)."""
        done.append((amount, to))
        return "moved"

    with FakeServer([reply, text("done")]) as server:
        model: Any
        if protocol == "chat":
            model = OpenAIChatModel("m", base_url=server.base_url, api_key="k", stream=True, max_retries=0)
        elif protocol == "responses":
            model = OpenAIResponsesModel("m", base_url=server.base_url, api_key="k", stream=True, max_retries=0)
        else:
            model = AnthropicModel("m", base_url=server.origin, api_key="k", stream=True, max_retries=0)
        agent = Agent(model, [transfer])
        try:
            result = await agent.run("pay ann 5")
        finally:
            await agent.aclose()
    return result.status.value, done


CHAT = {
    "length, then tool_calls": chat_stream(
        chunk({"role": "assistant", "tool_calls": [CALL]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ARGUMENTS}}]}),
        chunk(finish="length"),
        chunk(finish="tool_calls"),
    ),
    "the id of a call changes between its fragments": chat_stream(
        chunk({"tool_calls": [CALL]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"amount": 5, '}}]}),
        chunk({"tool_calls": [{"index": 0, "id": "c2", "function": {"arguments": '"to": "ann"}'}}]}),
        chunk(finish="tool_calls"),
    ),
    "a call after the finish reason, then the stream is cut": chat_stream(
        chunk({"tool_calls": [{**CALL, "function": {"name": "transfer", "arguments": ARGUMENTS}}]}, "tool_calls"),
        chunk({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "transfer", "arguments": '{"amount"'}}]}),
        done=False,
    ),
    "a fragment whose function is not an object": chat_stream(
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": "transfer"}]}), chunk(finish="tool_calls")
    ),
}


@pytest.mark.parametrize("case", list(CHAT))
async def test_a_chat_stream_that_contradicts_itself_is_a_model_error(case: str) -> None:
    assert await outcome("chat", CHAT[case]) == ("model_error", [])


async def test_a_second_choice_is_not_read_into_the_first() -> None:
    """Choice 0 is cut at its token limit; choice 1's "tool_calls" does not speak for it."""
    stream = chat_stream(
        chunk({"tool_calls": [CALL]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ARGUMENTS}}]}, "length"),
        chunk(finish="tool_calls", index=1),
    )
    assert await outcome("chat", stream) == ("truncated", [])


async def test_a_repeated_finish_reason_is_one_finish_reason() -> None:
    """Some providers (OpenRouter) repeat it in the chunks after it: the same reason, so the calls run."""
    stream = chat_stream(
        chunk({"tool_calls": [{**CALL, "function": {"name": "transfer", "arguments": ARGUMENTS}}]}, "tool_calls"),
        chunk(finish="tool_calls"),
    )
    assert await outcome("chat", stream) == ("completed", [(5, "ann")])


def anthropic_events(*stop_reasons: str) -> list[dict[str, Any]]:
    tool_use = {"type": "tool_use", "id": "t1", "name": "transfer", "input": {}}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0, "content_block": tool_use},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ARGUMENTS}},
        {"type": "content_block_stop", "index": 0},
    ]
    for reason in stop_reasons:
        events.append({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 9}})
    return [*events, {"type": "message_stop"}]


async def test_an_anthropic_stop_reason_that_changes_is_a_model_error() -> None:
    assert await outcome("anthropic", named_stream(*anthropic_events("max_tokens", "tool_use"))) == ("model_error", [])


async def test_anthropic_content_after_the_stop_reason_is_a_model_error() -> None:
    events = anthropic_events("end_turn")
    late = {"type": "content_block_start", "index": 1, "content_block": dict(events[1]["content_block"], id="t2")}
    events.insert(-1, late)
    assert await outcome("anthropic", named_stream(*events)) == ("model_error", [])


@pytest.mark.parametrize("event", ["response.incomplete", "response.failed"])
async def test_a_responses_stream_ends_as_its_terminal_event_says(event: str) -> None:
    """``response.incomplete`` (or ``.failed``) carrying a response that claims to be completed is not believed."""
    call = {"type": "function_call", "id": "fc1", "call_id": "c1", "name": "transfer", "arguments": ARGUMENTS}
    response = {"id": "r1", "model": "m", "status": "completed", "output": [call], "usage": {}}
    stream = named_stream(
        {"type": "response.output_item.added", "output_index": 0, "item": call},
        {"type": "response.output_item.done", "output_index": 0, "item": call},
        {"type": event, "response": response},
    )
    assert await outcome("responses", stream) == ("model_error", [])


async def test_an_anthropic_model_streams_when_the_request_asks() -> None:
    """``Agent.stream`` asks each request to stream (``ModelRequest.stream``), whatever the adapter's default."""
    model = AnthropicModel("m", base_url="http://127.0.0.1:9", api_key="k", stream=False)
    asked = ModelRequest([Message("user", "hi")], stream=True)
    assert model.body(asked).get("stream") is True
    assert "stream" not in model.body(ModelRequest([Message("user", "hi")]))
