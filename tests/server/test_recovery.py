"""A service killed mid-run: the next start carries the run on from its last checkpoint."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
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
import pytest
from server_harness import PYTHONPATH, SECRET, free_port, wait_listening

from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls


@contextmanager
def service(
    tickets: Path,
    runs: Path,
    model: FakeServer,
    extra_env: dict[str, str] | None = None,
    *,
    as_pid_1: bool = False,
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``python -m tickets_app`` in a process of its own (with ``as_pid_1``, as pid 1 of a new PID namespace, as in a
    container); its lease is the default 30 s unless ``extra_env`` says otherwise."""
    port = free_port()
    env = {**os.environ, "TETHER_JWT_SECRET": SECRET, "TETHER_LOG_LEVEL": "warning", "PYTHONPATH": PYTHONPATH,
           **(extra_env or {})}  # fmt: skip
    command = [sys.executable, "-m", "tickets_app", "--port", str(port), "--tickets-db", str(tickets),
               "--run-db", str(runs), "--base-url", model.base_url, "--model", "fake"]  # fmt: skip
    if as_pid_1:
        command = ["unshare", "--pid", "--fork", "--kill-child", *command]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_listening(process, port), "the service did not start"
        yield process, base
    finally:
        if process.poll() is None:
            # unshare --fork ignores SIGTERM (and passes on nothing); with --kill-child its death ends the service.
            process.kill() if as_pid_1 else process.terminate()
            process.wait(timeout=30)


async def sign_in(session: aiohttp.ClientSession, base: str) -> dict[str, str]:
    body = {"username": "alice", "password": "alice-pass"}
    async with session.post(f"{base}/api/auth/token", json=body) as response:
        assert response.status == 200
        return {"Authorization": f"Bearer {(await response.json())['access_token']}"}


def lease_until(runs: Path, run_id: str) -> float:
    with closing(sqlite3.connect(runs)) as db:
        (until,) = db.execute("SELECT lease_until FROM runs WHERE id = ?", (run_id,)).fetchone()
    return float(until)


def pid_namespace_problem() -> str | None:
    """Why ``tether serve`` cannot be pid 1 of a new PID namespace here, or None."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return "a new PID namespace needs root and unshare (util-linux)"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return None if probe.stdout.strip() == "1" else f"unshare --pid --fork does not work here: {probe.stderr}"


@pytest.mark.parametrize("as_pid_1", [False, True], ids=["process", "pid-1-of-a-namespace"])
async def test_a_run_cut_off_by_a_crash_finishes_after_a_restart(
    tmp_path: Path, tickets_path: Path, as_pid_1: bool
) -> None:
    """The killed process's lock goes with it: the restart drives the run at once, long before the dead
    process's 30 s lease would have run out; also when both are pid 1 of a container's PID namespace."""
    if as_pid_1 and (why := pid_namespace_problem()):
        pytest.skip(why)
    runs = tmp_path / "runs.db"
    env: dict[str, str] = {}
    # The first model request never answers in time; the restarted service asks again.
    with FakeServer([text("too late", latency=60), text("Your ticket is open.")]) as model:
        async with aiohttp.ClientSession() as session:
            with service(tickets_path, runs, model, env, as_pid_1=as_pid_1) as (first, base):
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
            dead_lease = lease_until(runs, run_id)

            with service(tickets_path, runs, model, env, as_pid_1=as_pid_1) as (_, base):
                auth = await sign_in(session, base)  # the same secret: the old token would do too
                deadline = time.monotonic() + 60
                while True:
                    async with session.get(f"{base}/api/runs/{run_id}", headers=auth) as r:
                        run = await r.json()
                    if run["status"] == "completed" or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.2)
            finished = time.time()
    assert run["status"] == "completed", run
    assert run["output"] == "Your ticket is open."
    assert len(model.requests) == 2  # asked once before the crash, once after; never more
    assert finished < dead_lease, "the restart waited for the dead process's lease"


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

    env = {"TETHER_MAX_CONCURRENT_RUNS": "1"}
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
    """SIGTERM: the run driven is saved as it was (awaiting the model) and let go, not cancelled; one
    waiting for a slot is left ready, released too; the next process takes both at start."""
    runs = tmp_path / "runs.db"
    asked: list[str] = []

    def respond(request: dict[str, Any]) -> ReplySpec:
        asked.append(prompt_of(request))
        if asked == ["first question"]:
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
            assert leases == {run_ids[0]: "awaiting_model free", run_ids[1]: "ready free"}

            with service(tickets_path, runs, model, env) as (_, base):
                deadline = time.monotonic() + 20  # well within the 30 s a held lease would last
                views = {}
                for run_id in run_ids:
                    while True:
                        async with session.get(f"{base}/api/runs/{run_id}", headers=auth) as r:
                            views[run_id] = await r.json()
                        if views[run_id]["status"] == "completed":
                            break
                        assert time.monotonic() < deadline, views[run_id]
                        await asyncio.sleep(0.2)
    assert [views[r]["output"] for r in run_ids] == ["answered: first question", "answered: second question"]
    assert sorted(asked) == ["first question", "first question", "second question"]


async def test_the_service_takes_over_only_its_own_runs(tmp_path: Path) -> None:
    """A store shared with `tether run` (TETHER_DB): a CLI run cut off is left to the CLI, never driven with
    the service's tools and model."""
    from tether.core.budget import RunConfig
    from tether.core.machine import RunState
    from tether.core.messages import Message
    from tether.models.scripted import ScriptedModel, reply_text
    from tether.serve.service import RunService, open_run_store
    from tether.tools import Principal
    from tickets_app.settings import Settings

    settings = Settings(run_db=tmp_path / "shared.db", model_factory=lambda: ScriptedModel([reply_text("ok")]))
    store = open_run_store(settings)
    for run_id, surface in (("from-the-cli", "cli"), ("from-the-service", "server")):
        state = RunState(run_id, RunConfig(), [Message("user", "hello")])
        store.create_run(state, Principal("u1"), {"surface": surface})
        store.checkpoint(state, [("run_started", {})], release=True)  # cut off: in flight, no lease
    service = RunService(settings, store, [])
    try:
        assert await service.take_over() == ["from-the-service"]
        assert await service.take_over() == []  # the CLI's run is not looked at again
    finally:
        await service.aclose()
    assert store.load("from-the-cli").state.status.value == "ready"
    store.close()


async def test_a_sigterm_hands_a_run_on_and_the_restart_finishes_it_with_each_effect_once(
    tmp_path: Path, tickets_path: Path
) -> None:
    """SIGTERM while the run waits on the model, after a side effect: the run is saved and let go, not
    ``cancelled``; the restart asks the model again and finishes it, and the ticket exists once."""
    runs = tmp_path / "runs.db"
    create = json.dumps({"title": "Printer on fire", "body": "It is on fire."})
    script = [tool_calls([("c1", "create_ticket", create)]), text("too late", latency=60), text("Ticket opened.")]
    with FakeServer(script) as model:
        async with aiohttp.ClientSession() as session:
            with service(tickets_path, runs, model) as (first, base):
                auth = await sign_in(session, base)
                async with session.post(f"{base}/api/runs", json={"prompt": "Open a ticket"}, headers=auth) as r:
                    assert r.status == 202
                    run_id = (await r.json())["run_id"]
                deadline = time.monotonic() + 30
                while len(model.requests) < 2:  # the ticket is created; the second request is in flight
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                first.send_signal(signal.SIGTERM)
                # Well within the grace period; uvicorn re-raises the signal once it has shut down.
                assert first.wait(timeout=30) in (0, -signal.SIGTERM)
            with closing(sqlite3.connect(runs)) as db:
                status, owner = db.execute("SELECT status, lease_owner FROM runs WHERE id = ?", (run_id,)).fetchone()
                kinds = [k for (k,) in db.execute("SELECT kind FROM events WHERE run_id = ? ORDER BY seq", (run_id,))]
            assert (status, owner) == ("awaiting_model", None)  # saved as it was, let go, not ended
            assert "run_finished" not in kinds

            with service(tickets_path, runs, model) as (_, base):
                auth = await sign_in(session, base)
                deadline = time.monotonic() + 60
                while True:
                    async with session.get(f"{base}/api/runs/{run_id}", headers=auth) as r:
                        run = await r.json()
                    if run["status"] == "completed" or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.2)
    assert (run["status"], run["output"]) == ("completed", "Ticket opened."), run
    assert len(model.requests) == 3  # the request cut off by the stop was asked again, once
    with closing(sqlite3.connect(tickets_path)) as db:
        assert db.execute("SELECT count(*) FROM tickets WHERE title = 'Printer on fire'").fetchone() == (1,)
