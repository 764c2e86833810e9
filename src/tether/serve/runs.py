"""A served Agent's runs: the run machinery (``tether.serve.service``) driving any Agent.

``AgentRuns`` is a ``RunService`` whose runs are the given Agent's, started
for the caller's ``Principal``. It keeps everything that service does:
a run is durable before the 202, runs are driven in the background and
taken over from their last checkpoint after a crash (by this process
after a restart, or by another sharing a PostgreSQL store), their events
are followed live or from the store, and on SIGTERM they are handed on.

The served copy of the Agent (``served``) records its runs in the
service's store and has no approver of its own: a call that needs
approval pauses its run durably until a decision comes over HTTP.

Who sees what (DESIGN.md §7): a run, a conversation and a call belong to
their principal; anyone else gets the 404 a missing id gets. A caller
holding ``APPROVER_ROLE`` also sees the calls waiting for a decision (they
are addressed to that role) and may decide them; deciding, or settling an
unknown outcome, needs that role. The principal's roles are checked again
when the call runs (the Agent's ``resolve_principal``, unchanged).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from tether.core.errors import ApprovalMismatch, ConfigurationError, RunNotFound
from tether.core.machine import PendingCall, RunState, Status
from tether.core.redact import redact
from tether.drivers.ids import new_id
from tether.drivers.local.durable import cancel, reconcile, top_run, waiting_calls
from tether.drivers.local.runner import Agent, Driver
from tether.serve.identity import APPROVER_ROLE
from tether.serve.problems import Problem
from tether.serve.service import Caller as Owner
from tether.serve.service import LiveRun, RunService, storable
from tether.serve.settings import Settings
from tether.store import LeaseHeld, RunStore, StoreError, TamperedRun
from tether.store.records import RunSummary, StoredRun
from tether.tools.context import Principal

log = logging.getLogger("tether.serve")

WAITING_FOR_A_PERSON = frozenset({Status.AWAITING_APPROVAL, Status.AWAITING_RECONCILIATION})
APPROVE = "approve"  # what an inbox item asks: POST /runs/{id}/approvals/{call_id}
RECONCILE = "reconcile"  # POST /runs/{id}/calls/{call_id}/reconcile


@dataclass(frozen=True, slots=True)
class Caller:
    """The principal a request acts as (``tether.serve.identity.Authenticator``)."""

    principal: Principal

    @property
    def id(self) -> str:
        return self.principal.id

    @property
    def username(self) -> str:
        return self.principal.id  # who decided, in the audit log

    @property
    def approves(self) -> bool:
        return APPROVER_ROLE in self.principal.roles


def served(agent: Agent, store: RunStore, surface: str) -> Agent:
    """A copy of ``agent`` that records its runs in ``store`` and pauses for every approval, its sub-agents' too
    (decided over HTTP)."""
    copied = copy.copy(agent)
    copied.store = store
    copied.approver = None
    copied.sub_approvers = False  # nor does a sub-agent's own approver decide: every approval is a person's
    copied.setup = {**agent.setup, "surface": surface}
    copied._toolboxes = dict(agent._toolboxes)  # per principal, filled as callers come
    return copied


class AgentRuns(RunService):
    """Starts, follows, lists, cancels and decides on the runs of one served Agent."""

    def __init__(self, settings: Settings, store: RunStore, agent: Agent) -> None:
        super().__init__(settings, store, agent.tools)
        # Runs of another surface sharing the store (another served agent, `tether run`) are never taken over here.
        self.surface = f"serve:{agent.name}"
        self.agent = served(agent, store, self.surface)
        self.model = agent.model  # closed with the service

    def _agent(self, principal: Principal) -> Agent:
        return self.agent

    # --- starting ------------------------------------------------------------------

    async def begin(self, caller: Caller, prompt: str, conversation_id: str | None = None) -> LiveRun:
        """Record a new run (or a conversation's next turn) and have it driven when a slot is free."""
        self.admit(caller.id)
        if conversation_id is None:
            return await self._begin(caller, prompt, None)
        if not storable(conversation_id):
            raise Problem(404, f"no conversation {conversation_id}")
        # One turn at a time: the next is read once this one is recorded (and is the 409 of a turn sent while the
        # last one runs), not recorded alongside it (a remote store's calls run on threads).
        async with self.one_at_a_time(conversation_id):
            return await self._begin(caller, prompt, conversation_id)

    async def _begin(self, caller: Caller, prompt: str, conversation_id: str | None) -> LiveRun:
        live = LiveRun(new_id(), caller.id)
        agent = self._agent_or_503(caller.principal)
        try:
            if conversation_id is None:
                driver = await self.io(
                    agent.driver, prompt, run_id=live.run_id, on_event=live.on_event, principal=caller.principal
                )
            else:
                driver = await self.io(self._turn, caller, conversation_id, prompt, live)
            live.driver = driver
            await self.io(self.store.checkpoint, driver.state, durable=True)  # on disk before the 202
        except RunNotFound:
            raise Problem(404, f"no conversation {conversation_id}") from None
        except TamperedRun:
            raise Problem(409, f"conversation {conversation_id} fails its audit check; no turn of it runs") from None
        except StoreError as exc:
            log.error("cannot record a new run: %s", exc)
            raise Problem(503, "the service cannot record runs now; the error is logged") from None
        self._launch(live, agent, lambda _: driver)
        return live

    def _turn(self, caller: Caller, conversation_id: str, text: str, live: LiveRun) -> Driver:
        try:
            conversation = self.agent.conversation(conversation_id, principal=caller.principal)
            turn = conversation.turn(text, run_id=live.run_id, on_event=live.on_event)
        except ConfigurationError as exc:  # its last turn has not finished, or it has had all its turns
            raise Problem(409, str(exc)) from None
        assert isinstance(turn, Driver)
        return turn

    # --- conversations -------------------------------------------------------------

    async def open_conversation(self, caller: Caller) -> str:
        """A new conversation of ``caller``'s, recorded (sealed, no turns yet); the 429 problem, and nothing
        recorded, when ``caller`` has as many empty conversations as ``Settings.max_empty_conversations_per_user``.

        A conversation has no "closed": it is *empty* until its first turn,
        and an empty one counts against its caller for
        ``Settings.empty_conversation_seconds`` after it was made. A turn
        costs a run, which the run limits hold; an empty conversation costs
        only its row, so this is what bounds the rows a caller can make for
        nothing. A caller at the limit sends a turn to one of them, or waits
        (``Retry-After``: until the oldest stops counting): a client that
        lost its ids is not shut out for good. Counted in the store, so the
        limit holds across restarts and across the processes sharing it
        (two of them recording at the same moment may each make one more).
        """
        # One request of this caller at a time counts and records here (a remote store's calls run on threads).
        # No run or conversation id holds NUL (``storable``): this lock is no request's run lock.
        async with self.one_at_a_time(f"\x00conversations of {caller.id}"):
            try:
                await self._room_for_a_conversation(caller)
                new = self.agent.conversation(principal=caller.principal)
                await self.io(self.store.create_conversation, new.id, caller.principal, new.budget.to_dict())
            except StoreError as exc:
                raise Problem(503, "the service cannot record conversations now; the error is logged") from exc
        return new.id

    async def _room_for_a_conversation(self, caller: Caller) -> None:
        """Nothing, if ``caller`` may have one more empty conversation; else the 429 problem (``open_conversation``)."""
        limit, window = self.settings.max_empty_conversations_per_user, self.settings.empty_conversation_seconds
        now = self.store.clock()
        empty, oldest = await self.io(self.store.empty_conversations, caller.id, now - window)
        if empty < limit or oldest is None:
            return
        wait = max(1, math.ceil(oldest + window - now))
        raise Problem(
            429,
            f"you have {empty} conversations with no turn yet, as many as you may: send a turn to one of them,"
            f" or try again once the oldest stops counting ({window:g} seconds after it was made)",
            headers={"Retry-After": str(wait)},
        )

    async def transcript(self, conversation_id: str, caller: Caller) -> dict[str, Any]:
        """The conversation's turns, each with its run, status and what the user and the agent said."""
        stored = None
        if storable(conversation_id):
            with contextlib.suppress(RunNotFound):
                stored = await self.io(self.store.load_conversation, conversation_id)
        if stored is None or stored.principal.id != caller.id:
            raise Problem(404, f"no conversation {conversation_id}")
        turns = []
        for run_id, status in stored.turns:
            try:  # read checked: what is shown as said is what the turn's chain vouches for
                messages = await self.io(self.store.messages, run_id)
            except TamperedRun:
                raise Problem(409, f"conversation {conversation_id} fails its audit check; it is not shown") from None
            said = [
                {"role": m.role, "content": m.content}
                for m in messages
                if m.role in ("user", "assistant") and m.content
            ]
            turns.append({"run_id": run_id, "status": status, "messages": said})
        return {
            "id": conversation_id,
            "created_at": stored.created_at,
            "updated_at": stored.updated_at,
            "usage": {"input_tokens": stored.usage[0], "output_tokens": stored.usage[1]},
            "turns": turns,
        }

    # --- reading -------------------------------------------------------------------

    async def page(
        self,
        caller: Caller,
        *,
        statuses: Collection[str] | None,
        limit: int,
        before: tuple[float, str] | None,
        context: str | None = None,
    ) -> tuple[list[dict[str, Any]], tuple[float, str] | None]:
        """One page of ``caller``'s runs, newest first (after ``before``), and where the next page starts; with
        ``context``, only that conversation's turns (or that run, in none)."""
        found = await self.io(
            self.listed,
            self.store,
            principal_id=caller.id,
            limit=limit + 1,
            statuses=statuses,
            before=before,
            context=context,
        )
        last = found[limit - 1] if len(found) > limit else None
        return [_summary(r) for r in found[:limit]], None if last is None else (last.created_at, last.run_id)

    def _ours(self, setup: Mapping[str, Any]) -> bool:
        """Whether a run tree whose top run was recorded with ``setup`` is this service's: started here, so driven
        by this agent. The store may be shared (by default the file `tether run` uses; PostgreSQL by several
        services): another program's run is never decided, settled or resumed here, with this agent's tools."""
        return setup.get("surface") == self.surface

    def _tree_is_ours(self, store: RunStore, stored: StoredRun) -> bool:
        """``_ours`` for the tree of ``stored`` (a child run has the setup of its own agent; its top run says)."""
        if stored.parent_id is not None:
            stored = store.load(top_run(store, stored.state.run_id), check=False)
        return self._ours(stored.setup)

    async def _visible(self, run_id: str, caller: Caller) -> StoredRun:
        """The run if ``caller`` may see it: its own, or (holding the approver role) one waiting for a person."""
        stored = await self._shown(run_id)
        if stored.principal.id == caller.id:
            return stored
        if caller.approves and (stored.state.status in WAITING_FOR_A_PERSON or stored.state.waiting_on):
            return stored
        raise Problem(404, f"no run {run_id}")

    # --- approvals -----------------------------------------------------------------

    async def inbox(self, caller: Caller, limit: int) -> list[dict[str, Any]]:
        """The calls waiting for a decision that ``caller`` sees, the longest waiting first, at most ``limit``."""
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(self.reads, self._read_inbox, caller, limit)
        return [a for a in found if a["run_id"] not in self.live]  # a live run is being resumed: decided

    def _read_inbox(self, caller: Caller, limit: int) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        owner = None if caller.approves else caller.id  # every call waiting for a person is addressed to the role
        waiting = {status.value for status in WAITING_FOR_A_PERSON}
        for summary in self.listed(self.reader, owner, limit=limit, statuses=waiting, oldest_update_first=True):
            stored = self.reader.load(summary.run_id, check=False)
            if not self._tree_is_ours(self.reader, stored):
                continue  # another program's: not decided here
            state = stored.state
            prompt = _prompt(state)
            for kind, call in waiting_for_a_person(state):
                found.append({**inbox_item(summary.run_id, call), "kind": kind, "prompt": prompt,
                              "owner": summary.principal, "requested_at": summary.updated_at,
                              "decidable": caller.approves})  # fmt: skip
            if len(found) >= limit:
                break
        return found[:limit]

    async def view(self, run_id: str, user: Owner) -> dict[str, Any]:
        """The run as ``RunService.view`` shows it, with the calls whose outcome a person must settle."""
        shown = await super().view(run_id, user)
        shown["unknown_outcomes"] = []
        if shown["status"] == Status.AWAITING_RECONCILIATION.value:
            state = (await self._owned(run_id, user)).state
            shown["unknown_outcomes"] = [
                inbox_item(run_id, c) for k, c in waiting_for_a_person(state) if k == RECONCILE
            ]
        return shown

    async def _approver_sees(self, run_id: str, caller: Caller, doing: str) -> StoredRun:
        """The run, when ``caller`` sees it (else the 404 a missing run gets), holds the approver role (else 403)
        and the run is this service's (``_ours``: else the 404, or for its owner the 409 saying where it goes on)."""
        stored = await self._visible(run_id, caller)
        if not caller.approves:
            raise Problem(403, f"{doing} needs the {APPROVER_ROLE!r} role")
        if not await self.io(self._tree_is_ours, self.store, stored):
            if stored.principal.id != caller.id:
                raise Problem(404, f"no run {run_id}")
            raise Problem(
                409,
                f"run {run_id} was not started by this service: it is decided where it was started"
                " (for a run of tether run: tether runs approve, tether runs reconcile)",
            )
        return stored

    async def decide_as(
        self, run_id: str, call_id: str, caller: Caller, *, approved: bool, reason: str | None, fingerprint: str | None
    ) -> dict[str, Any]:
        """Record ``caller``'s decision on a call, bound to its fingerprint; the run goes on once none waits."""
        await self._approver_sees(run_id, caller, "deciding on a call")
        return await self.decide(run_id, call_id, approved=approved, reason=reason, fingerprint=fingerprint, by=caller)

    async def reconcile_as(
        self, run_id: str, call_id: str, caller: Caller, *, executed: bool, result: Any
    ) -> dict[str, Any]:
        """Record what became of a call whose outcome is unknown; the run goes on once none waits."""
        stored = await self._approver_sees(run_id, caller, "settling a call's outcome")
        top = await self.io(top_run, self.store, run_id)
        async with self.one_at_a_time(top):  # as a decision: one request at a time settles and resumes the tree
            if run_id in self.live or top in self.live:
                raise Problem(409, f"run {run_id} is running; outcomes are settled while it waits for a person")
            try:
                call = await self.io(
                    reconcile, self.store, run_id, call_id, executed=executed, result=result, by=caller.username
                )
            except ApprovalMismatch as exc:
                raise Problem(409, str(exc)) from None
            except LeaseHeld:
                raise Problem(409, f"run {run_id} is being driven elsewhere; try again later") from None
            except TamperedRun:
                raise Problem(409, f"run {run_id} fails its audit check and is not acted on") from None
            resumed = await self._carry_on(run_id, stored.principal)
        return {"run_id": run_id, "call_id": call_id, "tool": call.tool, "executed": executed,
                "status": "running" if resumed else Status.AWAITING_RECONCILIATION.value}  # fmt: skip

    async def _carry_on(self, run_id: str, principal: Principal) -> bool:
        """Drive the run on here if nothing of it waits for a person any more; whether it goes on.

        A child run goes on with the run at the top of its tree, which carries it on (``top_run``).
        """
        run_id = await self.io(top_run, self.store, run_id)
        state = (await self.io(self.store.load, run_id)).state
        if state.status in WAITING_FOR_A_PERSON:
            return False
        if state.waiting_on:  # with child runs: it goes on (and carries them on) once none waits on a person
            waiting: list[tuple[str, PendingCall]] = await self.io(waiting_calls, self.store, run_id, state)
            if waiting:
                return False
        try:
            await self.io(self.store.acquire, run_id)  # before another process's scan can: this one drives it
        except LeaseHeld:
            return True  # another process took it first, and drives it
        self.resume(run_id, principal)
        return True

    # --- cancelling ----------------------------------------------------------------

    async def cancel_as(self, run_id: str, caller: Caller) -> dict[str, Any]:
        """Cancel one of ``caller``'s runs: the one driven here at once, one waiting (or cut off) in the store."""
        await self._owned(run_id, caller)
        async with self.one_at_a_time(run_id):  # not while a decision on it is being recorded and resumed
            return await self._cancel(run_id, caller)

    async def _cancel(self, run_id: str, caller: Caller) -> dict[str, Any]:
        live = self.live.get(run_id)
        if live is not None and live.task is not None:
            if live.driving:  # its driver records the cancellation, with the calls that did finish
                live.task.cancel()
                await asyncio.gather(live.task, return_exceptions=True)
                return await self.view(run_id, caller)
            live.task.cancel()  # waiting for a slot: never started; cancelled in the store below
            await asyncio.gather(live.task, return_exceptions=True)
        try:
            await self.io(cancel, self.store, run_id, by=caller.username)
        except ApprovalMismatch as exc:
            raise Problem(409, str(exc)) from None
        except LeaseHeld:
            raise Problem(409, f"run {run_id} is being driven by another process; try again later") from None
        except TamperedRun:
            raise Problem(409, f"run {run_id} fails its audit check and is not acted on") from None
        return await self.view(run_id, caller)


def waiting_for_a_person(state: RunState) -> list[tuple[str, PendingCall]]:
    """The run's own calls a person must decide (``APPROVE``) or whose outcome a person must settle (``RECONCILE``)."""
    if state.status is Status.AWAITING_APPROVAL:
        return [(APPROVE, call) for call in state.undecided()]
    if state.status is Status.AWAITING_RECONCILIATION:
        return [(RECONCILE, call) for call in state.pending if call.call_id in state.unknown]
    return []


def inbox_item(run_id: str, call: PendingCall) -> dict[str, Any]:
    """A call waiting for a decision as the inbox shows it: its arguments redacted, its fingerprint exact."""
    return {
        "run_id": run_id,
        "call_id": call.call_id,
        "tool": call.tool,
        "arguments": redact(call.arguments),
        "fingerprint": call.fingerprint,
        "reason": call.approval_reason,  # e.g. "the run read untrusted text from search_kb"
    }


def _prompt(state: RunState) -> str | None:
    """What the run was asked: its last user message (a conversation's turn holds the earlier turns' too)."""
    return next((m.content for m in reversed(state.messages) if m.role == "user" and isinstance(m.content, str)), None)


def _summary(r: RunSummary) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "status": r.status,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "steps": r.steps,
        "conversation_id": r.conversation_id,
        "turn": r.turn,
    }
