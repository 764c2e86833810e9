"""The tickets database: users, tickets and comments in one SQLite file (WAL).

Rules of this module:

- Visibility is decided here, in SQL, from a viewer's user id and role:
  a customer sees the tickets they reported, an agent the tickets assigned
  to them, an admin every ticket. A ticket the viewer may not see is
  answered exactly like one that does not exist (``None``), so no caller
  can tell the two apart.
- Every write that a tool makes carries an idempotency key, stored in a
  unique column: the same key twice finds the first row instead of writing
  a second, and a ``reconcile`` hook can ask whether a key took effect.
- Passwords are argon2 hashes; checking one costs the same whether the
  user exists or not.
- sqlite3 errors never escape: opening maps them to ``ConfigurationError``,
  later ones to ``TicketsDBError``.

Each statement or transaction borrows a connection of its own from a small
pool (tools, sign-ins and token checks run in worker threads): a write that
waits for another process's lock holds up only itself, and reads go on
beside it, as WAL allows. Nothing is shared under one lock.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from tether.core.errors import ConfigurationError, TetherError
from tether.store.dialects.sqlite import connect, immediate


class TicketsDBError(TetherError):
    """A tickets database statement failed after the database was opened (the example's own error, a
    ``TetherError`` so the CLI and the service report it as tether's)."""


Role = Literal["customer", "agent", "admin"]
Status = Literal["open", "pending", "closed"]
ROLES: tuple[Role, ...] = get_args(Role)
STATUSES: tuple[Status, ...] = get_args(Status)
TICKET_ID_PATTERN = r"^TICKET-[0-9]{6}$"

DEFAULT_PAGE_SIZE = 10
MAX_IDLE_CONNECTIONS = 8  # kept open for reuse; more are opened while needed, then closed


@dataclass(frozen=True, slots=True)
class User:
    id: str
    username: str
    role: Role


@dataclass(frozen=True, slots=True)
class Comment:
    id: int
    ticket_id: str
    author: str  # username
    body: str
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Ticket:
    id: str
    title: str
    body: str
    status: Status
    reporter: str  # username
    assignee: str | None  # username
    created_at: str
    updated_at: str
    closed_at: str | None

    def to_dict(self, *, with_body: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not with_body:
            del data["body"]
        return data


@dataclass(frozen=True, slots=True)
class TicketPage:
    items: list[Ticket]
    total: int
    page: int
    page_size: int


@dataclass(frozen=True, slots=True)
class CloseResult:
    ticket: Ticket
    changed: bool  # False: it was closed already, nothing was written


_SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    id            TEXT PRIMARY KEY,
    username      TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('customer', 'agent', 'admin')),
    created_at    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tickets (
    id              TEXT PRIMARY KEY CHECK (id GLOB 'TICKET-[0-9][0-9][0-9][0-9][0-9][0-9]'),
    title           TEXT NOT NULL,
    body            TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('open', 'pending', 'closed')),
    reporter        TEXT NOT NULL REFERENCES users(id),
    assignee        TEXT REFERENCES users(id),
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    closed_at       TEXT,
    idempotency_key TEXT UNIQUE,
    close_key       TEXT UNIQUE
);
CREATE INDEX IF NOT EXISTS tickets_reporter ON tickets(reporter, created_at);
CREATE INDEX IF NOT EXISTS tickets_assignee ON tickets(assignee, created_at);
CREATE TABLE IF NOT EXISTS comments (
    id              INTEGER PRIMARY KEY,
    ticket_id       TEXT NOT NULL REFERENCES tickets(id),
    author          TEXT NOT NULL REFERENCES users(id),
    body            TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    idempotency_key TEXT UNIQUE
);
CREATE INDEX IF NOT EXISTS comments_ticket ON comments(ticket_id, id);
"""

# The columns this module reads and writes; a file whose tables lack them is
# some other application's database.
_COLUMNS = {
    "users": {"id", "username", "password_hash", "role", "created_at"},
    "tickets": {
        "id",
        "title",
        "body",
        "status",
        "reporter",
        "assignee",
        "created_at",
        "updated_at",
        "closed_at",
        "idempotency_key",
        "close_key",
    },
    "comments": {"id", "ticket_id", "author", "body", "created_at", "idempotency_key"},
}

_TICKET_SELECT = """
SELECT t.id, t.title, t.body, t.status, r.username, a.username,
       t.created_at, t.updated_at, t.closed_at
FROM tickets t
JOIN users r ON r.id = t.reporter
LEFT JOIN users a ON a.id = t.assignee
"""

_COMMENT_SELECT = """
SELECT c.id, c.ticket_id, u.username, c.body, c.created_at
FROM comments c JOIN users u ON u.id = c.author
"""


def iso(timestamp: float) -> str:
    """A Unix time as the ISO 8601 UTC text stored in every ``*_at`` column."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _visibility(user_id: str, role: str) -> tuple[str, tuple[Any, ...]]:
    """The SQL condition on ``t`` for what ``user_id`` in ``role`` may see."""
    if role == "admin":
        return "1 = 1", ()
    if role == "agent":
        return "t.assignee = ?", (user_id,)
    if role == "customer":
        return "t.reporter = ?", (user_id,)
    return "0 = 1", ()  # an unknown role sees nothing


def _ticket(row: Any) -> Ticket:
    return Ticket(*row)


def _comment(row: Any) -> Comment:
    return Comment(*row)


class TicketsDB:
    """The tickets database at ``path``, created with its schema if missing.

    ``clock`` gives Unix time for the ``*_at`` columns; ``password_hasher``
    is argon2-cffi's ``PasswordHasher`` (its defaults unless given).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], float] = time.time,
        password_hasher: PasswordHasher | None = None,
    ) -> None:
        self.path = Path(path)
        self.clock = clock
        self.hasher = password_hasher or PasswordHasher()
        self._dummy_lock = threading.Lock()
        self._dummy: str | None = None
        self._pool_lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._closed = False
        try:
            self._idle.append(connect(self.path))
        except OSError as exc:
            raise ConfigurationError(f"cannot open the tickets database at {self.path}: {exc}") from None
        except sqlite3.Error as exc:
            raise self._unusable(exc) from None
        try:
            self.create_schema()
        except (sqlite3.Error, TicketsDBError) as exc:
            self.close()
            raise self._unusable(exc) from None

    def _unusable(self, exc: Exception) -> ConfigurationError:
        if isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc):
            return ConfigurationError(f"cannot open the tickets database at {self.path}: {exc}")
        return ConfigurationError(
            f"cannot use {self.path} as the tickets database: {exc} "
            "(is it a SQLite file made by another program, or damaged?)"
        )

    # --- lifecycle -----------------------------------------------------------

    def create_schema(self) -> None:
        """Create the tables if missing; safe to call any number of times."""
        with self._write() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            for table, wanted in _COLUMNS.items():
                have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                if missing := wanted - have:
                    raise TicketsDBError(f"table {table} lacks column(s) {', '.join(sorted(missing))}")

    def close(self) -> None:
        """Close the connections; one in use now is closed when its statement is done."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()

    def __enter__(self) -> TicketsDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """A connection for the caller alone while the block runs, from the pool or new."""
        with self._pool_lock:
            if self._closed:
                raise TicketsDBError(f"tickets database {self.path} is closed")
            db = self._idle.pop() if self._idle else None
        if db is None:
            try:
                db = connect(self.path)
            except OSError as exc:
                raise TicketsDBError(f"tickets database {self.path}: {exc}") from None
        broken = False
        try:
            yield db
        except sqlite3.Error:
            broken = True  # it may be in any state: never hand it out again
            raise
        finally:
            with self._pool_lock:
                keep = not broken and not self._closed and len(self._idle) < MAX_IDLE_CONNECTIONS
                if keep:
                    self._idle.append(db)
            if not keep:
                db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front so check-then-insert cannot race."""
        try:
            with self._connection() as conn, immediate(conn) as db:
                yield db
        except sqlite3.Error as exc:
            raise TicketsDBError(f"tickets database {self.path}: {exc}") from None

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        try:
            with self._connection() as db:
                return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise TicketsDBError(f"tickets database {self.path}: {exc}") from None

    def _now(self) -> str:
        return iso(self.clock())

    # --- users ---------------------------------------------------------------

    def create_user(self, username: str, password: str, role: Role, *, user_id: str | None = None) -> User:
        """Add a user with an argon2 hash of ``password``; ``user_id`` defaults to ``user-<username>``."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        user = User(user_id or f"user-{username}", username, role)
        password_hash = self.hasher.hash(password)
        with self._write() as db:
            db.execute(
                "INSERT INTO users (id, username, password_hash, role, created_at) VALUES (?, ?, ?, ?, ?)",
                (user.id, user.username, password_hash, user.role, self._now()),
            )
        return user

    def get_user(self, user_id: str) -> User | None:
        rows = self._read("SELECT id, username, role FROM users WHERE id = ?", (user_id,))
        return User(*rows[0]) if rows else None

    def get_user_by_username(self, username: str) -> User | None:
        rows = self._read("SELECT id, username, role FROM users WHERE username = ?", (username,))
        return User(*rows[0]) if rows else None

    def verify_password(self, username: str, password: str) -> User | None:
        """The user if ``password`` is theirs, else ``None``.

        An unknown username is checked against a dummy hash, so the answer
        takes as long as for a known user with a wrong password.
        """
        dummy = self._dummy_hash()
        rows = self._read("SELECT id, username, role, password_hash FROM users WHERE username = ?", (username,))
        stored = rows[0][3] if rows else dummy
        try:
            self.hasher.verify(stored, password)
        except (VerificationError, InvalidHashError):
            return None
        if not rows:  # pragma: no cover - the dummy's password is random
            return None
        return User(rows[0][0], rows[0][1], rows[0][2])

    def _dummy_hash(self) -> str:
        # Made on the first check, known user or not, so that cost reveals nothing either.
        with self._dummy_lock:
            if self._dummy is None:
                self._dummy = self.hasher.hash(secrets.token_urlsafe(16))
            return self._dummy

    # --- reading tickets -----------------------------------------------------

    def visible_ticket(self, user_id: str, role: str, ticket_id: str) -> Ticket | None:
        """The ticket if it exists and ``user_id`` in ``role`` may see it, else ``None``."""
        condition, params = _visibility(user_id, role)
        rows = self._read(f"{_TICKET_SELECT} WHERE t.id = ? AND {condition}", (ticket_id, *params))
        return _ticket(rows[0]) if rows else None

    def list_visible(
        self,
        user_id: str,
        role: str,
        *,
        status: Status | None = None,
        page: int = 1,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> TicketPage:
        """One page of the tickets the viewer may see, newest first."""
        if page < 1 or page_size < 1:
            raise ValueError("page and page_size start at 1")
        condition, params = _visibility(user_id, role)
        if status is not None:
            condition += " AND t.status = ?"
            params = (*params, status)
        total = self._read(f"SELECT COUNT(*) FROM tickets t WHERE {condition}", params)[0][0]
        rows = self._read(
            f"{_TICKET_SELECT} WHERE {condition} ORDER BY t.created_at DESC, t.id DESC LIMIT ? OFFSET ?",
            (*params, page_size, (page - 1) * page_size),
        )
        return TicketPage([_ticket(r) for r in rows], int(total), page, page_size)

    def comments(self, ticket_id: str) -> list[Comment]:
        """A ticket's comments, oldest first. The caller has checked visibility."""
        rows = self._read(f"{_COMMENT_SELECT} WHERE c.ticket_id = ? ORDER BY c.id", (ticket_id,))
        return [_comment(r) for r in rows]

    def ticket_by_key(self, idempotency_key: str) -> Ticket | None:
        """The ticket created with ``idempotency_key``, if any."""
        rows = self._read(f"{_TICKET_SELECT} WHERE t.idempotency_key = ?", (idempotency_key,))
        return _ticket(rows[0]) if rows else None

    def ticket_closed_by_key(self, idempotency_key: str) -> Ticket | None:
        """The ticket whose close was made with ``idempotency_key``, if any."""
        rows = self._read(f"{_TICKET_SELECT} WHERE t.close_key = ?", (idempotency_key,))
        return _ticket(rows[0]) if rows else None

    def comment_by_key(self, idempotency_key: str) -> Comment | None:
        """The comment added with ``idempotency_key``, if any."""
        rows = self._read(f"{_COMMENT_SELECT} WHERE c.idempotency_key = ?", (idempotency_key,))
        return _comment(rows[0]) if rows else None

    # --- writing tickets -----------------------------------------------------

    def create_ticket(
        self,
        reporter: str,
        title: str,
        body: str,
        *,
        assignee: str | None = None,
        idempotency_key: str | None = None,
    ) -> Ticket:
        """Open a ticket reported by user id ``reporter``.

        With an ``idempotency_key`` already used by this reporter, the ticket
        made then is returned and nothing is written.
        """
        with self._write() as db:
            if idempotency_key is not None:
                found = db.execute(
                    "SELECT id, reporter FROM tickets WHERE idempotency_key = ?", (idempotency_key,)
                ).fetchone()
                if found is not None:
                    if found[1] != reporter:
                        raise TicketsDBError("this idempotency key was used by another user")
                    ticket_id = found[0]
                    return _ticket(db.execute(f"{_TICKET_SELECT} WHERE t.id = ?", (ticket_id,)).fetchone())
            ticket_id = self._new_ticket_id(db)
            now = self._now()
            try:
                db.execute(
                    "INSERT INTO tickets (id, title, body, status, reporter, assignee, created_at, updated_at,"
                    " idempotency_key) VALUES (?, ?, ?, 'open', ?, ?, ?, ?, ?)",
                    (ticket_id, title, body, reporter, assignee, now, now, idempotency_key),
                )
            except sqlite3.IntegrityError as exc:  # a reporter or assignee that is no user
                raise TicketsDBError(f"cannot create the ticket: {exc}") from None
            return _ticket(db.execute(f"{_TICKET_SELECT} WHERE t.id = ?", (ticket_id,)).fetchone())

    def _new_ticket_id(self, db: sqlite3.Connection) -> str:
        # Random rather than sequential: an id must not tell how many tickets exist.
        while True:
            candidate = f"TICKET-{secrets.randbelow(900_000) + 100_000:06d}"
            if db.execute("SELECT 1 FROM tickets WHERE id = ?", (candidate,)).fetchone() is None:
                return candidate

    def add_comment(
        self,
        user_id: str,
        role: str,
        ticket_id: str,
        body: str,
        *,
        idempotency_key: str | None = None,
    ) -> Comment | None:
        """Comment on a ticket the viewer may see; ``None`` if they may not (or it does not exist)."""
        condition, params = _visibility(user_id, role)
        with self._write() as db:
            if db.execute(f"SELECT 1 FROM tickets t WHERE t.id = ? AND {condition}", (ticket_id, *params)).fetchone():
                if idempotency_key is not None:
                    found = db.execute(
                        "SELECT id, author FROM comments WHERE idempotency_key = ?", (idempotency_key,)
                    ).fetchone()
                    if found is not None:
                        if found[1] != user_id:
                            raise TicketsDBError("this idempotency key was used by another user")
                        return _comment(db.execute(f"{_COMMENT_SELECT} WHERE c.id = ?", (found[0],)).fetchone())
                now = self._now()
                try:
                    cursor = db.execute(
                        "INSERT INTO comments (ticket_id, author, body, created_at, idempotency_key)"
                        " VALUES (?, ?, ?, ?, ?)",
                        (ticket_id, user_id, body, now, idempotency_key),
                    )
                except sqlite3.IntegrityError as exc:  # an author that is no user
                    raise TicketsDBError(f"cannot add the comment: {exc}") from None
                db.execute("UPDATE tickets SET updated_at = ? WHERE id = ?", (now, ticket_id))
                return _comment(db.execute(f"{_COMMENT_SELECT} WHERE c.id = ?", (cursor.lastrowid,)).fetchone())
        return None

    def close_ticket(
        self,
        user_id: str,
        role: str,
        ticket_id: str,
        *,
        idempotency_key: str | None = None,
    ) -> CloseResult | None:
        """Close a ticket the viewer may see; ``None`` if they may not (or it does not exist).

        Closing a closed ticket writes nothing and reports ``changed=False``,
        unless it was closed with this same ``idempotency_key``: a retry then
        gets the first answer again.
        """
        condition, params = _visibility(user_id, role)
        with self._write() as db:
            row = db.execute(
                f"SELECT t.status, t.close_key FROM tickets t WHERE t.id = ? AND {condition}", (ticket_id, *params)
            ).fetchone()
            if row is None:
                return None
            status, close_key = row
            changed = status != "closed"
            if changed:
                now = self._now()
                db.execute(
                    "UPDATE tickets SET status = 'closed', closed_at = ?, updated_at = ?, close_key = ? WHERE id = ?",
                    (now, now, idempotency_key, ticket_id),
                )
            elif idempotency_key is not None and close_key == idempotency_key:
                changed = True
            ticket = _ticket(db.execute(f"{_TICKET_SELECT} WHERE t.id = ?", (ticket_id,)).fetchone())
            return CloseResult(ticket, changed)


def verify_password(db: TicketsDB, username: str, password: str) -> User | None:
    """``db.verify_password(username, password)``, as the contract spells it."""
    return db.verify_password(username, password)
