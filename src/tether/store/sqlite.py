"""The embedded run store: one SQLite file in WAL mode.

What it keeps, and why each piece is shaped so:

- ``runs``: one row per run with the state *without* its growing parts
  (messages, executed calls). A checkpoint rewrites this small row and
  appends the rest, so a step costs the same at step 200 as at step 1.
- ``messages``: the transcript, append-only, each row hash-chained.
- ``events``: the audit log, append-only; each row holds the hash of the
  previous one, so ``verify`` finds any edited, removed or reordered row.
  Events are redacted and carry no user text unless ``log_content``.
- ``ledger``: one row per executed call. For a side-effecting call the
  intent is committed *before* it runs and the outcome after; an intent
  without an outcome is an unknown outcome, never re-run blindly. Every
  ledger write shares its transaction with the event that logs it, so
  ``verify`` can replay the events and demand exactly the ledger they
  describe: a row removed, added or edited shows.
- The run's row is *sealed*: a digest of every column but the lease (the
  saved state, setup, principal, configuration and the heads of both
  chains). With ``TETHER_AUDIT_KEY`` the seal is an HMAC, so someone who can
  write the file but lacks the key cannot recompute a consistent forgery.
  ``load`` refuses a run that fails these checks: what resume executes
  comes only from checked rows.
- A lease: an owner id unique to this store instance (host and pid only for
  people to read) and an expiry that the driver renews. A lease is free
  once released or expired; whether some process has the owner's pid says
  nothing (a zombie has it, and so may a restarted container's pid 1).

Transactions are WAL with ``synchronous=NORMAL``: a commit survives the
process being killed (the WAL is in the OS's hands), not a power cut. The
one exception is the checkpoint carrying a side-effecting call's intent: it
commits with ``synchronous=FULL`` (the WAL is fsynced), because after a
power cut a lost intent would let resume run the effect again blindly.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tether.core.budget import RunConfig
from tether.core.machine import PendingCall, RunState
from tether.core.messages import Message
from tether.store.audit import SEALED_COLUMNS, audit_key_from_env, seal, seal_problem
from tether.store.records import (
    AMBIGUOUS_SHOWN,
    DEFAULT_LEASE_SECONDS,
    AmbiguousRun,
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
    omitted,
    principal_dict,
    registration,
    stored_run,
    summary,
    tampered,
)
from tether.tools.context import Principal

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "AmbiguousRun",
    "LeaseHeld",
    "LedgerEntry",
    "LogEvent",
    "RunNotFound",
    "RunSummary",
    "SQLiteStore",
    "StoreError",
    "StoredEvent",
    "StoredRun",
    "TamperedRun",
    "connect",
    "default_path",
    "immediate",
    "omitted",
]


def default_path() -> Path:
    """``$TETHER_DB``, else ``$XDG_DATA_HOME/tether/tether.db``, else ``~/.local/share/tether/tether.db``."""
    if env := os.environ.get("TETHER_DB"):
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tether" / "tether.db"


def connect(path: Path) -> sqlite3.Connection:
    """A connection in the house settings: WAL, process-crash-safe commits, waits on locks, foreign keys.

    Transactions are explicit (``isolation_level=None``). Raises ``sqlite3.Error`` or ``OSError``.
    """
    if str(path) != ":memory:":
        path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        # wal_autocheckpoint: fold the WAL back every ~16 MB rather than 4 MB, a quarter of the fsyncs.
        db.execute("PRAGMA busy_timeout=5000")
        _into_wal(db)
        for pragma in ("synchronous=NORMAL", "foreign_keys=ON", "wal_autocheckpoint=4000"):
            db.execute(f"PRAGMA {pragma}")
    except sqlite3.Error:
        db.close()
        raise
    return db


def _into_wal(db: sqlite3.Connection, *, patience: float = 5.0) -> None:
    """``PRAGMA journal_mode=WAL``, waiting out the openers of a new file that switch it at the same moment.

    SQLite answers that pragma "database is locked" at once, without its busy
    handler, while another connection holds the lock the switch needs: four
    stores opening one new file together failed that way about once in fifty.
    """
    deadline = time.monotonic() + patience
    pause = 0.001
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


@contextmanager
def immediate(db: sqlite3.Connection, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
    """One write transaction, its lock taken up front so that check-then-write cannot race.

    ``durable`` commits with ``synchronous=FULL``: the WAL is fsynced before
    the commit returns, so the transaction survives a power cut. Rolled back
    on any exception; ``sqlite3.Error`` is left for the caller to map.
    """
    if durable:
        db.execute("PRAGMA synchronous=FULL")
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    finally:
        if durable:
            db.execute("PRAGMA synchronous=NORMAL")


# --- migrations: an ordered list, each applied once and recorded --------------


def _script(db: sqlite3.Connection, script: str) -> None:
    # Not executescript(): it commits first, and a migration must share the transaction that records it.
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def _m1_initial(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
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
            lease_until REAL
        );
        CREATE INDEX runs_by_principal ON runs (json_extract(principal, '$.id'), created_at);
        CREATE TABLE messages (
            run_id TEXT NOT NULL REFERENCES runs(id),
            seq INTEGER NOT NULL,
            body TEXT NOT NULL,
            hash TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID;
        CREATE TABLE events (
            run_id TEXT NOT NULL REFERENCES runs(id),
            seq INTEGER NOT NULL,
            at REAL NOT NULL,
            kind TEXT NOT NULL,
            step INTEGER NOT NULL,
            data TEXT NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID;
        CREATE TABLE ledger (
            run_id TEXT NOT NULL REFERENCES runs(id),
            call_id TEXT NOT NULL,
            tool TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            intent_at REAL NOT NULL,
            outcome TEXT,
            outcome_at REAL,
            PRIMARY KEY (run_id, call_id)
        ) WITHOUT ROWID;
        """,
    )


def _m2_run_config(db: sqlite3.Connection) -> None:
    # Early stores kept the run's configuration inside its state; it now has a column of its own.
    columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    if "config" not in columns:
        default = canonical(RunConfig().to_dict()).replace("'", "''")
        db.execute(f"ALTER TABLE runs ADD COLUMN config TEXT NOT NULL DEFAULT '{default}'")


def _m3_run_seal(db: sqlite3.Connection) -> None:
    # Runs recorded before seals have none, and fail verification (and so are not resumed).
    db.execute("ALTER TABLE runs ADD COLUMN seal TEXT")


def _m4_runs_by_status(db: sqlite3.Connection) -> None:
    # Recovery and the approvals queue list runs by status, the longest waiting first.
    db.execute("CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, updated_at)")


def _m5_conversations(db: sqlite3.Connection) -> None:
    # A conversation's turns are runs. A turn's run stores only the messages it adds: the ones it
    # inherits (``history`` of them) are the earlier turns' rows, so a turn never rewrites them.
    _script(
        db,
        """
        CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            principal TEXT NOT NULL,
            budget TEXT NOT NULL
        );
        ALTER TABLE runs ADD COLUMN conversation_id TEXT REFERENCES conversations(id);
        ALTER TABLE runs ADD COLUMN turn INTEGER;
        ALTER TABLE runs ADD COLUMN history INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX runs_by_conversation ON runs (conversation_id, turn)
        """,
    )


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _m1_initial,
    _m2_run_config,
    _m3_run_seal,
    _m4_runs_by_status,
    _m5_conversations,
]


class SQLiteStore:
    """Runs, their transcripts, audit events and the execution ledger.

    Example::

        store = SQLiteStore()                       # ~/.local/share/tether/tether.db
        agent = Agent(model, tools, store=store)
        result = await agent.run("...")             # checkpointed after every event

    ``audit_key`` (default ``$TETHER_AUDIT_KEY``) makes the seals HMACs.
    ``durable_intents=False`` commits intents like everything else, without
    an fsync; it exists only to measure what the fsync costs (``bench/durable.py``).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        log_content: bool = False,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Callable[[], float] = time.time,
        audit_key: str | None = None,
        durable_intents: bool = True,
    ) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.log_content = log_content
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.audit_key = audit_key or audit_key_from_env()
        self.durable_intents = durable_intents
        # Unique to this instance; host and pid are there for people to read, never to decide on.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        try:
            self._db = connect(self.path)
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the run store at {self.path}: {exc} (set TETHER_DB or --db)") from None
        self._new: dict[str, tuple[str, str, str]] = {}  # runs registered but not yet written
        self._turns: dict[str, tuple[str, int, int]] = {}  # new runs that are turns: conversation, turn, history

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        try:
            with immediate(self._db, durable=durable) as db:
                yield db
        except sqlite3.Error as exc:
            raise StoreError(f"run store {self.path}: {exc}") from None

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every query inside sees the same committed state."""
        self._db.execute("BEGIN")
        try:
            yield self._db
        finally:
            self._db.execute("COMMIT")

    def _migrate(self) -> None:
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at REAL)"
        )
        with self._transaction() as db:
            done = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
            for version, migration in enumerate(MIGRATIONS, start=1):
                if version not in done:
                    migration(db)
                    db.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                        (version, migration.__name__.lstrip("_"), self.clock()),
                    )

    # --- runs and leases -----------------------------------------------------------

    def create_run(
        self,
        state: RunState,
        principal: Principal,
        setup: dict[str, Any],
        *,
        turn: tuple[str, int, int] | None = None,
    ) -> None:
        """Register a new run; its row is written with its first checkpoint, in the same transaction.

        ``turn`` is (conversation id, turn number, messages inherited from earlier turns) for a
        conversation's turn: only the messages after those are stored with this run. The setup
        records ``log_content``, so a resumed run is logged as it began.
        """
        if turn is not None:
            self._turns[state.run_id] = turn
        self._new[state.run_id] = registration(state, principal, setup, self.log_content)

    def _insert_run(self, db: sqlite3.Connection, state: RunState, now: float) -> None:
        # Both forgotten once the transaction commits.
        row = first_row(state, self._new[state.run_id], now, self._turns.get(state.run_id))
        marks = ", ".join("?" * (len(row) + 4))
        db.execute(
            f"INSERT INTO runs (id, {', '.join(SEALED_COLUMNS)}, seal, lease_owner, lease_until) VALUES ({marks})",
            (
                state.run_id,
                *row,
                seal(self.audit_key, state.run_id, row),
                self.owner,
                now + self.lease_seconds,
            ),
        )

    def acquire(self, run_id: str) -> None:
        """Take the lease on ``run_id``, or raise ``LeaseHeld`` while another owner's lease has not expired."""
        now = self.clock()
        with self._transaction() as db:
            row = db.execute("SELECT lease_owner, lease_until FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id} in {self.path}")
            if conflict := lease_conflict(run_id, row[0], row[1], self.owner, now):
                raise conflict
            db.execute(
                "UPDATE runs SET lease_owner = ?, lease_until = ? WHERE id = ?",
                (self.owner, now + self.lease_seconds, run_id),
            )

    def renew(self, run_id: str) -> None:
        """Extend this store's lease; a driver does so every third of the term for as long as it drives."""
        with self._transaction() as db:
            updated = db.execute(
                "UPDATE runs SET lease_until = ? WHERE id = ? AND lease_owner = ?",
                (self.clock() + self.lease_seconds, run_id, self.owner),
            )
            if updated.rowcount != 1:
                raise LeaseHeld(f"run {run_id}: this process no longer holds its lease")

    def release(self, run_id: str) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE runs SET lease_owner = NULL, lease_until = NULL WHERE id = ? AND lease_owner = ?",
                (run_id, self.owner),
            )

    # --- checkpoints -----------------------------------------------------------------

    def _append_messages(self, db: sqlite3.Connection, state: RunState, count: int, last: str) -> tuple[int, str]:
        """Insert the messages not stored yet; the new count and last hash."""
        rows, last = message_rows(state, count, last)
        if rows:
            db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?)", rows)
        return len(state.messages), last

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
        """Save the state with its audit events and ledger writes, in one transaction.

        An event is ``(kind, data)``, logged at this step and time, or ``(kind,
        data, step, at)`` when it happened earlier (a driver batches the
        events of a step into one checkpoint). ``intents`` are side-effecting
        calls about to run: that transaction is fsynced (``synchronous=FULL``)
        before this returns. ``outcomes`` are executed calls' results;
        ``cleared`` are call ids found never to have run. ``release`` lets go
        of the lease in the same transaction. ``durable`` fsyncs whatever the
        checkpoint holds (a service answering 202 for a new run). Raises ``LeaseHeld`` if another
        owner took the run, ``TamperedRun`` if its row was changed outside
        tether since the last checkpoint.
        """
        now = self.clock()
        run_id = state.run_id
        with self._transaction(durable=durable or (bool(intents) and self.durable_intents)) as db:
            if run_id in self._new:
                self._insert_run(db, state, now)
            head = db.execute(
                f"SELECT {', '.join(SEALED_COLUMNS)}, seal, lease_owner FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
            if head is None:
                raise RunNotFound(f"no run {run_id} in {self.path}")
            if head[-1] != self.owner:
                raise LeaseHeld(f"run {run_id}: this process no longer holds its lease")
            sealed = dict(zip(SEALED_COLUMNS, head, strict=False))
            if problem := seal_problem(self.audit_key, run_id, head[:-2], head[-2]):
                raise TamperedRun(f"run {run_id}: {problem}; see tether runs verify {run_id}")
            count, message_hash = self._append_messages(db, state, sealed["message_count"], sealed["message_hash"])
            chained = chain_events(state, events, sealed["event_count"], sealed["event_hash"], now, self.log_content)
            seq, event_hash, rows = chained.count, chained.head, chained.rows
            sealed.update(
                updated_at=now,
                status=state.status.value,
                meta=meta_text(state),
                message_count=count,
                message_hash=message_hash,
                event_count=seq,
                event_hash=event_hash,
            )
            values = tuple(sealed[c] for c in SEALED_COLUMNS)
            db.execute(
                "UPDATE runs SET updated_at = ?, status = ?, meta = ?, message_count = ?, message_hash = ?,"
                " event_count = ?, event_hash = ?, seal = ?, lease_owner = ?, lease_until = ? WHERE id = ?",
                (
                    now,
                    state.status.value,
                    sealed["meta"],
                    count,
                    message_hash,
                    seq,
                    event_hash,
                    seal(self.audit_key, run_id, values),
                    None if release else self.owner,
                    None if release else now + self.lease_seconds,
                    run_id,
                ),
            )
            if rows:
                db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            for call in intents:
                intent_at = chained.intent_at(call.call_id, now)
                db.execute(
                    "INSERT INTO ledger (run_id, call_id, tool, fingerprint, intent_at) VALUES (?, ?, ?, ?, ?)",
                    (run_id, call.call_id, call.tool, call.fingerprint or "", intent_at),
                )
            for call, outcome in outcomes:
                at = chained.outcome_at(call.call_id, now)
                # A side effect's recorded outcome is final; a read-only call run again on resume replaces its own.
                only_if_unknown = "" if call.read_only else " WHERE outcome IS NULL"
                db.execute(
                    "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, call_id) DO UPDATE"
                    " SET outcome = excluded.outcome, outcome_at = excluded.outcome_at" + only_if_unknown,
                    (run_id, call.call_id, call.tool, call.fingerprint or "", at, outcome, at),
                )
            for call_id in cleared:
                db.execute("DELETE FROM ledger WHERE run_id = ? AND call_id = ? AND outcome IS NULL", (run_id, call_id))
        self._new.pop(run_id, None)
        self._turns.pop(run_id, None)

    # --- conversations ------------------------------------------------------------

    def create_conversation(self, conversation_id: str, principal: Principal, budget: dict[str, Any]) -> None:
        now = self.clock()
        with self._transaction() as db:
            db.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
                (conversation_id, now, now, canonical(principal_dict(principal)), canonical(budget)),
            )

    def load_conversation(self, conversation_id: str) -> StoredConversation:
        """A conversation with its turns' run ids (oldest first) and their usage totals."""
        row = self._db.execute(
            "SELECT principal, budget, created_at, updated_at FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            raise RunNotFound(f"no conversation {conversation_id} in {self.path}")
        turns = self._db.execute(
            "SELECT id, status, meta FROM runs WHERE conversation_id = ? ORDER BY turn", (conversation_id,)
        ).fetchall()
        return conversation(conversation_id, row, turns)

    def list_conversations(self, principal_id: str | None = None, limit: int = 50) -> list[StoredConversation]:
        query = "SELECT id FROM conversations"
        params: tuple[Any, ...] = ()
        if principal_id is not None:
            query += " WHERE json_extract(principal, '$.id') = ?"
            params = (principal_id,)
        rows = self._db.execute(query + " ORDER BY created_at DESC LIMIT ?", (*params, limit)).fetchall()
        return [self.load_conversation(r[0]) for r in rows]

    # --- reading -----------------------------------------------------------------

    def ledger_entry(self, run_id: str, call_id: str) -> LedgerEntry | None:
        row = self._db.execute(
            "SELECT call_id, tool, fingerprint, intent_at, outcome, outcome_at FROM ledger"
            " WHERE run_id = ? AND call_id = ?",
            (run_id, call_id),
        ).fetchone()
        return LedgerEntry(*row) if row else None

    def load(self, run_id: str, *, check: bool = True) -> StoredRun:
        """The run as stored; with ``check`` (the default) only if it passes ``verify``, else ``TamperedRun``.

        Resume, approve, deny and reconcile act on what this returns, so they
        act only on rows the audit chain vouches for.
        """
        with self._snapshot() as db:
            if check and (problems := self.verify(run_id)):
                raise tampered(run_id, problems)
            row = db.execute(
                "SELECT meta, principal, setup, created_at, updated_at, config FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id} in {self.path}")
            messages = db.execute("SELECT seq, body FROM messages WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
            executed = db.execute(
                "SELECT call_id, fingerprint, outcome FROM ledger WHERE run_id = ? AND outcome IS NOT NULL", (run_id,)
            ).fetchall()
            inherited = self._inherited(run_id)
        return stored_run(run_id, row, messages, executed, inherited)

    def resolve(self, prefix: str) -> str:
        """The id of the one run whose id starts with ``prefix`` (a whole id is its own prefix).

        Raises ``RunNotFound`` when no run matches and ``AmbiguousRun``, naming
        the candidates, when several do.
        """
        if not prefix:
            raise RunNotFound(f"no run with an empty id in {self.path}")
        # A range over the primary key: the index answers it, and no character of the prefix is a wildcard.
        found = [
            row[0]
            for row in self._db.execute(
                "SELECT id FROM runs WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
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
        for run_id in run_ids:
            row = self._db.execute(
                "SELECT m.body FROM runs r JOIN messages m ON m.run_id = r.id"
                " WHERE r.id = ? AND json_extract(r.setup, '$.log_content') = 1"
                " AND json_extract(m.body, '$.role') = 'user' ORDER BY m.seq LIMIT 1",
                (run_id,),
            ).fetchone()
            if row is not None:
                content = decode(row[0], run_id, "its first user message").get("content")
                if isinstance(content, str):
                    prompts[run_id] = content
        return prompts

    def _inherited(self, run_id: str) -> list[Any]:
        """The messages a conversation's turn inherits: those its earlier turns stored, in order."""
        row = self._db.execute("SELECT conversation_id, turn, history FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None or not row[2]:
            return []
        rows = self._db.execute(
            "SELECT m.run_id, m.seq, m.body FROM messages m JOIN runs r ON m.run_id = r.id"
            " WHERE r.conversation_id = ? AND r.turn < ? ORDER BY r.turn, m.seq",
            (row[0], row[1]),
        ).fetchall()
        return inherited_messages(run_id, row[2], rows)

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
            "SELECT id, status, json_extract(principal, '$.id'), created_at, updated_at, meta, conversation_id, turn,"
            " json_extract(setup, '$.engine') FROM runs"
        )
        where: list[str] = []
        params: tuple[Any, ...] = ()
        if principal_id is not None:
            where.append("json_extract(principal, '$.id') = ?")
            params += (principal_id,)
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            params += tuple(statuses)
        if unleased:
            where.append("(lease_owner IS NULL OR lease_until <= ?)")
            params += (self.clock(),)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY " + ("updated_at ASC" if oldest_update_first else "created_at DESC") + " LIMIT ?"
        rows = self._db.execute(query, (*params, limit)).fetchall()
        return [summary(r) for r in rows]

    def events(self, run_id: str, *, after: int = 0) -> list[StoredEvent]:
        """The run's audit events in order; only those numbered above ``after``, when given."""
        return [
            StoredEvent(seq, at, kind, step, decode(data, run_id, f"event {seq}"))
            for seq, at, kind, step, data in self._db.execute(
                "SELECT seq, at, kind, step, data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq",
                (run_id, after),
            )
        ]

    def ledger(self, run_id: str) -> list[LedgerEntry]:
        return [
            LedgerEntry(*row)
            for row in self._db.execute(
                "SELECT call_id, tool, fingerprint, intent_at, outcome, outcome_at FROM ledger"
                " WHERE run_id = ? ORDER BY intent_at",
                (run_id,),
            )
        ]

    def verify(self, run_id: str) -> list[str]:
        """Every break in what vouches for the run: its seal, its two hash chains and its ledger; empty when intact."""
        head = self._db.execute(
            f"SELECT {', '.join(SEALED_COLUMNS)}, seal FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        if head is None:
            raise RunNotFound(f"no run {run_id} in {self.path}")
        events = self._db.execute(
            "SELECT seq, at, kind, step, data, prev_hash, hash FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        )
        messages = self._db.execute("SELECT seq, body, hash FROM messages WHERE run_id = ? ORDER BY seq", (run_id,))
        ledger = self._db.execute(
            "SELECT call_id, tool, fingerprint, intent_at, outcome, outcome_at FROM ledger WHERE run_id = ?", (run_id,)
        )
        return audit_problems(self.audit_key, run_id, head[:-1], head[-1], events, messages, ledger)

    def messages(self, run_id: str) -> list[Message]:
        return [
            Message.from_dict(decode(body, run_id, f"message {seq}"))
            for seq, body in self._db.execute("SELECT seq, body FROM messages WHERE run_id = ? ORDER BY seq", (run_id,))
        ]

    def counts(self, run_id: str) -> tuple[int, int]:
        """How many events and messages a run has stored."""
        events = self._db.execute("SELECT count(*) FROM events WHERE run_id = ?", (run_id,)).fetchone()[0]
        messages = self._db.execute("SELECT count(*) FROM messages WHERE run_id = ?", (run_id,)).fetchone()[0]
        return int(events), int(messages)
