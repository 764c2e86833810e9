"""The PostgreSQL dialect: one database that several processes and hosts drive runs from.

- Connections come from a pool (``psycopg_pool``, ``pool_size`` of them), so
  one store serves many threads; every write is one transaction.
- Writers to one run are serialized by a row lock (``SELECT ... FOR
  UPDATE`` on the run's row): writes to different runs go on in parallel.
- Which store drives a run is held by a session advisory lock on a
  connection of the store's own: the server releases it the moment that
  connection drops (the process killed, out of memory). The server also
  probes that connection (TCP keepalives), so a host that vanished (a power
  cut, a partition) loses its locks within about half a minute; the lease's
  expiry stays as the last fallback.
- Commits are durable against a crash of the client (the server has them);
  ordinary checkpoints commit with ``synchronous_commit=off`` (a crash of
  the database server may lose the last fraction of a second of them, as a
  power cut may with SQLite), and a durable one with ``synchronous_commit=on``:
  the server has fsynced its WAL before it returns.
- Migrations take an advisory lock, so processes starting together apply
  each one exactly once.

Requires the ``postgres`` extra (``pip install 'tether[postgres]'``: psycopg 3
with its pool). Select it with ``--db postgresql://...`` or ``TETHER_DB``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from tether.core.errors import ConfigurationError
from tether.store.dialects import Cursor, HeldLocks, lock_key

__all__ = ["URL_SCHEMES", "AdvisoryRunLocks", "PostgresDialect", "is_postgres_url", "location"]

URL_SCHEMES = ("postgresql://", "postgres://")
# Any constant: the advisory lock that serializes migrations between processes opening the store together.
MIGRATION_LOCK = 0x7E7E_5702
# How the server finds a vanished client of the lock connection: first probe after 5 s idle, then every
# 5 s, gone after 4 unanswered (about 25 s); ignored on a unix socket, where a dead peer is seen at once.
KEEPALIVE = {"keepalives": "1", "keepalives_idle": "5", "keepalives_interval": "5", "keepalives_count": "4"}
_SERVER_KEEPALIVE = (
    "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 4;"
    " SET tcp_user_timeout = 25000"
)


def is_postgres_url(db: object) -> bool:
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


_TRANSLATED: dict[str, bytes] = {}


def translated(sql: str) -> bytes:
    """The store's ``?`` placeholders as psycopg's ``%s`` (the store's SQL has no other ``?`` or ``%``)."""
    found = _TRANSLATED.get(sql)
    if found is None:
        found = _TRANSLATED[sql] = sql.replace("?", "%s").encode()
    return found


class _Tx:
    __slots__ = ("_db",)

    def __init__(self, db: psycopg.Connection[Any]) -> None:
        self._db = db

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return self._db.execute(translated(sql), params)


class AdvisoryRunLocks(HeldLocks):
    """Session advisory locks, one per run, on one connection this store keeps for them alone."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        super().__init__()
        self._url, self._options = url, options
        self._db: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._db is None or self._db.closed or self._db.broken:
            self._forget()  # a dropped connection took its locks with it
            self._db = psycopg.connect(make_conninfo(self._url, **KEEPALIVE), **self._options)
            self._db.execute(_SERVER_KEEPALIVE.encode())
        return self._db

    def _take(self, run_id: str) -> bool:
        row = self._connection().execute("SELECT pg_try_advisory_lock(%s)", (lock_key(run_id),)).fetchone()
        return row is not None and bool(row[0])

    def _give(self, run_id: str) -> None:
        if self._db is not None and not self._db.closed and not self._db.broken:
            self._db.execute("SELECT pg_advisory_unlock(%s)", (lock_key(run_id),))

    def held_elsewhere(self, run_ids: Collection[str]) -> set[str]:
        keys = {lock_key(r): r for r in run_ids}
        if not keys:
            return set()
        with self._guard:
            # A bigint advisory key shows as its high and low 32 bits; our own session's locks do not count.
            rows = (
                self._connection()
                .execute(
                    "SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks WHERE locktype = 'advisory'"
                    " AND objsubid = 1 AND granted AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database()) AND pid <> pg_backend_pid()"
                )
                .fetchall()
            )
        return {keys[value] for (value,) in rows if value in keys}

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()  # the server lets go of every lock of this session
            self._db = None


def _lazy_commits(db: psycopg.Connection[Any]) -> None:
    """A pool connection's commits do not wait for the server's disk unless a transaction asks
    (``SET LOCAL synchronous_commit TO on``): a durable write, a sync. Set once per connection, it saves the
    other writes a round trip each."""
    db.execute("SET synchronous_commit TO off")


class PostgresDialect:
    """A PostgreSQL database (its url), which any number of processes and hosts share."""

    tokens: ClassVar[dict[str, str]] = {
        "id": 'TEXT COLLATE "C"',  # bytewise, so a range over ids finds a prefix (resolve)
        "real": "DOUBLE PRECISION",
        "without_rowid": "",
        "principal_id": "((principal::jsonb) ->> 'id')",
        "same": "IS NOT DISTINCT FROM",  # equal, NULL to NULL included
    }
    name, remote = "postgres", True
    errors: tuple[type[BaseException], ...] = (psycopg.Error, PoolTimeout)
    for_update = " FOR UPDATE"

    def __init__(self, url: str, *, pool_size: int = 4, connect_timeout: float = 10.0) -> None:
        self.url = url
        self.where = location(url)
        options: dict[str, Any] = {"autocommit": True, "connect_timeout": max(1, round(connect_timeout))}
        try:
            # A first connection of our own: its error says why, where a pool would only time out.
            psycopg.connect(url, **options).close()
        except psycopg.ProgrammingError as exc:
            raise ConfigurationError(f"--db {self.where}: not a PostgreSQL url ({exc})") from None
        self._pool = ConnectionPool(
            url, min_size=1, max_size=pool_size, kwargs=options, configure=_lazy_commits, open=False
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout:
            self._pool.close()
            raise psycopg.OperationalError(f"no connection within {connect_timeout}s") from None
        self.locks = AdvisoryRunLocks(url, options)

    @contextmanager
    def write(self, *, durable: bool = False) -> Iterator[_Tx]:
        with self._pool.connection() as db, db.transaction():
            if durable:
                db.execute("SET LOCAL synchronous_commit TO on")
            yield _Tx(db)

    @contextmanager
    def read(self, *, snapshot: bool = False) -> Iterator[_Tx]:
        with self._pool.connection() as db:
            if not snapshot:
                yield _Tx(db)
                return
            with db.transaction():
                db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                yield _Tx(db)

    def json_text(self, column: str, key: str) -> str:
        return f"(({column}::jsonb) ->> '{key}')"

    def columns(self, tx: Any, table: str) -> set[str]:
        rows = tx.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = ?",
            (table,),
        )
        return {row[0] for row in rows}

    def sync(self) -> None:
        """One transaction committed with ``synchronous_commit=on``: the server flushes its WAL through it,
        and so through every commit made before it (``synchronous_commit=off`` ones included)."""
        with self._pool.connection() as db, db.transaction():
            db.execute("SET LOCAL synchronous_commit TO on")
            db.execute("SELECT txid_current()")  # a transaction id: its commit is a WAL record to flush

    def lock_migrations(self, tx: Any) -> None:
        tx.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

    def close(self) -> None:
        self.locks.close()
        self._pool.close()
