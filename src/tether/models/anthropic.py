"""Anthropic's Messages API (``POST /v1/messages``) over HTTP, streamed and not.

Translation only, as for ``openai_chat``: the run state machine judges the
reply. What maps to what:

- system messages become the top-level ``system``; a tool message becomes a
  ``tool_result`` block (``is_error`` when it carries an error envelope,
  ``{"ok": false, ...}``) in a user turn; consecutive turns of one role are
  merged, so the results of parallel calls travel in one user message;
- tools and ``tool_choice`` are rewritten (``"required"`` is ``any``, a named
  function is ``{"type": "tool", "name": ...}``); ``max_tokens`` is required
  by the API, ``DEFAULT_MAX_TOKENS`` when no setting names it;
- model settings: ``temperature`` (0 to 1 here), ``max_tokens`` and ``top_p``
  keep their names, ``stop`` is ``stop_sequences``, ``parallel_tool_calls=False``
  is ``disable_parallel_tool_use`` in ``tool_choice``; ``seed`` has no
  equivalent and is refused (``ConfigurationError``), never dropped;
- a ``tool_use`` block is a call: its ``input`` becomes the JSON arguments
  text the core decodes strictly (a streamed call's text is the joined
  ``input_json_delta`` pieces, unchanged; a non-streamed ``input`` keeps a
  repeated key and ``NaN``, so both are refused as they would be in an
  OpenAI arguments string; an ``input`` that is not an object is refused as
  ``invalid_json``). Text blocks make the answer; thinking, server-tool and
  other blocks never do;
- ``stop_reason``: ``end_turn`` and ``stop_sequence`` are ``stop`` (the text
  up to the stop sequence is the answer), ``tool_use`` is
  ``tool_calls``, ``max_tokens`` and ``model_context_window_exceeded`` are
  ``length``, ``refusal`` is ``content_filter``. ``pause_turn`` (the server
  paused a long turn of its own tools) is continued within the same step by
  sending the paused content back, at most ``MAX_PAUSE_CONTINUATIONS`` times;
  a turn still paused after that is a ``ModelResponseError``.

Errors: HTTP statuses as for every adapter (429, 529 and 5xx retried honouring
``retry-after``); an ``error`` event inside a stream is a
``ModelResponseError`` naming its type, and so is a body or event nested
deeper than ``MAX_REPLY_DEPTH`` (a call's ``input`` within it that is deeper
than ``MAX_DEPTH`` goes to the core, which refuses it as ``invalid_json``).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.core import nesting
from tether.core.errors import ConfigurationError, ModelResponseError
from tether.core.messages import ModelReply, Usage, WireToolCall, reported_usage
from tether.core.settings import ModelSettings, merge_settings
from tether.models.base import ModelRequest, settings_for
from tether.models.base import output_mode as checked_output_mode
from tether.models.http import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_MAX_RETRIES,
    DEFAULT_READ_TIMEOUT,
    HTTPModel,
    checked_base_url,
)
from tether.models.stream import error_message

if TYPE_CHECKING:
    import aiohttp  # annotations only: a request imports it (``tether.models.http``)

    from tether.tools.output import OutputMode

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
MAX_PAUSE_CONTINUATIONS = 3

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
TOOL_CHOICES = {"auto": "auto", "required": "any", "none": "none"}

_dumps = functools.partial(json.dumps, ensure_ascii=False)


# ------------------------------------------------------------------- requests


def _is_error_envelope(content: str) -> bool:
    if not content.startswith("{"):
        return False
    try:
        data = nesting.loads(content, nesting.MAX_REPLY_DEPTH)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("ok") is False


def _input(arguments: str) -> dict[str, Any]:
    # History keeps refused calls too; the API wants an object, and the tool_result says what was wrong.
    try:  # deeper than the gate accepts: refused already, and must not break the request that says so
        value = nesting.loads(arguments, nesting.MAX_DEPTH)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def messages_to_wire(messages: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system, messages)`` in the Messages API's shape."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            system.append(message.content or "")
            continue
        blocks: list[dict[str, Any]] = []
        if message.role == "tool":
            content = message.content or ""
            block = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": content}
            if _is_error_envelope(content):
                block["is_error"] = True
            blocks.append(block)
        else:
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            for call in message.tool_calls:
                blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments)})
        role = "assistant" if message.role == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return ("\n\n".join(system) if system else None), turns


def tool_to_wire(spec: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI ``tools`` entry as a Messages API tool."""
    function = spec.get("function")
    if spec.get("type") != "function" or not isinstance(function, dict):
        return spec  # already in the Messages API's shape
    schema = function.get("parameters") or {"type": "object"}
    tool: dict[str, Any] = {"name": function.get("name"), "input_schema": schema}
    if function.get("description"):
        tool["description"] = function["description"]
    if function.get("strict") is True:  # the strict form is never sent without its flag
        tool["strict"] = True
    return tool


def tool_choice_to_wire(choice: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(choice, str):
        return {"type": TOOL_CHOICES.get(choice, choice)}
    function = choice.get("function")
    if choice.get("type") == "function" and isinstance(function, dict):
        return {"type": "tool", "name": function.get("name")}
    return dict(choice)


# -------------------------------------------------------------------- replies


class _Repeated(dict[str, Any]):
    """A JSON object that named a key twice: every pair is kept, so the strict decoder sees it."""

    pairs: list[tuple[str, Any]]


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    repeated = _Repeated(value)
    repeated.pairs = pairs
    return repeated


def _dump(value: Any) -> str:
    """JSON text of a decoded ``input``, repeated keys and ``NaN`` included."""
    if isinstance(value, _Repeated):
        return "{" + ", ".join(f"{_dumps(k)}: {_dump(v)}" for k, v in value.pairs) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_dumps(k)}: {_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dump(v) for v in value) + "]"
    return _dumps(value)


def _arguments(block: dict[str, Any]) -> object:
    if "input" not in block:
        return None  # no arguments at all: a protocol error, like a missing OpenAI arguments string
    value = block["input"]
    if type(value) is dict and all(type(v) in (str, int, bool) for v in value.values()):
        return _dumps(value)  # the common flat case, without the walk
    return _dump(value)


def parse_usage(usage: Any) -> Usage:
    """Input counts cached tokens too: budgets are about what the run consumed."""
    if not isinstance(usage, dict):
        return Usage()
    counts = [usage.get(k) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    return reported_usage(counts, usage.get("output_tokens"))


@dataclass(slots=True)
class Turn:
    """One Messages response: the reply it makes, its raw blocks (for ``pause_turn``) and stop reason."""

    reply: ModelReply
    blocks: list[Any]
    stop_reason: object


def _reply(
    blocks: list[Any], stop_reason: object, usage: Usage, model: object, streamed: Mapping[int, object] | None = None
) -> ModelReply:
    """``streamed`` holds, by block position, the arguments text a stream gave for a call."""
    streamed = streamed or {}
    text: list[str] = []
    calls: list[WireToolCall] = []
    for position, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise ModelResponseError("a content block is not an object")
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            text.append(block["text"])
        elif kind == "tool_use":
            arguments = streamed[position] if position in streamed else _arguments(block)
            calls.append(WireToolCall(block.get("id"), "function", block.get("name"), arguments))
    reason = STOP_REASONS.get(stop_reason, stop_reason) if isinstance(stop_reason, str) else None
    return ModelReply(
        choices=1,
        finish_reason=reason,
        content="".join(text) or None,
        tool_calls=tuple(calls),
        usage=usage,
        model=model if isinstance(model, str) else None,
    )


def parse_message(body: Any) -> Turn:
    """A ``Turn`` from a decoded non-streamed response body."""
    if not isinstance(body, dict):
        raise ModelResponseError("response body is not a JSON object")
    if body.get("type") == "error" or ("error" in body and "content" not in body):
        raise ModelResponseError(f"error in response: {error_message(body.get('error'))}")
    blocks = body.get("content")
    if not isinstance(blocks, list):
        raise ModelResponseError("the message has no content list")
    stop = body.get("stop_reason")
    return Turn(_reply(blocks, stop, parse_usage(body.get("usage")), body.get("model")), blocks, stop)


def _read_body(raw: bytes) -> Turn:
    # Repeated keys matter only in a call's input; without a tool_use block the C decoder runs alone.
    hook = _object if b'"tool_use"' in raw else None
    try:
        decoded = nesting.loads(raw, nesting.MAX_REPLY_DEPTH, object_pairs_hook=hook)
    except nesting.REFUSED as exc:
        raise ModelResponseError(f"response body is {exc}") from None
    except ValueError:
        raise ModelResponseError("response body is not JSON") from None
    return parse_message(decoded)


@dataclass(slots=True)
class MessageAssembler:
    """Assemble Messages SSE events into the same ``Turn`` a non-streamed response gives.

    Blocks are kept whole (text, thinking and its signature, citations, server
    tool input) so a paused turn can be sent back; only text blocks reach
    ``on_text`` and the answer.
    """

    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    partial: dict[int, list[Any]] = field(default_factory=dict)
    # Text and thinking pieces by (block index, field), joined once in ``turn``: text grown piece by piece
    # is copied whole for every piece, which a long answer in small deltas turns into minutes.
    pieces: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    arguments: dict[int, object] = field(default_factory=dict)  # by block index: the streamed text
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: object = None
    model: object = None
    stopped: bool = False
    closed: set[int] = field(default_factory=set)  # blocks whose content_block_stop came

    def feed(self, event: dict[str, Any]) -> str | None:
        """Take one decoded event; return its answer text piece, if any.

        A stream that contradicts itself is a ``ModelResponseError``: a stop
        reason that changes ("max_tokens", then "tool_use"), or content after it;
        a block started twice (a call's name and id replaced under its
        arguments), or added to after its ``content_block_stop``.
        """
        kind = event.get("type")
        if self.stop_reason is not None and kind in ("content_block_start", "content_block_delta"):
            raise ModelResponseError(f"the stream went on after its stop_reason {self.stop_reason!r}")
        if kind == "content_block_delta":
            if self._index(event) in self.closed:
                raise ModelResponseError(f"content_block_delta for block {event['index']} after its content_block_stop")
            return self._delta(event)
        if kind == "content_block_start":
            block = event.get("content_block")
            if not isinstance(block, dict):
                raise ModelResponseError("content_block_start without a content block")
            index = self._index(event)
            if index in self.blocks:
                raise ModelResponseError(f"content block {index} started twice")
            self.blocks[index] = dict(block)
        elif kind == "content_block_stop":
            index = self._index(event)
            self.closed.add(index)
            self._stop(index)
        elif kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                self.model = message.get("model")
                if isinstance(message.get("usage"), dict):
                    self.usage.update(message["usage"])
        elif kind == "message_delta":
            delta = event.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if reason is not None:
                if self.stop_reason is not None and reason != self.stop_reason:
                    was = self.stop_reason
                    raise ModelResponseError(f"the stream's stop_reason changed from {was!r} to {reason!r}")
                self.stop_reason = reason
            if isinstance(event.get("usage"), dict):
                self.usage.update({k: v for k, v in event["usage"].items() if v is not None})
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            error = event.get("error")
            name = error.get("type") if isinstance(error, dict) else None
            raise ModelResponseError(f"error event in stream: {name or 'error'}: {error_message(error)}")
        return None  # ping and event types added later are ignored

    def _index(self, event: dict[str, Any]) -> int:
        index = event.get("index")
        if not isinstance(index, int):
            raise ModelResponseError(f"{event.get('type')} without an integer index")
        return index

    def _delta(self, event: dict[str, Any]) -> str | None:
        block = self.blocks.get(self._index(event))
        delta = event.get("delta")
        if block is None or not isinstance(delta, dict):
            raise ModelResponseError("content_block_delta for a block that was not started")
        kind = delta.get("type")
        if kind == "text_delta":
            piece = delta.get("text")
            if isinstance(piece, str):
                self.pieces.setdefault((event["index"], "text"), []).append(piece)
                return piece if block.get("type") == "text" else None
        elif kind == "input_json_delta":
            self.partial.setdefault(event["index"], []).append(delta.get("partial_json"))
        elif kind == "thinking_delta":
            self.pieces.setdefault((event["index"], "thinking"), []).append(str(delta.get("thinking", "")))
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))
        return None

    def _stop(self, index: int) -> None:
        pieces = self.partial.pop(index, None)
        block = self.blocks.get(index)
        if pieces is None or block is None:
            return
        if not all(isinstance(p, str) for p in pieces):
            self.arguments[index] = next(p for p in pieces if not isinstance(p, str))  # for the core to refuse
            return
        text = "".join(pieces)
        if not text.strip():
            return  # a tool without parameters streams "": its input is the {} it started with
        try:  # too deep is refused like bad JSON: by the gate, from the text below
            block["input"] = nesting.loads(text, nesting.MAX_DEPTH, object_pairs_hook=_object)
        except ValueError:
            block.pop("input", None)
        self.arguments[index] = text  # the model's own text, unchanged, for the strict decoder

    def turn(self) -> Turn:
        for index in list(self.partial):  # a block the stream never closed
            self._stop(index)
        for (index, key), pieces in self.pieces.items():
            start = self.blocks[index].get(key)
            self.blocks[index][key] = (start if isinstance(start, str) else "") + "".join(pieces)
        self.pieces.clear()
        order = sorted(self.blocks)
        blocks = [self.blocks[i] for i in order]
        streamed = {p: self.arguments[i] for p, i in enumerate(order) if i in self.arguments}
        reply = _reply(blocks, self.stop_reason, parse_usage(self.usage), self.model, streamed)
        return Turn(reply, blocks, self.stop_reason)


def _decode_event(payload: str) -> dict[str, Any]:
    try:
        event = nesting.loads(payload, nesting.MAX_REPLY_DEPTH)
    except nesting.REFUSED as exc:
        raise ModelResponseError(f"stream event is {exc}") from None
    except ValueError:
        raise ModelResponseError("stream event is not JSON") from None
    if not isinstance(event, dict):
        raise ModelResponseError("stream event is not a JSON object")
    return event


def _joined(turns: list[Turn]) -> ModelReply:
    """The reply of a turn that was paused and continued: all its text and calls, all usage."""
    if len(turns) == 1:
        return turns[0].reply
    last = turns[-1].reply
    usage = sum((t.reply.usage for t in turns), Usage())
    text = "".join(t.reply.content or "" for t in turns) or None
    calls = tuple(c for t in turns for c in t.reply.tool_calls)
    return ModelReply(1, last.finish_reason, text, calls, usage, last.model)


# ---------------------------------------------------------------------- model


class AnthropicModel(HTTPModel):
    """A model behind Anthropic's Messages API.

    Reads ``ANTHROPIC_BASE_URL`` (default ``https://api.anthropic.com``; the
    adapter posts to ``{base_url}/v1/messages``), ``ANTHROPIC_API_KEY`` and
    ``ANTHROPIC_MODEL`` for anything not given. A reply larger than
    ``max_reply_bytes`` (streamed or not) is a ``ReplyTooLarge`` error, read
    no further. Example::

        agent = Agent(AnthropicModel("claude-sonnet-4-5"), [multiply])
    """

    key_variable = "ANTHROPIC_API_KEY"
    # The Messages API has no response_format: a structured answer is a final-answer tool or prompted.
    output_modes: tuple[OutputMode, ...] = ("tool", "prompted")
    # Tools go with their own schemas: tether does not turn on the API's strict tool use (Agent.strict_tools).
    strict_tools = False

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool = False,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        parallel_tool_calls: bool = True,
        max_retries: int = DEFAULT_MAX_RETRIES,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        extra_body: dict[str, Any] | None = None,
        output_mode: OutputMode = "tool",
        settings: ModelSettings | None = None,
    ) -> None:
        """``settings``: this model's own settings, under the agent's and the run's (see the module's docstring).

        ``max_tokens`` and ``parallel_tool_calls`` are what is sent when no setting names them;
        ``extra_body`` is a shorthand for ``settings=ModelSettings(extra=...)`` (both given: merged key by
        key, ``settings`` winning).
        """
        self.output_mode = checked_output_mode(output_mode, self.output_modes, "AnthropicModel")
        self.name = model or os.environ.get("ANTHROPIC_MODEL") or ""
        if not self.name:
            raise ConfigurationError("no model named: set ANTHROPIC_MODEL or pass --model")
        self.base_url = checked_base_url(
            base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL,
            "base_url" if base_url else "ANTHROPIC_BASE_URL",
        )
        api_key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        if not api_key and self.base_url == DEFAULT_BASE_URL:
            raise ConfigurationError(
                "no API key: set ANTHROPIC_API_KEY (or --api-key), or ANTHROPIC_BASE_URL for another server"
            )
        if max_tokens < 1:
            raise ConfigurationError("max_tokens must be at least 1")
        headers = {"Content-Type": "application/json", "anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        super().__init__(
            headers,
            max_retries=max_retries,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_reply_bytes=max_reply_bytes,
        )
        self.stream = stream
        self.max_tokens = max_tokens
        self.parallel_tool_calls = parallel_tool_calls
        self.settings = merge_settings(ModelSettings(extra=extra_body) if extra_body else None, settings)
        self.check_settings(self.settings)
        self._url = f"{self.base_url}/v1/messages"

    def __repr__(self) -> str:  # never shows the key
        return f"AnthropicModel(model={self.name!r}, base_url={self.base_url!r})"

    def check_settings(self, settings: ModelSettings | None) -> None:
        """Refuse what the Messages API has no field for (``seed``) or no range for, before a run starts."""
        if settings is None:
            return
        if settings.seed is not None:
            raise ConfigurationError(
                f"AnthropicModel cannot send seed={settings.seed}: the Messages API has no seed; leave it out "
                "of the model settings (or use a model whose API takes one)"
            )
        if settings.temperature is not None and settings.temperature > 1:
            raise ConfigurationError(
                f"AnthropicModel cannot send temperature={settings.temperature}: the Messages API takes 0 to 1"
            )

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API request body for ``request``."""
        system, messages = messages_to_wire(request.messages)
        body: dict[str, Any] = {"model": self.name, "max_tokens": self.max_tokens, "messages": messages}
        settings = settings_for(self.settings, request)
        parallel = self.parallel_tool_calls
        if settings is not None:
            self.check_settings(settings)
            body.update(settings.extra or {})
            for key in ("max_tokens", "temperature", "top_p"):
                if (value := getattr(settings, key)) is not None:
                    body[key] = value
            if settings.stop is not None:
                body["stop_sequences"] = list(settings.stop)
            if settings.parallel_tool_calls is not None:
                parallel = settings.parallel_tool_calls
        if system is not None:
            body["system"] = system
        if request.tools:
            body["tools"] = [tool_to_wire(t) for t in request.tools]
            choice = tool_choice_to_wire(request.tool_choice or "auto")
            if not parallel and choice["type"] in ("auto", "any", "tool"):
                choice["disable_parallel_tool_use"] = True
            if request.tool_choice is not None or "disable_parallel_tool_use" in choice:
                body["tool_choice"] = choice
        if self.stream if request.stream is None else request.stream:
            body["stream"] = True
        return body

    async def complete(self, request: ModelRequest) -> ModelReply:
        """One reply to ``request``, within its timeout (a ``ModelError`` if the endpoint fails)."""
        return await self.within(self._turns(request), request.timeout)

    async def _turns(self, request: ModelRequest) -> ModelReply:
        body = self.body(request)
        turns: list[Turn] = []
        while True:
            turn = await self.retrying(functools.partial(self._once, body, request))
            turns.append(turn)
            if turn.stop_reason != "pause_turn":
                return _joined(turns)
            if len(turns) > MAX_PAUSE_CONTINUATIONS:
                raise ModelResponseError(
                    f"the model paused its turn {len(turns)} times (stop_reason pause_turn); gave up continuing it"
                )
            # Continue the paused turn: the same request with the paused content as the assistant's turn.
            body = {**body, "messages": [*body["messages"], {"role": "assistant", "content": turn.blocks}]}

    async def _once(self, body: dict[str, Any], request: ModelRequest) -> Turn:
        return await self.post(self._url, body, lambda response: self._read_stream(response, request), _read_body)

    async def _read_stream(self, response: aiohttp.ClientResponse, request: ModelRequest) -> Turn:
        assembler = MessageAssembler()
        async for name, payload in self.events(response):
            if name == "ping":
                continue  # a keep-alive: nothing to decode
            piece = assembler.feed(_decode_event(payload))
            if piece and request.on_text is not None:
                request.on_text(piece)
            if assembler.stopped:
                break
        if assembler.stop_reason is None:
            raise ModelResponseError("the stream ended before a stop_reason")
        return assembler.turn()
