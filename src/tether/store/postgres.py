"""The shared run store: PostgreSQL, for several processes or hosts driving runs from one database.

The same contract as the SQLite store (``tether.store.sqlite``), with the
same rows: both take them from ``tether.store.records``, so a checkpoint,
``verify`` and ``load`` mean the same thing on either. What differs:

- Connections come from a pool (``psycopg_pool``, ``pool_size`` of them), so
  one store serves many threads; every operation is one transaction.
- Writers to one run are serialized by a row lock (``SELECT ... FOR
  UPDATE`` on the run's row) instead of SQLite's single write lock: writes
  to different runs go on in parallel.
- Leases work across machines: an owner id unique to the store instance and
  an expiry the driver renews; nothing depends on a pid. Expiry is compared
  with the clock of the process that acquires, so hosts sharing a database
  need clocks in step to well under the lease term (NTP does that).
- Commits are durable against a crash of the client (the server has them);
  ordinary checkpoints commit with ``synchronous_commit=off`` (a crash of the
  database server may lose the last fraction of a second of them, as a power
  cut may with SQLite), and a checkpoint carrying a side-effecting call's
  intent commits with ``synchronous_commit=on``: the server has fsynced its
  WAL before the call runs.
- Migrations take an advisory lock, so processes starting together apply each
  one exactly once.

Requires the ``postgres`` extra (``pip install 'tether[postgres]'``: psycopg 3
with its pool). Select it with ``--db postgresql://...`` or ``TETHER_DB``.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from tether.core.errors import ConfigurationError
from tether.core.machine import PendingCall, RunState
from tether.core.messages import Message
from tether.store.audit import SEALED_COLUMNS, audit_key_from_env, seal, seal_problem
from tether.store.records import (
    AMBIGUOUS_SHOWN,
    DEFAULT_LEASE_SECONDS,
    LeaseHeld,
    LedgerEntry,
    LogEvent,
    RunNotFound,
    RunSummary,
    StoredConversation,
    StoredEvent,
    StoredRun,
    StoreError,
    TamperedRun,
    Turn,
    ambiguous,
    audit_problems,
    canonical,
    chain_events,
    conversation,
    decode,
    first_row,
    inherited_messages,
    lease_conflict,
    message_rows,
    meta_text,
    principal_dict,
    registration,
    stored_run,
    summary,
    tampered,
)
from tether.tools.context import Principal

URL_SCHEMES = ("postgresql://", "postgres://")
# Any constant: the advisory lock that serializes migrations between processes opening the store together.
MIGRATION_LOCK = 0x7E7E_5702


def is_postgres_url(db: str | os.PathLike[str] | None) -> bool:
    return isinstance(db, str) and db.startswith(URL_SCHEMES)


def location(url: str) -> str:
    """The url as shown to people: without its password."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(an unreadable url)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host') or ''}{port}/{parts.get('dbname') or ''}"


# --- migrations: an ordered list of scripts, each applied once and recorded ----------

_M1_INITIAL = """
CREATE TABLE runs (
    id TEXT COLLATE "C" PRIMARY KEY,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL,
    principal TEXT NOT NULL,
    setup TEXT NOT NULL,
    config TEXT NOT NULL,
    meta TEXT NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0,
    message_hash TEXT NOT NULL,
    event_count INTEGER NOT NULL DEFAULT 0,
    event_hash TEXT NOT NULL,
    seal TEXT,
    lease_owner TEXT,
    lease_until DOUBLE PRECISION
);
CREATE INDEX runs_by_principal ON runs (((principal::jsonb) ->> 'id'), created_at);
CREATE INDEX runs_by_status ON runs (status, updated_at);
CREATE TABLE messages (
    run_id TEXT COLLATE "C" NOT NULL REFERENCES runs(id),
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE events (
    run_id TEXT COLLATE "C" NOT NULL REFERENCES runs(id),
    seq INTEGER NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    kind TEXT NOT NULL,
    step INTEGER NOT NULL,
    data TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE ledger (
    run_id TEXT COLLATE "C" NOT NULL REFERENCES runs(id),
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    intent_at DOUBLE PRECISION NOT NULL,
    outcome TEXT,
    outcome_at DOUBLE PRECISION,
    PRIMARY KEY (run_id, call_id)
)
"""

# A conversation's turns are runs; a turn's run stores only the messages after the ``history`` it inherits.
_M2_CONVERSATIONS = """
CREATE TABLE conversations (
    id TEXT COLLATE "C" PRIMARY KEY,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    principal TEXT NOT NULL,
    budget TEXT NOT NULL
);
ALTER TABLE runs ADD COLUMN conversation_id TEXT COLLATE "C" REFERENCES conversations(id);
ALTER TABLE runs ADD COLUMN turn INTEGER;
ALTER TABLE runs ADD COLUMN history INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_by_conversation ON runs (conversation_id, turn)
"""

MIGRATIONS: list[tuple[str, str]] = [("m1_initial", _M1_INITIAL), ("m2_conversations", _M2_CONVERSATIONS)]


class PostgresStore:
    """Runs, their transcripts, audit events and the execution ledger, in PostgreSQL.

    Example::

        store = PostgresStore("postgresql://tether@db.internal/tether")
        agent = Agent(model, tools, store=store)
        result = await agent.run("...")

    Takes the same options as ``SQLiteStore``; ``pool_size`` bounds the
    connections this store opens.
    """

    def __init__(
        self,
        url: str,
        *,
        log_content: bool = False,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Callable[[], float] = time.time,
        audit_key: str | None = None,
        durable_intents: bool = True,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
    ) -> None:
        self.url = url
        self.path = location(url)  # what messages name, as SQLiteStore's path
        self.log_content = log_content
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.audit_key = audit_key or audit_key_from_env()
        self.durable_intents = durable_intents
        # Unique to this instance; host and pid are there for people to read, never to decide on.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        self._new: dict[str, tuple[str, str, str]] = {}  # runs registered but not yet written
        self._turns: dict[str, Turn] = {}  # new runs that are turns: conversation, turn, history
        options: dict[str, Any] = {"autocommit": True, "connect_timeout": max(1, round(connect_timeout))}
        try:
            # A first connection of our own: its error says why, where a pool would only time out.
            with psycopg.connect(url, **options) as db:
                self._migrate(db)
        except psycopg.ProgrammingError as exc:
            raise ConfigurationError(f"--db {self.path}: not a PostgreSQL url ({exc})") from None
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the run store at {self.path}: {exc} (set TETHER_DB or --db)") from None
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, kwargs=options, open=False)
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout:
            raise StoreError(
                f"cannot open the run store at {self.path}: no connection within {connect_timeout}s"
            ) from None

    def close(self) -> None:
        self._pool.close()

    def _migrate(self, db: psycopg.Connection[Any]) -> None:
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations"
                " (version INTEGER PRIMARY KEY, name TEXT, applied_at DOUBLE PRECISION)"
            )
            done = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
            for version, (name, script) in enumerate(MIGRATIONS, start=1):
                if version not in done:
                    for statement in script.split(";"):
                        if statement.strip():
                            db.execute(statement.encode())
                    db.execute("INSERT INTO schema_migrations VALUES (%s, %s, %s)", (version, name, self.clock()))

    @contextmanager
    def _transaction(self, *, durable: bool = False, snapshot: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """One transaction on a pooled connection; ``durable`` waits for the server's WAL fsync,
        ``snapshot`` makes every read inside see the same committed state."""
        try:
            with self._pool.connection() as db, db.transaction():
                if snapshot:
                    db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                elif not durable:
                    db.execute("SET LOCAL synchronous_commit TO off")
                yield db
        except psycopg.Error as exc:
            raise StoreError(f"run store {self.path}: {exc}") from None
        except PoolTimeout as exc:
            raise StoreError(f"run store {self.path}: {exc}") from None

    # --- runs and leases -----------------------------------------------------------

    def create_run(
        self, state: RunState, principal: Principal, setup: dict[str, Any], *, turn: Turn | None = None
    ) -> None:
        """Register a new run; its row is written with its first checkpoint, in the same transaction.

        ``turn`` marks a conversation's turn (``SQLiteStore.create_run``).
        """
        if turn is not None:
            self._turns[state.run_id] = turn
        self._new[state.run_id] = registration(state, principal, setup, self.log_content)

    def acquire(self, run_id: str) -> None:
        """Take the lease on ``run_id``, or raise ``LeaseHeld`` while another owner's lease has not expired."""
        now = self.clock()
        with self._transaction() as db:
            row = db.execute("SELECT lease_owner, lease_until FROM runs WHERE id = %s FOR UPDATE", (run_id,)).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id} in {self.path}")
            if conflict := lease_conflict(run_id, row[0], row[1], self.owner, now):
                raise conflict
            db.execute(
                "UPDATE runs SET lease_owner = %s, lease_until = %s WHERE id = %s",
                (self.owner, now + self.lease_seconds, run_id),
            )

    def renew(self, run_id: str) -> None:
        """Extend this store's lease; a driver does so every third of the term for as long as it drives."""
        with self._transaction() as db:
            updated = db.execute(
                "UPDATE runs SET lease_until = %s WHERE id = %s AND lease_owner = %s",
                (self.clock() + self.lease_seconds, run_id, self.owner),
            )
            if updated.rowcount != 1:
                raise LeaseHeld(f"run {run_id}: this process no longer holds its lease")

    def release(self, run_id: str) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE runs SET lease_owner = NULL, lease_until = NULL WHERE id = %s AND lease_owner = %s",
                (run_id, self.owner),
            )

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
    ) -> None:
        """Save the state with its audit events and ledger writes, in one transaction (``SQLiteStore.checkpoint``).

        A checkpoint with ``intents``, or ``durable``, returns only once the server has made it durable.
        """
        now = self.clock()
        run_id = state.run_id
        with self._transaction(durable=durable or (bool(intents) and self.durable_intents)) as db:
            if run_id in self._new:
                row = first_row(state, self._new[run_id], now, self._turns.get(run_id))
                db.execute(
                    f"INSERT INTO runs (id, {', '.join(SEALED_COLUMNS)}, seal, lease_owner, lease_until)"
                    f" VALUES ({', '.join(['%s'] * (len(SEALED_COLUMNS) + 4))})",
                    (run_id, *row, seal(self.audit_key, run_id, row), self.owner, now + self.lease_seconds),
                )
            head = db.execute(
                f"SELECT {', '.join(SEALED_COLUMNS)}, seal, lease_owner FROM runs WHERE id = %s FOR UPDATE", (run_id,)
            ).fetchone()
            if head is None:
                raise RunNotFound(f"no run {run_id} in {self.path}")
            if head[-1] != self.owner:
                raise LeaseHeld(f"run {run_id}: this process no longer holds its lease")
            sealed = dict(zip(SEALED_COLUMNS, head, strict=False))
            if problem := seal_problem(self.audit_key, run_id, head[:-2], head[-2]):
                raise TamperedRun(f"run {run_id}: {problem}; see tether runs verify {run_id}")
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
            values = tuple(sealed[c] for c in SEALED_COLUMNS)
            db.execute(
                "UPDATE runs SET updated_at = %s, status = %s, meta = %s, message_count = %s, message_hash = %s,"
                " event_count = %s, event_hash = %s, seal = %s, lease_owner = %s, lease_until = %s WHERE id = %s",
                (
                    now,
                    state.status.value,
                    sealed["meta"],
                    len(state.messages),
                    message_hash,
                    chained.count,
                    chained.head,
                    seal(self.audit_key, run_id, values),
                    None if release else self.owner,
                    None if release else now + self.lease_seconds,
                    run_id,
                ),
            )
            with db.cursor() as cursor:
                if messages:
                    cursor.executemany("INSERT INTO messages VALUES (%s, %s, %s, %s)", messages)
                if chained.rows:
                    cursor.executemany("INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", chained.rows)
            for call in intents:
                db.execute(
                    "INSERT INTO ledger (run_id, call_id, tool, fingerprint, intent_at) VALUES (%s, %s, %s, %s, %s)",
                    (run_id, call.call_id, call.tool, call.fingerprint or "", chained.intent_at(call.call_id, now)),
                )
            for call, outcome in outcomes:
                at = chained.outcome_at(call.call_id, now)
                # A side effect's recorded outcome is final; a read-only call run again on resume replaces its own.
                only_if_unknown = "" if call.read_only else " WHERE ledger.outcome IS NULL"
                db.execute(
                    (
                        "INSERT INTO ledger VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (run_id, call_id) DO UPDATE"
                        " SET outcome = excluded.outcome, outcome_at = excluded.outcome_at" + only_if_unknown
                    ).encode(),
                    (run_id, call.call_id, call.tool, call.fingerprint or "", at, outcome, at),
                )
            for call_id in cleared:
                db.execute(
                    "DELETE FROM ledger WHERE run_id = %s AND call_id = %s AND outcome IS NULL", (run_id, call_id)
                )
        self._new.pop(run_id, None)
        self._turns.pop(run_id, None)

    # --- reading -----------------------------------------------------------------

    def ledger_entry(self, run_id: str, call_id: str) -> LedgerEntry | None:
        with self._transaction() as db:
            row = db.execute(
                "SELECT call_id, tool, fingerprint, intent_at, outcome, outcome_at FROM ledger"
                " WHERE run_id = %s AND call_id = %s",
                (run_id, call_id),
            ).fetchone()
        return LedgerEntry(*row) if row else None

    def load(self, run_id: str, *, check: bool = True) -> StoredRun:
        """The run as stored; with ``check`` (the default) only if it passes ``verify``, else ``TamperedRun``."""
        with self._transaction(snapshot=True) as db:
            if check and (problems := self._verify(db, run_id)):
                raise tampered(run_id, problems)
            row = db.execute(
                "SELECT meta, principal, setup, created_at, updated_at, config FROM runs WHERE id = %s", (run_id,)
            ).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id} in {self.path}")
            messages = db.execute("SELECT seq, body FROM messages WHERE run_id = %s ORDER BY seq", (run_id,)).fetchall()
            executed = db.execute(
                "SELECT call_id, fingerprint, outcome FROM ledger WHERE run_id = %s AND outcome IS NOT NULL", (run_id,)
            ).fetchall()
            inherited = self._inherited(db, run_id)
        return stored_run(run_id, row, messages, executed, inherited)

    def _inherited(self, db: psycopg.Connection[Any], run_id: str) -> list[Any]:
        """The messages a conversation's turn inherits: those its earlier turns stored, in order."""
        row = db.execute("SELECT conversation_id, turn, history FROM runs WHERE id = %s", (run_id,)).fetchone()
        if row is None or not row[2]:
            return []
        rows = db.execute(
            "SELECT m.run_id, m.seq, m.body FROM messages m JOIN runs r ON m.run_id = r.id"
            " WHERE r.conversation_id = %s AND r.turn < %s ORDER BY r.turn, m.seq",
            (row[0], row[1]),
        ).fetchall()
        return inherited_messages(run_id, row[2], rows)

    # --- conversations ------------------------------------------------------------

    def create_conversation(self, conversation_id: str, principal: Principal, budget: dict[str, Any]) -> None:
        now = self.clock()
        with self._transaction() as db:
            db.execute(
                "INSERT INTO conversations VALUES (%s, %s, %s, %s, %s)",
                (conversation_id, now, now, canonical(principal_dict(principal)), canonical(budget)),
            )

    def load_conversation(self, conversation_id: str) -> StoredConversation:
        """A conversation with its turns' run ids (oldest first) and their usage totals."""
        with self._transaction(snapshot=True) as db:
            row = db.execute(
                "SELECT principal, budget, created_at, updated_at FROM conversations WHERE id = %s", (conversation_id,)
            ).fetchone()
            if row is None:
                raise RunNotFound(f"no conversation {conversation_id} in {self.path}")
            turns = db.execute(
                "SELECT id, status, meta FROM runs WHERE conversation_id = %s ORDER BY turn", (conversation_id,)
            ).fetchall()
        return conversation(conversation_id, row, turns)

    def list_conversations(self, principal_id: str | None = None, limit: int = 50) -> list[StoredConversation]:
        query = "SELECT id FROM conversations"
        params: tuple[Any, ...] = ()
        if principal_id is not None:
            query += " WHERE (principal::jsonb) ->> 'id' = %s"
            params = (principal_id,)
        with self._transaction() as db:
            rows = db.execute((query + " ORDER BY created_at DESC LIMIT %s").encode(), (*params, limit)).fetchall()
        return [self.load_conversation(r[0]) for r in rows]

    def resolve(self, prefix: str) -> str:
        """The id of the one run whose id starts with ``prefix`` (``SQLiteStore.resolve``)."""
        if not prefix:
            raise RunNotFound(f"no run with an empty id in {self.path}")
        # A range over the primary key (collation "C": bytewise), so the index answers it and nothing is a wildcard.
        with self._transaction() as db:
            found = [
                row[0]
                for row in db.execute(
                    "SELECT id FROM runs WHERE id >= %s AND id < %s ORDER BY id LIMIT %s",
                    (prefix, prefix + "\U0010ffff", AMBIGUOUS_SHOWN + 1),
                )
            ]
        if prefix in found or len(found) == 1:
            return prefix if prefix in found else found[0]
        if not found:
            raise RunNotFound(f"no run {prefix} in {self.path}")
        raise ambiguous(prefix, found)

    def logged_prompts(self, run_ids: Collection[str]) -> dict[str, str]:
        """The first user message of each of these runs that logs content (``log_content``); others are left out."""
        prompts: dict[str, str] = {}
        with self._transaction() as db:
            for run_id in run_ids:
                row = db.execute(
                    "SELECT m.body FROM runs r JOIN messages m ON m.run_id = r.id"
                    " WHERE r.id = %s AND (r.setup::jsonb) -> 'log_content' = 'true'::jsonb"
                    " AND (m.body::jsonb) ->> 'role' = 'user' ORDER BY m.seq LIMIT 1",
                    (run_id,),
                ).fetchone()
                if row is not None:
                    content = decode(row[0], run_id, "its first user message").get("content")
                    if isinstance(content, str):
                        prompts[run_id] = content
        return prompts

    def list_runs(
        self,
        principal_id: str | None = None,
        limit: int = 50,
        *,
        statuses: Collection[str] | None = None,
        oldest_update_first: bool = False,
        unleased: bool = False,
    ) -> list[RunSummary]:
        """Runs, newest first (or the least recently updated first); only a principal's, or only
        those in ``statuses``, when given; with ``unleased`` only those whose lease is released or
        expired by this store's clock (a run another driver may take)."""
        query = (
            "SELECT id, status, (principal::jsonb) ->> 'id', created_at, updated_at, meta, conversation_id, turn,"
            " (setup::jsonb) ->> 'engine' FROM runs"
        )
        where: list[str] = []
        params: tuple[Any, ...] = ()
        if principal_id is not None:
            where.append("(principal::jsonb) ->> 'id' = %s")
            params += (principal_id,)
        if statuses is not None:
            where.append("status = ANY(%s)")
            params += (list(statuses),)
        if unleased:
            where.append("(lease_owner IS NULL OR lease_until <= %s)")
            params += (self.clock(),)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY " + ("updated_at ASC" if oldest_update_first else "created_at DESC") + " LIMIT %s"
        with self._transaction() as db:
            rows = db.execute(query.encode(), (*params, limit)).fetchall()
        return [summary(r) for r in rows]

    def events(self, run_id: str, *, after: int = 0) -> list[StoredEvent]:
        """The run's audit events in order; only those numbered above ``after``, when given."""
        with self._transaction() as db:
            rows = db.execute(
                "SELECT seq, at, kind, step, data FROM events WHERE run_id = %s AND seq > %s ORDER BY seq",
                (run_id, after),
            ).fetchall()
        return [
            StoredEvent(seq, at, kind, step, decode(data, run_id, f"event {seq}")) for seq, at, kind, step, data in rows
        ]

    def ledger(self, run_id: str) -> list[LedgerEntry]:
        with self._transaction() as db:
            rows = db.execute(
                "SELECT call_id, tool, fingerprint, intent_at, outcome, outcome_at FROM ledger"
                " WHERE run_id = %s ORDER BY intent_at",
                (run_id,),
            ).fetchall()
        return [LedgerEntry(*row) for row in rows]

    def verify(self, run_id: str) -> list[str]:
        """Every break in what vouches for the run: its seal, its two hash chains and its ledger; empty when intact."""
        with self._transaction(snapshot=True) as db:
            return self._verify(db, run_id)

    def _verify(self, db: psycopg.Connection[Any], run_id: str) -> list[str]:
        head = db.execute(f"SELECT {', '.join(SEALED_COLUMNS)}, seal FROM runs WHERE id = %s", (run_id,)).fetchone()
        if head is None:
            raise RunNotFound(f"no run {run_id} in {self.path}")
        events = db.execute(
            "SELECT seq, at, kind, step, data, prev_hash, hash FROM events WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()
        messages = db.execute(
            "SELECT seq, body, hash FROM messages WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()
        ledger = db.execute(
            "SELECT call_id, tool, fingerprint, intent_at, outcome, outcome_at FROM ledger WHERE run_id = %s", (run_id,)
        ).fetchall()
        return audit_problems(self.audit_key, run_id, head[:-1], head[-1], events, messages, ledger)

    def messages(self, run_id: str) -> list[Message]:
        with self._transaction() as db:
            rows = db.execute("SELECT seq, body FROM messages WHERE run_id = %s ORDER BY seq", (run_id,)).fetchall()
        return [Message.from_dict(decode(body, run_id, f"message {seq}")) for seq, body in rows]

    def counts(self, run_id: str) -> tuple[int, int]:
        """How many events and messages a run has stored."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT (SELECT count(*) FROM events WHERE run_id = %s),"
                " (SELECT count(*) FROM messages WHERE run_id = %s)",
                (run_id, run_id),
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])
