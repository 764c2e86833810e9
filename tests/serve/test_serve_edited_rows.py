"""One run whose row was edited into something unreadable does not hide the others from the service.

Before, the service's scan for runs a crash cut off read every row it found
and gave up at the first it could not read: no run was taken over for as long
as that row was in the scan, and the approvers' inbox failed the same way.
Now the edited run is left out (and logged once), the rest taken over and
listed. A real SQLite file, the service ``tether serve`` runs, a FakeServer.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tether import Agent, OpenAIChatModel, Status, tool
from tether.serve.service import SURFACE, RunService
from tether.serve.settings import Settings
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls


@tool(approval=True)
def refund(order: str) -> str:
    """Refund an order (a person approves it first)."""
    return f"refunded {order}"


def edit(db: Path, run_id: str) -> None:
    with sqlite3.connect(db) as raw:
        assert raw.execute("UPDATE runs SET meta = 'not json' WHERE id = ?", (run_id,)).rowcount == 1


async def test_a_run_a_stop_cut_off_is_taken_over_though_another_row_was_edited(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "runs.db"
    drivers: list[Any] = []

    @tool(read_only=True)
    def stall() -> str:
        """Stands in for a long call, during which the process is asked to stop."""
        drivers[-1].suspend()
        return "stalled"

    stalling = tool_calls([("s1", "stall", "{}")])
    with FakeServer([stalling, stalling, text("done")]) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        store = SQLiteStore(db)
        agent = Agent(model, [stall], store=store, setup={"surface": SURFACE})
        cut_off = []
        for prompt in ("one", "two"):
            drivers.append(agent.driver(prompt))
            cut_off.append((await drivers[-1].run()).run_id)
        store.close()
        edited, kept = cut_off
        edit(db, edited)

        service_store = SQLiteStore(db)
        service = RunService(Settings(run_db=db, model_factory=lambda: model), service_store, [stall])
        try:
            with caplog.at_level(logging.WARNING, logger="tether.serve"):
                taken = await service.take_over()
                again = await service.take_over()
            await asyncio.gather(*(live.task for live in list(service.live.values()) if live.task is not None))
            finished = service_store.load(kept).state
        finally:
            await service.aclose()
            service_store.close()
    assert taken == [kept] and again == []
    assert finished.status is Status.COMPLETED and finished.output == "done"
    named = [r.getMessage() for r in caplog.records if edited in r.getMessage()]
    assert len(named) == 1 and "the store was edited" in named[0], named  # logged once, not at every scan


async def test_the_approvers_inbox_lists_the_other_calls_when_one_run_row_was_edited(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    script = [tool_calls([("c1", "refund", '{"order": "A-1"}')]), tool_calls([("c1", "refund", '{"order": "B-2"}')])]
    with FakeServer(script) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        store = SQLiteStore(db)
        agent = Agent(model, [refund], store=store, setup={"surface": SURFACE})
        first, second = await agent.run("refund A-1"), await agent.run("refund B-2")
        assert first.status is second.status is Status.AWAITING_APPROVAL
        store.close()
        edit(db, first.run_id)

        service_store = SQLiteStore(db)
        service = RunService(Settings(run_db=db, model_factory=lambda: model), service_store, [refund])
        try:
            waiting = await service.pending_approvals(10)
        finally:
            await service.aclose()
            service_store.close()
    assert [(a["run_id"], a["call_id"]) for a in waiting] == [(second.run_id, "c1")]
