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

from tether.core.errors import AmbiguousRun, LeaseHeld, RunNotFound, StoreError, TamperedRun
from tether.core.redact import REDACTED, redact, redact_text
from tether.store.base import RunStore
from tether.store.records import LedgerEntry, RunSummary, StoredConversation, StoredEvent, StoredRun
from tether.store.sql import SQLStore

__all__ = [
    "REDACTED",
    "AmbiguousRun",
    "LeaseHeld",
    "LedgerEntry",
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


def SQLiteStore(path: str | os.PathLike[str] | None = None, **options: Any) -> SQLStore:
    """The run store in one SQLite file (default ``default_path()``); ``options`` as ``SQLStore`` takes them."""
    from tether.store.dialects.sqlite import SQLiteDialect  # sqlite3 only for a store that uses it

    where = Path(path) if path is not None else default_path()
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


def open_store(db: str | os.PathLike[str] | None = None, **options: Any) -> SQLStore:
    """The run store ``db`` names, else ``$TETHER_DB``: a ``postgresql://`` url is PostgreSQL (the
    ``postgres`` extra), anything else a SQLite file (default ``~/.local/share/tether/tether.db``)."""
    target = db if db is not None else os.environ.get("TETHER_DB") or None
    if isinstance(target, str) and target.startswith(("postgresql://", "postgres://")):
        return PostgresStore(target, **options)
    return SQLiteStore(target, **options)
