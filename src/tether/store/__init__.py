"""tether.store: durable runs (SQLite by default), the ledger and the audit log."""

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
    "redact",
    "redact_text",
]
