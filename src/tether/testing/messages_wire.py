"""The fake server's second dialect: Anthropic's Messages API, from the same scripts.

A ``Reply`` spec says ``finish_reason`` in OpenAI's words; it is rendered with
the matching ``stop_reason`` (``stop`` → ``end_turn``, ``tool_calls`` →
``tool_use``, ``length`` → ``max_tokens``, ``content_filter`` → ``refusal``;
any other word, e.g. ``pause_turn`` or ``stop_sequence``, is sent as it is).
A call's raw arguments text is spliced into ``input`` unchanged when it is
JSON (so a repeated key or ``NaN`` reaches the client as written); text that
is not JSON, which the real API never sends whole, is sent as a JSON string.
Streamed, the text is cut into ``input_json_delta`` pieces exactly as written.

Responders (``SCENARIOS``) read requests in chat-completions form:
``chat_request`` rewrites a Messages request into it.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from tether.testing.replies import Reply, pieces

STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}

_dumps = functools.partial(json.dumps, ensure_ascii=False)


def _usage(reply: Reply, output: int | None = None) -> dict[str, int] | None:
    if reply.usage is None:
        return None
    return {"input_tokens": reply.usage[0], "output_tokens": reply.usage[1] if output is None else output}


def _slot(index: int) -> str:
    return f"\x00input {index}\x00"


def message_text(reply: Reply, ident: str, model: str) -> str:
    """The non-streamed response body, as JSON text."""
    content: list[dict[str, Any]] = []
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    for index, (cid, name, _) in enumerate(reply.tool_calls):
        content.append({"type": "tool_use", "id": cid, "name": name, "input": _slot(index)})
    body: dict[str, Any] = {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_REASONS.get(reply.finish_reason, reply.finish_reason),
        "stop_sequence": None,
    }
    usage = _usage(reply)
    if usage is not None:
        body["usage"] = usage
    text = _dumps(body)
    for index, (_, _, arguments) in enumerate(reply.tool_calls):
        try:
            json.loads(arguments)
            spliced = arguments
        except RecursionError:  # nested too deep for Python to decode: sent as written, for the client to refuse
            spliced = arguments
        except ValueError:
            spliced = _dumps(arguments)
        text = text.replace(_dumps(_slot(index)), spliced, 1)
    return text


def stream_events(reply: Reply, ident: str, model: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event, data)`` pairs the Messages API would stream for this reply, in order."""
    start: dict[str, Any] = {"id": ident, "type": "message", "role": "assistant", "model": model, "content": [],
                             "stop_reason": None, "stop_sequence": None}  # fmt: skip
    usage = _usage(reply, output=1)
    if usage is not None:
        start["usage"] = usage
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    events.append(("ping", {"type": "ping"}))
    index = 0

    def block(first: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": first}))
        for delta in deltas:
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))

    if reply.content:
        block({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces(reply.content)])
        index += 1
    for cid, name, arguments in reply.tool_calls:
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *pieces(arguments)]]
        block({"type": "tool_use", "id": cid, "name": name, "input": {}}, deltas)
        index += 1
    if reply.stream_error is not None:
        error = {"type": reply.stream_error.get("type", "api_error"), "message": reply.stream_error.get("message")}
        return [*events[: len(events) // 2 + 1], ("error", {"type": "error", "error": error})]
    delta: dict[str, Any] = {"type": "message_delta",
                             "delta": {"stop_reason": STOP_REASONS.get(reply.finish_reason, reply.finish_reason),
                                       "stop_sequence": None}}  # fmt: skip
    if reply.usage is not None:
        delta["usage"] = {"output_tokens": reply.usage[1]}
    events.append(("message_delta", delta))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def sse(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [f"event: {name}\ndata: {_dumps(data)}\n\n" for name, data in events]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages request rewritten in chat-completions form, for responders."""
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _text(body["system"])})
    for turn in body.get("messages") or ():
        content = turn.get("content")
        if turn.get("role") == "assistant":
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            calls = [
                {"id": b.get("id"), "type": "function",
                 "function": {"name": b.get("name"), "arguments": _dumps(b.get("input"))}}
                for b in blocks if b.get("type") == "tool_use"
            ]  # fmt: skip
            message: dict[str, Any] = {"role": "assistant", "content": _text(blocks) or None}
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            continue
        if isinstance(content, str):
            messages.append({"role": "user", "content": content})
            continue
        for b in content or ():
            if b.get("type") == "tool_result":
                messages.append(
                    {"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _text(b.get("content"))}
                )
            elif b.get("type") == "text":
                messages.append({"role": "user", "content": b.get("text")})
    tools = [
        {"type": "function", "function": {"name": t.get("name"), "description": t.get("description", ""),
                                          "parameters": t.get("input_schema")}}
        for t in body.get("tools") or ()
    ]  # fmt: skip
    request: dict[str, Any] = {"model": body.get("model"), "messages": messages, "stream": bool(body.get("stream"))}
    if tools:
        request["tools"] = tools
    return request
