"""A caller sees only its own runs, conversations and approvals: anything else is the 404 a missing id gets."""

from __future__ import annotations

from typing import Any

import aiohttp
from serve_harness import Client, Served

from tether import Agent, OpenAIChatModel, Status, tool
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.tools.context import Principal

ALICE = "alice"
CAROL = "carol"  # another caller, no roles
DAVE = "dave:approver"  # an approver: sees calls waiting for a decision, never other callers' runs as such


@tool(read_only=True)
def lookup_order(order_id: str) -> dict[str, object]:
    """Look an order up (another program's tool of the same name)."""
    return {"order_id": order_id, "status": "delivered", "total": 42}


@tool(approval=True)
def refund(order_id: str, amount: int, api_token: str = "") -> str:
    """Refund an order (another program's tool of the same name); a person approves it first."""
    return f"refunded {amount} on order {order_id}"


def probes(run_id: str, call_id: str, conversation_id: str) -> list[tuple[str, str, Any]]:
    """Every route that names a run, a call or a conversation, with a valid body."""
    return [
        ("GET", f"/runs/{run_id}", None),
        ("GET", f"/runs/{run_id}/events", None),
        ("POST", f"/runs/{run_id}/cancel", None),
        ("POST", f"/runs/{run_id}/approvals/{call_id}", {"approve": True, "fingerprint": "f" * 64}),
        ("POST", f"/runs/{run_id}/calls/{call_id}/reconcile", {"executed": False}),
        ("GET", f"/conversations/{conversation_id}", None),
        ("POST", f"/conversations/{conversation_id}/turns", {"text": "say: hi"}),
    ]


def without_ids(body: dict[str, Any], *ids: str) -> dict[str, Any]:
    detail = str(body["detail"])
    for found in ids:
        detail = detail.replace(found, "<id>")
    return {**body, "detail": detail}


async def test_every_route_answers_another_caller_as_for_a_missing_id(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        run_id = await api.start(ALICE, "Please refund order A7.")
        paused = await api.settled(ALICE, run_id)
        [pending] = paused["pending_approvals"]
        call_id = pending["call_id"]
        conversation_id = (await api.call("POST", "/conversations", ALICE)).body["id"]

        for (method, path, body), (_, missing_path, _) in zip(
            probes(run_id, call_id, conversation_id), probes("0" * 32, call_id, "1" * 32), strict=True
        ):
            theirs = await api.call(method, path, CAROL, body)
            missing = await api.call(method, missing_path, CAROL, body)
            assert theirs.status == 404, (method, path, theirs.body)
            assert theirs.content_type == "application/problem+json"
            assert without_ids(theirs.body, run_id, conversation_id) == without_ids(missing.body, "0" * 32, "1" * 32)

        assert (await api.call("GET", "/runs", CAROL)).body["runs"] == []
        assert (await api.call("GET", "/approvals", CAROL)).body["approvals"] == []
        # An approver sees the call waiting (addressed to its role), but not the run, the events or the conversation.
        assert [a["run_id"] for a in (await api.call("GET", "/approvals", DAVE)).body["approvals"]] == [run_id]
        for method, path, body in probes(run_id, call_id, conversation_id):
            if "/approvals/" in path or "/reconcile" in path:
                continue
            reply = await api.call(method, path, DAVE, body)
            assert reply.status == 404, (method, path, reply.body)

        # Nothing the probes did reached alice's run: it still waits, her conversation has no turn.
        assert (await api.call("GET", f"/runs/{run_id}", ALICE)).body["status"] == "awaiting_approval"
        assert (await api.call("GET", f"/conversations/{conversation_id}", ALICE)).body["turns"] == []
    assert served.refunds_made() == []


async def test_a_request_without_credentials_is_a_401_problem(served: Served, session: aiohttp.ClientSession) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        routes = [("POST", "/runs", {"prompt": "hi"}), ("GET", "/runs", None), ("GET", "/approvals", None),
                  ("POST", "/conversations", None)]  # fmt: skip
        for method, path, body in routes:
            reply = await api.call(method, path, None, body)
            assert reply.status == 401, (path, reply.body)
            assert reply.content_type == "application/problem+json"


async def test_a_run_another_program_left_in_the_store_is_neither_listed_nor_decided_here(
    served: Served, model: FakeServer, session: aiohttp.ClientSession
) -> None:
    """The store is shared (by default the file `tether run` uses; a PostgreSQL store by several services): a run
    another program recorded there, waiting for approval, is not this service's. Its approvers do not see it, and
    a decision on it is the 404 a missing run gets: deciding would resume it here, with this agent's tools."""
    store = SQLiteStore(served.db)
    try:
        program = OpenAIChatModel("fake-model", base_url=model.base_url, api_key="k")
        elsewhere = Agent(program, [lookup_order, refund], store=store)
        waiting = await elsewhere.run("Please refund order A7.", principal=Principal("alice"))
    finally:
        store.close()
    assert waiting.status is Status.AWAITING_APPROVAL
    [call] = waiting.state.undecided()
    with served.process() as (_, base):
        api = Client(base, session)
        assert (await api.call("GET", "/approvals", DAVE)).body["approvals"] == []
        decision = {"approve": True, "fingerprint": call.fingerprint}
        decided = await api.call("POST", f"/runs/{waiting.run_id}/approvals/{call.call_id}", DAVE, decision)
        settled = await api.call(
            "POST", f"/runs/{waiting.run_id}/calls/{call.call_id}/reconcile", DAVE, {"executed": False}
        )
        missing = await api.call("POST", f"/runs/{'0' * 32}/approvals/{call.call_id}", DAVE, decision)
        assert decided.status == settled.status == 404, (decided.body, settled.body)
        assert without_ids(decided.body, waiting.run_id) == without_ids(missing.body, "0" * 32)
        # Its owner, an approver here too, is told where it is decided.
        owns = await api.call("POST", f"/runs/{waiting.run_id}/approvals/{call.call_id}", "alice:approver", decision)
        assert owns.status == 409 and "tether runs approve" in owns.body["detail"], owns.body
    store = SQLiteStore(served.db)
    try:
        assert store.load(waiting.run_id).state.status is Status.AWAITING_APPROVAL  # nothing recorded, not resumed
    finally:
        store.close()
    assert served.refunds_made() == []
