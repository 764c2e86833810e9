"""Group commit: runs that reach a side effect's intent together share one disk sync, and none runs before it.

Real HTTP to the project's FakeServer (its ``multiply`` scenario), a real
SQLite file. The effect checks that its own intent was on disk when it ran: the
store's count of commits known to be on disk has reached the commit that
held the intent (noted by a thin wrapper that calls the real checkpoint).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tether import Agent, OpenAIChatModel, ToolContext, tool
from tether.store import SQLiteStore, SQLStore
from tether.testing import FakeServer
from tether.testing.fake_server import SCENARIOS

RUNS = 64


async def test_runs_reaching_their_intents_together_share_the_syncs(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    assert isinstance(store, SQLStore)
    intent_commit: dict[str, int] = {}  # idempotency key -> the number of the commit that held the intent
    unsynced: list[str] = []
    checkpoint = store.checkpoint

    def noting(state: Any, *args: Any, **kwargs: Any) -> None:
        checkpoint(state, *args, **kwargs)
        for call in kwargs.get("intents", ()):
            intent_commit[f"{state.run_id}:{call.call_id}"] = store._commits

    store.checkpoint = noting  # type: ignore[method-assign]

    @tool
    async def multiply(a: int, b: int, context: ToolContext) -> int:
        """Multiply (a side effect here: each call is an intent first)."""
        if store._on_disk < intent_commit[context.idempotency_key]:
            unsynced.append(context.idempotency_key)
        return a * b

    async with FakeServer(script=SCENARIOS["multiply"]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), [multiply], store=store)
        results = await asyncio.gather(*(agent.run("What is 248 times 15?") for _ in range(RUNS)))
        await agent.aclose()
    assert all(r.output and "3720" in r.output for r in results)
    assert unsynced == []
    assert 1 <= store.syncs <= RUNS // 4  # at most one sync per four runs: group commit
    for result in results:
        assert store.verify(result.run_id) == []


async def test_a_run_alone_waits_for_no_one(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    assert isinstance(store, SQLStore)
    async with FakeServer(script=SCENARIOS["multiply"]) as server:

        @tool
        async def multiply(a: int, b: int) -> int:
            """Multiply."""
            return a * b

        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), [multiply], store=store)
        for _ in range(3):
            assert (await agent.run("What is 248 times 15?")).output
        await agent.aclose()
    assert store.syncs == 3  # one per intent, each made at once
