"""The Anthropic Messages adapter over real HTTP against the fake server's ``/v1/messages``."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tether.core import (
    AuthenticationError,
    Begin,
    ConfigurationError,
    Message,
    ModelHTTPError,
    ModelReplied,
    ModelResponseError,
    RateLimited,
    Run,
    ServerError,
    ToolCall,
    Usage,
    WireToolCall,
)
from tether.core.messages import ModelReply
from tether.models import ModelRequest
from tether.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel, tool_to_wire
from tether.testing import FakeServer, raw, text, tool_calls
from tether.tools import Toolbox, tool_from_schema

HELLO = ModelRequest([Message("user", "hi")])
CALLS = [("toolu_1", "multiply", '{"a": 248, "b": 15}'), ("toolu_2", "note", '{"text": "x × y \\"q\\""}')]
SSE = {"Content-Type": "text/event-stream"}


def model_for(server: FakeServer, **options: Any) -> AnthropicModel:
    return AnthropicModel("claude-fake", base_url=server.origin, api_key="sk-ant-secret", **options)


async def complete(server: FakeServer, request: ModelRequest = HELLO, **options: Any) -> ModelReply:
    model = model_for(server, **options)
    try:
        return await model.complete(request)
    finally:
        await model.aclose()


def sse(*events: dict[str, Any]) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def judged(reply: ModelReply) -> str:
    """The status the run state machine gives this reply, with multiply and note as tools."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    note = {"type": "object", "properties": {"text": {"type": "string"}}}
    box = Toolbox([tool_from_schema("multiply", schema, lambda **a: a), tool_from_schema("note", note, lambda **a: a)])
    run = Run.new("r", [Message("user", "hi")], box)
    run.send(Begin(0.0))
    run.send(ModelReplied(reply, 1.0))
    return run.status.value


@pytest.mark.parametrize(
    "spec",
    [
        text("Hello there, how can I help?"),
        tool_calls(CALLS),
        tool_calls(CALLS, content="Let me compute."),
        text("cut", finish_reason="length"),
        tool_calls(CALLS[:1], finish_reason="length"),
        text("The beautiful city of ", finish_reason="stop_sequence"),
        tool_calls([("toolu_3", "f", "{}")]),
        tool_calls([("toolu_4", "multiply", '{"a": 6, "a": 7, "b": 1}')]),
        tool_calls([("toolu_5", "multiply", '{"a": NaN, "b": 1}')]),
    ],
)
async def test_streamed_and_plain_replies_are_equal(spec: Any) -> None:
    with FakeServer([spec, spec]) as server:
        plain = await complete(server)
        streamed = await complete(server, stream=True)
        assert "stream" not in server.requests[0] and server.requests[1]["stream"] is True
    assert streamed == plain
    assert plain.usage == Usage(10, 5) and plain.model == "claude-fake"


async def test_tool_use_blocks_are_calls_and_stop_reasons_are_mapped() -> None:
    script = [tool_calls(CALLS), text("no", finish_reason="content_filter"), text("cut", finish_reason="length")]
    with FakeServer(script) as server:
        calls, refused, cut = await complete(server), await complete(server), await complete(server)
    assert calls.finish_reason == "tool_calls" and calls.content is None
    assert calls.tool_calls == tuple(WireToolCall(i, "function", n, a) for i, n, a in CALLS)
    assert judged(calls) == "awaiting_tools"
    assert (refused.finish_reason, judged(refused)) == ("content_filter", "content_filtered")
    assert (cut.finish_reason, judged(cut)) == ("length", "truncated")


@pytest.mark.parametrize("stream", [False, True])
async def test_max_tokens_with_a_tool_use_never_runs_it(stream: bool) -> None:
    with FakeServer([tool_calls([("toolu_1", "multiply", '{"a": 2')], finish_reason="length")]) as server:
        reply = await complete(server, stream=stream)
    assert judged(reply) == "truncated"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("arguments", "code"),
    [('{"a": 6, "a": 7, "b": 1}', "invalid_json"), ('{"a": NaN, "b": 1}', "invalid_json"), ("[1, 2]", "invalid_json"),
     ('"{\\"a\\": 1}"', "invalid_json"), ('{"a": true, "b": 1}', "invalid_arguments")],
)  # fmt: skip
async def test_malformed_input_is_refused_like_a_bad_arguments_string(stream: bool, arguments: str, code: str) -> None:
    with FakeServer([tool_calls([("toolu_1", "multiply", arguments)])]) as server:
        reply = await complete(server, stream=stream)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    run = Run.new("r", [Message("user", "hi")], Toolbox([tool_from_schema("multiply", schema, lambda **a: a)]))
    run.send(Begin(0.0))
    command = run.send(ModelReplied(reply, 1.0))
    assert json.loads(command.calls[0].result)["error"]["code"] == code  # type: ignore[attr-defined]


async def test_a_tool_use_block_without_input_is_a_protocol_error() -> None:
    body = {
        "type": "message",
        "content": [{"type": "tool_use", "id": "t1", "name": "multiply"}],
        "stop_reason": "tool_use",
    }
    with FakeServer([raw(body)]) as server:
        reply = await complete(server)
    assert reply.tool_calls[0].arguments is None and judged(reply) == "protocol_error"


@pytest.mark.parametrize(
    ("stop_reason", "blocks", "status"),
    [
        ("tool_use", [], "protocol_error"),
        ("end_turn", [{"type": "tool_use", "id": "t1", "name": "note", "input": {"text": "x"}}], "protocol_error"),
        ("stop_sequence", [{"type": "tool_use", "id": "t1", "name": "note", "input": {}}], "protocol_error"),
        ("stop_sequence", [{"type": "text", "text": "up to the sequence"}], "completed"),
        ("refusal", [{"type": "tool_use", "id": "t1", "name": "note", "input": {}}], "content_filtered"),
    ],
)
async def test_tool_use_stop_reason_holds_exactly_when_tool_use_blocks_are_present(
    stop_reason: str, blocks: list[Any], status: str
) -> None:
    with FakeServer([raw({"type": "message", "content": blocks, "stop_reason": stop_reason})]) as server:
        reply = await complete(server)
    assert judged(reply) == status


async def test_request_body_carries_system_history_results_and_tools() -> None:
    tools = [
        {"type": "function", "function": {"name": "multiply", "description": "a*b", "parameters": {"type": "object"}}}
    ]
    history = [
        Message("system", "Be brief."),
        Message("user", "248*15 and 2*3?"),
        Message(
            "assistant", "Computing.", (ToolCall("c1", "multiply", '{"a":248,"b":15}'), ToolCall("c2", "x", "{bad"))
        ),
        Message("tool", '{"ok": true, "result": 3720}', tool_call_id="c1"),
        Message("tool", '{"ok": false, "error": {"code": "unknown_tool"}}', tool_call_id="c2"),
    ]
    with FakeServer([text("3720")] * 2) as server:
        await complete(server, ModelRequest(history, tools))
        await complete(server, ModelRequest(history, tools, max_tokens=50, tool_choice="required"))
        first, second = server.requests
        headers = server.headers[0]
    assert first["model"] == "claude-fake" and first["system"] == "Be brief."
    assert first["max_tokens"] == DEFAULT_MAX_TOKENS and second["max_tokens"] == 50
    assert first["tools"] == [{"name": "multiply", "description": "a*b", "input_schema": {"type": "object"}}]
    assert "tool_choice" not in first and second["tool_choice"] == {"type": "any"}
    assert first["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "248*15 and 2*3?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Computing."},
                {"type": "tool_use", "id": "c1", "name": "multiply", "input": {"a": 248, "b": 15}},
                {"type": "tool_use", "id": "c2", "name": "x", "input": {}},
            ],
        },
        {  # the results of parallel calls in one user turn; an error envelope is is_error
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": '{"ok": true, "result": 3720}'},
                {"type": "tool_result", "tool_use_id": "c2", "is_error": True,
                 "content": '{"ok": false, "error": {"code": "unknown_tool"}}'},
            ],
        },
    ]  # fmt: skip
    assert headers["x-api-key"] == "sk-ant-secret" and headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in headers


def test_a_strict_tool_spec_keeps_its_flag() -> None:
    """The strict form is sent only with the flag that asks the server to enforce it (Agent(strict_tools=True))."""
    strict = {"type": "object", "properties": {"n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    spec = {"type": "function", "function": {"name": "f", "parameters": strict, "strict": True}}
    assert tool_to_wire(spec) == {"name": "f", "input_schema": strict, "strict": True}
    assert AnthropicModel.strict_tools is False  # an Agent sends Anthropic each tool's own schema


def test_tool_choice_and_parallel_use_translate() -> None:
    model = AnthropicModel("m", base_url="http://127.0.0.1:9", parallel_tool_calls=False)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    named = {"type": "function", "function": {"name": "f"}}
    assert model.body(ModelRequest(HELLO.messages, tools, tool_choice=named))["tool_choice"] == {
        "type": "tool", "name": "f", "disable_parallel_tool_use": True}  # fmt: skip
    assert model.body(ModelRequest(HELLO.messages, tools))["tool_choice"] == {
        "type": "auto", "disable_parallel_tool_use": True}  # fmt: skip
    assert model.body(ModelRequest(HELLO.messages, tools, tool_choice="none"))["tool_choice"] == {"type": "none"}
    assert "tool_choice" not in model.body(HELLO) and "tools" not in model.body(HELLO)


async def test_streamed_text_reaches_on_text_and_thinking_stays_out() -> None:
    stream = sse(
        {"type": "message_start", "message": {"model": "c", "usage": {"input_tokens": 7, "cache_read_input_tokens": 3,
                                                                      "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "secret plan"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "ping"},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "one "}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "two"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}},
        {"type": "message_stop"},
    )  # fmt: skip
    pieces: list[str] = []
    with FakeServer([raw(stream, headers=SSE)]) as server:
        reply = await complete(server, ModelRequest(HELLO.messages, on_text=pieces.append), stream=True)
    assert pieces == ["one ", "two"] and reply.content == "one two"
    assert reply.usage == Usage(10, 12) and reply.finish_reason == "stop"


async def test_error_event_inside_a_stream() -> None:
    spec = text("partial answer here", stream_error={"type": "overloaded_error", "message": "Overloaded"})
    with FakeServer([spec]) as server, pytest.raises(ModelResponseError, match="overloaded_error: Overloaded"):
        await complete(server, stream=True)


async def test_stream_without_stop_reason_is_an_error() -> None:
    stream = sse({"type": "message_start", "message": {}}, {"type": "ping"})
    with FakeServer([raw(stream, headers=SSE)]) as server, pytest.raises(ModelResponseError, match="stop_reason"):
        await complete(server, stream=True)


@pytest.mark.parametrize("stream", [False, True])
async def test_pause_turn_is_continued_within_the_step(stream: bool) -> None:
    script = [text("Searching. ", finish_reason="pause_turn", usage=(10, 2)), text("Found it.", usage=(20, 3))]
    with FakeServer(script) as server:
        reply = await complete(server, stream=stream)
        first, second = server.requests
    assert reply.content == "Searching. Found it." and reply.finish_reason == "stop"
    assert reply.usage == Usage(30, 5)
    assert second["messages"] == [
        *first["messages"],
        {"role": "assistant", "content": [{"type": "text", "text": "Searching. "}]},
    ]


async def test_a_turn_paused_again_and_again_is_an_error() -> None:
    with FakeServer([text("more", finish_reason="pause_turn")] * 10) as server:
        with pytest.raises(ModelResponseError, match="paused its turn 4 times"):
            await complete(server)
        assert len(server.requests) == 4


async def test_401_is_not_retried_names_the_variable_and_never_shows_the_key() -> None:
    refusal = raw(
        {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}, status=401
    )
    with FakeServer([refusal] * 3) as server:
        with pytest.raises(AuthenticationError) as caught:
            await complete(server)
        assert len(server.requests) == 1
    assert "invalid x-api-key" in str(caught.value) and "ANTHROPIC_API_KEY" in str(caught.value)
    assert "sk-ant-secret" not in str(caught.value) + repr(model_for(server))


@pytest.mark.parametrize("status", [429, 529, 500])
async def test_429_529_and_5xx_are_retried_honouring_retry_after(status: int) -> None:
    error = raw({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, status=status,
                headers={"retry-after": "0"})  # fmt: skip
    with FakeServer([error, text("ok")]) as server:
        reply = await complete(server)
        assert len(server.requests) == 2
    assert reply.content == "ok"


async def test_retries_give_up_with_the_precise_error() -> None:
    error = raw({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, status=529,
                headers={"retry-after": "0"})  # fmt: skip
    with FakeServer([error] * 3) as server, pytest.raises(ServerError, match="HTTP 529: Overloaded"):
        await complete(server, max_retries=2)
    late = raw({"type": "error", "error": {"message": "later"}}, status=429, headers={"retry-after": "3600"})
    with FakeServer([late]) as server, pytest.raises(RateLimited):
        await complete(server)
    bad = raw(
        {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too big"}}, status=400
    )
    with FakeServer([bad] * 2) as server, pytest.raises(ModelHTTPError, match="HTTP 400: max_tokens: too big"):
        await complete(server)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("not json at all", "not JSON"),
        ('["a list"]', "not a JSON object"),
        ('{"type": "error", "error": {"type": "api_error", "message": "quota"}}', "error in response: quota"),
        ('{"type": "message", "content": "text"}', "no content list"),
        ('{"type": "message", "content": ["text"]}', "not an object"),
    ],
)
async def test_malformed_bodies_are_precise_errors(body: str, match: str) -> None:
    with FakeServer([raw(body)]) as server, pytest.raises(ModelResponseError, match=match):
        await complete(server)


def test_configuration_errors_say_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match="ANTHROPIC_MODEL"):
        AnthropicModel()
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-sonnet-4-5")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("ANTHROPIC_MODEL", "m")
    model = AnthropicModel()
    assert model.base_url == "http://127.0.0.1:9" and model.name == "m"
    assert model._url == "http://127.0.0.1:9/v1/messages"


def test_import_tether_stays_light_and_exports_the_adapter_lazily() -> None:
    code = (
        "import sys, tether\n"
        "light = not {'aiohttp', 'tether.models.anthropic', 'tether.models.http'} & set(sys.modules)\n"
        "from tether import AnthropicModel\n"
        "print(light, AnthropicModel.__module__, 'AnthropicModel' in tether.__all__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "tether.models.anthropic", "True"]
