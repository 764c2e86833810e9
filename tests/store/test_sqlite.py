"""The embedded run store, against a real SQLite file in ``tmp_path``.

Tampering is done the way an attacker or a careless operator would: raw SQL
on the file, from a second connection, while the store knows nothing of it.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.core.budget import RunConfig
from tether.core.events import CALL_EXECUTED, INTENT_RECORDED, MODEL_REPLIED, OUTCOME_RECORDED, RunEvent
from tether.core.machine import RunState, Status
from tether.core.messages import Message
from tether.drivers.local.durable import reconcile
from tether.drivers.local.runner import Agent
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.store import REDACTED, LeaseHeld, RunNotFound, RunStore, SQLiteStore, StoreError
from tether.store.sql import MIGRATIONS
from tether.tools import Principal, ToolContext, tool

# ------------------------------------------------------------------- helpers


def marker(label: str) -> str:
    """A string that cannot appear anywhere by chance."""
    return f"{label}-{uuid.uuid4().hex}"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture
def stores(db_path: Path) -> Iterator[Callable[..., RunStore]]:
    """Open stores on ``db_path``; all are closed at the end of the test."""
    opened: list[RunStore] = []

    def open_store(**options: Any) -> RunStore:
        store = SQLiteStore(db_path, **options)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection that bypasses the store (autocommit)."""
    return sqlite3.connect(path, isolation_level=None)


def table_text(path: Path, table: str) -> str:
    """Every column of every row of ``table``, as one string to grep."""
    with raw(path) as db:
        return "\n".join(repr(row) for row in db.execute(f"SELECT * FROM {table}"))


def count(path: Path, table: str, run_id: str) -> int:
    with raw(path) as db:
        (n,) = db.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", (run_id,)).fetchone()
    return int(n)


def new_state(run_id: str = "run-1", prompt: str = "hello") -> RunState:
    return RunState(run_id=run_id, config=RunConfig(), messages=[Message("user", prompt)])


def start_run(store: RunStore, state: RunState, principal: Principal | None = None) -> None:
    """Register a run and write its first checkpoint (which takes the lease)."""
    store.create_run(state, principal or Principal("alice"), {})
    store.checkpoint(state)


def dead_pid() -> int:
    """The pid of a local process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


effects: list[tuple[str, Any]] = []


@pytest.fixture(autouse=True)
def _no_effects() -> None:
    effects.clear()


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    effects.append(("lookup", key))
    return f"value of {key}"


@tool
def transfer(amount: int, context: ToolContext) -> dict[str, Any]:
    """Move money (a side effect)."""
    effects.append(("transfer", amount))
    return {"moved": amount, "key": context.idempotency_key}


def two_tool_steps() -> ScriptedModel:
    return ScriptedModel(
        [
            reply_calls(("c1", "lookup", '{"key": "a"}'), ("c2", "transfer", '{"amount": 5}')),
            reply_calls(("c3", "lookup", '{"key": "b"}')),
            reply_text("all done"),
        ]
    )


async def completed_run(store: RunStore) -> str:
    """A finished run with two tool steps, recorded in ``store``."""
    result = await Agent(two_tool_steps(), [lookup, transfer], store=store).run("please move 5")
    assert result.status is Status.COMPLETED, result
    return result.run_id


# ---------------------------------------------------------------- migrations


def test_migrations_are_recorded_and_never_applied_twice(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    with raw(db_path) as db:
        first = db.execute("SELECT version, name, applied_at FROM schema_migrations ORDER BY version").fetchall()
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert [row[0] for row in first] == list(range(1, len(first) + 1))
    assert first[0][1] == "m1_initial"
    assert {"runs", "messages", "events", "ledger", "schema_migrations"} <= tables

    for _ in range(2):
        SQLiteStore(db_path).close()  # re-opening must not fail on "table runs already exists"
    with raw(db_path) as db:
        again = db.execute("SELECT version, name, applied_at FROM schema_migrations ORDER BY version").fetchall()
    assert again == first  # same rows, same applied_at: nothing re-applied


async def test_reopening_keeps_recorded_runs(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    run_id = await completed_run(store)
    store.close()
    reopened = SQLiteStore(db_path)
    try:
        assert reopened.load(run_id).state.status is Status.COMPLETED
        assert reopened.verify(run_id) == []
    finally:
        reopened.close()


def test_wal_mode_is_on(stores: Callable[..., RunStore], db_path: Path) -> None:
    stores()
    with raw(db_path) as db:
        (mode,) = db.execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"


# ----------------------------------------------------------------- checkpoints


async def test_checkpoints_append_messages_and_never_rewrite_them(
    stores: Callable[..., RunStore], db_path: Path
) -> None:
    store = stores()  # creates the tables the triggers guard
    with raw(db_path) as db:
        db.execute("CREATE TRIGGER no_update BEFORE UPDATE ON messages BEGIN SELECT RAISE(ABORT, 'rewrite'); END")
        db.execute("CREATE TRIGGER no_delete BEFORE DELETE ON messages BEGIN SELECT RAISE(ABORT, 'rewrite'); END")

    seen: list[tuple[int, list[tuple[Any, ...]]]] = []
    messages: list[Message] = []

    def watch(event: RunEvent) -> None:
        # Checkpointed before the event is heard: the table is what the state says.
        with raw(db_path) as db:
            rows = db.execute("SELECT seq, body, hash FROM messages WHERE run_id = ? ORDER BY seq", (event.run_id,))
            seen.append((len(messages), rows.fetchall()))

    driver = Agent(two_tool_steps(), [lookup, transfer], store=store).driver("please move 5", on_event=watch)
    messages = driver.state.messages  # the live list the driver appends to
    result = await driver.run()
    assert result.status is Status.COMPLETED

    assert seen, "no events were heard"
    for expected, rows in seen:
        assert len(rows) == expected
    for (_, before), (_, after) in itertools.pairwise(seen):
        assert after[: len(before)] == before  # earlier rows untouched
        assert len(after) >= len(before)
    sizes = sorted({len(rows) for _, rows in seen})
    assert sizes[-1] == len(result.state.messages) == 7  # user, assistant, 2 tools, assistant, tool, assistant
    # Each growth is exactly the new messages of that step, and nothing else.
    assert count(db_path, "messages", result.run_id) == len(result.state.messages)


def test_a_checkpoint_adds_exactly_the_new_messages(stores: Callable[..., RunStore], db_path: Path) -> None:
    store = stores()
    state = new_state()
    start_run(store, state)
    assert count(db_path, "messages", state.run_id) == 1
    store.checkpoint(state, [("noop", {})])
    assert count(db_path, "messages", state.run_id) == 1
    state.messages += [Message("assistant", "one"), Message("user", "two")]
    store.checkpoint(state, [("grew", {}), ("again", {})])
    assert count(db_path, "messages", state.run_id) == 3
    state.messages.append(Message("assistant", "three"))
    store.checkpoint(state)  # no event: still saves the state
    assert count(db_path, "messages", state.run_id) == 4
    assert count(db_path, "events", state.run_id) == 3
    assert [m.content for m in store.messages(state.run_id)] == ["hello", "one", "two", "three"]
    assert store.verify(state.run_id) == []


async def test_the_runs_row_holds_no_transcript(stores: Callable[..., RunStore], db_path: Path) -> None:
    store = stores()
    prompt = marker("PROMPT")
    result = await Agent(two_tool_steps(), [lookup, transfer], store=store).run(prompt)
    with raw(db_path) as db:
        (meta,) = db.execute("SELECT meta FROM runs WHERE id = ?", (result.run_id,)).fetchone()
    data = json.loads(meta)
    assert "messages" not in data
    assert "executed" not in data
    assert prompt not in meta
    assert "value of a" not in meta  # a tool result lives in the transcript and the ledger only


async def test_load_round_trips_the_state_with_executed_from_the_ledger(
    stores: Callable[..., RunStore], db_path: Path
) -> None:
    store = stores()
    result = await Agent(two_tool_steps(), [lookup, transfer], store=store).run("please move 5")
    run_id = result.run_id
    loaded = stores().load(run_id)  # a fresh instance knows only what is in the file
    assert loaded.state.to_dict() == result.state.to_dict()
    assert set(loaded.state.executed) == {"c1", "c2", "c3"}
    with raw(db_path) as db:
        ledger = {
            call_id: [fingerprint, outcome]
            for call_id, fingerprint, outcome in db.execute(
                "SELECT call_id, fingerprint, outcome FROM ledger WHERE run_id = ?", (run_id,)
            )
        }
    assert loaded.state.executed == ledger
    assert loaded.principal == Principal("local")


async def test_load_matches_the_drivers_final_state(stores: Callable[..., RunStore]) -> None:
    store = stores()
    result = await Agent(two_tool_steps(), [lookup, transfer], store=store).run("please move 5")
    loaded = stores().load(result.run_id)
    assert loaded.state.to_dict() == result.state.to_dict()
    assert loaded.state.executed == result.state.executed


async def test_load_round_trips_a_paused_run(stores: Callable[..., RunStore]) -> None:
    @tool(approval=True)
    def wire(amount: int) -> str:
        """Needs a person."""
        effects.append(("wire", amount))
        return "sent"

    store = stores()
    model = ScriptedModel([reply_calls(("c1", "lookup", '{"key": "a"}')), reply_calls(("c2", "wire", '{"amount": 9}'))])
    result = await Agent(model, [lookup, wire], store=store, principal=Principal("bob", frozenset({"x"}))).run("go")
    assert result.status is Status.AWAITING_APPROVAL
    loaded = stores().load(result.run_id)
    assert loaded.state.to_dict() == result.state.to_dict()
    assert [p.call_id for p in loaded.state.pending if p.needs_approval] == ["c2"]
    assert loaded.principal == Principal("bob", frozenset({"x"}))
    assert ("wire", 9) not in effects


class Crash(BaseException):
    """Stands in for the process dying inside a tool (a BaseException: no tool error envelope)."""


async def test_load_round_trips_after_a_resume_that_reruns_a_read(stores: Callable[..., RunStore]) -> None:
    ticks = iter(range(100))
    crashed: list[bool] = []

    @tool(read_only=True)
    async def tick() -> int:
        """A read whose answer changes every time."""
        return next(ticks)

    @tool
    async def boom() -> str:
        """A side effect during which the process dies, the first time."""
        if not crashed:
            crashed.append(True)
            raise Crash
        return "done"

    model = ScriptedModel([reply_calls(("c1", "tick", "{}"), ("c2", "boom", "{}"))])
    with pytest.raises(Crash):
        await Agent(model, [tick, boom], store=stores()).run("tick, then boom")
    (summary,) = stores().list_runs()
    run_id = summary.run_id
    first = stores().ledger_entry(run_id, "c1")
    assert first is not None and first.outcome == '{"ok": true, "result": 0}'

    paused = await Agent(ScriptedModel([]), [tick, boom], store=stores()).resume(run_id).run()
    assert paused.status is Status.AWAITING_RECONCILIATION  # boom's outcome is unknown
    reconcile(stores(), run_id, "c2", executed=False)
    result = await Agent(ScriptedModel([reply_text("ok")]), [tick, boom], store=stores()).resume(run_id).run()
    assert result.status is Status.COMPLETED

    loaded = stores().load(run_id)
    assert loaded.state.executed == result.state.executed
    (c1_message,) = [m for m in loaded.state.messages if m.tool_call_id == "c1"]
    assert loaded.state.executed["c1"][1] == c1_message.content  # the ledger agrees with the transcript


def test_load_of_an_unknown_run_names_it(stores: Callable[..., RunStore]) -> None:
    store = stores()
    with pytest.raises(RunNotFound, match="no-such-run"):
        store.load("no-such-run")
    with pytest.raises(RunNotFound, match="no-such-run"):
        store.verify("no-such-run")


# ------------------------------------------------------------- logged or not


async def test_runs_are_logged_by_default_when_the_agent_has_a_store(
    stores: Callable[..., RunStore], db_path: Path
) -> None:
    store = stores()
    run_id = await completed_run(store)
    assert [r.run_id for r in store.list_runs()] == [run_id]
    kinds = [e.kind for e in store.events(run_id)]
    assert kinds[:2] == ["run_started", "step_started"]
    assert kinds[-1] == "run_finished"
    assert INTENT_RECORDED in kinds and OUTCOME_RECORDED in kinds
    assert [e.seq for e in store.events(run_id)] == list(range(1, len(kinds) + 1))
    assert {e.call_id for e in store.ledger(run_id)} == {"c1", "c2", "c3"}


async def test_a_run_without_a_store_leaves_the_file_untouched(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    run_id = await completed_run(store)
    store.close()
    files = {p.name: p.read_bytes() for p in db_path.parent.iterdir()}

    result = await Agent(two_tool_steps(), [lookup, transfer]).run("please move 5")

    assert result.status is Status.COMPLETED
    assert {p.name: p.read_bytes() for p in db_path.parent.iterdir()} == files
    check = SQLiteStore(db_path)
    try:
        assert [r.run_id for r in check.list_runs()] == [run_id]
    finally:
        check.close()


async def test_a_run_without_a_store_creates_no_file(tmp_path: Path) -> None:
    before = set(tmp_path.rglob("*"))
    await Agent(two_tool_steps(), [lookup, transfer]).run("please move 5")
    assert set(tmp_path.rglob("*")) == before


# ------------------------------------------------------------------ redaction

SECRET_VALUES = {
    "password": marker("PW"),
    "api_key": marker("AK"),
    "token": marker("TK"),
    "authorization": marker("AU"),
    "secret": marker("SE"),
}
NESTED_SECRETS = {
    "X-Api-Key": marker("XAK"),
    "refreshToken": marker("RT"),
    "AUTHORIZATION": marker("AU2"),
    "inner": {"Client_Secret": marker("CS"), "PassWord": marker("PW2"), "note": "visible-note"},
    "entries": [{"access_token": marker("AT"), "name": "visible-name"}],
}


def all_secret_values() -> list[str]:
    nested_inner, entries = NESTED_SECRETS["inner"], NESTED_SECRETS["entries"]
    assert isinstance(nested_inner, dict) and isinstance(entries, list)
    return [
        *SECRET_VALUES.values(),
        *(v for k, v in NESTED_SECRETS.items() if isinstance(v, str)),
        nested_inner["Client_Secret"],
        nested_inner["PassWord"],
        entries[0]["access_token"],
    ]


@tool(approval=True)
def login(
    user: str,
    password: str,
    api_key: str,
    token: str,
    authorization: str,
    secret: str,
    headers: dict[str, Any],
    max_tokens: int,
) -> str:
    """Log in somewhere (needs approval, so its arguments reach the audit log)."""
    effects.append(("login", user))
    return "logged in"


def login_arguments() -> str:
    return json.dumps({"user": "alice", **SECRET_VALUES, "headers": NESTED_SECRETS, "max_tokens": 77})


async def paused_login_run(store: RunStore) -> str:
    model = ScriptedModel([reply_calls(("c1", "login", login_arguments()), usage=(123, 45))])
    result = await Agent(model, [login], store=store).run("log me in")
    assert result.status is Status.AWAITING_APPROVAL, result
    return result.run_id


async def test_secret_arguments_are_redacted_in_events(stores: Callable[..., RunStore], db_path: Path) -> None:
    store = stores()
    run_id = await paused_login_run(store)

    (requested,) = [e for e in store.events(run_id) if e.kind == "approval_requested"]
    arguments = requested.data["arguments"]
    for key in SECRET_VALUES:
        assert arguments[key] == REDACTED, key
    headers = arguments["headers"]
    assert headers["X-Api-Key"] == REDACTED
    assert headers["refreshToken"] == REDACTED
    assert headers["AUTHORIZATION"] == REDACTED
    assert headers["inner"]["Client_Secret"] == REDACTED
    assert headers["inner"]["PassWord"] == REDACTED
    assert headers["inner"]["note"] == "visible-note"
    assert headers["entries"] == [{"access_token": REDACTED, "name": "visible-name"}]
    assert arguments["user"] == "alice"
    assert arguments["max_tokens"] == 77  # "tokens" is a count, not a credential

    events_text = table_text(db_path, "events")
    for value in all_secret_values():
        assert value not in events_text
    assert "[redacted]" in events_text


async def test_usage_counts_are_not_redacted(stores: Callable[..., RunStore]) -> None:
    store = stores()
    run_id = await paused_login_run(store)
    (replied,) = [e for e in store.events(run_id) if e.kind == MODEL_REPLIED]
    assert replied.data["usage"] == {"input_tokens": 123, "output_tokens": 45, "total_tokens": 168}


async def test_runs_show_never_prints_a_secret_argument(
    stores: Callable[..., RunStore], db_path: Path, tmp_path: Path
) -> None:
    store = stores()
    run_id = await paused_login_run(store)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    env |= {"PYTHONUTF8": "1", "TETHER_DB": str(db_path)}
    for extra in ([], ["--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "tether", "runs", "show", run_id, *extra],
            capture_output=True,
            text=True,
            encoding="utf-8",
            env=env,
            timeout=60,
            cwd=tmp_path,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        assert "Traceback" not in output
        assert "login" in output  # the call is shown ...
        assert "[redacted]" in output  # ... with its secrets hidden
        for value in all_secret_values():
            assert value not in output, (extra, value)


# ----------------------------------------------------------- content logging


def content_model(answer: str, step_text: str) -> ScriptedModel:
    return ScriptedModel([reply_calls(("c1", "lookup", '{"key": "k"}'), content=step_text), reply_text(answer)])


async def content_run(store: RunStore, prompt: str, answer: str, step_text: str, secret: str) -> str:
    @tool(read_only=True, name="lookup")
    def marked_lookup(key: str) -> str:
        """Return a marked result."""
        return secret

    result = await Agent(content_model(answer, step_text), [marked_lookup], store=store).run(prompt)
    assert result.status is Status.COMPLETED
    return result.run_id


async def test_without_log_content_no_user_or_model_text_reaches_the_events(
    stores: Callable[..., RunStore], db_path: Path
) -> None:
    prompt, reply, step_text, result_text = marker("PROMPT"), marker("REPLY"), marker("STEP"), marker("RESULT")
    store = stores()  # log_content defaults to False
    run_id = await content_run(store, prompt, reply, step_text, result_text)

    events_text = table_text(db_path, "events")
    for value in (prompt, reply, step_text, result_text):
        assert value not in events_text
    # The transcript itself is still complete.
    transcript = json.dumps([m.to_dict() for m in store.messages(run_id)])
    for value in (prompt, reply, step_text, result_text):
        assert value in transcript
    executed = [e for e in store.events(run_id) if e.kind == CALL_EXECUTED]
    assert executed and executed[0].data["outcome"] == "ok"


async def test_with_log_content_model_text_and_results_reach_the_events(
    stores: Callable[..., RunStore], db_path: Path
) -> None:
    reply, step_text, result_text = marker("REPLY"), marker("STEP"), marker("RESULT")
    store = stores(log_content=True)
    await content_run(store, "hello", reply, step_text, result_text)

    events_text = table_text(db_path, "events")
    for value in (reply, step_text, result_text):
        assert value in events_text


async def test_with_log_content_the_prompt_reaches_the_events(stores: Callable[..., RunStore], db_path: Path) -> None:
    prompt = marker("PROMPT")
    store = stores(log_content=True)
    await content_run(store, prompt, "reply", "step", "result")
    assert prompt in table_text(db_path, "events")


async def test_log_content_still_redacts_secrets_in_text(stores: Callable[..., RunStore], db_path: Path) -> None:
    key = "sk-" + uuid.uuid4().hex
    store = stores(log_content=True)
    await content_run(store, "hello", f"your key is {key}", "step", f"Bearer {uuid.uuid4().hex}")
    events_text = table_text(db_path, "events")
    assert key not in events_text
    assert "Bearer [redacted]" in events_text


# ---------------------------------------------------------------------- verify


async def test_verify_passes_on_an_untouched_run(stores: Callable[..., RunStore]) -> None:
    store = stores()
    run_id = await completed_run(store)
    assert store.verify(run_id) == []
    assert stores().verify(run_id) == []  # and from a fresh instance


async def test_verify_checks_each_run_on_its_own(stores: Callable[..., RunStore], db_path: Path) -> None:
    store = stores()
    first, second = await completed_run(store), await completed_run(store)
    with raw(db_path) as db:
        db.execute("UPDATE events SET kind = 'forged' WHERE run_id = ? AND seq = 2", (first,))
    assert store.verify(first) != []
    assert store.verify(second) == []


Tamper = Callable[[sqlite3.Connection, str], None]


def _edit_event_data(db: sqlite3.Connection, run_id: str) -> None:
    (data,) = db.execute("SELECT data FROM events WHERE run_id = ? AND seq = 5", (run_id,)).fetchone()
    changed = json.loads(data) | {"tool": "something_else"}
    db.execute(
        "UPDATE events SET data = ? WHERE run_id = ? AND seq = 5",
        (json.dumps(changed, sort_keys=True, separators=(",", ":")), run_id),
    )


def _edit_event_kind(db: sqlite3.Connection, run_id: str) -> None:
    db.execute("UPDATE events SET kind = 'call_rejected' WHERE run_id = ? AND kind = 'call_executed'", (run_id,))


def _delete_middle_event(db: sqlite3.Connection, run_id: str) -> None:
    db.execute("DELETE FROM events WHERE run_id = ? AND seq = 4", (run_id,))


def _delete_last_event(db: sqlite3.Connection, run_id: str) -> None:
    (last,) = db.execute("SELECT max(seq) FROM events WHERE run_id = ?", (run_id,)).fetchone()
    db.execute("DELETE FROM events WHERE run_id = ? AND seq = ?", (run_id, last))


def _swap_events(db: sqlite3.Connection, run_id: str) -> None:
    db.execute("UPDATE events SET seq = -1 WHERE run_id = ? AND seq = 3", (run_id,))
    db.execute("UPDATE events SET seq = 3 WHERE run_id = ? AND seq = 4", (run_id,))
    db.execute("UPDATE events SET seq = 4 WHERE run_id = ? AND seq = -1", (run_id,))


def _edit_message(db: sqlite3.Connection, run_id: str) -> None:
    (body,) = db.execute("SELECT body FROM messages WHERE run_id = ? AND seq = 0", (run_id,)).fetchone()
    changed = json.loads(body) | {"content": "please move 5000"}
    db.execute(
        "UPDATE messages SET body = ? WHERE run_id = ? AND seq = 0",
        (json.dumps(changed, sort_keys=True, separators=(",", ":")), run_id),
    )


def _delete_message(db: sqlite3.Connection, run_id: str) -> None:
    db.execute("DELETE FROM messages WHERE run_id = ? AND seq = 2", (run_id,))


def _delete_last_message(db: sqlite3.Connection, run_id: str) -> None:
    (last,) = db.execute("SELECT max(seq) FROM messages WHERE run_id = ?", (run_id,)).fetchone()
    db.execute("DELETE FROM messages WHERE run_id = ? AND seq = ?", (run_id, last))


def _forge_event_linked_to_the_last(db: sqlite3.Connection, run_id: str) -> None:
    """A forged event that names the real last hash as its predecessor."""
    seq, last = db.execute(
        "SELECT seq, hash FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1", (run_id,)
    ).fetchone()
    db.execute(
        "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, seq + 1, 1.0, "approval_decided", 1, '{"approved":true,"by":"mallory"}', last, "f" * 64),
    )


def _forge_event_in_a_gap(db: sqlite3.Connection, run_id: str) -> None:
    """Replace a real event by a forged one at the same place."""
    prev, digest = db.execute("SELECT prev_hash, hash FROM events WHERE run_id = ? AND seq = 2", (run_id,)).fetchone()
    db.execute("DELETE FROM events WHERE run_id = ? AND seq = 2", (run_id,))
    db.execute(
        "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, 2, 1.0, "model_replied", 1, '{"finish_reason":"stop"}', prev, digest),
    )


def _forge_event_before_the_first(db: sqlite3.Connection, run_id: str) -> None:
    db.execute(
        "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, 0, 1.0, "step_started", 0, "{}", "0" * 64, "e" * 64),
    )


TAMPERING: dict[str, Tamper] = {
    "edited event data": _edit_event_data,
    "edited event kind": _edit_event_kind,
    "deleted middle event": _delete_middle_event,
    "deleted last event": _delete_last_event,
    "swapped events": _swap_events,
    "edited message": _edit_message,
    "deleted message": _delete_message,
    "deleted last message": _delete_last_message,
    "forged event after the last": _forge_event_linked_to_the_last,
    "forged event replacing a real one": _forge_event_in_a_gap,
    "forged event before the first": _forge_event_before_the_first,
}


@pytest.mark.parametrize("tamper", list(TAMPERING.values()), ids=list(TAMPERING))
async def test_verify_finds_tampering(tamper: Tamper, stores: Callable[..., RunStore], db_path: Path) -> None:
    store = stores()
    run_id = await completed_run(store)
    assert store.verify(run_id) == []
    with raw(db_path) as db:
        tamper(db, run_id)

    for checker in (store, stores()):  # the writer's instance and a fresh one
        problems = checker.verify(run_id)
        assert problems, "tampering went unnoticed"
        assert all(isinstance(p, str) and p for p in problems)


async def test_verify_finds_an_appended_event_with_valid_links(stores: Callable[..., RunStore], db_path: Path) -> None:
    """Appended by someone who can compute the hashes: only the run's head (count and last hash) can tell."""
    store = stores()
    run_id = await completed_run(store)
    with raw(db_path) as db:
        head = db.execute("SELECT event_count, event_hash FROM runs WHERE id = ?", (run_id,)).fetchone()
    forger = stores()
    forger.acquire(run_id)
    forger.checkpoint(forger.load(run_id).state, [("approval_decided", {"id": "c2", "approved": True})])
    forger.release(run_id)
    assert store.verify(run_id) == []  # so far a legitimate append
    with raw(db_path) as db:
        db.execute("UPDATE runs SET event_count = ?, event_hash = ? WHERE id = ?", (*head, run_id))

    assert store.verify(run_id) != []


async def test_verify_reports_event_data_that_is_not_json(stores: Callable[..., RunStore], db_path: Path) -> None:
    store = stores()
    run_id = await completed_run(store)
    with raw(db_path) as db:
        db.execute("UPDATE events SET data = 'not json' WHERE run_id = ? AND seq = 3", (run_id,))
    problems = store.verify(run_id)
    assert any("event 3" in p for p in problems)


# ---------------------------------------------------------------------- leases


def test_a_second_store_cannot_take_a_live_lease(stores: Callable[..., RunStore]) -> None:
    first, second = stores(), stores()
    assert first.owner != second.owner
    state = new_state("leased-run")
    start_run(first, state)  # writing a run takes its lease

    with pytest.raises(LeaseHeld, match="leased-run") as caught:
        second.acquire("leased-run")
    assert caught.value.exit_code == 5

    first.release("leased-run")
    second.acquire("leased-run")
    with pytest.raises(LeaseHeld, match="leased-run"):
        first.acquire("leased-run")


def test_the_holder_may_acquire_again(stores: Callable[..., RunStore]) -> None:
    store = stores()
    start_run(store, new_state("mine"))
    store.acquire("mine")
    store.acquire("mine")


def test_acquiring_an_unknown_run_names_it(stores: Callable[..., RunStore]) -> None:
    with pytest.raises(RunNotFound, match="ghost-run"):
        stores().acquire("ghost-run")


def test_an_unexpired_lease_is_respected_whatever_its_pid(stores: Callable[..., RunStore], db_path: Path) -> None:
    """A pid says nothing about the owner: in another PID namespace the same number is another process."""
    first, second = stores(), stores()
    start_run(first, new_state("orphan"))
    dead = f"{socket.gethostname()}:{dead_pid()}:deadbeef"
    with raw(db_path) as db:
        db.execute("UPDATE runs SET lease_owner = ?, lease_until = ? WHERE id = 'orphan'", (dead, time.time() + 60))

    with pytest.raises(LeaseHeld, match="orphan"):
        second.acquire("orphan")


def test_an_expired_lease_is_taken_over_even_if_its_pid_is_alive(
    stores: Callable[..., RunStore], db_path: Path
) -> None:
    """A restarted service may get the dead owner's pid (pid 1 in a container): the pid is alive, the owner is not."""
    first, second = stores(), stores()
    start_run(first, new_state("orphan"))
    same_pid = f"{socket.gethostname()}:{os.getpid()}:deadbeef"  # this very process, a start ago
    with raw(db_path) as db:
        db.execute("UPDATE runs SET lease_owner = ?, lease_until = ? WHERE id = 'orphan'", (same_pid, time.time() - 1))

    second.acquire("orphan")

    with raw(db_path) as db:
        (owner,) = db.execute("SELECT lease_owner FROM runs WHERE id = 'orphan'").fetchone()
    assert owner == second.owner


def test_a_lease_of_another_host_is_respected_until_it_expires(db_path: Path, stores: Callable[..., RunStore]) -> None:
    """A holder whose lock this machine cannot see (another host, or a tether from before run locks:
    ``lease_locked = 0``) keeps the run until its lease expires."""
    now = [1_000_000.0]
    store = stores(clock=lambda: now[0], lease_seconds=30)
    start_run(store, new_state("remote"))
    store.release("remote")
    with raw(db_path) as db:
        db.execute(
            "UPDATE runs SET lease_owner = 'elsewhere:1:cafe', lease_until = ?, lease_locked = 0 WHERE id = 'remote'",
            (now[0] + 30,),
        )
    with pytest.raises(LeaseHeld, match="remote"):
        store.acquire("remote")
    now[0] += 31
    store.acquire("remote")


def test_a_checkpoint_after_losing_the_lease_raises_lease_held(stores: Callable[..., RunStore], db_path: Path) -> None:
    first, second = stores(), stores()
    state = new_state("stolen")
    start_run(first, state)
    first.checkpoint(state, [("step_started", {})])
    first.release("stolen")
    second.acquire("stolen")
    events_before = count(db_path, "events", "stolen")

    state.messages.append(Message("assistant", "late"))
    with pytest.raises(LeaseHeld, match="stolen"):
        first.checkpoint(state, [("model_replied", {})])

    # Nothing of the refused checkpoint was written.
    assert count(db_path, "events", "stolen") == events_before
    assert count(db_path, "messages", "stolen") == 1
    assert second.verify("stolen") == []


def test_a_checkpoint_after_the_lease_expired_and_was_taken_raises_lease_held(
    stores: Callable[..., RunStore],
) -> None:
    now = [1_000_000.0]
    first = stores(clock=lambda: now[0], lease_seconds=10)
    second = stores(clock=lambda: now[0], lease_seconds=10)
    state = new_state("expired")
    start_run(first, state)
    now[0] += 11  # first stalls past its lease
    second.acquire("expired")
    with pytest.raises(LeaseHeld, match="expired"):
        first.checkpoint(state, [("step_started", {})])


async def test_resuming_a_run_driven_elsewhere_raises_lease_held(stores: Callable[..., RunStore]) -> None:
    holder = stores()
    start_run(holder, new_state("busy"), Principal("local"))
    agent = Agent(ScriptedModel([reply_text("hi")]), [], store=stores())
    with pytest.raises(LeaseHeld, match="busy"):
        agent.resume("busy")


async def test_a_finished_run_releases_its_lease(stores: Callable[..., RunStore], db_path: Path) -> None:
    run_id = await completed_run(stores())
    with raw(db_path) as db:
        (owner, until) = db.execute("SELECT lease_owner, lease_until FROM runs WHERE id = ?", (run_id,)).fetchone()
    assert owner is None and until is None
    stores().acquire(run_id)


# ---------------------------------------------------------------- bad db paths


def _assert_clear(error: StoreError, path: Path) -> None:
    message = str(error)
    assert str(path) in message
    assert "TETHER_DB" in message
    assert not isinstance(error, sqlite3.Error)
    assert error.__suppress_context__ or not isinstance(error.__context__, sqlite3.Error)


def test_a_directory_as_the_db_path_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "a-directory"
    path.mkdir()
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path)
    _assert_clear(caught.value, path)
    assert caught.value.exit_code == 3


def test_a_file_of_garbage_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path)
    _assert_clear(caught.value, path)


def test_a_db_under_a_regular_file_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    path = blocker / "runs.db"
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path)
    _assert_clear(caught.value, path)


def test_a_truncated_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.db"
    SQLiteStore(path).close()
    data = path.read_bytes()
    path.write_bytes(data[:100] + b"\xff" * (len(data) - 100))  # a valid header, garbage pages
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path)
    _assert_clear(caught.value, path)


async def test_a_store_made_before_the_config_column_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "early.db"
    early = sqlite3.connect(path, isolation_level=None)
    early.executescript(
        """
        CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at REAL);
        INSERT INTO schema_migrations VALUES (1, 'm1_initial', 0);
        CREATE TABLE runs (id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL,
            status TEXT NOT NULL, principal TEXT NOT NULL, setup TEXT NOT NULL, meta TEXT NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0, message_hash TEXT NOT NULL,
            event_count INTEGER NOT NULL DEFAULT 0, event_hash TEXT NOT NULL, lease_owner TEXT, lease_until REAL);
        CREATE TABLE messages (run_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, hash TEXT NOT NULL,
            PRIMARY KEY (run_id, seq));
        CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL,
            step INTEGER NOT NULL, data TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL,
            PRIMARY KEY (run_id, seq));
        CREATE TABLE ledger (run_id TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT NOT NULL,
            fingerprint TEXT NOT NULL, intent_at REAL NOT NULL, outcome TEXT, outcome_at REAL,
            PRIMARY KEY (run_id, call_id));
        """
    )
    early.close()
    store = SQLiteStore(path)
    result = await Agent(ScriptedModel([reply_text("hello")]), [], store=store).run("hi")
    assert result.status is Status.COMPLETED
    assert store.load(result.run_id).state.to_dict() == result.state.to_dict()
    versions = [row[0] for row in sqlite3.connect(path).execute("SELECT version FROM schema_migrations ORDER BY 1")]
    assert versions == list(range(1, len(MIGRATIONS) + 1))  # every migration, once


async def test_a_failing_store_is_reported_not_masked(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    with raw(tmp_path / "runs.db") as db:
        db.execute("DROP TABLE events")  # the store breaks under the run
    with pytest.raises(StoreError, match="no such table: events"):
        await Agent(ScriptedModel([reply_text("hello")]), [], store=store).run("hi")


async def test_verify_finds_an_edited_ledger_outcome(tmp_path: Path) -> None:
    @tool
    def transfer(amount: int) -> str:
        """Moves money."""
        return f"moved {amount}"

    store = SQLiteStore(tmp_path / "runs.db")
    model = ScriptedModel([reply_calls(("c1", "transfer", '{"amount": 5}')), reply_text("done")])
    result = await Agent(model, [transfer], store=store).run("pay")
    assert result.status is Status.COMPLETED
    assert store.verify(result.run_id) == []
    with sqlite3.connect(tmp_path / "runs.db", isolation_level=None) as db:
        db.execute("UPDATE ledger SET outcome = ? WHERE call_id = 'c1'", ('{"ok": true, "result": "moved 0"}',))
    assert store.verify(result.run_id) == ["ledger: the outcome of call c1 does not match the audit log"]


def test_many_stores_opening_one_new_file_together_never_fail_on_the_wal_switch(tmp_path: Path) -> None:
    """``PRAGMA journal_mode=WAL`` answers "database is locked" without waiting while another opener switches.

    Four stores opening one new file together failed that way about once in fifty rounds (seen in CI).
    """
    errors: list[BaseException] = []

    def open_one(path: Path) -> None:
        try:
            SQLiteStore(path).close()
        except BaseException as exc:
            errors.append(exc)

    for round_ in range(100):
        path = tmp_path / f"runs-{round_}.db"
        threads = [threading.Thread(target=open_one, args=(path,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
