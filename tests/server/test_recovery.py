"""A service killed mid-run: the next start carries the run on from its last checkpoint."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
from server_harness import SECRET, free_port, wait_listening

from tether.testing.fake_server import FakeServer, ReplySpec, text


@contextmanager
def service(
    tickets: Path, runs: Path, model: FakeServer, extra_env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    env = {**os.environ, "TETHER_JWT_SECRET": SECRET, "TETHER_LOG_LEVEL": "warning", **(extra_env or {})}
    command = [sys.executable, "-m", "tether", "serve", "--port", str(port), "--tickets-db", str(tickets),
               "--run-db", str(runs), "--base-url", model.base_url, "--model", "fake"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_listening(process, port), "the service did not start"
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
    env = {"TETHER_LEASE_SECONDS": "3"}  # the killed process's lease holds the run this long
    # The first model request never answers in time; the restarted service asks again.
    with FakeServer([text("too late", latency=60), text("Your ticket is open.")]) as model:
        async with aiohttp.ClientSession() as session:
            with service(tickets_path, runs, model, env) as (first, base):
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

            with service(tickets_path, runs, model, env) as (_, base):
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


def prompt_of(request: dict[str, Any]) -> str:
    return str(next(m["content"] for m in request["messages"] if m["role"] == "user"))


async def test_runs_accepted_behind_the_concurrency_limit_survive_a_kill(tmp_path: Path, tickets_path: Path) -> None:
    """A 202 means the run is recorded: runs queued behind the limit are run after a SIGKILL and restart."""
    runs = tmp_path / "runs.db"
    asked: list[str] = []

    def respond(request: dict[str, Any]) -> ReplySpec:
        asked.append(prompt_of(request))
        if len(asked) == 1:
            return text("too late", latency=60)  # holds the only slot until the kill
        return text(f"answered: {prompt_of(request)}")

    env = {"TETHER_MAX_CONCURRENT_RUNS": "1", "TETHER_LEASE_SECONDS": "3"}
    prompts = ["first question", "second question", "third question"]
    with FakeServer(respond) as model:
        async with aiohttp.ClientSession() as session:
            with service(tickets_path, runs, model, env) as (first, base):
                auth = await sign_in(session, base)
                run_ids = []
                for prompt in prompts:
                    async with session.post(f"{base}/api/runs", json={"prompt": prompt}, headers=auth) as r:
                        assert r.status == 202
                        run_ids.append((await r.json())["run_id"])
                deadline = time.monotonic() + 30
                while not asked:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                for run_id in run_ids[1:]:  # waiting for the slot, and already the caller's to read
                    async with session.get(f"{base}/api/runs/{run_id}", headers=auth) as r:
                        assert r.status == 200
                        assert (await r.json())["status"] == "ready"
                first.send_signal(signal.SIGKILL)
                first.wait(timeout=30)

            with service(tickets_path, runs, model, env) as (_, base):
                auth = await sign_in(session, base)
                views = {}
                deadline = time.monotonic() + 60
                for run_id in run_ids:
                    while True:
                        async with session.get(f"{base}/api/runs/{run_id}", headers=auth) as r:
                            assert r.status == 200, await r.text()
                            views[run_id] = await r.json()
                        if views[run_id]["status"] == "completed" or time.monotonic() > deadline:
                            break
                        await asyncio.sleep(0.2)
    for run_id, prompt in zip(run_ids, prompts, strict=True):
        assert (views[run_id]["status"], views[run_id]["output"]) == ("completed", f"answered: {prompt}")
    assert sorted(asked[1:]) == sorted(prompts)  # after the restart each run asked exactly once


async def test_a_stop_hands_the_runs_waiting_for_a_slot_on_at_once(tmp_path: Path, tickets_path: Path) -> None:
    """SIGTERM: the run driven is cancelled; one waiting for a slot is left ready, its lease released,
    so the next process takes it at start instead of a lease term later."""
    runs = tmp_path / "runs.db"

    def respond(request: dict[str, Any]) -> ReplySpec:
        if prompt_of(request) == "first question" and not any(m["role"] == "assistant" for m in request["messages"]):
            return text("too late", latency=60)  # holds the only slot until the stop
        return text(f"answered: {prompt_of(request)}")

    env = {"TETHER_MAX_CONCURRENT_RUNS": "1"}
    with FakeServer(respond) as model:
        async with aiohttp.ClientSession() as session:
            with service(tickets_path, runs, model, env) as (first, base):
                auth = await sign_in(session, base)
                run_ids = []
                for prompt in ("first question", "second question"):
                    async with session.post(f"{base}/api/runs", json={"prompt": prompt}, headers=auth) as r:
                        assert r.status == 202
                        run_ids.append((await r.json())["run_id"])
                deadline = time.monotonic() + 30
                while not model.requests:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                first.send_signal(signal.SIGTERM)
                first.wait(timeout=30)
            with closing(sqlite3.connect(runs)) as db:
                leases = dict(db.execute("SELECT id, status || ' ' || coalesce(lease_owner, 'free') FROM runs"))
            assert leases == {run_ids[0]: "cancelled free", run_ids[1]: "ready free"}

            with service(tickets_path, runs, model, env) as (_, base):
                deadline = time.monotonic() + 10  # well within the 30 s a held lease would last
                while True:
                    async with session.get(f"{base}/api/runs/{run_ids[1]}", headers=auth) as r:
                        view = await r.json()
                    if view["status"] == "completed":
                        break
                    assert time.monotonic() < deadline, view
                    await asyncio.sleep(0.2)
    assert view["output"] == "answered: second question"


async def test_the_service_takes_over_only_its_own_runs(tmp_path: Path) -> None:
    """A store shared with `tether run` (TETHER_DB): a CLI run cut off is left to the CLI, never driven with
    the service's tools and model."""
    from tether.core.budget import RunConfig
    from tether.core.machine import RunState
    from tether.core.messages import Message
    from tether.models.scripted import ScriptedModel, reply_text
    from tether.server.runs import RunService, open_run_store
    from tether.server.settings import Settings
    from tether.tools import Principal

    settings = Settings(run_db=tmp_path / "shared.db", model_factory=lambda: ScriptedModel([reply_text("ok")]))
    store = open_run_store(settings)
    for run_id, surface in (("from-the-cli", "cli"), ("from-the-service", "server")):
        state = RunState(run_id, RunConfig(), [Message("user", "hello")])
        store.create_run(state, Principal("u1"), {"surface": surface})
        store.checkpoint(state, [("run_started", {})], release=True)  # cut off: in flight, no lease
    service = RunService(settings, store, [])
    try:
        assert service.take_over() == ["from-the-service"]
        assert service.take_over() == []  # the CLI's run is not looked at again
    finally:
        await service.aclose()
    assert store.load("from-the-cli").state.status.value == "ready"
    store.close()
