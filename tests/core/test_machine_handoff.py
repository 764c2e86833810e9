"""The bare run state machine and transfers (``Accepted.handoff``, ``Run.hand_off``), driven by hand."""

from __future__ import annotations

import json
from dataclasses import replace

from tether.core import (
    Begin,
    Message,
    ModelReplied,
    ModelReply,
    Run,
    RunState,
    RunTools,
    Status,
    ToolsFinished,
    WireToolCall,
)
from tether.core.machine import Accepted, Rejected
from tether.core.messages import ToolCall
from tether.tools import Toolbox, tool


@tool(read_only=True)
def lookup(order: str) -> str:
    """Look an order up."""
    return order


@tool(read_only=True)
def to_billing() -> str:
    """Hand over to billing."""
    return "billing"


@tool(read_only=True)
def to_desk() -> str:
    """Hand over to the desk."""
    return "desk"


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return order


class Transfers:
    """A toolbox whose ``to_*`` tools are transfers, as ``tether.drivers.local.handoffs`` marks them."""

    def __init__(self, toolbox: Toolbox) -> None:
        self.toolbox = toolbox

    def check(self, call: ToolCall) -> Accepted | Rejected:
        verdict = self.toolbox.check(call)
        if isinstance(verdict, Accepted) and call.name.startswith("to_"):
            return replace(verdict, handoff=call.name[3:])
        return verdict


def calls(*named: tuple[str, str, str]) -> ModelReply:
    wire = tuple(WireToolCall(i, "function", n, a) for i, n, a in named)
    return ModelReply(choices=1, finish_reason="tool_calls", tool_calls=wire)


def test_only_the_first_transfer_of_a_reply_is_executed() -> None:
    run = Run.new("r", [Message("user", "hi")], Transfers(Toolbox([lookup, to_billing, to_desk])))
    run.send(Begin(0.0))
    reply = calls(("c1", "to_billing", "{}"), ("c2", "lookup", '{"order": "A1"}'), ("c3", "to_desk", "{}"))
    command = run.send(ModelReplied(reply, 1.0))
    assert isinstance(command, RunTools)
    assert [(p.call_id, p.execute) for p in command.calls] == [("c1", True), ("c2", True), ("c3", False)]
    refused = json.loads(command.calls[2].result or "")
    assert refused["error"] == {
        "code": "tool_failed",
        "message": "not executed: call c1 of this reply already transfers the run",
        "retryable": False,
    }
    assert run.state.failed_repairs == 0


def test_hand_off_judges_later_replies_against_the_targets_catalog_and_names_the_writer() -> None:
    run = Run.new("r", [Message("user", "hi")], Transfers(Toolbox([lookup, to_billing])))
    run.hand_off("triage", Transfers(Toolbox([lookup, to_billing])))
    run.send(Begin(0.0))
    command = run.send(ModelReplied(calls(("c1", "to_billing", "{}")), 1.0))
    assert isinstance(command, RunTools)
    run.hand_off("billing", Toolbox([refund]))
    run.send(ToolsFinished({"c1": '{"ok": true, "result": "billing"}'}, 2.0))
    command = run.send(ModelReplied(calls(("c2", "lookup", '{"order": "A1"}')), 3.0))
    assert isinstance(command, RunTools)
    assert json.loads(command.calls[0].result or "")["error"]["code"] == "unknown_tool"
    assert [m.agent for m in run.state.messages if m.role == "assistant"] == ["triage", "billing"]
    assert run.state.progress()["agent"] == "billing"
    assert RunState.from_dict(run.state.to_dict()).agent == "billing"
    assert run.status is Status.AWAITING_TOOLS
