"""The served API's other routes: conversations, listing, cancelling, reconciling, health, limits, OpenAPI."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from serve_harness import AGENT_PY, Client, Served, refund_desk

from tether.serve.problems import MAX_LISTED_ERRORS
from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls

ALICE = "alice"
BOB = "bob:approver"


async def test_a_conversation_keeps_its_turns_and_belongs_to_its_principal(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        created = await api.call("POST", "/conversations", ALICE)
        assert created.status == 201, created.body
        conversation_id = created.body["id"]
        runs = []
        for text in ("say: one", "say: two"):
            turn = await api.call("POST", f"/conversations/{conversation_id}/turns", ALICE, {"text": text})
            assert turn.status == 202, turn.body
            runs.append(turn.body["run_id"])
            assert (await api.settled(ALICE, turn.body["run_id"]))["status"] == "completed"
        transcript = (await api.call("GET", f"/conversations/{conversation_id}", ALICE)).body
        # The second turn's request carried the first turn: the model saw the whole conversation.
        second = served.model.requests[-1]["messages"]
        assert [m["content"] for m in second if m["role"] == "user"] == ["say: one", "say: two"]
    assert [t["run_id"] for t in transcript["turns"]] == runs
    assert [t["messages"] for t in transcript["turns"]] == [
        [{"role": "user", "content": "say: one"}, {"role": "assistant", "content": "You said one"}],
        [{"role": "user", "content": "say: two"}, {"role": "assistant", "content": "You said two"}],
    ]


async def test_a_conversation_whose_turn_was_edited_in_the_store_is_a_409_not_a_500(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """Its transcript is read checked (the chain of each turn's messages); an edited message failed the check with
    an exception the route did not answer."""
    import sqlite3

    with served.process() as (_, base):
        api = Client(base, session)
        conversation_id = (await api.call("POST", "/conversations", ALICE)).body["id"]
        turn = await api.call("POST", f"/conversations/{conversation_id}/turns", ALICE, {"text": "say: one"})
        assert (await api.settled(ALICE, turn.body["run_id"]))["status"] == "completed"
        with sqlite3.connect(served.db) as raw:
            edited = "UPDATE messages SET body = replace(body, 'one', 'two') WHERE run_id = ?"
            assert raw.execute(edited, (turn.body["run_id"],)).rowcount >= 1
        shown = await api.call("GET", f"/conversations/{conversation_id}", ALICE)
    assert shown.status == 409, shown.body
    assert shown.content_type == "application/problem+json"
    assert shown.body["detail"] == f"conversation {conversation_id} fails its audit check; it is not shown"


async def test_a_turn_while_the_last_one_waits_for_approval_is_a_409(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        conversation_id = (await api.call("POST", "/conversations", ALICE)).body["id"]
        first = await api.call("POST", f"/conversations/{conversation_id}/turns", ALICE, {"text": "refund A7"})
        assert (await api.settled(ALICE, first.body["run_id"]))["status"] == "awaiting_approval"
        second = await api.call("POST", f"/conversations/{conversation_id}/turns", ALICE, {"text": "say: hi"})
        assert second.status == 409, second.body
        assert second.content_type == "application/problem+json"


async def test_runs_are_listed_by_page_and_by_status(served: Served, session: aiohttp.ClientSession) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        done = [await api.start(ALICE, f"say: {n}") for n in range(3)]
        for run_id in done:
            await api.settled(ALICE, run_id)
        waiting = await api.start(ALICE, "refund A7")
        await api.settled(ALICE, waiting)
        pages, cursor = [], None
        while True:
            query = "/runs?limit=2" + (f"&cursor={cursor}" if cursor else "")
            reply = await api.call("GET", query, ALICE)
            assert reply.status == 200, reply.body
            pages.append([r["run_id"] for r in reply.body["runs"]])
            cursor = reply.body["next_cursor"]
            if cursor is None:
                break
        paused = (await api.call("GET", "/runs?status=awaiting_approval", ALICE)).body["runs"]
        bad_status = await api.call("GET", "/runs?status=sleeping", ALICE)
        bad_cursor = await api.call("GET", "/runs?cursor=nonsense", ALICE)
    assert pages == [[waiting, done[2]], [done[1], done[0]]]
    assert [r["run_id"] for r in paused] == [waiting]
    assert bad_status.status == 422 and bad_cursor.status == 422
    assert bad_cursor.content_type == "application/problem+json"


async def test_a_run_waiting_for_approval_is_cancelled_and_its_call_never_runs(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        run_id = await api.start(ALICE, "refund A7")
        await api.settled(ALICE, run_id)
        cancelled = await api.call("POST", f"/runs/{run_id}/cancel", ALICE)
        assert cancelled.status == 200, cancelled.body
        assert cancelled.body["status"] == "cancelled"
        assert (await api.call("GET", "/approvals", BOB)).body["approvals"] == []
        again = await api.call("POST", f"/runs/{run_id}/cancel", ALICE)
        assert again.status == 409 and again.content_type == "application/problem+json"
        events = await api.events(ALICE, run_id)
    assert events[-1][0] == "run_finished" and events[-1][2]["data"]["status"] == "cancelled"
    assert served.refunds_made() == []


async def test_health_readiness_openapi_and_bounded_input(served: Served, session: aiohttp.ClientSession) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        assert (await api.call("GET", "/healthz", None)).body == {"status": "ok"}
        assert (await api.call("GET", "/readyz", None)).body == {"status": "ready"}
        spec = (await api.call("GET", "/openapi.json", None)).body
        too_long = await api.call("POST", "/runs", ALICE, {"prompt": "x" * 20_001})
        too_big = await api.call("POST", "/runs", ALICE, {"prompt": "x" * 2_000_000})
        extra = await api.call("POST", "/runs", ALICE, {"prompt": "hi", "principal": "root"})
        no_fingerprint = await api.call("POST", "/runs/x/approvals/y", BOB, {"approve": True})
    assert {"/runs", "/runs/{run_id}", "/runs/{run_id}/events", "/approvals", "/conversations"} <= set(spec["paths"])
    assert too_long.status == 422 and too_big.status == 413 and extra.status == 422 and no_fingerprint.status == 422
    for reply in (too_long, too_big, extra, no_fingerprint):
        assert reply.content_type == "application/problem+json"
    assert len(served.model.requests) == 0


async def test_a_run_being_driven_is_cancelled_at_once(served: Served, session: aiohttp.ClientSession) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        run_id = await api.start(ALICE, "take your time")
        deadline = time.monotonic() + 30
        while not served.model.requests:  # the model is asked, and answers only in a minute
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        cancelled = await api.call("POST", f"/runs/{run_id}/cancel", ALICE)
        assert cancelled.status == 200, cancelled.body
        assert cancelled.body["status"] == "cancelled"
        assert (await api.call("GET", f"/runs/{run_id}", ALICE)).body["status"] == "cancelled"


async def test_a_run_started_between_pages_neither_repeats_nor_hides_one(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        older = [await api.start(ALICE, f"say: {n}") for n in range(3)]
        first = (await api.call("GET", "/runs?limit=2", ALICE)).body
        newer = await api.start(ALICE, "say: late")
        second = (await api.call("GET", f"/runs?limit=2&cursor={first['next_cursor']}", ALICE)).body
        fresh = (await api.call("GET", "/runs?limit=1", ALICE)).body
    assert [r["run_id"] for r in first["runs"]] == [older[2], older[1]]
    assert [r["run_id"] for r in second["runs"]] == [older[0]] and second["next_cursor"] is None
    assert [r["run_id"] for r in fresh["runs"]] == [newer]


DELEGATING_AGENT_PY = (
    AGENT_PY
    + """
desk = agent
agent = Agent(OpenAIChatModel("fake-model"), [desk.as_tool(name="helper", description="Hand a refund on.")])
"""
)


def delegating_desk(request: dict[str, Any]) -> ReplySpec:
    """The parent hands the refund to its helper (the refund desk, a child run) and then answers."""
    if "helper" not in {t["function"]["name"] for t in request.get("tools", [])}:
        return refund_desk(request)
    if request["messages"][-1]["role"] == "user":
        return tool_calls([("call_helper", "helper", json.dumps({"input": "refund A7"}))])
    return text("Done.")


@asynccontextmanager
async def a_delegated_refund_waiting(
    tmp_path: Path, session: aiohttp.ClientSession, agent: str = DELEGATING_AGENT_PY
) -> AsyncIterator[tuple[Served, Client, str, dict[str, Any]]]:
    """``agent`` served, its run handing a refund to its helper (a child run), the refund waiting for a person:
    the service, a client, the run's id and the approvals inbox's item for the refund (naming the child run)."""
    agent_py = tmp_path / "agent.py"
    agent_py.write_text(agent)
    with FakeServer(delegating_desk) as model:
        served = Served(agent_py, tmp_path / "runs.db", tmp_path / "refunds.log", model)
        with served.process() as (_, base):
            api = Client(base, session)
            run_id = await api.start(ALICE, "refund A7")
            assert (await api.settled(ALICE, run_id))["status"] == "awaiting_approval"
            [item] = (await api.call("GET", "/approvals", BOB)).body["approvals"]
            assert item["run_id"] != run_id and item["tool"] == "refund"
            yield served, api, run_id, item


async def test_cancelling_a_run_that_waits_with_its_child_run_cancels_the_child_and_no_approval_acts(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with a_delegated_refund_waiting(tmp_path, session) as (served, api, run_id, item):
        child = item["run_id"]
        cancelled = await api.call("POST", f"/runs/{run_id}/cancel", ALICE)
        assert cancelled.status == 200 and cancelled.body["status"] == "cancelled", cancelled.body
        of_child = (await api.call("GET", f"/runs/{child}", ALICE)).body
        assert of_child["status"] == "cancelled"
        assert (await api.call("GET", "/approvals", BOB)).body["approvals"] == []
        decision = {"approve": True, "fingerprint": item["fingerprint"]}
        for through in (run_id, child):  # an approver sees a run of another's only while it waits for one
            late = await api.call("POST", f"/runs/{through}/approvals/{item['call_id']}", BOB, decision)
            assert late.status == 404, late.body
    assert served.refunds_made() == []


async def test_a_child_runs_call_approved_through_its_own_id_carries_the_whole_tree_on(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    """The inbox names the child run; deciding there resumes the run at the top, which carries the child on:
    the child never goes on alone (with the parent's agent and tools, its parent left waiting)."""
    async with a_delegated_refund_waiting(tmp_path, session) as (served, api, run_id, item):
        child = item["run_id"]
        decision = {"approve": True, "fingerprint": item["fingerprint"]}
        decided = await api.call("POST", f"/runs/{child}/approvals/{item['call_id']}", BOB, decision)
        assert decided.status == 200 and decided.body["status"] == "running", decided.body
        finished = await api.settled(ALICE, run_id)
        of_child = (await api.call("GET", f"/runs/{child}", ALICE)).body
    assert finished["status"] == "completed" and finished["output"] == "Done."
    assert of_child["status"] == "completed"
    assert len(served.refunds_made()) == 1


async def test_a_sub_agents_own_approver_decides_nothing_when_served(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    """A service's approvals are all a person's, over HTTP: a sub-agent that approves its own calls in a
    script waits for one here, as the served agent does (the helper's setup checks that it waits)."""
    approving = DELEGATING_AGENT_PY + "desk.approver = lambda call: True\n"
    async with a_delegated_refund_waiting(tmp_path, session, approving) as (served, _, _, _):
        pass
    assert served.refunds_made() == []


async def test_an_event_id_that_is_not_an_ascii_number_or_past_any_event_is_a_422(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """A header's byte 0xB2 reads as "²", a digit to ``str.isdigit`` but not to ``int``; an id past 2**63 - 1 is
    no event's (the store numbers them with 64-bit integers, and cannot even be asked for it): refused, not a 500."""
    with served.process() as (_, base):
        api = Client(base, session)
        run_id = await api.start(ALICE, "say: hi")
        await api.settled(ALICE, run_id)
        async with httpx.AsyncClient() as http:
            for header in (b"\xb2", b"1\xb9", str(2**63).encode(), b"9" * 20):
                sent = {"Authorization": f"Bearer {ALICE}", "Last-Event-ID": header}
                reply = await http.get(f"{base}/runs/{run_id}/events", headers=sent)
                assert reply.status_code == 422 and "Last-Event-ID" in reply.text, reply.text


async def test_a_prompt_or_turn_that_is_not_text_is_a_422(served: Served, session: aiohttp.ClientSession) -> None:
    """JSON's escape ``\\ud800`` alone decodes to a lone surrogate, which no store writes: pydantic's parse of the
    body refuses it (a guard: the library now refuses such a prompt too, but here nothing reaches it)."""
    with served.process() as (_, base):
        async with httpx.AsyncClient() as http:
            sent = {"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json"}
            run = await http.post(f"{base}/runs", content=b'{"prompt": "hi \\ud800"}', headers=sent)
            assert run.status_code == 422 and "valid string" in run.text, run.text
            made = await http.post(f"{base}/conversations", content=b"{}", headers=sent)
            assert made.status_code in (200, 201), made.text
            turns = f"{base}/conversations/{made.json()['id']}/turns"
            turn = await http.post(turns, content=b'{"text": "\\udc80"}', headers=sent)
            assert turn.status_code == 422 and "valid string" in turn.text, turn.text
    assert len(served.model.requests) == 0


async def test_a_cursor_holding_what_no_run_has_is_a_422(served: Served, session: aiohttp.ClientSession) -> None:
    """A cursor is base64 of JSON the client can write itself: a run id holding a lone surrogate (which no store
    can look up) and a time that is not a finite number are no cursor this service gave, not a 500."""
    forged = ['[1796221203.25, "\\ud800"]', '[NaN, "x"]', '[Infinity, "x"]', '[1e400, "x"]', '[-Infinity, "x"]']
    with served.process() as (_, base):
        api = Client(base, session)
        for raw in forged:
            cursor = base64.urlsafe_b64encode(raw.encode()).decode()
            reply = await api.call("GET", f"/runs?cursor={cursor}", ALICE)
            assert reply.status == 422, (raw, reply.body)
            assert reply.body["detail"] == "cursor: not a cursor this service gave"


async def test_a_body_with_every_field_wrong_gets_a_problem_of_bounded_size(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """60,000 unknown fields fit in the 1 MB a body may have; the 422 lists the first errors and counts the rest,
    not a document six times the size of the request."""
    body = {"prompt": "hi", **{f"a{n}": 1 for n in range(60_000)}}
    with served.process() as (_, base):
        refused = await Client(base, session).call("POST", "/runs", ALICE, body)
    assert refused.status == 422 and refused.content_type == "application/problem+json"
    assert len(refused.body["errors"]) == MAX_LISTED_ERRORS
    assert refused.body["errors"][0] == {"loc": ["body", "a0"], "msg": "Extra inputs are not permitted"}
    assert refused.body["detail"].endswith("; and 59995 more (60000 in all)")
    assert len(json.dumps(refused.body)) < 10_000


async def test_a_body_holding_a_key_twice_is_a_422_and_decides_nothing(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """``{"approve": false, "approve": true}`` was an approval (the last key won): what a proxy, an audit log or
    a reviewer reads first is not what the service did. A key twice in one object, at any depth, is refused as
    the model's arguments are, and nothing is decided or started."""
    with served.process() as (_, base):
        api = Client(base, session)
        run_id = await api.start(ALICE, "refund A7")
        await api.settled(ALICE, run_id)
        [item] = (await api.call("GET", "/approvals", BOB)).body["approvals"]
        fingerprint = json.dumps(item["fingerprint"])
        sent = {"Authorization": f"Bearer {BOB}", "Content-Type": "application/json"}
        async with httpx.AsyncClient() as http:
            decided = await http.post(
                f"{base}/runs/{run_id}/approvals/{item['call_id']}",
                content=f'{{"approve": false, "approve": true, "fingerprint": {fingerprint}}}'.encode(),
                headers=sent,
            )
            started = await http.post(
                f"{base}/runs", content=b'{"prompt": "say: hi", "prompt": "refund A7"}', headers=sent
            )
        assert decided.status_code == 422, decided.text
        assert decided.headers["content-type"] == "application/problem+json"
        assert decided.json()["detail"] == "body: duplicate key 'approve'"
        assert started.status_code == 422 and started.json()["detail"] == "body: duplicate key 'prompt'"
        assert (await api.call("GET", f"/runs/{run_id}", ALICE)).body["status"] == "awaiting_approval"
        listed = (await api.call("GET", "/runs", ALICE)).body["runs"]
        assert [r["run_id"] for r in listed] == [run_id]
    assert served.refunds_made() == []
