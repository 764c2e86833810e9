"""``python -m tickets_app --lease-seconds``: the lease a process holds on the runs it drives lasts that long."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import aiohttp
from server_harness import PYTHONPATH, SECRET, free_port, wait_listening

from tether.testing.fake_server import FakeServer, text


async def test_a_run_in_flight_is_held_for_lease_seconds(tmp_path: Path, tickets_path: Path) -> None:
    runs, port = tmp_path / "runs.db", free_port()
    env = {**os.environ, "TETHER_JWT_SECRET": SECRET, "TETHER_LOG_LEVEL": "warning", "PYTHONPATH": PYTHONPATH}
    env.pop("TETHER_LEASE_SECONDS", None)
    with FakeServer([text("too late", latency=60)]) as model:  # the run is in flight until the service stops
        command = [sys.executable, "-m", "tickets_app", "--port", str(port), "--tickets-db", str(tickets_path),
                   "--run-db", str(runs), "--base-url", model.base_url, "--model", "fake"]  # fmt: skip
        command += ["--lease-seconds", "4"]
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_listening(process, port), "the service did not start"
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as session:
                body = {"username": "alice", "password": "alice-pass"}
                async with session.post(f"{base}/api/auth/token", json=body) as r:
                    auth = {"Authorization": f"Bearer {(await r.json())['access_token']}"}
                async with session.post(f"{base}/api/runs", json={"prompt": "Is my ticket open?"}, headers=auth) as r:
                    assert r.status == 202
                    run_id = (await r.json())["run_id"]
            deadline = time.monotonic() + 30
            while not model.requests:  # the run's driver holds the lease while it waits for the model
                assert time.monotonic() < deadline, "the model was never asked"
                await asyncio.sleep(0.05)
            with closing(sqlite3.connect(runs)) as connection:
                query = "SELECT lease_owner, lease_until FROM runs WHERE id = ?"
                owner, until = connection.execute(query, (run_id,)).fetchone()
        finally:
            process.terminate()
            process.wait(timeout=30)
    assert owner is not None
    assert until <= time.time() + 4  # taken or renewed before now, for 4 s; 30 by default
