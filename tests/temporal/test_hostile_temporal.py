"""A Temporal run whose model sends deeply nested arguments: refused as in the local driver, the workflow ends.

Issue 17 point 10 for the Temporal engine: when a run ended with a step's
refusals still to report (its last allowed step asked for tools), the
workflow decoded the refused call's arguments again and raised
``RecursionError``: a workflow task failure that Temporal retries for ever,
so the run never ended.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from shop_tools import TOOLS
from temporalio.client import Client

from tether.core import Budget, RunConfig
from tether.drivers.temporal.client import start_run
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import make_worker
from tether.models.openai_chat import OpenAIChatModel
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls


@pytest.mark.parametrize(("max_steps", "status"), [(8, "completed"), (1, "max_steps")])
async def test_deep_arguments_are_refused_and_the_workflow_ends(
    temporal_server: DevServer, tmp_path: Path, max_steps: int, status: str
) -> None:
    client = await Client.connect(temporal_server.address)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    store = SQLiteStore(tmp_path / "runs.db")
    arguments = '{"item": ' + "[" * 5_000 + "]" * 5_000 + "}"
    config = RunConfig(Budget(max_steps=max_steps))
    async with FakeServer([tool_calls([("c1", "price", arguments)]), text("No price for that.")]) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k", max_retries=0)
        async with make_worker(client, queue, model, TOOLS, store=store):
            run_id = f"run-{uuid.uuid4().hex[:8]}"
            handle = await start_run(client, "What does it cost?", task_queue=queue, run_id=run_id, config=config)
            result = await asyncio.wait_for(handle.result(), 60)
        await model.aclose()

    assert result["status"] == status
    rejected = [e.data for e in store.events(run_id) if e.kind == "call_rejected"]
    assert [(e["id"], e["arguments"]) for e in rejected] == [("c1", None)]
