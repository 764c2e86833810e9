"""The run store: one SQL implementation of ``RunStore``, over a dialect (SQLite or PostgreSQL).

What it keeps, and why each piece is shaped so:

- ``runs``: one row per run with the state *without* its growing parts
  (messages, executed calls). A checkpoint rewrites this small row and
  appends the rest, so a step costs the same at step 200 as at step 1.
- ``messages``: the transcript, append-only, each row hash-chained.
- ``events``: the audit log, append-only; each row holds the hash of the
  previous one, so ``verify`` finds any edited, removed or reordered row.
  Events are redacted and carry no user text unless ``log_content``.
- ``ledger``: one row per executed call. For a side-effecting call the
  intent is committed (and fsynced) *before* it runs and the outcome after;
  an intent without an outcome is an unknown outcome, never re-run blindly.
  Every ledger write shares its transaction with the event that logs it, so
  ``verify`` can replay the events and demand exactly the ledger they
  describe: a row removed, added or edited shows.
- The run's row is *sealed*: a digest of every column but the lease (the
  saved state, setup, principal, configuration and the heads of both
  chains). With ``TETHER_AUDIT_KEY`` the seal is an HMAC, so someone who can
  write the database but lacks the key cannot recompute a consistent
  forgery. ``load`` refuses a run that fails these checks: what resume
  executes comes only from checked rows.
- ``conversations``: a conversation's principal and budget, sealed, with
  the head of a chain over its turns (each turn is a run that stores only
  the messages it adds). A turn's run is checked together with its
  conversation and every earlier turn, so an edit anywhere in a
  conversation stops its next turn.
- Who drives a run: the platform's lock (``RunLocks``: a kernel file lock,
  or a PostgreSQL session advisory lock), which is released when its holder
  dies, and a lease (an owner id unique to this store instance and an
  expiry the driver renews) that says who for people and is the fallback
  when a live holder stops renewing. A pid decides nothing.

The SQL is written once, with ``?`` placeholders; the dialect translates
it, connects, and supplies the few words the databases spell differently.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.core.budget import RunConfig
from tether.core.errors import LeaseHeld, RunNotFound, StoreError, TamperedRun
from tether.core.events import CHILD_RUN
from tether.core.machine import PendingCall, RunState
from tether.core.messages import Message
from tether.store.audit import GENESIS, SEALED_COLUMNS, audit_key_from_env, seal, seal_problem
from tether.store.dialects import Dialect, Tx
from tether.store.keys import (
    KEY_SEALED,
    ApiKey,
    api_key,
    key_hash,
    key_principal,
    key_seal,
    key_seal_problem,
    names,
    new_key,
    principal_id,
    words_text,
)
from tether.store.records import (
    AMBIGUOUS_SHOWN,
    CONVERSATION_SEALED,
    DEFAULT_LEASE_SECONDS,
    MIN_SUFFIX,
    TURN_COLUMNS,
    LedgerEntry,
    LogEvent,
    RunSummary,
    StoredConversation,
    StoredEvent,
    StoredRun,
    Turn,
    ambiguous,
    audit_problems,
    canonical,
    chain_events,
    conversation,
    conversation_problems,
    conversation_seal,
    conversation_seal_problem,
    decode,
    first_row,
    inherited_messages,
    lease_conflict,
    ledger_provenance,
    message_rows,
    meta_text,
    principal_dict,
    registration,
    stored_run,
    summary,
    tampered,
    transcript_problems,
    turn_link,
    turn_problems,
)
from tether.tools.context import Principal

__all__ = ["MIGRATIONS", "Migration", "SQLStore"]

log = logging.getLogger("tether.store")

_RUN_HEAD = f"SELECT {', '.join(SEALED_COLUMNS)}, seal, lease_owner FROM runs WHERE id = ?"
_CONVERSATION = f"SELECT {', '.join(CONVERSATION_SEALED)}, seal FROM conversations WHERE id = ?"
_TURNS = f"SELECT {', '.join(TURN_COLUMNS)} FROM runs WHERE conversation_id = ? ORDER BY turn"
_KEY_ROW = f"SELECT id, {', '.join(KEY_SEALED)}, seal FROM api_keys"
_LEDGER_ROW = "SELECT call_id, tool, fingerprint, intent_at, outcome, outcome_at, provenance FROM ledger"
GROUP_WAIT = 0.001  # seconds a group commit waits for more intents, while other runs are being driven
_INSERT_RUN = (
    f"INSERT INTO runs (id, {', '.join(SEALED_COLUMNS)}, seal, lease_owner, lease_until, lease_locked)"
    f" VALUES ({', '.join('?' * (len(SEALED_COLUMNS) + 5))})"
)
_UPDATE_RUN = (
    "UPDATE runs SET updated_at = ?, status = ?, meta = ?, message_count = ?, message_hash = ?,"
    " event_count = ?, event_hash = ?, seal = ?, lease_owner = ?, lease_until = ?"
)


ROWS_PER_INSERT = 100  # within SQLite's oldest limit of 999 parameters a statement, for the widest table (8 columns)


@functools.lru_cache(maxsize=64)
def _values(table: str, width: int, count: int) -> str:
    row = f"({', '.join('?' * width)})"
    return f"INSERT INTO {table} VALUES {', '.join([row] * count)}"


def _insert(tx: Tx, table: str, rows: Sequence[Sequence[Any]]) -> None:
    """``rows`` into ``table``, in as few statements as there are ``ROWS_PER_INSERT`` rows (one, for a step): a
    statement is a round trip to a database server, where ``executemany`` would make one per row."""
    for start in range(0, len(rows), ROWS_PER_INSERT):
        chunk = rows[start : start + ROWS_PER_INSERT]
        tx.execute(_values(table, len(chunk[0]), len(chunk)), [value for row in chunk for value in row])


# --- migrations: one ordered history for both dialects, each step applied once and recorded ----------


@dataclass(frozen=True, slots=True)
class Migration:
    """One step: SQL with the dialect's ``{tokens}`` (statements split on ``;``), or a function."""

    name: str
    sql: str = ""
    apply: Callable[[SQLStore, Tx], None] | None = None


def _run_config(store: SQLStore, tx: Tx) -> None:
    # The earliest stores kept the run's configuration inside its state; it has had a column of its own since.
    if "config" not in store.dialect.columns(tx, "runs"):
        default = canonical(RunConfig().to_dict()).replace("'", "''")
        tx.execute(f"ALTER TABLE runs ADD COLUMN config TEXT NOT NULL DEFAULT '{default}'")


def _seal_conversations(store: SQLStore, tx: Tx) -> None:
    """Seal the conversations recorded before they had seals, each only if its turns vouch for it.

    A turn's run row was sealed (with its principal, turn number and the
    messages it inherits) from the start; a conversation whose turns all pass
    their seals, number 1, 2, … and act for its principal gets the chain of
    those turns and a seal. Any other is left unsealed, and so fails ``verify``.
    """
    # The turns as they were then: runs had no parent column yet (m8), and no turn is a child run.
    columns = ", ".join(c for c in TURN_COLUMNS if c != "parent_id")
    for conversation_id, *row in tx.execute(f"SELECT id, {', '.join(CONVERSATION_SEALED)} FROM conversations"):
        rows = tx.execute(f"SELECT {columns} FROM runs WHERE conversation_id = ? ORDER BY turn", (conversation_id,))
        turns = [(*turn[:-1], None, turn[-1]) for turn in rows.fetchall()]
        problems, head = turn_problems(store.audit_key, row[2], turns)
        if problems or not turns:
            continue  # nothing vouches for its principal
        values = (*row[:4], len(turns), head)
        tx.execute(
            "UPDATE conversations SET turn_count = ?, turn_hash = ?, seal = ? WHERE id = ?",
            (len(turns), head, conversation_seal(store.audit_key, conversation_id, values), conversation_id),
        )


MIGRATIONS: list[Migration] = [
    Migration(
        "m1_initial",
        """
        CREATE TABLE runs (
            id {id} PRIMARY KEY,
            created_at {real} NOT NULL,
            updated_at {real} NOT NULL,
            status TEXT NOT NULL,
            principal TEXT NOT NULL,
            setup TEXT NOT NULL,
            config TEXT NOT NULL,
            meta TEXT NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            message_hash TEXT NOT NULL,
            event_count INTEGER NOT NULL DEFAULT 0,
            event_hash TEXT NOT NULL,
            lease_owner TEXT,
            lease_until {real}
        );
        CREATE INDEX runs_by_principal ON runs ({principal_id}, created_at);
        CREATE TABLE messages (
            run_id {id} NOT NULL REFERENCES runs(id),
            seq INTEGER NOT NULL,
            body TEXT NOT NULL,
            hash TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        ){without_rowid};
        CREATE TABLE events (
            run_id {id} NOT NULL REFERENCES runs(id),
            seq INTEGER NOT NULL,
            at {real} NOT NULL,
            kind TEXT NOT NULL,
            step INTEGER NOT NULL,
            data TEXT NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        ){without_rowid};
        CREATE TABLE ledger (
            run_id {id} NOT NULL REFERENCES runs(id),
            call_id TEXT NOT NULL,
            tool TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            intent_at {real} NOT NULL,
            outcome TEXT,
            outcome_at {real},
            PRIMARY KEY (run_id, call_id)
        ){without_rowid}
        """,
    ),
    Migration("m2_run_config", apply=_run_config),
    # Runs recorded before seals have none, and fail verification (and so are not resumed).
    Migration("m3_run_seal", "ALTER TABLE runs ADD COLUMN seal TEXT"),
    # Recovery and the approvals queue list runs by status, the longest waiting first.
    Migration("m4_runs_by_status", "CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, updated_at)"),
    # A conversation's turns are runs. A turn's run stores only the messages it adds: the ones it
    # inherits (``history`` of them) are the earlier turns' rows, so a turn never rewrites them.
    Migration(
        "m5_conversations",
        """
        CREATE TABLE conversations (
            id {id} PRIMARY KEY,
            created_at {real} NOT NULL,
            updated_at {real} NOT NULL,
            principal TEXT NOT NULL,
            budget TEXT NOT NULL
        );
        ALTER TABLE runs ADD COLUMN conversation_id {id} REFERENCES conversations(id);
        ALTER TABLE runs ADD COLUMN turn INTEGER;
        ALTER TABLE runs ADD COLUMN history INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX runs_by_conversation ON runs (conversation_id, turn)
        """,
    ),
    Migration(
        "m6_conversation_seals",
        f"""
        ALTER TABLE conversations ADD COLUMN turn_count INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE conversations ADD COLUMN turn_hash TEXT NOT NULL DEFAULT '{GENESIS}';
        ALTER TABLE conversations ADD COLUMN seal TEXT
        """,
        apply=_seal_conversations,
    ),
    # 1: the lease's owner holds the platform's lock on the run, so the lock, once free, frees the run.
    # 0: it does not (it took the run when a stuck holder's lease expired, or it is a tether from before
    # run locks): its lease alone says, until it expires.
    Migration("m7_lease_locked", "ALTER TABLE runs ADD COLUMN lease_locked INTEGER NOT NULL DEFAULT 0"),
    # A sub-agent's child run names the run whose call started it; sealed with it (``audit.seal``), and
    # null (sealed as before) for every other run.
    Migration(
        "m8_child_runs",
        """
        ALTER TABLE runs ADD COLUMN parent_id {id} REFERENCES runs(id);
        CREATE INDEX runs_by_parent ON runs (parent_id)
        """,
    ),
    # API keys for ``tether serve``: only the key's hash is kept, and the row is sealed (``tether.store.keys``).
    Migration(
        "m9_api_keys",
        """
        CREATE TABLE api_keys (
            id {id} PRIMARY KEY,
            hash TEXT NOT NULL UNIQUE,
            principal TEXT NOT NULL,
            roles TEXT NOT NULL,
            scopes TEXT NOT NULL,
            created_at {real} NOT NULL,
            revoked_at {real},
            seal TEXT NOT NULL
        )
        """,
    ),
    # A side effect traced in a tainted run records where each sink value was found (``core.provenance``) with
    # its intent, as its ``intent_recorded`` event does; null for every other intent, as before.
    Migration("m10_ledger_provenance", "ALTER TABLE ledger ADD COLUMN provenance TEXT"),
    # A service counts a caller's conversations with no turn yet before it records another
    # (``empty_conversations``): only those are in the index, so the count never reads the others.
    Migration(
        "m11_empty_conversations",
        "CREATE INDEX conversations_empty ON conversations ({principal_id}, created_at) WHERE turn_count = 0",
    ),
]

# PostgreSQL databases made before the histories were merged recorded two steps of their own; they hold
# exactly the first five of the merged history.
_LEGACY_POSTGRES = ((1, "m1_initial"), (2, "m2_conversations"))


class SQLStore:
    """Runs, their transcripts, audit events, the execution ledger and conversations (``RunStore``).

    Example::

        store = open_store()                        # ~/.local/share/tether/tether.db
        agent = Agent(model, tools, store=store)
        result = await agent.run("...")             # checkpointed after every event

    Made by ``open_store(url)``, ``SQLiteStore(path)`` or ``PostgresStore(url)``.
    ``audit_key`` (default ``$TETHER_AUDIT_KEY``) makes the seals HMACs.
    ``durable_intents=False`` commits intents like everything else, without
    an fsync; it exists only to measure what the fsync costs (``bench/durable.py``).
    """

    def __init__(
        self,
        dialect: Dialect,
        *,
        log_content: bool = False,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Callable[[], float] = time.time,
        audit_key: str | None = None,
        durable_intents: bool = True,
    ) -> None:
        """A store on ``dialect``'s open database, migrated to the current schema (the store closes it)."""
        self.dialect = dialect
        self.path: Path | str = dialect.where
        self.remote = dialect.remote
        self.log_content = log_content
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.audit_key = audit_key or audit_key_from_env()
        self.durable_intents = durable_intents
        # Unique to this instance; host and pid are there for people to read, never to decide on.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        try:
            self._migrate()
        except dialect.errors as exc:
            dialect.close()
            raise StoreError(f"cannot open the run store at {self.path}: {exc} (set TETHER_DB or --db)") from None
        self._new: dict[str, tuple[str, str, str]] = {}  # runs registered but not yet written
        self._turns: dict[str, Turn] = {}  # new runs that are turns: conversation, turn, history
        self._parents: dict[str, str] = {}  # new runs that are child runs: their parent's id
        # Group commit (``synced``): commits made, commits known to be on disk, the one sync in flight.
        self._commits = 0
        self._on_disk = 0
        self._counting = threading.Lock()
        self._syncing: asyncio.Future[None] | None = None
        self.syncs = 0  # disk syncs made for group commits (what bench/overhead.py reports per run)
        # Runs this store holds: their row's sealed columns and seal as it last wrote them (``_save``).
        self._heads: dict[str, tuple[dict[str, Any], str]] = {}
        # Runs a driver of this process drives (``acquire(to_drive=True)``, a new run's first checkpoint) until it
        # lets go: the lease is this store's, so a second driver here would pass it; this set refuses it.
        self._driven: set[str] = set()
        same = self.dialect.tokens["same"]
        self._update_known = (
            _UPDATE_RUN
            + " WHERE id = ? AND lease_owner = ? AND seal = ? AND "
            + " AND ".join(f"{c} {same} ?" for c in SEALED_COLUMNS)
        )

    def close(self) -> None:
        """Let go of every run this store holds and close its connections."""
        self.dialect.close()

    @contextmanager
    def _mapped(self, opened: AbstractContextManager[Tx]) -> Iterator[Tx]:
        """``opened``, with the driver's errors as ``StoreError`` naming the store."""
        try:
            with opened as tx:
                yield tx
        except self.dialect.errors as exc:
            raise StoreError(f"run store {self.path}: {exc}") from None

    def _write(self, *, durable: bool = False) -> AbstractContextManager[Tx]:
        return self._mapped(self.dialect.write(durable=durable))

    def _read(self, *, snapshot: bool = False) -> AbstractContextManager[Tx]:
        return self._mapped(self.dialect.read(snapshot=snapshot))

    def _migrate(self) -> None:
        tokens = self.dialect.tokens
        with self.dialect.write() as tx:
            self.dialect.lock_migrations(tx)
            tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations"
                f" (version INTEGER PRIMARY KEY, name TEXT, applied_at {tokens['real']})"
            )
            recorded = tx.execute("SELECT version, name, applied_at FROM schema_migrations ORDER BY version").fetchall()
            if tuple((v, n) for v, n, _ in recorded) == _LEGACY_POSTGRES:
                tx.execute("DELETE FROM schema_migrations")
                for version, step in enumerate(MIGRATIONS[:5], start=1):
                    tx.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (version, step.name, recorded[-1][2]))
                recorded = [(v, "", 0.0) for v in range(1, 6)]
            done = {row[0] for row in recorded}
            for version, step in enumerate(MIGRATIONS, start=1):
                if version in done:
                    continue
                for statement in step.sql.format(**tokens).split(";"):
                    if statement.strip():
                        tx.execute(statement)
                if step.apply is not None:
                    step.apply(self, tx)
                tx.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (version, step.name, self.clock()))

    # --- runs, locks and leases -----------------------------------------------------

    def create_run(
        self,
        state: RunState,
        principal: Principal,
        setup: dict[str, Any],
        *,
        turn: Turn | None = None,
        parent: str | None = None,
    ) -> None:
        """Register a new run; its row is written with its first checkpoint (``RunStore.create_run``)."""
        if turn is not None:
            self._turns[state.run_id] = turn
        if parent is not None:
            self._parents[state.run_id] = parent
        self._new[state.run_id] = registration(state, principal, setup, self.log_content)

    def _first_head(self, state: RunState, now: float) -> dict[str, Any]:
        """A new run's sealed columns before its first checkpoint, its platform lock taken."""
        run_id = state.run_id
        if not self.dialect.locks.try_lock(run_id):
            raise LeaseHeld(f"run {run_id} is being driven by another process")
        self._driven.add(run_id)
        row = first_row(state, self._new[run_id], now, self._turns.get(run_id), self._parents.get(run_id))
        return dict(zip(SEALED_COLUMNS, row, strict=True))

    def acquire(self, run_id: str, *, to_drive: bool = False) -> None:
        """Hold ``run_id`` for this store, or raise ``LeaseHeld`` while a live driver holds it.

        ``to_drive``: for a driver, which is alone in driving the run until it lets go (``release``, or a
        checkpoint that releases): a second one in this process is refused too, though the lease is this store's.

        The platform's lock decides first: free, its holder is dead (or let
        go), and the run is taken at once, whatever the lease says; held, a
        live driver has it, and the run is taken only once that driver's
        lease has expired (it stopped renewing: stuck), by lease alone. A run
        taken so is not freed by its lock until that lease expires too.
        """
        if to_drive and run_id in self._driven:
            raise LeaseHeld(f"run {run_id} is being driven by another driver in this process")
        now = self.clock()
        locks = self.dialect.locks
        locked = False
        self._heads.pop(run_id, None)  # whatever another driver wrote since, read afresh
        try:
            with self._write() as tx:
                row = tx.execute(
                    "SELECT lease_owner, lease_until, lease_locked FROM runs WHERE id = ?" + self.dialect.for_update,
                    (run_id,),
                ).fetchone()
                if row is None:
                    raise RunNotFound(f"no run {run_id} in {self.path}")
                owner, until, by_lock = row
                expired = owner is None or until is None or until <= now
                locked = locks.try_lock(run_id)
                if owner != self.owner and not expired and not (locked and by_lock):
                    conflict = lease_conflict(run_id, owner, until, self.owner, now)
                    assert conflict is not None
                    raise conflict
                tx.execute(
                    "UPDATE runs SET lease_owner = ?, lease_until = ?, lease_locked = ? WHERE id = ?",
                    (self.owner, now + self.lease_seconds, int(locked), run_id),
                )
        except BaseException:
            if locked:
                locks.unlock(run_id)
            raise
        if to_drive:
            self._driven.add(run_id)

    def renew(self, run_id: str) -> None:
        """Extend this store's lease; a driver does so every third of the term for as long as it drives.

        A run held by lease alone takes the platform's lock here once it is
        free (the stuck holder it was taken from has gone).
        """
        locked = self.dialect.locks.try_lock(run_id)
        with self._write() as tx:
            updated = tx.execute(
                "UPDATE runs SET lease_until = ?, lease_locked = ? WHERE id = ? AND lease_owner = ?",
                (self.clock() + self.lease_seconds, int(locked), run_id, self.owner),
            )
            if updated.rowcount != 1:
                if locked:
                    self.dialect.locks.unlock(run_id)
                raise LeaseHeld(f"run {run_id}: this process no longer holds its lease")

    def release(self, run_id: str) -> None:
        """Let go of ``run_id`` (its lease and its lock)."""
        self._heads.pop(run_id, None)
        self._driven.discard(run_id)
        try:
            with self._write() as tx:
                tx.execute(
                    "UPDATE runs SET lease_owner = NULL, lease_until = NULL WHERE id = ? AND lease_owner = ?",
                    (run_id, self.owner),
                )
        finally:
            self.dialect.locks.unlock(run_id)

    # --- checkpoints -----------------------------------------------------------------

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
        """Save the state with its audit events and ledger writes, in one transaction (``RunStore.checkpoint``).

        ``sync=False``: a checkpoint with ``intents`` returns once committed, and the caller awaits
        ``synced()`` before the effect (group commit); otherwise it returns once on disk.
        """
        now = self.clock()
        run_id = state.run_id
        durable = durable or (bool(intents) and self.durable_intents and sync)
        try:
            with self._write(durable=durable) as tx:
                written = self._save(tx, state, events, outcomes, intents, cleared, release, now)
        except BaseException:
            self._heads.pop(run_id, None)  # read it afresh next time
            if run_id in self._new:
                self.dialect.locks.unlock(run_id)  # never written: nobody holds it
            raise
        with self._counting:
            self._commits += 1
        self._new.pop(run_id, None)
        self._turns.pop(run_id, None)
        self._parents.pop(run_id, None)
        if release:
            self._heads.pop(run_id, None)  # another driver may write it next
            self._driven.discard(run_id)
            self.dialect.locks.unlock(run_id)
        else:
            self._heads[run_id] = written

    def _save(
        self,
        tx: Tx,
        state: RunState,
        events: Sequence[LogEvent],
        outcomes: Sequence[tuple[PendingCall, str]],
        intents: Sequence[PendingCall],
        cleared: Sequence[str],
        release: bool,
        now: float,
    ) -> tuple[dict[str, Any], str]:
        """Write the checkpoint in ``tx``; the run row's sealed columns and seal as written."""
        run_id = state.run_id
        new = run_id in self._new
        known = None if new else self._heads.get(run_id)
        if new:  # its row is written once, below, with this checkpoint's values
            sealed, was = self._first_head(state, now), ""
        elif known is None:
            sealed, was = self._read_head(tx, run_id)
        else:
            sealed, was = dict(known[0]), known[1]
        messages, message_hash = message_rows(state, sealed["message_count"], sealed["message_hash"])
        chained = chain_events(state, events, sealed["event_count"], sealed["event_hash"], now, self.log_content)
        sealed.update(
            updated_at=now,
            status=state.status.value,
            meta=meta_text(state),
            message_count=len(state.messages),
            message_hash=message_hash,
            event_count=chained.count,
            event_hash=chained.head,
        )
        new_seal = seal(self.audit_key, run_id, tuple(sealed[c] for c in SEALED_COLUMNS))
        values = (
            now,
            state.status.value,
            sealed["meta"],
            len(state.messages),
            message_hash,
            chained.count,
            chained.head,
            new_seal,
            None if release else self.owner,
            None if release else now + self.lease_seconds,
        )
        if new:
            tx.execute(_INSERT_RUN, (run_id, *(sealed[c] for c in SEALED_COLUMNS), *values[-3:], 1))
            if (turn := self._turns.get(run_id)) is not None:
                self._add_turn(tx, run_id, turn, now)
        elif known is None:  # just read and checked, under the row's lock
            tx.execute(_UPDATE_RUN + " WHERE id = ?", (*values, run_id))
        else:
            # The row as this store last wrote it, column by column, or nothing: one statement instead of a
            # read and a write; when something else changed it, the read says what (lease lost, tampered).
            updated = tx.execute(self._update_known, (*values, run_id, self.owner, was, *known[0].values()))
            if updated.rowcount != 1:
                self._read_head(tx, run_id)
                raise TamperedRun(f"run {run_id}: its row changed outside tether; see tether runs verify {run_id}")
        written = (sealed, new_seal)
        _insert(tx, "messages", messages)
        _insert(tx, "events", chained.rows)
        # A call found never to have run loses its intent before it is run again (a new intent, below).
        for call_id in cleared:
            tx.execute("DELETE FROM ledger WHERE run_id = ? AND call_id = ? AND outcome IS NULL", (run_id, call_id))
        for call in intents:
            tx.execute(
                "INSERT INTO ledger (run_id, call_id, tool, fingerprint, intent_at, provenance)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    call.call_id,
                    call.tool,
                    call.fingerprint or "",
                    chained.intent_at(call.call_id, now),
                    ledger_provenance(state.provenance_of(call.call_id)),
                ),
            )
        for call, outcome in outcomes:
            at = chained.outcome_at(call.call_id, now)
            # A side effect's recorded outcome is final; a read-only call run again on resume replaces its own.
            only_if_unknown = "" if call.read_only else " WHERE ledger.outcome IS NULL"
            tx.execute(
                "INSERT INTO ledger (run_id, call_id, tool, fingerprint, intent_at, outcome, outcome_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, call_id) DO UPDATE"
                " SET outcome = excluded.outcome, outcome_at = excluded.outcome_at" + only_if_unknown,
                (run_id, call.call_id, call.tool, call.fingerprint or "", at, outcome, at),
            )
        return written

    def _read_head(self, tx: Tx, run_id: str) -> tuple[dict[str, Any], str]:
        """The run's sealed columns and seal, read under its lock and checked: this store's lease, its seal."""
        head = tx.execute(_RUN_HEAD + self.dialect.for_update, (run_id,)).fetchone()
        if head is None:
            raise RunNotFound(f"no run {run_id} in {self.path}")
        if head[-1] != self.owner:
            raise LeaseHeld(f"run {run_id}: this process no longer holds its lease")
        if problem := seal_problem(self.audit_key, run_id, head[:-2], head[-2]):
            raise TamperedRun(f"run {run_id}: {problem}; see tether runs verify {run_id}")
        return dict(zip(SEALED_COLUMNS, head, strict=False)), head[-2]

    async def synced(self) -> None:
        """Return once every commit this store made before the call is on disk (group commit).

        At most one sync is in flight: the drivers that reach an intent while
        it runs share the next one, so N runs reaching their intents together
        pay one fsync, made on a thread so that the event loop goes on
        meanwhile. A run alone in a local store syncs in place, as its commits
        are made: it has no one to share with, and handing the sync to a
        thread and back costs more than the sync.
        """
        if not self.durable_intents:
            return  # measuring what durability costs (bench/durable.py)
        target = self._commits
        while self._on_disk < target:
            if self._syncing is None:
                if len(self._heads) <= 1 and not self.remote:
                    self._sync()
                    continue
                self._syncing = asyncio.ensure_future(self._sync_once())
            await asyncio.shield(self._syncing)

    async def _sync_once(self) -> None:
        try:
            if len(self._heads) > 1:
                # Other runs are being driven here and may reach their intents in a moment: wait a little
                # (``GROUP_WAIT``) for them to share this sync.
                await asyncio.sleep(GROUP_WAIT)
            await asyncio.to_thread(self._sync)
        finally:
            self._syncing = None

    def _sync(self) -> None:
        """Put every commit made so far on disk."""
        with self._counting:
            upto = self._commits
        try:
            self.dialect.sync()
        except self.dialect.errors as exc:
            raise StoreError(f"run store {self.path}: cannot make its commits durable: {exc}") from None
        self.syncs += 1
        self._on_disk = max(self._on_disk, upto)

    # --- conversations ------------------------------------------------------------

    def create_conversation(self, conversation_id: str, principal: Principal, budget: dict[str, Any]) -> None:
        """Record a new conversation, sealed, with no turns yet."""
        now = self.clock()
        row = (now, now, canonical(principal_dict(principal)), canonical(budget), 0, GENESIS)
        with self._write() as tx:
            tx.execute(
                f"INSERT INTO conversations (id, {', '.join(CONVERSATION_SEALED)}, seal)"
                f" VALUES ({', '.join('?' * (len(row) + 2))})",
                (conversation_id, *row, conversation_seal(self.audit_key, conversation_id, row)),
            )

    def _add_turn(self, tx: Tx, run_id: str, turn: Turn, now: float) -> None:
        """Chain a new turn's run onto its conversation, in the transaction that writes the run."""
        conversation_id, number, history = turn
        found = tx.execute(_CONVERSATION + self.dialect.for_update, (conversation_id,)).fetchone()
        if found is None:
            raise RunNotFound(f"no conversation {conversation_id} in {self.path}")
        row = dict(zip(CONVERSATION_SEALED, found[:-1], strict=True))
        if problem := conversation_seal_problem(self.audit_key, conversation_id, found[:-1], found[-1]):
            raise TamperedRun(f"conversation {conversation_id}: {problem}; see tether runs verify")
        if number != row["turn_count"] + 1:
            raise StoreError(
                f"conversation {conversation_id} has {row['turn_count']} turns, so this cannot be turn {number}:"
                " another process went on with it; open it again"
            )
        row.update(updated_at=now, turn_count=number, turn_hash=turn_link(row["turn_hash"], number, run_id, history))
        values = tuple(row[c] for c in CONVERSATION_SEALED)
        tx.execute(
            "UPDATE conversations SET updated_at = ?, turn_count = ?, turn_hash = ?, seal = ? WHERE id = ?",
            (
                now,
                number,
                row["turn_hash"],
                conversation_seal(self.audit_key, conversation_id, values),
                conversation_id,
            ),
        )

    def load_conversation(self, conversation_id: str) -> StoredConversation:
        """A conversation with its turns' run ids (oldest first) and their usage totals, as stored (unchecked)."""
        with self._read(snapshot=True) as tx:
            row = tx.execute(
                "SELECT principal, budget, created_at, updated_at FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            if row is None:
                raise RunNotFound(f"no conversation {conversation_id} in {self.path}")
            turns = tx.execute(
                "SELECT id, status, meta FROM runs WHERE conversation_id = ? ORDER BY turn", (conversation_id,)
            ).fetchall()
        return conversation(conversation_id, row, turns)

    def list_conversations(self, principal_id: str | None = None, limit: int = 50) -> list[StoredConversation]:
        """Conversations, newest first; only a principal's, when given."""
        query = "SELECT id FROM conversations"
        params: tuple[Any, ...] = ()
        if principal_id is not None:
            query += f" WHERE {self.dialect.json_text('principal', 'id')} = ?"
            params = (principal_id,)
        with self._read() as tx:
            rows = tx.execute(query + " ORDER BY created_at DESC LIMIT ?", (*params, limit)).fetchall()
        return [self.load_conversation(r[0]) for r in rows]

    def empty_conversations(self, principal_id: str, since: float) -> tuple[int, float | None]:
        """How many of ``principal_id``'s conversations made after ``since`` have no turn yet, and when the oldest
        of them was made (None: there is none); an index holds exactly those, so this reads no others."""
        with self._read() as tx:
            found = tx.execute(
                f"SELECT COUNT(*), MIN(created_at) FROM conversations WHERE {self.dialect.json_text('principal', 'id')}"
                " = ? AND turn_count = 0 AND created_at > ?",
                (principal_id, since),
            ).fetchone()
        return int(found[0]), None if found[1] is None else float(found[1])

    def verify_conversation(self, conversation_id: str) -> list[str]:
        """Every break in what vouches for a conversation: its seal, the chain of its turns, each turn's row."""
        with self._read(snapshot=True) as tx:
            return self._conversation_problems(tx, conversation_id)

    def _conversation_problems(self, tx: Tx, conversation_id: str) -> list[str]:
        row = tx.execute(_CONVERSATION, (conversation_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no conversation {conversation_id} in {self.path}")
        turns = tx.execute(_TURNS, (conversation_id,)).fetchall()
        return conversation_problems(self.audit_key, conversation_id, row, turns)

    # --- reading -----------------------------------------------------------------

    def ledger_entry(self, run_id: str, call_id: str) -> LedgerEntry | None:
        """One call's ledger row, if it has one."""
        with self._read() as tx:
            row = tx.execute(_LEDGER_ROW + " WHERE run_id = ? AND call_id = ?", (run_id, call_id)).fetchone()
        return LedgerEntry(*row) if row else None

    def load(self, run_id: str, *, check: bool = True) -> StoredRun:
        """The run as stored; with ``check`` (the default) only if it passes ``verify``, else ``TamperedRun``."""
        with self._read(snapshot=True) as tx:
            if check and (problems := self._verify(tx, run_id)):
                raise tampered(run_id, problems)
            row = tx.execute(
                "SELECT meta, principal, setup, created_at, updated_at, config, parent_id FROM runs WHERE id = ?",
                (run_id,),
            ).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id} in {self.path}")
            messages = tx.execute("SELECT seq, body FROM messages WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
            executed = tx.execute(
                "SELECT call_id, fingerprint, outcome FROM ledger WHERE run_id = ? AND outcome IS NOT NULL", (run_id,)
            ).fetchall()
            inherited = self._inherited(tx, run_id)
        return stored_run(run_id, row, messages, executed, inherited)

    def _inherited(self, tx: Tx, run_id: str) -> list[Any]:
        """The messages a conversation's turn inherits: those its earlier turns stored, in order."""
        row = tx.execute("SELECT conversation_id, turn, history FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None or not row[2]:
            return []
        rows = tx.execute(
            "SELECT m.run_id, m.seq, m.body FROM messages m JOIN runs r ON m.run_id = r.id"
            " WHERE r.conversation_id = ? AND r.turn < ? ORDER BY r.turn, m.seq",
            (row[0], row[1]),
        ).fetchall()
        return inherited_messages(run_id, row[2], rows)

    def resolve(self, prefix: str) -> str:
        """The id of the one run whose id starts with ``prefix``, or else ends with it (``RunStore.resolve``)."""
        if not prefix:
            raise RunNotFound(f"no run with an empty id in {self.path}")
        # A range over the primary key (bytewise): the index answers it, and no character of the prefix is a wildcard.
        with self._read() as tx:
            found = [
                row[0]
                for row in tx.execute(
                    "SELECT id FROM runs WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                    (prefix, prefix + "\U0010ffff", AMBIGUOUS_SHOWN + 1),
                )
            ]
            if not found and len(prefix) >= MIN_SUFFIX:  # no index answers this: a scan, for a person's command
                found = [
                    row[0]
                    for row in tx.execute(
                        "SELECT id FROM runs WHERE length(id) >= ? AND substr(id, length(id) - ? + 1) = ?"
                        " ORDER BY id LIMIT ?",
                        (len(prefix), len(prefix), prefix, AMBIGUOUS_SHOWN + 1),
                    )
                ]
                if len(found) > 1:
                    raise ambiguous(prefix, found, ends=True)
        if prefix in found or len(found) == 1:
            return prefix if prefix in found else found[0]
        if not found:
            raise RunNotFound(f"no run {prefix} in {self.path}")
        raise ambiguous(prefix, found)

    def logged_prompts(self, run_ids: Collection[str]) -> dict[str, str]:
        """The first user message of each of these runs that logs content (``log_content``); others are left out,
        and so is a run whose setup or messages were edited into something unreadable (``verify`` says so)."""
        prompts: dict[str, str] = {}
        with self._read() as tx:
            for run_id in run_ids:
                with contextlib.suppress(StoreError):
                    if (prompt := self._logged_prompt(tx, run_id)) is not None:
                        prompts[run_id] = prompt
        return prompts

    def _logged_prompt(self, tx: Tx, run_id: str) -> str | None:
        row = tx.execute("SELECT setup FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None or decode(row[0], run_id, "its setup", dict).get("log_content") is not True:
            return None
        rows = tx.execute("SELECT seq, body FROM messages WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
        for seq, body in rows:
            message = decode(body, run_id, f"message {seq}", dict)
            if message.get("role") == "user":
                return message["content"] if isinstance(message.get("content"), str) else None
        return None

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
        ``statuses``, when given; with ``unleased`` only those no live driver holds; with ``before`` only
        those after it, newest first; an edited row raises, or with ``skipped`` is left out and noted there
        (``RunStore.list_runs``)."""
        principal = self.dialect.json_text("principal", "id")
        now = self.clock()
        query = (
            f"SELECT id, status, {principal}, created_at, updated_at, meta, conversation_id, turn,"
            f" {self.dialect.json_text('setup', 'engine')}, parent_id, lease_locked, lease_owner, lease_until FROM runs"
        )
        where: list[str] = []
        params: tuple[Any, ...] = ()
        if principal_id is not None:
            where.append(f"{principal} = ?")
            params += (principal_id,)
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' * len(statuses))})" if statuses else "1 = 0")
            params += tuple(statuses)
        if unleased:
            # Free, expired, or held through a lock another store has (whose death would have freed it):
            # which of those last a live driver still holds, its lock says, below.
            where.append("(lease_owner IS NULL OR lease_until <= ? OR (lease_owner <> ? AND lease_locked = 1))")
            params += (now, self.owner)
        if before is not None:  # a page after the one that ended with this run: what comes later cannot shift it
            where.append("(created_at < ? OR (created_at = ? AND id < ?))")
            params += (before[0], before[0], before[1])
        if context is not None:  # a conversation's turns, or a run in none
            where.append("(conversation_id = ? OR (conversation_id IS NULL AND id = ?))")
            params += (context, context)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY " + ("updated_at ASC" if oldest_update_first else "created_at DESC, id DESC") + " LIMIT ?"
        with self._read() as tx:
            rows = tx.execute(query, (*params, limit)).fetchall()
        found = []
        for row in rows:
            try:
                found.append(summary(row))
            except StoreError as exc:
                if skipped is None:
                    raise
                skipped.append((row[0], exc))
        if unleased and found:
            locked = [
                r[0] for r in rows if r[11] is not None and r[12] is not None and r[12] > now
            ]  # leases that have not expired
            live = self.dialect.locks.held_elsewhere(locked)
            found = [s for s in found if s.run_id not in live]
        return found

    def events(self, run_id: str, *, after: int = 0) -> list[StoredEvent]:
        """The run's audit events in order; only those numbered above ``after``, when given."""
        with self._read() as tx:
            rows = tx.execute(
                "SELECT seq, at, kind, step, data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq",
                (run_id, after),
            ).fetchall()
        return [
            StoredEvent(seq, at, kind, step, decode(data, run_id, f"event {seq}")) for seq, at, kind, step, data in rows
        ]

    def ledger(self, run_id: str) -> list[LedgerEntry]:
        """The run's ledger rows, in the order their intents were recorded."""
        with self._read() as tx:
            rows = tx.execute(_LEDGER_ROW + " WHERE run_id = ? ORDER BY intent_at", (run_id,)).fetchall()
        return [LedgerEntry(*row) for row in rows]

    def verify(self, run_id: str) -> list[str]:
        """Every break in what vouches for the run; empty when intact (``RunStore.verify``)."""
        with self._read(snapshot=True) as tx:
            return self._verify(tx, run_id)

    def _verify(self, tx: Tx, run_id: str) -> list[str]:
        problems = self._run_problems(tx, run_id)
        turn = tx.execute("SELECT conversation_id, turn FROM runs WHERE id = ?", (run_id,)).fetchone()
        if turn is not None and turn[0] is not None:
            problems += self._conversation_problems(tx, turn[0])
            earlier = tx.execute(
                "SELECT id, turn FROM runs WHERE conversation_id = ? AND turn < ? ORDER BY turn", (turn[0], turn[1])
            ).fetchall()
            for other, number in earlier:
                problems += [f"turn {number} (run {other}): {p}" for p in self._run_problems(tx, other)]
        return problems + self._tree_problems(tx, run_id, {run_id})

    def _tree_problems(self, tx: Tx, run_id: str, seen: set[str]) -> list[str]:
        """What is wrong with the run's child runs (sub-agents), and theirs: each one its log names must exist and
        name it as parent, and each run naming it must pass its own checks.

        A child's row is written before its parent logs it (``child_run``), so a crash in between leaves a child
        the log does not name yet (the parent's resume logs it): that alone is no break.
        """
        problems: list[str] = []
        rows = {r[0] for r in tx.execute("SELECT id FROM runs WHERE parent_id = ?", (run_id,)).fetchall()}
        logged = tx.execute(
            "SELECT seq, data FROM events WHERE run_id = ? AND kind = ? ORDER BY seq", (run_id, CHILD_RUN)
        ).fetchall()
        for seq, data in logged:
            event = decode(data, run_id, f"event {seq}")
            child = event.get("run") if isinstance(event, dict) else None
            if child not in rows:
                problems.append(f"event {seq}: child run {child} is missing, or names another parent")
        for child in sorted(rows - seen):
            seen.add(child)
            found = self._run_problems(tx, child) + self._tree_problems(tx, child, seen)
            problems += [f"child run {child}: {p}" for p in found]
        return problems

    def children(self, run_id: str) -> list[RunSummary]:
        """The child runs a run's calls started (sub-agents), oldest first (``RunStore.children``)."""
        with self._read() as tx:
            rows = tx.execute(
                f"SELECT id, status, {self.dialect.json_text('principal', 'id')}, created_at, updated_at, meta,"
                f" conversation_id, turn, {self.dialect.json_text('setup', 'engine')}, parent_id FROM runs"
                " WHERE parent_id = ? ORDER BY created_at, id",
                (run_id,),
            ).fetchall()
        return [summary(r) for r in rows]

    def _run_problems(self, tx: Tx, run_id: str) -> list[str]:
        head = tx.execute(f"SELECT {', '.join(SEALED_COLUMNS)}, seal FROM runs WHERE id = ?", (run_id,)).fetchone()
        if head is None:
            raise RunNotFound(f"no run {run_id} in {self.path}")
        events = tx.execute(
            "SELECT seq, at, kind, step, data, prev_hash, hash FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
        messages = tx.execute(
            "SELECT seq, body, hash FROM messages WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
        ledger = tx.execute(_LEDGER_ROW + " WHERE run_id = ?", (run_id,)).fetchall()
        return audit_problems(self.audit_key, run_id, head[:-1], head[-1], events, messages, ledger)

    def messages(self, run_id: str, *, check: bool = True) -> list[Message]:
        """The messages this run stored (a conversation's turn: only those it added); with ``check`` (the default)
        only if its row's seal holds and they are the chain it records, else ``TamperedRun`` (``RunStore.messages``)."""
        with self._read(snapshot=True) as tx:
            rows = tx.execute(
                "SELECT seq, body, hash FROM messages WHERE run_id = ? ORDER BY seq", (run_id,)
            ).fetchall()
            if check:
                head = tx.execute(f"SELECT {', '.join(SEALED_COLUMNS)}, seal FROM runs WHERE id = ?", (run_id,))
                found = head.fetchone()
                if found is None:
                    raise RunNotFound(f"no run {run_id} in {self.path}")
                if problems := transcript_problems(self.audit_key, run_id, found[:-1], found[-1], rows):
                    raise tampered(run_id, problems)
        return [Message.from_dict(decode(body, run_id, f"message {seq}")) for seq, body, _ in rows]

    def counts(self, run_id: str) -> tuple[int, int]:
        """How many events and messages a run has stored."""
        with self._read() as tx:
            row = tx.execute(
                "SELECT (SELECT count(*) FROM events WHERE run_id = ?),"
                " (SELECT count(*) FROM messages WHERE run_id = ?)",
                (run_id, run_id),
            ).fetchone()
        return int(row[0]), int(row[1])

    # --- API keys ------------------------------------------------------------------

    def create_api_key(
        self, principal: str, roles: Collection[str] = (), scopes: Collection[str] = ()
    ) -> tuple[str, str]:
        """Record a new API key acting for ``principal``; its id and the key, which is never stored or shown again."""
        key_id, secret = new_key()
        row = (
            key_hash(secret),
            principal_id(principal),
            words_text(names(roles, "role")),
            words_text(names(scopes, "scope")),
            self.clock(),
            None,
        )
        with self._write() as tx:
            tx.execute(
                f"INSERT INTO api_keys (id, {', '.join(KEY_SEALED)}, seal) VALUES ({', '.join('?' * (len(row) + 2))})",
                (key_id, *row, key_seal(self.audit_key, key_id, row)),
            )
        return key_id, secret

    def api_key_principal(self, secret: str) -> Principal | None:
        """Who the key ``secret`` acts for; None when no key is so, or it is revoked, or its row fails its seal.

        Read afresh on every call, so a revocation holds at once in every process.
        """
        digest = key_hash(secret)
        # Found by its hash through the index: that lookup's timing tells a caller at most how much of the
        # SHA-256 of its own guess matches a stored one, which brings no key nearer (the hashes are of
        # 256-bit random keys). The match is then confirmed in constant time.
        with self._read() as tx:
            row = tx.execute(_KEY_ROW + " WHERE hash = ?", (digest,)).fetchone()
        if row is None or not hmac.compare_digest(str(row[1]), digest):
            return None
        found = self._api_key(row)
        if found.problem is not None:
            log.warning("API key %s refused: %s", found.key_id, found.problem)
        return key_principal(found)

    def list_api_keys(self) -> list[ApiKey]:
        """Every API key, the oldest first: who it acts for, its roles and scopes, whether revoked or tampered."""
        with self._read() as tx:
            rows = tx.execute(_KEY_ROW + " ORDER BY created_at, id").fetchall()
        return [self._api_key(row) for row in rows]

    def revoke_api_key(self, key_id: str) -> bool:
        """Revoke a key at once; False when no key has this id or it was already revoked.

        The row is sealed again only if its seal held: a tampered row stays
        refused (now also revoked), and keeps the mark of its edit.
        """
        with self._write(durable=True) as tx:
            row = tx.execute(_KEY_ROW + " WHERE id = ?" + self.dialect.for_update, (key_id,)).fetchone()
            if row is None or row[-2] is not None:
                return False
            now = self.clock()
            intact = key_seal_problem(self.audit_key, key_id, row[1:-1], row[-1]) is None
            revoked = (*row[1:-2], now)
            new_seal = key_seal(self.audit_key, key_id, revoked) if intact else row[-1]
            tx.execute("UPDATE api_keys SET revoked_at = ?, seal = ? WHERE id = ?", (now, new_seal, key_id))
        return True

    def _api_key(self, row: Sequence[Any]) -> ApiKey:
        key_id, sealed, stored = row[0], row[1:-1], row[-1]
        return api_key(key_id, sealed, key_seal_problem(self.audit_key, key_id, sealed, stored))
