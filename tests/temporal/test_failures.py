"""Deterministic failures fail the workflow at once instead of retrying forever: a bug in workflow code,
a payload over Temporal's limit (the model asked or the tool run once, not again), and the store says why."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import Worker

from tether.core.errors import ConfigurationError
from tether.drivers.temporal.client import start_run
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import make_worker
from tether.drivers.temporal.workflow import WORKFLOW_NAME, RunWorkflow
from tether.models.openai_chat import OpenAIChatModel
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
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


@pytest.mark.parametrize("prompt", ["x" * BIG, "\u00e9" * ACCENTED], ids=["long", "escaped"])
async def test_a_prompt_over_the_limit_is_refused_before_anything_is_started_or_stored(
    temporal_server: DevServer, tmp_path: Path, prompt: str
) -> None:
    client = await Client.connect(temporal_server.address)
    store = SQLiteStore(tmp_path / "runs.db")
    with pytest.raises(ConfigurationError, match=r"the run's start .* is \d+ bytes as a Temporal payload, more than"):
        await start_run(client, prompt, task_queue=f"q-{uuid.uuid4().hex[:8]}", store=store, run_id="big-prompt")
    assert store.list_runs() == []
    with pytest.raises(RPCError, match="not found"):
        await client.get_workflow_handle("big-prompt").describe()


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


# Characters: each copy fits in a payload, all the copies of one save (its message, events, progress) do not. The
# prompt and the two results are sent to the model, whose (fake) server takes a request of at most 1 MiB.
LARGE_REPLY, LARGE_PROMPT, LARGE_RESULT = 1_200_000, 1_030_000, 450_000


@tool(read_only=True, max_result_chars=LARGE_RESULT)
def chapter(n: int) -> str:
    """One long chapter of a book.

    Args:
        n: The chapter.
    """
    return str(n) * LARGE_RESULT


@tool()
def shelve(n: int) -> str:
    """Put a chapter back on the shelf.

    Args:
        n: The chapter.
    """
    return f"chapter {n} shelved"


@pytest.mark.parametrize(
    ("prompt", "script"),
    [
        ("Say a lot.", [text("x" * LARGE_REPLY)]),
        ("Read two.", [tool_calls([("c1", "chapter", '{"n": 1}'), ("c2", "chapter", '{"n": 2}')]), text("Read.")]),
        ("p" * LARGE_PROMPT, [text("Long prompt read.")]),
    ],
    ids=["model_reply", "tool_results", "prompt"],
)
async def test_what_fits_in_a_payload_is_saved_in_parts_and_the_run_ends_as_locally(
    temporal_server: DevServer, tmp_path: Path, prompt: str, script: list[Any]
) -> None:
    """A reply, a prompt or results that each fit in a payload, but not all their copies in one save: the save is
    cut into parts, each fitting, and the run completes with its whole transcript stored. Before, the workflow failed
    on its save and the store kept the run as awaiting_model for ever."""
    client = await Client.connect(temporal_server.address)
    queue, run_id = f"q-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    store = SQLiteStore(tmp_path / "runs.db")
    async with FakeServer(script=list(script)) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(client, queue, model, [chapter], store=store):
            handle = await start_run(client, prompt, task_queue=queue, run_id=run_id)
            result = await asyncio.wait_for(handle.result(), 60)
        await model.aclose()
    assert result["status"] == "completed"
    stored = store.load(run_id)
    assert (stored.state.status.value, stored.state.output) == ("completed", result["output"])
    assert [m.content for m in stored.state.messages] == [m["content"] for m in server.requests[-1]["messages"]] + [
        result["output"]
    ]
    assert [e.kind for e in store.events(run_id)][-1] == "run_finished"
    assert store.verify(run_id) == []
    store.close()


async def test_an_intent_saved_with_results_too_large_for_one_save_is_in_the_ledger_before_its_effect(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """Three long results, then a side effect in the same step: the save of its intent carries the results twice
    (events, ledger outcomes), more than one payload. Its parts keep each ledger write with its event and the
    intent in the last, so the run verifies. (A scripted model: the fake server takes a request of 1 MiB at most.)"""
    client = await Client.connect(temporal_server.address)
    queue, run_id = f"q-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    store = SQLiteStore(tmp_path / "runs.db")
    calls = [(f"c{n}", "chapter", json.dumps({"n": n})) for n in (1, 2, 3)] + [("c4", "shelve", '{"n": 1}')]
    model = ScriptedModel([reply_calls(*calls), reply_text("Read and shelved.")])
    async with make_worker(client, queue, model, [chapter, shelve], store=store):
        handle = await start_run(client, "Read three and shelve one.", task_queue=queue, run_id=run_id)
        result = await asyncio.wait_for(handle.result(), 60)
    assert (result["status"], result["tool_calls"]) == ("completed", 4)
    kinds = [e.kind for e in store.events(run_id)]
    assert kinds.count("intent_recorded") == kinds.count("outcome_recorded") == 1
    entry = store.ledger_entry(run_id, "c4")
    assert entry is not None and entry.outcome is not None
    assert store.verify(run_id) == []
    store.close()


async def test_a_failure_after_text_too_large_for_one_save_is_recorded_in_parts(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """The reply (large text, a call) fits; its call's result does not, so the workflow fails: the store records the
    run as cancelled, though the reply's copies in that last save do not fit in one payload. Before, that save was
    given up and the store kept the run as awaiting_model."""
    client = await Client.connect(temporal_server.address)
    queue, run_id = f"q-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    store = SQLiteStore(tmp_path / "runs.db")
    reply = tool_calls([("c1", "dump", '{"name": "all"}')], content="x" * LARGE_REPLY)
    async with FakeServer(script=[reply]) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(client, queue, model, [dump], store=store):
            handle = await start_run(client, "Dump it all.", task_queue=queue, run_id=run_id)
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 60)
        await model.aclose()
    reason = failed.value.cause.message if isinstance(failed.value.cause, ApplicationError) else ""
    assert reason.startswith("the workflow failed: the result of call c1 (dump) is ")
    stored = store.load(run_id)
    assert (stored.state.status.value, stored.state.reason) == ("cancelled", reason)
    assert [m.content for m in stored.state.messages if m.role == "assistant"] == ["x" * LARGE_REPLY]
    assert [e.kind for e in store.events(run_id)][-1] == "run_finished"
    assert store.verify(run_id) == []
    store.close()
