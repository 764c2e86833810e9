"""Conversations over real HTTP against FakeServer, stored in a real SQLite file, across a SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tether import Agent, OpenAIChatModel, Status, TetherError
from tether.drivers.local.conversation import ConversationBudget
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import ReplySpec, text

SRC = Path(__file__).resolve().parents[2] / "src"


def echo_turn(request: dict[str, Any]) -> ReplySpec:
    """Answers with what it was sent: how many user turns, and the latest."""
    users = [m["content"] for m in request["messages"] if m["role"] == "user"]
    return text(f"heard {len(users)}: {users[-1]}")


FIRST_PROCESS = """
import asyncio, os, signal, sys
from tether import Agent, OpenAIChatModel
from tether.store import SQLiteStore

async def main() -> None:
    model = OpenAIChatModel("m", base_url=sys.argv[1], api_key="k")
    agent = Agent(model, store=SQLiteStore(sys.argv[2]), system="Be brief.")
    conv = agent.conversation()
    for text in ("one", "two"):
        result = await conv.send(text)
        print(result.output, flush=True)
    print(conv.id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no aclose, no cleanup: the process just dies

asyncio.run(main())
"""


def test_a_three_turn_conversation_goes_on_after_the_process_is_killed(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    script = tmp_path / "first.py"
    script.write_text(textwrap.dedent(FIRST_PROCESS))
    with FakeServer(echo_turn) as server:
        done = subprocess.run(
            [sys.executable, str(script), server.base_url, str(db)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(SRC)},
        )
        assert done.returncode == -signal.SIGKILL, done.stderr
        first, second, conversation_id = done.stdout.split("\n")[:3]
        assert (first, second) == ("heard 1: one", "heard 2: two")

        store = SQLiteStore(db)
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), store=store, system="Be brief.")
        conv = agent.conversation(conversation_id)
        assert conv.turns == 2
        result = conv.send_sync("three")

    assert result.status is Status.COMPLETED
    assert result.output == "heard 3: three"
    sent = server.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in sent if m["role"] == "assistant"] == ["heard 1: one", "heard 2: two"]
    assert conv.turns == 3
    assert (conv.usage.input_tokens, conv.usage.output_tokens) == (30, 15)
    stored = store.load_conversation(conversation_id)
    assert [status for _, status in stored.turns] == ["completed"] * 3
    assert stored.usage == (30, 15)
    # A turn stores only what it added; loading it brings the history back; its chains verify.
    third_run = stored.turns[2][0]
    assert store.counts(third_run)[1] == 2
    assert len(store.load(third_run).state.messages) == 7
    assert store.verify(third_run) == []
    assert [c.conversation_id for c in store.list_conversations()] == [conversation_id]
    # The prompt of a turn is its own message, not the whole history (5 = len("three"); content is not logged).
    started = [e for e in store.events(third_run) if e.kind == "run_started"]
    assert started[0].data["prompt"] == "<5 chars>"


async def test_a_conversation_budget_counts_over_turns() -> None:
    async with FakeServer(echo_turn) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        async with Agent(model) as agent:
            conv = agent.conversation(budget=ConversationBudget(max_total_tokens=25, max_turns=4))
            statuses = [(await conv.send(t)).status for t in ("a", "b", "c")]
            assert len(server.requests) == 2  # the third turn had nothing left to spend
            await conv.send("d")
            with pytest.raises(TetherError, match="has had its 4 turns"):
                await conv.send("e")

    assert statuses == [Status.COMPLETED, Status.COMPLETED, Status.BUDGET_EXHAUSTED]
    assert conv.usage.total_tokens == 30


async def test_going_on_with_a_conversation_by_id_needs_a_store() -> None:
    async with FakeServer(echo_turn) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        async with Agent(model) as agent:
            with pytest.raises(TetherError, match="needs an Agent with a store"):
                agent.conversation("c-1")
            conv = agent.conversation()
            await conv.send("x")
            second = await conv.send("y")
    assert second.output == "heard 2: y"
