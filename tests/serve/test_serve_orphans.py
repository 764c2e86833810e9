"""The service's take-over never drives a sub-agent's child run alone once its parent has ended.

A parent and its child cut off together (a stop, a crash) are both runs in
flight; a restarted service takes such runs over. If the parent ended in
between (cancelled before cancelling reached its children, or by an older
tether that did not cancel them), the child must not be driven: it would
run its side effects for a run its principal cancelled. The store here is
a real SQLite file, the service the one ``tether serve`` runs.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tether import Agent, OpenAIChatModel, Status, Tool, tool
from tether.core.machine import Cancel, Run
from tether.drivers.local.subagents import child_run_id
from tether.serve.runs import AgentRuns
from tether.serve.service import SURFACE, RunService
from tether.serve.settings import Settings
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls
from tether.tools.context import LOCAL_PRINCIPAL
from tether.tools.toolbox import Toolbox

effects: list[str] = []


@tool
def bump(n: int) -> str:
    """A side effect, counted."""
    effects.append(f"bump {n}")
    return f"bumped {n}"


# The parent delegates; the child stalls (the process is asked to stop meanwhile), then bumps and answers.
SCRIPT = [
    tool_calls([("c1", "helper", json.dumps({"input": "go"}))]),
    tool_calls([("s1", "stall", "{}")]),
    tool_calls([("b1", "bump", json.dumps({"n": 1}))]),
    text("child done"),
    text("parent done"),
]


async def cut_off_tree(model: OpenAIChatModel, store: Any, surface: str) -> tuple[Agent, list[Tool], str, str]:
    """The ``desk`` agent's run and its helper's child run, recorded for ``surface``, cut off together by a stop
    while the child stalls: the parent agent, the child's tools, the parent run's id and the child's."""
    drivers: list[Any] = []

    @tool(read_only=True)
    async def stall() -> str:
        """Stands in for a long call, during which the process is asked to stop (the first time)."""
        if len(drivers) == 1:
            drivers.append("stopped")
            drivers[0].suspend()
        return "stalled"

    setup = {"surface": surface}
    tools = [stall, bump]
    child = Agent(model, tools, setup=setup)  # records in its parent's store, as a served parent's child does
    parent = Agent(model, [child.as_tool(name="helper")], name="desk", store=store, setup=setup)
    driver = parent.driver("go")
    drivers.append(driver)
    stopped = await driver.run()
    return parent, tools, stopped.run_id, child_run_id(stopped.run_id, "c1")


async def test_a_child_cut_off_with_a_parent_that_ended_since_is_cancelled_not_driven(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with FakeServer(list(SCRIPT)) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        store = SQLiteStore(db)
        _, tools, parent_id, child_id = await cut_off_tree(model, store, SURFACE)
        assert store.load(child_id).state.status is Status.AWAITING_MODEL
        # The parent ends alone (as an older tether cancelled it, or a crash between the two cancellations).
        store.acquire(parent_id)
        run = Run(store.load(parent_id).state, Toolbox([], LOCAL_PRINCIPAL), executes=False)
        run.send(Cancel(0.0, "cancelled"))
        store.checkpoint(run.state, [], release=True)
        store.close()

        settings = Settings(run_db=db, model_factory=lambda: model)
        service_store = SQLiteStore(db)
        service = RunService(settings, service_store, tools)
        try:
            taken = await service.take_over()
            ended = service_store.load(child_id).state
        finally:
            await service.aclose()
            service_store.close()
    assert taken == [] and not service.live
    assert ended.status is Status.CANCELLED
    assert ended.reason == f"run {child_id} is a child of run {parent_id}, which is cancelled"
    assert effects == [] and len(server.requests) == 2


async def test_a_child_cut_off_with_its_parent_is_carried_on_by_the_parent_only(tmp_path: Path) -> None:
    """The take-over drives the parent, whose call resumes the child: never the child alone as well (it was
    updated first, so it is found first), which would be two drivers of one run."""
    effects.clear()
    db = tmp_path / "runs.db"
    with FakeServer(list(SCRIPT)) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        store = SQLiteStore(db)
        parent, _, parent_id, child_id = await cut_off_tree(model, store, "serve:desk")  # as ``AgentRuns`` records
        store.close()

        settings = Settings(run_db=db, model_factory=lambda: model)
        service_store = SQLiteStore(db)
        service = AgentRuns(settings, service_store, parent)
        try:
            taken = await service.take_over()
            await asyncio.gather(*(live.task for live in list(service.live.values()) if live.task is not None))
            finished = service_store.load(parent_id).state
            carried = service_store.load(child_id)
        finally:
            await service.aclose()
            service_store.close()
    assert taken == [parent_id]
    assert finished.status is Status.COMPLETED and finished.output == "parent done"
    assert carried.state.status is Status.COMPLETED and effects == ["bump 1"]
    assert [e.kind for e in SQLiteStore(db).events(child_id)].count("run_resumed") == 1
