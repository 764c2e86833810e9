"""Decisions made about a stored run from outside it: approvals and reconciliations.

A person approves a paused call, or says what became of a call whose
outcome is unknown, possibly hours later and from another process. Each
operation takes the run's lease, applies one event to the state machine,
checkpoints with an audit event and lets go; ``tether resume`` (or
``Agent.resume``) then carries on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tether.core import envelope
from tether.core.errors import ApprovalMismatch
from tether.core.events import APPROVAL_DECIDED, RECONCILED, reconciled_event
from tether.core.machine import ApprovalDecided, PendingCall, Reconciled, Run, Status
from tether.store.base import RunStore
from tether.store.records import StoredRun
from tether.tools.toolbox import Toolbox


def _open(store: RunStore, run_id: str) -> tuple[StoredRun, Run]:
    store.acquire(run_id)
    try:
        stored = store.load(run_id)
    except BaseException:
        store.release(run_id)
        raise
    if stored.setup.get("engine") == "temporal":  # its workflow decides; the store only records
        store.release(run_id)
        raise ApprovalMismatch(f"run {run_id} is driven by Temporal workers: send it with --temporal HOST:PORT")
    # Deciding needs no tools: the machine only consults them when judging a reply.
    return stored, Run(stored.state, Toolbox([], stored.principal))


def _pending(run: Run, call_id: str, status: Status) -> PendingCall:
    if run.status is not status:
        raise ApprovalMismatch(f"run {run.state.run_id} is {run.status.value}, not {status.value}")
    for call in run.state.pending:
        if call.call_id == call_id:
            return call
    raise ApprovalMismatch(f"run {run.state.run_id} has no pending call {call_id}")


def decide(
    store: RunStore,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    reason: str | None = None,
    by: str = "cli",
    fingerprint: str | None = None,
    clock: Callable[[], float] = time.time,
) -> PendingCall:
    """Approve or deny one call of a run waiting in ``awaiting_approval``.

    ``fingerprint``, when given, is the argument fingerprint the approver
    saw; a decision for other arguments is refused.
    """
    _, run = _open(store, run_id)
    try:
        call = _pending(run, call_id, Status.AWAITING_APPROVAL)
        seen = fingerprint or call.fingerprint or ""
        run.send(ApprovalDecided(call_id, seen, approved, clock(), reason))
        decision = {"id": call_id, "tool": call.tool, "approved": approved, "reason": reason, "by": by}
        store.checkpoint(run.state, [(APPROVAL_DECIDED, {**decision, "fingerprint": seen})])
        return call
    finally:
        store.release(run_id)


def reconcile(
    store: RunStore,
    run_id: str,
    call_id: str,
    *,
    executed: bool,
    result: Any = None,
    by: str = "cli",
    clock: Callable[[], float] = time.time,
) -> PendingCall:
    """Record what became of a call whose outcome was unknown.

    The ledger (the outcome, or the intent cleared) is written in the same
    transaction as the state and the audit event.
    """
    _, run = _open(store, run_id)
    try:
        call = _pending(run, call_id, Status.AWAITING_RECONCILIATION)
        content = envelope.ok(result) if executed else None
        run.send(Reconciled(call.call_id, executed, clock(), content))
        store.checkpoint(
            run.state,
            [(RECONCILED, reconciled_event(call, executed, content, by))],
            [(call, content)] if content is not None else (),
            cleared=() if executed else [call.call_id],
        )
        return call
    finally:
        store.release(run_id)
