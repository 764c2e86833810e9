"""The asyncio driver: the scripted model in-process, and OpenAIChatModel over real HTTP to FakeServer.

Timing is only used to tell "overlapped" from "one after the other" (intervals
recorded with perf_counter inside the tools), never to judge speed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tether.core.budget import Budget
from tether.core.errors import ConfigurationError
from tether.core.events import (
    APPROVAL_REQUESTED,
    CALL_EXECUTED,
    CALL_FINISHED,
    CALL_REJECTED,
    CALL_STARTED,
    CALL_VALIDATED,
    MODEL_REPLIED,
    RUN_FINISHED,
    RUN_STARTED,
    STEP_STARTED,
    TEXT,
    TOOL_CALL_DELTA,
    RunEvent,
)
from tether.core.machine import PendingCall, Status
from tether.core.messages import Message
from tether.core.report import RunResult
from tether.drivers.local.runner import Agent, Decision
from tether.models.openai_chat import OpenAIChatModel
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.store import SQLiteStore
from tether.testing.fake_server import FakeServer
from tether.testing.fake_server import text as wire_text
from tether.testing.fake_server import tool_calls as wire_calls
from tether.tools import Principal, Tool, ToolContext, tool
from tether.toolsets import load_toolset

Span = tuple[float, float]


def args(**kwargs: Any) -> str:
    return json.dumps(kwargs)


def envelope(content: str | None) -> dict[str, Any]:
    assert content is not None
    data: dict[str, Any] = json.loads(content)
    return data


def tool_messages(messages: Sequence[Message]) -> list[Message]:
    return [m for m in messages if m.role == "tool"]


def assert_transcript_consistent(messages: Sequence[Message]) -> None:
    """Every call of an assistant message gets exactly one tool message, right after it, in call order."""
    for i, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            ids = [c.id for c in message.tool_calls]
            following = messages[i + 1 : i + 1 + len(ids)]
            assert [m.role for m in following] == ["tool"] * len(ids)
            assert [m.tool_call_id for m in following] == ids
    asked = Counter(c.id for m in messages if m.role == "assistant" for c in m.tool_calls)
    answered = Counter(m.tool_call_id for m in messages if m.role == "tool")
    assert answered == asked
    assert all(n == 1 for n in answered.values())


def timed_tools(spans: dict[str, Span], finished: list[str]) -> list[Tool]:
    """A read-only and a side-effecting tool that record when they ran."""

    @tool(read_only=True)
    async def read(name: str, delay: float = 0.1) -> str:
        """Read slowly."""
        start = time.perf_counter()
        await asyncio.sleep(delay)
        spans[name] = (start, time.perf_counter())
        finished.append(name)
        return name

    @tool
    async def write(name: str, delay: float = 0.1) -> str:
        """Write slowly."""
        start = time.perf_counter()
        await asyncio.sleep(delay)
        spans[name] = (start, time.perf_counter())
        finished.append(name)
        return name

    return [read, write]


def kinds(events: Sequence[RunEvent]) -> list[str]:
    return [e.kind for e in events]


def outcomes(result: RunResult) -> list[tuple[str, str, bool]]:
    return [(c.id, c.outcome, c.executed) for step in result.steps for c in step.calls]


# --------------------------------------------------------------- concurrency


async def test_read_only_calls_of_one_reply_overlap_in_time() -> None:
    spans: dict[str, Span] = {}
    model = ScriptedModel(
        [
            reply_calls(*((f"c{i}", "read", args(name=n)) for i, n in enumerate("abc", 1))),
            reply_text("done"),
        ]
    )
    result = await Agent(model, timed_tools(spans, [])).run("go")

    assert result.status is Status.COMPLETED
    assert sorted(spans) == ["a", "b", "c"]
    latest_start = max(start for start, _ in spans.values())
    earliest_end = min(end for _, end in spans.values())
    assert latest_start < earliest_end, f"read-only calls ran one after another: {spans}"
    assert outcomes(result) == [("c1", "ok", True), ("c2", "ok", True), ("c3", "ok", True)]


async def test_side_effecting_calls_never_overlap_and_run_in_call_order() -> None:
    spans: dict[str, Span] = {}
    finished: list[str] = []
    model = ScriptedModel(
        [
            reply_calls(*((f"c{i}", "write", args(name=n)) for i, n in enumerate("abc", 1))),
            reply_text("done"),
        ]
    )
    result = await Agent(model, timed_tools(spans, finished)).run("go")

    assert result.status is Status.COMPLETED
    assert finished == ["a", "b", "c"]
    for earlier, later in [("a", "b"), ("b", "c")]:
        assert spans[earlier][1] <= spans[later][0], f"{later} started before {earlier} ended: {spans}"


async def test_a_read_never_crosses_a_write_in_a_mixed_reply() -> None:
    spans: dict[str, Span] = {}
    model = ScriptedModel(
        [
            reply_calls(
                ("c1", "read", args(name="r1")),
                ("c2", "write", args(name="w")),
                ("c3", "read", args(name="r2")),
            ),
            reply_text("done"),
        ]
    )
    result = await Agent(model, timed_tools(spans, [])).run("go")

    assert result.status is Status.COMPLETED
    assert spans["r1"][1] <= spans["w"][0], f"the write started before the earlier read ended: {spans}"
    assert spans["w"][1] <= spans["r2"][0], f"the later read started before the write ended: {spans}"


async def test_tool_messages_follow_call_order_not_completion_order() -> None:
    finished: list[str] = []
    model = ScriptedModel(
        [
            reply_calls(("c1", "read", args(name="slow", delay=0.4)), ("c2", "read", args(name="fast", delay=0.01))),
            reply_text("done"),
        ]
    )
    events: list[RunEvent] = []
    result = await Agent(model, timed_tools({}, finished)).run("go", on_event=events.append)

    assert finished == ["fast", "slow"]  # the premise: the second call completed first
    replies = tool_messages(result.state.messages)
    assert [m.tool_call_id for m in replies] == ["c1", "c2"]
    assert [envelope(m.content)["result"] for m in replies] == ["slow", "fast"]
    # The model's next request carries them in call order too.
    sent = model.requests[1].messages
    assert [m.tool_call_id for m in sent if m.role == "tool"] == ["c1", "c2"]
    assert [c.id for c in result.steps[0].calls] == ["c1", "c2"]
    # Events report completion as it happens.
    assert [e.data["id"] for e in events if e.kind == CALL_EXECUTED] == ["c2", "c1"]
    assert_transcript_consistent(result.state.messages)


# ---------------------------------------------------------- timeouts, budgets


async def test_per_tool_timeout_is_an_outcome_and_the_run_continues() -> None:
    @tool(read_only=True, timeout=0.2)
    async def stall_read() -> str:
        """Never answers in time."""
        await asyncio.sleep(30)
        return "late"

    @tool(timeout=0.2)
    async def stall_write() -> str:
        """Never answers in time either."""
        await asyncio.sleep(30)
        return "late"

    model = ScriptedModel(
        [reply_calls(("c1", "stall_read", "{}"), ("c2", "stall_write", "{}")), reply_text("gave up waiting")]
    )
    result = await Agent(model, [stall_read, stall_write]).run("go")

    assert result.status is Status.COMPLETED
    assert result.output == "gave up waiting"
    assert len(model.requests) == 2
    assert outcomes(result) == [("c1", "timeout", True), ("c2", "timeout", True)]
    read_reply, write_reply = (envelope(m.content) for m in tool_messages(result.state.messages))
    assert read_reply["error"]["code"] == "timeout"
    assert read_reply["error"]["retryable"] is True
    # A write that timed out may still take effect: the model must not be invited to repeat it.
    assert write_reply["error"]["code"] == "timeout"
    assert write_reply["error"]["retryable"] is False


async def test_deadline_passing_during_a_slow_model_request_ends_budget_exhausted() -> None:
    executed: list[str] = []

    @tool
    async def record(name: str) -> str:
        """Record that a call ran."""
        executed.append(name)
        return name

    script = [
        wire_calls([("c1", "record", args(name="first"))]),
        wire_calls([("c2", "record", args(name="second"))], latency=6.0),  # far past the deadline
        wire_text("never requested"),
    ]
    async with FakeServer(script) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="x")
        agent = Agent(model, [record], budget=Budget(deadline_seconds=1.5))
        try:
            result = await agent.run("go")
        finally:
            await agent.aclose()
        requests = len(server.requests)

    assert result.status is Status.BUDGET_EXHAUSTED
    assert result.reason is not None and "deadline" in result.reason
    assert result.output is None
    assert executed == ["first"]  # the call of the late reply never ran
    assert requests == 2  # and no model request after the deadline
    assert_transcript_consistent(result.state.messages)


# -------------------------------------------------------------- cancellation


async def test_cancelling_a_run_during_a_write_records_cancelled_and_answers_every_call() -> None:
    started = asyncio.Event()
    ran: list[str] = []

    @tool
    async def write(name: str) -> str:
        """A quick write."""
        ran.append(name)
        return name

    @tool
    async def slow_write(name: str) -> str:
        """A write that takes long."""
        started.set()
        await asyncio.sleep(30)
        ran.append(name)
        return name

    model = ScriptedModel(
        [
            reply_calls(
                ("c1", "write", args(name="a")),
                ("c2", "slow_write", args(name="b")),
                ("c3", "write", args(name="c")),
            ),
            reply_text("unreachable"),
        ]
    )
    events: list[RunEvent] = []
    driver = Agent(model, [write, slow_write]).driver("go", on_event=events.append)
    task = asyncio.create_task(driver.run())
    await asyncio.wait_for(started.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert driver.state.status is Status.CANCELLED
    assert ran == ["a"]  # the slow write was stopped, the one after it never started
    assert len(model.requests) == 1
    messages = driver.state.messages
    assert_transcript_consistent(messages)
    replies = {m.tool_call_id: envelope(m.content) for m in tool_messages(messages)}
    assert replies["c2"]["ok"] is False
    assert replies["c3"]["ok"] is False
    finished = [e for e in events if e.kind == RUN_FINISHED]
    assert len(finished) == 1
    assert finished[0].data["status"] == "cancelled"
    assert events[-1].kind == RUN_FINISHED


async def test_cancelling_keeps_the_result_of_a_call_that_already_finished() -> None:
    started = asyncio.Event()

    @tool
    async def write(name: str) -> str:
        """A quick write."""
        return name

    @tool
    async def slow_write(name: str) -> str:
        """A write that takes long."""
        started.set()
        await asyncio.sleep(30)
        return name

    model = ScriptedModel(
        [reply_calls(("c1", "write", args(name="a")), ("c2", "slow_write", args(name="b"))), reply_text("x")]
    )
    events: list[RunEvent] = []
    driver = Agent(model, [write, slow_write]).driver("go", on_event=events.append)
    task = asyncio.create_task(driver.run())
    await asyncio.wait_for(started.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    executed = [e for e in events if e.kind == CALL_EXECUTED]
    assert [(e.data["id"], e.data["outcome"]) for e in executed] == [("c1", "ok")]
    replies = {m.tool_call_id: envelope(m.content) for m in tool_messages(driver.state.messages)}
    assert replies["c1"] == {"ok": True, "result": "a"}


# -------------------------------------------------------------- event stream


async def test_event_kinds_of_a_two_step_run_over_http() -> None:
    script = [wire_calls([("c1", "multiply", args(a=6, b=7))]), wire_text("42")]
    events: list[RunEvent] = []
    async with FakeServer(script) as server:
        agent = Agent(OpenAIChatModel("fake", base_url=server.base_url, api_key="x"), load_toolset("calc"))
        try:
            result = await agent.run("What is 6 times 7?", on_event=events.append)
        finally:
            await agent.aclose()

    assert result.status is Status.COMPLETED
    assert kinds(events) == [
        RUN_STARTED,
        STEP_STARTED,
        MODEL_REPLIED,
        CALL_VALIDATED,
        CALL_STARTED,
        CALL_FINISHED,
        CALL_EXECUTED,
        STEP_STARTED,
        MODEL_REPLIED,
        RUN_FINISHED,
    ]
    assert [e.step for e in events] == [0, 1, 1, 1, 1, 1, 1, 2, 2, 2]  # run_started comes before step 1
    assert {e.run_id for e in events} == {result.run_id}
    by_kind = {e.kind: e.data for e in events if e.kind not in (RUN_STARTED, STEP_STARTED, MODEL_REPLIED)}
    assert by_kind[CALL_STARTED] == {"id": "c1", "tool": "multiply", "arguments": {"a": 6, "b": 7}}
    assert by_kind[CALL_FINISHED]["outcome"] == "ok" and by_kind[CALL_FINISHED]["duration"] >= 0
    validated = by_kind[CALL_VALIDATED]
    assert validated == {
        "id": "c1",
        "tool": "multiply",
        "read_only": True,
        "fingerprint": validated["fingerprint"],
        "arguments": {"a": 6, "b": 7},
    }
    assert len(validated["fingerprint"]) == 64  # the ledger row of a read-only call is checked against it
    assert by_kind[CALL_EXECUTED]["outcome"] == "ok"
    assert envelope(by_kind[CALL_EXECUTED]["result"]) == {"ok": True, "result": 42}
    assert by_kind[RUN_FINISHED] == {"status": "completed", "output": "42", "reason": None}
    replied = [e.data for e in events if e.kind == MODEL_REPLIED]
    assert [(d["finish_reason"], d["tool_calls"]) for d in replied] == [("tool_calls", 1), ("stop", 0)]


async def test_event_kinds_of_a_two_step_run_with_the_scripted_model() -> None:
    model = ScriptedModel([reply_calls(("c1", "multiply", args(a=6, b=7))), reply_text("42")])
    events: list[RunEvent] = []
    await Agent(model, load_toolset("calc")).run("go", on_event=events.append)

    assert [k for k in kinds(events) if k not in (TEXT, TOOL_CALL_DELTA)] == [
        RUN_STARTED,
        STEP_STARTED,
        MODEL_REPLIED,
        CALL_VALIDATED,
        CALL_STARTED,
        CALL_FINISHED,
        CALL_EXECUTED,
        STEP_STARTED,
        MODEL_REPLIED,
        RUN_FINISHED,
    ]


async def test_invalid_calls_are_call_rejected_and_never_executed() -> None:
    model = ScriptedModel(
        [
            reply_calls(
                ("c1", "multiply", args(a=2, b=3)),
                ("c2", "multiply", '{"a": true, "b": 15}'),
                ("c3", "multiply", '{"a": 2, "b":'),
            ),
            reply_text("fixed"),
        ]
    )
    events: list[RunEvent] = []
    result = await Agent(model, load_toolset("calc")).run("go", on_event=events.append)

    step_one = [(e.kind, e.data.get("id"), e.data.get("outcome")) for e in events if e.step == 1]
    assert (CALL_REJECTED, "c2", "invalid_arguments") in step_one
    assert (CALL_REJECTED, "c3", "invalid_json") in step_one
    assert (CALL_VALIDATED, "c1", None) in step_one
    assert (CALL_EXECUTED, "c1", "ok") in step_one
    executed_ids = {e.data["id"] for e in events if e.kind in (CALL_VALIDATED, CALL_EXECUTED)}
    assert executed_ids == {"c1"}
    rejected = [e for e in events if e.kind == CALL_REJECTED]
    assert envelope(rejected[0].data["result"])["error"]["code"] == "invalid_arguments"
    assert outcomes(result) == [
        ("c1", "ok", True),
        ("c2", "invalid_arguments", False),
        ("c3", "invalid_json", False),
    ]
    assert_transcript_consistent(result.state.messages)


async def test_streamed_text_arrives_as_text_events_over_http() -> None:
    answer = "248 × 15 = 3720, as the tool computed."
    script = [wire_calls([("c1", "multiply", args(a=248, b=15))]), wire_text(answer)]
    events: list[RunEvent] = []
    async with FakeServer(script) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="x", stream=True)
        agent = Agent(model, load_toolset("calc"))
        try:
            result = await agent.run("What is 248 times 15?", on_event=events.append)
        finally:
            await agent.aclose()
        streamed = [bool(r.get("stream")) for r in server.requests]

    assert streamed == [True, True]
    assert result.status is Status.COMPLETED
    assert result.output == answer
    assert outcomes(result) == [("c1", "ok", True)]
    pieces = [e for e in events if e.kind == TEXT]
    assert len(pieces) >= 2, "the fake server sends the content in several pieces"
    assert "".join(e.data["text"] for e in pieces) == answer
    assert {e.step for e in pieces} == {2}
    step_two = kinds([e for e in events if e.step == 2])
    first_text, last_text = step_two.index(TEXT), len(step_two) - 1 - step_two[::-1].index(TEXT)
    assert step_two.index(STEP_STARTED) < first_text
    assert last_text < step_two.index(MODEL_REPLIED)


# ------------------------------------------------------------------ results


async def test_run_result_to_dict_reports_steps_calls_and_summed_usage() -> None:
    model = ScriptedModel(
        [reply_calls(("c1", "multiply", args(a=6, b=7)), usage=(11, 4)), reply_text("42", usage=(20, 3))]
    )
    result = await Agent(model, load_toolset("calc")).run("go", run_id="run-42")
    data = result.to_dict()

    assert json.loads(json.dumps(data)) == data
    assert data["run_id"] == "run-42"
    assert data["status"] == "completed"
    assert data["output"] == "42"
    assert [s["step"] for s in data["steps"]] == [1, 2]
    assert data["steps"][0]["calls"] == [
        {"id": "c1", "tool": "multiply", "arguments": {"a": 6, "b": 7}, "outcome": "ok", "executed": True}
    ]
    assert data["steps"][1]["calls"] == []
    assert data["steps"][0]["usage"] == {"input_tokens": 11, "output_tokens": 4, "total_tokens": 15}
    assert data["usage"] == {"input_tokens": 31, "output_tokens": 7, "total_tokens": 38, "estimated": False}
    assert data["pending"] == []


async def test_calls_of_the_last_allowed_step_are_budget_exhausted_and_not_executed() -> None:
    finished: list[str] = []
    model = ScriptedModel(
        [
            reply_calls(("c1", "write", args(name="a"))),
            reply_calls(("c2", "write", args(name="b")), ("c3", "read", args(name="c"))),
        ]
    )
    result = await Agent(model, timed_tools({}, finished), budget=Budget(max_steps=2)).run("go")
    data = result.to_dict()

    assert data["status"] == "max_steps"
    assert data["output"] is None
    assert finished == ["a"]
    assert data["steps"][0]["calls"] == [
        {"id": "c1", "tool": "write", "arguments": {"name": "a"}, "outcome": "ok", "executed": True}
    ]
    assert data["steps"][1]["calls"] == [
        {"id": "c2", "tool": "write", "arguments": {"name": "b"}, "outcome": "budget_exhausted", "executed": False},
        {"id": "c3", "tool": "read", "arguments": {"name": "c"}, "outcome": "budget_exhausted", "executed": False},
    ]
    assert data["usage"]["total_tokens"] == 30
    assert_transcript_consistent(result.state.messages)


# ----------------------------------------------------------------- approval


def deploy_tool(deployed: list[str]) -> Tool:
    @tool(approval=True)
    async def deploy(env: str) -> str:
        """Deploy to an environment."""
        deployed.append(env)
        return f"deployed to {env}"

    return deploy


async def test_a_denied_call_is_not_executed_and_the_model_sees_the_reason() -> None:
    deployed: list[str] = []
    asked: list[PendingCall] = []

    async def approver(call: PendingCall) -> Decision:
        asked.append(call)
        return Decision(False, "no deploys on Friday")

    model = ScriptedModel([reply_calls(("c1", "deploy", args(env="prod"))), reply_text("not deployed")])
    events: list[RunEvent] = []
    result = await Agent(model, [deploy_tool(deployed)], approver=approver).run("ship", on_event=events.append)

    assert result.status is Status.COMPLETED
    assert deployed == []
    assert [(c.call_id, c.tool, c.arguments) for c in asked] == [("c1", "deploy", {"env": "prod"})]
    assert outcomes(result) == [("c1", "denied", False)]
    (reply,) = tool_messages(result.state.messages)
    error = envelope(reply.content)["error"]
    assert error["code"] == "denied"
    assert "no deploys on Friday" in error["message"]
    assert [k for k in kinds(events) if k in (APPROVAL_REQUESTED, CALL_REJECTED, CALL_EXECUTED)] == [
        APPROVAL_REQUESTED,
        CALL_REJECTED,
    ]


async def test_an_approved_call_is_executed() -> None:
    deployed: list[str] = []

    async def approver(call: PendingCall) -> Decision:
        return Decision(True)

    model = ScriptedModel([reply_calls(("c1", "deploy", args(env="staging"))), reply_text("deployed")])
    result = await Agent(model, [deploy_tool(deployed)], approver=approver).run("ship")

    assert result.status is Status.COMPLETED
    assert deployed == ["staging"]
    assert outcomes(result) == [("c1", "ok", True)]


@pytest.mark.parametrize(
    ("answer", "outcome", "ran"),
    [(True, "ok", ["staging"]), (False, "denied", []), (Decision(False, "not today"), "denied", [])],
    ids=["true", "false", "decision"],
)
async def test_a_plain_function_may_approve(answer: Any, outcome: str, ran: list[str]) -> None:
    deployed: list[str] = []
    model = ScriptedModel([reply_calls(("c1", "deploy", args(env="staging"))), reply_text("done")])
    result = await Agent(model, [deploy_tool(deployed)], approver=lambda call: answer).run("ship")

    assert result.status is Status.COMPLETED
    assert deployed == ran
    assert outcomes(result) == [("c1", outcome, outcome == "ok")]


async def test_an_approver_answering_something_else_is_refused_and_the_run_stays_paused(tmp_path: Path) -> None:
    deployed: list[str] = []
    model = ScriptedModel([reply_calls(("c1", "deploy", args(env="prod")))])
    store = SQLiteStore(tmp_path / "runs.db")
    agent = Agent(model, [deploy_tool(deployed)], approver=lambda call: "yes", store=store)  # type: ignore[arg-type, return-value]
    with pytest.raises(ConfigurationError, match="the approver returned str for call c1: return a Decision"):
        await agent.run("ship", run_id="r1")

    assert deployed == []
    assert store.load("r1").state.status is Status.AWAITING_APPROVAL  # nothing decided: approve it later


def test_an_approval_nobody_could_give_is_refused_when_the_agent_is_built(tmp_path: Path) -> None:
    @tool(approval=lambda arguments: arguments.get("env") == "prod")
    def deploy(env: str) -> str:
        """Deploy."""
        return env

    @tool(read_only=True, untrusted_output=True)
    def read_page(url: str) -> str:
        """Read a web page."""
        return url

    @tool
    def post(text: str) -> str:
        """Post a message."""
        return text

    model = ScriptedModel([])
    with pytest.raises(ConfigurationError, match="tool 'deploy' needs approval, but the Agent has neither"):
        Agent(model, [deploy])
    with pytest.raises(ConfigurationError, match="tool 'read_page' has untrusted output, so side-effecting calls"):
        Agent(model, [read_page, post])
    # Each way to decide is enough; so is nothing that could ever ask.
    Agent(model, [deploy], approver=lambda call: True)
    Agent(model, [deploy, read_page, post], store=SQLiteStore(tmp_path / "runs.db"))
    Agent(model, [deploy], propose_only=True)
    Agent(model, [read_page])  # untrusted text, but nothing it could lead to needs approval
    Agent(model, load_toolset("calc"))


async def test_without_an_approver_the_run_pauses_and_the_tool_never_runs(tmp_path: Path) -> None:
    deployed: list[str] = []
    model = ScriptedModel([reply_calls(("c1", "deploy", args(env="prod"))), reply_text("unreachable")])
    events: list[RunEvent] = []
    agent = Agent(model, [deploy_tool(deployed)], store=SQLiteStore(tmp_path / "runs.db"))
    result = await agent.run("ship", on_event=events.append)

    assert result.status is Status.AWAITING_APPROVAL
    assert result.state.status is Status.AWAITING_APPROVAL
    assert result.output is None
    assert deployed == []
    assert len(model.requests) == 1
    requested = [e.data for e in events if e.kind == APPROVAL_REQUESTED]
    assert requested == [
        {"id": "c1", "tool": "deploy", "arguments": {"env": "prod"}, "reason": "deploy requires approval"}
    ]
    assert not [e for e in events if e.kind in (CALL_EXECUTED, RUN_FINISHED)]


# ----------------------------------------------------------- who may do what


def scoped_tools(dropped: list[str]) -> list[Tool]:
    @tool(read_only=True)
    def whoami() -> str:
        """Say who the principal is."""
        return "u"

    @tool(scopes={"admin"})
    def drop_db() -> str:
        """Drop the database."""
        dropped.append("db")
        return "dropped"

    return [whoami, drop_db]


async def test_a_tool_outside_the_principals_scopes_is_not_offered_and_calling_it_is_unknown_tool() -> None:
    dropped: list[str] = []
    model = ScriptedModel([reply_calls(("c1", "drop_db", "{}")), reply_text("cannot")])
    user = Principal("u", scopes=frozenset({"user"}))
    result = await Agent(model, scoped_tools(dropped), principal=user).run("drop it")

    offered = [spec["function"]["name"] for spec in model.requests[0].tools]
    assert offered == ["whoami"]
    assert outcomes(result) == [("c1", "unknown_tool", False)]
    assert dropped == []


async def test_a_principal_holding_the_scope_is_offered_the_tool() -> None:
    dropped: list[str] = []
    model = ScriptedModel([reply_calls(("c1", "drop_db", "{}")), reply_text("done")])
    admin = Principal("a", scopes=frozenset({"admin"}))
    result = await Agent(model, scoped_tools(dropped), principal=admin).run("drop it")

    assert sorted(spec["function"]["name"] for spec in model.requests[0].tools) == ["drop_db", "whoami"]
    assert outcomes(result) == [("c1", "ok", True)]
    assert dropped == ["db"]


async def test_each_call_is_authorized_for_the_principal_as_it_is_when_the_call_runs() -> None:
    """Roles and scopes can change while a call waits (for an approval, say): the check is made again."""
    dropped: list[str] = []
    seen: list[Principal] = []

    @tool(read_only=True)
    def whoami(context: ToolContext) -> str:
        """Say who the principal is."""
        seen.append(context.principal)
        return context.principal.id

    admin = Principal("a", scopes=frozenset({"admin"}), roles=frozenset({"admin"}))
    demoted = Principal("a", scopes=frozenset({"user"}), roles=frozenset({"customer"}))
    now: dict[str, Principal | None] = {"a": admin}

    async def resolve(principal: Principal) -> Principal | None:
        return now[principal.id]

    def replies(request: Any) -> Any:
        now["a"] = demoted  # the principal changes after the calls were proposed, before they run
        return reply_calls(("c1", "drop_db", "{}"), ("c2", "whoami", "{}"))

    model = ScriptedModel([replies, reply_text("done")])
    events: list[RunEvent] = []
    tools = [*scoped_tools(dropped)[1:], whoami]
    result = await Agent(model, tools, principal=admin, resolve_principal=resolve).run(
        "drop it", on_event=events.append
    )

    assert outcomes(result) == [("c1", "forbidden", False), ("c2", "ok", True)]
    assert dropped == []
    assert seen == [demoted]  # the tool that may still run sees the principal as it is now
    rejected = [e.data for e in events if e.kind == CALL_REJECTED]
    assert [(d["id"], d["outcome"]) for d in rejected] == [("c1", "forbidden")]

    now["a"] = None  # the principal no longer exists: nothing runs for it
    model = ScriptedModel([reply_calls(("c3", "whoami", "{}")), reply_text("done")])
    result = await Agent(model, tools, principal=admin, resolve_principal=resolve).run("who am I")
    assert outcomes(result) == [("c3", "forbidden", False)]
    assert seen == [demoted]


# ------------------------------------------------------------------ failures


async def test_a_sync_side_effecting_tools_exception_is_tool_failed_without_its_message() -> None:
    attempts: list[int] = []

    @tool
    def charge(amount: int) -> str:
        """Charge a card."""
        attempts.append(amount)
        raise RuntimeError("card 4111-1111-1111-1111 declined; api_key=sk-live-SECRET")

    model = ScriptedModel([reply_calls(("c1", "charge", args(amount=5))), reply_text("failed")])
    result = await Agent(model, [charge]).run("pay")

    assert result.status is Status.COMPLETED
    assert attempts == [5]
    assert outcomes(result) == [("c1", "tool_failed", True)]
    (reply,) = tool_messages(result.state.messages)
    assert reply.content is not None
    error = envelope(reply.content)["error"]
    assert error["code"] == "tool_failed"
    for leaked in ("4111", "sk-live-SECRET", "declined", "Traceback"):
        assert leaked not in reply.content


# ---------------------------------------------------------- answer after success


async def test_answer_after_success_sends_tool_choice_none_for_the_step_after_a_successful_one() -> None:
    from tether.core.budget import Compat

    model = ScriptedModel(
        [
            reply_calls(("c1", "multiply", args(a=248, b=15))),
            reply_calls(("c2", "multiply", args(a=1, b="x"))),
            reply_text("3720"),
        ]
    )
    agent = Agent(model, load_toolset("calc"), compat=Compat(answer_after_success=True), tool_choice="auto")
    result = await agent.run("What is 248 times 15?")

    assert result.status is Status.COMPLETED
    # The policy's "none" wins over the agent's own choice only for the step after a successful one.
    assert [r.tool_choice for r in model.requests] == ["auto", "none", "auto"]
