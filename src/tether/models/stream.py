"""Assemble streamed chat-completion chunks into the same ``ModelReply``.

Tool-call fragments are joined by their ``index``: the first fragment of a
call carries its id and name, later ones only pieces of the arguments text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.core.errors import ModelResponseError
from tether.core.messages import ModelReply, Usage, WireToolCall


@dataclass(slots=True)
class _Call:
    id: object = None
    type: object = None
    name: str = ""
    # Pieces of the arguments text, joined once: text grown piece by piece is copied whole each time.
    arguments: list[str] = field(default_factory=list)
    odd_arguments: object = None  # a non-string piece: kept so the core refuses it


@dataclass(slots=True)
class Assembler:
    content: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    saw_choice: bool = False

    def feed(self, chunk: dict[str, Any]) -> str | None:
        """Take one decoded chunk; return its text piece, if any."""
        if "error" in chunk:
            raise ModelResponseError(f"error event in stream: {error_message(chunk['error'])}")
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("usage"), dict):
            self.usage = parse_usage(chunk["usage"])
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return None
        choice = choices[0]
        if not isinstance(choice, dict):
            raise ModelResponseError("stream chunk choice is not an object")
        self.saw_choice = True
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return None
        for fragment in delta.get("tool_calls") or ():
            self._fragment(fragment)
        piece = content_text(delta.get("content"))
        if piece:
            self.content.append(piece)
        return piece

    def _fragment(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise ModelResponseError("stream tool-call fragment is not an object")
        index = fragment.get("index")
        if not isinstance(index, int):
            index = len(self.calls) - (0 if fragment.get("id") else 1)
        call = self.calls.setdefault(max(index, 0), _Call())
        if fragment.get("id"):
            call.id = fragment["id"]
        if fragment.get("type") is not None:
            call.type = fragment["type"]
        function = fragment.get("function") or {}
        name, arguments = function.get("name"), function.get("arguments")
        if isinstance(name, str) and name != call.name:
            # Usually only the first fragment names the function; llama-cpp-python repeats
            # the whole name in every fragment, which must not be read as more of it.
            call.name += name
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif arguments is not None:
            call.odd_arguments = arguments

    def reply(self) -> ModelReply:
        calls = tuple(
            WireToolCall(
                id=c.id,
                type="function" if c.type is None else c.type,
                name=c.name,
                arguments=c.odd_arguments if c.odd_arguments is not None else "".join(c.arguments),
            )
            for _, c in sorted(self.calls.items())
        )
        return ModelReply(
            choices=1 if self.saw_choice else 0,
            finish_reason=self.finish_reason,
            content="".join(self.content) if self.content else None,
            tool_calls=calls,
            usage=self.usage,
            model=self.model,
        )


def content_text(content: Any) -> str | None:
    """Message text; list content (e.g. Mistral's) keeps only its text parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(p for p in parts if isinstance(p, str))
    raise ModelResponseError(f"message content is a {type(content).__name__}, not text")


def parse_usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return Usage(
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


def error_message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("code") or "unknown error")[:300]
    return str(error)[:300]
