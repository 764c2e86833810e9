"""Every recorded Responses API reply, served over HTTP, gives a reply or a precise error.

The 221 interactions were recorded from 6 hosts (OpenAI, Bedrock, DeepSeek,
OpenRouter, Azure, a gateway; see ../shared/fixtures/README.md): function
calls, reasoning items, built-in tools, errors, streamed and not. Each is
replayed by the replay server, read by ``OpenAIResponsesModel`` and handed
to the run state machine with the recorded request's own function tools.
Then every non-streamed reply is streamed by the fake server (``events_of``)
and must read the same, also when its terminal event lists no output; and
every reply's reasoning items must go back on the next request exactly as
they came, with the items that followed them.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tether.core import Begin, ModelError, ModelReplied, Run, ToolDefinitionError
from tether.core.messages import Message, ModelReply
from tether.models import ModelRequest
from tether.models.openai_responses import OpenAIResponsesModel, messages_to_wire, reasons
from tether.testing import FakeServer, ReplayServer, raw
from tether.testing.responses_wire import events_of, sse
from tether.tools import Toolbox, tool_from_schema

SSE = {"Content-Type": "text/event-stream"}
BUILT_IN = "built-in tools are not supported (offer function tools only)"


def _file_data(where: str) -> str:
    """An HTTP error whose message is longer than the 300 characters an error keeps of it."""
    message = (
        f"Invalid file data: '{where}'. Expected a base64-encoded data URL with a valid file MIME type (e.g. "
        "'data:text/plain;base64,SGVsbG8sIFdvcmxkIQ=='), but got unsupported MIME type 'audio/mpeg'. Please see "
        "https://platform.openai.com/docs/assistants/tools/file-search#supported-files for supported file types."
    )
    return f"ModelHTTPError: HTTP 400: {message[:300]}"


# The recordings' 8 HTTP errors, their background-mode reply, their hand-written "complete" status, and
# the replies holding built-in tools' items (web search, tool search, file search, code interpreter,
# MCP, image generation): each a precise error naming what it is.
EXPECTED_ERRORS = collections.Counter(
    {
        "ModelHTTPError: HTTP 400: The file type you uploaded is not supported. Please try again with a pdf": 2,
        "ModelHTTPError: HTTP 400: The requested model 'gpt-5.2-proo' does not exist.": 1,
        "ModelHTTPError: HTTP 400: No tool output found for tool call call-a.": 1,
        _file_data("input[3].output[0].file_data"): 1,
        _file_data("input[4].content[0].file_data"): 1,
        "ModelHTTPError: HTTP 400: Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but "
        "got -1 instead.": 1,
        "ModelHTTPError: HTTP 400: Item 'rs_68c42de022c881948db7ed1cc2529f2e0202c9ad459e0d23' of type 'reasoning' "
        "was provided without its required following item.": 1,
        "ModelResponseError: the response is queued (background mode): tether does not poll for it; leave "
        "background out": 1,
        "ModelResponseError: unknown response status 'complete'": 1,
        f"ModelResponseError: the reply holds a 'web_search_call' item: {BUILT_IN}": 14,
        f"ModelResponseError: the reply holds a 'tool_search_call' item: {BUILT_IN}": 6,
        f"ModelResponseError: the reply holds a 'file_search_call' item: {BUILT_IN}": 4,
        f"ModelResponseError: the reply holds a 'code_interpreter_call' item: {BUILT_IN}": 3,
        f"ModelResponseError: the reply holds a 'mcp_list_tools' item: {BUILT_IN}": 2,
        f"ModelResponseError: the reply holds a 'image_generation_call' item: {BUILT_IN}": 1,
    }
)


def _echo(**arguments: Any) -> dict[str, Any]:
    return arguments


def _toolbox(request: dict[str, Any]) -> Toolbox:
    tools = []
    for entry in (request or {}).get("tools") or ():
        if entry.get("type") != "function":
            continue  # a built-in tool (web search, code interpreter): the API runs it, not the host
        try:
            tools.append(tool_from_schema(entry["name"], entry.get("parameters") or {"type": "object"}, _echo))
        except (ToolDefinitionError, KeyError):
            continue
    return Toolbox(tools)


def _run(reply: ModelReply, request: dict[str, Any]) -> Run:
    run = Run.new("replay", [Message("user", "replayed")], _toolbox(request))
    run.send(Begin(0.0))
    run.send(ModelReplied(reply, 1.0))
    return run


def _events(text: str) -> list[dict[str, Any]]:
    payloads = re.findall(r"^data: ?(.*)$", text, re.M)
    return [json.loads(p) for p in payloads if p != "[DONE]"]


def _output(interaction: dict[str, Any]) -> list[dict[str, Any]]:
    """The output items the recording holds: the response's, or the streamed terminal response's."""
    if "sse" in interaction:
        terminal = [e for e in _events(interaction["sse"]) if e.get("type") == "response.completed"]
        return list(terminal[-1]["response"]["output"]) if terminal else []
    return list((interaction.get("response") or {}).get("output") or [])


def _model(base_url: str, stream: bool = False, name: str = "replay") -> OpenAIResponsesModel:
    return OpenAIResponsesModel(name, base_url=base_url, api_key="x", stream=stream, max_retries=0)


async def _complete(model: OpenAIResponsesModel) -> ModelReply | str:
    """The reply, or the precise error as ``Type: message``."""
    try:
        return await model.complete(ModelRequest([Message("user", "hi")]))
    except ModelError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        await model.aclose()


async def test_every_recorded_reply_is_a_reply_or_a_precise_error(recorded_responses: Path) -> None:
    statuses: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    calls = streamed = 0
    with ReplayServer(recorded_responses) as server:
        assert len(server) == 221
        assert len({x["host"] for x in server.interactions}) == 6
        for index, interaction in enumerate(server.interactions):
            stream = "sse" in interaction
            reply = await _complete(_model(server.base_url_for(index), stream))
            if isinstance(reply, str):
                errors[reply] += 1
                continue
            streamed += stream
            statuses[_run(reply, interaction["request"]).state.status.value] += 1
            # Every call exactly as recorded: its call_id, its name, its arguments text byte for byte.
            recorded = [i for i in _output(interaction) if i.get("type") == "function_call"]
            assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
                (i["call_id"], i["name"], i["arguments"]) for i in recorded
            ], index
            assert all(type(c.arguments) is str for c in reply.tool_calls)
            calls += bool(reply.tool_calls)
    print(dict(statuses), dict(errors))
    assert errors == EXPECTED_ERRORS
    assert sum(statuses.values()) == 221 - sum(EXPECTED_ERRORS.values()) == 181
    # 70 replies carry function calls; 3 of them also a tool search's items, refused above.
    assert calls == statuses["awaiting_tools"] == 67
    assert statuses["completed"] == 181 - 67
    # 6 of the 22 streams hold built-in tools' items (web search twice, tool search, file search, code
    # interpreter, MCP tools).
    assert streamed == 22 - 6


async def test_streamed_and_plain_forms_of_every_recorded_reply_are_equal(recorded_responses: Path) -> None:
    """Each non-streamed reply, streamed event by event, reads the same: reply, reasoning kept, or error.

    Streamed twice: with the terminal event's whole response, and with its output left out, so the items
    are assembled from ``output_item`` events and text and arguments deltas.
    """
    compared = 0
    with ReplayServer(recorded_responses) as replay, FakeServer() as fake:
        for index, interaction in enumerate(replay.interactions):
            response = interaction.get("response")
            if interaction["status"] != 200 or not isinstance(response, dict):
                continue
            events = events_of(response)
            bare = [*events[:-1], {**events[-1], "response": {**response, "output": []}}]
            fake.script = [raw("".join(sse(events)), headers=SSE), raw("".join(sse(bare)), headers=SSE)]
            fake.requests.clear()
            plain = await _complete(_model(replay.base_url_for(index)))
            whole = await _complete(_model(fake.base_url, stream=True))
            assembled = await _complete(_model(fake.base_url, stream=True))
            if isinstance(plain, ModelReply) and plain.provider_data is not None:
                # Kept for the fake server's endpoint rather than the replay's; the same items otherwise.
                where = {**plain.provider_data["openai_responses"], "base_url": fake.base_url}
                plain = dataclasses.replace(plain, provider_data={"openai_responses": where})
            assert whole == assembled == plain, index
            compared += 1
    assert compared == 191  # every non-streamed 200 reply


async def test_reasoning_items_go_back_exactly_as_they_came(recorded_responses: Path) -> None:
    """A reply's reasoning items, through the run and the store's JSON, go back with the items that followed them.

    What goes back is the reply's own output: reasoning with its ``encrypted_content``, then the message and
    function_call items with their ids, as the API pairs them. To another model or endpoint nothing of it
    goes, and the message is sent as plain items without ids.
    """
    kept = 0
    with ReplayServer(recorded_responses) as server:
        for index, interaction in enumerate(server.interactions):
            base_url = server.base_url_for(index)
            reply = await _complete(_model(base_url, "sse" in interaction))
            if isinstance(reply, str) or reply.provider_data is None:
                continue
            kept += 1
            run = _run(reply, interaction["request"])
            (assistant,) = [m for m in run.state.messages if m.role == "assistant"]
            stored = Message.from_dict(json.loads(json.dumps(assistant.to_dict())))
            assert stored == assistant
            history = [Message("user", "replayed"), stored]
            _, sent = messages_to_wire(history, {"base_url": base_url, "model": "replay"})
            output = _output(interaction)
            while output[-1]["type"] == "reasoning":
                output.pop()  # a reasoning item goes back only with an item that followed it
            assert sent[1:] == output, index
            assert any(i.get("type") == "reasoning" for i in sent), index
            # Another model or endpoint gets the message as one without reasoning: plain items, no ids.
            plain = [history[0], Message("assistant", assistant.content, assistant.tool_calls)]
            for origin in ({"base_url": base_url, "model": "other"}, {"base_url": "http://o/v1", "model": "replay"}):
                _, elsewhere = messages_to_wire(history, origin)
                assert elsewhere == messages_to_wire(plain, origin)[1]
                assert all(i.get("type") != "reasoning" and "id" not in i for i in elsewhere)
    assert kept == 81  # 41 answers and 40 call requests carrying reasoning items


def test_encrypted_reasoning_is_asked_for_as_the_recorded_requests_ask(recorded_responses: Path) -> None:
    """Every recorded request that included ``reasoning.encrypted_content`` names a reasoning model."""
    asked, not_asked = set(), set()
    for line in recorded_responses.read_text().splitlines():
        request = json.loads(line)["request"]
        (asked if "reasoning.encrypted_content" in (request.get("include") or ()) else not_asked).add(request["model"])
    assert asked and all(reasons(model) for model in asked), sorted(m for m in asked if not reasons(m))
    # Those that did not: models that refuse it, and two older requests to reasoning models that did not ask.
    assert sorted(m for m in not_asked if reasons(m)) == ["gpt-5", "o3-mini"]
    assert not reasons("gpt-4o") and not reasons("deepseek-v4-flash") and not reasons("openai/gpt-oss-20b")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_recorded_reasoning_conversation_runs_and_sends_its_reasoning_back(
    recorded_responses: Path, stream: bool, tmp_path: Path
) -> None:
    """gpt-5's recorded call request and answer, served in turn to an Agent with a SQLite store."""
    from tether import Agent, SQLiteStore

    interactions = [json.loads(line) for line in recorded_responses.read_text().splitlines()]
    source = "test_openai_responses_thinking_with_tool_calls.yaml"
    first, second = (x for x in interactions if re.search(rf"{source}#[01]$", x["source"]))
    request = first["request"]
    tools = [tool_from_schema(t["name"], t["parameters"], _echo) for t in request["tools"] if t["type"] == "function"]
    script = [raw(events_and_text(x["response"], stream), headers=SSE if stream else {}) for x in (first, second)]
    with FakeServer(script) as server:
        store = SQLiteStore(tmp_path / "runs.db")
        model = OpenAIResponsesModel("gpt-5", base_url=server.base_url, api_key="x", stream=stream, max_retries=0)
        async with Agent(model, tools, store=store) as agent:
            result = await agent.run("hi")
        sent = server.requests
    assert result.status.value == "completed", result.reason
    assert sent[0]["include"] == ["reasoning.encrypted_content"]
    call_output = first["response"]["output"]
    reasoning = [i for i in call_output if i["type"] == "reasoning"]
    assert reasoning and all(i.get("encrypted_content") for i in reasoning)
    back = sent[1]["input"]
    assert back[1 : 1 + len(call_output)] == call_output  # reasoning, then the calls with their ids
    calls = [i["call_id"] for i in call_output if i["type"] == "function_call"]
    assert [(i["type"], i["call_id"]) for i in back[1 + len(call_output) :]] == [
        ("function_call_output", c) for c in calls
    ]
    assert store.verify(result.run_id) == []
    (loaded, _) = [m for m in store.load(result.run_id).state.messages if m.role == "assistant"]
    assert loaded == result.state.messages[1] and loaded.provider_data is not None


def events_and_text(response: dict[str, Any], stream: bool) -> str:
    return "".join(sse(events_of(response))) if stream else json.dumps(response)


ODD_VALUES: tuple[Any, ...] = (None, 0, True, "x", "failed", "refusal", [], {}, [None], {"type": None})


def _mutations(value: Any, depth: int = 0) -> list[Any]:
    """``value`` with one field (at most three levels down) replaced by an odd value, or removed: every way."""
    out: list[Any] = []
    if isinstance(value, dict) and depth < 3:
        for key in value:
            out += [{**value, key: odd} for odd in ODD_VALUES]
            out.append({k: v for k, v in value.items() if k != key})
            out += [{**value, key: inner} for inner in _mutations(value[key], depth + 1)]
    elif isinstance(value, list) and depth < 3:
        for index, element in enumerate(value):
            out += [[*value[:index], inner, *value[index + 1 :]] for inner in _mutations(element, depth + 1)]
    return out


def _survives(reply: ModelReply, request: dict[str, Any]) -> None:
    """The run judges the reply, and the next request renders from what the run kept."""
    run = _run(reply, request)
    messages_to_wire(run.state.messages, {"base_url": "b", "model": "m"})


def test_every_mutation_of_every_recorded_reply_is_a_reply_or_a_precise_error(recorded_responses: Path) -> None:
    """Shapes no recording holds: each recorded response and stream event with one field made odd or removed.

    Bodies go through ``parse_response``, streams event by event through the assembler: each gives a reply
    the run judges (and whose history renders again) or a ``ModelResponseError``, never another exception.
    """
    from tether.core import ModelResponseError
    from tether.models.openai_responses import ResponseAssembler, parse_response

    tried = errors = 0
    for line in recorded_responses.read_text().splitlines():
        interaction = json.loads(line)
        response = interaction.get("response")
        if isinstance(response, dict) and interaction["status"] == 200:
            kept = ("status", "output", "usage", "incomplete_details", "error")
            trimmed = {k: v for k, v in response.items() if k in kept}
            for variant in _mutations(trimmed):
                tried += 1
                try:
                    _survives(parse_response(variant, {"base_url": "b", "model": "m"}), interaction["request"])
                except ModelResponseError:
                    errors += 1
        if "sse" in interaction:
            events = _events(interaction["sse"])
            for position, event in enumerate(events):
                for variant in _mutations(event)[:60]:
                    tried += 1
                    assembler = ResponseAssembler(lambda piece: None, lambda *delta: None)
                    try:
                        for fed in [*events[:position], variant, *events[position + 1 :]]:
                            assembler.feed(fed)
                        reply = parse_response(assembler.response(), {"base_url": "b", "model": "m"})
                        _survives(reply, interaction["request"])
                    except ModelResponseError:
                        errors += 1
    print(tried, errors)
    assert tried > 50_000 and 0 < errors < tried
