"""The saving activity's work against a real SQLite file: a retried save appends nothing twice.

Temporal retries an activity whose worker died or whose result was lost, so
the same save can arrive twice; the store must end as after one.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from tether.core.budget import RunConfig
from tether.core.machine import RunState
from tether.core.messages import Message
from tether.drivers.temporal.activities import save_run
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.payloads import Creation, PrincipalData, SaveRequest
from tether.store import RunStore, SQLiteStore

PRINCIPAL = PrincipalData("local", ())


def request(events_from: int, messages_from: int, messages: list[Message], events: int) -> SaveRequest:
    state = RunState("run-1", RunConfig(), list(messages))
    return SaveRequest(
        run_id="run-1",
        create=Creation(PRINCIPAL, {"engine": "temporal"}) if events_from == 0 else None,
        progress=state.progress(),
        config=state.config,
        events_from=events_from,
        events=tuple(("step_started", {}, 1, 100.0 + events_from + i) for i in range(events)),
        messages_from=messages_from,
        messages=tuple(m.to_dict() for m in messages),
        outcomes=(),
        intents=(),
        cleared=(),
    )


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return SQLiteStore(tmp_path / "runs.db")


def test_a_retried_save_appends_nothing_twice(store: RunStore) -> None:
    first = request(0, 0, [Message("user", "hi")], 2)
    save_run(store, first)
    save_run(store, first)  # the retry of the run's first save, which created it
    assert store.counts("run-1") == (2, 1)
    second = request(2, 1, [Message("assistant", "hello"), Message("user", "more")], 3)
    save_run(store, second)
    save_run(store, second)
    assert store.counts("run-1") == (5, 3)
    assert [m.content for m in store.messages("run-1")] == ["hi", "hello", "more"]
    assert store.verify("run-1") == []
    assert store.load("run-1").setup["engine"] == "temporal"


def test_a_save_that_does_not_follow_the_store_fails_for_good(store: RunStore) -> None:
    save_run(store, request(0, 0, [Message("user", "hi")], 2))
    with pytest.raises(ApplicationError, match="holds 2 events and 1 messages, the workflow expected 4") as refused:
        save_run(store, request(4, 1, [Message("assistant", "hello")], 1))
    assert refused.value.non_retryable
    assert store.counts("run-1") == (2, 1)
    save_run(store, request(2, 1, [Message("assistant", "hello")], 1))  # the lease was let go
    assert store.verify("run-1") == []


def test_a_decision_on_a_temporal_run_without_temporal_is_refused(store: RunStore) -> None:
    from tether.core.errors import ApprovalMismatch
    from tether.drivers.local.durable import decide

    save_run(store, request(0, 0, [Message("user", "hi")], 1))
    with pytest.raises(ApprovalMismatch, match="run run-1 is driven by Temporal workers: send it with --temporal"):
        decide(store, "run-1", "c1", approved=True)
    assert store.counts("run-1") == (1, 1)  # nothing written


def test_the_first_save_after_the_client_recorded_the_run_goes_on_from_its_record(store: RunStore) -> None:
    from tether.core.machine import Run
    from tether.drivers.temporal.client import _NoTools, record_start
    from tether.tools.context import LOCAL_PRINCIPAL

    run = Run.new("run-1", [Message("user", "hi")], _NoTools(), RunConfig())
    assert record_start(store, run, LOCAL_PRINCIPAL, "q") == {"events": 1, "messages": 1}
    assert (store.load("run-1").state.status.value, store.counts("run-1")) == ("ready", (1, 1))
    first = replace(request(1, 1, [], 2), create=None)
    save_run(store, first)
    save_run(store, first)  # retried: nothing twice
    assert store.counts("run-1") == (3, 1)
    assert [e.kind for e in store.events("run-1")] == ["run_started", "step_started", "step_started"]
    assert store.verify("run-1") == []


async def test_a_run_the_server_does_not_start_is_recorded_as_cancelled(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    from temporalio.client import Client
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from tether.drivers.temporal.client import start_run

    client = await Client.connect(temporal_server.address)
    run_id, queue = uuid.uuid4().hex, f"q-{uuid.uuid4().hex[:8]}"  # no worker: the first start stays pending
    await start_run(client, "hi", task_queue=queue, run_id=run_id)
    other = SQLiteStore(tmp_path / "other.db")
    with pytest.raises(WorkflowAlreadyStartedError):
        await start_run(client, "hi", task_queue=queue, run_id=run_id, store=other)
    stored = other.load(run_id)
    assert stored.state.status.value == "cancelled"
    assert (stored.state.reason or "").startswith("the Temporal server did not start the run: ")
    assert [e.kind for e in other.events(run_id)] == ["run_started", "run_finished"]
    assert other.verify(run_id) == []
    await client.get_workflow_handle(run_id).terminate()
