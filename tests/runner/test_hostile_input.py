"""Deeply nested tool-call arguments from a model: a controlled error to the model, never a crash or a stranded run.

Each protocol, streamed and not, over real HTTP against the FakeServer, with
a real SQLite store: the call is answered ``invalid_json`` naming the limit
(``MAX_DEPTH``), the run goes on, its record verifies, and a run paused in
the same step is resumed (the step's refusal is reported again on resume).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether import Agent, Budget, Status, load_toolset, tool
from tether.core.nesting import MAX_DEPTH, MAX_REPLY_DEPTH
from tether.drivers.local.durable import decide
from tether.drivers.local.stream import CallRefused, RunFinished
from tether.models.anthropic import AnthropicModel
from tether.models.http import HTTPModel
from tether.models.openai_chat import OpenAIChatModel
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls

TOO_DEEP = {
    "code": "invalid_json",
    "message": f"arguments are nested more than {MAX_DEPTH} levels deep",
    "retryable": True,
}


def deep_arguments(levels: int) -> str:
    """A ``multiply`` call's arguments whose ``a`` is ``levels`` arrays deep (the object adds one more)."""
    return '{"a": ' + "[" * levels + "]" * levels + ', "b": 1}'


def model(protocol: str, server: FakeServer, stream: bool) -> HTTPModel:
    if protocol == "openai":
        return OpenAIChatModel("m", base_url=server.base_url, api_key="k", stream=stream, max_retries=0)
    return AnthropicModel("m", base_url=server.origin, api_key="k", stream=stream, max_retries=0)


def last_tool_result(server: FakeServer, protocol: str) -> dict[str, Any]:
    """The envelope of the last tool result the model was sent, in either dialect."""
    last = server.requests[-1]["messages"][-1]
    content = last["content"] if protocol == "openai" else last["content"][-1]["content"]
    envelope: dict[str, Any] = json.loads(content)
    return envelope


@pytest.mark.parametrize("levels", [MAX_DEPTH, 1_000, 100_000])
@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_deep_arguments_are_answered_invalid_json_and_the_run_goes_on(
    tmp_path: Path, protocol: str, stream: bool, levels: int
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    script = [tool_calls([("call_1", "multiply", deep_arguments(levels))]), text("I cannot.")]
    kinds: list[str] = []
    async with FakeServer(script) as server:
        async with Agent(model(protocol, server, stream), load_toolset("calc"), store=store) as agent:
            result = await agent.run("hi", on_event=lambda event: kinds.append(event.kind))
        requests = len(server.requests)

    if protocol == "anthropic" and not stream and levels + 4 > MAX_REPLY_DEPTH:
        # A non-streamed Messages reply holds the input as an object: past MAX_REPLY_DEPTH the body is refused.
        assert result.status is Status.MODEL_ERROR
        assert result.reason == f"ModelResponseError: response body is nested more than {MAX_REPLY_DEPTH} levels deep"
        assert requests == 1
    else:
        assert result.status is Status.COMPLETED, result.reason
        assert result.output == "I cannot."
        (call,) = result.steps[0].calls
        assert (call.outcome, call.executed, call.arguments) == ("invalid_json", False, None)
        assert last_tool_result(server, protocol) == {"ok": False, "error": TOO_DEEP}
        assert "call_rejected" in kinds
    assert store.verify(result.run_id) == []
    assert store.load(result.run_id).state.status is result.status


async def test_the_stream_of_a_run_reports_the_refusal() -> None:
    script = [tool_calls([("call_1", "multiply", deep_arguments(100_000))]), text("I cannot.")]
    async with FakeServer(script) as server, Agent(model("openai", server, True), load_toolset("calc")) as agent:
        events = [event async for event in agent.stream("hi")]

    refused = [e for e in events if isinstance(e, CallRefused)]
    assert [(e.call_id, e.code, e.arguments) for e in refused] == [("call_1", "invalid_json", None)]
    assert isinstance(events[-1], RunFinished) and events[-1].result.status is Status.COMPLETED


@tool(approval=True)
def wire(amount: int) -> str:
    """Send money (needs a person's approval)."""
    return f"sent {amount}"


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_run_paused_in_the_step_of_a_deep_call_resumes(tmp_path: Path, protocol: str) -> None:
    """The refusal is reported again when the step's tools run on resume: the deep text is read again then."""
    store = SQLiteStore(tmp_path / "runs.db")
    calls = [("call_1", "wire", '{"amount": ' + "[" * 5_000 + "]" * 5_000 + "}"), ("call_2", "wire", '{"amount": 7}')]
    async with FakeServer([tool_calls(calls), text("sent 7")]) as server:
        async with Agent(model(protocol, server, True), [wire], store=store) as agent:
            paused = await agent.run("send 7")
        assert paused.status is Status.AWAITING_APPROVAL, paused.reason
        decide(store, paused.run_id, "call_2", approved=True)

        async with Agent(model(protocol, server, True), [wire], store=SQLiteStore(tmp_path / "runs.db")) as agent:
            resumed = await agent.resume(paused.run_id).run()

    assert resumed.status is Status.COMPLETED, resumed.reason
    outcomes = {c.id: c.outcome for step in resumed.steps for c in step.calls}
    assert outcomes == {"call_1": "invalid_json", "call_2": "ok"}
    assert store.verify(paused.run_id) == []


async def test_a_deep_call_in_the_last_allowed_step_ends_the_run_max_steps(tmp_path: Path) -> None:
    """The step's calls are refused at the run's end, where the driver reports them with their arguments."""
    store = SQLiteStore(tmp_path / "runs.db")
    script = [tool_calls([("call_1", "multiply", deep_arguments(5_000))])]
    async with FakeServer(script) as server:
        agent = Agent(model("openai", server, False), load_toolset("calc"), store=store, budget=Budget(max_steps=1))
        async with agent:
            result = await agent.run("hi")

    assert result.status is Status.MAX_STEPS
    assert [(c.id, c.arguments) for c in result.steps[0].calls] == [("call_1", None)]
    assert store.verify(result.run_id) == []
