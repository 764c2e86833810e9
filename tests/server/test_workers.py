"""Several service processes on one PostgreSQL run store: every run driven once, none lost.

Real processes (``tether serve --workers 2``, or two ``tether serve`` on two
ports), a real PostgreSQL 15 (tests/store/postgres_server.py) and the fake
model server. Each run asks the model, opens a ticket (a side effect, in the
tickets database the processes share), asks again and answers. A short lease
(``TETHER_LEASE_SECONDS``) makes a takeover after a SIGKILL quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from server_harness import PYTHONPATH, SECRET, free_port, wait_listening

from tether.cli.common import EXIT_CONFIGURATION
from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from postgres_server import PostgresServer, running

LEASE_SECONDS = 2.0


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[PostgresServer]:
    yield from running()


@pytest.fixture
def db_url(postgres_server: PostgresServer) -> str:
    return postgres_server.schema_url()


@contextmanager
def service(tickets: Path, db: str, model: FakeServer, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``python -m tickets_app`` on a free port, in a process group of its own (its workers die with it)."""
    port = free_port()
    env = {**os.environ, "TETHER_JWT_SECRET": SECRET, "TETHER_LOG_LEVEL": "warning",
           "TETHER_LEASE_SECONDS": str(LEASE_SECONDS), "PYTHONPATH": PYTHONPATH}  # fmt: skip
    command = [sys.executable, "-m", "tickets_app", "--port", str(port), "--tickets-db", str(tickets),
               "--db", db, "--base-url", model.base_url, "--model", "fake", *args]  # fmt: skip
    process = subprocess.Popen(command, env=env, start_new_session=True, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_listening(process, port):
            stderr = process.stderr.read().decode() if process.stderr else ""
            pytest.fail(f"the service did not start: {stderr}")
        yield process, base
    finally:
        with closing(process.stderr) if process.stderr else open(os.devnull):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # any worker left behind


class Model:
    """Per prompt: open a ticket titled after it, then answer; ``hang`` holds the second request of some prompts."""

    def __init__(self, hang: str | None = None, hang_seconds: float = 60) -> None:
        self.asked: Counter[tuple[str, int]] = Counter()  # (prompt, step) -> requests
        self.hang = hang  # prompts starting with this wait for their first answer after the ticket
        self.hang_seconds = hang_seconds

    def __call__(self, request: dict[str, Any]) -> ReplySpec:
        prompt = next(str(m["content"]) for m in request["messages"] if m["role"] == "user")
        step = 2 if any(m["role"] == "tool" for m in request["messages"]) else 1
        self.asked[prompt, step] += 1
        if step == 1:
            arguments = json.dumps({"title": f"ticket for {prompt}", "body": "opened by a test run"})
            return tool_calls([(f"call-{prompt}", "create_ticket", arguments)])
        if self.hang is not None and prompt.startswith(self.hang) and self.asked[prompt, 2] == 1:
            return text(f"answered {prompt}", latency=self.hang_seconds)  # if its process lives that long
        return text(f"answered {prompt}")


async def sign_in(session: aiohttp.ClientSession, base: str, user: str) -> dict[str, str]:
    body = {"username": user, "password": f"{user}-pass"}
    async with session.post(f"{base}/api/auth/token", json=body) as response:
        assert response.status == 200, await response.text()
        return {"Authorization": f"Bearer {(await response.json())['access_token']}"}


async def submit(session: aiohttp.ClientSession, base: str, auth: dict[str, str], prompt: str) -> str:
    async with session.post(f"{base}/api/runs", json={"prompt": prompt}, headers=auth) as r:
        assert r.status == 202, await r.text()
        return str((await r.json())["run_id"])


async def wait_all(
    session: aiohttp.ClientSession, base: str, runs: dict[str, dict[str, str]], timeout: float = 90
) -> dict[str, dict[str, Any]]:
    """Each run's view once it has left the statuses in flight (``runs``: run id -> auth headers)."""
    views: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while len(views) < len(runs):
        for run_id, auth in runs.items():
            if run_id in views:
                continue
            async with session.get(f"{base}/api/runs/{run_id}", headers=auth) as r:
                assert r.status == 200, await r.text()
                view = await r.json()
            if view["status"] not in ("ready", "awaiting_model", "awaiting_tools"):
                views[run_id] = view
        assert time.monotonic() < deadline, f"{len(runs) - len(views)} run(s) never finished"
        await asyncio.sleep(0.2)
    return views


def tickets_titled(tickets: Path) -> Counter[str]:
    with closing(sqlite3.connect(tickets)) as db:
        return Counter(title for (title,) in db.execute("SELECT title FROM tickets"))


def audit(db: str, run_id: str) -> tuple[Counter[str], list[Any], list[str]]:
    """A run's event kinds, its ledger and what ``verify`` finds, read by a store of the test's own."""
    from tether.store import PostgresStore

    store = PostgresStore(db, pool_size=1)
    try:
        return Counter(e.kind for e in store.events(run_id)), store.ledger(run_id), store.verify(run_id)
    finally:
        store.close()


def runs_verify(db: str, run_id: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_DB": db, "PYTHONPATH": PYTHONPATH}
    command = [sys.executable, "-m", "tether", "runs", "verify", run_id]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


async def test_two_workers_drive_every_run_once(tickets_path: Path, db_url: str) -> None:
    model = Model()
    prompts = [f"question {i}" for i in range(30)]
    with FakeServer(model) as fake, service(tickets_path, db_url, fake, "--workers", "2") as (process, base):
        workers = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
        assert len(workers) >= 2, workers  # the supervisor's worker processes (and maybe its resource tracker)
        async with aiohttp.ClientSession() as session:
            auths = {user: await sign_in(session, base, user) for user in ("alice", "bob")}
            users = [("alice", "bob")[i % 2] for i in range(len(prompts))]
            ids = await asyncio.gather(
                *(submit(session, base, auths[u], p) for u, p in zip(users, prompts, strict=True))
            )
            views = await wait_all(session, base, {run_id: auths[u] for run_id, u in zip(ids, users, strict=True)})
    for run_id, prompt in zip(ids, prompts, strict=True):
        assert (views[run_id]["status"], views[run_id]["output"]) == ("completed", f"answered {prompt}")
        kinds, ledger, problems = audit(db_url, run_id)
        assert (kinds["run_started"], kinds["run_resumed"], kinds["call_executed"]) == (1, 0, 1), kinds
        assert [(e.tool, e.outcome is not None) for e in ledger] == [("create_ticket", True)]
        assert problems == []
    assert all(model.asked[p, 1] == 1 and model.asked[p, 2] == 1 for p in prompts), model.asked
    titles = tickets_titled(tickets_path)
    assert all(titles[f"ticket for {p}"] == 1 for p in prompts), titles
    verified = runs_verify(db_url, ids[0])
    assert verified.returncode == 0 and "intact" in verified.stdout, verified.stderr


async def test_runs_of_a_killed_process_are_finished_by_another(tickets_path: Path, db_url: str) -> None:
    model = Model(hang="doomed")
    doomed = [f"doomed {i}" for i in range(4)]
    healthy = [f"healthy {i}" for i in range(4)]
    with (
        FakeServer(model) as fake,
        service(tickets_path, db_url, fake) as (first, base_a),
        service(tickets_path, db_url, fake) as (_, base_b),
    ):
        async with aiohttp.ClientSession() as session:
            auth = await sign_in(session, base_a, "alice")  # one secret: the token works on both
            on_a = [await submit(session, base_a, auth, p) for p in doomed]
            on_b = [await submit(session, base_b, auth, p) for p in healthy]
            deadline = time.monotonic() + 30
            while not all(model.asked[p, 2] for p in doomed):  # every ticket opened, every run hanging
                assert time.monotonic() < deadline, model.asked
                await asyncio.sleep(0.05)
            # A client on B follows a run A drives: by polling the store, through the takeover.
            followed = asyncio.create_task(read_stream(session, f"{base_b}/api/runs/{on_a[0]}/events", auth))
            await asyncio.sleep(0.5)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
            killed_at = time.monotonic()
            views = await wait_all(session, base_b, dict.fromkeys(on_a + on_b, auth))
            taken_over_in = time.monotonic() - killed_at
            stream = await asyncio.wait_for(followed, 30)
    for run_id, prompt in zip(on_a + on_b, doomed + healthy, strict=True):
        assert (views[run_id]["status"], views[run_id]["output"]) == ("completed", f"answered {prompt}")
        kinds, ledger, problems = audit(db_url, run_id)
        resumed = 1 if prompt in doomed else 0
        assert (kinds["run_started"], kinds["run_resumed"], kinds["call_executed"]) == (1, resumed, 1), kinds
        assert [(e.tool, e.outcome is not None) for e in ledger] == [("create_ticket", True)]
        assert problems == []
        assert (model.asked[prompt, 1], model.asked[prompt, 2]) == (1, 1 + resumed)  # asked again only after the kill
    titles = tickets_titled(tickets_path)
    assert all(titles[f"ticket for {p}"] == 1 for p in doomed + healthy), titles  # no side effect twice
    # The dead process's locks went with it: taken over at the next scan (a third of a lease), not on expiry.
    assert taken_over_in < LEASE_SECONDS + 10, taken_over_in
    assert [kind for kind, _ in stream][-1] == "run_finished"
    assert [seq for _, seq in stream] == list(range(1, len(stream) + 1))  # every stored event, once, in order
    assert "run_resumed" in [kind for kind, _ in stream]
    verified = runs_verify(db_url, on_a[0])
    assert verified.returncode == 0 and "intact" in verified.stdout, verified.stderr


async def read_stream(session: aiohttp.ClientSession, url: str, auth: dict[str, str]) -> list[tuple[str, int]]:
    """The (kind, seq) of each event an SSE stream sends, until it ends."""
    events = []
    async with session.get(url, headers=auth, timeout=aiohttp.ClientTimeout(total=60)) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if line.startswith(b"data: "):
                payload = json.loads(line[6:])
                events.append((payload["kind"], payload["seq"]))
    return events


async def test_runs_of_a_killed_worker_are_finished_by_the_other(tickets_path: Path, db_url: str) -> None:
    """``--workers 2``: SIGKILL the worker whose lease holds the most runs; the rest are left alone."""
    import psycopg

    model = Model(hang="run", hang_seconds=6)
    prompts = [f"run {i}" for i in range(8)]
    with FakeServer(model) as fake, service(tickets_path, db_url, fake, "--workers", "2") as (_, base):
        async with aiohttp.ClientSession() as session:
            auth = await sign_in(session, base, "alice")
            ids = await asyncio.gather(*(submit(session, base, auth, p) for p in prompts))
            deadline = time.monotonic() + 30
            while not all(model.asked[p, 2] for p in prompts):  # every ticket opened, every run waiting
                assert time.monotonic() < deadline, model.asked
                await asyncio.sleep(0.05)
            with psycopg.connect(db_url) as db:
                owners = dict(db.execute("SELECT id, lease_owner FROM runs").fetchall())
            pids = Counter(int(owner.split(":")[1]) for owner in owners.values())
            victim = pids.most_common(1)[0][0]
            os.kill(victim, signal.SIGKILL)
        # A client's connections to the killed worker die with it (reset, at their next use): a new client
        # connects to the worker still listening.
        async with aiohttp.ClientSession() as session:
            views = await wait_all(session, base, dict.fromkeys(ids, auth))
    killed = {run_id for run_id, owner in owners.items() if int(owner.split(":")[1]) == victim}
    assert killed
    for run_id, prompt in zip(ids, prompts, strict=True):
        assert (views[run_id]["status"], views[run_id]["output"]) == ("completed", f"answered {prompt}")
        kinds, ledger, problems = audit(db_url, run_id)
        resumed = 1 if run_id in killed else 0
        assert (kinds["run_started"], kinds["run_resumed"], kinds["call_executed"]) == (1, resumed, 1), kinds
        assert [(e.tool, e.outcome is not None) for e in ledger] == [("create_ticket", True)]
        assert problems == []
        assert (model.asked[prompt, 1], model.asked[prompt, 2]) == (1, 1 + resumed)
    titles = tickets_titled(tickets_path)
    assert all(titles[f"ticket for {p}"] == 1 for p in prompts), titles


def test_several_workers_on_a_sqlite_file_are_refused_with_the_fix(tmp_path: Path, tickets_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    env.pop("TETHER_RUN_DB", None)
    command = [sys.executable, "-m", "tickets_app", "--workers", "2", "--tickets-db", str(tickets_path),
               "--db", str(tmp_path / "runs.db"), "--port", str(free_port())]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_CONFIGURATION, done.stderr
    assert "Traceback" not in done.stderr
    assert "--workers 2 needs a run store several processes can share: --db postgresql://" in done.stderr
    assert not (tmp_path / "runs.db").exists()  # refused before anything is written


def test_the_run_store_and_the_lease_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.core.errors import ConfigurationError
    from tickets_app.settings import DEFAULT_RUN_DB, Settings

    for name in ("TETHER_RUN_DB", "TETHER_DB", "TETHER_LEASE_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    assert (Settings.from_env().run_db, Settings.from_env().lease_seconds) == (DEFAULT_RUN_DB, 30.0)
    monkeypatch.setenv("TETHER_DB", "postgresql://tether@db/tether")
    assert Settings.from_env().run_db == "postgresql://tether@db/tether"
    assert Settings.from_env().shared_store
    monkeypatch.setenv("TETHER_RUN_DB", "service.db")  # the service's own setting comes first
    assert Settings.from_env().run_db == Path("service.db")
    assert not Settings.from_env().shared_store
    monkeypatch.setenv("TETHER_LEASE_SECONDS", "2.5")
    assert Settings.from_env().lease_seconds == 2.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        monkeypatch.setenv("TETHER_LEASE_SECONDS", bad)
        with pytest.raises(ConfigurationError, match="TETHER_LEASE_SECONDS must be a number of seconds above 0"):
            Settings.from_env()


async def test_a_request_waiting_on_a_row_lock_holds_up_no_other(tickets_path: Path, db_url: str) -> None:
    """An approval whose run row another transaction holds waits, and only it: /api/health and other
    users' requests are answered meanwhile (the service calls PostgreSQL on threads, not on its loop)."""
    import psycopg

    from tickets_app.seed_data import TICKETS
    from tickets_app.settings import Settings

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from server_harness import Api, fake_model_factory, run_uvicorn

    ticket = next(t for t in TICKETS if t.reporter == "alice" and t.status == "open")
    close = json.dumps({"ticket_id": ticket.id})
    with FakeServer([tool_calls([("call_close", "close_ticket", close)]), text("Closed.")]) as model:
        settings = Settings(
            tickets_db=tickets_path, run_db=db_url, jwt_secret=SECRET, model_factory=fake_model_factory(model)
        )
        with run_uvicorn(settings) as origin:
            async with aiohttp.ClientSession() as session:
                api = Api(origin, model, settings, session)
                run_id = await api.start("alice", f"Close {ticket.id}, please.")
                assert (await api.wait("alice", run_id))["status"] == "awaiting_approval"
                with psycopg.connect(db_url) as holder:  # a transaction of its own: the row stays locked
                    holder.execute("SELECT id FROM runs WHERE id = %s FOR UPDATE", (run_id,))
                    path = f"/api/runs/{run_id}/approvals/call_close"
                    approval = asyncio.create_task(api.call("POST", path, user="carol", json_body={"approved": True}))
                    with psycopg.connect(db_url, autocommit=True) as watcher:  # until the approval waits on it
                        deadline = time.monotonic() + 30
                        while not watcher.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        ).fetchone()[0]:  # type: ignore[index]
                            assert time.monotonic() < deadline and not approval.done(), "the approval never waited"
                            await asyncio.sleep(0.05)
                    health = await asyncio.wait_for(api.call("GET", "/api/health"), 30)
                    others = await asyncio.wait_for(api.call("GET", "/api/runs", user="bob"), 30)
                    assert (health.status, others.status) == (200, 200)
                    assert not approval.done()  # both answered while the approval still waits on the lock
                    holder.rollback()
                decided = await asyncio.wait_for(approval, 30)
                assert decided.status == 200, decided.body
                assert (await api.wait("alice", run_id))["status"] == "completed"
