"""OpenAI's Responses API (``POST {base_url}/responses``) over HTTP, streamed and not.

Translation only, as for ``openai_chat`` and ``anthropic``: the run state
machine judges the reply exactly as it judges a chat completion. What maps
to what:

- the leading system messages become ``instructions`` (joined); a later one
  is a ``system`` input item in its place. User messages are input
  messages; an assistant's text is an assistant message and each of its
  calls a ``function_call`` item (``call_id``, ``name``, ``arguments`` as
  written); a tool message is a ``function_call_output`` item.
- Tools go in the Responses shape (``{"type": "function", "name",
  "description", "parameters", "strict"}``), ``strict`` always said, since
  the API's default is true: ``true`` only for a tool offered in strict form
  (``strict_tools``). ``tool_choice`` ``auto`` / ``required`` / ``none`` are
  sent as they are, a named function as ``{"type": "function", "name":
  ...}``; ``response_format`` (the ``native`` output mode) is ``text.format``.
- Model settings: ``max_tokens`` is ``max_output_tokens``; ``temperature``,
  ``top_p`` and (with tools) ``parallel_tool_calls`` go as they are,
  ``extra`` as body fields. The Responses API has no ``seed`` and no
  ``stop``: settings naming either are a ``ConfigurationError`` before a
  run starts, never dropped.
- Output items: a ``function_call`` is a call, its ``arguments`` text
  unchanged; the ``output_text`` parts of ``message`` items are the answer;
  a ``refusal`` part makes the reply ``content_filter``. ``reasoning`` items
  are kept with the assistant message (``Message.provider_data``) and sent
  back, with their ``encrypted_content`` (asked for with ``include:
  ["reasoning.encrypted_content"]`` for reasoning models), followed by the
  very items that followed them, ids included, as the API demands. They go
  back only to the endpoint and model that wrote them, and only with the
  message as it was written: otherwise the message goes back as plain items,
  without reasoning. Any other item (a built-in tool's, ``web_search_call``,
  ``code_interpreter_call``, ...) is a ``ModelResponseError`` naming it:
  tether offers function tools only.
- ``status`` ``completed`` is ``tool_calls`` with function calls, else
  ``stop``; ``incomplete`` for ``max_output_tokens`` is ``length`` (a cut
  call never runs), for ``content_filter`` it is ``content_filter``;
  ``failed``, ``cancelled``, ``queued`` and ``in_progress`` (background
  mode), an incomplete reply for another reason and any other status are a
  ``ModelResponseError`` naming it.
- Usage: ``input_tokens`` (cached ones included) and ``output_tokens``
  (reasoning included).

Streamed, the reply is the terminal event's response (``response.completed``,
``response.incomplete``, ``response.failed``), read as a non-streamed body;
when that response lists no output, the items are assembled from the stream
(``response.output_item.added`` / ``.done``, text and arguments deltas).
Text deltas reach ``on_text`` and arguments deltas ``on_tool_delta``. An
``error`` event is a ``ModelResponseError`` naming its code, and so is a
stream that ends before a terminal event.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.core import nesting
from tether.core.errors import ConfigurationError, ModelResponseError
from tether.core.messages import Message, ModelReply, Usage, WireToolCall, reported_usage
from tether.core.settings import ModelSettings, merge_settings
from tether.models.base import ModelRequest, settings_for
from tether.models.base import output_mode as checked_output_mode
from tether.models.http import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_MAX_RETRIES,
    DEFAULT_READ_TIMEOUT,
    OPENAI_API,
    HTTPModel,
    openai_endpoint,
)
from tether.models.stream import error_message

if TYPE_CHECKING:
    import aiohttp  # annotations only: a request imports it (``tether.models.http``)

    from tether.tools.output import OutputMode

DEFAULT_BASE_URL = OPENAI_API
# The key of this adapter's part of ``Message.provider_data``.
PROVIDER_KEY = "openai_responses"
ENCRYPTED_REASONING = "reasoning.encrypted_content"
INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")
# OpenAI's reasoning models (o1, o3, o4-mini, gpt-5 and later, codex-mini), also behind a provider's prefix
# (``openai/gpt-5`` on OpenRouter, ``openai.gpt-5.5`` on Bedrock): their reasoning items go back between turns.
_REASONING_MODEL = re.compile(r"^(?:openai[/.])?(?:o\d|gpt-[5-9]|codex)", re.IGNORECASE)


def reasons(model: str) -> bool:
    """Whether ``model`` names one of OpenAI's reasoning models (whose requests ask for encrypted reasoning)."""
    return _REASONING_MODEL.match(model) is not None


# ------------------------------------------------------------------- requests


def tool_to_wire(spec: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat ``tools`` entry as a Responses API function tool."""
    function = spec.get("function")
    if spec.get("type") != "function" or not isinstance(function, dict):
        return spec  # already in the Responses API's shape
    tool: dict[str, Any] = {"type": "function", "name": function.get("name")}
    if function.get("description"):
        tool["description"] = function["description"]
    tool["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
    tool["strict"] = function.get("strict") is True  # the API's default is true: a tool's own schema says false
    return tool


def tool_choice_to_wire(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    function = choice.get("function")
    if choice.get("type") == "function" and isinstance(function, dict):
        return {"type": "function", "name": function.get("name")}
    return dict(choice)


def format_to_wire(response_format: dict[str, Any]) -> dict[str, Any]:
    """A chat ``response_format`` as the Responses API's ``text.format``."""
    schema = response_format.get("json_schema")
    if response_format.get("type") == "json_schema" and isinstance(schema, dict):
        return {"type": "json_schema", **schema}
    return dict(response_format)


def _digest(content: object, calls: Sequence[tuple[object, object, object]]) -> str:
    """What an assistant message says (its text and calls), as a short fingerprint."""
    text = json.dumps([content or "", [list(c) for c in calls]], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _plain(message: Message) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if message.content:
        items.append({"role": "assistant", "content": message.content})
    for call in message.tool_calls:
        items.append({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments})
    return items


def _replayed(message: Message, kept: list[Any]) -> list[dict[str, Any]] | None:
    """The output items ``kept`` with the message's text and calls put back; None if they no longer fit it.

    ``kept`` holds the reply's items with what the message holds taken out: a call's ``call_id``, ``name``
    and ``arguments``, and the text of the last ``output_text`` part (the others keep theirs).
    """
    calls = iter(message.tool_calls)
    content = message.content or ""
    items: list[dict[str, Any]] = []
    used = 0
    for item in kept:
        if not isinstance(item, dict):
            return None
        kind = item.get("type")
        if kind == "function_call":
            call = next(calls, None)
            if call is None:
                return None
            items.append({**item, "call_id": call.id, "name": call.name, "arguments": call.arguments})
        elif kind == "message":
            parts = []
            for part in item.get("content") or ():
                if not isinstance(part, dict):
                    return None
                if part.get("type") == "output_text":
                    text = part.get("text")
                    if "text" not in part:
                        part = {**part, "text": content[used:]}
                        used = len(content)
                    elif isinstance(text, str):
                        if not content.startswith(text, used):
                            return None
                        used += len(text)
                parts.append(part)
            items.append({**item, "content": parts})
        else:
            items.append(item)
    if used != len(content) or next(calls, None) is not None:
        return None
    while items and items[-1].get("type") == "reasoning":
        items.pop()  # a reasoning item goes back only with the item that followed it
    return items


def messages_to_wire(messages: Sequence[Message], origin: dict[str, str]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(instructions, input)`` in the Responses API's shape.

    An assistant message's reasoning items go back only to the ``origin`` (base URL and model) that wrote them,
    and only with the message as it was written (its text and calls, ids included).
    """
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.role
        if role == "system":
            if not items:
                instructions.append(message.content or "")
            else:
                items.append({"role": "system", "content": message.content or ""})
        elif role == "user":
            items.append({"role": "user", "content": message.content or ""})
        elif role == "tool":
            result = message.content or ""
            items.append({"type": "function_call_output", "call_id": message.tool_call_id, "output": result})
        else:
            data = message.provider_data.get(PROVIDER_KEY) if isinstance(message.provider_data, dict) else None
            replayed = None
            if (
                isinstance(data, dict)
                and all(data.get(k) == origin[k] for k in ("base_url", "model"))
                and data.get("digest")
                == _digest(message.content, [(c.id, c.name, c.arguments) for c in message.tool_calls])
            ):
                replayed = _replayed(message, data.get("items") or [])
            items.extend(_plain(message) if replayed is None else replayed)
    return ("\n\n".join(instructions) if instructions else None), items


# -------------------------------------------------------------------- replies


def parse_usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    return reported_usage((usage.get("input_tokens"),), usage.get("output_tokens"))


def _status_problem(body: dict[str, Any]) -> str:
    status = body.get("status")
    if status == "failed" or (status is None and body.get("error")):
        error = body.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        return f"the response failed: {f'{code}: ' if code else ''}{error_message(error or 'no error given')}"
    if status in ("queued", "in_progress"):
        return f"the response is {status} (background mode): tether does not poll for it; leave background out"
    if status == "cancelled":
        return "the response was cancelled"
    if status is None:
        return "the response has no status"
    return f"unknown response status {status!r}"


def _kept(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The output items to keep with the assistant message: what the message itself holds taken out."""
    kept: list[dict[str, Any]] = []
    last_text: tuple[int, int] | None = None
    for item in output:
        kind = item.get("type")
        if kind == "function_call":
            kept.append({k: v for k, v in item.items() if k not in ("call_id", "name", "arguments")})
        elif kind == "message":
            parts = [dict(p) if isinstance(p, dict) else p for p in item.get("content") or ()]
            for index, part in enumerate(parts):
                if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    last_text = (len(kept), index)
            kept.append({**item, "content": parts})
        else:
            kept.append(item)
    if last_text is not None:
        kept[last_text[0]]["content"][last_text[1]].pop("text", None)  # the message's content holds it
    return kept


def parse_response(body: Any, origin: dict[str, str] | None = None) -> ModelReply:
    """A ``ModelReply`` from a decoded Response object; its reasoning items kept for ``origin``."""
    if not isinstance(body, dict):
        raise ModelResponseError("response body is not a JSON object")
    status = body.get("status")
    if status not in ("completed", "incomplete"):
        raise ModelResponseError(_status_problem(body))
    output = body.get("output")
    if not isinstance(output, list):
        raise ModelResponseError("the response has no output list")
    texts: list[str] = []
    calls: list[WireToolCall] = []
    refused = reasoning = False
    for item in output:
        if not isinstance(item, dict):
            raise ModelResponseError("an output item is not an object")
        kind = item.get("type")
        if kind == "message":
            parts = item.get("content") or []
            if not isinstance(parts, list):
                raise ModelResponseError("a message item's content is not a list")
            for part in parts:
                if not isinstance(part, dict):
                    raise ModelResponseError("a message content part is not an object")
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
                elif part.get("type") == "refusal":
                    refused = True
        elif kind == "function_call":
            calls.append(WireToolCall(item.get("call_id"), "function", item.get("name"), item.get("arguments")))
        elif kind == "reasoning":
            reasoning = True
        else:
            raise ModelResponseError(
                f"the reply holds a {kind!r} item: built-in tools are not supported (offer function tools only)"
                if isinstance(kind, str)
                else "an output item has no type"
            )
    if refused:
        finish = "content_filter"
    elif status == "incomplete":
        details = body.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        if reason not in INCOMPLETE_REASONS:
            raise ModelResponseError(f"the response is incomplete ({reason or 'no reason given'})")
        finish = INCOMPLETE_REASONS[reason]
    else:
        finish = "tool_calls" if calls else "stop"
    provider_data = None
    content = "".join(texts) or None
    if reasoning and origin is not None:
        digest = _digest(content, [(c.id, c.name, c.arguments) for c in calls])
        provider_data = {PROVIDER_KEY: {**origin, "digest": digest, "items": _kept(output)}}
    model = body.get("model")
    return ModelReply(
        choices=1,
        finish_reason=finish,
        content=content,
        tool_calls=tuple(calls),
        usage=parse_usage(body.get("usage")),
        model=model if isinstance(model, str) else None,
        provider_data=provider_data,
    )


def _decode(payload: str | bytes, what: str) -> Any:
    try:
        return nesting.loads(payload, nesting.MAX_REPLY_DEPTH)
    except nesting.REFUSED as exc:
        raise ModelResponseError(f"{what} is {exc}") from None
    except ValueError:
        raise ModelResponseError(f"{what} is not JSON") from None


@dataclass(slots=True)
class ResponseAssembler:
    """Assemble Responses SSE events into the Response object a non-streamed request returns."""

    on_text: Callable[[str], None] | None = None
    on_tool_delta: Callable[[int, str | None, str | None, str], None] | None = None
    items: dict[int, dict[str, Any]] = field(default_factory=dict)  # by output_index: as added, or as done
    done: set[int] = field(default_factory=set)
    # Text (or refusal) pieces by (output_index, content_index), and arguments pieces by output_index: joined once.
    parts: dict[tuple[int, int], tuple[str, list[str]]] = field(default_factory=dict)
    arguments: dict[int, list[str]] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)  # output_index -> the call's position among the calls
    final: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any]) -> None:
        """Take one decoded event."""
        kind = event.get("type")
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            piece = event.get("delta")
            if isinstance(piece, str):
                index = self._index(event)
                part = "output_text" if kind == "response.output_text.delta" else "refusal"
                content_index = event.get("content_index")
                key = (index, content_index if isinstance(content_index, int) else 0)
                self.parts.setdefault(key, (part, []))[1].append(piece)
                if part == "output_text" and self.on_text is not None:
                    self.on_text(piece)
        elif kind == "response.function_call_arguments.delta":
            index, piece = self._index(event), event.get("delta")
            if isinstance(piece, str):
                self.arguments.setdefault(index, []).append(piece)
                if self.on_tool_delta is not None and index in self.calls:
                    self.on_tool_delta(self.calls[index], None, None, piece)
        elif kind == "response.output_item.added" or kind == "response.output_item.done":
            self._item(event, kind.endswith("done"))
        elif kind == "response.function_call_arguments.done":
            index = self._index(event)
            if isinstance(event.get("arguments"), str) and index in self.items:
                self.items[index] = {**self.items[index], "arguments": event["arguments"]}  # the whole text
                self.arguments.pop(index, None)
        elif kind in TERMINAL_EVENTS:
            response = event.get("response")
            if not isinstance(response, dict):
                raise ModelResponseError(f"{kind} without a response object")
            # The event says how the response ended: one that did not complete is never read as completed
            # (any other status the response gives is judged as it would be unstreamed).
            status = response.get("status")
            if status is None:
                response = {**response, "status": kind.removeprefix("response.")}
            elif status == "completed" and kind != "response.completed":
                raise ModelResponseError(f"{kind} carries a response whose status is {status!r}")
            self.final = response
        elif kind == "error":
            nested = event.get("error")
            error: dict[str, Any] = nested if isinstance(nested, dict) else event
            code = error.get("code") or error.get("type") or "error"
            raise ModelResponseError(f"error event in stream: {code}: {error_message(error)}")
        # response.created, .in_progress, content parts, reasoning deltas, ...: the items and the
        # terminal response hold all of it.

    def _index(self, event: dict[str, Any]) -> int:
        index = event.get("output_index")
        if not isinstance(index, int):
            raise ModelResponseError(f"{event.get('type')} without an integer output_index")
        return index

    def _item(self, event: dict[str, Any], done: bool) -> None:
        index, item = self._index(event), event.get("item")
        if not isinstance(item, dict):
            raise ModelResponseError(f"{event.get('type')} without an item object")
        self.items[index] = item
        if done:
            self.done.add(index)
        elif item.get("type") == "function_call" and index not in self.calls:
            self.calls[index] = len(self.calls)
            if self.on_tool_delta is not None:
                ident, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
                self.on_tool_delta(
                    self.calls[index],
                    ident if isinstance(ident, str) else None,
                    name if isinstance(name, str) else None,
                    arguments if isinstance(arguments, str) else "",
                )

    def response(self) -> dict[str, Any]:
        """The terminal event's response, its output assembled from the stream if it lists none."""
        if self.final is None:
            raise ModelResponseError("the stream ended before response.completed")
        output = self.final.get("output")
        if isinstance(output, list) and output:
            return self.final
        return {**self.final, "output": [self._assembled(i) for i in sorted(self.items)]}

    def _assembled(self, index: int) -> dict[str, Any]:
        item = self.items[index]
        if index in self.done:
            return item
        item = dict(item)
        if item.get("type") == "function_call" and index in self.arguments:
            start = item.get("arguments")
            item["arguments"] = (start if isinstance(start, str) else "") + "".join(self.arguments[index])
        elif item.get("type") == "message" and any(i == index for i, _ in self.parts):
            pieces = sorted((c, p) for (i, c), p in self.parts.items() if i == index)
            field_of = {"output_text": "text", "refusal": "refusal"}
            item["content"] = [{"type": kind, field_of[kind]: "".join(text)} for _, (kind, text) in pieces]
        return item


# ---------------------------------------------------------------------- model


class OpenAIResponsesModel(HTTPModel):
    """A model behind OpenAI's Responses API (or a server speaking it: Azure, Bedrock, OpenRouter, DeepSeek).

    Reads ``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``; the adapter posts to
    ``{base_url}/responses``), ``OPENAI_API_KEY`` and ``OPENAI_MODEL`` for anything not given. A reply larger
    than ``max_reply_bytes`` (streamed or not) is a ``ReplyTooLarge`` error, read no further. Example::

        agent = Agent(OpenAIResponsesModel("gpt-5-mini"), load_toolset("calc"))
    """

    key_variable = "OPENAI_API_KEY"
    provider = "openai"  # for traces (gen_ai.provider.name)
    output_modes: tuple[OutputMode, ...] = ("native", "tool", "prompted")

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool = False,
        max_retries: int = DEFAULT_MAX_RETRIES,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        extra_body: dict[str, Any] | None = None,
        output_mode: OutputMode = "native",
        strict_tools: bool | None = None,
        encrypted_reasoning: bool | None = None,
        settings: ModelSettings | None = None,
    ) -> None:
        """``settings``: this model's own, under the agent's and the run's; ``extra_body`` is a shorthand for
        ``settings=ModelSettings(extra=...)``.

        ``strict_tools``: the server enforces OpenAI's strict mode on tool schemas, as for ``OpenAIChatModel``
        (``None``: only ``api.openai.com``).

        ``encrypted_reasoning``: ask for the reasoning items' ``encrypted_content`` (``include``) so they can
        be sent back on the next request; ``None`` (the default): for OpenAI's reasoning models by name (o1,
        o3, o4-mini, gpt-5 and later, codex), which other models refuse. Reasoning items a reply carries are
        kept and sent back either way.
        """
        self.name = model or os.environ.get("OPENAI_MODEL") or ""
        if not self.name:
            raise ConfigurationError("no model named: pass OpenAIResponsesModel(model=...) or set OPENAI_MODEL")
        self.output_mode = checked_output_mode(output_mode, self.output_modes, "OpenAIResponsesModel")
        self.base_url, headers = openai_endpoint("OpenAIResponsesModel", base_url, api_key)
        super().__init__(
            headers,
            max_retries=max_retries,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_reply_bytes=max_reply_bytes,
        )
        self.stream = stream
        self.strict_tools = self.base_url == DEFAULT_BASE_URL if strict_tools is None else strict_tools
        self.encrypted_reasoning = reasons(self.name) if encrypted_reasoning is None else encrypted_reasoning
        self.settings = merge_settings(ModelSettings(extra=extra_body) if extra_body else None, settings)
        self.check_settings(self.settings)
        self._url = f"{self.base_url}/responses"
        # Whose reasoning items this adapter may send back: its own endpoint's and model's.
        self._origin = {"base_url": self.base_url, "model": self.name}

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIResponsesModel(model={self.name!r}, base_url={self.base_url!r})"

    def check_settings(self, settings: ModelSettings | None) -> None:
        """Refuse what the Responses API has no field for (``seed``, ``stop``), before a run starts."""
        for name in ("seed", "stop"):
            if settings is not None and (value := getattr(settings, name)) is not None:
                raise ConfigurationError(
                    f"OpenAIResponsesModel cannot send {name}={value!r}: the Responses API has no {name}; leave "
                    "it out of the model settings (or use OpenAIChatModel, --protocol openai)"
                )

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The Responses API request body for ``request``."""
        instructions, items = messages_to_wire(request.messages, self._origin)
        settings = settings_for(self.settings, request)
        body: dict[str, Any] = {"model": self.name, "input": items}
        if settings is not None:
            self.check_settings(settings)
            body.update(settings.extra or {})
        if instructions is not None:
            body["instructions"] = instructions
        if request.tools:
            body["tools"] = [tool_to_wire(t) for t in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = tool_choice_to_wire(request.tool_choice)
        if settings is not None:
            if settings.max_tokens is not None:
                body["max_output_tokens"] = settings.max_tokens
            for key in ("temperature", "top_p"):
                if (value := getattr(settings, key)) is not None:
                    body[key] = value
            if settings.parallel_tool_calls is not None and request.tools:
                body["parallel_tool_calls"] = settings.parallel_tool_calls
        if request.response_format is not None:
            body["text"] = {**(body.get("text") or {}), "format": format_to_wire(request.response_format)}
        if self.encrypted_reasoning:
            include = list(body.get("include") or ())
            if ENCRYPTED_REASONING not in include:
                body["include"] = [*include, ENCRYPTED_REASONING]
        if self.stream if request.stream is None else request.stream:
            body["stream"] = True
        return body

    async def complete(self, request: ModelRequest) -> ModelReply:
        """One reply to ``request``, retried on rate limits and server errors, within its timeout."""
        body = self.body(request)
        return await self.within(self.retrying(lambda: self._once(body, request)), request.timeout)

    async def _once(self, body: dict[str, Any], request: ModelRequest) -> ModelReply:
        return await self.post(self._url, body, lambda response: self._read_stream(response, request), self._read)

    def _read(self, raw: bytes) -> ModelReply:
        return parse_response(_decode(raw, "response body"), self._origin)

    async def _read_stream(self, response: aiohttp.ClientResponse, request: ModelRequest) -> ModelReply:
        assembler = ResponseAssembler(request.on_text, request.on_tool_delta)
        async for _, payload in self.events(response):
            if payload == "[DONE]":
                break
            event = _decode(payload, "stream event")
            if not isinstance(event, dict):
                raise ModelResponseError("stream event is not a JSON object")
            assembler.feed(event)
            if assembler.final is not None:
                break
        return parse_response(assembler.response(), self._origin)
