"""The kinds of event a run emits, in the order a step emits them, and what binds results to the log.

The runner emits them to listeners and, for durable runs, to the audit log;
``tether.drivers.local.durable`` writes the decisions made from outside a run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.core.envelope import outcome_code

if TYPE_CHECKING:
    from tether.core.machine import PendingCall


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One thing that happened in a run, as a driver reports it to listeners (``on_event``)."""

    kind: str
    run_id: str
    step: int  # the step it belongs to; 0 before the first model request
    data: dict[str, Any] = field(default_factory=dict)
    at: float = 0.0  # when it happened (the agent's clock), logged as is even when saved later


EventHandler = Callable[[RunEvent], None]

RUN_STARTED = "run_started"
STEP_STARTED = "step_started"
TEXT = "text"
MODEL_REPLIED = "model_replied"
CALL_VALIDATED = "call_validated"
CALL_REJECTED = "call_rejected"
INTENT_RECORDED = "intent_recorded"  # durable runs: the ledger holds the intent
CALL_EXECUTED = "call_executed"
OUTCOME_RECORDED = "outcome_recorded"  # durable runs: the ledger holds the outcome
CALL_RECOVERED = "call_recovered"  # durable runs: the outcome came from the ledger, not a new execution
APPROVAL_REQUESTED = "approval_requested"
APPROVAL_DECIDED = "approval_decided"
RECONCILIATION_NEEDED = "reconciliation_needed"
RECONCILED = "reconciled"
HANDOFF = "handoff"  # a transfer call ran: the agent it names has the floor from the next model request on
CHILD_RUN = "child_run"  # a call (a sub-agent) drives its child run: {"id": call id, "tool", "run": child run id}
RUN_RESUMED = "run_resumed"
RUN_PAUSED = "run_paused"
RUN_FINISHED = "run_finished"

# Delivered to listeners only, never written to the audit log: what is happening right now.
TOOL_CALL_DELTA = "tool_call_delta"  # a piece of a call's arguments as the model streams them
CALL_STARTED = "call_started"
CALL_FINISHED = "call_finished"  # with its duration; the audit log has call_executed
TRANSIENT = frozenset({TEXT, TOOL_CALL_DELTA, CALL_STARTED, CALL_FINISHED})


def digest(content: str) -> str:
    """The digest of a call's result that its audit event carries, binding the ledger row to the chain."""
    return hashlib.sha256(content.encode()).hexdigest()


def reconciled_event(call: PendingCall, executed: bool, result: str | None, by: str) -> dict[str, Any]:
    """The data of a ``reconciled`` event: what became of a call whose outcome was unknown, and who said so."""
    data: dict[str, Any] = {"id": call.call_id, "tool": call.tool, "executed": executed, "by": by}
    if result is not None:
        data["digest"] = digest(result)
    return data


def validated_event(call: PendingCall, provenance: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The data of a ``call_validated`` event: a call the gates let through, with its arguments (and provenance)."""
    data = {
        "id": call.call_id,
        "tool": call.tool,
        "read_only": call.read_only,
        "fingerprint": call.fingerprint,
        "arguments": call.arguments,
    }
    if provenance is not None:  # a call traced in a tainted run: where each sink value was found
        data["provenance"] = provenance
    return data


def intent_event(call: PendingCall, provenance: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The data of an ``intent_recorded`` event: the ledger row it writes (with the call's provenance, if traced)."""
    data: dict[str, Any] = {"id": call.call_id, "tool": call.tool, "fingerprint": call.fingerprint}
    if provenance is not None:
        data["provenance"] = provenance
    return data


def rejected_event(call_id: str, tool: str, content: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """The data of a ``call_rejected`` event: the refusal the model got, and the arguments it wrote (if an object)."""
    return {"id": call_id, "tool": tool, "outcome": outcome_code(content), "result": content, "arguments": arguments}


def outcome_event(call: PendingCall, content: str) -> dict[str, Any]:
    """The data of a ``call_executed`` or ``call_recovered`` event: the result, and its digest for the ledger."""
    return {
        "id": call.call_id,
        "tool": call.tool,
        "outcome": outcome_code(content),
        "result": content,
        "digest": digest(content),
    }
