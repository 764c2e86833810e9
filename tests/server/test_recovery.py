"""A service killed mid-run: the next start carries the run on from its last checkpoint."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
from server_harness import SECRET

from tether.testing.fake_server import FakeServer, text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def service(tickets: Path, runs: Path, model: FakeServer) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    env = {**os.environ, "TETHER_JWT_SECRET": SECRET, "TETHER_LOG_LEVEL": "warning"}
    command = [sys.executable, "-m", "tether", "serve", "--port", str(port), "--tickets-db", str(tickets),
               "--run-db", str(runs), "--base-url", model.base_url, "--model", "fake"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "the service did not start"
                time.sleep(0.2)
        yield process, base
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


async def sign_in(session: aiohttp.ClientSession, base: str) -> dict[str, str]:
    body = {"username": "alice", "password": "alice-pass"}
    async with session.post(f"{base}/api/auth/token", json=body) as response:
        assert response.status == 200
        return {"Authorization": f"Bearer {(await response.json())['access_token']}"}


async def test_a_run_cut_off_by_a_crash_finishes_after_a_restart(tmp_path: Path, tickets_path: Path) -> None:
    runs = tmp_path / "runs.db"
    # The first model request never answers in time; the restarted service asks again.
    with FakeServer([text("too late", latency=60), text("Your ticket is open.")]) as model:
        async with aiohttp.ClientSession() as session:
            with service(tickets_path, runs, model) as (first, base):
                auth = await sign_in(session, base)
                async with session.post(f"{base}/api/runs", json={"prompt": "Is my ticket open?"}, headers=auth) as r:
                    assert r.status == 202
                    run_id = (await r.json())["run_id"]
                deadline = time.monotonic() + 30
                while len(model.requests) < 1:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                first.send_signal(signal.SIGKILL)
                first.wait(timeout=30)

            with service(tickets_path, runs, model) as (_, base):
                auth = await sign_in(session, base)  # the same secret: the old token would do too
                deadline = time.monotonic() + 60
                while True:
                    async with session.get(f"{base}/api/runs/{run_id}", headers=auth) as r:
                        run = await r.json()
                    if run["status"] == "completed" or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.2)
    assert run["status"] == "completed", run
    assert run["output"] == "Your ticket is open."
    assert len(model.requests) == 2  # asked once before the crash, once after; never more
