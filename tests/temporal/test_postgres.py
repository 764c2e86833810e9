"""A Temporal run recorded in PostgreSQL: two `tether worker` processes on one task queue share one database.

Everything is a separate process talking to real servers: the dev server,
PostgreSQL 15, the FakeServer; the approval is `tether approve --temporal`
and the run store is read back with `tether runs list/show/verify --db URL`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from postgres_server import PostgresServer
from temporal_helpers import child_env, shop, spawn_worker, stop
from temporalio.client import Client

from tether.drivers.temporal.devserver import DevServer
from tether.store import open_store
from tether.testing import FakeServer


def tether(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, env=env, timeout=60)


async def test_two_workers_share_one_postgres_store(
    temporal_server: DevServer, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = postgres_server.schema_url()
    orders = tmp_path / "orders.jsonl"
    env = child_env(orders, TETHER_DB=url)
    address, queue = temporal_server.address, f"q-{uuid.uuid4().hex[:8]}"
    with FakeServer(script=shop) as server:
        first = spawn_worker(address, queue, server.base_url, env)
        workers = [first]
        try:
            started = tether(env, "run", "Order 2 tea.", "--engine", "temporal", "--temporal", address,
                             "--task-queue", queue, "--json")  # fmt: skip
            assert started.returncode == 20, started.stderr  # paused for the approval of place_order
            run_id = json.loads(started.stdout)["run_id"]
            # A second worker joins the queue; the first leaves: the run goes on from what the first stored.
            second = spawn_worker(address, queue, server.base_url, env)
            workers.append(second)
            first.send_signal(signal.SIGTERM)
            assert first.wait(30) == 0
            approved = tether(env, "approve", run_id, "c2", "--temporal", address)
            assert approved.returncode == 0, approved.stderr
            client = await Client.connect(address)
            handle = client.get_workflow_handle(run_id)
            result = await handle.result()
            assert (result["status"], result["output"]) == ("completed", "Ordered 2 tea for 6.")
            history = await handle.fetch_history()
            second.send_signal(signal.SIGTERM)
            assert second.wait(30) == 0
        finally:
            for worker in workers:
                stop(worker)
    # Each worker ran activities (saves, model requests, calls) of this run: both wrote to the one database.
    ran_by = {
        e.activity_task_started_event_attributes.identity.split("@")[0]
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    }
    assert ran_by == {str(first.pid), str(second.pid)}
    assert [json.loads(line)["key"] for line in orders.read_text().splitlines()] == [f"{run_id}:c2"]

    listed = tether(env, "runs", "list", "--db", url, "--json")
    assert listed.returncode == 0, listed.stderr
    entry = next(r for r in json.loads(listed.stdout) if r["run_id"] == run_id)
    assert (entry["status"], entry["engine"], entry["steps"]) == ("completed", "temporal", 3)
    shown = tether(env, "runs", "show", run_id, "--db", url)
    assert shown.returncode == 0, shown.stderr
    assert "on temporal" in shown.stdout and "call c2 place_order: approved by cli" in shown.stdout
    assert "answer: Ordered 2 tea for 6." in shown.stdout
    verified = tether(env, "runs", "verify", run_id, "--db", url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"run {run_id}: intact" in verified.stdout

    store = open_store(url)
    try:
        ledger = store.ledger(run_id)
        assert [e.call_id for e in ledger if e.tool == "place_order"] == ["c2"]  # one entry for the one effect
        assert json.loads(next(e for e in ledger if e.call_id == "c2").outcome or "") == {
            "ok": True,
            "result": {"order": f"{run_id}:c2"},
        }
        kinds = [e.kind for e in store.events(run_id)]
        assert kinds.count("intent_recorded") == kinds.count("outcome_recorded") == 1
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    finally:
        store.close()
