"""A served agent over real HTTP: a run, its approval in the inbox, a decision from an approver, the answer."""

from __future__ import annotations

import aiohttp
from serve_harness import Client, Served

ALICE = "alice"  # no roles: starts runs, sees her own
BOB = "bob:approver"  # may decide calls addressed to the approver role


async def test_a_run_pauses_for_approval_and_an_approver_decides_it(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        run_id = await api.start(ALICE, "Please refund order A7.")
        paused = await api.settled(ALICE, run_id)
        assert paused["status"] == "awaiting_approval"
        [pending] = paused["pending_approvals"]
        assert pending["tool"] == "refund"
        assert served.refunds_made() == []

        mine = (await api.call("GET", "/approvals", ALICE)).body["approvals"]
        [item] = mine
        assert item["run_id"] == run_id and item["tool"] == "refund" and item["decidable"] is False
        assert item["arguments"]["order_id"] == "A7" and item["arguments"]["amount"] == 42
        assert "sk-live" not in str(item)  # redacted (the token argument)
        assert item["prompt"] == "Please refund order A7."
        assert item["reason"] == "refund requires approval"

        [addressed] = (await api.call("GET", "/approvals", BOB)).body["approvals"]
        assert addressed["call_id"] == item["call_id"] and addressed["decidable"] is True
        assert addressed["owner"] == "alice"

        call = f"/runs/{run_id}/approvals/{item['call_id']}"
        refused = await api.call("POST", call, ALICE, {"approve": True, "fingerprint": item["fingerprint"]})
        assert refused.status == 403 and refused.content_type == "application/problem+json"
        wrong = await api.call("POST", call, BOB, {"approve": True, "fingerprint": "0" * 64})
        assert wrong.status == 409, wrong.body  # bound to the arguments the approver saw
        decided = await api.call(
            "POST", call, BOB, {"approve": True, "fingerprint": item["fingerprint"], "reason": "ok"}
        )
        assert decided.status == 200, decided.body

        done = await api.settled(ALICE, run_id)
        assert done["status"] == "completed", done
        assert done["output"] == "Refunded 42 on order A7."
        assert served.refunds_made() == ["A7 42"]
        assert (await api.call("GET", "/approvals", BOB)).body["approvals"] == []
