"""Decisions made about a stored run from outside it: approvals and reconciliations.

A person approves a paused call, or says what became of a call whose
outcome is unknown, possibly hours later and from another process. Each
operation takes the run's lease, applies one event to the state machine,
checkpoints with an audit event and lets go; ``tether resume`` (or
``Agent.resume``) then carries on.

A run that waits with a child run (a sub-agent's, ``waiting_on``) lists the
child's calls as its own; a decision given for the run about one of them is
recorded on the run that holds the call (the child, or a child of it), and
resuming the run resumes the child.

A child run lives only as its parent's call: cancelling a run cancels its
unfinished child runs, and a child whose parent has ended (cancelled
before this was so, or in a crash between the two) takes no decision and
does not go on alone (``ended_parent``); cancelling it is still allowed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from tether.core.errors import ApprovalMismatch, LeaseHeld, RunNotFound
from tether.core.events import APPROVAL_DECIDED, RECONCILED, RUN_FINISHED, reconciled_event
from tether.core.machine import ApprovalDecided, Cancel, PendingCall, Reconciled, Run, RunState, Status
from tether.drivers.local.subagents import MAX_DEPTH
from tether.store.base import RunStore
from tether.store.records import StoredRun
from tether.tools.tool import DEFAULT_MAX_RESULT_CHARS
from tether.tools.toolbox import Toolbox, result_envelope

MAX_REASON_CHARS = 1_000  # a person's reason for a decision: recorded, and read by the model with a denial
SHOWN_FINGERPRINT = 12  # characters of a fingerprint that ``tether runs show`` prints, and a decision may give


def ended_parent(store: RunStore, stored: StoredRun) -> str | None:
    """Why the child run ``stored`` must not act: its parent run has ended (None for a run with no parent, or whose
    parent is still there to take its result). Its approvals would otherwise still run its calls."""
    if stored.parent_id is None:
        return None
    try:
        parent = store.load(stored.parent_id, check=False).state
    except RunNotFound:
        return f"run {stored.state.run_id} is a child of run {stored.parent_id}, which is not in the store"
    if parent.status.terminal:
        return f"run {stored.state.run_id} is a child of run {stored.parent_id}, which is {parent.status.value}"
    return None


def top_run(store: RunStore, run_id: str) -> str:
    """The run at the top of ``run_id``'s tree (itself, for a run with no parent): the one to resume, which
    carries its child runs on. A parent that is not in the store ends the climb (``ended_parent`` says why)."""
    parent = store.load(run_id, check=False).parent_id
    for _ in range(MAX_DEPTH + 1):
        if parent is None:
            break
        try:
            above = store.load(parent, check=False).parent_id
        except RunNotFound:
            break
        run_id, parent = parent, above
    return run_id


def _open(store: RunStore, run_id: str, *, acting: bool = True) -> tuple[StoredRun, Run]:
    """The stored run, its lease held, and a machine to send it one event; ``acting``: refused for a child run whose
    parent has ended (``ended_parent``), as a decision there would still run a call."""
    store.acquire(run_id)
    try:
        stored = store.load(run_id)
        if acting and (why := ended_parent(store, stored)) is not None:
            raise ApprovalMismatch(f"{why}: it takes no decision and does not go on alone")
    except BaseException:
        store.release(run_id)
        raise
    if stored.setup.get("engine") == "temporal":  # its workflow decides; the store only records
        store.release(run_id)
        raise ApprovalMismatch(f"run {run_id} is driven by Temporal workers: send it with --temporal HOST:PORT")
    # Deciding needs no tools: the machine only consults them when judging a reply. Nor does it execute: the driver
    # that resumes the run traces a decided call's sink values again, with the run's instructions and parent.
    return stored, Run(stored.state, Toolbox([], stored.principal), executes=False)


def waiting_calls(store: RunStore, run_id: str, state: RunState | None = None) -> list[tuple[str, PendingCall]]:
    """The calls a run waits on a person for, each with the run it belongs to: its own (undecided, or of
    unknown outcome), then those of the child runs it waits with, and theirs (as stored, unchecked)."""
    return _waiting(store, run_id, state or store.load(run_id, check=False).state, 0)


def _waiting(store: RunStore, run_id: str, state: RunState, depth: int) -> list[tuple[str, PendingCall]]:
    found: list[tuple[str, PendingCall]] = []
    if state.status is Status.AWAITING_APPROVAL:
        found = [(run_id, p) for p in state.undecided()]
    elif state.status is Status.AWAITING_RECONCILIATION:
        found = [(run_id, p) for p in state.pending if p.call_id in state.unknown]
    if depth <= MAX_DEPTH:
        for child in state.waiting_on.values():
            with contextlib.suppress(RunNotFound):
                found += _waiting(store, child, store.load(child, check=False).state, depth + 1)
    return found


def holder(store: RunStore, run_id: str, call_id: str) -> str:
    """The run whose waiting call ``call_id`` is: ``run_id`` itself, or a child run it waits with that has it.

    The run's own waiting calls come first, then each child it waits with (and theirs), in call order. Only
    checked rows are followed, and only to a child that names the run as its parent. A run holding no such
    call is its own holder: the decision is then refused there, naming the run.
    """
    return _holding(store, run_id, call_id, 0) or run_id


def _holding(store: RunStore, run_id: str, call_id: str, depth: int) -> str | None:
    state = store.load(run_id, check=False).state
    if state.status is Status.AWAITING_APPROVAL and any(p.call_id == call_id for p in state.undecided()):
        return run_id
    if state.status is Status.AWAITING_RECONCILIATION and call_id in state.unknown:
        return run_id
    if depth > MAX_DEPTH or not state.waiting_on or store.verify(run_id):
        return None  # the children a run that fails its check names lead nowhere (``_open`` refuses it)
    for child in state.waiting_on.values():
        if store.load(child, check=False).parent_id == run_id and (found := _holding(store, child, call_id, depth + 1)):
            return found
    return None


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
    """Approve or deny one call of a run waiting in ``awaiting_approval`` (or of a child run it waits with).

    ``fingerprint``, when given, is the argument fingerprint the approver
    saw, whole or its first ``SHOWN_FINGERPRINT`` characters or more (as
    ``tether runs show`` prints it); a decision for other arguments is
    refused, and so is an empty one.
    """
    if fingerprint is not None and not fingerprint.strip():
        raise ApprovalMismatch("an empty fingerprint names no arguments: give the one you reviewed, or none")
    run_id = holder(store, run_id, call_id)
    _, run = _open(store, run_id)
    try:
        call = _pending(run, call_id, Status.AWAITING_APPROVAL)
        seen = fingerprint or call.fingerprint or ""
        if len(seen) >= SHOWN_FINGERPRINT and (call.fingerprint or "").startswith(seen):
            seen = call.fingerprint or ""  # the start a person read: 48 bits no model's arguments meet by chance
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

    An executed call's ``result`` is cut to its tool's ``max_result_chars`` as a result the tool returned is
    (``result_envelope``): the model reads it, and the store keeps it, no longer than that.

    The ledger (the outcome, or the intent cleared) is written in the same
    transaction as the state and the audit event. A call of a child run the run waits with is recorded there.
    """
    run_id = holder(store, run_id, call_id)
    _, run = _open(store, run_id)
    try:
        call = _pending(run, call_id, Status.AWAITING_RECONCILIATION)
        limit = run.state.result_limits.get(call.call_id, DEFAULT_MAX_RESULT_CHARS)
        content = result_envelope(result, limit) if executed else None
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


def cancel(
    store: RunStore, run_id: str, *, reason: str = "cancelled", by: str = "cli", clock: Callable[[], float] = time.time
) -> RunState:
    """End a stored run that no driver holds (one waiting for a person, or one cut off) as ``cancelled``, and the
    unfinished child runs (and theirs): a child left waiting would still run a call once approved.

    A run being driven is cancelled by its driver (``LeaseHeld`` here); a finished one is an ``ApprovalMismatch``.
    """
    _, run = _open(store, run_id, acting=False)
    try:
        if run.status.terminal:
            raise ApprovalMismatch(f"run {run_id} is {run.status.value}: there is nothing to cancel")
        run.send(Cancel(clock(), reason))
        finished = {"status": Status.CANCELLED.value, "output": None, "reason": reason, "by": by}
        store.checkpoint(run.state, [(RUN_FINISHED, finished)])
    finally:
        store.release(run_id)
    # Every unfinished child: one waiting for a person, and one cut off with its parent (``suspend``) that a
    # service would otherwise take over and drive alone. Best effort: a child this cannot end now (held, gone)
    # still acts no more, its parent having ended (``ended_parent``).
    for child in store.children(run_id):
        if not Status(child.status).terminal:
            with contextlib.suppress(RunNotFound, LeaseHeld, ApprovalMismatch):
                cancel(store, child.run_id, reason=f"its parent run {run_id} was cancelled", by=by, clock=clock)
    return run.state
