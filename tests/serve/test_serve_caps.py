"""What one caller may hold open at a served agent: conversations with no turn yet, event streams, runs.

Each limit is read from its ``TETHER_*`` variable by the served process,
holds per caller (another caller is not affected), refuses with the 429
problem the run limits answer (``Retry-After`` included) and records
nothing when it refuses; a slot comes back when a turn is sent, a stream
ends or its client goes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import aiohttp
from serve_harness import Client, Reply, Served

PROBLEM_JSON = "application/problem+json"


def rows(db: Path | str, table: str) -> int:
    with closing(sqlite3.connect(db)) as found:
        count: int = found.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    return count


def too_many(reply: Reply, says: str) -> None:
    """``reply`` is the documented 429 problem, saying ``says``, with a whole number of seconds to wait."""
    assert reply.status == 429, reply.body
    assert reply.content_type == PROBLEM_JSON
    assert set(reply.body) == {"type", "title", "status", "detail"}
    assert (reply.body["type"], reply.body["title"], reply.body["status"]) == ("about:blank", "Too Many Requests", 429)
    assert says in reply.body["detail"], reply.body["detail"]
    assert reply.headers["Retry-After"].isdigit() and int(reply.headers["Retry-After"]) >= 1


async def test_a_caller_holds_at_most_its_empty_conversations_and_a_turn_makes_room(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process(env={"TETHER_MAX_EMPTY_CONVERSATIONS_PER_USER": "2"}) as (_, base):
        api = Client(base, session)
        made = [(await api.call("POST", "/conversations", "alice")).body["id"] for _ in range(2)]
        assert rows(served.db, "conversations") == 2

        refused = await api.call("POST", "/conversations", "alice")
        too_many(refused, "you have 2 conversations with no turn yet")
        assert 86_000 < int(refused.headers["Retry-After"]) <= 86_400  # until the oldest stops counting: a day
        assert rows(served.db, "conversations") == 2  # nothing recorded

        assert (await api.call("POST", "/conversations", "bob")).status == 201  # alice's limit is hers alone

        turn = await api.call("POST", f"/conversations/{made[0]}/turns", "alice", {"text": "say: hi"})
        assert turn.status == 202, turn.body  # a conversation with a turn is not empty: one more may be made
        assert (await api.call("POST", "/conversations", "alice")).status == 201
        too_many(await api.call("POST", "/conversations", "alice"), "no turn yet")
    assert rows(served.db, "conversations") == 4


async def test_an_empty_conversation_stops_counting_once_its_time_is_up(
    served: Served, session: aiohttp.ClientSession
) -> None:
    env = {"TETHER_MAX_EMPTY_CONVERSATIONS_PER_USER": "1", "TETHER_EMPTY_CONVERSATION_SECONDS": "1.5"}
    with served.process(env=env) as (_, base):
        api = Client(base, session)
        assert (await api.call("POST", "/conversations", "alice")).status == 201
        refused = await api.call("POST", "/conversations", "alice")
        too_many(refused, "1.5 seconds after it was made")
        assert refused.headers["Retry-After"] in ("1", "2")
        await asyncio.sleep(1.6)
        assert (await api.call("POST", "/conversations", "alice")).status == 201
    assert rows(served.db, "conversations") == 2


@asynccontextmanager
async def stream(session: aiohttp.ClientSession, base: str, who: str, run_id: str) -> AsyncIterator[Reply]:
    """An event stream of ``run_id`` held open (its first event read) until the block ends and the client
    disconnects; a refusal is its reply."""
    headers = {"Authorization": f"Bearer {who}"}
    async with session.get(f"{base}/runs/{run_id}/events", headers=headers) as resp:
        if resp.status != 200:
            yield Reply(resp.status, dict(resp.headers), await resp.json(content_type=None))
            return
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        await resp.content.readline()  # "event: run_started": the stream is open
        yield Reply(resp.status, dict(resp.headers), None)


async def opened_once_freed(session: aiohttp.ClientSession, base: str, who: str, run_id: str) -> bool:
    """Whether a stream of ``who``'s opens within a few seconds, and one more is then refused."""
    deadline = time.monotonic() + 10
    while True:
        async with stream(session, base, who, run_id) as opened:
            if opened.status == 200:
                async with stream(session, base, who, run_id) as one_more:
                    too_many(one_more, "event streams open")
                return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


async def test_a_caller_holds_at_most_its_event_streams_and_a_closed_one_frees_its_slot(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process(env={"TETHER_MAX_EVENT_STREAMS_PER_USER": "2"}) as (_, base):
        api = Client(base, session)
        finished = await api.start("alice", "say: hi")
        assert (await api.settled("alice", finished))["status"] == "completed"
        for _ in range(3):  # a stream that ends gives its slot back
            assert (await api.events("alice", finished))[-1][0] == "run_finished"

        slow = await api.start("alice", "take your time")  # the model answers after a minute: its streams stay open
        theirs = await api.start("bob", "take your time")
        async with stream(session, base, "alice", slow) as first:
            async with stream(session, base, "alice", slow) as second:
                assert (first.status, second.status) == (200, 200)
                async with stream(session, base, "alice", slow) as third:
                    too_many(third, "you have 2 event streams open")
                async with stream(session, base, "bob", theirs) as bobs:
                    assert bobs.status == 200  # alice's limit is hers alone
            # The second client is gone (it disconnected mid-stream): its slot comes back, for one stream.
            assert await opened_once_freed(session, base, "alice", slow)

        assert rows(served.db, "runs") == 3  # a refused stream starts and records nothing


async def test_tether_serve_reads_the_run_limits_from_the_environment(
    served: Served, session: aiohttp.ClientSession
) -> None:
    env = {"TETHER_MAX_RUNS_PER_USER": "1", "TETHER_MAX_QUEUED_RUNS_PER_USER": "1"}
    with served.process(env=env) as (_, base):
        api = Client(base, session)
        for _ in range(2):
            await api.start("alice", "take your time")  # one driven, one waiting for its slot
        refused = await api.call("POST", "/runs", "alice", {"prompt": "take your time"})
        too_many(refused, "as many runs going and waiting as you may")
        assert rows(served.db, "runs") == 2
        await api.start("bob", "take your time")
