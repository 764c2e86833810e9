"""A run cancelled while a side effect runs records what the effect did, then ends cancelled.

Cut off half-way, the call's outcome would be one nobody knows, in a run
that has ended where nobody can settle it (and a tool on a thread goes on
anyway, unseen). Real HTTP to the FakeServer, a real SQLite file, its
ledger and audit check.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from tether import Agent, OpenAIChatModel, SQLiteStore, Status, tool
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls


async def test_the_effect_finishes_and_its_outcome_is_recorded_before_the_run_ends_cancelled(tmp_path: Path) -> None:
    started, done = threading.Event(), []

    @tool
    def transfer(amount: int) -> str:
        """Move money (a side effect, on a thread: it cannot be stopped half-way)."""
        started.set()
        time.sleep(0.5)
        done.append(amount)
        return f"moved {amount}"

    store = SQLiteStore(tmp_path / "runs.db")
    with FakeServer([tool_calls([("c1", "transfer", '{"amount": 5}')]), text("never asked")]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), [transfer], store=store)
        driver = agent.driver("Move 5.")
        running = asyncio.create_task(driver.run())
        await asyncio.to_thread(started.wait, 10)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        await agent.aclose()
        asked = len(server.requests)
    stored = store.load(driver.state.run_id)
    assert stored.state.status is Status.CANCELLED and done == [5] and asked == 1
    [result] = [m.content for m in stored.state.messages if m.role == "tool"]
    assert result == '{"ok": true, "result": "moved 5"}'
    entry = store.ledger_entry(driver.state.run_id, "c1")
    assert entry is not None and entry.outcome == result
    assert store.verify(driver.state.run_id) == []
