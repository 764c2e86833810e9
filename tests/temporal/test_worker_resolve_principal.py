"""``tether worker --resolve-principal MODULE:NAME``: the worker asks the resolver before each call runs.

Before the option, ``tether worker`` had no way to take a resolver: a
principal revoked in the application kept its calls running on the CLI's
workers. A name that gives no resolver stops the worker before it opens
its run store or connects (exit 3, saying why, no traceback).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from temporal_helpers import SRC, child_env, shop, spawn_worker, stop, transcript, until
from temporalio.client import Client, WorkflowHandle

from tether.core.errors import ConfigurationError
from tether.drivers.temporal.client import decide, start_run
from tether.drivers.temporal.devserver import DevServer
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.tools.context import Principal

RESOLVER = "principal_directory:current"
ANN = Principal("ann")


def forbidden(tool: str) -> dict[str, object]:
    return {"code": "forbidden", "message": f"this principal may no longer call {tool}", "retryable": False}


def test_a_revoked_principals_calls_are_answered_forbidden_and_do_not_run(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """One worker, two runs for ann: the first places its order; ann is revoked; the second's calls (a read and a
    side effect) are refused before they run: the model reads ``forbidden``, the ledger holds nothing of them."""
    revoked = tmp_path / "revoked.txt"
    env = child_env(tmp_path / "orders.jsonl", SHOP_NO_APPROVAL="1", DIRECTORY_REVOKED=str(revoked))
    address, queue = temporal_server.address, f"q-{uuid.uuid4().hex[:8]}"

    def run() -> str:
        """A run for ann, to its end: its id."""
        done = subprocess.run(
            [sys.executable, "-m", "tether", "run", "Order 2 tea.", "--engine", "temporal", "--temporal", address,
             "--task-queue", queue, "--principal", "ann", "--json"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["status"] == "completed"
        run_id: str = report["run_id"]
        return run_id

    with FakeServer(script=shop) as server:
        process = spawn_worker(address, queue, server.base_url, env, "--resolve-principal", RESOLVER)
        try:
            allowed = run()
            revoked.write_text("ann\n")
            refused = run()
        finally:
            stop(process)

    orders = (tmp_path / "orders.jsonl").read_text().splitlines()
    assert [json.loads(line)["key"] for line in orders] == [f"{allowed}:c2"]  # the first run's order only
    messages = transcript(tmp_path / "orders.jsonl", refused)
    results = {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}
    assert results == {
        "c1": {"ok": False, "error": forbidden("price")},
        "c2": {"ok": False, "error": forbidden("place_order")},
    }
    store = SQLiteStore(Path(env["TETHER_DB"]))
    try:
        assert [(e.call_id, e.outcome is not None) for e in store.ledger(allowed)] == [("c1", True), ("c2", True)]
        assert store.ledger(refused) == []  # not even an intent: the worker asked before writing one
        calls = [(e.kind, e.data.get("id")) for e in store.events(refused)]
        assert [c for c in calls if c[0] in ("call_rejected", "call_executed", "intent_recorded")] == [
            ("call_rejected", "c1"),
            ("call_rejected", "c2"),
        ]
        assert store.verify(refused) == []
    finally:
        store.close()


async def test_a_principal_revoked_while_the_intent_waits_to_be_saved_makes_no_effect_on_another_worker(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """The resolver allows ann's approved order; its intent's save waits (the run store is held); the worker is
    killed, ann revoked, the store let go. Another worker saves the intent and runs the call: it asks the resolver
    again, so the order does not take effect for a principal revoked since: the model reads ``forbidden``, the intent
    is cleared (``reconciled`` as not executed) and the run verifies. (Before, the call ran on the other worker for
    the resolver's answer from before the wait, which the history held.)"""
    orders, revoked = tmp_path / "orders.jsonl", tmp_path / "revoked.txt"
    env = child_env(orders, DIRECTORY_REVOKED=str(revoked))
    address, queue = temporal_server.address, f"q-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(address)
    with FakeServer(script=shop) as server:
        first = spawn_worker(address, queue, server.base_url, env, "--resolve-principal", RESOLVER)
        second = None
        try:
            handle = await start_run(client, "Order 2 tea.", task_queue=queue, principal=ANN, heartbeat_seconds=1.0)
            await until(client, handle.id, "awaiting_approval")
            with closing(SQLiteStore(Path(env["TETHER_DB"]))) as holder:
                holder.acquire(handle.id)  # the intent's save waits: LeaseHeld, retried
                await decide(client, handle.id, "c2", approved=True)
                await save_retried(handle)  # the resolver allowed the call: its answer is in the history
                first.send_signal(signal.SIGKILL)
                first.wait()
                revoked.write_text("ann\n")
                holder.release(handle.id)
            second = spawn_worker(address, queue, server.base_url, env, "--resolve-principal", RESOLVER)
            result = await asyncio.wait_for(handle.result(), 90)
        finally:
            stop(first)
            if second is not None:
                stop(second)

    assert result["status"] == "completed"
    assert not orders.exists()  # no effect for the revoked principal
    replies = {m["tool_call_id"]: m["content"] for m in transcript(orders, handle.id) if m["role"] == "tool"}
    assert json.loads(replies["c2"]) == {"ok": False, "error": forbidden("place_order")}
    with closing(SQLiteStore(Path(env["TETHER_DB"]))) as store:
        assert store.ledger_entry(handle.id, "c2") is None  # its intent cleared: it never ran
        kinds = [(e.kind, e.data.get("id")) for e in store.events(handle.id)]
        assert ("call_rejected", "c2") in kinds and ("call_executed", "c2") not in kinds
        reconciled = [e.data for e in store.events(handle.id) if e.kind == "reconciled"]
        if ("intent_recorded", "c2") in kinds:  # saved, then refused just before the effect: cleared as not run
            assert reconciled == [{"id": "c2", "tool": "place_order", "executed": False, "by": "resolve_principal"}]
        else:  # seen once in CI: the second worker asked before the intent (the first one's answer not kept)
            assert reconciled == []
        assert store.verify(handle.id) == []


async def save_retried(handle: WorkflowHandle[Any, Any], seconds: float = 30) -> None:
    """Wait until the run's ``tether.save`` has failed at least once (the store is held) and waits to be retried."""
    deadline = time.monotonic() + seconds
    while True:
        described = await handle.describe()
        saves = [a for a in described.raw_description.pending_activities if a.activity_type.name == "tether.save"]
        if saves and saves[0].attempt >= 2:
            return
        assert time.monotonic() < deadline, "the intent's save never waited"
        await asyncio.sleep(0.05)


AUTH_PY = """
number = 42


class Directory:
    def __call__(self, principal):
        return principal


directory = Directory()


def no_argument():
    return None


def current(principal):
    return principal
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "auth.py").write_text(AUTH_PY)
    (tmp_path / "raises.py").write_text("raise RuntimeError('boom')\n")
    return tmp_path


def worker(folder: Path, *extra: str, **variables: str) -> subprocess.CompletedProcess[str]:
    """``tether worker`` in ``folder`` with a server no one listens at: what it says before it connects."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env |= {"PYTHONPATH": str(SRC), "TETHER_DB": str(folder / "runs.db"), **variables}
    done = subprocess.run(
        [sys.executable, "-m", "tether", "worker", "--temporal", "127.0.0.1:9", "--tools", "calc",
         "--base-url", "http://127.0.0.1:9/v1", "--model", "fake", "--api-key", "k", *extra],
        capture_output=True, text=True, env=env, cwd=folder, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("auth", "'auth' is not MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE (e.g. tether worker --resolve-principal "),
        ("no_such_module_xyz:current", "no module no_such_module_xyz (tether worker --resolve-principal MODULE:"),
        ("missing.py:current", "no file missing.py (tether worker --resolve-principal FILE.py:ATTRIBUTE)"),
        ("raises:current", "importing raises failed: RuntimeError: boom"),
        ("auth:nobody", "has no attribute 'nobody' (tether worker --resolve-principal auth:NAME names a principal"),
        ("auth:number", "auth:number is a int, not a function (tether worker --resolve-principal names a function"),
        ("auth:Directory", "auth:Directory is a class, not a function"),
        ("auth:no_argument", "auth:no_argument cannot be called with one argument"),
    ],
)
def test_a_name_that_gives_no_resolver_stops_the_worker_before_it_connects(
    folder: Path, target: str, said: str
) -> None:
    for done in (worker(folder, "--resolve-principal", target), worker(folder, TETHER_RESOLVE_PRINCIPAL=target)):
        assert done.returncode == ConfigurationError.exit_code, done.stderr
        assert said in done.stderr
        assert "cannot reach the Temporal server" not in done.stderr
    assert not (folder / "runs.db").exists()  # nor opened its run store


def test_a_function_or_an_object_with_call_is_taken_from_a_module_or_a_file(folder: Path) -> None:
    """A good name passes, and the worker goes on to connect (here to no server: exit 3 saying so)."""
    for target in ("auth:current", "auth.py:current", f"{folder / 'auth.py'}:directory", "auth:directory.__call__"):
        done = worker(folder, "--resolve-principal", target)
        assert done.returncode == ConfigurationError.exit_code, done.stderr
        assert "cannot reach the Temporal server at 127.0.0.1:9" in done.stderr, done.stderr
