"""The SQLite dialect: one file in WAL mode, on one machine.

Transactions are WAL with ``synchronous=NORMAL``: a commit survives the
process being killed (the WAL is in the OS's hands), not a power cut. A
durable commit (the checkpoint carrying a side-effecting call's intent, or
a service's new run before its 202) runs with ``synchronous=FULL``: the WAL
is fsynced before it returns.

Writers take the database's write lock up front (``BEGIN IMMEDIATE``), so a
check-then-write cannot race. Which store drives a run is held by an
open-file-description lock (``F_OFD_SETLK``) on one byte of ``<file>.locks``
chosen by the run id: the kernel drops it when the holder's file is closed,
which its death does (SIGKILL, out of memory; a zombie holds no files), and
it belongs to the open file, not to a pid, so pid reuse, a container's pid
1 or two stores in one process cannot be confused with each other.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import struct
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from tether.store.dialects import Cursor, HeldLocks, lock_key

__all__ = ["FileRunLocks", "SQLiteDialect", "connect", "immediate"]

# Linux's open-file-description locks; elsewhere (macOS) the lease alone says who drives.
_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
_OFD_GETLK: int | None = getattr(fcntl, "F_OFD_GETLK", None)
_FLOCK = "hhqqixxxx"  # struct flock on 64-bit Linux: type, whence, start, len, pid (0 for OFD locks)


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


def _of_a_run_store(path: Path) -> None:
    """Refuse a database of something else before anything changes it: a mistyped ``--db`` must not get the
    store's tables and WAL mode added to another program's file.

    A file with tables is a run store when it has the store's ``schema_migrations`` (version, name,
    applied_at), which the store's first migration makes with its other tables. A table merely named like one
    of the store's (a CI tool's ``runs``, a Rails app's ``schema_migrations``) does not make it one.
    """
    if str(path) == ":memory:" or not path.is_file():
        return
    db = sqlite3.connect(path)  # reading the schema changes nothing
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        columns = {row[1] for row in db.execute("PRAGMA table_info(schema_migrations)")}
    finally:
        db.close()
    if tables and not {"version", "name", "applied_at"} <= columns:
        raise sqlite3.DatabaseError("it is a SQLite database of something else (it holds no run store's tables)")


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


class _Tx:
    """A sqlite3 connection speaking the store's ``Tx``: its own ``?`` placeholders need no translation."""

    __slots__ = ("_db",)

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return self._db.execute(sql, params)


class FileRunLocks(HeldLocks):
    """One byte of ``<database>.locks`` per run, locked with an open-file-description lock.

    The file is opened once per store, so each store is a holder of its own
    (two stores in one process exclude each other as two processes do).
    Without OFD locks (not Linux), or for an in-memory database, nothing is
    locked here and the lease alone decides.
    """

    def __init__(self, database: Path) -> None:
        super().__init__()
        self._fd: int | None = None
        if _OFD_SETLK is not None and str(database) != ":memory:":
            self._fd = os.open(f"{database}.locks", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def _fcntl(self, command: int | None, kind: int, run_id: str) -> int:
        assert self._fd is not None and command is not None
        request = struct.pack(_FLOCK, kind, os.SEEK_SET, lock_key(run_id), 1, 0)
        return int(struct.unpack(_FLOCK, fcntl.fcntl(self._fd, command, request))[0])

    def _take(self, run_id: str) -> bool:
        if self._fd is None:
            return True
        try:
            self._fcntl(_OFD_SETLK, fcntl.F_WRLCK, run_id)
        except OSError:  # EAGAIN/EACCES: another open file (a live driver) has it
            return False
        return True

    def _give(self, run_id: str) -> None:
        if self._fd is not None:
            self._fcntl(_OFD_SETLK, fcntl.F_UNLCK, run_id)

    def held_elsewhere(self, run_ids: Collection[str]) -> set[str]:
        if self._fd is None or _OFD_GETLK is None:
            return set()
        with self._guard:
            return {r for r in run_ids if self._fcntl(_OFD_GETLK, fcntl.F_WRLCK, r) != fcntl.F_UNLCK}

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # drops every lock this store held
            self._fd = None


class SQLiteDialect:
    """A SQLite file (``:memory:`` for a store that lives as long as the process)."""

    name = "sqlite"
    remote = False
    errors: tuple[type[BaseException], ...] = (sqlite3.Error, OSError)
    tokens: ClassVar[dict[str, str]] = {
        "id": "TEXT",
        "real": "REAL",
        "without_rowid": " WITHOUT ROWID",
        "principal_id": "json_extract(principal, '$.id')",
        "same": "IS",  # equal, NULL to NULL included
    }
    for_update = ""  # BEGIN IMMEDIATE holds the database's write lock for the whole transaction

    def __init__(self, path: str | Path | None = None) -> None:
        self.where: Path = Path(path) if path is not None else Path(":memory:")
        _of_a_run_store(self.where)
        self._db = connect(self.where)
        self._wal: int | None = None  # the WAL, opened for ``sync``
        try:
            self.locks = FileRunLocks(self.where)
        except OSError:
            self._db.close()
            raise

    @contextmanager
    def write(self, *, durable: bool = False) -> Iterator[_Tx]:
        with immediate(self._db, durable=durable) as db:
            yield _Tx(db)

    @contextmanager
    def read(self, *, snapshot: bool = False) -> Iterator[_Tx]:
        if not snapshot:
            yield _Tx(self._db)
            return
        self._db.execute("BEGIN")
        try:
            yield _Tx(self._db)
        finally:
            self._db.execute("COMMIT")

    def json_text(self, column: str, key: str) -> str:
        return f"json_extract({column}, '$.{key}')"

    def columns(self, tx: Any, table: str) -> set[str]:
        return {row[1] for row in tx.execute(f"PRAGMA table_info({table})")}

    def lock_migrations(self, tx: Any) -> None:
        pass  # BEGIN IMMEDIATE already keeps every other writer out

    def sync(self) -> None:
        """fsync the WAL: every frame committed so far is on disk, as ``synchronous=FULL`` would have it.

        A frame already checkpointed into the database file is there already:
        SQLite syncs the WAL before a checkpoint and the file after it.
        """
        if str(self.where) == ":memory:":
            return
        if self._wal is None:
            self._wal = os.open(f"{self.where}-wal", os.O_RDONLY | os.O_CLOEXEC)
        os.fsync(self._wal)

    def close(self) -> None:
        self.locks.close()
        if self._wal is not None:
            os.close(self._wal)
            self._wal = None
        self._db.close()
