"""The run store's contract: ``RunStore``, what the drivers, the CLI, the service and Temporal's activities use.

One implementation (``tether.store.sql.SQLStore``) serves both databases
through a dialect: SQLite for one machine, PostgreSQL for several. Code
that takes a store is typed ``RunStore``; ``open_store(url)`` picks the
dialect from the url.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, Protocol

from tether.core.errors import StoreError
from tether.core.machine import PendingCall, RunState
from tether.core.messages import Message
from tether.store.keys import ApiKey
from tether.store.records import (
    LedgerEntry,
    LogEvent,
    RunSummary,
    StoredConversation,
    StoredEvent,
    StoredRun,
    Turn,
)
from tether.tools.context import Principal

__all__ = ["RunStore"]


class RunStore(Protocol):
    """Runs, their transcripts, audit events, the execution ledger and conversations, durably.

    A run is checkpointed with every event; its row is sealed and its
    messages and events are hash-chained, so ``verify`` finds an edit made
    outside tether and ``load`` refuses such a run. One driver at a time
    holds a run (``acquire`` … ``release``).
    """

    path: Path | str  # where the store is, as shown to people (a file, or a url without its password)
    log_content: bool  # keep user and model text in audit events
    lease_seconds: float
    owner: str  # unique to this store instance: who holds a run's lease
    clock: Callable[[], float]
    remote: bool  # its calls wait on a network: a driver makes them on a thread, off the event loop

    def close(self) -> None:
        """Let go of every run this store holds and close its connections."""

    # --- runs and who drives them ---

    def create_run(
        self,
        state: RunState,
        principal: Principal,
        setup: dict[str, Any],
        *,
        turn: Turn | None = None,
        parent: str | None = None,
    ) -> None:
        """Register a new run; its row is written with its first checkpoint, in the same transaction.

        ``turn`` is (conversation id, turn number, messages inherited from
        earlier turns) for a conversation's turn: only the messages after
        those are stored with this run. ``parent`` names the run whose call
        started this one (a sub-agent's child run), sealed with the row. The
        setup records ``log_content``, so a resumed run is logged as it began.
        """

    def acquire(self, run_id: str, *, to_drive: bool = False) -> None:
        """Hold ``run_id`` for this store, or raise ``LeaseHeld`` while a live driver holds it (with
        ``to_drive``, also while another driver of this process drives it).

        A driver that died (killed, out of memory, its machine gone) holds
        nothing: the lock it had is released by the operating system or the
        database. A live driver that stopped renewing its lease loses the run
        once the lease expires.
        """

    def renew(self, run_id: str) -> None:
        """Extend this store's lease; a driver does so every third of the term for as long as it drives."""

    def release(self, run_id: str) -> None:
        """Let go of ``run_id`` (its lease and its lock)."""

    def checkpoint(
        self,
        state: RunState,
        events: Sequence[LogEvent] = (),
        outcomes: Sequence[tuple[PendingCall, str]] = (),
        *,
        intents: Sequence[PendingCall] = (),
        cleared: Sequence[str] = (),
        release: bool = False,
        durable: bool = False,
        sync: bool = True,
    ) -> None:
        """Save the state with its audit events and ledger writes, in one transaction.

        An event is ``(kind, data)``, logged at this step and time, or
        ``(kind, data, step, at)`` when it happened earlier (a driver batches
        the events of a step into one checkpoint). ``intents`` are
        side-effecting calls about to run: that transaction is on disk
        (fsynced) before this returns. ``outcomes`` are executed calls'
        results; ``cleared`` are call ids found never to have run.
        ``release`` lets go of the run in the same transaction. ``durable``
        fsyncs whatever the checkpoint holds (a service answering 202 for a
        new run). Raises ``LeaseHeld`` if another driver took the run,
        ``TamperedRun`` if its row was changed outside tether since the last
        checkpoint. ``sync=False`` returns once an intent is committed; the
        caller then awaits ``synced()`` before the effect (group commit).
        """

    async def synced(self) -> None:
        """Return once every commit this store made before the call is on disk; concurrent callers share
        one sync (group commit)."""

    # --- conversations ---

    def create_conversation(self, conversation_id: str, principal: Principal, budget: dict[str, Any]) -> None:
        """Record a new conversation, sealed, with no turns yet."""

    def load_conversation(self, conversation_id: str) -> StoredConversation:
        """A conversation with its turns' run ids (oldest first) and their usage totals, as stored (unchecked)."""
        ...

    def list_conversations(self, principal_id: str | None = None, limit: int = 50) -> list[StoredConversation]:
        """Conversations, newest first; only a principal's, when given."""
        ...

    def empty_conversations(self, principal_id: str, since: float) -> tuple[int, float | None]:
        """How many of ``principal_id``'s conversations made after ``since`` have no turn yet, and when the oldest
        of them was made (None: there is none); an index holds exactly those, so this reads no others."""
        ...

    def verify_conversation(self, conversation_id: str) -> list[str]:
        """Every break in what vouches for a conversation: its seal, the chain of its turns, each turn's row."""
        ...

    # --- reading ---

    def ledger_entry(self, run_id: str, call_id: str) -> LedgerEntry | None:
        """One call's ledger row, if it has one."""
        ...

    def load(self, run_id: str, *, check: bool = True) -> StoredRun:
        """The run as stored; with ``check`` (the default) only if it passes ``verify``, else ``TamperedRun``.

        Resume, approve, deny and reconcile act on what this returns, so they
        act only on rows the audit chain vouches for.
        """
        ...

    def resolve(self, prefix: str) -> str:
        """The id of the one run whose id starts with ``prefix`` (a whole id is its own prefix); when none
        does, of the one whose id ends with it (``MIN_SUFFIX`` characters or more: time-ordered ids share their
        first digits with the runs started around them and end in random ones).

        Raises ``RunNotFound`` when no run matches and ``AmbiguousRun``,
        naming the candidates, when several do.
        """
        ...

    def logged_prompts(self, run_ids: Collection[str]) -> dict[str, str]:
        """The first user message of each of these runs that logs content (``log_content``); others are left out."""
        ...

    def list_runs(
        self,
        principal_id: str | None = None,
        limit: int = 50,
        *,
        statuses: Collection[str] | None = None,
        oldest_update_first: bool = False,
        unleased: bool = False,
        before: tuple[float, str] | None = None,
        skipped: list[tuple[str, StoreError]] | None = None,
        context: str | None = None,
    ) -> list[RunSummary]:
        """Runs, newest first (or the least recently updated first); only a principal's, or only those in
        ``statuses``, when given; with ``unleased`` only those no live driver holds (a run another may take);
        with ``before`` (a listed run's ``(created_at, run_id)``) only those newest-first lists after it.

        A row the store's own writes could not have made (an edited one) is a ``StoreError`` naming its run;
        with ``skipped``, it is left out and ``(run id, error)`` appended there instead, so that one such row
        does not hide the others (a service taking over the runs a crash cut off, an approver's inbox).

        With ``context``, only the turns of the conversation of that id, or the run of that id if it is in
        none: what A2A calls a context, filtered before the limit so that a page is full."""
        ...

    def children(self, run_id: str) -> list[RunSummary]:
        """The child runs a run's calls started (sub-agents), oldest first."""
        ...

    def events(self, run_id: str, *, after: int = 0) -> list[StoredEvent]:
        """The run's audit events in order; only those numbered above ``after``, when given."""
        ...

    def ledger(self, run_id: str) -> list[LedgerEntry]:
        """The run's ledger rows, in the order their intents were recorded."""
        ...

    def verify(self, run_id: str) -> list[str]:
        """Every break in what vouches for the run (its seal, its hash chains, its ledger, its child runs and
        theirs, and, for a conversation's turn, the conversation and its earlier turns); empty when intact."""
        ...

    def messages(self, run_id: str, *, check: bool = True) -> list[Message]:
        """The messages this run stored (a conversation's turn: only those it added); with ``check`` (the default)
        only if the run's row passes its seal and the messages its chain, else ``TamperedRun``: a Temporal worker
        sends the model what this returns."""
        ...

    def counts(self, run_id: str) -> tuple[int, int]:
        """How many events and messages a run has stored."""
        ...

    # --- API keys (``tether keys``, ``tether serve --auth keys``) ---

    def create_api_key(
        self, principal: str, roles: Collection[str] = (), scopes: Collection[str] = ()
    ) -> tuple[str, str]:
        """Record a new API key acting for ``principal`` with these roles and scopes; its id and the key.

        The key (``tk_`` and 32 random bytes) is returned once and never
        stored: the store keeps its hash, in a row sealed as a run's is.
        A bad principal id, role or scope is a ``ConfigurationError``.
        """
        ...

    def api_key_principal(self, secret: str) -> Principal | None:
        """Who the key acts for; None for a key unknown, revoked, or whose row fails its seal (edited outside
        tether). Read afresh each time: a revocation holds at once, in every process."""
        ...

    def list_api_keys(self) -> list[ApiKey]:
        """Every API key, oldest first, without the key or its hash."""
        ...

    def revoke_api_key(self, key_id: str) -> bool:
        """Revoke a key at once; False when no key has this id or it was already revoked."""
        ...
