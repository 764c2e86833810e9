"""Token budgets when the provider reports no usage: the local estimate and what the run says of it."""

from __future__ import annotations

import json

from tether.core import Begin, Budget, Message, ModelReplied, ModelReply, Run, RunConfig, RunState, Status, Usage
from tether.core.budget import (
    ESTIMATE_BYTES_PER_TOKEN,
    ESTIMATE_TOKENS_PER_MESSAGE,
    ESTIMATED_NOTE,
    estimate_usage,
    with_estimated_usage,
)
from tether.core.messages import WireToolCall
from tether.tools import Toolbox, tool


@tool(read_only=True)
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


TOOLBOX = Toolbox([multiply])
PROMPT = "What is 248 times 15? " * 20


def test_the_estimate_counts_messages_tools_and_reply_and_errs_high() -> None:
    messages = [Message("user", PROMPT)]
    reply = ModelReply(1, "tool_calls", tool_calls=(WireToolCall("c1", "function", "multiply", '{"a":248,"b":15}'),))
    usage = estimate_usage(messages, TOOLBOX.specs, reply)

    tools_bytes = sum(len(json.dumps(spec)) for spec in TOOLBOX.specs)
    # At least the usual four characters per token of English, plus the per-message overhead.
    assert usage.input_tokens >= (len(PROMPT) + tools_bytes) / 4 + ESTIMATE_TOKENS_PER_MESSAGE
    assert usage.input_tokens == -(-len(PROMPT) // ESTIMATE_BYTES_PER_TOKEN) + ESTIMATE_TOKENS_PER_MESSAGE + sum(
        -(-len(json.dumps(spec)) // ESTIMATE_BYTES_PER_TOKEN) for spec in TOOLBOX.specs
    )
    assert usage.output_tokens == ESTIMATE_TOKENS_PER_MESSAGE + 3 + 6  # "multiply", then 16 bytes of arguments
    longer = [*messages, Message("assistant", "x" * 300)]
    assert estimate_usage(longer, (), reply).input_tokens > estimate_usage(messages, (), reply).input_tokens


def test_multibyte_text_counts_by_its_utf8_size() -> None:
    reply = ModelReply(1, "stop", content="日本語のテキスト" * 10)  # 80 characters, 240 bytes
    assert estimate_usage([], (), reply).output_tokens == ESTIMATE_TOKENS_PER_MESSAGE + 80


def test_a_budget_ended_on_estimates_says_so_and_the_checkpoint_keeps_it() -> None:
    run = Run.new("r", [Message("user", "hi")], TOOLBOX, RunConfig(budget=Budget(max_total_tokens=100)))
    run.send(Begin(now=0.0))
    call = WireToolCall("c1", "function", "multiply", '{"a": 2, "b": 3}')
    command = run.send(ModelReplied(ModelReply(1, "tool_calls", tool_calls=(call,), usage=Usage(90, 20)), 1.0, True))

    assert run.status is Status.BUDGET_EXHAUSTED
    assert run.state.reason == f"total token budget of 100 used; {ESTIMATED_NOTE}"
    assert command.reason == run.state.reason  # type: ignore[union-attr]
    assert RunState.from_dict(run.state.to_dict()).usage_estimated is True


def test_a_budget_ended_on_reported_usage_says_nothing_of_estimates() -> None:
    run = Run.new("r", [Message("user", "hi")], TOOLBOX, RunConfig(budget=Budget(max_total_tokens=100)))
    run.send(Begin(now=0.0))
    call = WireToolCall("c1", "function", "multiply", '{"a": 2, "b": 3}')
    run.send(ModelReplied(ModelReply(1, "tool_calls", tool_calls=(call,), usage=Usage(90, 20)), 1.0))

    assert run.state.reason == "total token budget of 100 used"
    assert run.state.usage_estimated is False


def test_a_checkpoint_from_before_estimates_loads() -> None:
    run = Run.new("r", [Message("user", "hi")], TOOLBOX)
    data = run.state.to_dict()
    del data["usage_estimated"]
    assert RunState.from_dict(data).usage_estimated is False


def test_a_reply_without_usage_is_estimated_when_a_token_budget_counts() -> None:
    """The rule both drivers apply to every reply: all zeros means the provider reported no usage."""
    messages = [Message("user", PROMPT)]
    reply = ModelReply(1, "stop", content="3720")
    counts_tokens = Budget(max_output_tokens=1000).counts_tokens

    estimated, was_estimated = with_estimated_usage(reply, messages, TOOLBOX.specs, counts_tokens)

    assert was_estimated is True
    assert estimated.usage == estimate_usage(messages, TOOLBOX.specs, reply) != Usage()
    assert (estimated.content, estimated.finish_reason) == (reply.content, reply.finish_reason)


def test_reported_usage_or_a_budget_without_token_limits_is_kept() -> None:
    messages = [Message("user", PROMPT)]
    reported = ModelReply(1, "stop", content="3720", usage=Usage(0, 1))
    silent = ModelReply(1, "stop", content="3720")

    assert with_estimated_usage(reported, messages, (), Budget(max_total_tokens=10).counts_tokens) == (reported, False)
    assert with_estimated_usage(silent, messages, (), Budget().counts_tokens) == (silent, False)
