"""Run and conversation ids: version-7 UUIDs, in the order they were made, from every place that makes one."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from tether import Agent, SQLiteStore
from tether.drivers.ids import new_id
from tether.models.scripted import ScriptedModel, reply_text


def test_an_id_is_a_version_7_uuid_of_the_time_it_was_made() -> None:
    before = time.time_ns() // 1_000_000
    made = new_id()
    after = time.time_ns() // 1_000_000
    parsed = uuid.UUID(hex=made)
    assert made == parsed.hex and len(made) == 32
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert before <= int(made[:12], 16) <= after


def test_ids_made_one_after_another_sort_in_that_order_and_never_repeat() -> None:
    made = []
    for _ in range(200):
        made.append(new_id())
        time.sleep(0.0001)
    assert made == sorted(made)
    burst = [new_id() for _ in range(10_000)]
    assert len(set(burst)) == len(burst)


async def test_a_stores_runs_are_keyed_in_the_order_they_were_started(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    agent = Agent(ScriptedModel([reply_text("a"), reply_text("b"), reply_text("c")]), [], store=store)
    started = []
    for _ in range(3):
        started.append((await agent.run("hi")).run_id)
        time.sleep(0.002)
    assert started == sorted(started)
    assert all(uuid.UUID(hex=run_id).version == 7 for run_id in started)
    conversation = agent.conversation()
    assert uuid.UUID(hex=conversation.id).version == 7
