"""A served agent over real HTTP: a run, its approval in the inbox, a decision from an approver, the answer."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import aiohttp
from serve_harness import AGENT_PY, Client, Served

from tether.core.nesting import MAX_DEPTH

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
        assert pending["arguments"]["order_id"] == "A7" and "sk-live" not in json.dumps(paused)  # as in the inbox
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
        [call] = [c for step in done["steps"] for c in step["calls"] if c["tool"] == "refund"]
        assert json.loads(call["arguments"])["api_token"] == "[redacted]" and "sk-live" not in json.dumps(done)
        assert served.refunds_made() == ["A7 42"]
        assert (await api.call("GET", "/approvals", BOB)).body["approvals"] == []


async def test_a_run_waiting_for_approval_survives_a_sigkill_and_its_tool_runs_once(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process() as (first, base):
        api = Client(base, session)
        run_id = await api.start(ALICE, "Please refund order A7.")
        assert (await api.settled(ALICE, run_id))["status"] == "awaiting_approval"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    asked = len(served.model.requests)

    with served.process() as (_, base):
        api = Client(base, session)
        [item] = (await api.call("GET", "/approvals", BOB)).body["approvals"]
        assert item["run_id"] == run_id
        call = f"/runs/{run_id}/approvals/{item['call_id']}"
        decided = await api.call("POST", call, BOB, {"approve": True, "fingerprint": item["fingerprint"]})
        assert decided.status == 200, decided.body
        done = await api.settled(ALICE, run_id)
        # Events stored by the killed process are read by this one; the stream resumes after a given event.
        events = await api.events(ALICE, run_id)
        resumed = await api.events(ALICE, run_id, last_event_id=events[2][1])
    assert done["status"] == "completed", done
    assert done["output"] == "Refunded 42 on order A7."
    assert served.refunds_made() == ["A7 42"]  # exactly once
    assert len(served.model.requests) == asked + 1  # only the answer after the refund was asked for
    kinds = [kind for kind, _, _ in events]
    assert kinds[0] == "run_started" and "approval_requested" in kinds and kinds[-1] == "run_finished"
    assert [int(i) for _, i, _ in events if i] == list(range(1, len(events) + 1))
    assert resumed == events[3:]


HANGING_REFUND = AGENT_PY.replace(
    '    with open(os.environ["REFUNDS_LOG"], "a") as log:',
    '    import time\n    with open(os.environ["REFUNDS_LOG"], "a") as log:\n        log.write("started\\n")\n'
    "    time.sleep(3600)  # the process dies first\n"
    '    with open(os.environ["REFUNDS_LOG"], "a") as log:',
)


async def test_a_call_cut_off_by_a_crash_is_settled_over_http_never_run_again(
    served: Served, session: aiohttp.ClientSession
) -> None:
    served.agent_py.write_text(HANGING_REFUND)
    with served.process() as (first, base):
        api = Client(base, session)
        run_id = await api.start(ALICE, "Please refund order A7.")
        [item] = (await api.settled(ALICE, run_id))["pending_approvals"]
        call = f"/runs/{run_id}/approvals/{item['call_id']}"
        assert (await api.call("POST", call, BOB, {"approve": True, "fingerprint": item["fingerprint"]})).status == 200
        deadline = time.monotonic() + 30
        while served.refunds_made() != ["started"]:
            assert time.monotonic() < deadline, "the refund did not start"
            await asyncio.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)

    with served.process() as (_, base):
        api = Client(base, session)
        waiting = await api.settled(ALICE, run_id)  # taken over at start: its intent has no outcome
        assert waiting["status"] == "awaiting_reconciliation", waiting
        [unknown] = waiting["unknown_outcomes"]
        [inboxed] = (await api.call("GET", "/approvals", BOB)).body["approvals"]
        assert inboxed["kind"] == "reconcile" and inboxed["call_id"] == unknown["call_id"] == item["call_id"]
        settle = f"/runs/{run_id}/calls/{item['call_id']}/reconcile"
        body = {"executed": True, "result": "refunded 42 on order A7"}
        assert (await api.call("POST", settle, ALICE, body)).status == 403  # settling needs the approver role
        # What the model would read as the call's result must be JSON a tool could have returned: not NaN (json
        # writes it, and reads it back), nor nested deeper than a tool's result may be.
        for no_result in (float("nan"), float("inf"), _nested(MAX_DEPTH + 1)):
            refused = await api.call("POST", settle, BOB, {"executed": True, "result": no_result})
            assert refused.status == 422 and refused.body["errors"][0]["loc"] == ["body", "result"], refused.body
        settled = await api.call("POST", settle, BOB, body)
        assert settled.status == 200, settled.body
        done = await api.settled(ALICE, run_id)
    assert done["status"] == "completed", done
    assert done["output"] == "Refunded 42 on order A7."
    assert served.refunds_made() == ["started"]  # never run again
    assert json.loads(served.model.requests[-1]["messages"][-1]["content"])["result"] == "refunded 42 on order A7"


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value
