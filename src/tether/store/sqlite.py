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
  without an outcome is an unknown outcome, never re-run blindly.
- A lease (owner, expiry) so that one driver at a time drives a run.

Transactions are WAL with ``synchronous=NORMAL``: a commit survives the
process being killed (the WAL is in the OS's hands), not a power cut.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.core.budget import RunConfig
from tether.core.errors import TetherError
from tether.core.machine import PendingCall, RunState
from tether.core.messages import Message
from tether.store.redact import REDACTED, SECRET_KEY, redact
from tether.tools.context import Principal

DEFAULT_LEASE_SECONDS = 30.0
GENESIS = "0" * 64
# Event data keys that carry user or model text: kept only with log_content.
CONTENT_KEYS = frozenset({"content", "text", "result", "output", "prompt"})


class StoreError(TetherError):
    exit_code = 3


class RunNotFound(StoreError):
    pass


class LeaseHeld(StoreError):
    exit_code = 5


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
        pragmas = (
            "journal_mode=WAL",
            "synchronous=NORMAL",
            "busy_timeout=5000",
            "foreign_keys=ON",
            "wal_autocheckpoint=4000",
        )
        for pragma in pragmas:
            db.execute(f"PRAGMA {pragma}")
    except sqlite3.Error:
        db.close()
        raise
    return db


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, its lock taken up front so that check-then-write cannot race.

    Rolled back on any exception; ``sqlite3.Error`` is left for the caller to map.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def chain_hash(prev: str, *fields: object) -> str:
    """The next link: the previous hash and this row's stored fields, as text."""
    text = "\x1f".join([prev, *map(str, fields)])
    return hashlib.sha256(text.encode()).hexdigest()


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
        default = _canonical(RunConfig().to_dict()).replace("'", "''")
        db.execute(f"ALTER TABLE runs ADD COLUMN config TEXT NOT NULL DEFAULT '{default}'")


def _m3_conversations(db: sqlite3.Connection) -> None:
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


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_m1_initial, _m2_run_config, _m3_conversations]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    call_id: str
    tool: str
    fingerprint: str
    intent_at: float
    outcome: str | None
    outcome_at: float | None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    seq: int
    at: float
    kind: str
    step: int
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunSummary:
    run_id: str
    status: str
    principal: str
    created_at: float
    updated_at: float
    steps: int
    conversation_id: str | None = None  # a conversation's turn: which, and its number
    turn: int | None = None


@dataclass(frozen=True, slots=True)
class StoredConversation:
    conversation_id: str
    principal: Principal
    budget: dict[str, Any]
    turns: list[tuple[str, str]]  # (run id, status), oldest first
    usage: tuple[int, int]  # input and output tokens over all turns
    created_at: float
    updated_at: float


@dataclass(slots=True)
class StoredRun:
    state: RunState
    principal: Principal
    setup: dict[str, Any]
    created_at: float
    updated_at: float


def _decode(text: str, run_id: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise StoreError(
            f"run {run_id}: {what} is not readable; the store was edited (see tether runs verify)"
        ) from None


def _principal_dict(principal: Principal) -> dict[str, Any]:
    return {"id": principal.id, "scopes": sorted(principal.scopes), "roles": sorted(principal.roles)}


def _principal(data: dict[str, Any]) -> Principal:
    return Principal(data["id"], frozenset(data["scopes"]), frozenset(data.get("roles", ())))


def _meta(state: RunState) -> str:
    # The growing parts live in their own tables. Not hashed, so no need for sorted keys.
    return json.dumps(state.progress(), ensure_ascii=False)


class SQLiteStore:
    """Runs, their transcripts, audit events and the execution ledger.

    Example::

        store = SQLiteStore()                       # ~/.local/share/tether/tether.db
        agent = Agent(model, tools, store=store)
        result = await agent.run("...")             # checkpointed after every event
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        log_content: bool = False,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.log_content = log_content
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        try:
            self._db = connect(self.path)
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the run store at {self.path}: {exc} (set TETHER_DB or --db)") from None
        # Per run: how many messages and events are stored, and the last hashes.
        self._tails: dict[str, tuple[int, str, int, str]] = {}
        self._new: dict[str, tuple[str, str, str]] = {}  # runs registered but not yet written
        self._turns: dict[str, tuple[str, int, int]] = {}  # new runs that are turns: conversation, turn, history

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        try:
            with immediate(self._db) as db:
                try:
                    yield db
                except BaseException:
                    self._tails.clear()  # cached tails may describe rows that are being rolled back
                    raise
        except sqlite3.Error as exc:
            raise StoreError(f"run store {self.path}: {exc}") from None

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
        conversation's turn: only the messages after those are stored with this run.
        """
        if turn is not None:
            self._turns[state.run_id] = turn
        self._new[state.run_id] = (
            _canonical(_principal_dict(principal)),
            _canonical(redact(setup)),
            _canonical(state.config.to_dict()),
        )

    def _insert_run(self, db: sqlite3.Connection, state: RunState, now: float) -> None:
        principal, setup, config = self._new[state.run_id]  # forgotten once the transaction commits
        db.execute(
            "INSERT INTO runs (id, created_at, updated_at, status, principal, setup, config, meta, message_hash,"
            " event_hash, lease_owner, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                state.run_id,
                now,
                now,
                state.status.value,
                principal,
                setup,
                config,
                "{}",
                GENESIS,
                GENESIS,
                self.owner,
                now + self.lease_seconds,
            ),
        )
        self._tails[state.run_id] = (0, GENESIS, 0, GENESIS)
        turn = self._turns.get(state.run_id)  # forgotten once the transaction commits
        if turn is not None:
            db.execute("UPDATE runs SET conversation_id = ?, turn = ?, history = ? WHERE id = ?", (*turn, state.run_id))
            self._tails[state.run_id] = (turn[2], GENESIS, 0, GENESIS)

    def acquire(self, run_id: str) -> None:
        """Take the lease on ``run_id`` or raise ``LeaseHeld``."""
        now = self.clock()
        with self._transaction() as db:
            row = db.execute("SELECT lease_owner, lease_until FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id} in {self.path}")
            owner, until = row
            if owner not in (None, self.owner) and _holds(owner, until, now):
                raise LeaseHeld(f"run {run_id} is being driven by {owner} (lease until {time.ctime(until or now)})")
            db.execute(
                "UPDATE runs SET lease_owner = ?, lease_until = ? WHERE id = ?",
                (self.owner, now + self.lease_seconds, run_id),
            )
        self._tails.pop(run_id, None)

    def renew(self, run_id: str) -> None:
        """Extend this process's lease (a driver does so while a long tool runs)."""
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

    def _tail(self, db: sqlite3.Connection, run_id: str) -> tuple[int, str, int, str]:
        tail = self._tails.get(run_id)
        if tail is None:
            row = db.execute(
                "SELECT message_count, message_hash, event_count, event_hash FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id} in {self.path}")
            tail = self._tails[run_id] = (row[0], row[1], row[2], row[3])
        return tail

    # --- checkpoints -----------------------------------------------------------------

    def _append_messages(self, db: sqlite3.Connection, state: RunState) -> tuple[int, str]:
        """Insert the messages not stored yet; the new count and last hash."""
        count, last, _, _ = self._tail(db, state.run_id)
        rows = []
        for seq in range(count, len(state.messages)):
            body = _canonical(state.messages[seq].to_dict())
            last = chain_hash(last, seq, body)
            rows.append((state.run_id, seq, body, last))
        if rows:
            db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?)", rows)
        return len(state.messages), last

    def _event_data(self, data: dict[str, Any]) -> dict[str, Any]:
        """An event's data as stored: secrets redacted, user and model text left out unless asked."""
        out: dict[str, Any] = {}
        for key, value in data.items():
            if not self.log_content and key in CONTENT_KEYS and value:
                value = f"<{len(value)} chars>" if isinstance(value, str) else "<omitted>"
            elif SECRET_KEY.search(key):
                value = REDACTED
            elif isinstance(value, dict | list | str):
                value = redact(value)
            out[key] = value
        return out

    def checkpoint(
        self,
        state: RunState,
        events: Sequence[tuple[str, dict[str, Any]]] = (),
        outcomes: Sequence[tuple[PendingCall, str]] = (),
        *,
        release: bool = False,
    ) -> None:
        """Save the state, append audit events and executed calls' outcomes, in one transaction.

        ``release`` lets go of the lease in the same transaction.
        """
        now = self.clock()
        with self._transaction() as db:
            if state.run_id in self._new:
                self._insert_run(db, state, now)
            count, message_hash = self._append_messages(db, state)
            _, _, seq, event_hash = self._tails[state.run_id]
            rows = []
            for kind, data in events:
                body = json.dumps(self._event_data(data), ensure_ascii=False)  # the hash covers this text
                seq += 1
                new_hash = chain_hash(event_hash, state.run_id, seq, repr(now), kind, state.steps, body)
                rows.append((state.run_id, seq, now, kind, state.steps, body, event_hash, new_hash))
                event_hash = new_hash
            updated = db.execute(
                "UPDATE runs SET updated_at = ?, status = ?, meta = ?, message_count = ?, message_hash = ?,"
                " event_count = ?, event_hash = ?, lease_owner = ?, lease_until = ? WHERE id = ? AND lease_owner = ?",
                (
                    now,
                    state.status.value,
                    _meta(state),
                    count,
                    message_hash,
                    seq,
                    event_hash,
                    None if release else self.owner,
                    None if release else now + self.lease_seconds,
                    state.run_id,
                    self.owner,
                ),
            )
            if updated.rowcount != 1:
                raise LeaseHeld(f"run {state.run_id}: this process no longer holds its lease")
            if rows:
                db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            for call, outcome in outcomes:
                self._write_outcome(db, state.run_id, call, outcome, now)
            self._tails[state.run_id] = (count, message_hash, seq, event_hash)
        self._new.pop(state.run_id, None)
        self._turns.pop(state.run_id, None)

    # --- conversations ------------------------------------------------------------

    def create_conversation(self, conversation_id: str, principal: Principal, budget: dict[str, Any]) -> None:
        now = self.clock()
        with self._transaction() as db:
            db.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
                (conversation_id, now, now, _canonical(_principal_dict(principal)), _canonical(budget)),
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
        usage = [0, 0]
        for run_id, _, meta in turns:
            used = _decode(meta, run_id, "its saved state").get("usage", [0, 0])
            usage = [usage[0] + used[0], usage[1] + used[1]]
        return StoredConversation(
            conversation_id,
            _principal(_decode(row[0], conversation_id, "its principal")),
            _decode(row[1], conversation_id, "its budget"),
            [(r[0], r[1]) for r in turns],
            (usage[0], usage[1]),
            row[2],
            row[3],
        )

    def list_conversations(self, principal_id: str | None = None, limit: int = 50) -> list[StoredConversation]:
        query = "SELECT id FROM conversations"
        params: tuple[Any, ...] = ()
        if principal_id is not None:
            query += " WHERE json_extract(principal, '$.id') = ?"
            params = (principal_id,)
        rows = self._db.execute(query + " ORDER BY created_at DESC LIMIT ?", (*params, limit)).fetchall()
        return [self.load_conversation(r[0]) for r in rows]

    # --- the execution ledger ----------------------------------------------------

    def record_intent(self, run_id: str, call: PendingCall) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO ledger (run_id, call_id, tool, fingerprint, intent_at) VALUES (?, ?, ?, ?, ?)",
                (run_id, call.call_id, call.tool, call.fingerprint or "", self.clock()),
            )

    def record_outcome(self, run_id: str, call: PendingCall, outcome: str) -> None:
        """The result of an executed call, committed now (an intent row is created if there is none)."""
        with self._transaction() as db:
            self._write_outcome(db, run_id, call, outcome, self.clock())

    def _write_outcome(self, db: sqlite3.Connection, run_id: str, call: PendingCall, outcome: str, now: float) -> None:
        # A side effect's recorded outcome is final; a read-only call run again on resume replaces its own.
        only_if_unknown = "" if call.read_only else " WHERE outcome IS NULL"
        db.execute(
            "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, call_id) DO UPDATE"
            " SET outcome = excluded.outcome, outcome_at = excluded.outcome_at" + only_if_unknown,
            (run_id, call.call_id, call.tool, call.fingerprint or "", now, outcome, now),
        )

    def clear_intent(self, run_id: str, call_id: str) -> None:
        """A person or a hook established that the call never ran."""
        with self._transaction() as db:
            db.execute("DELETE FROM ledger WHERE run_id = ? AND call_id = ? AND outcome IS NULL", (run_id, call_id))

    def ledger_entry(self, run_id: str, call_id: str) -> LedgerEntry | None:
        row = self._db.execute(
            "SELECT call_id, tool, fingerprint, intent_at, outcome, outcome_at FROM ledger"
            " WHERE run_id = ? AND call_id = ?",
            (run_id, call_id),
        ).fetchone()
        return LedgerEntry(*row) if row else None

    # --- reading -----------------------------------------------------------------

    def load(self, run_id: str) -> StoredRun:
        row = self._db.execute(
            "SELECT meta, principal, setup, created_at, updated_at, config FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id} in {self.path}")
        data = _decode(row[0], run_id, "its saved state")
        data["run_id"] = run_id
        data["config"] = _decode(row[5], run_id, "its configuration")
        data["messages"] = self._inherited(run_id) + [
            _decode(body, run_id, f"message {seq}")
            for seq, body in self._db.execute("SELECT seq, body FROM messages WHERE run_id = ? ORDER BY seq", (run_id,))
        ]
        data["executed"] = {
            call_id: [fingerprint, outcome]
            for call_id, fingerprint, outcome in self._db.execute(
                "SELECT call_id, fingerprint, outcome FROM ledger WHERE run_id = ? AND outcome IS NOT NULL",
                (run_id,),
            )
        }
        try:
            state = RunState.from_dict(data)
        except (KeyError, TypeError, ValueError):
            raise StoreError(f"run {run_id}: its saved state is not readable (see tether runs verify)") from None
        principal = _principal(_decode(row[1], run_id, "its principal"))
        return StoredRun(state, principal, _decode(row[2], run_id, "its setup"), row[3], row[4])

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
        if len(rows) < row[2]:
            raise StoreError(f"run {run_id}: its conversation's earlier turns are missing (see tether runs verify)")
        return [_decode(body, owner, f"message {seq}") for owner, seq, body in rows[: row[2]]]

    def list_runs(
        self, principal_id: str | None = None, limit: int = 50, *, statuses: Collection[str] | None = None
    ) -> list[RunSummary]:
        """Runs, newest first; only a principal's, or only those in ``statuses``, when given."""
        query = (
            "SELECT id, status, json_extract(principal, '$.id'), created_at, updated_at, meta, conversation_id, turn"
            " FROM runs"
        )
        where: list[str] = []
        params: tuple[Any, ...] = ()
        if principal_id is not None:
            where.append("json_extract(principal, '$.id') = ?")
            params += (principal_id,)
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            params += tuple(statuses)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created_at DESC LIMIT ?"
        rows = self._db.execute(query, (*params, limit)).fetchall()
        return [RunSummary(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])["steps"], r[6], r[7]) for r in rows]

    def events(self, run_id: str) -> list[StoredEvent]:
        return [
            StoredEvent(seq, at, kind, step, _decode(data, run_id, f"event {seq}"))
            for seq, at, kind, step, data in self._db.execute(
                "SELECT seq, at, kind, step, data FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
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
        """Every break in the run's hash chains; empty when untouched."""
        head = self._db.execute(
            "SELECT message_count, message_hash, event_count, event_hash FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        if head is None:
            raise RunNotFound(f"no run {run_id} in {self.path}")
        problems: list[str] = []
        last, expected_seq = GENESIS, 1
        for seq, at, kind, step, data, prev, digest in self._db.execute(
            "SELECT seq, at, kind, step, data, prev_hash, hash FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        ):
            if seq != expected_seq:
                problems.append(f"event {expected_seq}: missing or out of order (found event {seq})")
            if prev != last:
                problems.append(f"event {seq}: does not follow the previous event (removed or reordered)")
            if chain_hash(prev, run_id, seq, repr(at), kind, step, data) != digest:
                problems.append(f"event {seq}: edited ({kind})")
            last, expected_seq = digest, seq + 1
        if expected_seq - 1 != head[2] or last != head[3]:
            problems.append(f"events: the run records {head[2]} events, the log ends at {expected_seq - 1}")
        (history,) = self._db.execute("SELECT history FROM runs WHERE id = ?", (run_id,)).fetchone()
        last, expected = GENESIS, history  # a conversation's turn stores only the messages it added
        for seq, body, digest in self._db.execute(
            "SELECT seq, body, hash FROM messages WHERE run_id = ? ORDER BY seq", (run_id,)
        ):
            if seq != expected or chain_hash(last, seq, body) != digest:
                problems.append(f"message {seq}: edited, removed or reordered")
            last, expected = digest, seq + 1
        if expected != head[0] or last != head[1]:
            problems.append(f"messages: the run records {head[0]} messages, the transcript has {expected}")
        return problems + self._verify_ledger(run_id)

    def _verify_ledger(self, run_id: str) -> list[str]:
        """Each recorded outcome must match the digest its (chained) audit event carries."""
        logged: dict[str, str] = {}  # call id -> the digest of its latest logged result
        for (data,) in self._db.execute("SELECT data FROM events WHERE run_id = ? ORDER BY seq", (run_id,)):
            try:
                event = json.loads(data)
            except ValueError:
                continue  # reported above as an edited event
            if isinstance(event, dict) and isinstance(event.get("digest"), str) and "id" in event:
                logged[str(event["id"])] = event["digest"]
        if not logged:
            return []  # a run logged before results carried digests: nothing to compare against
        problems = []
        for call_id, outcome in self._db.execute(
            "SELECT call_id, outcome FROM ledger WHERE run_id = ? AND outcome IS NOT NULL ORDER BY call_id", (run_id,)
        ):
            if logged.get(call_id) != hashlib.sha256(outcome.encode()).hexdigest():
                problems.append(f"ledger: the outcome of call {call_id} does not match the audit log")
        return problems

    def messages(self, run_id: str) -> list[Message]:
        return [
            Message.from_dict(_decode(body, run_id, f"message {seq}"))
            for seq, body in self._db.execute("SELECT seq, body FROM messages WHERE run_id = ? ORDER BY seq", (run_id,))
        ]

    def counts(self, run_id: str) -> tuple[int, int]:
        """How many events and messages a run has stored."""
        events = self._db.execute("SELECT count(*) FROM events WHERE run_id = ?", (run_id,)).fetchone()[0]
        messages = self._db.execute("SELECT count(*) FROM messages WHERE run_id = ?", (run_id,)).fetchone()[0]
        return int(events), int(messages)


def _holds(owner: str, until: float | None, now: float) -> bool:
    """Whether ``owner`` still holds a lease.

    A process on this host holds it exactly as long as it lives, however long
    one tool call takes; for another host only the expiry can tell.
    """
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return until is not None and until > now
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
