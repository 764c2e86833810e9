"""The OpenAI-compatible adapter over real HTTP against the fake server."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from tether.core import (
    AuthenticationError,
    ConfigurationError,
    Message,
    ModelConnectionError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeout,
    RateLimited,
    ServerError,
    ToolCall,
    Usage,
    WireToolCall,
)
from tether.models import ModelRequest
from tether.models.openai_chat import OpenAIChatModel, WireCompat, message_to_wire
from tether.testing import FakeServer, raw, text, tool_calls

HELLO = ModelRequest([Message("user", "hi")])


def model_for(server: FakeServer, **options: object) -> OpenAIChatModel:
    return OpenAIChatModel("fake", base_url=server.base_url, api_key="sk-test-secret", **options)  # type: ignore[arg-type]


async def complete(server: FakeServer, request: ModelRequest = HELLO, **options: object):  # type: ignore[no-untyped-def]
    model = model_for(server, **options)
    try:
        return await model.complete(request)
    finally:
        await model.aclose()


CALLS = [("call_1", "multiply", '{"a": 248, "b": 15}'), ("call_2", "note", '{"text": "x × y \\"q\\""}')]


@pytest.mark.parametrize(
    "spec",
    [
        text("Hello there, how can I help?"),
        tool_calls(CALLS),
        tool_calls(CALLS, content="Let me compute."),
        text("cut", finish_reason="length"),
    ],
)
async def test_streamed_and_plain_replies_are_equal(spec: object) -> None:
    with FakeServer([spec, spec]) as server:  # type: ignore[list-item]
        plain = await complete(server)
        streamed = await complete(server, stream=True)
        assert server.requests[1]["stream"] is True
        assert server.requests[1]["stream_options"] == {"include_usage": True}
    assert streamed == plain
    assert plain.usage == Usage(10, 5)


async def test_tool_calls_are_translated_not_judged() -> None:
    with FakeServer([tool_calls(CALLS)]) as server:
        reply = await complete(server)
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls[0] == WireToolCall("call_1", "function", "multiply", '{"a": 248, "b": 15}')
    assert reply.tool_calls[1].arguments == '{"text": "x × y \\"q\\""}'


async def test_request_body_carries_history_and_tools() -> None:
    tools = [{"type": "function", "function": {"name": "multiply", "parameters": {"type": "object"}}}]
    history = [
        Message("user", "248*15?"),
        Message("assistant", None, (ToolCall("c1", "multiply", '{"a":248,"b":15}'),)),
        Message("tool", '{"ok": true, "result": 3720}', tool_call_id="c1"),
    ]
    with FakeServer([text("3720")]) as server:
        await complete(server, ModelRequest(history, tools, max_tokens=50))
        body = server.requests[0]
    assert body["model"] == "fake" and body["tools"] == tools and body["max_tokens"] == 50
    assert body["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "multiply", "arguments": '{"a":248,"b":15}'},
            }
        ],
    }
    assert body["messages"][2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": '{"ok": true, "result": 3720}',
    }


async def test_response_format_is_sent_as_given_and_again_after_a_change() -> None:
    """The text of an unchanged ``response_format`` is reused; a changed one (same dict) is sent changed."""
    fmt = {"type": "json_schema", "json_schema": {"name": "A", "schema": {"type": "object"}, "strict": True}}
    streamed = ModelRequest([Message("user", "hi")], response_format=fmt, stream=True)
    with FakeServer([text("{}")] * 4) as server:
        model = model_for(server)
        try:
            await model.complete(ModelRequest([Message("user", "hi")], response_format=fmt))
            await model.complete(streamed)
            fmt["json_schema"]["name"] = "B"  # type: ignore[index]
            await model.complete(ModelRequest([Message("user", "é")], max_tokens=9, response_format=fmt))
            await model.complete(HELLO)
        finally:
            await model.aclose()
        sent = server.requests
    assert sent[0]["response_format"]["json_schema"]["name"] == "A" and sent[1]["stream"] is True
    assert sent[1]["response_format"] == sent[0]["response_format"]
    assert sent[2]["response_format"] == fmt and sent[2]["messages"][0]["content"] == "é"
    assert sent[2]["max_tokens"] == 9 and "response_format" not in sent[3]


def test_null_content_switch_is_off_by_default() -> None:
    message = Message("assistant", None, (ToolCall("c1", "f", "{}"),))
    assert message_to_wire(message)["content"] is None
    assert message_to_wire(message, WireCompat(null_content_as_empty=True))["content"] == ""


async def test_streamed_text_reaches_on_text() -> None:
    pieces: list[str] = []
    with FakeServer([text("one two three four")]) as server:
        reply = await complete(server, ModelRequest([Message("user", "hi")], on_text=pieces.append), stream=True)
    assert len(pieces) > 1 and "".join(pieces) == reply.content == "one two three four"


async def test_error_event_inside_a_stream() -> None:
    spec = text("partial answer here", stream_error={"message": "upstream overloaded", "type": "server_error"})
    with (
        FakeServer([spec]) as server,
        pytest.raises(ModelResponseError, match="error event in stream: upstream"),
    ):
        await complete(server, stream=True)


async def test_stream_without_finish_is_an_error() -> None:
    sse = 'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
    script = [raw(sse, headers={"Content-Type": "text/event-stream"})]
    with FakeServer(script) as server, pytest.raises(ModelResponseError, match="before a finish_reason"):
        await complete(server, stream=True)


async def test_401_is_not_retried_and_never_shows_the_key() -> None:
    with FakeServer([raw({"error": {"message": "Incorrect API key"}}, status=401)] * 3) as server:
        with pytest.raises(AuthenticationError) as caught:
            await complete(server)
        assert len(server.requests) == 1
    assert "Incorrect API key" in str(caught.value) and "sk-test-secret" not in str(caught.value)
    assert "sk-test-secret" not in repr(model_for(server))


@pytest.mark.parametrize(
    ("spec", "stream"),
    [
        (raw({"error": {"message": "Incorrect API key provided: sk-test-secret."}}, status=401), False),
        (raw("no such key: sk-test-secret", status=401, headers={"Content-Type": "text/plain"}), False),
        (raw({"error": {"message": "key sk-test-secret is over its quota"}}, status=400), False),
        (text("", stream_error={"message": "key sk-test-secret revoked", "type": "invalid_request_error"}), True),
    ],
    ids=["json_401", "text_401", "json_400", "stream_error"],
)
async def test_a_server_that_echoes_the_key_in_its_error_does_not_put_it_in_ours(spec: Any, stream: bool) -> None:
    """Some OpenAI-compatible servers quote the key they refused. The error's message becomes the run's reason, its
    event and, on a Temporal worker, a payload in the workflow's history: the key is replaced there."""
    with FakeServer([spec]) as server, pytest.raises(ModelHTTPError if not stream else ModelResponseError) as caught:
        await complete(server, stream=True) if stream else await complete(server)
    assert "sk-test-secret" not in str(caught.value)
    assert "[redacted]" in str(caught.value)


async def test_a_key_across_the_end_of_a_shortened_error_leaves_none_of_its_characters() -> None:
    """The message is cut to a few hundred characters; cut first, the key's first characters were left too short
    to look like a key, and were shown."""
    for padding in range(290, 302):
        message = "x" * padding + " sk-TOPSECRETKEYVALUE1234567890"
        with (
            FakeServer([raw({"error": {"message": message}}, status=400)]) as server,
            pytest.raises(ModelHTTPError) as caught,
        ):
            await complete(server)
        assert "TOPSE" not in str(caught.value), padding


async def test_403_is_not_retried() -> None:
    with FakeServer([raw({"error": {"message": "forbidden"}}, status=403)] * 3) as server:
        with pytest.raises(AuthenticationError):
            await complete(server)
        assert len(server.requests) == 1


async def test_429_is_retried_honouring_retry_after() -> None:
    script = [raw({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "0"}), text("ok")]
    with FakeServer(script) as server:
        reply = await complete(server)
        assert len(server.requests) == 2
    assert reply.content == "ok"


async def test_retry_after_longer_than_allowed_gives_up() -> None:
    with FakeServer([raw({"error": {"message": "later"}}, status=429, headers={"Retry-After": "3600"})]) as server:
        with pytest.raises(RateLimited) as caught:
            await complete(server)
        assert len(server.requests) == 1
    assert caught.value.retry_after == 3600


async def test_5xx_is_retried_then_reported() -> None:
    script = [raw({"error": {"message": "boom"}}, status=503, headers={"Retry-After": "0"})] * 3
    with FakeServer(script) as server:
        with pytest.raises(ServerError, match="HTTP 503: boom"):
            await complete(server, max_retries=2)
        assert len(server.requests) == 3


async def test_400_is_not_retried() -> None:
    with FakeServer([raw({"error": {"message": "bad tool schema"}}, status=400)] * 2) as server:
        with pytest.raises(ModelHTTPError, match="HTTP 400: bad tool schema"):
            await complete(server)
        assert len(server.requests) == 1


async def test_read_timeout() -> None:
    with FakeServer([text("late", latency=2.0)]) as server, pytest.raises(ModelTimeout):
        await complete(server, read_timeout=0.2, max_retries=0)


async def test_request_timeout_from_the_run_deadline() -> None:
    with FakeServer([text("late", latency=2.0)]) as server:
        request = ModelRequest([Message("user", "hi")], timeout=0.2)
        with pytest.raises(ModelTimeout, match="deadline"):
            await complete(server, request)


async def test_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = OpenAIChatModel("fake", base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    with pytest.raises(ModelConnectionError, match=f"127.0.0.1:{port}"):
        await model.complete(HELLO)
    await model.aclose()


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("not json at all", "not JSON"),
        ('["a list"]', "not a JSON object"),
        ('{"error": {"message": "quota"}}', "error in response: quota"),
        ('{"choices": [{"index": 0}]}', "no message object"),
        ('{"choices": [{"message": {"content": 5}}]}', "content is a int"),
    ],
)
async def test_malformed_bodies_are_precise_errors(body: str, match: str) -> None:
    with FakeServer([raw(body)]) as server, pytest.raises(ModelResponseError, match=match):
        await complete(server)


async def test_odd_shapes_are_passed_on_for_the_core_to_refuse() -> None:
    body = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {"tool_calls": [{"id": "", "function": {"name": "f", "arguments": {"a": 1}}}]},
            }
        ]
    }
    with FakeServer([raw(body), raw({"choices": []})]) as server:
        odd = await complete(server)
        empty = await complete(server)
    assert odd.tool_calls == (WireToolCall("", "function", "f", {"a": 1}),)
    assert empty.choices == 0


def test_configuration_errors_say_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_MODEL"):
        OpenAIChatModel()
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIChatModel("gpt-4o-mini")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_MODEL", "m")
    model = OpenAIChatModel()
    assert model.base_url == "http://127.0.0.1:9/v1" and model.name == "m"
    assert json.dumps(model.body(HELLO))  # a local server needs no key


@pytest.mark.parametrize(
    "url", ["127.0.0.1:8080/v1", "ftp://h/v1", "http://", "http://h:0x50/v1", "http://h/v1?k=1", "http://u:p@h/v1"]
)
def test_a_malformed_base_url_is_refused_when_the_adapter_is_built(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both HTTP adapters check it at once, naming the setting, rather than as a connection failure in a run."""
    from tether.models.anthropic import AnthropicModel

    with pytest.raises(ConfigurationError, match=r"^base_url .* is not a base URL: "):
        OpenAIChatModel("m", base_url=url, api_key="k")
    with pytest.raises(ConfigurationError, match=r"^base_url .* is not a base URL: "):
        AnthropicModel("m", base_url=url, api_key="k")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    with pytest.raises(ConfigurationError, match=r"^OPENAI_BASE_URL .* is not a base URL: "):
        OpenAIChatModel("m", api_key="k")
    assert OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1/", api_key="k").base_url == "http://127.0.0.1:9/v1"
