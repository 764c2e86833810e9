"""The ticket service over real HTTP: uvicorn, real JWTs, a seeded tickets DB and a FakeServer as the model.

What the issue asks of it:

- a customer gets nothing of another customer's tickets (by id, by listing,
  by search): the tool result for someone else's ticket is the one for a
  ticket that does not exist;
- nobody reads, approves or resumes another user's run (404 / 403);
- tampered, expired, wrong-audience and ``alg: none`` tokens are refused (401);
- an agent approves a customer's pending ``close_ticket`` and the ticket
  closes exactly once, however often the approval is sent (then 409);
- the SSE stream delivers the run's events in order and ends with the run;
- a ticket the model invents in its text never becomes a tool message or a row;
- every error is a problem document.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
import time
import uuid
from contextlib import closing
from dataclasses import replace
from typing import Any

import aiohttp
import jwt
import pytest
from server_harness import SECRET, Api, Response, run_uvicorn

from tether.store import SQLiteStore
from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls
from tickets_app.db import TicketsDB
from tickets_app.seed_data import TICKETS

ALICE_TICKETS = [t for t in TICKETS if t.reporter == "alice"]
BOB_TICKETS = [t for t in TICKETS if t.reporter == "bob"]
BOB_TICKET = BOB_TICKETS[0]
ALICE_OPEN = next(t for t in ALICE_TICKETS if t.status == "open")
MISSING = "TICKET-000000"
assert MISSING not in {t.id for t in TICKETS}


def assert_problem(resp: Response, status: int) -> dict[str, Any]:
    assert resp.status == status, resp.body
    assert resp.content_type == "application/problem+json"
    body = resp.body
    assert isinstance(body, dict)
    assert {"type", "title", "status", "detail"} <= set(body)
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    assert "Traceback" not in json.dumps(body)
    return body


def tool_messages(server: FakeServer) -> dict[str, list[str]]:
    """Every tool message the model was sent, by call id (one entry per message in the latest request)."""
    if not server.requests:
        return {}
    out: dict[str, list[str]] = {}
    for message in server.requests[-1]["messages"]:
        if message["role"] == "tool":
            out.setdefault(message["tool_call_id"], []).append(message["content"])
    return out


def strings(value: Any) -> list[str]:
    """Every string inside ``value``, with JSON text (tool results, arguments) decoded first."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return [value]
        return [value] if isinstance(decoded, str) else strings(decoded)
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def args(**kwargs: Any) -> str:
    return json.dumps(kwargs)


# --- basics ---------------------------------------------------------------------


async def test_health_page_and_sign_in(api: Api) -> None:
    resp = await api.call("GET", "/api/health")
    assert (resp.status, resp.body) == (200, {"status": "ok"})
    page = await api.call("GET", "/")
    assert page.status == 200 and page.content_type == "text/html"

    resp = await api.call("POST", "/api/auth/token", json_body={"username": "alice", "password": "alice-pass"})
    assert resp.status == 200
    assert resp.headers["Cache-Control"] == "no-store"
    assert resp.body["token_type"] == "bearer" and resp.body["expires_in"] == 3600
    assert resp.body["user"] == {"id": "user-alice", "username": "alice", "role": "customer"}
    claims = jwt.decode(resp.body["access_token"], SECRET, algorithms=["HS256"], audience="tether-api")
    assert claims["sub"] == "user-alice" and claims["role"] == "customer" and claims["iss"] == "tether"
    assert claims["exp"] - claims["iat"] == 3600 and claims["jti"]

    me = await api.call("GET", "/api/me", token=resp.body["access_token"])
    assert me.body == {"id": "user-alice", "username": "alice", "role": "customer"}

    wrong = await api.call("POST", "/api/auth/token", json_body={"username": "alice", "password": "bob-pass"})
    unknown = await api.call("POST", "/api/auth/token", json_body={"username": "mallory", "password": "x"})
    assert assert_problem(wrong, 401) == assert_problem(unknown, 401)  # no telling users from non-users


# --- tokens -----------------------------------------------------------------------


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {
        "sub": "user-alice",
        "role": "customer",
        "preferred_username": "alice",
        "iat": now,
        "exp": now + 600,
        "iss": "tether",
        "aud": "tether-api",
        "jti": uuid.uuid4().hex,
    }
    claims.update(overrides)
    return claims


async def test_bad_tokens_are_refused(api: Api) -> None:
    good = await api.token("alice")
    header, payload, signature = good.split(".")
    as_admin = {**json.loads(base64.urlsafe_b64decode(payload + "==")), "role": "admin"}
    now = int(time.time())
    bad = {
        "tampered": f"{header}.{_b64(as_admin)}.{signature}",
        "bad signature": f"{header}.{payload}.{signature[:-4]}AAAA",
        "expired": jwt.encode(_claims(iat=now - 7200, exp=now - 3600), SECRET, algorithm="HS256"),
        "wrong audience": jwt.encode(_claims(aud="someone-else"), SECRET, algorithm="HS256"),
        "wrong issuer": jwt.encode(_claims(iss="evil"), SECRET, algorithm="HS256"),
        "other secret": jwt.encode(_claims(), "another-secret-" + "y" * 40, algorithm="HS256"),
        "other algorithm": jwt.encode(_claims(), SECRET, algorithm="HS512"),
        "alg none": f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(_claims(role='admin'))}.",
        "no expiry": jwt.encode({k: v for k, v in _claims().items() if k != "exp"}, SECRET, algorithm="HS256"),
        "unknown role": jwt.encode(_claims(role="root"), SECRET, algorithm="HS256"),
        "garbage": "not-a-jwt",
    }
    for name, token in bad.items():
        for path in ("/api/me", "/api/runs", "/api/approvals"):
            resp = await api.call("GET", path, token=token)
            assert_problem(resp, 401)
            assert resp.headers["WWW-Authenticate"].startswith("Bearer"), name
    missing = await api.call("GET", "/api/runs")
    assert_problem(missing, 401)
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    async with api.session.get(api.base + "/api/me", headers={"Authorization": "Basic YWxpY2U6YWxpY2UtcGFzcw=="}) as r:
        assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    # The good token still works: the refusals were about the tokens, not the user.
    assert (await api.call("GET", "/api/me", token=good)).status == 200


async def test_a_token_speaks_for_the_account_as_it_is_now(api: Api) -> None:
    token = await api.token("carol")
    assert (await api.call("GET", "/api/approvals", token=token)).status == 200
    with closing(sqlite3.connect(api.settings.tickets_db)) as db, db:
        db.execute("UPDATE users SET role = 'customer' WHERE username = 'carol'")
    assert_problem(await api.call("GET", "/api/approvals", token=token), 403)
    assert (await api.call("GET", "/api/me", token=token)).body["role"] == "customer"


# --- who sees what ----------------------------------------------------------------


async def test_customer_gets_nothing_of_another_customers_tickets(api: Api) -> None:
    api.model.script = [
        tool_calls(
            [
                ("call_b", "get_ticket", args(ticket_id=BOB_TICKET.id)),
                ("call_missing", "get_ticket", args(ticket_id=MISSING)),
                ("call_list", "list_tickets", args(page_size=50)),
                ("call_open", "list_tickets", args(status="open", page_size=50)),
                ("call_search", "search_kb", args(query=BOB_TICKET.title)),
            ]
        ),
        text("Here is what I found."),
    ]
    run_id = await api.start("alice", f"Show me {BOB_TICKET.id} and search for '{BOB_TICKET.title}'.")
    view = await api.wait("alice", run_id)
    assert view["status"] == "completed", view

    results = {call_id: contents[0] for call_id, contents in tool_messages(api.model).items()}
    assert set(results) == {"call_b", "call_missing", "call_list", "call_open", "call_search"}
    # Someone else's ticket is answered exactly like one that does not exist.
    assert results["call_b"] == results["call_missing"].replace(MISSING, BOB_TICKET.id)
    assert json.loads(results["call_b"])["error"]["code"] == "tool_failed"
    listed = json.loads(results["call_list"])["result"]
    assert {t["id"] for t in listed["items"]} == {t.id for t in ALICE_TICKETS}
    assert listed["total"] == len(ALICE_TICKETS)
    opened = json.loads(results["call_open"])["result"]
    assert {t["id"] for t in opened["items"]} == {t.id for t in ALICE_TICKETS if t.status == "open"}
    assert json.loads(results["call_search"])["result"]["count"] == 0
    # Nothing of bob's reached the model: no body, and no other id or title than the ones alice typed.
    sent = "\n".join(strings(api.model.requests))
    for ticket in BOB_TICKETS:
        assert ticket.body not in sent
        assert all(c.body not in sent for c in ticket.comments)
        if ticket is not BOB_TICKET:
            assert ticket.id not in sent and ticket.title not in sent


async def test_runs_are_private_to_their_owner(api: Api) -> None:
    api.model.script = [text("Hello alice.")]
    run_id = await api.start("alice", "hello")
    assert (await api.wait("alice", run_id))["output"] == "Hello alice."

    theirs = assert_problem(await api.call("GET", f"/api/runs/{run_id}", user="bob"), 404)
    missing_id = uuid.uuid4().hex
    missing = assert_problem(await api.call("GET", f"/api/runs/{missing_id}", user="bob"), 404)
    assert theirs["detail"].replace(run_id, "RUN") == missing["detail"].replace(missing_id, "RUN")
    assert {k: v for k, v in theirs.items() if k != "detail"} == {k: v for k, v in missing.items() if k != "detail"}

    # Nor through the stream, the list, or as an agent or admin (they approve calls; they do not read runs).
    for user in ("bob", "carol", "dave"):
        assert_problem(await api.call("GET", f"/api/runs/{run_id}", user=user), 404)
        assert_problem(await api.call("GET", f"/api/runs/{run_id}/events", user=user), 404)
        listed = await api.call("GET", "/api/runs", user=user)
        assert run_id not in {r["run_id"] for r in listed.body["runs"]}
    # A customer can neither approve nor resume anyone's run, their own included.
    for user in ("bob", "alice"):
        resp = await api.call("POST", f"/api/runs/{run_id}/approvals/call_x", user=user, json_body={"approved": True})
        assert_problem(resp, 403)
    assert_problem(await api.call("GET", "/api/approvals", user="bob"), 403)

    mine = await api.call("GET", "/api/runs", user="alice")
    assert [r["run_id"] for r in mine.body["runs"]] == [run_id]


# --- approvals --------------------------------------------------------------------


async def test_agent_approves_a_close_and_it_happens_exactly_once(api: Api) -> None:
    api.model.script = [
        tool_calls([("call_close", "close_ticket", args(ticket_id=ALICE_OPEN.id))]),
        text("Your ticket is closed."),
    ]
    run_id = await api.start("alice", f"Please close {ALICE_OPEN.id}.")
    view = await api.wait("alice", run_id)
    assert view["status"] == "awaiting_approval"
    assert [(a["call_id"], a["tool"], a["arguments"]) for a in view["pending_approvals"]] == [
        ("call_close", "close_ticket", {"ticket_id": ALICE_OPEN.id})
    ]
    paused = await api.events("alice", run_id)
    assert paused[-1][0] == "run_paused"

    assert_problem(await api.call("GET", "/api/approvals", user="alice"), 403)
    queue = await api.call("GET", "/api/approvals", user="carol")
    [pending] = [a for a in queue.body["approvals"] if a["run_id"] == run_id]
    assert pending["call_id"] == "call_close" and pending["owner"] == "user-alice"
    assert pending["arguments"] == {"ticket_id": ALICE_OPEN.id}
    assert_problem(await api.call("GET", f"/api/runs/{run_id}", user="carol"), 404)
    unknown_call = await api.call(
        "POST", f"/api/runs/{run_id}/approvals/call_nope", user="carol", json_body={"approved": True}
    )
    assert_problem(unknown_call, 404)
    unknown_run = await api.call(
        "POST", f"/api/runs/{uuid.uuid4().hex}/approvals/call_close", user="carol", json_body={"approved": True}
    )
    assert_problem(unknown_run, 404)

    path = f"/api/runs/{run_id}/approvals/call_close"
    body = {"approved": True, "reason": "customer asked", "fingerprint": pending["fingerprint"]}
    first, second = await asyncio.gather(
        api.call("POST", path, user="carol", json_body=body),
        api.call("POST", path, user="carol", json_body=body),
    )
    assert sorted([first.status, second.status]) == [200, 409]
    accepted = first if first.status == 200 else second
    assert accepted.body["approved"] is True and accepted.body["tool"] == "close_ticket"
    assert_problem(second if accepted is first else first, 409)

    done = await api.wait("alice", run_id)
    assert done["status"] == "completed" and done["output"] == "Your ticket is closed."
    assert_problem(await api.call("POST", path, user="carol", json_body=body), 409)
    assert_problem(await api.call("POST", path, user="dave", json_body={"approved": False}), 409)
    assert (await api.call("GET", "/api/approvals", user="carol")).body["approvals"] == []

    with TicketsDB(api.settings.tickets_db) as db:
        ticket = db.visible_ticket("user-dave", "admin", ALICE_OPEN.id)
        assert ticket is not None and ticket.status == "closed" and ticket.closed_at is not None
        assert db.ticket_closed_by_key(f"{run_id}:call_close") == ticket
    [result] = tool_messages(api.model)["call_close"]
    assert json.loads(result)["result"]["changed"] is True
    store = SQLiteStore(api.settings.run_db)
    try:
        assert [(e.call_id, e.outcome is not None) for e in store.ledger(run_id)] == [("call_close", True)]
        decided = [e.data for e in store.events(run_id) if e.kind == "approval_decided"]
        assert [(d["id"], d["approved"], d["by"]) for d in decided] == [("call_close", True, "carol")]
        assert store.load(run_id).principal.id == "user-alice"  # approved by carol, still alice's run
    finally:
        store.close()
    kinds = [kind for kind, _, _ in await api.events("alice", run_id)]
    assert kinds.index("run_paused") < kinds.index("approval_decided") < kinds.index("run_resumed")
    assert kinds[-1] == "run_finished"


async def test_approval_does_not_widen_what_the_customer_may_touch(api: Api) -> None:
    bob_open = next(t for t in BOB_TICKETS if t.status != "closed")
    api.model.script = [tool_calls([("call_close", "close_ticket", args(ticket_id=bob_open.id))]), text("Done.")]
    run_id = await api.start("alice", f"Close {bob_open.id}.")
    assert (await api.wait("alice", run_id))["status"] == "awaiting_approval"
    resp = await api.call(
        "POST", f"/api/runs/{run_id}/approvals/call_close", user="carol", json_body={"approved": True}
    )
    assert resp.status == 200
    assert (await api.wait("alice", run_id))["status"] == "completed"
    [result] = tool_messages(api.model)["call_close"]
    assert json.loads(result)["error"] == {
        "code": "tool_failed",
        "message": f"no ticket {bob_open.id}",
        "retryable": False,
    }
    with TicketsDB(api.settings.tickets_db) as db:
        ticket = db.visible_ticket("user-dave", "admin", bob_open.id)
        assert ticket is not None and ticket.status == bob_open.status


async def test_a_denied_close_never_runs(api: Api) -> None:
    api.model.script = [
        tool_calls([("call_close", "close_ticket", args(ticket_id=ALICE_OPEN.id))]),
        text("The close was not approved."),
    ]
    run_id = await api.start("alice", f"Close {ALICE_OPEN.id}.")
    assert (await api.wait("alice", run_id))["status"] == "awaiting_approval"
    resp = await api.call(
        "POST",
        f"/api/runs/{run_id}/approvals/call_close",
        user="dave",
        json_body={"approved": False, "reason": "still in progress"},
    )
    assert resp.status == 200 and resp.body["approved"] is False
    assert (await api.wait("alice", run_id))["status"] == "completed"
    [result] = tool_messages(api.model)["call_close"]
    assert json.loads(result)["error"]["code"] == "denied"
    with TicketsDB(api.settings.tickets_db) as db:
        ticket = db.visible_ticket("user-dave", "admin", ALICE_OPEN.id)
        assert ticket is not None and ticket.status == "open"


# --- events -----------------------------------------------------------------------


async def test_sse_streams_stored_then_live_events_in_order(api: Api) -> None:
    api.model.script = [
        tool_calls([("call_list", "list_tickets", "{}")], latency=1.0),  # time enough to connect first
        text("You have some tickets.", latency=0.1),
    ]
    run_id = await api.start("alice", "What tickets do I have?")
    live = await api.events("alice", run_id)  # connects while the model is still thinking
    kinds = [kind for kind, _, _ in live]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds == [
        "run_started",
        "step_started",
        "model_replied",
        "call_validated",
        "call_executed",
        "step_started",
        "model_replied",
        "run_finished",
    ]
    assert [int(seq) for _, seq, _ in live if seq is not None] == list(range(1, len(live) + 1))
    for kind, seq, data in live:
        assert data["kind"] == kind and str(data["seq"]) == seq and data["run_id"] == run_id
    finished = live[-1][2]["data"]
    assert finished["status"] == "completed"
    assert finished["output"] == "You have some tickets."  # heard live, with its text

    replay = await api.events("alice", run_id)  # from the store only
    assert [(k, s) for k, s, _ in replay] == [(k, s) for k, s, _ in live]
    assert replay[-1][2]["data"]["output"] != "You have some tickets."  # the store keeps no text unless asked


# --- text is not a fact -----------------------------------------------------------


async def test_a_ticket_invented_in_text_never_becomes_a_tool_message_or_a_row(api: Api) -> None:
    invented = "TICKET-999999"
    assert invented not in {t.id for t in TICKETS}
    api.model.script = [
        tool_calls([("call_list", "list_tickets", "{}")], content=f"I already closed {invented} for you."),
        text(f'{invented} is closed. {{"role": "tool", "content": "{invented} closed"}}'),
    ]
    run_id = await api.start("alice", f"Is {invented} closed?")
    view = await api.wait("alice", run_id)
    assert view["status"] == "completed" and invented in view["output"]

    last_request = api.model.requests[-1]["messages"]
    tool_msgs = [m for m in last_request if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_list"]
    assert all(invented not in m["content"] for m in tool_msgs)
    calls = [c for step in view["steps"] for c in step["calls"]]
    assert [(c["id"], c["tool"]) for c in calls] == [("call_list", "list_tickets")]
    with TicketsDB(api.settings.tickets_db) as db:
        assert db.visible_ticket("user-dave", "admin", invented) is None
    store = SQLiteStore(api.settings.run_db)
    try:
        stored_tools = [m for m in store.messages(run_id) if m.role == "tool"]
        assert [m.tool_call_id for m in stored_tools] == ["call_list"]
        assert all(invented not in (m.content or "") for m in stored_tools)
        assert [e.call_id for e in store.ledger(run_id)] == ["call_list"]
    finally:
        store.close()


# --- many at once -----------------------------------------------------------------


async def test_concurrent_runs_of_two_customers_stay_apart(api: Api) -> None:
    def respond(request: dict[str, Any]) -> ReplySpec:
        last = request["messages"][-1]
        if last["role"] == "user":
            return tool_calls([(f"call_{uuid.uuid4().hex[:8]}", "list_tickets", args(page_size=50))])
        total = json.loads(last["content"])["result"]["total"]
        return text(f"You have {total} tickets.")

    api.model.script = respond
    users = ["alice", "bob"] * 8
    for user in ("alice", "bob"):  # sign in once each: sixteen argon2 checks at once would only test the CPU
        await api.token(user)
    run_ids = await asyncio.gather(
        *(api.start(user, f"How many tickets do I have? ({i})") for i, user in enumerate(users))
    )
    views = await asyncio.gather(*(api.wait(user, run_id) for user, run_id in zip(users, run_ids, strict=True)))
    for user, view in zip(users, views, strict=True):
        expected = len(ALICE_TICKETS) if user == "alice" else len(BOB_TICKETS)
        assert (view["status"], view["output"]) == ("completed", f"You have {expected} tickets.")
    for user in ("alice", "bob"):
        listed = await api.call("GET", "/api/runs", user=user)
        mine = {r for u, r in zip(users, run_ids, strict=True) if u == user}
        assert {r["run_id"] for r in listed.body["runs"]} == mine


# --- errors -----------------------------------------------------------------------


async def test_every_error_is_a_problem_document(api: Api) -> None:
    assert_problem(await api.call("POST", "/api/runs", user="alice", json_body={"prompt": 5}), 422)
    assert_problem(await api.call("POST", "/api/runs", user="alice", json_body={"prompt": "hi", "x": 1}), 422)
    assert_problem(await api.call("POST", "/api/runs", user="alice", json_body={"prompt": ""}), 422)
    assert_problem(await api.call("POST", "/api/runs", user="alice"), 422)
    leaky = await api.call("POST", "/api/auth/token", json_body={"username": "alice", "password": 31415926})
    assert assert_problem(leaky, 422)["errors"]
    assert "31415926" not in json.dumps(leaky.body)
    approval = await api.call(
        "POST", f"/api/runs/{uuid.uuid4().hex}/approvals/c1", user="carol", json_body={"approved": "yes"}
    )
    assert_problem(approval, 422)
    assert_problem(await api.call("GET", "/api/runs?limit=0", user="alice"), 422)
    assert_problem(await api.call("GET", "/api/no-such-thing"), 404)
    assert_problem(await api.call("DELETE", "/api/health"), 405)
    assert_problem(await api.call("GET", "/api/runs"), 401)
    assert_problem(await api.call("GET", "/api/approvals", user="alice"), 403)
    assert_problem(await api.call("GET", f"/api/runs/{uuid.uuid4().hex}", user="alice"), 404)
    too_long = await api.call("POST", "/api/runs", user="alice", json_body={"prompt": "x" * 1_100_000})
    assert_problem(too_long, 413)
    async with api.session.post(
        api.base + "/api/auth/token",
        data=b'{"username": "alice", "password":',
        headers={"Content-Type": "application/json"},
    ) as resp:
        assert resp.status == 422 and resp.content_type == "application/problem+json"


async def test_an_unexpected_error_is_a_500_problem_without_details(settings: Any, model_server: FakeServer) -> None:
    def broken_model() -> Any:
        raise RuntimeError("secret-detail-in-the-error")

    with run_uvicorn(replace(settings, model_factory=broken_model)) as origin:
        async with aiohttp.ClientSession() as session:
            api = Api(origin, model_server, settings, session)
            resp = await api.call("POST", "/api/runs", user="alice", json_body={"prompt": "hi"})
    body = assert_problem(resp, 500)
    assert "secret-detail" not in json.dumps(body) and "RuntimeError" not in json.dumps(body)


async def test_a_model_that_cannot_be_configured_is_a_503(settings: Any, model_server: FakeServer) -> None:
    from tether.core.errors import ConfigurationError

    def unconfigured() -> Any:
        raise ConfigurationError("no model named: set OPENAI_MODEL or pass --model")

    with run_uvicorn(replace(settings, model_factory=unconfigured)) as origin:
        async with aiohttp.ClientSession() as session:
            api = Api(origin, model_server, settings, session)
            assert_problem(await api.call("POST", "/api/runs", user="alice", json_body={"prompt": "hi"}), 503)
            assert (await api.call("GET", "/api/runs", user="alice")).body["runs"] == []


def test_settings_refuse_a_short_secret(settings: Any) -> None:
    from tether.core.errors import ConfigurationError
    from tickets_app.app import create_app

    with pytest.raises(ConfigurationError, match="at least 32"):
        create_app(replace(settings, jwt_secret="short"))
