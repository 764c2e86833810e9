"""What a run did, step by step: the object `tether run --json` prints.

Arguments and answers appear as they are; whoever prints them redacts
(``tether.core.redact``), as the CLI does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.core.deferred import deferred
from tether.core.errors import RunFailed
from tether.core.history import MessageHistory
from tether.core.messages import Usage

if TYPE_CHECKING:
    from tether.core import machine
    from tether.core.machine import RunState, Status
else:
    # The state machine is needed once a run starts, not to build an agent (issue 19: the cost of the import).
    machine = deferred("tether.core.machine")


def usage_dict(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value)


def _untrusted(state: RunState) -> dict[str, str]:
    """The results of ``state``'s messages that taint; a run saved before they were listed: every result."""
    if state.untrusted or not state.tainted:
        return state.untrusted
    tool = state.tainted_by or "a tool"
    return {m.tool_call_id: tool for m in state.messages if m.role == "tool" and m.tool_call_id}


@dataclass(slots=True)
class CallReport:
    id: str
    tool: str
    executed: bool
    outcome: str = ""  # "ok", an error code, or "awaiting_approval" / "awaiting_reconciliation" in a paused run
    result: str = ""
    arguments: dict[str, Any] | None = None  # None when the model's arguments were not a JSON object

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool": self.tool,
            "arguments": self.arguments,
            "outcome": self.outcome,
            "executed": self.executed,
        }


@dataclass(slots=True)
class StepReport:
    step: int
    finish_reason: str | None = None
    content: str | None = None
    usage: Usage = field(default_factory=Usage)
    calls: list[CallReport] = field(default_factory=list)
    agent: str | None = None  # the agent that asked this step's model, in a run whose agent has handoffs

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "step": self.step,
            "finish_reason": self.finish_reason,
            "content": self.content,
            "usage": usage_dict(self.usage),
            "calls": [c.to_dict() for c in self.calls],
        }
        if self.agent is not None:
            data["agent"] = self.agent
        return data


@dataclass(slots=True)
class RunResult:
    """What a run returns: its status, its answer (``output``), why it stopped, and each step's report.

    ``output`` is the answer's text, or its typed value when the agent has an ``output_type``; it is
    None unless the run completed (or ended with a fallback answer). ``state`` is the run's full state.
    """

    run_id: str
    status: Status
    output: Any  # the answer's text, or its typed value with an output_type; None unless completed (or fallback)
    reason: str | None
    steps: list[StepReport]
    state: RunState
    listener_errors: int = 0  # how many times an on_event listener raised (the run went on)
    new_from: int = 0  # where this run's own messages start in ``state.messages`` (after a history it was given)
    # The name of the agent that had the floor when the run stopped: the one it started with, or the target of
    # its last handoff (``tether.drivers.local.handoffs``).
    last_agent: str | None = None
    # A run waiting with its child runs (sub-agents): the calls they wait on, each naming its run (``pending``).
    child_pending: list[dict[str, Any]] = field(default_factory=list)

    @property
    def usage(self) -> Usage:
        """The tokens the run used, over all its steps."""
        return self.state.usage

    @property
    def ok(self) -> bool:
        """Whether the run completed: only then is ``output`` an answer."""
        return self.status is machine.Status.COMPLETED

    def all_messages(self) -> MessageHistory:
        """Every message of the run's transcript, a history it was given included (``run(..., message_history=)``).

        Pass it as the next run's ``message_history`` to go on; its untrusted
        results stay untrusted there. The per-request instructions are not in it.
        """
        return MessageHistory(self.state.messages, _untrusted(self.state))

    def new_messages(self) -> MessageHistory:
        """The messages this run added: from its prompt (and a system message it put first) to its end."""
        return MessageHistory(self.state.messages[self.new_from :], _untrusted(self.state))

    def raise_for_status(self) -> RunResult:
        """This result if the run completed; else raise ``RunFailed`` naming the status and why."""
        if not self.ok:
            raise RunFailed(self)
        return self

    def pending(self) -> list[dict[str, Any]]:
        """The calls a paused run waits on a person for: an approval decision, or what became of them.

        A run waiting with a child run (a sub-agent) lists the child's calls, each with the ``run_id`` of the
        run it belongs to; deciding one through this run (``decide(store, run_id, call_id, ...)``) records it there.
        """
        state = self.state
        waiting = state.undecided() if self.status is machine.Status.AWAITING_APPROVAL else []
        if self.status is machine.Status.AWAITING_RECONCILIATION:
            waiting = [p for p in state.pending if p.call_id in state.unknown]
        own = [
            {"id": p.call_id, "tool": p.tool, "arguments": p.arguments, "fingerprint": p.fingerprint} for p in waiting
        ]
        return own + [dict(call) for call in self.child_pending]

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON data (what ``tether run --json`` prints)."""
        return {
            "run_id": self.run_id,
            "status": self.status.value,
            "output": self.output if self.output is None or isinstance(self.output, str) else _jsonable(self.output),
            "reason": self.reason,
            "steps": [s.to_dict() for s in self.steps],
            "pending": self.pending(),
            "usage": usage_dict(self.usage) | {"estimated": self.state.usage_estimated},
            **({"last_agent": self.last_agent} if self.state.agent is not None else {}),
        }
