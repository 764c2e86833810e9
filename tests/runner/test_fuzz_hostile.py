"""Fuzz: deep, wide, huge and mangled JSON through the decoder, the schema checks, each protocol's reply parser, runs.

A seeded generator (``Hostile``), not hypothesis (not a dependency): every
case is reproducible from ``SEED`` and its index, which each failure names.
What must hold for every input:

- the decoder returns an object at most ``MAX_DEPTH`` deep or raises
  ``InvalidJson``; the gate (decoding, then the tool's schema) answers
  ``Accepted`` or ``Rejected``; nothing else, ever;
- each protocol's parser (OpenAI chat and Anthropic Messages, a body and a
  stream) gives a reply or a ``ModelResponseError``, and the run state
  machine judges that reply into a command;
- memory while refusing a deep input stays a small multiple of its size;
- a run against a model sending such replies over HTTP, with a store, ends
  in a status (DESIGN.md §3) or pauses, and a paused run resumes to one.
"""

from __future__ import annotations

import json
import random
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether import Agent, Status, load_toolset, tool
from tether.core import Begin, Message, ModelReplied, ModelResponseError, Run, ToolCall
from tether.core.machine import Accepted, Command, Rejected
from tether.core.nesting import MAX_DEPTH, MAX_REPLY_DEPTH, value_nested_deeper
from tether.drivers.local.durable import decide
from tether.models import anthropic, openai_chat
from tether.models.anthropic import AnthropicModel
from tether.models.openai_chat import OpenAIChatModel
from tether.models.stream import Assembler
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import ReplySpec, raw, text, tool_calls
from tether.tools import InvalidJson, Toolbox, strict_loads, tool_from_schema

SEED = 20261201
CASES = 150  # per target

# Pieces a mangled text is made of: structure, escapes, lenient constants, odd characters.
DEBRIS = ["[", "]", "{", "}", '"', "\\", "\\\\", '\\"', ",", ":", "-", "1e999", "NaN", "Infinity", "null", "true",
          "\\u", "\\ud800", "\x00", "\n", "é", "\U0001d11e", '"a":', '{"k":', "[[[[", "]]]]"]  # fmt: skip


class Hostile:
    """JSON text a hostile model might send, from one seeded random source."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)  # a str seeds the same sequence in every process

    def levels(self) -> int:
        return self.rng.choice([MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_REPLY_DEPTH + 1, 999, 5_000,
                                200_000])  # fmt: skip

    def deep(self) -> str:
        levels, kind = self.levels(), self.rng.choice(["[", '{"k":', '[{"k":'])
        opens = (kind * levels)[: len(kind) * levels]
        closes = "".join("]" if c == "[" else "}" for c in opens if c in "[{")[::-1]
        text = opens + self.rng.choice(["1", '"x"', "[]", "{}", ""]) + closes
        return text[: self.rng.randrange(len(text) + 1)] if self.rng.random() < 0.3 else text

    def wide(self) -> str:
        count = self.rng.choice([1_000, 10_000, 100_000])
        if self.rng.random() < 0.5:
            items = (self.rng.choice(["1", '"["', "null", "{}", "[]", "-0.5e3"]) for _ in range(count))
            return "[" + ",".join(items) + "]"
        keys = [f'"k{self.rng.randrange(count)}"' for _ in range(count)]  # repeated keys among them
        values = ["1", "[]", "{}", '"x"']
        return "{" + ",".join(k + ": " + self.rng.choice(values) for k in keys) + "}"

    def huge(self) -> str:
        size = self.rng.choice([10_000, 100_000, 1_000_000])
        piece = self.rng.choice(["x", '\\"', "[", "é", "\\u00e9", "{]"])
        body = (piece * (size // len(piece)))[:size]
        if body.endswith("\\") and not body.endswith("\\\\"):
            body = body[:-1]
        return self.rng.choice(['{"a": "' + body + '"}', '["' + body + '"]', "1" * (size // 100), '"' + body])

    def value(self, levels: int) -> Any:
        """A valid value ``levels`` deep along one branch (the others shallow: the size stays linear)."""
        if levels <= 0:
            return self.rng.choice([0, 248, -1.5, 1e300, "x", "[{", None, True])
        children = [
            self.value(levels - 1),
            *(self.value(self.rng.randint(0, 1)) for _ in range(self.rng.randint(0, 2))),
        ]
        self.rng.shuffle(children)
        if self.rng.random() < 0.5:
            return children
        return {self.rng.choice(["a", "b", "[", '"']) + str(i): child for i, child in enumerate(children)}

    def valid(self) -> str:
        return json.dumps({"a": self.value(self.rng.choice([2, 8, MAX_DEPTH + 4]))})

    def mangle(self, text: str) -> str:
        for _ in range(self.rng.randint(1, 4)):
            at = self.rng.randrange(len(text) + 1)
            edit = self.rng.random()
            if edit < 0.4:
                text = text[:at] + self.rng.choice(DEBRIS) + text[at:]
            elif edit < 0.7:
                text = text[:at] + text[at + self.rng.randint(1, 8) :]
            else:
                text = text[:at]
        return text

    def text(self) -> str:
        make = self.rng.choice([self.deep, self.deep, self.wide, self.huge, self.valid, self.valid])
        text = make()
        return self.mangle(text) if self.rng.random() < 0.4 else text

    def slot(self) -> str:
        """JSON text to put where a reply has a value: a normal one, hostile text as a string, or hostile text raw."""
        roll = self.rng.random()
        if roll < 0.3:
            return json.dumps(self.rng.choice(["hi", "", None, 3, [], {}, "multiply"]))
        if roll < 0.6:
            return json.dumps(self.text())
        return self.text()


def each_case(target: str) -> Iterator[tuple[int, Hostile]]:
    for index in range(CASES):
        yield index, Hostile(f"{SEED}:{target}:{index}")


# ------------------------------------------------------------------ the decoder and the gate


node_schema: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"$ref": "#/$defs/node"}},
    "additionalProperties": False,
    "$defs": {"node": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/node"}}, {"type": "integer"},
                                 {"type": "object", "additionalProperties": {"$ref": "#/$defs/node"}}]}},
}  # fmt: skip


@tool(read_only=True)
def echo(a: Any = None) -> Any:
    """Returns what it is given."""
    return a


@tool(read_only=True)
def matrix(a: list[list[int]]) -> int:
    """A list of lists of integers."""
    return len(a)


@tool(read_only=True)
def mapping(a: dict[str, Any]) -> int:
    """An open object."""
    return len(a)


@tool
def wire(amount: int) -> str:
    """Side-effecting, needs no approval: runs when its arguments pass."""
    return f"sent {amount}"


TOOLS = [echo, matrix, mapping, wire, tool_from_schema("tree", node_schema, lambda **kwargs: "ok", read_only=True)]
TOOLBOX = Toolbox(TOOLS)


def test_the_decoder_gives_a_bounded_object_or_invalid_json() -> None:
    for index, hostile in each_case("decoder"):
        text = hostile.text()
        try:
            value = strict_loads(text)
        except InvalidJson:
            continue
        assert isinstance(value, dict), (SEED, index)
        assert not value_nested_deeper(value, MAX_DEPTH), (SEED, index)


def test_the_gate_answers_every_call_with_a_verdict() -> None:
    for index, hostile in each_case("gate"):
        arguments = '{"a": ' + hostile.slot() + "}" if hostile.rng.random() < 0.7 else hostile.text()
        for name in hostile.rng.sample(sorted(TOOLBOX.offered), 2):
            verdict = TOOLBOX.check(ToolCall(f"c{index}", name, arguments))
            assert isinstance(verdict, Accepted | Rejected), (SEED, index, name)


def test_refusing_a_deep_input_takes_memory_proportional_to_its_size() -> None:
    for levels in (MAX_DEPTH + 1, 5_000, 1_000_000):
        arrays = "[" * levels + "]" * levels
        objects = '{"a": ' + '{"k":' * levels
        with_strings = '{"a": ' + '["[{\\"", ' * levels + "1" + "]" * levels + "}"  # brackets in strings too
        for sample in (arrays, objects, with_strings):
            tracemalloc.start()
            try:
                with pytest.raises(InvalidJson):
                    strict_loads(sample)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert peak < 4 * len(sample) + 1_000_000, (levels, len(sample), peak)


# ------------------------------------------------------------------ each protocol's reply parser


def openai_body(h: Hostile) -> bytes:
    reason = h.rng.choice(['"tool_calls"', '"stop"', '"length"', "null", h.slot()])
    call = '{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": ' + h.slot() + "}}"
    message = '{"role": "assistant", "content": ' + h.slot() + ', "tool_calls": [' + call + "]}"
    body = '{"choices": [{"index": 0, "message": ' + message + ', "finish_reason": ' + reason + '}], "usage": '
    return (body + h.slot() + "}").encode()


def openai_events(h: Hostile) -> list[str]:
    def chunk(delta: str, reason: str = "null") -> str:
        return '{"choices": [{"index": 0, "delta": ' + delta + ', "finish_reason": ' + reason + "}]}"

    arguments = [h.slot() for _ in range(h.rng.randint(1, 4))]
    events = [chunk('{"role": "assistant", "content": ' + h.slot() + "}")]
    events += [chunk('{"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "echo", "arguments": ' + a + "}}]}")
               for a in arguments]  # fmt: skip
    events.append(chunk("{}", h.rng.choice(['"tool_calls"', '"stop"', h.slot()])))
    if h.rng.random() < 0.3:
        events.insert(h.rng.randrange(len(events) + 1), h.text())
    return events


def anthropic_body(h: Hostile) -> bytes:
    blocks = '[{"type": "text", "text": ' + h.slot() + '}, {"type": "tool_use", "id": "t1", "name": "echo", "input": '
    stop = h.rng.choice(['"tool_use"', '"end_turn"', '"max_tokens"', h.slot()])
    body = '{"type": "message", "content": ' + blocks + h.slot() + "}], " + '"stop_reason": ' + stop + ', "usage": '
    return (body + h.slot() + "}").encode()


def anthropic_events(h: Hostile) -> list[str]:
    partial = [json.dumps(piece) for piece in split(h, h.text())]
    events = ['{"type": "message_start", "message": {"model": "m", "usage": ' + h.slot() + "}}",
              '{"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", '
              '"name": "echo", "input": {}}}']  # fmt: skip
    events += ['{"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '
               + p + "}}" for p in partial]  # fmt: skip
    events += ['{"type": "content_block_stop", "index": 0}',
               '{"type": "message_delta", "delta": {"stop_reason": ' + h.rng.choice(['"tool_use"', h.slot()]) + "}}",
               '{"type": "message_stop"}']  # fmt: skip
    if h.rng.random() < 0.3:
        events.insert(h.rng.randrange(len(events) + 1), h.text())
    return events


def split(h: Hostile, text: str) -> list[str]:
    cuts = sorted(h.rng.randrange(len(text) + 1) for _ in range(h.rng.randint(0, 4)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def parse_openai_stream(events: list[str]) -> Any:
    assembler = Assembler()
    for payload in events:
        assembler.feed(openai_chat._decode_event(payload))
    return assembler.reply()


def parse_anthropic_stream(events: list[str]) -> Any:
    assembler = anthropic.MessageAssembler()
    for payload in events:
        assembler.feed(anthropic._decode_event(payload))
    return assembler.turn().reply


PARSERS: dict[str, tuple[Callable[[Hostile], Any], Callable[[Any], Any]]] = {
    "openai-body": (openai_body, openai_chat._read_body),
    "openai-stream": (openai_events, parse_openai_stream),
    "anthropic-body": (anthropic_body, lambda raw: anthropic._read_body(raw).reply),
    "anthropic-stream": (anthropic_events, parse_anthropic_stream),
}


def judged(reply: Any) -> Command:
    run = Run.new("r", [Message("user", "hi")], TOOLBOX)
    run.send(Begin(0.0))
    return run.send(ModelReplied(reply, 1.0))


@pytest.mark.parametrize("protocol", sorted(PARSERS))
def test_each_parser_gives_a_reply_the_machine_judges_or_a_model_response_error(protocol: str) -> None:
    make, parse = PARSERS[protocol]
    replies = 0
    for index, hostile in each_case(protocol):
        try:
            reply = parse(make(hostile))
        except ModelResponseError:
            continue
        replies += 1
        assert isinstance(judged(reply), Command), (SEED, index)
    assert replies > CASES // 10  # the generator reaches past the parser too


# ------------------------------------------------------------------ runs over HTTP, with a store


def run_script(h: Hostile, protocol: str) -> list[ReplySpec]:
    """One or two hostile replies, then an answer (the FakeServer renders calls in the request's dialect)."""
    roll = h.rng.random()
    if roll < 0.5:
        calls = [(f"c{i}", h.rng.choice(["echo", "matrix", "mapping", "tree", "wire"]), '{"a": ' + h.slot() + "}")
                 for i in range(h.rng.randint(1, 3))]  # fmt: skip
        first: ReplySpec = tool_calls(calls)
    elif roll < 0.75:
        body = openai_body(h) if protocol == "openai" else anthropic_body(h)
        first = raw(body.decode())
    else:
        events = openai_events(h) if protocol == "openai" else anthropic_events(h)
        first = raw("".join(f"data: {e}\n\n" for e in events), headers={"Content-Type": "text/event-stream"})
    return [first, text("done"), text("done")]


@tool(approval=True)
def pay(amount: int) -> str:
    """Needs a person's approval."""
    return f"paid {amount}"


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_runs_against_a_hostile_model_end_or_pause_and_resume(tmp_path: Path, protocol: str) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    tools = [*TOOLS, pay, *load_toolset("calc")]
    for index, hostile in list(each_case(f"run-{protocol}"))[:20]:
        script = run_script(hostile, protocol)
        if index % 5 == 0:  # a paused step beside the hostile calls
            first = script[0]
            script[0] = tool_calls([("p1", "pay", '{"amount": 7}'), *getattr(first, "tool_calls", ())])
        stream = hostile.rng.random() < 0.5
        async with FakeServer(script) as server:
            if protocol == "openai":
                model: Any = OpenAIChatModel("m", base_url=server.base_url, api_key="k", stream=stream, max_retries=0)
            else:
                model = AnthropicModel("m", base_url=server.origin, api_key="k", stream=stream, max_retries=0)
            async with Agent(model, tools, store=store) as agent:
                result = await agent.run("go")
                assert result.status in set(Status), (SEED, index)
                if result.status is Status.AWAITING_APPROVAL:
                    decide(store, result.run_id, "p1", approved=True)
                    result = await agent.resume(result.run_id).run()
        assert result.status.terminal, (SEED, index, result.status, result.reason)
        assert store.verify(result.run_id) == [], (SEED, index)
