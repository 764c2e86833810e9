"""SIGKILL of a worker: in the middle of a side-effecting call, the effect happens exactly once; holding a run, the
run is finished by another worker; `tether run --engine temporal` waiting meanwhile reports the run as it is.

The call gets one attempt only, so nothing runs it again blindly: its missed
heartbeat makes the outcome unknown, another worker asks the tool's
reconcile hook (an activity), which finds the effect by its idempotency key,
and the run finishes with the effect's result.

A worker that dies while waiting for the model leaves two things behind: the
model request, retried elsewhere once its heartbeat stops, and the run's
workflow in its sticky cache, which another worker rebuilds from the history
once the dead worker's sticky queue times out (a few seconds, not Temporal's
default 10).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from shop_tools import ORDER_RESULT_CHARS
from temporal_helpers import child_env, shop, spawn_worker, stop, transcript, until
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client, WorkflowHandle

from tether.drivers.temporal.client import NotWaiting, decide, pending, reconcile, start_run, status
from tether.drivers.temporal.devserver import DevServer
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import ReplySpec, Responder
from tether.tools import result_envelope


async def test_a_worker_killed_after_the_effect_leaves_exactly_one_effect(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    orders = tmp_path / "orders.jsonl"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(temporal_server.address)
    with FakeServer(script=shop) as server:
        first = spawn_worker(temporal_server.address, queue, server.base_url, child_env(orders, SHOP_HANG_AFTER="60"))
        second = None
        try:
            handle = await start_run(client, "Order 2 tea.", task_queue=queue, heartbeat_seconds=1.0)
            await until(client, handle.id, "awaiting_approval", seconds=20)
            await decide(client, handle.id, "c2", approved=True)
            await effect_written(orders, seconds=20)
            first.send_signal(signal.SIGKILL)  # the effect happened; its result never reached Temporal
            first.wait()
            second = spawn_worker(temporal_server.address, queue, server.base_url, child_env(orders))
            result = await asyncio.wait_for(handle.result(), 60)
            history = await handle.fetch_history()
        finally:
            stop(first)
            if second is not None:
                stop(second)

    assert result["status"] == "completed"
    effects = [json.loads(line) for line in orders.read_text().splitlines()]
    assert effects == [{"key": f"{handle.id}:c2", "item": "tea", "quantity": 2}]  # exactly one
    reply = next(m for m in transcript(orders, handle.id) if m.get("tool_call_id") == "c2")
    assert json.loads(reply["content"]) == {"ok": True, "result": {"order": f"{handle.id}:c2"}}
    assert result["tool_calls"] == 2
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    # model, price, its intent saved, place_order (one attempt, timed out), the reconcile hook, model, the end
    # saved: the order never ran twice.
    assert scheduled == ["tether.call_model", "tether.run_tool", "tether.call_model", "tether.save", "tether.save",
                         "tether.run_tool", "tether.reconcile", "tether.call_model", "tether.save"]  # fmt: skip
    timed_out = [e for e in history.events if e.HasField("activity_task_timed_out_event_attributes")]
    assert len(timed_out) == 1


async def test_without_an_answer_from_the_hook_the_run_waits_for_a_person(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    orders = tmp_path / "orders.jsonl"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(temporal_server.address)
    with FakeServer(script=shop) as server:
        first = spawn_worker(temporal_server.address, queue, server.base_url, child_env(orders, SHOP_HANG_AFTER="60"))
        second = None
        try:
            handle = await start_run(client, "Order 2 tea.", task_queue=queue, heartbeat_seconds=1.0)
            await until(client, handle.id, "awaiting_approval")
            await decide(client, handle.id, "c2", approved=True)
            await effect_written(orders, seconds=20)
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = spawn_worker(temporal_server.address, queue, server.base_url, child_env(orders, SHOP_NO_HOOK="1"))
            await until(client, handle.id, "awaiting_reconciliation")
            await until_phase(client, handle.id, "waiting")  # the hooks had their say: a person is asked
            assert [(c["call_id"], c["waiting_for"]) for c in await pending(client, handle.id)] == [
                ("c2", "reconciliation")
            ]
            with pytest.raises(NotWaiting, match="call c1 has no unknown outcome"):
                await reconcile(client, handle.id, "c1", executed=False)
            key = json.loads(orders.read_text())["key"]
            said = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "tether", "reconcile", handle.id, "c2", "--temporal", temporal_server.address,
                 "--executed", json.dumps({"order": key})],
                capture_output=True, text=True, env=child_env(orders), timeout=60,
            )  # fmt: skip
            assert said.returncode == 0, said.stderr
            assert f"call c2 recorded as executed; run {handle.id} is awaiting_tools" in said.stdout
            result = await asyncio.wait_for(handle.result(), 60)
        finally:
            stop(first)
            if second is not None:
                stop(second)

    assert result["status"] == "completed"
    assert len(orders.read_text().splitlines()) == 1  # the person said it ran: not run again
    reply = next(m for m in transcript(orders, handle.id) if m.get("tool_call_id") == "c2")
    assert json.loads(reply["content"]) == {"ok": True, "result": {"order": f"{handle.id}:c2"}}


@pytest.mark.parametrize("by", ["hook", "person"])
async def test_a_call_run_again_after_a_worker_died_before_its_effect_has_its_intent_in_the_ledger(
    temporal_server: DevServer, tmp_path: Path, by: str
) -> None:
    """Killed before the effect; the hook (or a person, with ``--not-executed``) says it never ran, so it runs
    again: its new intent is in the ledger before the effect, and the run verifies intact."""
    orders, gate, started = tmp_path / "orders.jsonl", tmp_path / "gate", tmp_path / "started"
    env = child_env(orders, SHOP_ORDER_GATE=str(gate), SHOP_ORDER_STARTED=str(started))
    queue = f"q-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(temporal_server.address)
    with FakeServer(script=shop) as server:
        first = spawn_worker(temporal_server.address, queue, server.base_url, env)
        second = None
        try:
            handle = await start_run(client, "Order 2 tea.", task_queue=queue, heartbeat_seconds=1.0)
            await until(client, handle.id, "awaiting_approval")
            await decide(client, handle.id, "c2", approved=True)
            await lines_in(started, 1)
            first.send_signal(signal.SIGKILL)  # inside place_order, before its effect
            first.wait()
            second = spawn_worker(
                temporal_server.address, queue, server.base_url, env | ({"SHOP_NO_HOOK": "1"} if by == "person" else {})
            )
            if by == "person":
                await until(client, handle.id, "awaiting_reconciliation")
                said = await asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, "-m", "tether", "reconcile", handle.id, "c2", "--temporal",
                     temporal_server.address, "--not-executed"],
                    capture_output=True, text=True, env=env, timeout=60,
                )  # fmt: skip
                assert said.returncode == 0, said.stderr
            await lines_in(started, 2)  # run again, waiting before its effect
            with closing(SQLiteStore(tmp_path / "runs.db")) as store:
                entry = store.ledger_entry(handle.id, "c2")
            assert entry is not None and entry.outcome is None  # the intent is recorded before the effect
            gate.touch()
            result = await asyncio.wait_for(handle.result(), 60)
        finally:
            gate.touch()
            stop(first)
            if second is not None:
                stop(second)

    assert result["status"] == "completed"
    assert [json.loads(line)["key"] for line in orders.read_text().splitlines()] == [f"{handle.id}:c2"]
    with closing(SQLiteStore(tmp_path / "runs.db")) as store:
        kinds = [e.kind for e in store.events(handle.id)]
        assert kinds.count("intent_recorded") == 2 and kinds.count("outcome_recorded") == 1
        entry = store.ledger_entry(handle.id, "c2")
        assert entry is not None and entry.outcome is not None
        assert store.verify(handle.id) == []
    verified = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "tether", "runs", "verify", handle.id],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"run {handle.id}: intact" in verified.stdout


def final_answer_held(seconds: float) -> Responder:
    """The shop's model, whose first final answer takes ``seconds`` (a worker waiting for it can be killed)."""
    held: list[bool] = []

    def respond(request: dict[str, Any]) -> ReplySpec:
        reply = shop(request)
        if request["messages"][-1].get("tool_call_id") == "c2" and not held:
            held.append(True)
            return replace(reply, latency=seconds)
        return reply

    return respond


async def test_a_worker_killed_holding_the_run_leaves_it_to_another_worker(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    orders = tmp_path / "orders.jsonl"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(temporal_server.address)
    with FakeServer(script=final_answer_held(120.0)) as server:
        first = spawn_worker(temporal_server.address, queue, server.base_url, child_env(orders))
        second = None
        try:
            handle = await start_run(client, "Order 2 tea.", task_queue=queue, heartbeat_seconds=1.0)
            await until(client, handle.id, "awaiting_approval")
            await decide(client, handle.id, "c2", approved=True)
            deadline = time.monotonic() + 20
            while len(server.requests) < 3:  # the final model request, on the only worker, which holds the run
                assert time.monotonic() < deadline, "the final model request never came"
                await asyncio.sleep(0.02)
            first.send_signal(signal.SIGKILL)
            first.wait()
            killed = time.monotonic()
            second = spawn_worker(temporal_server.address, queue, server.base_url, child_env(orders))
            result = await asyncio.wait_for(handle.result(), 30)
            took = time.monotonic() - killed
            history = await handle.fetch_history()
        finally:
            stop(first)
            if second is not None:
                stop(second)

    assert (result["status"], result["output"]) == ("completed", "Ordered 2 tea for 6.")
    assert took < 20  # a missed heartbeat (1 s), the sticky queue's timeout (3 s), the other worker's start
    effects = [json.loads(line) for line in orders.read_text().splitlines()]
    assert effects == [{"key": f"{handle.id}:c2", "item": "tea", "quantity": 2}]  # one effect
    events = history.events
    scheduled = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                 if e.HasField("activity_task_scheduled_event_attributes")}  # fmt: skip
    completed = [scheduled[e.activity_task_completed_event_attributes.scheduled_event_id] for e in events
                 if e.HasField("activity_task_completed_event_attributes")]  # fmt: skip
    # One completion per model request and per call: the order ran once, so did the price
    # (``tether.save`` writes to the run store between them).
    assert [name for name in completed if name != "tether.save"] == [
        "tether.call_model", "tether.run_tool", "tether.call_model", "tether.run_tool", "tether.call_model"
    ]  # fmt: skip
    assert not [e for e in events if e.HasField("activity_task_timed_out_event_attributes")]
    started = [e.activity_task_started_event_attributes for e in events
               if e.HasField("activity_task_started_event_attributes")]  # fmt: skip
    attempts = [a for a in started if scheduled[a.scheduled_event_id] != "tether.save"]
    # The killed worker's model request was retried once its heartbeat stopped, by the other worker.
    assert [a.attempt for a in attempts] == [1, 1, 1, 1, 2]
    retried = attempts[-1].last_failure.timeout_failure_info.timeout_type
    assert retried == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
    # The next workflow task waited on the dead worker's sticky queue, then went to the other worker.
    timed_out = [e for e in events if e.HasField("workflow_task_timed_out_event_attributes")]
    assert [e.workflow_task_timed_out_event_attributes.timeout_type for e in timed_out] == [
        TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
    ]
    waiting = next(
        e for e in events if e.event_id == timed_out[0].workflow_task_timed_out_event_attributes.scheduled_event_id
    )
    waited = timed_out[0].event_time.ToDatetime() - waiting.event_time.ToDatetime()
    assert waited.total_seconds() < 6  # make_worker's few seconds, not Temporal's default 10
    assert len({e.workflow_task_completed_event_attributes.identity for e in events
                if e.HasField("workflow_task_completed_event_attributes")}) == 2  # fmt: skip


def waiting_client(address: str, queue: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """`tether run --engine temporal` for the shop's prompt, waiting for the run's end or a pause."""
    return subprocess.Popen(
        [sys.executable, "-m", "tether", "run", "Order 2 tea.", "--engine", "temporal", "--temporal", address,
         "--task-queue", queue],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.parametrize("hook", [True, False])
async def test_the_waiting_client_reports_a_reconciliation_only_when_a_person_must_decide(
    temporal_server: DevServer, tmp_path: Path, hook: bool
) -> None:
    """The order's worker dies after the effect; while the hook of another worker decides, the run is
    ``reconciling`` and `tether run` waits on: it ends with the answer. Without a hook it reports the wait."""
    orders, gate, hooked = tmp_path / "orders.jsonl", tmp_path / "gate", tmp_path / "hooked"
    env = child_env(orders, SHOP_NO_APPROVAL="1")
    address, queue = temporal_server.address, f"q-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(address)
    with FakeServer(script=shop) as server:
        first = spawn_worker(address, queue, server.base_url, env | {"SHOP_HANG_AFTER": "60"}, "--heartbeat", "1")
        second = None
        waiting = waiting_client(address, queue, env)
        try:
            await effect_written(orders, seconds=30)
            run_id = json.loads(orders.read_text())["key"].split(":")[0]
            first.send_signal(signal.SIGKILL)
            first.wait()
            decides = {"SHOP_HOOK_GATE": str(gate), "SHOP_HOOK_STARTED": str(hooked)} if hook else {"SHOP_NO_HOOK": "1"}
            second = spawn_worker(address, queue, server.base_url, env | decides, "--heartbeat", "1")
            if hook:
                await lines_in(hooked, 1)  # the hook is deciding, and holds still until the gate opens
                found = await status(client, run_id)
                assert (found["status"], found["phase"]) == ("awaiting_reconciliation", "reconciling")
                assert await pending(client, run_id) == []  # nothing for a person to do
                assert waiting.poll() is None  # so the client waits on
                gate.touch()
            out, err = await asyncio.to_thread(waiting.communicate, timeout=90)
            after = await status(client, run_id)
        finally:
            gate.touch()
            stop(first)
            if second is not None:
                stop(second)
            if waiting.poll() is None:
                waiting.kill()

    assert "Traceback" not in err
    if hook:
        assert waiting.returncode == 0, err
        assert (after["status"], after["phase"]) == ("completed", "finished")
        assert out == "Ordered 2 tea for 6.\n"
        assert "paused" not in err
    else:
        assert waiting.returncode == 21, err  # awaiting_reconciliation
        assert (after["status"], after["phase"]) == ("awaiting_reconciliation", "waiting")
        assert f"paused: the outcome of call c2 is unknown; record it with `tether reconcile {run_id} c2" in err
    assert len(orders.read_text().splitlines()) == 1


async def test_the_waiting_client_outlives_a_worker_killed_holding_the_run(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """The only worker dies waiting for the model: queries go unanswered, and `tether run` says so and waits on
    (it does not crash); once another worker takes the run it reports the wait for approval at once."""
    orders = tmp_path / "orders.jsonl"
    env = child_env(orders)
    address, queue = temporal_server.address, f"q-{uuid.uuid4().hex[:8]}"
    with FakeServer(script=first_request_held(120.0)) as server:
        first = spawn_worker(address, queue, server.base_url, env, "--heartbeat", "1")
        second = None
        waiting = waiting_client(address, queue, env)
        assert waiting.stderr is not None
        said: list[str] = []
        try:
            deadline = time.monotonic() + 30
            while not server.requests:
                assert time.monotonic() < deadline, "the model was never asked"
                await asyncio.sleep(0.02)
            first.send_signal(signal.SIGKILL)  # it held the run
            first.wait()
            while not said or "cannot be read now" not in said[-1]:
                line = await asyncio.to_thread(waiting.stderr.readline)
                assert line, f"the client ended: {''.join(said)}"
                said.append(line)
            assert waiting.poll() is None
            second = spawn_worker(address, queue, server.base_url, env, "--heartbeat", "1")
            out, err = await asyncio.to_thread(waiting.communicate, timeout=90)
        finally:
            stop(first)
            if second is not None:
                stop(second)
            if waiting.poll() is None:
                waiting.kill()

    err = "".join(said) + err
    assert waiting.returncode == 20, err  # awaiting_approval
    assert "Traceback" not in err
    run_id = said[-1].split()[1].rstrip(":")
    assert said[-1].startswith(f"run {run_id}: its status cannot be read now (")
    assert out == ""  # no answer yet
    needs = "paused: call c2 place_order needs approval: place_order requires approval; approve with"
    assert f"{needs} `tether approve {run_id} c2" in err


def first_request_held(seconds: float) -> Responder:
    """The shop's model, whose first reply takes ``seconds`` (the worker waiting for it can be killed)."""
    held: list[bool] = []

    def respond(request: dict[str, Any]) -> ReplySpec:
        reply = shop(request)
        if not held:
            held.append(True)
            return replace(reply, latency=seconds)
        return reply

    return respond


async def until_phase(client: Client, run_id: str, wanted: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while (await status(client, run_id))["phase"] != wanted:
        assert time.monotonic() < deadline, f"run {run_id} never reached the phase {wanted}"
        await asyncio.sleep(0.05)


async def lines_in(path: Path, count: int, seconds: float = 30) -> None:
    """Wait until the file at ``path`` holds ``count`` lines."""
    deadline = time.monotonic() + seconds
    while not (path.exists() and len(path.read_text().splitlines()) >= count):
        assert time.monotonic() < deadline, f"{path.name} never held {count} line(s)"
        await asyncio.sleep(0.02)


async def effect_written(orders: Path, seconds: float) -> None:
    """Wait until the shop's order file holds an effect."""
    deadline = time.monotonic() + seconds
    while not (orders.exists() and orders.read_text()):
        assert time.monotonic() < deadline, "the effect never happened"
        await asyncio.sleep(0.02)


@asynccontextmanager
async def waiting_for_a_person(address: str, tmp_path: Path) -> AsyncIterator[tuple[Client, WorkflowHandle[Any, Any]]]:
    """A run whose order took effect on a worker killed before it said so, with no hook to tell: it waits in
    ``awaiting_reconciliation`` for a person, another worker holding it. ``SHOP_ORDERS`` is ``orders.jsonl`` in
    ``tmp_path``."""
    orders = tmp_path / "orders.jsonl"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(address)
    env = child_env(orders, SHOP_NO_APPROVAL="1", SHOP_NO_HOOK="1")
    with FakeServer(script=shop) as server:
        first = spawn_worker(address, queue, server.base_url, env | {"SHOP_HANG_AFTER": "60"})
        second = None
        try:
            handle = await start_run(client, "Order 2 tea.", task_queue=queue, heartbeat_seconds=1.0)
            await effect_written(orders, seconds=20)
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = spawn_worker(address, queue, server.base_url, env)
            await until(client, handle.id, "awaiting_reconciliation")
            await until_phase(client, handle.id, "waiting")
            yield client, handle
        finally:
            stop(first)
            if second is not None:
                stop(second)


@pytest.mark.parametrize(
    ("result", "why"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep"),
        ("[" * 65 + "]" * 65, "nested more than 64 levels deep"),
        ('{"order": "\\ud800"}', "not text: it holds a lone UTF-16 surrogate"),
    ],
    ids=["deep", "past_the_limit", "lone_surrogate"],
)
async def test_a_result_the_cli_would_refuse_is_refused_by_the_workflow_too(
    temporal_server: DevServer, tmp_path: Path, result: str, why: str
) -> None:
    """A ``reconcile`` update straight from the client (a script, a service) is held to what ``tether reconcile
    --executed`` accepts: JSON at most 64 levels deep, text that can be stored. Before, the validator let 65 levels
    and a lone surrogate into the transcript, and refused 100,000 levels with Python's recursion error."""
    async with waiting_for_a_person(temporal_server.address, tmp_path) as (client, handle):
        with pytest.raises(NotWaiting) as refused:
            await reconcile(client, handle.id, "c2", executed=True, result=result)
        assert str(refused.value) == f"run {handle.id}: an executed call's result must be JSON: {why}"
        accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        assert accepted not in [e.event_type for e in (await handle.fetch_history()).events]  # refused before
        await reconcile(client, handle.id, "c2", executed=True, result='{"order": "placed"}')
        done = await asyncio.wait_for(handle.result(), 60)

    assert done["status"] == "completed"
    reply = next(m for m in transcript(tmp_path / "orders.jsonl", handle.id) if m.get("tool_call_id") == "c2")
    assert json.loads(reply["content"]) == {"ok": True, "result": {"order": "placed"}}


async def test_a_reconciled_result_is_cut_to_the_tools_bound_as_a_returned_one_is(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """A person's result sent by the ``reconcile`` update reached the history, the store and the model whole at any
    length; the local driver cuts it to the tool's ``max_result_chars`` as a result the tool returned is. The
    tool's own bound (not the default) reaches the workflow with the reconcile activity's "unknown"."""
    result = {"order": "placed", "note": "x" * 30_000}
    async with waiting_for_a_person(temporal_server.address, tmp_path) as (client, handle):
        await reconcile(client, handle.id, "c2", executed=True, result=json.dumps(result))
        done = await asyncio.wait_for(handle.result(), 60)

    assert done["status"] == "completed"
    reply = next(m for m in transcript(tmp_path / "orders.jsonl", handle.id) if m.get("tool_call_id") == "c2")
    assert reply["content"] == result_envelope(result, ORDER_RESULT_CHARS)  # the tool's bound, not the default
    assert "[truncated: showing 5000 of 30031 characters]" in reply["content"]


async def test_a_worker_killed_while_the_reconcile_hook_decides_is_replaced_within_seconds(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """The hook's activity heartbeats as a tool's does: another worker asks the hook again once the heartbeat
    stops. Before, the retry waited for the activity's five-minute timeout."""
    orders, gate, hooked = tmp_path / "orders.jsonl", tmp_path / "gate", tmp_path / "hooked"
    env = child_env(orders, SHOP_NO_APPROVAL="1")
    address, queue = temporal_server.address, f"q-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(address)
    with FakeServer(script=shop) as server:
        first = spawn_worker(address, queue, server.base_url, env | {"SHOP_HANG_AFTER": "60"})
        second = third = None
        try:
            handle = await start_run(client, "Order 2 tea.", task_queue=queue, heartbeat_seconds=1.0)
            await effect_written(orders, seconds=30)
            first.send_signal(signal.SIGKILL)
            first.wait()
            held = {"SHOP_HOOK_GATE": str(gate), "SHOP_HOOK_STARTED": str(hooked)}  # the gate never opens
            second = spawn_worker(address, queue, server.base_url, env | held)
            await lines_in(hooked, 1)
            second.send_signal(signal.SIGKILL)  # dies while its hook decides
            second.wait()
            third = spawn_worker(address, queue, server.base_url, env)
            result = await asyncio.wait_for(handle.result(), 60)
        finally:
            for worker in (first, second, third):
                if worker is not None:
                    stop(worker)

    assert result["status"] == "completed"
    assert len(orders.read_text().splitlines()) == 1  # the hook found the effect: not run again
