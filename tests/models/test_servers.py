"""The test servers themselves, checked over real HTTP with aiohttp as the client."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import tether.testing
from tether.testing import SCENARIOS, FakeServer, ReplayServer, raw, text, tool_calls

FIXTURE = Path(__file__).parents[2].parent / "shared/fixtures/recorded/openai_chat.jsonl"
USER = [{"role": "user", "content": "What is 248 times 15?"}]
CALLS = [("call_1", "multiply", '{"a":248,"b":15}'), ("call_2", "lookup", '{"query": "ünïcode \\"q\\""}')]


async def post(base_url: str, **body: Any) -> tuple[int, aiohttp.ClientResponse, str]:
    url, payload = f"{base_url}/chat/completions", {"model": "m", **body}
    async with aiohttp.ClientSession() as session, session.post(url, json=payload) as resp:
        return resp.status, resp, await resp.text()


def data_events(sse: str) -> list[str]:
    return [line.removeprefix("data: ") for line in sse.split("\n") if line.startswith("data: ")]


def assemble(events: list[str]) -> dict[int, dict[str, str]]:
    """Tool calls from stream fragments, joined by index as an adapter must."""
    calls: dict[int, dict[str, str]] = {}
    for event in events:
        if event == "[DONE]":
            continue
        for choice in json.loads(event).get("choices", []):
            for frag in choice["delta"].get("tool_calls", []):
                call = calls.setdefault(frag["index"], {"id": "", "name": "", "arguments": ""})
                call["id"] += frag.get("id", "")
                call["name"] += frag.get("function", {}).get("name", "")
                call["arguments"] += frag["function"]["arguments"]
    return calls


def test_exported_surface() -> None:
    exported = {"FakeServer", "ReplayServer", "SCENARIOS", "Reply", "Raw", "ReplySpec", "Responder"}
    assert set(tether.testing.__all__) == exported | {"text", "tool_calls", "raw"}
    for name in tether.testing.__all__:
        assert getattr(tether.testing, name) is not None
    with pytest.raises(AttributeError):
        _ = tether.testing.nope


async def test_script_served_in_order_then_exhaustion_is_500() -> None:
    with FakeServer(script=[text("one", usage=(7, 3)), text("two", finish_reason="length")]) as server:
        status, _, body = await post(server.base_url, messages=USER)
        first = json.loads(body)
        assert status == 200 and first["object"] == "chat.completion"
        assert first["choices"][0]["message"] == {"role": "assistant", "content": "one"}
        assert first["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        _, _, body = await post(server.base_url, messages=[*USER, {"role": "user", "content": "again"}])
        assert json.loads(body)["choices"][0]["finish_reason"] == "length"
        status, _, body = await post(server.base_url, messages=USER)
        assert status == 500
        assert "script exhausted: request 3 arrived, 2 were scripted" in json.loads(body)["error"]["message"]
        assert [len(r["messages"]) for r in server.requests] == [1, 2, 1]


async def test_streamed_tool_call_fragments_reassemble_to_the_non_streamed_arguments() -> None:
    spec = tool_calls(CALLS, usage=(20, 9))
    async with FakeServer(script=[spec, spec]) as server:  # on the test's own loop
        _, _, body = await post(server.base_url, messages=USER)
        message = json.loads(body)["choices"][0]["message"]
        status, resp, sse = await post(
            server.base_url, messages=USER, stream=True, stream_options={"include_usage": True}
        )
    assert status == 200 and resp.content_type == "text/event-stream"
    events = data_events(sse)
    assert events[-1] == "[DONE]" and sse.endswith("data: [DONE]\n\n")
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1] == {**chunks[-1], "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 9,
                                                                 "total_tokens": 29}}  # fmt: skip
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    frags = [f for c in chunks for ch in c["choices"] for f in ch["delta"].get("tool_calls", [])]
    later = [f for f in frags if "id" not in f]
    assert len(later) > len(CALLS)  # arguments really arrive in several pieces
    assert all(set(f) == {"index", "function"} and set(f["function"]) == {"arguments"} for f in later)
    whole = {i: {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for i, c in enumerate(message["tool_calls"])}  # fmt: skip
    assert assemble(events) == whole
    assert [(c["id"], c["name"], c["arguments"]) for c in whole.values()] == CALLS


async def test_streamed_text_and_usage_only_when_asked() -> None:
    with FakeServer(script=[text("The answer is 3720.")]) as server:
        _, _, sse = await post(server.base_url, messages=USER, stream=True)
    chunks = [json.loads(e) for e in data_events(sse)[:-1]]
    pieces = [c["choices"][0]["delta"].get("content") or "" for c in chunks]
    assert "".join(pieces) == "The answer is 3720." and len([p for p in pieces if p]) > 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks)


async def test_stream_error_arrives_mid_stream_and_ends_it() -> None:
    error = {"message": "overloaded", "type": "server_error", "code": None}
    with FakeServer(script=[text("partial answer here", stream_error=error)]) as server:
        status, _, sse = await post(server.base_url, messages=USER, stream=True)
    events = data_events(sse)
    assert status == 200 and json.loads(events[-1]) == {"error": error}
    assert "[DONE]" not in events
    assert any(json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-1])


async def test_latency_is_applied_without_blocking_other_requests() -> None:
    with FakeServer(script=lambda _: text("ok"), latency=0.2) as server:
        start = time.perf_counter()
        await post(server.base_url, messages=USER)
        assert time.perf_counter() - start >= 0.2
        start = time.perf_counter()
        await asyncio.gather(*(post(server.base_url, messages=USER) for _ in range(20)))
        assert time.perf_counter() - start < 2.0  # 20 × 0.2 s if the sleeps were serialized
    with FakeServer(script=[text("slow", latency=0.3)]) as server:
        start = time.perf_counter()
        await post(server.base_url, messages=USER, stream=True)
        assert time.perf_counter() - start >= 0.3


async def test_multiply_scenario_two_step_conversation() -> None:
    async with FakeServer(script=SCENARIOS["multiply"]) as server:
        _, _, body = await post(server.base_url, messages=USER)
        first = json.loads(body)["choices"][0]
        _, _, again = await post(server.base_url, messages=USER)
        call = first["message"]["tool_calls"][0]
        assert first["finish_reason"] == "tool_calls" and call["function"]["name"] == "multiply"
        assert json.loads(call["function"]["arguments"]) == {"a": 248, "b": 15}
        assert json.loads(again)["choices"][0]["message"]["tool_calls"][0]["id"] != call["id"]
        history = [
            *USER,
            first["message"],
            {"role": "tool", "tool_call_id": call["id"], "content": '{"ok": true, "result": 3720}'},
        ]
        _, _, body = await post(server.base_url, messages=history)
        final = json.loads(body)["choices"][0]
    assert final["finish_reason"] == "stop" and final["message"]["content"] == "248 × 15 = 3720"


async def test_raw_replies_carry_status_headers_and_malformed_bodies() -> None:
    script = [
        raw(
            {"error": {"message": "slow down", "type": "rate_limit"}},
            status=429,
            headers={"Retry-After": "2"},
        ),
        raw("{not json", status=500),
        raw({"error": {"message": "bad key"}}, status=401),
        raw("data: {broken\n\n", headers={"Content-Type": "text/event-stream"}),
    ]
    with FakeServer(script=script) as server:
        status, resp, body = await post(server.base_url, messages=USER)
        assert status == 429 and resp.headers["Retry-After"] == "2"
        assert json.loads(body)["error"]["type"] == "rate_limit"
        status, resp, body = await post(server.base_url, messages=USER)
        assert (status, body, resp.content_type) == (500, "{not json", "application/json")
        status, _, _ = await post(server.base_url, messages=USER)
        assert status == 401
        status, resp, body = await post(server.base_url, messages=USER, stream=True)
        assert (status, resp.content_type, body) == (200, "text/event-stream", "data: {broken\n\n")


@pytest.fixture(scope="module")
def replay() -> Any:
    with ReplayServer(FIXTURE) as server:
        yield server


def first_index(server: ReplayServer, pred: Any) -> int:
    return next(i for i, row in enumerate(server.interactions) if pred(row))


async def test_replay_serves_recorded_json_replies(replay: ReplayServer) -> None:
    assert len(replay) == len(FIXTURE.read_text().splitlines()) == 381
    for index in (
        first_index(replay, lambda r: "tool_calls" in json.dumps(r.get("response"))),
        first_index(replay, lambda r: r["status"] == 400 and "tool_use_failed" in json.dumps(r["response"])),
        first_index(replay, lambda r: r["status"] == 404),
    ):
        row = replay.interactions[index]
        status, _, body = await post(replay.base_url_for(index), **row["request"])
        assert (status, json.loads(body)) == (row["status"], row["response"])
        assert replay.requests[-1] == (index, {"model": "m", **row["request"]})


async def test_replay_serves_recorded_sse_verbatim(replay: ReplayServer) -> None:
    plain = first_index(replay, lambda r: "sse" in r and "tool_calls" in r["sse"])
    with_error = first_index(replay, lambda r: "sse" in r and '\ndata: {"error"' in r["sse"])
    for index in (plain, with_error):
        status, resp, body = await post(replay.base_url_for(index), messages=USER, stream=True)
        row = replay.interactions[index]
        assert (status, resp.content_type, body) == (row["status"], "text/event-stream", row["sse"])
    assert assemble(data_events(replay.interactions[plain]["sse"]))  # a streamed tool call to reassemble


async def test_replay_unknown_index_is_404(replay: ReplayServer) -> None:
    status, _, body = await post(replay.base_url_for(len(replay)), messages=USER)
    assert status == 404 and "no interaction 381" in json.loads(body)["error"]["message"]


async def run_module(*args: str) -> tuple[asyncio.subprocess.Process, str]:
    # The lazy package import must not make runpy warn that the module was imported twice.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-W", "error::RuntimeWarning", "-m", *args, "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), timeout=30)).decode()
    if not line.startswith("listening on http://127.0.0.1:"):
        proc.kill()
        assert proc.stderr is not None
        pytest.fail(f"no banner: {line!r} {(await proc.stderr.read()).decode()}")
    return proc, line.split()[2]


async def stop(proc: asyncio.subprocess.Process) -> None:
    proc.terminate()
    await asyncio.wait_for(proc.wait(), timeout=10)


async def test_fake_server_runs_as_a_process() -> None:
    proc, base_url = await run_module("tether.testing.fake_server", "--scenario", "multiply", "--latency", "0.05")
    try:
        assert base_url.endswith("/v1")
        status, _, body = await post(base_url, messages=USER, stream=True)
        assert status == 200
        assert json.loads(assemble(data_events(body))[0]["arguments"]) == {"a": 248, "b": 15}
    finally:
        await stop(proc)


async def test_replay_server_runs_as_a_process() -> None:
    proc, url = await run_module("tether.testing.replay", str(FIXTURE))
    try:
        assert url.endswith("/{index}")
        row = json.loads(FIXTURE.read_text().splitlines()[0])
        status, _, body = await post(url.replace("{index}", "0"), **row["request"])
        assert (status, json.loads(body)) == (row["status"], row["response"])
    finally:
        await stop(proc)
