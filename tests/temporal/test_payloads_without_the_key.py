"""``TETHER_TEMPORAL_KEY`` authenticates too: what is written without the key takes no effect on a run.

Whoever can reach the Temporal server without the key sends a decision, a
signal or a run's start in plain text (a plain SDK client here, as
``temporal workflow update`` would). The workers hold the key and refuse it:
the call does not run. ``KEY,plaintext`` reads the runs started before the
key was set. Workers run in this process, so a refusal's log is the test's.
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporal_helpers import until
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateStage
from temporalio.service import RPCError

from tether.drivers.temporal.client import connect, decide, pending, refused_by_workers, start_run
from tether.drivers.temporal.codec import ENCODING, KEY_VARIABLE
from tether.drivers.temporal.devserver import DevServer, temporal_binary
from tether.drivers.temporal.worker import make_worker
from tether.models.openai_chat import OpenAIChatModel
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import ReplySpec, text, tool_calls
from tether.tools import tool
from tether.tools.context import Principal

ANN = Principal("ann", frozenset({"*"}))
KEY = base64.b64encode(bytes(range(32))).decode()
IBAN = "DE89370400440532013000"
ANSWER = "Paid."
NOT_ENCRYPTED = (
    f"a Temporal payload is not encrypted (encoding json/plain) and this process has a {KEY_VARIABLE}, so it reads"
    " only what the key encrypted: the payload was written by a client or worker without the key (or by someone"
    f" without it), or before the key was set; give every client and worker of the task queue the same {KEY_VARIABLE},"
    " and to read runs started before the key was set, add `plaintext` to it (KEY,plaintext)"
)
PAID: list[str] = []  # the accounts ``transfer`` paid, in this process


@tool(approval=True)
def transfer(iban: str, amount: int) -> str:
    """Transfer an amount (a person approves it first).

    Args:
        iban: The account to pay.
        amount: In euros.
    """
    PAID.append(iban)
    return "sent"


def bank(request: dict[str, Any]) -> ReplySpec:
    if request["messages"][-1]["role"] == "user":
        return tool_calls([("c1", "transfer", f'{{"iban": "{IBAN}", "amount": 120}}')])
    return text(ANSWER)


@asynccontextmanager
async def keyed_worker(address: str, store: SQLiteStore, queue: str) -> AsyncIterator[FakeServer]:
    """A worker of ``queue`` with the ``TETHER_TEMPORAL_KEY`` of this process, and the model it asks."""
    async with FakeServer(script=bank) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(await connect(address), queue, model, [transfer], store=store):
            yield server
        await model.aclose()


@asynccontextmanager
async def waiting_for_approval(
    address: str, tmp_path: Path
) -> AsyncIterator[tuple[Client, WorkflowHandle[Any, Any], SQLiteStore]]:
    """A run whose transfer waits for approval on a worker holding ``KEY``: tether's client (with the key), the run
    and the workers' store."""
    PAID.clear()
    store, queue = SQLiteStore(tmp_path / "runs.db"), f"q-{uuid.uuid4().hex[:8]}"
    try:
        async with keyed_worker(address, store, queue):
            client = await connect(address)
            handle = await start_run(client, "Pay the rent.", task_queue=queue, principal=ANN)
            await until(client, handle.id, "awaiting_approval")
            yield client, handle, store
    finally:
        store.close()


def reasons(store: SQLiteStore, run_id: str) -> list[str]:
    """The reasons of the run's decisions, as its audit log holds them."""
    return [e.data["reason"] for e in store.events(run_id) if e.kind == "approval_decided"]


def forged(fingerprint: str) -> dict[str, Any]:
    """An approval of the transfer as ``tether approve`` sends it, in plain JSON."""
    return {"call_id": "c1", "fingerprint": fingerprint, "approved": True, "reason": "forged", "by": "ann"}


async def refusals(address: str, run_id: str, at_least: int = 1) -> list[str]:
    """The messages of the run's failed workflow tasks, once there are ``at_least``."""
    handle = (await Client.connect(address)).get_workflow_handle(run_id)
    deadline = time.monotonic() + 30
    while True:
        events = (await handle.fetch_history()).events
        failed = [e.workflow_task_failed_event_attributes.failure for e in events
                  if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]  # fmt: skip
        if len(failed) >= at_least:
            assert {f.application_failure_info.type for f in failed} == {"KeyRefused"}
            return [f.message for f in failed]
        assert time.monotonic() < deadline, "no workflow task failed"
        await asyncio.sleep(0.1)


async def test_an_approval_sent_without_the_key_is_refused_and_the_call_does_not_run(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The update's payload fails the workflow task that would take it; the server then refuses the update to its
    sender. The run waits as it did and takes the key holder's decision."""
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    async with waiting_for_approval(temporal_server.address, tmp_path) as (client, handle, store):
        (call,) = await pending(client, handle.id)
        forger = await Client.connect(temporal_server.address)  # no codec: anyone who reaches the server
        with pytest.raises(RPCError, match="Workflow Task in failed state"):
            sending = forger.get_workflow_handle(handle.id).start_update(
                "decide", forged(call["fingerprint"]), wait_for_stage=WorkflowUpdateStage.ACCEPTED
            )
            await asyncio.wait_for(sending, 60)
        assert set(await refusals(temporal_server.address, handle.id)) == {NOT_ENCRYPTED}
        assert PAID == []
        await until(client, handle.id, "awaiting_approval")  # the forged approval was not taken
        assert [c["call_id"] for c in await pending(client, handle.id)] == ["c1"]
        assert await decide(client, handle.id, "c1", approved=True, reason="ok", by="ann") == "awaiting_tools"
        result = await asyncio.wait_for(handle.result(), 30)
        assert reasons(store, handle.id) == ["ok"]
    assert (result["status"], result["output"], PAID) == ("completed", ANSWER, [IBAN])


async def test_a_signal_sent_without_the_key_stops_the_run_until_it_is_reset_without_it(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal enters the history before any worker reads it: every workflow task fails on it and nothing of the run
    runs (``tether run`` says why); reset to the last workflow task without signals, the run goes on."""
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    address = temporal_server.address
    async with waiting_for_approval(address, tmp_path) as (client, handle, store):
        (call,) = await pending(client, handle.id)
        forger = await Client.connect(address)
        await forger.get_workflow_handle(handle.id).signal("decide", forged(call["fingerprint"]))
        assert set(await refusals(address, handle.id, at_least=2)) == {NOT_ENCRYPTED}  # retried, refused again
        assert await refused_by_workers(client, handle.id) == NOT_ENCRYPTED
        assert PAID == []
        reset = [temporal_binary(), "workflow", "reset", "--address", address, "--workflow-id", handle.id,
                 "--type", "LastWorkflowTask", "--reapply-exclude", "Signal", "--reason", "forged"]  # fmt: skip
        done = subprocess.run(reset, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        await until(client, handle.id, "awaiting_approval")
        assert await decide(client, handle.id, "c1", approved=True, reason="ok", by="ann") == "awaiting_tools"
        result = await asyncio.wait_for(client.get_workflow_handle(handle.id).result(), 30)
        assert reasons(store, handle.id) == ["ok"]
    assert (result["status"], result["output"], PAID) == ("completed", ANSWER, [IBAN])


async def test_a_run_started_without_the_key_runs_nothing(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    store, queue = SQLiteStore(tmp_path / "runs.db"), f"q-{uuid.uuid4().hex[:8]}"
    forger = await Client.connect(temporal_server.address)
    async with keyed_worker(temporal_server.address, store, queue) as server:
        handle = await start_run(forger, "Pay the rent.", task_queue=queue, principal=ANN)  # a plain SDK client's
        assert set(await refusals(temporal_server.address, handle.id)) == {NOT_ENCRYPTED}
        await handle.terminate(reason="started without the key")
    events = (await handle.fetch_history()).events
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in {e.event_type for e in events}
    assert server.requests == []  # the model was never asked
    assert store.list_runs() == []
    store.close()


async def test_with_plaintext_in_the_variable_a_run_started_before_the_key_goes_on(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers and clients given ``KEY,plaintext`` read what was written before the key and encrypt what they
    write."""
    PAID.clear()
    address = temporal_server.address
    store, queue = SQLiteStore(tmp_path / "runs.db"), f"q-{uuid.uuid4().hex[:8]}"
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    async with keyed_worker(address, store, queue):
        client = await connect(address)
        handle = await start_run(client, "Pay the rent.", task_queue=queue, principal=ANN)
        await until(client, handle.id, "awaiting_approval")
    monkeypatch.setenv(KEY_VARIABLE, f"{KEY},plaintext")
    async with keyed_worker(address, store, queue):
        client = await connect(address)
        assert await decide(client, handle.id, "c1", approved=True, by="ann") == "awaiting_tools"
        result = await asyncio.wait_for(client.get_workflow_handle(handle.id).result(), 30)
    assert (result["status"], result["output"], PAID) == ("completed", ANSWER, [IBAN])
    store.close()
    events = (await (await Client.connect(address)).get_workflow_handle(handle.id).fetch_history()).events
    (started,) = [e.workflow_execution_started_event_attributes.input.payloads[0] for e in events
                  if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED]  # fmt: skip
    (ended,) = [e.workflow_execution_completed_event_attributes.result.payloads[0] for e in events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED]  # fmt: skip
    assert (started.metadata["encoding"], ended.metadata["encoding"]) == (b"json/plain", ENCODING)
