"""A durable run on a fallback chain, with model settings, on each store: paused, decided, resumed by another Agent.

The events each store keeps name the model that answered every step and why
the one before it gave none; the resumed run is sent the settings it began
with, although the Agent that resumes it has none of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_server import PostgresServer

from tether import Agent, FallbackModel, ModelSettings, OpenAIChatModel, Status, tool
from tether.drivers.local.durable import decide
from tether.store import RunStore, open_store
from tether.testing import FakeServer, raw, text, tool_calls

PAID: list[int] = []


@tool(approval=True)
def pay(amount: int) -> str:
    """Pay an amount (needs approval)."""
    PAID.append(amount)
    return f"paid {amount}"


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        yield server.schema_url()


def chain(down: FakeServer, up: FakeServer) -> FallbackModel:
    first = OpenAIChatModel("primary", base_url=down.base_url, api_key="x", max_retries=0)
    return FallbackModel(first, OpenAIChatModel("second", base_url=up.base_url, api_key="x"))


def unavailable(request: dict[str, Any]) -> Any:
    return raw({"error": {"message": "down"}}, 503)


async def test_a_paused_fallback_run_resumes_on_the_same_chain_with_its_settings(target: str) -> None:
    PAID.clear()
    script = [tool_calls([("c1", "pay", '{"amount": 5}')]), text("paid it")]
    stores: list[RunStore] = []
    try:
        with FakeServer(unavailable) as down, FakeServer(script) as up:
            stores.append(open_store(target))
            settings = ModelSettings(temperature=0.2, seed=7)
            agent = Agent(chain(down, up), [pay], store=stores[-1], model_settings=settings)
            try:
                paused = await agent.run("pay 5")
            finally:
                await agent.aclose()
            assert paused.status is Status.AWAITING_APPROVAL
            stores.append(open_store(target))
            decide(stores[-1], paused.run_id, "c1", approved=True)
            again = Agent(chain(down, up), [pay], store=stores[-1])  # another Agent, no settings of its own
            try:
                result = await again.resume(paused.run_id)
            finally:
                await again.aclose()
            assert [(b["temperature"], b["seed"]) for b in up.requests] == [(0.2, 7), (0.2, 7)]
            assert len(down.requests) == 2
        assert result.status is Status.COMPLETED and result.output == "paid it" and PAID == [5]
        replied = [e.data for e in stores[-1].events(paused.run_id) if e.kind == "model_replied"]
        assert [r["model"] for r in replied] == ["second", "second"]
        assert all(r["skipped"] == ["primary: ServerError: HTTP 503: down"] for r in replied)
    finally:
        for store in stores:
            store.close()
