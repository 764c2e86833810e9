"""SIGTERM to `tether worker` in the middle of a read-only call: the call finishes, the run goes on elsewhere.

The worker's graceful shutdown waits at least the longest tool timeout, so a
call that outlasts the shutdown margin alone still completes on the worker
that started it and is not run a second time.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from pathlib import Path

from shop_tools import PRICE_TIMEOUT
from temporal_helpers import child_env, shop, spawn_worker, stop
from temporalio.client import Client

from tether.drivers.temporal.client import decide, start_run, status
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import SHUTDOWN_MARGIN
from tether.store import SQLiteStore
from tether.testing import FakeServer

PRICE_SECONDS = SHUTDOWN_MARGIN.total_seconds() + 2  # longer than the margin, shorter than the tool's timeout


async def test_sigterm_during_a_read_only_call_lets_it_finish_and_the_run_go_on(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    assert PRICE_SECONDS < PRICE_TIMEOUT
    log = tmp_path / "price.log"
    env = child_env(tmp_path / "orders.jsonl", SHOP_PRICE_SECONDS=str(PRICE_SECONDS), SHOP_PRICE_LOG=str(log))
    address, queue, run_id = temporal_server.address, f"q-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    client = await Client.connect(address)
    with FakeServer(script=shop) as server:
        first = spawn_worker(address, queue, server.base_url, env)
        workers = [first]
        try:
            handle = await start_run(client, "Order 2 tea.", task_queue=queue, run_id=run_id)
            deadline = time.monotonic() + 20
            while not (log.exists() and log.read_text()):
                assert time.monotonic() < deadline, "the price call never started"
                await asyncio.sleep(0.05)
            first.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            workers.append(spawn_worker(address, queue, server.base_url, env))  # where the run goes on
            assert await asyncio.to_thread(first.wait, PRICE_TIMEOUT + 10) == 0
            waited = time.monotonic() - signalled
            deadline = time.monotonic() + 30
            while (await status(client, run_id))["status"] != "awaiting_approval":
                assert time.monotonic() < deadline, "the run did not go on to the approval"
                await asyncio.sleep(0.1)
            await decide(client, run_id, "c2", approved=True)
            result = await asyncio.wait_for(handle.result(), 30)
        finally:
            for worker in workers:
                stop(worker)
    assert (result["status"], result["output"]) == ("completed", "Ordered 2 tea for 6.")
    # The call ran once, to its end, on the worker that was told to stop, which waited for it.
    assert log.read_text().split("\n")[:-1] == [f"started {first.pid}", f"finished {first.pid}"]
    assert waited > SHUTDOWN_MARGIN.total_seconds()
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        assert json.loads(store.ledger_entry(run_id, "c1").outcome or "") == {"ok": True, "result": 3}  # type: ignore[union-attr]
        assert store.verify(run_id) == []
    finally:
        store.close()
