"""Two processes serving one agent on one PostgreSQL store: a run started on one is decided and followed on another."""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from serve_harness import Client, Served

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from postgres_server import PostgresServer, running

ALICE = "alice"
BOB = "bob:approver"


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[PostgresServer]:
    yield from running()


async def test_a_run_started_on_one_process_is_decided_and_followed_on_another(
    served: Served, postgres_server: PostgresServer, session: aiohttp.ClientSession
) -> None:
    shared = replace(served, db=postgres_server.schema_url())
    with shared.process() as (_, first), shared.process() as (_, second):
        one, other = Client(first, session), Client(second, session)
        run_id = await one.start(ALICE, "Please refund order A7.")
        assert (await one.settled(ALICE, run_id))["status"] == "awaiting_approval"
        [item] = (await other.call("GET", "/approvals", BOB)).body["approvals"]
        call = f"/runs/{run_id}/approvals/{item['call_id']}"
        decided = await other.call("POST", call, BOB, {"approve": True, "fingerprint": item["fingerprint"]})
        assert decided.status == 200, decided.body
        done = await one.settled(ALICE, run_id)
        here, there = await one.events(ALICE, run_id), await other.events(ALICE, run_id, last_event_id="2")
    assert done["status"] == "completed" and done["output"] == "Refunded 42 on order A7."
    assert shared.refunds_made() == ["A7 42"]
    assert here[-1][0] == "run_finished" and there == here[2:]


async def test_an_id_holding_nul_is_no_runs_on_every_route(
    served: Served, postgres_server: PostgresServer, session: aiohttp.ClientSession
) -> None:
    """PostgreSQL's text holds no NUL, so the store cannot even be asked for such an id: it names no run or
    conversation, the 404 any missing id gets (a cursor holding one, the 422 of a cursor never given), not a 500."""
    shared = replace(served, db=postgres_server.schema_url())
    cursor = base64.urlsafe_b64encode(b'[1796221203.25, "a\\u0000b"]').decode()
    with shared.process() as (_, base):
        api = Client(base, session)
        missing = [
            await api.call("GET", "/runs/a%00b", ALICE),
            await api.call("GET", "/runs/a%00b/events", ALICE),
            await api.call("POST", "/runs/a%00b/cancel", ALICE),
            await api.call("GET", "/conversations/a%00b", ALICE),
            await api.call("POST", "/conversations/a%00b/turns", ALICE, {"text": "say: hi"}),
            await api.call("POST", "/runs/a%00b/approvals/c", BOB, {"approve": True, "fingerprint": "f"}),
            await api.call("POST", "/runs/a%00b/calls/c/reconcile", BOB, {"executed": False}),
        ]
        forged = await api.call("GET", f"/runs?cursor={cursor}", ALICE)
    assert [(r.status, r.body["detail"]) for r in missing] == [(404, "no run a\x00b")] * 3 + [
        (404, "no conversation a\x00b")
    ] * 2 + [(404, "no run a\x00b")] * 2
    assert forged.status == 422, forged.body


async def test_decisions_sent_at_once_to_one_process_are_taken_once_and_the_run_driven_once(
    served: Served, postgres_server: PostgresServer, session: aiohttp.ClientSession
) -> None:
    """A PostgreSQL store is called on threads, and the lease cannot keep one process's own requests apart:
    twenty approvals of one call sent together are one decision (the others a 409, or the 404 of a run no longer
    waiting), and the run is driven by one driver, its refund made once."""
    shared = replace(served, db=postgres_server.schema_url())
    with shared.process() as (process, base):
        api = Client(base, session)
        run_id = await api.start(ALICE, "Please refund order A7.")
        [item] = (await api.settled(ALICE, run_id))["pending_approvals"]
        decision = {"approve": True, "fingerprint": item["fingerprint"]}
        call = f"/runs/{run_id}/approvals/{item['call_id']}"
        replies = await asyncio.gather(*(api.call("POST", call, BOB, decision) for _ in range(20)))
        done = await api.settled(ALICE, run_id)
        process.terminate()
        process.wait(timeout=30)
        assert process.stderr is not None
        log = process.stderr.read().decode()
    assert [r.status for r in replies].count(200) == 1, [(r.status, r.body) for r in replies]
    assert done["status"] == "completed", done
    assert shared.refunds_made() == ["A7 42"]
    assert "failed outside the run state machine" not in log


async def test_turns_sent_at_once_to_one_conversation_are_taken_one_at_a_time(
    served: Served, postgres_server: PostgresServer, session: aiohttp.ClientSession
) -> None:
    """Ten turns of one conversation sent together to one process are read one at a time: each is the next turn
    (its last one had finished) or the 409 a turn sent while the last one runs gets, as on SQLite; none is a 503
    saying the service cannot record runs (two turns recorded at once, a deadlock in the store)."""
    shared = replace(served, db=postgres_server.schema_url())
    with shared.process() as (process, base):
        api = Client(base, session)
        conversation_id = (await api.call("POST", "/conversations", ALICE)).body["id"]
        turns = f"/conversations/{conversation_id}/turns"
        replies = await asyncio.gather(*(api.call("POST", turns, ALICE, {"text": f"say: {n}"}) for n in range(10)))
        started = [r.body["run_id"] for r in replies if r.status == 202]
        for run_id in started:
            await api.settled(ALICE, run_id)
        transcript = (await api.call("GET", f"/conversations/{conversation_id}", ALICE)).body
        process.terminate()
        process.wait(timeout=30)
        assert process.stderr is not None
        log = process.stderr.read().decode()
    assert {r.status for r in replies} <= {202, 409}, [(r.status, r.body) for r in replies]
    assert sorted(t["run_id"] for t in transcript["turns"]) == sorted(started) != []
    assert all(t["status"] == "completed" for t in transcript["turns"])
    assert "cannot record a new run" not in log
