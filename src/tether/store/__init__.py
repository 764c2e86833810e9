"""tether.store: durable runs (SQLite by default, PostgreSQL to share), the ledger and the audit log."""

import os
from pathlib import Path
from typing import Any

from tether.store.redact import REDACTED, redact, redact_text
from tether.store.sqlite import (
    AmbiguousRun,
    LeaseHeld,
    LedgerEntry,
    RunNotFound,
    RunSummary,
    SQLiteStore,
    StoredEvent,
    StoredRun,
    StoreError,
    TamperedRun,
    default_path,
)


def open_store(db: str | os.PathLike[str] | None = None, **options: Any) -> Any:
    """The run store ``db`` names, else ``$TETHER_DB``: a ``postgresql://`` url opens a ``PostgresStore``
    (the ``postgres`` extra), anything else is a SQLite file (default ``~/.local/share/tether/tether.db``)."""
    target = db if db is not None else os.environ.get("TETHER_DB") or None
    if isinstance(target, str) and target.startswith(("postgresql://", "postgres://")):
        try:
            from tether.store.postgres import PostgresStore
        except ImportError:
            raise StoreError(
                "a postgresql:// run store needs the postgres extra: pip install 'tether[postgres]'"
            ) from None
        return PostgresStore(target, **options)
    return SQLiteStore(None if target is None else Path(target), **options)


__all__ = [
    "REDACTED",
    "AmbiguousRun",
    "LeaseHeld",
    "LedgerEntry",
    "RunNotFound",
    "RunSummary",
    "SQLiteStore",
    "StoreError",
    "StoredEvent",
    "StoredRun",
    "TamperedRun",
    "default_path",
    "open_store",
    "redact",
    "redact_text",
]
