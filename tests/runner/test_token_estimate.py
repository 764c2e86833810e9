"""A token budget over real HTTP when the provider reports no usage: counted locally, and said so."""

from __future__ import annotations

import json

from tether.core.budget import Budget
from tether.core.machine import Status
from tether.drivers.local.runner import Agent
from tether.models.openai_chat import OpenAIChatModel
from tether.testing.fake_server import FakeServer
from tether.testing.fake_server import text as wire_text
from tether.testing.fake_server import tool_calls as wire_calls
from tether.toolsets import load_toolset


async def run_with_budget(usage: tuple[int, int] | None) -> tuple[object, int]:
    wordy = "Let me multiply these step by step. " * 60  # about 2,000 characters a reply
    script = [
        wire_calls([(f"call_{i}", "multiply", json.dumps({"a": i, "b": 2}))], usage=usage, content=wordy)
        for i in range(1, 6)
    ] + [wire_text("done", usage=usage)]
    async with FakeServer(script) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="x")
        agent = Agent(model, load_toolset("calc"), budget=Budget(max_total_tokens=1500))
        try:
            result = await agent.run("What is 1 times 2?")
        finally:
            await agent.aclose()
        return result, len(server.requests)


async def test_a_token_budget_is_enforced_when_the_provider_reports_no_usage() -> None:
    result, requests = await run_with_budget(None)

    assert result.status is Status.BUDGET_EXHAUSTED  # type: ignore[attr-defined]
    assert result.reason == (  # type: ignore[attr-defined]
        "total token budget of 1500 used; tokens estimated locally (the provider reported no usage)"
    )
    assert result.usage.total_tokens >= 1500  # type: ignore[attr-defined]
    assert result.state.usage_estimated is True  # type: ignore[attr-defined]
    assert requests < 6


async def test_reported_usage_is_used_as_reported() -> None:
    result, requests = await run_with_budget((400, 100))

    assert result.status is Status.BUDGET_EXHAUSTED  # type: ignore[attr-defined]
    assert result.reason == "total token budget of 1500 used"  # type: ignore[attr-defined]
    assert result.usage.total_tokens == 1500  # type: ignore[attr-defined]
    assert requests == 3
