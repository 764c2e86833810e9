"""tether.store: durable runs (SQLite by default, PostgreSQL to share), the ledger and the audit log.

    store = open_store()                              # $TETHER_DB, else ~/.local/share/tether/tether.db
    store = open_store("postgresql://db.internal/tether")
    agent = Agent(model, tools, store=store)

Every store is a ``SQLStore`` (``tether.store.sql``) over a dialect; code
that takes one is typed ``RunStore`` (``tether.store.base``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tether.core.errors import AmbiguousRun, LeaseHeld, NoStore, RunNotFound, StoreError, TamperedRun
from tether.core.redact import REDACTED, redact, redact_text
from tether.store.base import RunStore
from tether.store.records import LedgerEntry, RunSummary, StoredConversation, StoredEvent, StoredRun
from tether.store.sql import SQLStore

__all__ = [
    "REDACTED",
    "AmbiguousRun",
    "LeaseHeld",
    "LedgerEntry",
    "NoStore",
    "PostgresStore",
    "RunNotFound",
    "RunStore",
    "RunSummary",
    "SQLStore",
    "SQLiteStore",
    "StoreError",
    "StoredConversation",
    "StoredEvent",
    "StoredRun",
    "TamperedRun",
    "default_path",
    "open_store",
    "redact",
    "redact_text",
]


def default_path() -> Path:
    """``$TETHER_DB``, else ``$XDG_DATA_HOME/tether/tether.db``, else ``~/.local/share/tether/tether.db``."""
    if env := os.environ.get("TETHER_DB"):
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tether" / "tether.db"


def SQLiteStore(path: str | os.PathLike[str] | None = None, *, existing: bool = False, **options: Any) -> SQLStore:
    """The run store in one SQLite file (default ``default_path()``); ``options`` as ``SQLStore`` takes them.

    ``existing``: the file must be there already (a command that reads runs); a path that names nothing is
    ``NoStore`` rather than a new, empty store where a mistyped path points. A name of blank text (``--db ""``,
    ``TETHER_DB=" "``) is a ``StoreError``: it would be the working directory, or a file named by spaces in it.
    """
    from tether.store.dialects.sqlite import SQLiteDialect  # sqlite3 only for a store that uses it

    named = os.fspath(path) if path is not None else str(default_path())
    if not named.strip():
        raise StoreError(
            f"the run store is named by blank text ({named!r}): give a SQLite file or a postgresql:// url "
            "(set TETHER_DB or --db)"
        )
    where = Path(named)
    if existing and str(where) != ":memory:" and not where.exists():
        raise NoStore(f"there is no run store at {where} (set TETHER_DB or --db)")
    try:
        dialect = SQLiteDialect(where)
    except SQLiteDialect.errors as exc:
        raise StoreError(f"cannot open the run store at {where}: {exc} (set TETHER_DB or --db)") from None
    return SQLStore(dialect, **options)


def PostgresStore(url: str, *, pool_size: int = 4, connect_timeout: float = 10.0, **options: Any) -> SQLStore:
    """The shared run store in PostgreSQL (the ``postgres`` extra); ``pool_size`` bounds its connections."""
    try:
        from tether.store.dialects.postgres import PostgresDialect, location
    except ImportError:
        raise StoreError("a postgresql:// run store needs the postgres extra: pip install 'tether[postgres]'") from None
    try:
        dialect = PostgresDialect(url, pool_size=pool_size, connect_timeout=connect_timeout)
    except PostgresDialect.errors as exc:
        raise StoreError(f"cannot open the run store at {location(url)}: {exc} (set TETHER_DB or --db)") from None
    return SQLStore(dialect, **options)


def open_store(db: str | os.PathLike[str] | None = None, *, existing: bool = False, **options: Any) -> SQLStore:
    """The run store ``db`` names, else ``$TETHER_DB``: a ``postgresql://`` url is PostgreSQL (the
    ``postgres`` extra); a ``sqlite:///`` url (SQLAlchemy's: ``sqlite:///relative.db``,
    ``sqlite:////absolute.db``) or a path a SQLite file (default ``~/.local/share/tether/tether.db``).
    Any other url is a ``StoreError``, not a file of that name.

    ``existing``: a SQLite file named here or in ``$TETHER_DB`` must be there already (``SQLiteStore``);
    the default file may be made.
    """
    named = db if db is not None else os.environ.get("TETHER_DB") or None
    target: str | os.PathLike[str] | None = named
    if isinstance(named, str) and "://" in named:
        scheme, _, rest = named.partition("://")
        if scheme.lower() in ("postgresql", "postgres"):
            return PostgresStore(named, **options)
        if scheme.lower() != "sqlite" or not rest.startswith("/") or rest == "/":
            raise StoreError(
                f"{scheme}:// names no run store tether can open: give a SQLite file, sqlite:///FILE or a "
                "postgresql:// url (set TETHER_DB or --db)"
            )
        target = rest[1:]
    return SQLiteStore(target, existing=existing and named is not None, **options)
