"""OpenAI-compatible ``/chat/completions`` over HTTP (aiohttp, see ``models/http.py``).

Translation only: the reply's shape is checked by the run state machine.
Two wire facts are normalised here because they carry no information: a
tool call without ``type`` (Mistral; every streamed fragment after the
first) is a function call, and list content keeps only its text parts.
A message's ``refusal`` text (streamed: ``refusal`` pieces) makes the reply
``content_filter`` whatever else it holds, as a Responses ``refusal`` part
does: the run ends ``content_filtered`` and none of its calls runs.
HTTP failures map to ``ModelError`` subclasses; 429 and 5xx are retried
with backoff honouring ``Retry-After``; 401/403 are not.

Model settings (``ModelSettings``) are body fields of the same names:
``temperature``, ``max_tokens``, ``top_p``, ``seed``, ``stop`` (a list),
and ``parallel_tool_calls`` (with tools only: OpenAI refuses it without);
``extra`` keys are sent as they are, under the typed ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tether.core import nesting
from tether.core.deferred import deferred
from tether.core.errors import ConfigurationError, ModelResponseError
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

if TYPE_CHECKING:
    import aiohttp  # annotations only: a request imports it (``tether.models.http``)

    from tether.core import messages
    from tether.core.messages import Message, ModelReply
    from tether.models import stream as chunks
    from tether.tools.output import OutputMode
else:
    # Reading a reply needs them, building the model does not (issue 19: the cost of the import).
    chunks = deferred("tether.models.stream")
    messages = deferred("tether.core.messages")

DEFAULT_BASE_URL = OPENAI_API


@dataclass(frozen=True, slots=True)
class WireCompat:
    """Per-provider wire quirks, off by default.

    ``null_content_as_empty``: send ``""`` instead of ``null`` as the content
    of an assistant message that only carries tool calls (llama.cpp's
    server rejects ``null``).
    ``tool_results_as_user``: send each tool result as a user turn marked as
    tool output, for chat formats that drop ``role=tool`` messages
    (llama-cpp-python's ``chatml-function-calling``).
    ``explicit_tool_choice``: send ``tool_choice: "auto"`` with tools, for
    servers that ignore tools unless a choice is named (llama-cpp-python).
    ``no_stream_with_auto_tools``: make a request with tools and automatic
    choice without streaming, for servers that answer such a stream with an
    empty body (llama-cpp-python).
    ``max_tokens_means_length``: a reply that used all of ``max_tokens`` is
    truncated whatever its ``finish_reason`` says (llama-cpp-python reports a
    forced call cut off mid-arguments as ``tool_calls``). This only ever
    refuses more.
    ``no_json_schema``: the server refuses ``response_format`` of type
    ``json_schema`` (llama-cpp-python takes ``text`` and ``json_object``
    only), so structured output cannot use the ``native`` mode: the model's
    ``output_modes`` leave it out and its default is ``tool``.
    """

    null_content_as_empty: bool = False
    tool_results_as_user: bool = False
    explicit_tool_choice: bool = False
    no_stream_with_auto_tools: bool = False
    max_tokens_means_length: bool = False
    no_json_schema: bool = False


def message_to_wire(message: Message, compat: WireCompat = WireCompat()) -> dict[str, Any]:
    if message.role == "tool":
        if compat.tool_results_as_user:
            marked = f'<tool_result call_id="{message.tool_call_id}">\n{message.content or ""}\n</tool_result>'
            return {"role": "user", "content": marked}
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content or ""}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
        if message.content is None and compat.null_content_as_empty:
            wire["content"] = ""
    return wire


def parse_reply(body: Any) -> ModelReply:
    """A ``ModelReply`` from a decoded non-streamed response body."""
    if not isinstance(body, dict):
        raise ModelResponseError("response body is not a JSON object")
    if "error" in body and not body.get("choices"):
        raise ModelResponseError(f"error in response: {chunks.error_message(body['error'])}")
    choices = body.get("choices")
    usage = chunks.parse_usage(body.get("usage"))
    if not isinstance(choices, list) or not choices:
        return messages.ModelReply(choices=0, finish_reason=None, usage=usage)
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise ModelResponseError("the first choice has no message object")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise ModelResponseError("tool_calls is not a list")
    calls = []
    for raw in raw_calls:
        raw = raw if isinstance(raw, dict) else {}
        function = raw.get("function")
        if not isinstance(function, dict):
            function = {}
        calls.append(
            messages.WireToolCall(
                id=raw.get("id"),
                type="function" if raw.get("type") is None else raw["type"],
                name=function.get("name"),
                arguments=function.get("arguments"),
            )
        )
    finish_reason = choice.get("finish_reason")
    if chunks.refused(message.get("refusal")):
        finish_reason = "content_filter"
    return messages.ModelReply(
        choices=len(choices),
        finish_reason=finish_reason,
        content=chunks.content_text(message.get("content")) or None,  # "" and null both mean no text
        tool_calls=tuple(calls),
        usage=usage,
        model=body.get("model") if isinstance(body.get("model"), str) else None,
    )


class OpenAIChatModel(HTTPModel):
    """A model behind an OpenAI-compatible chat-completions endpoint.

    Reads ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``OPENAI_MODEL`` for
    anything not given. A reply larger than ``max_reply_bytes`` (streamed or
    not) is a ``ReplyTooLarge`` error, read no further. Example::

        model = OpenAIChatModel(model="gpt-4o-mini")
        reply = await model.complete(ModelRequest(messages=[Message("user", "hi")]))
    """

    key_variable = "OPENAI_API_KEY"
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
        compat: WireCompat = WireCompat(),
        extra_body: dict[str, Any] | None = None,
        output_mode: OutputMode | None = None,
        strict_tools: bool | None = None,
        settings: ModelSettings | None = None,
    ) -> None:
        """``strict_tools``: the server enforces OpenAI's strict mode on tool schemas (``"strict": true``).

        An ``Agent`` then offers tools in that form where their schema allows; otherwise each tool goes with
        its own schema. ``None`` (the default) means: only for OpenAI's own endpoint, ``api.openai.com``.
        The CLI takes it from the provider profile (``Provider.strict_tools``).

        ``settings``: this model's own settings, under the agent's and the run's. ``extra_body`` is a
        shorthand for ``settings=ModelSettings(extra=...)`` (both given: merged key by key, ``settings``
        winning).
        """
        self.name = model or os.environ.get("OPENAI_MODEL") or ""
        if compat.no_json_schema:
            self.output_modes = ("tool", "prompted")
        # How a run with an output_type asks for its answer (default: native when the server takes a
        # json_schema, else tool); the CLI takes it from the provider profile.
        self.output_mode = checked_output_mode(
            output_mode or self.output_modes[0], self.output_modes, "OpenAIChatModel"
        )
        if not self.name:
            raise ConfigurationError("no model named: pass OpenAIChatModel(model=...) or set OPENAI_MODEL")
        self.base_url, headers = openai_endpoint("OpenAIChatModel", base_url, api_key)
        super().__init__(
            headers,
            max_retries=max_retries,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_reply_bytes=max_reply_bytes,
        )
        self.stream = stream
        self.compat = compat
        self.strict_tools = self.base_url == DEFAULT_BASE_URL if strict_tools is None else strict_tools
        self.settings = merge_settings(ModelSettings(extra=extra_body) if extra_body else None, settings)
        self._url = f"{self.base_url}/chat/completions"
        # The last response_format sent, its decoded text and its text: a run sends the same one each step.
        self._format: tuple[object, object, str] | None = None

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChatModel(model={self.name!r}, base_url={self.base_url!r})"

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The chat completions request body for ``request``."""
        body: dict[str, Any] = {
            "model": self.name,
            "messages": [message_to_wire(m, self.compat) for m in request.messages],
        }
        settings = settings_for(self.settings, request)
        if settings is not None and settings.extra:
            body.update(settings.extra)
        choice = request.tool_choice
        if request.tools:
            body["tools"] = list(request.tools)
            if choice is None and self.compat.explicit_tool_choice:
                choice = "auto"
        if choice is not None:
            body["tool_choice"] = choice
        if settings is not None:
            _sampling(body, settings, bool(request.tools))
        if request.response_format is not None:
            body["response_format"] = request.response_format
        auto_tools = bool(request.tools) and choice in (None, "auto")
        stream = self.stream if request.stream is None else request.stream
        if stream and not (auto_tools and self.compat.no_stream_with_auto_tools):
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def encode(self, body: Any) -> str:
        """The JSON text of ``body``, reusing the text of the last ``response_format`` when it is unchanged."""
        fmt = body.get("response_format") if isinstance(body, dict) else None
        if fmt is None:
            return json.dumps(body)
        known = self._format
        if known is None or known[0] is not fmt or known[1] != fmt:  # a new dict, or the same one changed
            text = json.dumps(fmt)
            known = self._format = (fmt, json.loads(text), text)
        rest = dict(body)
        del rest["response_format"]
        return f'{json.dumps(rest)[:-1]}, "response_format": {known[2]}}}'

    async def complete(self, request: ModelRequest) -> ModelReply:
        """One reply to ``request``, retried on rate limits and server errors, within its timeout."""
        body = self.body(request)
        return await self.within(self.retrying(lambda: self._once(body, request)), request.timeout)

    async def _once(self, body: dict[str, Any], request: ModelRequest) -> ModelReply:
        reply = await self.post(self._url, body, lambda response: self._read_stream(response, request), _read_body)
        limit = body.get("max_tokens")  # what was sent, from a setting or extra
        if self.compat.max_tokens_means_length and isinstance(limit, int) and reply.usage.output_tokens >= limit:
            reply = replace(reply, finish_reason="length")
        return reply

    async def _read_stream(self, response: aiohttp.ClientResponse, request: ModelRequest) -> ModelReply:
        assembler = chunks.Assembler()
        async for _, payload in self.events(response):
            if payload == "[DONE]":
                break
            chunk = _decode_event(payload)
            piece = assembler.feed(chunk)
            if piece and request.on_text is not None:
                request.on_text(piece)
            if request.on_tool_delta is not None:
                _report_tool_deltas(chunk, request.on_tool_delta)
        if assembler.finish_reason is None:
            raise ModelResponseError("the stream ended before a finish_reason")
        return assembler.reply()


def _sampling(body: dict[str, Any], settings: ModelSettings, tools: bool) -> None:
    """Write ``settings`` into a chat-completions ``body`` (over the same keys of ``extra``)."""
    for key in ("max_tokens", "temperature", "top_p", "seed"):
        value = getattr(settings, key)
        if value is not None:
            body[key] = value
    if settings.stop is not None:
        body["stop"] = list(settings.stop)
    if settings.parallel_tool_calls is not None and tools:  # OpenAI refuses it in a request without tools
        body["parallel_tool_calls"] = settings.parallel_tool_calls


def _read_body(raw: bytes) -> ModelReply:
    try:
        decoded = nesting.loads(raw, nesting.MAX_REPLY_DEPTH)
    except nesting.REFUSED as exc:
        raise ModelResponseError(f"response body is {exc}") from None
    except ValueError:
        raise ModelResponseError("response body is not JSON") from None
    return parse_reply(decoded)


def _report_tool_deltas(chunk: dict[str, Any], report: Callable[[int, str | None, str | None, str], None]) -> None:
    """Hand each tool-call fragment of an (already assembled, so well-formed) chunk's choice 0 to ``report``."""
    first = next((c for c in chunk.get("choices") or () if c.get("index", 0) == 0), None)
    delta = first.get("delta") if first is not None else None
    for fragment in (delta if isinstance(delta, dict) else {}).get("tool_calls") or ():
        function = fragment.get("function") or {}
        ident, name, arguments = fragment.get("id"), function.get("name"), function.get("arguments")
        report(
            fragment.get("index") if isinstance(fragment.get("index"), int) else 0,
            ident if isinstance(ident, str) else None,
            name if isinstance(name, str) else None,
            arguments if isinstance(arguments, str) else "",
        )


def _decode_event(payload: str) -> dict[str, Any]:
    try:
        chunk = nesting.loads(payload, nesting.MAX_REPLY_DEPTH)
    except nesting.REFUSED as exc:
        raise ModelResponseError(f"stream event is {exc}") from None
    except ValueError:
        raise ModelResponseError("stream event is not JSON") from None
    if not isinstance(chunk, dict):
        raise ModelResponseError("stream event is not a JSON object")
    return chunk
