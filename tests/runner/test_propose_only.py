"""``Agent(propose_only=True)``: the first step's calls are judged by every gate and recorded, never executed."""

from __future__ import annotations

from typing import Any

from tether.core.events import CALL_REJECTED, CALL_VALIDATED, RunEvent
from tether.core.machine import Status
from tether.drivers.local.runner import PROPOSE_ONLY_REASON, Agent
from tether.models.openai_chat import OpenAIChatModel
from tether.store import SQLiteStore
from tether.testing.fake_server import FakeServer
from tether.testing.fake_server import tool_calls as wire_calls
from tether.tools import tool


async def test_the_calls_are_judged_and_recorded_but_nothing_runs(tmp_path: Any) -> None:
    ran: list[Any] = []

    @tool
    def transfer(amount: int) -> str:
        """Move money (a side effect)."""
        ran.append(amount)
        return "done"

    @tool(approval=True)
    def delete_all() -> str:
        """Needs approval."""
        ran.append("delete")
        return "gone"

    reply = wire_calls(
        [
            ("c1", "transfer", '{"amount": 5}'),
            ("c2", "transfer", '{"amount": "5"}'),
            ("c3", "nope", "{}"),
            ("c4", "transfer", "{bad"),
            ("c5", "delete_all", "{}"),
        ]
    )
    events: list[RunEvent] = []
    store = SQLiteStore(str(tmp_path / "runs.db"))
    async with FakeServer([reply]) as server:  # a second model request would get HTTP 500
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="x")
        agent = Agent(model, [transfer, delete_all], propose_only=True, store=store)
        result = await agent.run("pay", on_event=events.append)
        await agent.aclose()
        assert len(server.requests) == 1

    assert ran == []
    assert result.status is Status.CANCELLED and result.reason == PROPOSE_ONLY_REASON
    verdicts = {
        e.data["id"]: e.data.get("outcome", "accepted") for e in events if e.kind in (CALL_VALIDATED, CALL_REJECTED)
    }
    assert verdicts == {
        "c1": "accepted",
        "c2": "invalid_arguments",
        "c3": "unknown_tool",
        "c4": "invalid_json",
        "c5": "accepted",
    }
    # Every call still got its one tool message, and the stored run says the same.
    tool_messages = [m for m in result.state.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["c1", "c2", "c3", "c4", "c5"]
    assert store.load(result.run_id).state.status is Status.CANCELLED


async def test_a_text_answer_completes_as_usual() -> None:
    from tether.testing.fake_server import text

    async with FakeServer([text("no tool needed")]) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="x")
        result = await Agent(model, [], propose_only=True).run("hi")
        await model.aclose()
    assert result.status is Status.COMPLETED and result.output == "no tool needed"
