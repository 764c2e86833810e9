"""Assemble streamed chat-completion chunks into the same ``ModelReply``.

Tool-call fragments are joined by their ``index``: the first fragment of a
call carries its id and name, later ones only pieces of the arguments text.
Only the first choice (``index`` 0) is read, as in a reply not streamed.
A stream that contradicts itself is a ``ModelResponseError``, never a reply
whose calls could run: a finish reason that changes ("length", then
"tool_calls"), text, refusal or tool-call fragments after the finish reason,
a call whose id or type changes between its fragments. A ``refusal`` piece
makes the reply ``content_filter``, as a message's ``refusal`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.core.errors import ModelResponseError
from tether.core.messages import ModelReply, Usage, WireToolCall, reported_usage
from tether.core.redact import redact_text


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
    choices: set[int] = field(default_factory=set)  # the choice indices seen
    refused: bool = False  # a refusal piece came: the reply is content_filter whatever else it holds

    def feed(self, chunk: dict[str, Any]) -> str | None:
        """Take one decoded chunk; return its text piece, if any."""
        if "error" in chunk:
            raise ModelResponseError(f"error event in stream: {error_message(chunk['error'])}")
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("usage"), dict):
            self.usage = parse_usage(chunk["usage"])
        choice = self._first_choice(chunk.get("choices"))
        if choice is None:
            return None
        delta = choice.get("delta")
        finished = self.finish_reason is not None
        if isinstance(delta, dict):
            if finished and (delta.get("tool_calls") or delta.get("content") or delta.get("refusal")):
                raise ModelResponseError(f"the stream went on after its finish_reason {self.finish_reason!r}")
            if refused(delta.get("refusal")):
                self.refused = True
            for fragment in delta.get("tool_calls") or ():
                self._fragment(fragment)
        reason = choice.get("finish_reason")
        if reason:
            if finished and reason != self.finish_reason:
                was = self.finish_reason
                raise ModelResponseError(f"the stream's finish_reason changed from {was!r} to {reason!r}")
            self.finish_reason = reason
        if not isinstance(delta, dict):
            return None
        piece = content_text(delta.get("content"))
        if piece:
            self.content.append(piece)
        return piece

    def _first_choice(self, choices: Any) -> dict[str, Any] | None:
        """The chunk's part of choice 0 (noting the indices of the others, which are not read)."""
        if not isinstance(choices, list):
            return None
        first = None
        for choice in choices:
            if not isinstance(choice, dict):
                raise ModelResponseError("stream chunk choice is not an object")
            index = choice.get("index", 0)
            if not isinstance(index, int) or isinstance(index, bool):
                raise ModelResponseError(f"stream chunk choice index {index!r} is not an integer")
            self.choices.add(index)
            if index == 0:
                first = choice
        return first

    def _fragment(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise ModelResponseError("stream tool-call fragment is not an object")
        index = fragment.get("index")
        if not isinstance(index, int):
            index = len(self.calls) - (0 if fragment.get("id") else 1)
        call = self.calls.setdefault(max(index, 0), _Call())
        ident, kind = fragment.get("id"), fragment.get("type")
        if ident:
            if call.id is not None and ident != call.id:
                raise ModelResponseError(f"stream tool call {index}: its id changed from {call.id!r} to {ident!r}")
            call.id = ident
        if kind is not None:
            if call.type is not None and kind != call.type:
                raise ModelResponseError(f"stream tool call {index}: its type changed from {call.type!r} to {kind!r}")
            call.type = kind
        function = fragment.get("function")
        if function is None:
            function = {}
        elif not isinstance(function, dict):
            raise ModelResponseError(f"stream tool call {index}: its function is not an object")
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
            choices=len(self.choices) if 0 in self.choices else 0,
            finish_reason="content_filter" if self.refused else self.finish_reason,
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


def refused(refusal: Any) -> bool:
    """Whether a message's (or a delta's) ``refusal`` says the model refused: its text does; null and "" do not
    (Snowflake sends "" with every reply). Anything else is no reply to read."""
    if refusal is None or refusal == "":
        return False
    if isinstance(refusal, str):
        return True
    raise ModelResponseError(f"message refusal is a {type(refusal).__name__}, not text")


def parse_usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if type(prompt) is int and type(completion) is int and prompt >= 0 and completion >= 0:
        return Usage(prompt, completion)  # what nearly every reply says: no checks to walk
    return reported_usage((prompt,), completion)


def error_message(error: Any) -> str:
    """A provider's error, as our error's message: cut short, and a key the provider quotes (some echo the one they
    refused) replaced, since the message becomes a run's reason, its event, a Temporal history's payload."""
    if isinstance(error, dict):
        error = error.get("message") or error.get("code") or "unknown error"
    # Redacted before it is cut: a key across the cut would be left too short to look like one. The text read
    # is bounded too, far past the cut.
    return redact_text(str(error)[:ERROR_READ])[:ERROR_CHARS]


ERROR_CHARS = 300  # of a provider's error message that ours quotes
ERROR_READ = 16_384  # of it that is redacted before the cut
