"""What a database brings to the one SQL store: connections, transactions, run locks and its words for SQL.

``tether.store.sql.SQLStore`` writes every query once, with ``?``
placeholders and a few ``{tokens}`` in its schema; a dialect connects,
runs transactions the way its database needs, translates the SQL, and
holds the platform lock that says a run is being driven (released by the
operating system or the database when the driver dies):

- ``sqlite``: one file on one machine; WAL, ``BEGIN IMMEDIATE`` as the run
  lock of a transaction, ``synchronous=FULL`` for a durable commit, and an
  open-file-description lock on a byte of ``<file>.locks`` per run.
- ``postgres``: several processes and hosts; a connection pool, ``SELECT
  ... FOR UPDATE`` as the row lock, ``synchronous_commit`` for durability,
  and a session advisory lock per run, on a connection of its own.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

__all__ = ["Cursor", "Dialect", "HeldLocks", "RunLocks", "Tx", "lock_key"]


class Cursor(Protocol):
    """The part of a DB-API cursor the store uses."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Tx(Protocol):
    """One transaction (or, for plain reads, one connection), with SQL in the store's ``?`` style."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...


class RunLocks(Protocol):
    """The platform's locks on runs, one per run, held by this store instance while it drives the run."""

    def try_lock(self, run_id: str) -> bool:
        """Take ``run_id``'s lock at once, or say that a live holder has it (this store's own: True)."""
        ...

    def unlock(self, run_id: str) -> None: ...

    def held_elsewhere(self, run_ids: Collection[str]) -> set[str]:
        """Those of ``run_ids`` whose lock a live holder other than this store has."""
        ...

    def close(self) -> None: ...


def lock_key(run_id: str) -> int:
    """A run's lock as a number: the first 62 bits of its id's SHA-256 (collisions are out of reach)."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "big") >> 2


class HeldLocks:
    """``RunLocks`` with the bookkeeping done: which runs this store holds, one caller at a time.

    A dialect says how to take (``_take``, at once or not at all) and give
    back (``_give``) one run's lock, and whether another holder has one
    (``held_elsewhere``); ``_forget`` is for a dialect whose locks went away
    with their connection.
    """

    def __init__(self) -> None:
        self._held: set[str] = set()
        self._guard = threading.Lock()

    def _take(self, run_id: str) -> bool:
        raise NotImplementedError

    def _give(self, run_id: str) -> None:
        raise NotImplementedError

    def _forget(self) -> None:
        self._held.clear()

    def _close(self) -> None:
        """Let go of every lock at once (close what holds them)."""
        raise NotImplementedError

    def close(self) -> None:
        with self._guard:
            self._close()
            self._forget()

    def try_lock(self, run_id: str) -> bool:
        with self._guard:
            if run_id not in self._held:
                if not self._take(run_id):
                    return False
                self._held.add(run_id)
            return True

    def unlock(self, run_id: str) -> None:
        with self._guard:
            if run_id in self._held:
                self._held.discard(run_id)
                self._give(run_id)


class Dialect(Protocol):
    name: str
    remote: bool  # its calls wait on a network (a driver makes them off the event loop)
    errors: tuple[type[BaseException], ...]  # what its driver raises, mapped to StoreError by the store
    for_update: str  # what a SELECT needs to lock the rows it reads inside a write transaction

    @property
    def tokens(self) -> dict[str, str]:
        """The SQL's words: ``{id}``, ``{real}``, ``{without_rowid}``, ``{principal_id}`` in the schema;
        ``same``, equality that holds for NULL and NULL."""
        ...

    @property
    def where(self) -> Path | str:
        """The database, as shown to people (a file, or a url without its password)."""
        ...

    @property
    def locks(self) -> RunLocks: ...

    def write(self, *, durable: bool = False) -> AbstractContextManager[Tx]:
        """A write transaction; with ``durable`` committed to disk (fsynced) before it returns."""
        ...

    def read(self, *, snapshot: bool = False) -> AbstractContextManager[Tx]:
        """Reads; with ``snapshot`` all of them see one committed state."""
        ...

    def json_text(self, column: str, key: str) -> str:
        """SQL for a JSON text column's string field ``key``."""
        ...

    def columns(self, tx: Tx, table: str) -> set[str]:
        """The names of ``table``'s columns."""
        ...

    def sync(self) -> None:
        """Make every commit made so far durable (called on a thread, for a group of commits at once)."""
        ...

    def lock_migrations(self, tx: Tx) -> None:
        """Inside the migration transaction: keep stores that open together from migrating at once."""
        ...

    def close(self) -> None: ...
