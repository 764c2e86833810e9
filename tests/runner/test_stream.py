"""agent.stream(...) over real HTTP against FakeServer: typed events in order, and listeners that raise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether import Agent, OpenAIChatModel, Status, tool
from tether.core.events import CALL_EXECUTED, RunEvent
from tether.drivers.local.stream import (
    ApprovalNeeded,
    CallFinished,
    CallRefused,
    CallStarted,
    CallValidated,
    RunFinished,
    StepFinished,
    StepStarted,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from tether.store import RunStore, SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls


@tool(read_only=True)
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@tool
def sign_in(user: str, password: str) -> str:
    """Sign a user in."""
    return f"signed in {user}"


ARGS = '{"a": 248, "b": 15}'


def squash(events: list[StreamEvent]) -> list[str]:
    """Event type names, runs of deltas folded into one."""
    names: list[str] = []
    for event in events:
        name = type(event).__name__
        if not (names and names[-1] == name and name in ("TextDelta", "ToolCallDelta")):
            names.append(name)
    return names


async def collect(script: list[Any], tools: list[Any], store: RunStore | None = None) -> tuple[list[Any], Any]:
    async with FakeServer(script) as server:
        model = OpenAIChatModel("fake-model", base_url=server.base_url, api_key="k")
        async with Agent(model, tools, store=store) as agent:
            events = [event async for event in agent.stream("What is 248 times 15?")]
    return events, server


@pytest.mark.parametrize("durable", [False, True], ids=["in-memory", "with-store"])
async def test_a_consumer_sees_typed_events_in_order_with_tool_argument_deltas(durable: bool, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db") if durable else None
    script = [tool_calls([("c1", "multiply", ARGS)]), text("248 × 15 = 3720")]
    events, server = await collect(script, [multiply], store)

    assert squash(events) == [
        "StepStarted",
        "ToolCallDelta",
        "CallValidated",
        "CallStarted",
        "CallFinished",
        "StepFinished",
        "StepStarted",
        "TextDelta",
        "StepFinished",
        "RunFinished",
    ]
    assert all(r["stream"] is True for r in server.requests)  # streamed for this run, whatever the adapter's default
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert len(deltas) >= 2 and "".join(d.arguments_delta for d in deltas) == ARGS
    assert (deltas[0].call_id, deltas[0].tool) == ("c1", "multiply")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "248 × 15 = 3720"
    validated = next(e for e in events if isinstance(e, CallValidated))
    finished = next(e for e in events if isinstance(e, CallFinished))
    assert (validated.tool, validated.arguments) == ("multiply", {"a": 248, "b": 15})
    assert (finished.call_id, finished.outcome, finished.arguments) == ("c1", "ok", {"a": 248, "b": 15})
    assert finished.duration >= 0
    steps = [e for e in events if isinstance(e, StepFinished)]
    assert [(s.step, s.finish_reason, s.usage.total_tokens) for s in steps] == [(1, "tool_calls", 15), (2, "stop", 15)]
    last = events[-1]
    assert isinstance(last, RunFinished) and last.result.status is Status.COMPLETED
    assert last.result.output == "248 × 15 = 3720"
    run_ids = {e.run_id for e in events}
    assert run_ids == {last.result.run_id}
    assert {e.model for e in events} == {"fake-model"}
    stamps = [e.at for e in events]
    assert stamps == sorted(stamps)
    assert [e.step for e in events if isinstance(e, StepStarted)] == [1, 2]


async def test_call_events_carry_redacted_arguments_and_refusals_their_code() -> None:
    script = [
        tool_calls([("c1", "sign_in", '{"user": "ann", "password": "hunter2"}'), ("c2", "multiply", '{"a": true}')]),
        text("done"),
    ]
    events, _ = await collect(script, [multiply, sign_in])

    started = next(e for e in events if isinstance(e, CallStarted))
    assert started.arguments == {"user": "ann", "password": "[redacted]"}
    refused = next(e for e in events if isinstance(e, CallRefused))
    assert (refused.call_id, refused.tool, refused.code) == ("c2", "multiply", "invalid_arguments")
    assert "expected integer, got boolean" in refused.message
    assert "hunter2" not in repr([e for e in events if not isinstance(e, ToolCallDelta | RunFinished)])


@pytest.mark.parametrize("durable", [False, True], ids=["in-memory", "with-store"])
async def test_a_raising_listener_is_reported_and_never_aborts_or_corrupts_the_run(
    durable: bool, tmp_path: Path
) -> None:
    executed: list[str] = []

    @tool
    def send(to: str) -> str:
        """Send a message (a side effect)."""
        executed.append(to)
        return "sent"

    def listener(event: RunEvent) -> None:
        if event.kind == CALL_EXECUTED:
            raise RuntimeError("listener bug")

    store = SQLiteStore(tmp_path / "runs.db") if durable else None
    async with FakeServer([tool_calls([("c1", "send", '{"to": "bob"}')]), text("sent it")]) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        async with Agent(model, [send], store=store) as agent:
            with pytest.warns(RuntimeWarning, match="on_event listener raised RuntimeError: listener bug"):
                result = await agent.run("send bob a note", on_event=listener)

    assert result.status is Status.COMPLETED
    assert result.output == "sent it"
    assert executed == ["bob"]
    assert result.listener_errors == 1
    tool_messages = [m for m in result.state.messages if m.role == "tool"]
    assert [json.loads(m.content or "")["ok"] for m in tool_messages] == [True]
    if store is not None:
        assert store.load(result.run_id).state.status is Status.COMPLETED


async def test_a_call_that_needs_approval_is_announced_before_the_run_pauses(tmp_path: Path) -> None:
    @tool(approval=True)
    def pay(amount: int, api_key: str) -> str:
        """Pay."""
        return "paid"

    script = [tool_calls([("c1", "pay", '{"amount": 5, "api_key": "sk-abcdefgh123"}')])]
    events, _ = await collect(script, [pay], SQLiteStore(tmp_path / "runs.db"))

    assert squash(events) == ["StepStarted", "ToolCallDelta", "ApprovalNeeded", "StepFinished", "RunFinished"]
    needed = events[-3]
    assert isinstance(needed, ApprovalNeeded)
    assert (needed.call_id, needed.tool, needed.arguments) == ("c1", "pay", {"amount": 5, "api_key": "[redacted]"})
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.result.status is Status.AWAITING_APPROVAL
