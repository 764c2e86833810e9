"""Messages, tool calls and model replies: the values every layer shares.

A ``ModelReply`` is what an adapter saw on the wire, translated but *not*
checked: ids may be empty, ``arguments`` may not be a string. The run state
machine checks it (DESIGN.md §3.1), so every adapter gets the same checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.core.quick import quick_init

Role = Literal["system", "user", "assistant", "tool"]


@quick_init
@dataclass(frozen=True, slots=True)
class ToolCall:
    """One checked tool call: a non-empty id, a name and the raw JSON text."""

    id: str
    name: str
    arguments: str

    def to_dict(self) -> dict[str, Any]:
        """The call as plain JSON data."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        """The call ``to_dict`` gave."""
        return cls(id=data["id"], name=data["name"], arguments=data["arguments"])


@quick_init
@dataclass(frozen=True, slots=True)
class Message:
    """One message of a run's history.

    ``provider_data`` is what an adapter must send back with an assistant
    message and tether itself never reads (the Responses API's reasoning
    items): plain JSON, keyed by the adapter that wrote it, stored with the
    message. Another adapter ignores it.

    ``agent`` names the agent that wrote an assistant message, in a run
    whose agent has handoffs (``tether.drivers.local.handoffs``); it is
    stored with the message and never sent to a model.
    """

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    provider_data: dict[str, Any] | None = None
    agent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The message as plain JSON data (keys left out when empty)."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.provider_data is not None:
            data["provider_data"] = self.provider_data
        if self.agent is not None:
            data["agent"] = self.agent
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """The message ``to_dict`` gave."""
        return cls(
            role=data["role"],
            content=data.get("content"),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls", ())),
            tool_call_id=data.get("tool_call_id"),
            provider_data=data.get("provider_data"),
            agent=data.get("agent"),
        )


@quick_init
@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens used: by the prompt (input) and by the reply (output)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)


def reported_usage(inputs: Sequence[object], output: object) -> Usage:
    """The usage a provider reported (``inputs`` summed: Anthropic counts cached input apart), or none at all
    (``Usage()``, which the run estimates when its budget counts tokens) if a count present is no count: a
    negative one would hand the budget back tokens, a ``true`` is no number."""
    counts = (*inputs, output)
    if not all(c is None or (type(c) is int and c >= 0) for c in counts):
        return Usage()
    return Usage(sum(c for c in inputs if type(c) is int), output if type(output) is int else 0)


@quick_init
@dataclass(frozen=True, slots=True)
class WireToolCall:
    """A tool call exactly as the provider sent it; any field may be wrong."""

    id: object
    type: object
    name: object
    arguments: object


@quick_init
@dataclass(frozen=True, slots=True)
class ModelReply:
    """The first choice of one model response, as received.

    ``choices`` counts the choices the response carried (0 is a protocol
    error). An empty ``tool_calls`` means the reply asked for no tool.
    ``provider_data`` goes, unread, into the assistant message the reply
    becomes (see ``Message``).
    ``model`` is the model the provider says answered. ``answered_by`` names
    the ``Model`` that gave the reply when it is not the run's own model (a
    member of a ``FallbackModel``), and ``skipped`` says why each model
    asked before it gave none (``"name: ErrorType: message"``).
    """

    choices: int
    finish_reason: str | None
    content: str | None = None
    tool_calls: tuple[WireToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    provider_data: dict[str, Any] | None = None
    answered_by: str | None = None
    skipped: tuple[str, ...] = ()
