"""Start Temporal runs and decide their waiting calls, from any process that can reach the server.

    client = await connect("127.0.0.1:7233")
    handle = await start_run(client, "What is 248 times 15?", task_queue="tether")
    await decide(client, handle.id, "call_1", approved=True)
    result = await handle.result()

Decisions are workflow updates: the workflow's validator refuses a call id
that is not waiting or a fingerprint for other arguments before anything
enters the run's history, and the refusal arrives here as ``NotWaiting``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from tether.core.budget import RunConfig
from tether.core.errors import ApprovalMismatch
from tether.core.messages import Message
from tether.temporal.activities import principal_to_dict
from tether.temporal.workflow import WORKFLOW_NAME, Decision, Reconciliation
from tether.tools.context import LOCAL_PRINCIPAL, Principal


class NotWaiting(ApprovalMismatch):
    """The run has no such call waiting (refused by the workflow's update validator)."""


async def connect(address: str, namespace: str = "default") -> Client:
    return await Client.connect(address, namespace=namespace)


async def start_run(
    client: Client,
    prompt: str | Sequence[Message],
    *,
    task_queue: str,
    run_id: str | None = None,
    principal: Principal = LOCAL_PRINCIPAL,
    config: RunConfig | None = None,
    system: str | None = None,
    heartbeat_seconds: float | None = None,
) -> WorkflowHandle[Any, dict[str, Any]]:
    """Start a run as a workflow whose id is the run id; its result is the run's summary."""
    messages = [Message("user", prompt)] if isinstance(prompt, str) else list(prompt)
    if system is not None and not (messages and messages[0].role == "system"):
        messages.insert(0, Message("system", system))
    start = {
        "messages": [m.to_dict() for m in messages],
        "config": (config or RunConfig()).to_dict(),
        "principal": principal_to_dict(principal),
        "heartbeat_seconds": heartbeat_seconds,
    }
    return await client.start_workflow(
        WORKFLOW_NAME, start, id=run_id or uuid.uuid4().hex, task_queue=task_queue, result_type=dict
    )


async def pending(client: Client, run_id: str) -> list[dict[str, Any]]:
    """The run's calls waiting for a person (``waiting_for``: approval or reconciliation)."""
    calls: list[dict[str, Any]] = await client.get_workflow_handle(run_id).query("pending", result_type=list)
    return calls


async def status(client: Client, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = await client.get_workflow_handle(run_id).query("status", result_type=dict)
    return found


async def _update(client: Client, run_id: str, name: str, payload: Any) -> str:
    try:
        result: str = await client.get_workflow_handle(run_id).execute_update(name, payload, result_type=str)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
        raise NotWaiting(f"run {run_id}: {message}") from exc
    return result


async def decide(
    client: Client,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    reason: str | None = None,
    fingerprint: str | None = None,
) -> str:
    """Approve or deny a waiting call; the run's status after it.

    Without ``fingerprint`` the one of the call as it waits now is used
    (read with a query); with it, a decision for other arguments is refused.
    """
    if fingerprint is None:
        found = next((c for c in await pending(client, run_id) if c["call_id"] == call_id), None)
        if found is None:
            raise NotWaiting(f"run {run_id}: call {call_id} is not waiting for approval")
        fingerprint = found["fingerprint"] or ""
    return await _update(client, run_id, "decide", Decision(call_id, fingerprint, approved, reason))


async def reconcile(client: Client, run_id: str, call_id: str, *, executed: bool, result: str | None = None) -> str:
    """Say what became of a call whose outcome is unknown (``result``: JSON text); the run's status after it."""
    return await _update(client, run_id, "reconcile", Reconciliation(call_id, executed, result))
