"""Two processes serving one agent on one PostgreSQL store: a run started on one is decided and followed on another."""

from __future__ import annotations

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
