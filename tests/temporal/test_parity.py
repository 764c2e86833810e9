"""The workflow records the events the local driver records, for the same model replies and budget."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from shop_tools import TOOLS
from temporalio.client import Client

from tether import Agent, Retry
from tether.core.budget import Budget, Compat, RunConfig
from tether.drivers.temporal.client import start_run
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import make_worker
from tether.models.openai_chat import OpenAIChatModel
from tether.store import RunStore, SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls
from tether.tools import tool

PRICES = tool_calls([("c1", "price", '{"item": "tea"}'), ("c2", "price", '{"item": "coffee"}')])


def recorded(store: RunStore, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The run's events, the answering model's name in ``model_replied`` among them."""
    return [(e.kind, e.data) for e in store.events(run_id)]


@pytest.mark.parametrize(
    ("budget", "script"),
    [
        (Budget(max_steps=1), [PRICES]),  # the step's calls are cut off: max_steps reached
        (Budget(max_tool_calls=1), [PRICES]),  # two calls would exceed the tool call budget
        (Budget(max_steps=2), [tool_calls([("c1", "price", '{"item": "tea"}')]), PRICES, text("never")]),
    ],
    ids=["max_steps", "max_tool_calls", "second_step"],
)
async def test_calls_cut_off_by_the_budget_are_recorded_as_the_local_driver_records_them(
    temporal_server: DevServer, tmp_path: Path, budget: Budget, script: list[Any]
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    run_id = uuid.uuid4().hex  # workflow ids are unique on the session's server
    client = await Client.connect(temporal_server.address)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with FakeServer(script=list(script)) as local_server:
        model = OpenAIChatModel("fake", base_url=local_server.base_url, api_key="k")
        async with Agent(model, TOOLS, budget=budget, store=store) as agent:
            local = await agent.driver("Prices?", run_id=f"local-{run_id}")
    async with FakeServer(script=list(script)) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(client, queue, model, TOOLS, store=store):
            handle = await start_run(client, "Prices?", task_queue=queue, run_id=run_id, config=RunConfig(budget))
            result = await handle.result()
        await model.aclose()
    assert result["status"] == local.status.value != "completed"
    events = recorded(store, run_id)
    assert "call_rejected" in [kind for kind, _ in events]
    assert events == recorded(store, f"local-{run_id}")
    assert store.verify(run_id) == []
    store.close()


async def test_the_small_model_policy_chooses_the_tool_choice_on_a_worker_as_it_does_locally(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """``call_first`` asks for a call when a user message is answered, ``answer_after_success`` for text after
    a step whose calls succeeded: the worker's model request carries the workflow's choice."""
    store = SQLiteStore(tmp_path / "runs.db")
    client = await Client.connect(temporal_server.address)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    config = RunConfig(Budget(), Compat(call_first=True, answer_after_success=True))
    script = [tool_calls([("c1", "price", '{"item": "tea"}')]), text("Tea is 3.")]
    async with FakeServer(script=list(script)) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(client, queue, model, TOOLS, store=store):
            handle = await start_run(client, "Tea?", task_queue=queue, run_id=uuid.uuid4().hex, config=config)
            result = await handle.result()
        await model.aclose()
    assert result["status"] == "completed"
    assert [r.get("tool_choice") for r in server.requests] == ["required", "none"]
    store.close()


@tool(read_only=True, retries=1)
def busy(n: int) -> str:
    """A service that is always busy: it asks for the call to be made again."""
    raise Retry("busy, try again")


async def test_a_tool_asking_for_more_retries_than_it_allows_ends_the_run_as_locally(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """``busy`` allows one retry: its second ``Retry`` is a failed repair, and with none allowed the run ends
    ``repair_exhausted``. Before the worker handed the retry to the workflow, each one went back to the model as
    retryable, uncounted, until the step budget ran out."""
    store = SQLiteStore(tmp_path / "runs.db")
    run_id = uuid.uuid4().hex
    budget = Budget(max_steps=6, max_repairs=0)
    script = [tool_calls([(f"c{n}", "busy", json.dumps({"n": n}))]) for n in range(1, 6)] + [text("gave up")]
    async with FakeServer(script=list(script)) as local_server:
        model = OpenAIChatModel("fake", base_url=local_server.base_url, api_key="k")
        async with Agent(model, [busy], budget=budget, store=store) as agent:
            local = await agent.run("Busy?", run_id=f"local-{run_id}")
    client = await Client.connect(temporal_server.address)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with FakeServer(script=list(script)) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(client, queue, model, [busy], store=store):
            handle = await start_run(client, "Busy?", task_queue=queue, run_id=run_id, config=RunConfig(budget))
            result = await handle.result()
        await model.aclose()
    assert (local.status.value, len(local.steps)) == ("repair_exhausted", 2)
    assert (result["status"], result["reason"], result["steps"]) == (local.status.value, local.reason, 2)
    assert [m.to_dict() for m in store.messages(run_id)] == [m.to_dict() for m in store.messages(f"local-{run_id}")]
    assert recorded(store, run_id) == recorded(store, f"local-{run_id}")
    assert store.verify(run_id) == []
    store.close()
