"""``Driver.suspend``: a process that stops hands its run on, unfinished, and a resume finishes it, each effect once.

Real HTTP against FakeServer, a real SQLite file; the tools block on an
``asyncio.Event`` so the suspension lands while one of them runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from tether import Agent, OpenAIChatModel, Status, tool
from tether.drivers.local.runner import SUSPENDED_REASON
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls

EFFECTS: list[str] = []


class Gate:
    """The tool's gate, made anew in each test's event loop (``reset``)."""

    started = asyncio.Event()
    go = asyncio.Event()


@tool
async def charge(order: str) -> str:
    """Charge an order (a side effect); waits to be let go the first time."""
    Gate.started.set()
    await Gate.go.wait()
    EFFECTS.append(order)
    return f"charged {order}"


def agent(server: FakeServer, db: Path) -> Agent:
    return Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), [charge], store=SQLiteStore(db))


def reset() -> None:
    EFFECTS.clear()
    Gate.started, Gate.go = asyncio.Event(), asyncio.Event()


async def test_a_run_suspended_inside_a_tool_call_lets_it_finish_and_starts_no_other(tmp_path: Path) -> None:
    reset()
    db = tmp_path / "runs.db"
    calls = [("c1", "charge", '{"order": "A"}'), ("c2", "charge", '{"order": "B"}')]
    with FakeServer([tool_calls(calls), text("Both charged.")]) as server:
        driver = agent(server, db).driver("Charge A and B.")
        task = asyncio.create_task(driver.run())
        await Gate.started.wait()  # c1 is running
        driver.suspend()
        Gate.go.set()
        suspended = await task
        assert (suspended.status, suspended.reason) == (Status.AWAITING_TOOLS, SUSPENDED_REASON)
        assert EFFECTS == ["A"]  # c1 finished; c2 never started
        store = SQLiteStore(db)
        assert store.list_runs()[0].status == "awaiting_tools"
        assert store.verify(driver.state.run_id) == []

        finished = await agent(server, db).resume(driver.state.run_id)
    assert (finished.status, finished.output) == (Status.COMPLETED, "Both charged.")
    assert EFFECTS == ["A", "B"]  # each once: A's recorded outcome is reused, B runs now
    assert len(server.requests) == 2


async def test_a_run_suspended_while_the_model_thinks_abandons_the_request(tmp_path: Path) -> None:
    reset()
    db = tmp_path / "runs.db"
    with FakeServer([text("too late", latency=60), text("Here.")]) as server:
        driver = agent(server, db).driver("Hello?")
        task = asyncio.create_task(driver.run())
        while not server.requests:
            await asyncio.sleep(0.01)
        driver.suspend()
        suspended = await asyncio.wait_for(task, 10)  # not the 60 s the request would take
        assert (suspended.status, suspended.reason) == (Status.AWAITING_MODEL, SUSPENDED_REASON)
        finished = await agent(server, db).resume(driver.state.run_id)
    assert (finished.status, finished.output) == (Status.COMPLETED, "Here.")
    assert SQLiteStore(db).verify(driver.state.run_id) == []


async def test_a_cancel_after_a_suspension_still_saves_the_run_unended(tmp_path: Path) -> None:
    """The grace period is over: the task is cancelled, and the run is handed on as it is, never ``cancelled``."""
    reset()
    db = tmp_path / "runs.db"
    with FakeServer([tool_calls([("c1", "charge", '{"order": "A"}')]), text("Charged.")]) as server:
        driver = agent(server, db).driver("Charge A.")
        task = asyncio.create_task(driver.run())
        await Gate.started.wait()
        driver.suspend()
        task.cancel()  # the tool never finishes in time
        with contextlib.suppress(asyncio.CancelledError):
            await task
        store = SQLiteStore(db)
        (summary,) = store.list_runs()
        assert summary.status == "awaiting_tools"  # not cancelled: a resume carries it on
        assert store.ledger_entry(driver.state.run_id, "c1") is not None  # the intent, without an outcome
        assert EFFECTS == []
