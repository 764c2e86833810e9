"""What a fake server answers with: reply specs, in either dialect's terms, and how streaming cuts them.

A ``Reply`` is a well-formed assistant reply (text, tool calls, a finish
reason in OpenAI's words, usage); a ``Raw`` is anything else (an HTTP error,
a malformed body, hand-written SSE). ``FakeServer`` renders a ``Reply`` as a
chat completion (``tether.testing.fake_server``) or as an Anthropic message
(``tether.testing.messages_wire``), streamed or not. Nothing here needs
aiohttp, so a test can build its script without a server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Reply:
    """A well-formed assistant reply; rendered streamed or not, as the request asks."""

    content: str | None = None
    tool_calls: tuple[tuple[str, str, str], ...] = ()  # (id, name, raw arguments string)
    finish_reason: str = "stop"
    usage: tuple[int, int] | None = (10, 5)  # (prompt_tokens, completion_tokens)
    latency: float = 0.0
    # Streamed only: sent as `data: {"error": ...}` halfway through, then the stream ends.
    stream_error: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Raw:
    """An arbitrary reply: HTTP errors, malformed bodies, hand-written SSE."""

    body: Mapping[str, Any] | str
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    latency: float = 0.0


ReplySpec = Reply | Raw
Responder = Callable[[dict[str, Any]], ReplySpec]


def text(
    content: str,
    finish_reason: str = "stop",
    usage: tuple[int, int] | None = (10, 5),
    *,
    latency: float = 0.0,
    stream_error: Mapping[str, Any] | None = None,
) -> Reply:
    """A wire reply with text only, for ``FakeServer`` (``ScriptedModel`` takes ``reply_text``)."""
    return Reply(content, (), finish_reason, usage, latency, stream_error)


def tool_calls(
    calls: Iterable[tuple[str, str, str]],
    finish_reason: str = "tool_calls",
    usage: tuple[int, int] | None = (10, 5),
    *,
    content: str | None = None,
    latency: float = 0.0,
    stream_error: Mapping[str, Any] | None = None,
) -> Reply:
    """A wire reply with tool calls, for ``FakeServer`` (``ScriptedModel`` takes ``reply_calls``).

    Calls are ``(id, name, arguments)``; arguments stay a raw string so tests can send bad JSON.
    """
    return Reply(content, tuple(calls), finish_reason, usage, latency, stream_error)


def raw(
    body: Mapping[str, Any] | str,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    *,
    latency: float = 0.0,
) -> Raw:
    """A dict is sent as JSON; a string is sent as-is (``application/json`` unless headers say otherwise)."""
    return Raw(body, status, tuple((headers or {}).items()), latency)


def pieces(s: str, n: int = 3) -> list[str]:
    # Several pieces per string, so clients must really concatenate fragments.
    size = max(1, -(-len(s) // n))
    return [s[i : i + size] for i in range(0, len(s), size)]
