"""The Responses API adapter over real HTTP against the fake server's ``/v1/responses``."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tether import Agent, Status
from tether.core import (
    AuthenticationError,
    Begin,
    ConfigurationError,
    Message,
    ModelReplied,
    ModelResponseError,
    Run,
    ServerError,
    ToolCall,
    Usage,
    WireToolCall,
)
from tether.core.messages import ModelReply
from tether.models import ModelRequest
from tether.models.openai_responses import OpenAIResponsesModel, messages_to_wire, tool_to_wire
from tether.testing import FakeServer, raw, text, tool_calls
from tether.testing.responses_wire import events_of, sse
from tether.tools import Toolbox, tool, tool_from_schema

HELLO = ModelRequest([Message("user", "hi")])
CALLS = [("call_1", "multiply", '{"a": 248, "b": 15}'), ("call_2", "note", '{"text": "x × y \\"q\\""}')]
SSE = {"Content-Type": "text/event-stream"}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}],
             "encrypted_content": "gAAAA-opaque"}  # fmt: skip


def model_for(server: FakeServer, name: str = "gpt-fake", **options: Any) -> OpenAIResponsesModel:
    options.setdefault("max_retries", 0)
    return OpenAIResponsesModel(name, base_url=server.base_url, api_key="sk-secret", **options)


async def complete(server: FakeServer, request: ModelRequest = HELLO, **options: Any) -> ModelReply:
    model = model_for(server, **options)
    try:
        return await model.complete(request)
    finally:
        await model.aclose()


def judged(reply: ModelReply) -> str:
    """The status the run state machine gives this reply, with multiply and note as tools."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    note = {"type": "object", "properties": {"text": {"type": "string"}}}
    box = Toolbox([tool_from_schema("multiply", schema, lambda **a: a), tool_from_schema("note", note, lambda **a: a)])
    run = Run.new("r", [Message("user", "hi")], box)
    run.send(Begin(0.0))
    run.send(ModelReplied(reply, 1.0))
    return run.status.value


def response(*output: dict[str, Any], status: str = "completed", **fields: Any) -> dict[str, Any]:
    return {"object": "response", "status": status, "model": "gpt-fake", "output": list(output), **fields}


def message(*parts: dict[str, Any], ident: str = "msg_1", **fields: Any) -> dict[str, Any]:
    return {"type": "message", "id": ident, "role": "assistant", "status": "completed", "content": list(parts),
            **fields}  # fmt: skip


def output_text(value: str) -> dict[str, Any]:
    return {"type": "output_text", "text": value, "annotations": []}


def call(call_id: str, name: str, arguments: str, ident: str = "fc_1") -> dict[str, Any]:
    return {"type": "function_call", "id": ident, "call_id": call_id, "name": name, "arguments": arguments,
            "status": "completed"}  # fmt: skip


@pytest.mark.parametrize(
    "spec",
    [
        text("Hello there, how can I help?"),
        tool_calls(CALLS),
        tool_calls(CALLS, content="Let me compute."),
        text("cut", finish_reason="length"),
        tool_calls(CALLS[:1], finish_reason="length"),
        text("no", finish_reason="content_filter"),
        tool_calls([("call_3", "f", "")]),
        tool_calls([("call_4", "multiply", '{"a": 6, "a": 7, "b": 1}')]),
        tool_calls([("call_5", "multiply", '{"a": NaN, "b": 1}')]),
        tool_calls([("call_6", "multiply", '{"a": 2')]),
    ],
)
async def test_streamed_and_plain_replies_are_equal(spec: Any) -> None:
    with FakeServer([spec, spec]) as server:
        plain = await complete(server)
        streamed = await complete(server, stream=True)
        assert "stream" not in server.requests[0] and server.requests[1]["stream"] is True
    assert streamed == plain
    assert plain.usage == Usage(10, 5) and plain.model == "gpt-fake"
    assert [c.arguments for c in plain.tool_calls] == [a for _, _, a in spec.tool_calls]  # byte for byte


async def test_function_calls_are_calls_and_statuses_are_mapped() -> None:
    script = [tool_calls(CALLS), text("no", finish_reason="content_filter"), text("cut", finish_reason="length"),
              text("4")]  # fmt: skip
    with FakeServer(script) as server:
        calls, refused, cut, answer = [await complete(server) for _ in range(4)]
    assert calls.finish_reason == "tool_calls" and calls.content is None
    assert calls.tool_calls == tuple(WireToolCall(i, "function", n, a) for i, n, a in CALLS)
    assert judged(calls) == "awaiting_tools"
    assert (refused.finish_reason, judged(refused)) == ("content_filter", "content_filtered")
    assert (cut.finish_reason, judged(cut)) == ("length", "truncated")
    assert (answer.finish_reason, answer.content, judged(answer)) == ("stop", "4", "completed")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_cut_at_max_output_tokens_never_runs(stream: bool) -> None:
    ran: list[int] = []

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply."""
        ran.append(a)
        return a * b

    cut = tool_calls([("call_1", "multiply", '{"a": 2, "b": 3}')], finish_reason="length")
    with FakeServer([cut]) as server:
        async with Agent(model_for(server, stream=stream), [multiply]) as agent:
            result = await agent.run("hi")
    assert result.status is Status.TRUNCATED and ran == []


@pytest.mark.parametrize("stream", [False, True])
async def test_a_refusal_part_is_a_content_filter_whatever_else_the_reply_holds(stream: bool) -> None:
    body = response(message({"type": "refusal", "refusal": "I can't help with that."}), call("c1", "note", "{}"))
    with FakeServer([raw(sse_or_json(body, stream), headers=SSE if stream else {})]) as server:
        reply = await complete(server, stream=stream)
    assert (reply.finish_reason, judged(reply)) == ("content_filter", "content_filtered")


def sse_or_json(body: dict[str, Any], stream: bool) -> str:
    return "".join(sse(events_of(body))) if stream else json.dumps(body)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("body", "match"),
    [
        (response(status="incomplete", incomplete_details={"reason": "new"}), r"incomplete \(new\)"),
        (response(status="incomplete"), r"incomplete \(no reason given\)"),
        (response(status="failed", error={"code": "server_error", "message": "The model failed."}),
         "the response failed: server_error: The model failed."),
        (response(status="queued"), "queued \\(background mode\\)"),
        (response(status="cancelled"), "cancelled"),
        (response(status="complete"), "unknown response status 'complete'"),
        (response({"type": "web_search_call", "id": "ws_1", "status": "completed"}, message(output_text("x"))),
         "the reply holds a 'web_search_call' item: built-in tools are not supported"),
        (response({"type": "code_interpreter_call", "id": "ci_1"}), "'code_interpreter_call' item"),
        (response({"id": "x"}), "an output item has no type"),
    ],
)  # fmt: skip
async def test_replies_that_are_no_usable_reply_are_precise_errors(body: Any, match: str, stream: bool) -> None:
    spec = raw(sse_or_json(body, stream), headers=SSE if stream else {})
    with FakeServer([spec]) as server, pytest.raises(ModelResponseError, match=match):
        await complete(server, stream=stream)


async def test_a_hosted_tool_item_ends_the_run_model_error_naming_it() -> None:
    body = response({"type": "file_search_call", "id": "fs_1", "queries": ["x"]}, message(output_text("found")))
    with FakeServer([raw(body)]) as server:
        async with Agent(model_for(server)) as agent:
            result = await agent.run("hi")
    assert result.status is Status.MODEL_ERROR and "'file_search_call' item" in (result.reason or "")


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("not json at all", "not JSON"),
        ('["a list"]', "not a JSON object"),
        ('{"error": {"code": "quota", "message": "out of quota"}}', "the response failed: quota: out of quota"),
        ('{"status": "completed"}', "no output list"),
        ('{"status": "completed", "output": ["x"]}', "not an object"),
        ('{"status": "completed", "output": [{"type": "message", "content": "x"}]}', "content is not a list"),
        ("[" * 200 + "]" * 200, "nested more than 128 levels deep"),
    ],
)
async def test_malformed_bodies_are_precise_errors(body: str, match: str) -> None:
    with FakeServer([raw(body)]) as server, pytest.raises(ModelResponseError, match=match):
        await complete(server)


async def test_stream_errors_are_precise() -> None:
    spec = text("partial answer here", stream_error={"code": "rate_limit_exceeded", "message": "Slow down"})
    with FakeServer([spec]) as server, pytest.raises(ModelResponseError, match="rate_limit_exceeded: Slow down"):
        await complete(server, stream=True)
    unfinished = "".join(sse(events_of(response(message(output_text("hi")))))[:-1])
    ended = "ended before response.completed"
    with FakeServer([raw(unfinished, headers=SSE)]) as server, pytest.raises(ModelResponseError, match=ended):
        await complete(server, stream=True)
    nested = 'data: {"type": "error", "error": {"code": "overloaded", "message": "Busy"}}\n\n'
    with FakeServer([raw(nested, headers=SSE)]) as server, pytest.raises(ModelResponseError, match="overloaded: Busy"):
        await complete(server, stream=True)


async def test_streamed_deltas_reach_on_text_and_on_tool_delta() -> None:
    pieces: list[str] = []
    deltas: list[tuple[int, str | None, str | None, str]] = []
    request = ModelRequest(HELLO.messages, on_text=pieces.append, on_tool_delta=lambda *d: deltas.append(d))
    body = response(REASONING, message(output_text("Let me compute.")), call("c1", "multiply", '{"a": 248, "b": 15}'),
                    call("c2", "note", '{"text": "x"}', ident="fc_2"), usage={"input_tokens": 7, "output_tokens": 30,
                    "output_tokens_details": {"reasoning_tokens": 20}})  # fmt: skip
    with FakeServer([raw("".join(sse(events_of(body))), headers=SSE)]) as server:
        reply = await complete(server, request, stream=True)
    assert "".join(pieces) == reply.content == "Let me compute." and len(pieces) > 1
    assert [d[:3] for d in deltas if d[1] is not None] == [(0, "c1", "multiply"), (1, "c2", "note")]
    for index, c in enumerate(reply.tool_calls):
        assert "".join(d[3] for d in deltas if d[0] == index) == c.arguments
    assert reply.usage == Usage(7, 30)  # reasoning tokens are output tokens


async def test_a_stream_without_event_lines_ending_in_done_reads_the_same() -> None:
    """OpenRouter's form: ``data:`` lines only, ``[DONE]`` after the terminal event, items done out of order."""
    body = response(REASONING, message(output_text("4")))
    events = events_of(body)
    done = [e for e in events if e["type"] == "response.output_item.done"]
    others = [e for e in events if e["type"] != "response.output_item.done"]
    stream = "".join(f"data: {json.dumps(e)}\n\n" for e in [*others[:-1], *reversed(done), others[-1]])
    with FakeServer([raw(stream + "data: [DONE]\n\n", headers=SSE), raw(body)]) as server:
        streamed, plain = await complete(server, stream=True), await complete(server)
    assert streamed == plain and plain.content == "4"


async def test_the_request_carries_instructions_history_results_tools_and_options() -> None:
    tools = [
        {"type": "function", "function": {"name": "multiply", "description": "a*b", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {},
                                                                       "additionalProperties": False}, "strict": True}},
    ]  # fmt: skip
    history = [
        Message("system", "Be brief."),
        Message("system", "Use tools."),
        Message("user", "248*15 and 2*3?"),
        Message("assistant", "Computing.", (ToolCall("c1", "multiply", '{"a":248,"b":15}'), ToolCall("c2", "x", "{"))),
        Message("tool", '{"ok": true, "result": 3720}', tool_call_id="c1"),
        Message("tool", '{"ok": false, "error": {"code": "unknown_tool"}}', tool_call_id="c2"),
        Message("system", "Answer now."),
    ]
    native = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True}}
    named = {"type": "function", "function": {"name": "multiply"}}
    with FakeServer([text("3720")] * 2) as server:
        await complete(server, ModelRequest(history, tools))
        await complete(server, ModelRequest(history, tools, max_tokens=50, tool_choice=named, response_format=native))
        first, second = server.requests
        headers = server.headers[0]
    assert first["model"] == "gpt-fake" and first["instructions"] == "Be brief.\n\nUse tools."
    assert first["input"] == [
        {"role": "user", "content": "248*15 and 2*3?"},
        {"role": "assistant", "content": "Computing."},
        {"type": "function_call", "call_id": "c1", "name": "multiply", "arguments": '{"a":248,"b":15}'},
        {"type": "function_call", "call_id": "c2", "name": "x", "arguments": "{"},  # as written
        {"type": "function_call_output", "call_id": "c1", "output": '{"ok": true, "result": 3720}'},
        {"type": "function_call_output", "call_id": "c2", "output": '{"ok": false, "error": {"code": "unknown_tool"}}'},
        {"role": "system", "content": "Answer now."},  # a later system message stays in its place
    ]
    assert first["tools"] == [
        {"type": "function", "name": "multiply", "description": "a*b", "parameters": {"type": "object"},
         "strict": False},  # the API's default is strict: a tool's own schema must say it is not
        {"type": "function", "name": "f", "parameters": tools[1]["function"]["parameters"], "strict": True},
    ]  # fmt: skip
    for key in ("tool_choice", "max_output_tokens", "text", "include", "stream"):
        assert key not in first
    assert second["tool_choice"] == {"type": "function", "name": "multiply"}
    assert second["max_output_tokens"] == 50
    assert second["text"] == {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"},
                                         "strict": True}}  # fmt: skip
    assert headers["Authorization"] == "Bearer sk-secret"


def test_tool_choice_strings_and_shapes_translate() -> None:
    model = OpenAIResponsesModel("gpt-4.1", base_url="http://127.0.0.1:9/v1")
    for choice in ("auto", "required", "none"):
        assert model.body(ModelRequest(HELLO.messages, tool_choice=choice))["tool_choice"] == choice
    native = {"type": "function", "name": "f", "parameters": {}, "strict": False}
    assert tool_to_wire(native) is native  # already in the Responses shape
    assert model.body(ModelRequest(HELLO.messages, stream=True))["stream"] is True


def test_encrypted_reasoning_is_asked_for_reasoning_models_only() -> None:
    def include(name: str, **options: Any) -> Any:
        return OpenAIResponsesModel(name, base_url="http://127.0.0.1:9/v1", **options).body(HELLO).get("include")

    for name in ("gpt-5", "gpt-5-mini", "o3-mini", "o4-mini", "openai/gpt-5.6-sol", "openai.gpt-5.5"):
        assert include(name) == ["reasoning.encrypted_content"], name
    for name in ("gpt-4o", "gpt-4.1-nano", "deepseek-v4-flash", "openai/gpt-oss-20b", "computer-use-preview"):
        assert include(name) is None, name
    assert include("gpt-4o", encrypted_reasoning=True) == ["reasoning.encrypted_content"]
    assert include("gpt-5", encrypted_reasoning=False) is None
    extra = {"include": ["message.output_text.logprobs"]}
    assert include("gpt-5", extra_body=extra) == ["message.output_text.logprobs", "reasoning.encrypted_content"]


@pytest.mark.parametrize("stream", [False, True])
async def test_reasoning_items_go_back_on_the_next_request_and_through_the_store(stream: bool, tmp_path: Any) -> None:
    from tether import SQLiteStore

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply."""
        return a * b

    first = response(REASONING, message(output_text("Computing."), phase="commentary"),
                     call("c1", "multiply", '{"a": 6, "b": 7}'))  # fmt: skip
    second = response({**REASONING, "id": "rs_2"}, message(output_text("42"), ident="msg_2"))
    script = [raw(sse_or_json(b, stream), headers=SSE if stream else {}) for b in (first, second, second)]
    with FakeServer(script) as server:
        store = SQLiteStore(tmp_path / "runs.db")
        async with Agent(model_for(server, "gpt-5", stream=stream), [multiply], store=store) as agent:
            conversation = agent.conversation()
            result = await conversation.send("6 times 7?")
        # The next turn by another agent, as in another process: the history comes from the store.
        async with Agent(model_for(server, "gpt-5", stream=stream), [multiply], store=store) as agent:
            later = await agent.conversation(conversation.id).send("And again?")
        sent = server.requests
    assert result.status is later.status is Status.COMPLETED and result.output == "42"
    assert sent[0]["include"] == ["reasoning.encrypted_content"]
    # The reasoning item, then the very items that followed it, ids included; then the call's result.
    result_item = {"type": "function_call_output", "call_id": "c1", "output": '{"ok": true, "result": 42}'}
    asked, again = {"role": "user", "content": "6 times 7?"}, {"role": "user", "content": "And again?"}
    assert sent[1]["input"] == [asked, *first["output"], result_item]
    assert sent[2]["input"] == [asked, *first["output"], result_item, *second["output"], again]
    assert store.verify(result.run_id) == [] and store.verify(later.run_id) == []
    loaded = store.load(result.run_id).state.messages
    assert loaded == result.state.messages and loaded[1].provider_data is not None


async def test_reasoning_goes_back_only_with_the_message_as_it_was_written() -> None:
    """An edited message, or one for another model or endpoint, goes back as plain items without reasoning."""
    body = response(REASONING, message(output_text("The answer "), output_text("is 42.")), call("c1", "f", "{}"),
                    {**REASONING, "id": "rs_9"})  # fmt: skip
    with FakeServer([raw(body)]) as server:
        reply = await complete(server)
        origin = {"base_url": server.base_url, "model": "gpt-fake"}
    kept = Message("assistant", reply.content, (ToolCall("c1", "f", "{}"),), provider_data=reply.provider_data)
    _, sent = messages_to_wire([kept], origin)
    assert sent == body["output"][:-1]  # the trailing reasoning item has no item after it to go with
    plain = [{"role": "assistant", "content": "The answer is 42."},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]  # fmt: skip
    edits = [
        Message("assistant", "The answer is 41.", kept.tool_calls, provider_data=reply.provider_data),
        Message("assistant", "The answer is 42.", (ToolCall("c9", "f", "{}"),), provider_data=reply.provider_data),
    ]
    for edited in edits:
        assert [i.get("type") for i in messages_to_wire([edited], origin)[1]] == [None, "function_call"]
    fewer = Message("assistant", reply.content, (), provider_data=reply.provider_data)
    assert messages_to_wire([fewer], origin)[1] == plain[:1]
    assert messages_to_wire([kept], {**origin, "model": "gpt-other"})[1] == plain
    assert messages_to_wire([kept], {**origin, "base_url": "http://elsewhere/v1"})[1] == plain


@pytest.mark.parametrize("stream", [False, True])
async def test_a_reply_of_reasoning_alone_keeps_it_for_nothing_to_follow(stream: bool) -> None:
    body = response(REASONING)
    with FakeServer([raw(sse_or_json(body, stream), headers=SSE if stream else {})]) as server:
        reply = await complete(server, stream=stream)
        origin = {"base_url": server.base_url, "model": "gpt-fake"}
    assert (reply.content, reply.finish_reason, judged(reply)) == (None, "stop", "completed")
    kept = Message("assistant", None, provider_data=reply.provider_data)
    assert messages_to_wire([kept], origin)[1] == []


async def test_401_is_not_retried_names_the_variable_and_never_shows_the_key() -> None:
    refusal = raw({"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}, status=401)
    with FakeServer([refusal] * 3) as server:
        with pytest.raises(AuthenticationError) as caught:
            await complete(server)
        assert len(server.requests) == 1
    assert "Incorrect API key" in str(caught.value) and "OPENAI_API_KEY" in str(caught.value)
    assert "sk-secret" not in str(caught.value) + repr(model_for(server))


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_429_and_5xx_are_retried_then_give_up_with_the_precise_error(status: int) -> None:
    error = raw({"error": {"message": "Busy"}}, status=status, headers={"retry-after": "0"})
    with FakeServer([error, text("ok")]) as server:
        reply = await complete(server, max_retries=1)
        assert len(server.requests) == 2
    assert reply.content == "ok"
    if status >= 500:
        with FakeServer([error] * 3) as server, pytest.raises(ServerError, match=f"HTTP {status}: Busy"):
            await complete(server, max_retries=2)


def test_configuration_errors_say_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_MODEL"):
        OpenAIResponsesModel()
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIResponsesModel("gpt-5")
    with pytest.raises(ConfigurationError, match="not a base URL"):
        OpenAIResponsesModel("gpt-5", base_url="localhost:8080")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/")
    monkeypatch.setenv("OPENAI_MODEL", "m")
    model = OpenAIResponsesModel()
    assert model.base_url == "http://127.0.0.1:9/v1" and model.name == "m"
    assert model._url == "http://127.0.0.1:9/v1/responses"
    assert model.strict_tools is False  # only OpenAI's own endpoint is known to enforce strict mode
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIResponsesModel("m", api_key="k").strict_tools is True


def test_import_tether_stays_light_and_exports_the_adapter_lazily() -> None:
    code = (
        "import sys, tether\n"
        "light = not {'aiohttp', 'tether.models.openai_responses', 'tether.models.http'} & set(sys.modules)\n"
        "from tether import OpenAIResponsesModel\n"
        "print(light, OpenAIResponsesModel.__module__, 'OpenAIResponsesModel' in tether.__all__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "tether.models.openai_responses", "True"]
