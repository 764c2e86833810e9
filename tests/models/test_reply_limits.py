"""A reply's size and nesting are bounded while it is read: huge, endless and deep replies end the run model_error.

The huge and endless replies come from ``Flood``, a server written here on
the project's ``ServerBase``: it writes a body (or an SSE stream) of the
size asked, generated piece by piece so that the test process itself stays
small, and stops when the client hangs up. Memory is measured in a child
process (its peak resident size, from ``getrusage``) against the same
process before the request, as a generous bound.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from tether import Agent, Budget, Status, tool
from tether.core import (
    Message,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeout,
    ReplyTooLarge,
    ServerError,
    ToolCall,
)
from tether.core.envelope import QUOTED_CHARS
from tether.core.machine import MAX_CALLS_PER_REPLY
from tether.core.nesting import MAX_REPLY_DEPTH, NestedTooDeep
from tether.models import ModelRequest
from tether.models.anthropic import AnthropicModel
from tether.models.http import DEFAULT_MAX_REPLY_BYTES, HTTPModel
from tether.models.local_format import FORMATS, native_messages
from tether.models.openai_chat import OpenAIChatModel
from tether.models.openai_responses import OpenAIResponsesModel
from tether.testing import FakeServer, raw, text, tool_calls
from tether.testing.fake_server import ServerBase, send_sse

MiB = 1024 * 1024
PIECE = 64 * 1024  # bytes of text per stream event or body write
HELLO = ModelRequest([Message("user", "hi")])
PROTOCOLS = ["openai", "responses", "anthropic"]


def openai_chunk(text: str, finish_reason: str | None = None) -> str:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish_reason}
    return (
        "data: "
        + json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]})
        + "\n\n"
    )


def anthropic_event(data: dict[str, Any]) -> str:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"


responses_event = anthropic_event  # the same framing: the event's type names it


def stream_pieces(protocol: str, size: int | None, line: int = PIECE) -> Iterator[str]:
    """SSE text of about ``size`` bytes of answer text (None: endless), ``line`` bytes per event."""
    sent = 0
    if protocol == "anthropic":
        yield anthropic_event({"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}})
        yield anthropic_event(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        )
    if protocol == "responses":
        item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
        yield responses_event({"type": "response.output_item.added", "output_index": 0, "item": item})
    while size is None or sent < size:
        piece = "x" * line
        sent += line
        if protocol == "openai":
            yield openai_chunk(piece)
        elif protocol == "responses":
            delta = {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": piece}
            yield responses_event(delta)
        else:
            yield anthropic_event(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
            )
    if protocol == "openai":
        yield openai_chunk("", "stop") + "data: [DONE]\n\n"
    elif protocol == "responses":  # a terminal response without its output: the client assembles it
        yield responses_event({"type": "response.completed", "response": {"status": "completed", "output": []}})
    else:
        yield anthropic_event({"type": "content_block_stop", "index": 0})
        yield anthropic_event(
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}
        )
        yield anthropic_event({"type": "message_stop"})


def body_pieces(protocol: str, size: int) -> Iterator[str]:
    """A non-streamed reply whose answer text is ``size`` bytes, in pieces."""
    if protocol == "openai":
        head, tail = (
            '{"choices": [{"index": 0, "message": {"role": "assistant", "content": "',
            '"}, "finish_reason": "stop"}]}',
        )
    elif protocol == "responses":
        head, tail = (
            '{"status": "completed", "output": [{"type": "message", "content": [{"type": "output_text", "text": "',
            '"}]}]}',
        )
    else:
        head, tail = '{"type": "message", "content": [{"type": "text", "text": "', '"}], "stop_reason": "end_turn"}'
    yield head
    for _ in range(0, size, PIECE):
        yield "x" * PIECE
    yield tail


class Flood(ServerBase):
    """Answers every dialect with a reply of ``size`` bytes of text (None: a stream that never ends)."""

    def __init__(self, size: int | None, *, status: int = 200, line: int = PIECE) -> None:
        super().__init__()
        self.size, self.status, self.line = size, status, line

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/messages", self._handle)
        app.router.add_post("/v1/responses", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        endings = {"/messages": "anthropic", "/responses": "responses"}
        protocol = next((p for end, p in endings.items() if request.path.endswith(end)), "openai")
        if body.get("stream") and self.status == 200:
            pieces = stream_pieces(protocol, self.size, self.line)
            try:
                return await send_sse(request, pieces)
            except ConnectionError:  # the client stopped reading: what the test is about
                return web.Response()
        response = web.StreamResponse(status=self.status, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            for piece in body_pieces(protocol, self.size or 2**40):
                await response.write(piece.encode())
            await response.write_eof()
        except ConnectionError:
            pass
        return response


def model(protocol: str, server: Flood | FakeServer, **options: Any) -> HTTPModel:
    if protocol == "openai":
        return OpenAIChatModel("m", base_url=server.base_url, api_key="k", max_retries=0, **options)
    if protocol == "responses":
        return OpenAIResponsesModel("m", base_url=server.base_url, api_key="k", max_retries=0, **options)
    return AnthropicModel("m", base_url=server.origin, api_key="k", max_retries=0, **options)


def adapter_name(protocol: str) -> str:
    return {"openai": "OpenAIChatModel", "responses": "OpenAIResponsesModel"}.get(protocol, "AnthropicModel")


# ------------------------------------------------------------------ size


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_reply_past_the_cap_ends_the_run_model_error_naming_the_cap(protocol: str, stream: bool) -> None:
    async with Flood(8 * MiB) as server, Agent(model(protocol, server, stream=stream, max_reply_bytes=MiB)) as agent:
        result = await agent.run("hi")

    assert result.status is Status.MODEL_ERROR
    assert result.reason == (
        f"ReplyTooLarge: the reply is larger than max_reply_bytes ({MiB} bytes); if a real reply is that large, "
        f"pass a larger max_reply_bytes to {adapter_name(protocol)}"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_endless_stream_ends_at_the_cap(protocol: str) -> None:
    async with Flood(None) as server:
        adapter = model(protocol, server, stream=True, max_reply_bytes=2 * MiB)
        try:
            with pytest.raises(ReplyTooLarge) as caught:
                await adapter.complete(HELLO)
        finally:
            await adapter.aclose()
    assert caught.value.max_bytes == 2 * MiB
    assert isinstance(caught.value, ModelResponseError) and not caught.value.retryable


class Trickle(ServerBase):
    """A stream that writes an event every ``every`` seconds: after the reply's opening events, only keep-alives
    (an SSE comment, and Anthropic's ``ping`` event) forever; or, with ``events``, that many pieces of text, then
    the reply's end."""

    def __init__(self, every: float, events: int | None = None) -> None:
        super().__init__()
        self.every, self.events = every, events

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def make_app(self) -> web.Application:
        app = web.Application()
        for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
            app.router.add_post(path, self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        endings = {"/messages": "anthropic", "/responses": "responses"}
        protocol = next((p for end, p in endings.items() if request.path.endswith(end)), "openai")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if self.events is None:  # the reply's opening events only
            pieces = stream_pieces(protocol, 0)
            pieces = itertools.islice(pieces, {"anthropic": 2, "responses": 1}.get(protocol, 0))
        else:
            pieces = stream_pieces(protocol, self.events * 8, line=8)
        try:
            for piece in pieces:
                await response.write(piece.encode())
                await asyncio.sleep(self.every)
            while self.events is None:
                await response.write(b": ping\n\n")
                if protocol == "anthropic":
                    await response.write(anthropic_event({"type": "ping"}).encode())
                await asyncio.sleep(self.every)
            await response.write_eof()
        except ConnectionError:  # the client hung up: what the keep-alive test is about
            pass
        return response


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_of_keep_alives_times_out_after_read_timeout(protocol: str) -> None:
    """Keep-alives more often than the read timeout held the run for ever (with no run deadline, the default):
    aiohttp's timeout restarts at any byte, and the reply bound is days of keep-alives away."""
    async with Trickle(every=0.05) as server:
        adapter = model(protocol, server, stream=True, read_timeout=0.5)
        try:
            async with asyncio.timeout(10):  # the code before: no end
                started = asyncio.get_running_loop().time()
                with pytest.raises(ModelTimeout) as caught:
                    await adapter.complete(HELLO)
                waited = asyncio.get_running_loop().time() - started
        finally:
            await adapter.aclose()
    url = server.base_url if protocol != "anthropic" else server.origin
    assert str(caught.value) == (
        f"{url} timed out: the stream sent no event with data for 0.5 s (read_timeout), only keep-alives"
    )
    assert caught.value.retryable and 0.5 <= waited < 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_whose_events_carry_data_is_read_past_read_timeout(protocol: str) -> None:
    """The timeout is between events with data, not on the whole stream: 20 events 0.05 s apart outlast it."""
    async with Trickle(every=0.05, events=20) as server:
        adapter = model(protocol, server, stream=True, read_timeout=0.5)
        try:
            started = asyncio.get_running_loop().time()
            reply = await adapter.complete(HELLO)
            waited = asyncio.get_running_loop().time() - started
        finally:
            await adapter.aclose()
    assert reply.content == "x" * 8 * 20 and waited > 0.5


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_huge_error_body_keeps_its_status(protocol: str) -> None:
    async with Flood(8 * MiB, status=503) as server:
        adapter = model(protocol, server, max_reply_bytes=MiB)
        try:
            with pytest.raises(ServerError) as caught:
                await adapter.complete(HELLO)
        finally:
            await adapter.aclose()
    assert caught.value.status == 503  # still a retryable server error, its body not read past the cap
    assert "larger than max_reply_bytes" in str(caught.value)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_long_line_under_the_cap_is_read_whole(protocol: str) -> None:
    # One SSE event of 3 MB: more than aiohttp's own line limit, well under the cap.
    async with Flood(3 * MiB, line=3 * MiB) as server:
        adapter = model(protocol, server, stream=True)
        try:
            reply = await adapter.complete(HELLO)
        finally:
            await adapter.aclose()
    assert reply.finish_reason == "stop"
    assert reply.content == "x" * 3 * MiB


def test_the_default_cap_is_far_above_the_largest_recorded_reply(
    recorded_openai: Any, recorded_anthropic: Any, recorded_responses: Any
) -> None:
    largest = 0
    for path in (recorded_openai, recorded_anthropic, recorded_responses):
        for line in path.read_text(encoding="utf-8").splitlines():
            interaction = json.loads(line)
            reply = interaction.get("sse") or json.dumps(interaction.get("response"))
            largest = max(largest, len(reply.encode()))
    assert largest * 32 < DEFAULT_MAX_REPLY_BYTES


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_reply_with_more_calls_than_the_bound_runs_none(protocol: str, stream: bool) -> None:
    """Each call costs its own result, events and rows: past ``MAX_CALLS_PER_REPLY`` in one reply the run ends
    protocol_error with none run, even with no tool call budget; at the bound the calls are judged as usual."""
    ran: list[int] = []

    @tool(read_only=True)
    def note(n: int) -> int:
        """Note a number."""
        ran.append(n)
        return n

    def calls(count: int) -> list[tuple[str, str, str]]:
        return [(f"c{n}", "note", json.dumps({"n": n})) for n in range(count)]  # distinct: no loop guard

    script = [tool_calls(calls(MAX_CALLS_PER_REPLY + 1)), tool_calls(calls(MAX_CALLS_PER_REPLY)), text("done")]
    async with FakeServer(script) as server:
        unbounded = Budget(max_tool_calls=None)
        async with Agent(model(protocol, server, stream=stream), tools=[note], budget=unbounded) as agent:
            refused = await agent.run("hi")
            assert ran == []
            read = await agent.run("hi")

    assert refused.status is Status.PROTOCOL_ERROR
    assert refused.reason == (
        f"the reply has {MAX_CALLS_PER_REPLY + 1} tool calls; at most {MAX_CALLS_PER_REPLY} are read"
    )
    assert read.status is Status.COMPLETED and len(ran) == MAX_CALLS_PER_REPLY


# ------------------------------------------------------------------ the reply's text quoted back

# Characters of a name or key: far past what an error quotes (QUOTED_CHARS), and the next request, which holds
# them in the assistant message, still under the fake server's 1 MiB.
LONG = 100_000


async def test_an_error_quotes_at_most_a_bounded_part_of_the_models_text() -> None:
    """The unknown_tool error quoted the model's tool name whole (a 10 MB name: a 10 MB result, stored and sent
    back); argument errors quoted every unexpected key, and a duplicate key, whole."""

    @tool(read_only=True)
    def note(n: int) -> int:
        """Note a number."""
        return n

    extra = {"k" * LONG: 1, **{f"z{i:02}": 1 for i in range(50)}}  # named in sorted order
    duplicate = '{"n": 1, "' + "d" * LONG + '": 1, "' + "d" * LONG + '": 2}'
    calls = [("c1", "x" * LONG, "{}"), ("c2", "note", json.dumps({"n": 1, **extra})), ("c3", "note", duplicate)]
    server = FakeServer([tool_calls(calls), text("done")])
    async with server, Agent(model("openai", server), tools=[note]) as agent:
        result = await agent.run("hi")
    assert result.status is Status.COMPLETED
    sent = {m["tool_call_id"]: json.loads(m["content"]) for m in server.requests[1]["messages"] if m["role"] == "tool"}
    errors = {call: (got["error"]["code"], got["error"]["message"]) for call, got in sent.items()}
    extras = ", ".join(repr(f"z{i:02}") for i in range(9))
    assert errors == {
        "c1": ("unknown_tool", f"no tool named {'x' * QUOTED_CHARS!r}…; available: note"),
        "c2": ("invalid_arguments", f"arguments: unexpected field(s) {'k' * QUOTED_CHARS!r}…, {extras} and 41 more"),
        "c3": ("invalid_json", f"duplicate key {'d' * QUOTED_CHARS!r}…"),
    }


async def test_a_reply_error_quotes_at_most_a_bounded_part_of_a_call_id() -> None:
    twice = [("i" * LONG, "note", "{}"), ("i" * LONG, "note", "{}")]
    async with FakeServer([tool_calls(twice)]) as server, Agent(model("openai", server)) as agent:
        result = await agent.run("hi")
    assert result.status is Status.PROTOCOL_ERROR
    assert result.reason == f"tool call id {'i' * QUOTED_CHARS!r}… appears twice in one reply"


# ------------------------------------------------------------------ memory

MEASURE = """
import asyncio, json, resource, sys
from tether.models import ModelRequest
from tether.core import Message, ModelError
from tether.models.anthropic import AnthropicModel
from tether.models.openai_chat import OpenAIChatModel
from tether.models.openai_responses import OpenAIResponsesModel

protocol, url, stream = sys.argv[1], sys.argv[2], sys.argv[3] == "stream"

async def main():
    if protocol == "openai":
        model = OpenAIChatModel("m", base_url=url + "/v1", api_key="k", max_retries=0, stream=stream)
    elif protocol == "responses":
        model = OpenAIResponsesModel("m", base_url=url + "/v1", api_key="k", max_retries=0, stream=stream)
    else:
        model = AnthropicModel("m", base_url=url, api_key="k", max_retries=0, stream=stream)
    request = ModelRequest([Message("user", "hi")])
    try:
        await model.complete(request)  # a small reply first: the client and its buffers exist before measuring
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            await model.complete(request)
            error = None
        except ModelError as exc:
            error = f"{type(exc).__name__}: {exc}"
    finally:
        await model.aclose()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"grew_mib": (after - before) / 1024, "error": error}))

asyncio.run(main())
"""


class Warmup(Flood):
    """The first request gets a small reply (so the measuring client is warm), every later one ``size`` bytes."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.big, self.served = size, 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.size = 1024 if self.served == 0 else self.big
        self.served += 1
        return await super()._handle(request)


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_memory_stays_bounded_by_the_default_cap(protocol: str, stream: bool) -> None:
    """160 MB sent: the client stops at the 32 MiB default; it grows by about that, not by what was sent."""
    with Warmup(160 * MiB) as server:
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, protocol, server.origin, "stream" if stream else "body"],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    assert measured["error"] is not None and "larger than max_reply_bytes (33554432 bytes)" in measured["error"]
    assert measured["grew_mib"] < 3 * DEFAULT_MAX_REPLY_BYTES / MiB, measured


# ------------------------------------------------------------------ nesting


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("levels", [MAX_REPLY_DEPTH + 1, 100_000])
async def test_a_reply_nested_too_deep_ends_the_run_model_error(protocol: str, stream: bool, levels: int) -> None:
    if protocol == "openai":
        body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
        event = 'data: {"choices": [{"index": 0, "delta": {"content": "hi"}, "x": ' + deep(levels) + "}]}\n\n"
    elif protocol == "responses":
        part = {"type": "output_text", "text": "hi"}
        body = {"status": "completed", "output": [{"type": "message", "content": [part]}]}
        event = 'event: response.created\ndata: {"type": "response.created", "x": ' + deep(levels) + "}\n\n"
    else:
        body = {"type": "message", "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}
        event = (
            'event: ping\ndata: {}\n\nevent: message_start\ndata: {"type": "message_start", "x": '
            + deep(levels)
            + "}\n\n"
        )
    text = json.dumps(body)[:-1] + ', "x": ' + deep(levels) + "}"
    spec = raw(event, headers={"Content-Type": "text/event-stream"}) if stream else raw(text)
    async with FakeServer([spec]) as server, Agent(model(protocol, server, stream=stream)) as agent:
        result = await agent.run("hi")

    assert result.status is Status.MODEL_ERROR
    what = "stream event" if stream else "response body"
    assert result.reason == f"ModelResponseError: {what} is nested more than {MAX_REPLY_DEPTH} levels deep"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_error_body_nested_too_deep_is_still_the_http_error(protocol: str) -> None:
    async with FakeServer([raw('{"error": ' + deep(100_000) + "}", status=400)]) as server:
        adapter = model(protocol, server)
        try:
            with pytest.raises(ModelHTTPError) as caught:
                await adapter.complete(HELLO)
        finally:
            await adapter.aclose()
    assert str(caught.value).startswith("HTTP 400: {")


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_a_local_model_call_nested_too_deep_is_unreadable_not_a_crash(family: str) -> None:
    fmt = FORMATS[family]
    item = '{"name": "multiply", "' + fmt.arguments_key + '": {"a": ' + deep(100_000) + "}}"
    written = {
        "hermes": f"<tool_call>\n{item}\n</tool_call>",
        "llama3": item,
        "mistral": f"[TOOL_CALLS][{item}]",
        "tether": "functions.multiply:\n" + '{"a": ' + deep(100_000) + "}",
    }[family]
    with pytest.raises(NestedTooDeep):  # a ValueError: the local adapter's "unreadable tool call"
        fmt.parse(written)


def test_a_local_model_history_with_deep_arguments_still_renders() -> None:
    call = ToolCall("c1", "multiply", '{"a": ' + deep(100_000) + "}")
    messages = [Message("user", "hi"), Message("assistant", None, (call,)), Message("tool", "{}", tool_call_id="c1")]
    (_, assistant, _) = native_messages(messages)
    assert assistant["tool_calls"][0]["function"]["arguments"] == {}
