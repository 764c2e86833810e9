"""Budgets and run policy as value objects, each default defined once."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tether.core.errors import ConfigurationError

if TYPE_CHECKING:
    from tether.core.messages import Message, ModelReply, Usage

DEFAULT_MAX_STEPS = 8
DEFAULT_MAX_TOOL_CALLS = 32
DEFAULT_MAX_REPAIRS = 1
DEFAULT_LOOP_LIMIT = 3
DEFAULT_FALLBACK_ANSWER = "I could not complete this request with the available tools."
# Local token estimates (``estimate_usage``): English runs about four UTF-8 bytes per token and
# JSON or code about three, so three over-counts rather than under-counts; CJK text is about
# three bytes per token. Each message also costs its role and separators.
ESTIMATE_BYTES_PER_TOKEN = 3
ESTIMATE_TOKENS_PER_MESSAGE = 4
ESTIMATED_NOTE = "tokens estimated locally (the provider reported no usage)"


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits checked before every model request and before executing calls.

    ``None`` means unlimited. ``deadline_seconds`` counts from the start of
    the run. ``max_repairs`` is how many consecutive replies with invalid
    calls the model may try to repair; ``loop_limit`` is how many times in a
    row the same call may be requested before it is refused.
    """

    max_steps: int = DEFAULT_MAX_STEPS
    max_tool_calls: int | None = DEFAULT_MAX_TOOL_CALLS
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    deadline_seconds: float | None = None
    max_repairs: int = DEFAULT_MAX_REPAIRS
    loop_limit: int = DEFAULT_LOOP_LIMIT

    @property
    def counts_tokens(self) -> bool:
        """Whether any token limit is set (then a reply without usage gets a local estimate)."""
        return (self.max_input_tokens, self.max_output_tokens, self.max_total_tokens) != (None, None, None)

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ConfigurationError("max_steps must be at least 1")
        if self.max_repairs < 0:
            raise ConfigurationError("max_repairs must not be negative")
        if self.loop_limit < 2:
            raise ConfigurationError("loop_limit must be at least 2")


@dataclass(frozen=True, slots=True)
class Compat:
    """Per-provider leniency, off by default.

    ``allow_stop_with_tool_calls``: accept tool calls that arrive with
    ``finish_reason="stop"``.
    ``accept_empty_finish_reason_with_calls``: accept tool calls that arrive
    with ``finish_reason=""`` (Snowflake Cortex sends ``""`` with every
    reply). A missing (null) finish_reason stays a protocol error.
    ``synthesize_missing_ids``: give calls without an id ``call_STEP_INDEX``.

    There is deliberately no switch for tool calls that arrive with
    ``finish_reason="length"`` or ``"content_filter"``: truncated or filtered
    output is never executed.

    Two switches are policies for small models rather than leniencies;
    remote profiles leave them off, the ``local`` profile turns on
    ``answer_after_success`` (its handler lets the model choose between a
    call and text by the model's own scores instead of ``call_first``):

    - ``answer_after_success``: after a step whose calls all succeeded, the
      next step is asked for a text answer (tool choice ``none``), so a model
      that cannot tell when it is done answers instead of calling again until
      the loop guard stops it. A plan of several steps ends after its first.
    - ``call_first``: a step that answers a user message must call a tool
      (tool choice ``required``) when tools are offered, because a model of
      135M parameters never opens a call by itself; a prompt that needs no
      tool then costs one needless call, judged by every gate as usual.
    """

    allow_stop_with_tool_calls: bool = False
    synthesize_missing_ids: bool = False
    accept_empty_finish_reason_with_calls: bool = False
    answer_after_success: bool = False
    call_first: bool = False


@dataclass(frozen=True, slots=True)
class RunConfig:
    """The limits and leniencies a run is made with: its budget, its compat switches and its fallback answer."""

    budget: Budget = field(default_factory=Budget)
    compat: Compat = field(default_factory=Compat)
    fallback_answer: str = DEFAULT_FALLBACK_ANSWER

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON data, as a checkpoint stores it."""
        # Not dataclasses.asdict: it deep-copies every field and costs more than a whole checkpoint.
        b, c = self.budget, self.compat
        return {
            "budget": {name: getattr(b, name) for name in b.__dataclass_fields__},
            "compat": {name: getattr(c, name) for name in c.__dataclass_fields__},
            "fallback_answer": self.fallback_answer,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """The config ``to_dict`` gave."""
        return cls(
            budget=Budget(**data["budget"]),
            compat=Compat(**data["compat"]),
            fallback_answer=data["fallback_answer"],
        )


def _tokens(text: str) -> int:
    return -(-len(text.encode()) // ESTIMATE_BYTES_PER_TOKEN)


def _message_tokens(message: Message) -> int:
    count = ESTIMATE_TOKENS_PER_MESSAGE + _tokens(message.content or "")
    for call in message.tool_calls:
        count += _tokens(call.name) + _tokens(call.arguments)
    return count


def estimate_tokens(messages: Sequence[Message]) -> int:
    """The local estimate of ``messages``' tokens, counted as ``estimate_usage`` counts what a request sends."""
    return sum(_message_tokens(m) for m in messages)


def estimate_usage(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]], reply: ModelReply) -> Usage:
    """A conservative local count of a request's and its reply's tokens, for a provider that reports none.

    Input is every message sent plus the tool schemas offered; output is the
    reply's text and calls. Each is its UTF-8 size divided by
    ``ESTIMATE_BYTES_PER_TOKEN``, rounded up, plus ``ESTIMATE_TOKENS_PER_MESSAGE``
    per message: more than a real tokenizer counts for most text, so a token
    budget enforced on it ends a run early rather than late.
    """
    sent = sum(_message_tokens(m) for m in messages) + sum(_tokens(json.dumps(t)) for t in tools)
    received = ESTIMATE_TOKENS_PER_MESSAGE + _tokens(reply.content or "")
    for call in reply.tool_calls:
        for part in (call.name, call.arguments):
            received += _tokens(part if isinstance(part, str) else json.dumps(part, default=str))
    # A run needs the messages module, building an agent does not (issue 19: the cost of the import).
    from tether.core.messages import Usage

    return Usage(sent, received)


def with_estimated_usage(
    reply: ModelReply, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]], counts_tokens: bool
) -> tuple[ModelReply, bool]:
    """``reply`` as the run counts it, and whether its usage is a local estimate (``estimate_usage``).

    A real request costs at least one input token, so a reply whose usage is
    all zeros is one the provider reported no usage for. Its usage is
    estimated from ``messages`` and ``tools`` (as sent) when the run's
    budget limits tokens (``counts_tokens``, ``Budget.counts_tokens``);
    otherwise the zeros stand.
    """
    usage = reply.usage
    if usage.input_tokens or usage.output_tokens or not counts_tokens:  # ``usage != Usage()``, with no Usage made
        return reply, False
    return replace(reply, usage=estimate_usage(messages, tools, reply)), True
