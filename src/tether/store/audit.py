"""What vouches for a stored run: the hash chains, the run row's seal, and the ledger replayed from the events.

Pure functions over stored values (no SQL), used by the SQLite store's
checkpoints, ``verify`` and ``load``:

- ``chain_hash``: one link of the event and message chains.
- ``seal``: the digest of a run's row (``SEALED_COLUMNS``); an HMAC-SHA256
  under ``$TETHER_AUDIT_KEY`` when one is set, which someone who can write
  the file but lacks the key cannot recompute. Without a key every digest is
  plain SHA-256: edits are found unless the editor recomputes them all.
- ``ledger_problems``: the ledger the events say must exist, row by row,
  against the one stored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tether.core.events import CALL_EXECUTED, CALL_VALIDATED, INTENT_RECORDED, OUTCOME_RECORDED, RECONCILED

GENESIS = "0" * 64
_TEXT = json.JSONEncoder(ensure_ascii=False).encode  # made once: json.dumps with options makes one per call
AUDIT_KEY_ENV = "TETHER_AUDIT_KEY"
# The columns of a run's row that its seal covers: all but the id (sealed on its own) and the lease.
SEALED_COLUMNS = (
    "created_at",
    "updated_at",
    "status",
    "principal",
    "setup",
    "config",
    "meta",
    "message_count",
    "message_hash",
    "event_count",
    "event_hash",
    "conversation_id",
    "turn",
    "history",
    "parent_id",
)
KEYED, UNKEYED = "hmac-sha256:", "sha256:"

# One ledger row as compared: [tool, fingerprint, intent_at, outcome digest or None, outcome_at or None,
# provenance as canonical JSON text or None]
LedgerRow = list[Any]


def _canonical(value: Any) -> str | None:
    """A provenance as the ledger holds it (``records.ledger_provenance``), for comparing; None stays None."""
    return None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def chain_hash(prev: str, *fields: object) -> str:
    """The next link: the previous hash and this row's stored fields, as text."""
    text = "\x1f".join([prev, *map(str, fields)])
    return hashlib.sha256(text.encode()).hexdigest()


def seal(key: str | None, run_id: str, row: Sequence[object]) -> str:
    """The seal of a run's row: ``row`` holds the ``SEALED_COLUMNS`` values; an HMAC when there is a key.

    A run with no parent (``parent_id``, the last column, is null: every run
    but a sub-agent's child run) is sealed without it, exactly as runs were
    before child runs existed, so their seals still hold; a child run's seal
    covers its parent, so moving it in (or out of) a tree breaks the seal.
    """
    if len(row) == len(SEALED_COLUMNS) and row[-1] is None:
        row = row[:-1]
    text = _TEXT([run_id, *row]).encode()
    if key:
        return KEYED + hmac.new(key.encode(), text, hashlib.sha256).hexdigest()
    return UNKEYED + hashlib.sha256(text).hexdigest()


def audit_key_from_env() -> str | None:
    """``$TETHER_AUDIT_KEY``, if set and not empty."""
    return os.environ.get(AUDIT_KEY_ENV) or None


def seal_problem(
    key: str | None,
    run_id: str,
    row: Sequence[object],
    stored: str | None,
    *,
    what: str = "run",
    covers: str = "saved state, setup, principal, configuration or chain heads",
) -> str | None:
    """What is wrong with a row's seal under ``key``, or None. ``row`` holds the sealed values (for a run,
    ``SEALED_COLUMNS``); ``what`` names the row and ``covers`` what its seal vouches for, in the message."""
    if stored is None:
        return f"{what}: its row has no seal (recorded before tether sealed {what}s)"
    if stored.startswith(KEYED) and not key:
        return f"{what}: sealed with an audit key; set {AUDIT_KEY_ENV} to verify it"
    if key and not stored.startswith(KEYED):
        return f"{what}: not sealed with {AUDIT_KEY_ENV} (written without the key, or re-sealed by someone without it)"
    if not hmac.compare_digest(stored, seal(key, run_id, row)):
        return f"{what}: its row ({covers}) does not match its seal"
    return None


def ledger_problems(logged: Iterable[tuple[int, float, str, str]], stored: Mapping[str, LedgerRow]) -> list[str]:
    """Replay the ledger writes the events record and compare with the stored ledger, row by row, both ways.

    ``logged`` is the run's events as ``(seq, at, kind, data text)``;
    ``stored`` its ledger by call id, outcomes as digests. Each ledger write
    shares its transaction (and so its time) with the event that logs it:
    ``intent_recorded`` inserts an intent, ``outcome_recorded`` or an executed
    ``reconciled`` sets its outcome, a ``reconciled`` as not executed deletes
    it, and a read-only call's ``call_executed`` writes its row whole.
    """
    problems: list[str] = []
    expected: dict[str, LedgerRow] = {}
    read_only: dict[str, tuple[bool, str]] = {}  # call id -> (read-only?, fingerprint), from its validation
    for seq, at, kind, data in logged:
        try:
            event = json.loads(data)
        except ValueError:
            continue  # reported as an edited event
        call_id = event.get("id") if isinstance(event, dict) else None
        if not isinstance(call_id, str):
            continue
        if kind == CALL_VALIDATED:
            read_only[call_id] = (event.get("read_only") is True, event.get("fingerprint") or "")
        elif kind == INTENT_RECORDED:
            traced = event.get("provenance")
            expected[call_id] = [event.get("tool"), event.get("fingerprint") or "", at, None, None, _canonical(traced)]
        elif kind == OUTCOME_RECORDED or (kind == RECONCILED and event.get("executed") is True):
            row = expected.get(call_id)
            if row is None:
                problems.append(f"event {seq}: an outcome of call {call_id} without a recorded intent")
            elif row[3] is None:
                row[3:5] = [event.get("digest"), at]
        elif kind == RECONCILED:
            expected.pop(call_id, None)
        elif kind == CALL_EXECUTED and read_only.get(call_id, (False, ""))[0]:
            row = expected.setdefault(call_id, [event.get("tool"), read_only[call_id][1], at, None, None, None])
            row[3:5] = [event.get("digest"), at]
    for call_id in sorted(expected.keys() | stored.keys()):
        want, got = expected.get(call_id), stored.get(call_id)
        if got is None:
            problems.append(f"ledger: call {call_id} is missing (the audit log records it)")
        elif want is None:
            problems.append(f"ledger: call {call_id} is not in the audit log")
        elif want[3] != got[3]:
            problems.append(f"ledger: the outcome of call {call_id} does not match the audit log")
        elif want[5] != got[5]:
            problems.append(f"ledger: the provenance of call {call_id} does not match the audit log")
        elif want != got:
            problems.append(f"ledger: call {call_id} does not match the audit log (tool, fingerprint or times)")
    return problems
