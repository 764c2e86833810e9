"""What every run store shares, whatever its database: errors, records, and the rows it writes and checks.

A store (``SQLiteStore``, ``PostgresStore``) runs the SQL; this module
decides what the rows hold. Text is serialized here, events are redacted
and chained here, the run row is sealed here, and the audit of stored rows
(``audit_problems``) and the state rebuilt from them (``state_from_rows``)
are computed here, so both stores write and accept exactly the same rows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.core.budget import RunConfig
from tether.core.errors import AmbiguousRun, LeaseHeld, StoreError, TamperedRun
from tether.core.events import CALL_EXECUTED, INTENT_RECORDED, OUTCOME_RECORDED, RECONCILED, digest
from tether.core.machine import PendingCall, RunState
from tether.core.redact import REDACTED, redact, secret_key
from tether.store.audit import GENESIS, SEALED_COLUMNS, chain_hash, ledger_problems, seal, seal_problem
from tether.tools.context import Principal

DEFAULT_LEASE_SECONDS = 30.0
# The events that log a ledger outcome (a read-only call's whole row), as audit.ledger_problems replays them.
OUTCOME_EVENTS = (OUTCOME_RECORDED, RECONCILED, CALL_EXECUTED)
AMBIGUOUS_SHOWN = 5  # candidates named when a run id prefix matches several runs
# A run id's end, when no id starts with what was given: time-ordered ids share their first digits with the runs
# started around them, and end in random ones. Shorter text finds no run this way.
MIN_SUFFIX = 4
# Event data keys that carry user or model text: kept only with log_content.
CONTENT_KEYS = frozenset({"content", "text", "result", "output", "prompt"})

# An audit event as a driver hands it to ``checkpoint``: (kind, data) or (kind, data, step, at).
LogEvent = tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], int, float]
# One stored event row: (run_id, seq, at, kind, step, data, prev_hash, hash).
EventRow = tuple[str, int, float, str, int, str, str, str]


def omitted(value: object) -> str:
    """What stands in for user or model text that is not logged."""
    return f"<{len(value)} chars>" if isinstance(value, str) else "<omitted>"


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One call's ledger row: its intent (recorded before it runs) and its outcome (after)."""

    call_id: str
    tool: str
    fingerprint: str
    intent_at: float
    outcome: str | None
    outcome_at: float | None
    provenance: str | None = None  # where each sink value was found, as JSON text; None: the call was not traced


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One audit event of a run, as stored."""

    seq: int
    at: float
    kind: str
    step: int
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A run as ``tether runs list`` shows it."""

    run_id: str
    status: str
    principal: str
    created_at: float
    updated_at: float
    steps: int
    progress: dict[str, Any] = field(default_factory=dict, compare=False)  # RunState.progress(), as saved
    conversation_id: str | None = None  # a conversation's turn: which, and its number
    turn: int | None = None
    engine: str = "local"  # what drives it: the local driver, or Temporal workers
    parent_id: str | None = None  # a child run (a sub-agent's): the run whose call started it

    def undecided(self) -> list[PendingCall]:
        """The calls waiting for an approval decision (``RunState.undecided``), without loading the run."""
        pending = [PendingCall.from_dict(p) for p in self.progress.get("pending", ())]
        approvals = dict(self.progress.get("approvals", {}))
        return RunState(self.run_id, RunConfig(), [], pending=pending, approvals=approvals).undecided()


@dataclass(frozen=True, slots=True)
class StoredConversation:
    """A conversation as stored: whose it is, its budget, and its turns (run id and status)."""

    conversation_id: str
    principal: Principal
    budget: dict[str, Any]
    turns: list[tuple[str, str]]  # (run id, status), oldest first
    usage: tuple[int, int]  # input and output tokens over all turns
    created_at: float
    updated_at: float


@dataclass(slots=True)
class StoredRun:
    """A run as stored: its state, its principal, how it was set up, and when."""

    state: RunState
    principal: Principal
    setup: dict[str, Any]
    created_at: float
    updated_at: float
    parent_id: str | None = None  # a child run (a sub-agent's): the run whose call started it


# Made once: ``json.dumps`` with options builds a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
_TEXT = json.JSONEncoder(ensure_ascii=False).encode


def canonical(value: Any) -> str:
    return _CANONICAL(value)


def ledger_provenance(verdict: list[dict[str, Any]] | None) -> str | None:
    """A call's provenance as its ledger row holds it: the JSON of what its ``intent_recorded`` event stores."""
    return None if verdict is None else canonical(redact(verdict))


def decode(text: str, run_id: str, what: str, kind: type | None = None) -> Any:
    """``text`` read as JSON; text that is not JSON, or (given ``kind``) JSON of another type, is a
    ``StoreError`` saying the store was edited."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        raise edited(run_id, what) from None
    if kind is not None and not isinstance(value, kind):
        raise edited(run_id, what)
    return value


def edited(run_id: str, what: str) -> StoreError:
    return StoreError(f"run {run_id}: {what} is not readable; the store was edited (see tether runs verify)")


def _number(value: Any, run_id: str, what: str) -> float:
    """A time column as stored: a number (SQLite keeps text put into a REAL column as text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise edited(run_id, what)
    return float(value)


def principal_dict(principal: Principal) -> dict[str, Any]:
    return {"id": principal.id, "scopes": sorted(principal.scopes), "roles": sorted(principal.roles)}


def principal_from(data: dict[str, Any]) -> Principal:
    return Principal(data["id"], frozenset(data["scopes"]), frozenset(data.get("roles", ())))


def meta_text(state: RunState) -> str:
    # The growing parts live in their own tables. Sealed as the stored text, so no need for sorted keys.
    return _TEXT(state.progress())


def registration(
    state: RunState, principal: Principal, setup: dict[str, Any], log_content: bool
) -> tuple[str, str, str]:
    """A new run's principal, setup and configuration as stored; the setup records ``log_content``."""
    return (
        canonical(principal_dict(principal)),
        canonical(redact({**setup, "log_content": log_content})),
        canonical(state.config.to_dict()),
    )


# A conversation's turn: (conversation id, turn number, messages inherited from earlier turns).
Turn = tuple[str, int, int]
# The columns of a conversation's row that its seal covers: all but the id (sealed on its own).
CONVERSATION_SEALED = ("created_at", "updated_at", "principal", "budget", "turn_count", "turn_hash")


def first_row(
    state: RunState,
    registered: tuple[str, str, str],
    now: float,
    turn: Turn | None = None,
    parent: str | None = None,
) -> tuple[object, ...]:
    """The ``SEALED_COLUMNS`` values of a run's row before its first checkpoint.

    A conversation's turn stores only the messages after the ``history`` it inherits; a child run names its parent.
    """
    principal, setup, config = registered
    conversation_id, number, history = turn or (None, None, 0)
    row = (now, now, state.status.value, principal, setup, config, "{}", history, GENESIS, 0, GENESIS)
    return (*row, conversation_id, number, history, parent)


def message_rows(state: RunState, count: int, last: str) -> tuple[list[tuple[str, int, str, str]], str]:
    """The rows (run_id, seq, body, hash) of the messages after the first ``count``, and the new chain head."""
    rows = []
    for seq in range(count, len(state.messages)):
        body = canonical(state.messages[seq].to_dict())
        last = chain_hash(last, seq, body)
        rows.append((state.run_id, seq, body, last))
    return rows, last


def event_data(data: dict[str, Any], log_content: bool) -> dict[str, Any]:
    """An event's data as stored: secrets redacted, user and model text left out unless asked."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not log_content and key in CONTENT_KEYS and value:
            value = omitted(value)
        elif secret_key(key):
            value = REDACTED
        elif isinstance(value, dict | list | str):
            value = redact(value)
        out[key] = value
    return out


@dataclass(slots=True)
class ChainedEvents:
    rows: list[EventRow]
    count: int
    head: str
    logged_at: dict[tuple[str, str], float]  # (kind, call id) -> when; a ledger write takes that time

    def intent_at(self, call_id: str, now: float) -> float:
        return self.logged_at.get((INTENT_RECORDED, call_id), now)

    def outcome_at(self, call_id: str, now: float) -> float:
        return next((self.logged_at[k, call_id] for k in OUTCOME_EVENTS if (k, call_id) in self.logged_at), now)


def chain_events(
    state: RunState, events: Sequence[LogEvent], count: int, head: str, now: float, log_content: bool
) -> ChainedEvents:
    """The rows of ``events`` appended after ``count`` events ending in ``head``, each linked to the previous."""
    run_id, seq = state.run_id, count
    chained = ChainedEvents([], count, head, {})
    for event in events:
        kind, data = event[0], event[1]
        step, at = (int(event[2]), float(event[3])) if len(event) == 4 else (state.steps, now)
        if (kind in OUTCOME_EVENTS or kind == INTENT_RECORDED) and isinstance(data.get("id"), str):
            chained.logged_at.setdefault((kind, data["id"]), at)
        body = _TEXT(event_data(data, log_content))  # the hash covers this text
        seq += 1
        new_hash = chain_hash(head, run_id, seq, repr(at), kind, step, body)
        chained.rows.append((run_id, seq, at, kind, step, body, head, new_hash))
        head = new_hash
    chained.count, chained.head = seq, head
    return chained


def audit_problems(
    key: str | None,
    run_id: str,
    head: Sequence[object],
    stored_seal: str | None,
    events: Iterable[tuple[int, float, str, int, str, str, str]],
    messages: Iterable[tuple[int, str, str]],
    ledger: Iterable[tuple[str, str, str, float, str | None, float | None, str | None]],
) -> list[str]:
    """Every break in what vouches for a run, from its stored rows; empty when intact.

    ``head`` holds the run row's ``SEALED_COLUMNS`` values; ``events`` are
    (seq, at, kind, step, data, prev_hash, hash) and ``messages`` (seq, body,
    hash), both in seq order; ``ledger`` rows are (call_id, tool,
    fingerprint, intent_at, outcome, outcome_at, provenance).
    """
    sealed = dict(zip(SEALED_COLUMNS, head, strict=True))
    problem = seal_problem(key, run_id, head, stored_seal)
    problems: list[str] = [] if problem is None else [problem]
    last, expected_seq = GENESIS, 1
    logged: list[tuple[int, float, str, str]] = []
    for seq, at, kind, step, data, prev, digest_ in events:
        if seq != expected_seq:
            problems.append(f"event {expected_seq}: missing or out of order (found event {seq})")
        if prev != last:
            problems.append(f"event {seq}: does not follow the previous event (removed or reordered)")
        if chain_hash(prev, run_id, seq, repr(at), kind, step, data) != digest_:
            problems.append(f"event {seq}: edited ({kind})")
        logged.append((seq, at, kind, data))
        last, expected_seq = digest_, seq + 1
    if expected_seq - 1 != sealed["event_count"] or last != sealed["event_hash"]:
        problems.append(f"events: the run records {sealed['event_count']} events, the log ends at {expected_seq - 1}")
    problems += message_problems(sealed, messages)
    stored = {
        call_id: [tool, fingerprint, intent_at, None if outcome is None else digest(outcome), outcome_at, provenance]
        for call_id, tool, fingerprint, intent_at, outcome, outcome_at, provenance in ledger
    }
    return problems + ledger_problems(logged, stored)


def message_problems(sealed: Mapping[str, Any], messages: Iterable[tuple[int, str, str]]) -> list[str]:
    """Every break in a run's transcript: ``messages`` are its (seq, body, hash) rows in seq order, ``sealed`` its
    row's ``SEALED_COLUMNS`` values, whose chain head and count the transcript must end in."""
    problems: list[str] = []
    last, expected = GENESIS, sealed["history"]  # a conversation's turn stores only the messages it added
    for seq, body, digest_ in messages:
        if seq != expected or chain_hash(last, seq, body) != digest_:
            problems.append(f"message {seq}: edited, removed or reordered")
        last, expected = digest_, seq + 1
    if expected != sealed["message_count"] or last != sealed["message_hash"]:
        problems.append(f"messages: the run records {sealed['message_count']} messages, the transcript has {expected}")
    return problems


def transcript_problems(
    key: str | None,
    run_id: str,
    head: Sequence[object],
    stored_seal: str | None,
    messages: Iterable[tuple[int, str, str]],
) -> list[str]:
    """Every break in what vouches for a run's transcript (its row's seal and the chain of its messages), from
    its stored rows as ``audit_problems`` takes them; empty when intact. What a model is sent is checked so."""
    problem = seal_problem(key, run_id, head, stored_seal)
    sealed = dict(zip(SEALED_COLUMNS, head, strict=True))
    return ([] if problem is None else [problem]) + message_problems(sealed, messages)


def tampered(run_id: str, problems: Sequence[str]) -> TamperedRun:
    more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
    return TamperedRun(
        f"run {run_id} fails its audit check ({problems[0]}{more}); nothing of it is acted on"
        f" (see tether runs verify {run_id})"
    )


def stored_run(
    run_id: str,
    row: Sequence[Any],
    messages: Iterable[tuple[int, str]],
    executed: Iterable[tuple[str, str, str]],
    inherited: Sequence[Any] = (),
) -> StoredRun:
    """A run rebuilt from its rows: ``row`` is (meta, principal, setup, created_at, updated_at, config, parent_id),
    ``messages`` (seq, body) in order, ``executed`` the ledger's (call_id, fingerprint, outcome) with outcomes,
    ``inherited`` the decoded messages a conversation's turn takes from its earlier turns."""
    data = decode(row[0], run_id, "its saved state", dict)
    data["run_id"] = run_id
    data["config"] = decode(row[5], run_id, "its configuration", dict)
    data["messages"] = [*inherited, *(decode(body, run_id, f"message {seq}") for seq, body in messages)]
    data["executed"] = {call_id: [fingerprint, outcome] for call_id, fingerprint, outcome in executed}
    try:
        state = RunState.from_dict(data)
    except (KeyError, TypeError, ValueError):
        raise StoreError(f"run {run_id}: its saved state is not readable (see tether runs verify)") from None
    try:
        principal = principal_from(decode(row[1], run_id, "its principal", dict))
    except (KeyError, TypeError, ValueError):
        raise edited(run_id, "its principal") from None
    parent = row[6] if len(row) > 6 else None
    setup = decode(row[2], run_id, "its setup", dict)
    created, updated = _number(row[3], run_id, "its creation time"), _number(row[4], run_id, "its update time")
    return StoredRun(state, principal, setup, created, updated, parent)


def summary(row: Sequence[Any]) -> RunSummary:
    """A ``RunSummary`` from (id, status, principal id, created_at, updated_at, meta, conversation_id, turn,
    the setup's engine, parent_id); a row the store's own writes could not have made is a ``StoreError``."""
    run_id = row[0]
    progress = decode(row[5], run_id, "its saved state", dict)
    steps = progress.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise edited(run_id, "its saved state")
    if not isinstance(row[2], str):
        raise edited(run_id, "its principal")
    created, updated = _number(row[3], run_id, "its creation time"), _number(row[4], run_id, "its update time")
    engine = row[8] or "local"
    return RunSummary(run_id, row[1], row[2], created, updated, steps, progress, row[6], row[7], engine, row[9])


def ambiguous(prefix: str, found: Sequence[str], *, ends: bool = False) -> AmbiguousRun:
    shown = ", ".join(found[:AMBIGUOUS_SHOWN]) + (", ..." if len(found) > AMBIGUOUS_SHOWN else "")
    if ends:
        return AmbiguousRun(f"run id suffix {prefix} is ambiguous: it ends {shown}; give more characters")
    return AmbiguousRun(f"run id prefix {prefix} is ambiguous: it starts {shown}; give more characters")


def lease_conflict(run_id: str, owner: str | None, until: float | None, me: str, now: float) -> LeaseHeld | None:
    """The error for taking a run whose lease another owner holds until after ``now``; None when it is free."""
    if owner in (None, me) or until is None or until <= now:
        return None
    return LeaseHeld(
        f"run {run_id} is being driven by {owner} (lease until {time.ctime(until)}, renewed while it drives)", until
    )


def conversation(conversation_id: str, row: Sequence[Any], turns: Sequence[Sequence[Any]]) -> StoredConversation:
    """A ``StoredConversation`` from its row (principal, budget, created_at, updated_at) and its turns'
    (run id, status, meta) in turn order; usage is summed over the turns' saved states."""
    usage = [0, 0]
    for run_id, _, meta in turns:
        used = decode(meta, run_id, "its saved state").get("usage", [0, 0])
        usage = [usage[0] + used[0], usage[1] + used[1]]
    return StoredConversation(
        conversation_id,
        principal_from(decode(row[0], conversation_id, "its principal")),
        decode(row[1], conversation_id, "its budget"),
        [(t[0], t[1]) for t in turns],
        (usage[0], usage[1]),
        row[2],
        row[3],
    )


def inherited_messages(run_id: str, history: int, rows: Sequence[Sequence[Any]]) -> list[Any]:
    """The first ``history`` messages of a turn's earlier turns, from their (run id, seq, body) rows in order."""
    if len(rows) < history:
        raise StoreError(f"run {run_id}: its conversation's earlier turns are missing (see tether runs verify)")
    return [decode(body, owner, f"message {seq}") for owner, seq, body in rows[:history]]


# --- conversations: a sealed row, and a chain of its turns ----------------------------------


def conversation_seal(key: str | None, conversation_id: str, row: Sequence[object]) -> str:
    """The seal of a conversation's row; ``row`` holds the ``CONVERSATION_SEALED`` values."""
    return seal(key, f"conversation:{conversation_id}", row)


def conversation_seal_problem(
    key: str | None, conversation_id: str, row: Sequence[object], stored: str | None
) -> str | None:
    """What is wrong with a conversation row's seal under ``key``, or None."""
    return seal_problem(
        key,
        f"conversation:{conversation_id}",
        row,
        stored,
        what="conversation",
        covers="principal, budget or the chain of its turns",
    )


def turn_link(head: str, number: int, run_id: str, history: int) -> str:
    """The next head of a conversation's chain of turns: turn ``number`` is run ``run_id``."""
    return chain_hash(head, number, run_id, history)


# One turn's row as ``conversation_problems`` reads it: id, then the run's ``SEALED_COLUMNS``, then its seal.
TURN_COLUMNS = ("id", *SEALED_COLUMNS, "seal")


def conversation_problems(
    key: str | None,
    conversation_id: str,
    row: Sequence[Any],
    turns: Sequence[Sequence[Any]],
) -> list[str]:
    """Every break in what vouches for a conversation; empty when intact.

    ``row`` holds its ``CONVERSATION_SEALED`` values and its seal; ``turns``
    its turns' runs (``TURN_COLUMNS``) in turn order. The row must match its
    seal, and its turns must be what ``turn_problems`` asks, ending in the
    chain head and count the row records.
    """
    sealed = dict(zip(CONVERSATION_SEALED, row[:-1], strict=True))
    problems: list[str] = []
    if problem := conversation_seal_problem(key, conversation_id, row[:-1], row[-1]):
        problems.append(problem)
    found, head = turn_problems(key, sealed["principal"], turns)
    problems += found
    if len(turns) != sealed["turn_count"] or head != sealed["turn_hash"]:
        problems.append(f"conversation: it records {sealed['turn_count']} turns, the runs hold {len(turns)}")
    return problems


def turn_problems(key: str | None, principal: object, turns: Sequence[Sequence[Any]]) -> tuple[list[str], str]:
    """What is wrong with a conversation's turns (``TURN_COLUMNS`` rows, in turn order), and the head of their chain.

    The turns must be numbered 1, 2, … with none missing or added, each
    must match its own seal, act for the conversation's ``principal`` (its
    stored text) and inherit exactly the messages its predecessor ended with.
    """
    owner = _principal_id(principal)
    problems: list[str] = []
    head, messages = GENESIS, 0
    for number, turn in enumerate(turns, start=1):
        run = dict(zip(TURN_COLUMNS, turn, strict=True))
        run_id, at = run["id"], run["turn"]
        if at != number:
            problems.append(f"conversation: turn {number} is missing or out of order (found turn {at})")
        if seal_problem(key, run_id, [run[c] for c in SEALED_COLUMNS], run["seal"]):
            problems.append(f"turn {at} (run {run_id}): its row does not match its seal")
        if _principal_id(run["principal"]) != owner:
            problems.append(f"turn {at} (run {run_id}): acts for another principal than the conversation")
        if run["history"] != messages:
            problems.append(f"turn {at} (run {run_id}): does not follow the messages of the turn before")
        head, messages = turn_link(head, at, run_id, run["history"]), run["message_count"]
    return problems, head


def _principal_id(text: object) -> object:
    try:
        data = json.loads(str(text))
    except ValueError:
        return None
    return data.get("id") if isinstance(data, dict) else None
