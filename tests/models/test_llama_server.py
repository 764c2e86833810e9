"""Against llama.cpp's own OpenAI-compatible server (llama-cpp-python), with the real SmolLM2 model.

A server we did not write: every quirk it showed is a named switch in the
``llama-cpp-python`` provider profile (tether.models.providers), and each
test below shows the raw behaviour first, then tether handling it. The
defaults stay strict.

What the model writes is pinned where it can be: every request samples
greedily with a fixed seed (``PINNED``), so a first step, whose prompt is
the same every run, is the same every run. A later step cannot be pinned:
the server numbers calls from a random completion id, and the id is in the
next prompt. So a test asserts what the gates made of a later reply (its
finish reason, its text), never what the model happened to write in it, and
bounds it with ``ANSWER_TOKENS``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tether import Agent
from tether.core import Budget, Message, ModelHTTPError, ModelResponseError, Status
from tether.models import ModelRequest
from tether.models.local import default_model_path
from tether.models.openai_chat import OpenAIChatModel, WireCompat
from tether.models.providers import LLAMA_CPP_PYTHON
from tether.toolsets import load_toolset

MULTIPLY = {"type": "function", "function": {"name": "multiply"}}
QUESTION = "What is 248 times 15?"
PINNED = {"temperature": 0, "seed": 0}  # greedy: the same prompt gives the same reply, whatever ran before
ANSWER_TOKENS = 48  # a free-text step may ramble: it stops here (truncated), never at the context's end


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = default_model_path()
    assert path is not None, "the local extra is part of the test set-up: pip install -e '.[dev,local]'"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chat_format",
        "chatml-function-calling",
        "--n_ctx",
        "4096",
        "--seed",
        "0",
    ]
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    # A file, not a pipe: llama.cpp logs a lot, and an unread pipe would stall the server.
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("llama_cpp.server did not start within 120 s")
                time.sleep(0.5)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def raw_post(base: str, body: dict[str, Any]) -> tuple[int, str]:
    request = urllib.request.Request(
        f"{base}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=180) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def tools_spec() -> list[dict[str, Any]]:
    return [t.spec() for t in load_toolset("calc")]


def chat(base: str, stream: bool = False, wire: WireCompat = LLAMA_CPP_PYTHON.wire) -> OpenAIChatModel:
    return OpenAIChatModel(
        "smollm2", base_url=base, api_key="x", stream=stream, compat=wire, max_retries=0, extra_body=PINNED
    )


def first_then_answer(step: int) -> Any:
    # Step 1: the model chooses (automatic) or is told to call multiply; step 2: it answers in text.
    return "none" if step > 1 else None


async def run(agent: Agent) -> Any:
    try:
        return await agent.run(QUESTION)
    finally:
        await agent.aclose()


def calls_of(result: Any) -> list[tuple[str, str, bool]]:
    return [(c.tool, c.outcome, c.executed) for s in result.steps for c in s.calls]


def assert_answer_gated(result: Any) -> None:
    """The run ended as the gates must end it on its last reply, whatever text the model wrote in it."""
    last = result.steps[-1]
    assert not last.calls
    if last.finish_reason == "length":  # ANSWER_TOKENS ran out: never an answer
        assert (result.status, result.output) == (Status.TRUNCATED, None), result.reason
    else:
        assert last.finish_reason == "stop", last.finish_reason
        assert (result.status, result.output) == (Status.COMPLETED, last.content), result.reason


async def test_tool_round_trip_not_streaming(server: str) -> None:
    agent = Agent(chat(server), load_toolset("calc"), tool_choice=first_then_answer, max_tokens=ANSWER_TOKENS)
    result = await run(agent)
    assert calls_of(result) == [("multiply", "ok", True)]  # the model's own automatic choice (a pinned step)
    assert json.loads(result.state.messages[2].content or "") == {"ok": True, "result": 3720}
    assert_answer_gated(result)


async def test_tool_round_trip_streaming(server: str) -> None:
    texts: list[str] = []
    agent = Agent(
        chat(server, stream=True),
        load_toolset("calc"),
        tool_choice=lambda step: MULTIPLY if step == 1 else "none",
        max_tokens=ANSWER_TOKENS,
    )
    try:
        result = await agent.run(
            QUESTION, on_event=lambda e: texts.append(e.data["text"]) if e.kind == "text" else None
        )
    finally:
        await agent.aclose()
    assert calls_of(result) == [("multiply", "ok", True)]  # assembled from streamed fragments
    assert "".join(texts) == (result.steps[-1].content or "")  # the reply arrived piece by piece
    assert_answer_gated(result)


async def test_every_turn_of_a_longer_run_is_accepted(server: str) -> None:
    agent = Agent(chat(server), load_toolset("calc"), budget=Budget(max_steps=4))
    result = await run(agent)
    # A 135M model may loop or run out of steps; the server must never refuse the transcript.
    assert result.status not in (Status.MODEL_ERROR, Status.PROTOCOL_ERROR), result.reason
    assert len(result.steps) >= 2
    assert calls_of(result)[0] == ("multiply", "ok", True)


async def test_forced_into_length_ends_truncated_and_executes_nothing(server: str) -> None:
    # Raw: a forced call cut at max_tokens comes back labelled "tool_calls" with broken arguments.
    status, text = raw_post(
        server,
        {
            "messages": [{"role": "user", "content": QUESTION}],
            "tools": tools_spec(),
            "tool_choice": MULTIPLY,
            "max_tokens": 3,
        },
    )
    choice = json.loads(text)["choices"][0]
    assert status == 200 and choice["finish_reason"] == "tool_calls"
    with pytest.raises(ValueError):
        json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])
    # tether: max_tokens_means_length turns it into what it is.
    executed: list[str] = []
    tools = load_toolset("calc")
    agent = Agent(chat(server), tools, tool_choice=MULTIPLY, max_tokens=3, approver=None)
    result = await agent.run(
        QUESTION, on_event=lambda e: executed.append(e.kind) if e.kind == "call_executed" else None
    )
    await agent.aclose()
    assert result.status is Status.TRUNCATED
    assert executed == [] and calls_of(result) == []
    # And a plain reply cut short (no tools) is truncated as the server says.
    plain = Agent(chat(server), [], max_tokens=3)
    assert (await run(plain)).status is Status.TRUNCATED


def test_quirk_null_assistant_content_is_rejected(server: str) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "multiply", "arguments": '{"a": 248, "b": 15}'}}
    history = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true, "result": 3720}'},
    ]
    status, text = raw_post(server, {"messages": history, "max_tokens": 8})
    assert status == 500 and "validation" in text
    history[1]["content"] = ""  # what null_content_as_empty sends
    assert raw_post(server, {"messages": history, "max_tokens": 8})[0] == 200


async def test_quirk_null_content_switch_is_needed(server: str) -> None:
    without = WireCompat(explicit_tool_choice=True, tool_results_as_user=True)  # all but null_content_as_empty
    strict = Agent(chat(server, wire=without), load_toolset("calc"), tool_choice=first_then_answer)
    result = await run(strict)
    assert result.status is Status.MODEL_ERROR and "500" in (result.reason or "")


def test_quirk_tools_ignored_without_tool_choice(server: str) -> None:
    messages = [{"role": "system", "content": "Use a function."}, {"role": "user", "content": QUESTION}]
    _, text = raw_post(server, {"messages": messages, "tools": tools_spec(), "max_tokens": 24})
    body = json.loads(text)
    assert body["usage"]["prompt_tokens"] < 60  # the tool descriptions never reached the prompt
    _, text = raw_post(server, {"messages": messages, "tools": tools_spec(), "tool_choice": "auto"})
    assert json.loads(text)["usage"]["prompt_tokens"] > 150
    assert chat(server).body(ModelRequest([Message("user", QUESTION)], tools_spec()))["tool_choice"] == "auto"
    assert "tool_choice" not in chat(server, wire=WireCompat()).body(ModelRequest([Message("user", "x")], tools_spec()))


async def test_quirk_no_stream_with_automatic_tool_choice(server: str) -> None:
    body = {
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": tools_spec(),
        "tool_choice": "auto",
        "stream": True,
    }
    status, text = raw_post(server, body)
    assert status == 200 and text.strip() == ""  # an empty event stream
    strict_stream = chat(server, stream=True, wire=WireCompat(explicit_tool_choice=True, null_content_as_empty=True))
    with pytest.raises(ModelResponseError, match="before a finish_reason"):
        await strict_stream.complete(ModelRequest([Message("user", QUESTION)], tools_spec()))
    await strict_stream.aclose()
    switched = chat(server, stream=True)
    assert "stream" not in switched.body(ModelRequest([Message("user", QUESTION)], tools_spec()))
    reply = await switched.complete(ModelRequest([Message("user", QUESTION)], tools_spec()))
    await switched.aclose()
    assert reply.finish_reason in ("tool_calls", "stop")


def test_quirk_tool_messages_are_dropped_from_the_prompt(server: str) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "multiply", "arguments": '{"a": 248, "b": 15}'}}

    def prompt_tokens(result_message: dict[str, Any]) -> int:
        messages = [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            result_message,
        ]
        status, text = raw_post(server, {"messages": messages, "max_tokens": 1})
        assert status == 200
        return int(json.loads(text)["usage"]["prompt_tokens"])

    short = prompt_tokens({"role": "tool", "tool_call_id": "c1", "content": "1"})
    long = prompt_tokens({"role": "tool", "tool_call_id": "c1", "content": "3720 " * 50})
    assert short == long  # the result never reached the model
    marked = chat(server).body(ModelRequest([Message("tool", "3720", tool_call_id="c1")]))["messages"][0]
    assert marked["role"] == "user" and "<tool_result" in marked["content"]
    assert prompt_tokens({"role": "user", "content": "3720 " * 50}) > short + 40


async def test_quirk_required_tool_choice_is_a_server_error(server: str) -> None:
    status, _ = raw_post(
        server, {"messages": [{"role": "user", "content": QUESTION}], "tools": tools_spec(), "tool_choice": "required"}
    )
    assert status == 500
    agent = Agent(chat(server), load_toolset("calc"), tool_choice="required")
    result = await run(agent)
    assert result.status is Status.MODEL_ERROR and "HTTP 500" in (result.reason or "")


def test_quirk_max_tokens_ignored_with_automatic_tools(server: str) -> None:
    body = {
        "messages": [{"role": "system", "content": "Use a function."}, {"role": "user", "content": QUESTION}],
        "tools": tools_spec(),
        "tool_choice": "auto",
        "max_tokens": 3,
    }
    status, text = raw_post(server, body)
    reply = json.loads(text)
    assert status == 200 and reply["usage"]["completion_tokens"] > 3
    assert reply["choices"][0]["finish_reason"] != "length"


def test_quirk_json_schema_response_format_is_refused(server: str) -> None:
    """Only {"type": "text" | "json_object"} is accepted (WireCompat.no_json_schema: no native output mode)."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    body = {
        "messages": [{"role": "user", "content": "Give n."}],
        "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
    }
    status, text = raw_post(server, body)
    assert status == 500, text  # a validation error of the request, answered as a server error
    assert "Input should be 'text' or 'json_object'" in text
    assert raw_post(server, {**body, "response_format": {"type": "json_object", "schema": schema}})[0] == 200
    assert LLAMA_CPP_PYTHON.wire.no_json_schema
    assert chat(server).output_modes == ("tool", "prompted")


def test_http_errors_from_the_real_server_are_precise(server: str) -> None:
    status, text = raw_post(server, {"messages": "not a list"})
    assert status in (400, 422, 500) and text
    assert issubclass(ModelHTTPError, Exception)
