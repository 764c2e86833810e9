"""The fake server's third dialect: OpenAI's Responses API, from the same scripts.

A ``Reply`` spec says ``finish_reason`` in chat-completions words; it is
rendered as the Response ``status`` that means it: ``stop`` and
``tool_calls`` are ``completed``, ``length`` is ``incomplete`` for
``max_output_tokens`` and ``content_filter`` ``incomplete`` for
``content_filter``; any other word is sent as the status itself (``failed``,
``queued``, ...). The text is one ``message`` item, each call a
``function_call`` item whose ``arguments`` is the raw text as written.
Streamed, the events are those OpenAI sends (``response.created``, an
``output_item.added`` / ``.done`` pair per item, text and arguments deltas
cut in pieces, then ``response.completed`` or ``response.incomplete`` with
the whole response; ``events_of`` streams any Response object so); a
``stream_error`` cuts the stream halfway with an ``error`` event.

Responders (``SCENARIOS``) read requests in chat-completions form:
``chat_request`` rewrites a Responses request into it.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

from tether.testing.replies import Reply, pieces

_dumps = functools.partial(json.dumps, ensure_ascii=False)

INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _items(reply: Reply, ident: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.content:
        part = {"type": "output_text", "text": reply.content, "annotations": []}
        items.append({"type": "message", "id": f"msg_{ident}", "status": "completed", "role": "assistant",
                      "content": [part]})  # fmt: skip
    for index, (cid, name, arguments) in enumerate(reply.tool_calls):
        items.append({"type": "function_call", "id": f"fc_{ident}_{index}", "call_id": cid, "name": name,
                      "arguments": arguments, "status": "completed"})  # fmt: skip
    return items


def response_body(reply: Reply, ident: str, model: str) -> dict[str, Any]:
    """The non-streamed Response object."""
    reason = INCOMPLETE.get(reply.finish_reason)
    status = "incomplete" if reason else reply.finish_reason
    if status in ("stop", "tool_calls"):
        status = "completed"
    body: dict[str, Any] = {
        "id": f"resp_{ident}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "model": model,
        "output": _items(reply, ident),
    }
    if reply.usage is not None:
        given, made = reply.usage
        body["usage"] = {"input_tokens": given, "output_tokens": made, "total_tokens": given + made}
    return body


def stream_events(reply: Reply, ident: str, model: str) -> list[dict[str, Any]]:
    """The events the Responses API would stream for this reply, in order."""
    events = events_of(response_body(reply, ident, model))
    if reply.stream_error is None:
        return events
    error = {"type": "error", "code": reply.stream_error.get("code", "server_error"),
             "message": reply.stream_error.get("message"), "param": None}  # fmt: skip
    cut = events[: (len(events) - 1) // 2 + 1]
    return [*cut, {**error, "sequence_number": len(cut)}]


def events_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The events that stream ``response`` (any Response object), in order, ending with its terminal event.

    Each output item is added, grown by its deltas (text and refusal parts of a message piece by piece, a
    call's arguments likewise) and done; any other item (reasoning, ...) is added and done whole.
    """
    start = {**response, "status": "in_progress", "output": [], "incomplete_details": None}
    start.pop("usage", None)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for index, item in enumerate(response.get("output") or ()):
        kind, ident = item.get("type"), item.get("id")
        if kind == "message":
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "status": "in_progress", "content": []}})  # fmt: skip
            for position, part in enumerate(item.get("content") or ()):
                where = {"item_id": ident, "output_index": index, "content_index": position}
                key = "refusal" if part.get("type") == "refusal" else "text"
                events.append({"type": "response.content_part.added", **where, "part": {**part, key: ""}})
                name = "response.refusal" if key == "refusal" else "response.output_text"
                events += [{"type": f"{name}.delta", **where, "delta": p} for p in pieces(part.get(key) or "")]
                events.append({"type": f"{name}.done", **where, key: part.get(key)})
                events.append({"type": "response.content_part.done", **where, "part": part})
        elif kind == "function_call":
            where = {"item_id": ident, "output_index": index}
            arguments = item.get("arguments")
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "status": "in_progress", "arguments": ""}})  # fmt: skip
            if isinstance(arguments, str):
                events += [
                    {"type": "response.function_call_arguments.delta", **where, "delta": p} for p in pieces(arguments)
                ]
            events.append({"type": "response.function_call_arguments.done", **where, "arguments": arguments})
        else:
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    status = response.get("status")
    terminal = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(str(status))
    events.append({"type": terminal or "response.completed", "response": response})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def sse(events: list[dict[str, Any]]) -> list[str]:
    return [f"event: {e['type']}\ndata: {_dumps(e)}\n\n" for e in events]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") in ("input_text", "output_text")
        )
    return ""


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request rewritten in chat-completions form, for responders."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or ():
        kind = item.get("type")
        if kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")}}  # fmt: skip
            last = messages[-1] if messages else {}
            if last.get("role") == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": _text(item.get("output"))})
        elif kind in (None, "message") and item.get("role"):
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": _text(item.get("content"))})
    tools = [
        {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
        for t in body.get("tools") or ()
        if t.get("type") == "function"
    ]
    request: dict[str, Any] = {"model": body.get("model"), "messages": messages, "stream": bool(body.get("stream"))}
    if tools:
        request["tools"] = tools
    text_format = (body.get("text") or {}).get("format")
    if isinstance(text_format, dict) and text_format.get("type") == "json_schema":
        schema = {k: v for k, v in text_format.items() if k != "type"}
        request["response_format"] = {"type": "json_schema", "json_schema": schema}
    return request
