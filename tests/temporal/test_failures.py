"""Deterministic failures fail the workflow at once instead of retrying forever: a bug in workflow code,
a payload over Temporal's limit (the model asked or the tool run once, not again), and the store says why."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from tether.drivers.temporal.client import start_run
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import make_worker
from tether.drivers.temporal.workflow import WORKFLOW_NAME, RunWorkflow
from tether.models.openai_chat import OpenAIChatModel
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls
from tether.tools import tool


async def test_a_start_the_workflow_cannot_read_fails_the_workflow(temporal_server: DevServer) -> None:
    client = await Client.connect(temporal_server.address)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[RunWorkflow]):
        handle = await client.start_workflow(WORKFLOW_NAME, {"no": "messages"}, id=uuid.uuid4().hex, task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 15)
    assert "messages" in str(failed.value.cause)


BIG = 3_000_000  # characters: over the 2 MiB a Temporal payload may carry
# Characters of two UTF-8 bytes: 1.4 MB as text, under the limit; a payload escapes each one (\u00e9), 4.2 MB.
ACCENTED = 700_000
runs_of_dump: list[str] = []


@tool(read_only=True, max_result_chars=2 * BIG)
def dump(name: str) -> str:
    """A whole data set, as text.

    Args:
        name: The data set.
    """
    runs_of_dump.append(name)
    return "\u00e9" * ACCENTED if name == "accented" else "y" * BIG


@pytest.mark.parametrize(
    ("script", "what"),
    [
        ([text("x" * BIG)], "the model's reply is"),
        ([tool_calls([("c1", "dump", '{"name": "all"}')]), text("done")], "the result of call c1 (dump) is"),
        ([text("\u00e9" * ACCENTED)], "the model's reply is"),
        ([tool_calls([("c1", "dump", '{"name": "accented"}')]), text("done")], "the result of call c1 (dump) is"),
    ],
    ids=["model_reply", "tool_result", "model_reply_escaped", "tool_result_escaped"],
)
async def test_a_payload_over_the_limit_fails_the_workflow_at_once_and_the_store_says_why(
    temporal_server: DevServer, tmp_path: Path, script: list[Any], what: str
) -> None:
    client = await Client.connect(temporal_server.address)
    queue, run_id = f"q-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    store = SQLiteStore(tmp_path / "runs.db")
    runs_of_dump.clear()
    async with FakeServer(script=[*script, *script]) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(client, queue, model, [dump], store=store):
            handle = await start_run(client, "Dump it all.", task_queue=queue, run_id=run_id)
            started = time.monotonic()
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 30)
            took = time.monotonic() - started
        await model.aclose()
    reason = failed.value.cause.message if isinstance(failed.value.cause, ApplicationError) else ""
    assert reason.startswith(f"the workflow failed: {what} ")
    assert "bytes, more than a Temporal payload carries" in reason
    assert took < 10  # promptly: no retries
    assert len(server.requests) == 1  # the model was asked once, never again
    assert len(runs_of_dump) == (1 if "dump" in what else 0)  # the tool ran once
    stored = store.load(run_id)
    assert (stored.state.status.value, stored.state.reason) == ("cancelled", reason)
    assert [e.kind for e in store.events(run_id)][-1] == "run_finished"
    assert store.verify(run_id) == []
    store.close()
