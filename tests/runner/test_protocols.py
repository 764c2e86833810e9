"""The strict gates hold on all three wire protocols: chat completions, OpenAI's Responses and Anthropic's Messages.

The same scripts are served by the fake server at ``/v1/chat/completions``,
``/v1/responses`` and ``/v1/messages``, streamed and not, and an ``Agent`` with a real HTTP
adapter runs them: a cut reply with calls, a boolean for an integer, a
repeated key, a reused call id and a loop end the same way on every path,
and nothing that should not run ever runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.core.budget import Budget
from tether.core.machine import Status
from tether.core.report import RunResult
from tether.drivers.local.runner import Agent
from tether.models.anthropic import AnthropicModel
from tether.models.openai_chat import OpenAIChatModel
from tether.models.openai_responses import OpenAIResponsesModel
from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls
from tether.tools import tool

PATHS = [
    pytest.param("openai", False, id="chat"),
    pytest.param("openai", True, id="chat-stream"),
    pytest.param("responses", False, id="responses"),
    pytest.param("responses", True, id="responses-stream"),
    pytest.param("anthropic", False, id="messages"),
    pytest.param("anthropic", True, id="messages-stream"),
]

effects: list[tuple[int, str]] = []


@tool
def transfer(amount: int, to: str) -> dict[str, Any]:
    """Move money (side-effecting)."""
    effects.append((amount, to))
    return {"moved": amount, "to": to}


@pytest.fixture(autouse=True)
def _fresh_effects() -> None:
    effects.clear()


async def run(script: list[ReplySpec], protocol: str, stream: bool, **options: Any) -> tuple[RunResult, list[Any]]:
    with FakeServer(script) as server:
        model: OpenAIChatModel | OpenAIResponsesModel | AnthropicModel
        if protocol == "openai":
            model = OpenAIChatModel("fake", base_url=server.base_url, api_key="x", stream=stream, max_retries=0)
        elif protocol == "responses":
            model = OpenAIResponsesModel("fake", base_url=server.base_url, api_key="x", stream=stream, max_retries=0)
        else:
            model = AnthropicModel("fake", base_url=server.origin, api_key="x", stream=stream, max_retries=0)
        agent = Agent(model, [transfer], **options)
        try:
            result = await agent.run("pay ann")
        finally:
            await agent.aclose()
        return result, list(server.requests)


def outcome(result: RunResult, call_id: str) -> Any:
    replies = [m for m in result.state.messages if m.role == "tool" and m.tool_call_id == call_id]
    return [json.loads(m.content or "") for m in replies]


def code(envelope: dict[str, Any]) -> str | None:
    return None if envelope["ok"] else str(envelope["error"]["code"])


@pytest.mark.parametrize(("protocol", "stream"), PATHS)
async def test_a_cut_reply_with_calls_is_truncated_and_runs_nothing(protocol: str, stream: bool) -> None:
    script = [tool_calls([("c1", "transfer", '{"amount": 5, "to": "ann"}')], finish_reason="length")]
    result, _ = await run(script, protocol, stream)
    assert result.status is Status.TRUNCATED and effects == []


@pytest.mark.parametrize(("protocol", "stream"), PATHS)
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param('{"amount": true, "to": "ann"}', "invalid_arguments", id="bool-for-int"),
        pytest.param('{"amount": "5", "to": "ann"}', "invalid_arguments", id="string-for-int"),
        pytest.param('{"amount": 5, "amount": 500, "to": "ann"}', "invalid_json", id="duplicate-keys"),
        pytest.param('{"amount": 5, "to": "ann"', "invalid_json", id="cut-json"),
    ],
)
async def test_invalid_arguments_are_refused_and_never_run(
    protocol: str, stream: bool, arguments: str, expected: str
) -> None:
    script = [tool_calls([("c1", "transfer", arguments)]), text("I could not pay.")]
    result, requests = await run(script, protocol, stream)
    assert result.status is Status.COMPLETED and effects == []
    (envelope,) = outcome(result, "c1")
    assert code(envelope) == expected
    if protocol == "anthropic":  # the refusal went back as an is_error tool_result
        (block,) = requests[1]["messages"][-1]["content"]
        assert block["tool_use_id"] == "c1" and block["is_error"] is True
    if protocol == "responses":  # the call went back as written, the refusal as its function_call_output
        call, result = requests[1]["input"][-2:]
        assert call == {"type": "function_call", "call_id": "c1", "name": "transfer", "arguments": arguments}
        assert result["call_id"] == "c1" and code(json.loads(result["output"])) == expected


@pytest.mark.parametrize(("protocol", "stream"), PATHS)
async def test_a_reused_call_id_never_runs_twice(protocol: str, stream: bool) -> None:
    script = [
        tool_calls([("c1", "transfer", '{"amount": 5, "to": "ann"}')]),
        tool_calls([("c1", "transfer", '{"amount": 5, "to": "ann"}')]),  # same id, same arguments
        tool_calls([("c1", "transfer", '{"amount": 500, "to": "eve"}')]),  # same id, other arguments
        text("done"),
    ]
    result, _ = await run(script, protocol, stream)
    assert result.status is Status.COMPLETED
    assert effects == [(5, "ann")]
    first, again, other = outcome(result, "c1")
    assert first == again == {"ok": True, "result": {"moved": 5, "to": "ann"}}
    assert code(other) == "call_id_reused"


@pytest.mark.parametrize(("protocol", "stream"), PATHS)
async def test_a_loop_is_refused_then_detected(protocol: str, stream: bool) -> None:
    script: list[ReplySpec] = [tool_calls([(f"c{i}", "transfer", '{"amount": 1, "to": "ann"}')]) for i in range(5)]
    result, _ = await run(script, protocol, stream, budget=Budget(loop_limit=3))
    assert result.status is Status.LOOP_DETECTED
    assert effects == [(1, "ann"), (1, "ann")]
    assert code(outcome(result, "c2")[0]) == "repeated_call"
    assert code(outcome(result, "c3")[0]) == "repeated_call"


@pytest.mark.parametrize(("protocol", "stream"), PATHS)
async def test_parallel_calls_are_answered_in_order_in_one_turn(protocol: str, stream: bool) -> None:
    calls = [("c1", "transfer", '{"amount": 1, "to": "ann"}'), ("c2", "transfer", '{"amount": 2, "to": "bob"}')]
    result, requests = await run([tool_calls(calls), text("paid both")], protocol, stream)
    assert result.status is Status.COMPLETED and effects == [(1, "ann"), (2, "bob")]
    if protocol == "anthropic":
        last = requests[1]["messages"][-1]
        assert last["role"] == "user" and [b["tool_use_id"] for b in last["content"]] == ["c1", "c2"]
    if protocol == "responses":
        sent = [(i["type"], i["call_id"]) for i in requests[1]["input"][1:]]
        # The calls as one turn, then their results in order.
        assert sent == [(kind, c) for kind in ("function_call", "function_call_output") for c in ("c1", "c2")]
