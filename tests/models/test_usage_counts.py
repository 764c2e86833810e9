"""A usage count that is no count is no usage: a negative one would hand a token budget back.

Real HTTP to the FakeServer for the run; the other adapters' readers of a
usage object directly.
"""

from __future__ import annotations

import pytest

from tether import Agent, Budget, OpenAIChatModel, Status, tool
from tether.core import Usage
from tether.models import anthropic, openai_responses, stream
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls


@tool(read_only=True)
def multiply(a: int, b: int) -> int:
    """Multiply."""
    return a * b


async def test_a_negative_count_does_not_buy_a_run_more_tokens() -> None:
    """The reply's usage is estimated instead, as for a provider that reports none: the budget still runs out."""
    script = [tool_calls([("c1", "multiply", '{"a": 2, "b": 3}')], usage=(-1_000_000, 10)), text("6"), text("6")]
    with FakeServer(script) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        agent = Agent(model, [multiply], budget=Budget(max_total_tokens=100))
        result = await agent.run("What is 2 times 3? " * 40)
        await agent.aclose()
    assert result.status is Status.BUDGET_EXHAUSTED
    assert result.usage.input_tokens > 0


@pytest.mark.parametrize("count", [-1, True, 1.5, "7"])
def test_every_reader_takes_a_count_that_is_no_count_as_no_usage(count: object) -> None:
    assert stream.parse_usage({"prompt_tokens": count, "completion_tokens": 5}) == Usage()
    assert anthropic.parse_usage({"input_tokens": 5, "cache_read_input_tokens": count, "output_tokens": 5}) == Usage()
    assert openai_responses.parse_usage({"input_tokens": 5, "output_tokens": count}) == Usage()


def test_counts_that_are_counts_are_read() -> None:
    assert stream.parse_usage({"prompt_tokens": 7, "completion_tokens": 5}) == Usage(7, 5)
    assert anthropic.parse_usage({"input_tokens": 5, "cache_read_input_tokens": 2, "output_tokens": 1}) == Usage(7, 1)
    assert openai_responses.parse_usage({"input_tokens": 5, "output_tokens": None}) == Usage(5, 0)
