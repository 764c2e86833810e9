"""``runs verify`` and ``resume`` against every single-row edit of what resume reads, and the keyed seal.

Resume reads four tables: the run's row in ``runs`` (its saved state,
setup, principal and configuration, and the heads of its two chains), its
``messages``, its ``events`` (the chain the others are checked against) and
its ``ledger`` rows. Each test below takes a pristine store, applies one
single-row insert, update or delete with raw SQL, and expects ``verify`` to
report it and ``load`` (what resume, approve, deny and reconcile use) to
refuse the run. The lease columns are left out on purpose: they say who
drives the run, not what it did, and are rewritten by every acquire.

The last tests play the forger who knows the code but not the key: they
recompute every hash after an edit. Without ``TETHER_AUDIT_KEY`` that
forgery verifies (a documented limit); with it, it does not.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.core.budget import RunConfig
from tether.core.machine import RunState, Status
from tether.core.messages import Message
from tether.drivers.local.durable import decide
from tether.drivers.local.runner import Agent
from tether.models.base import ModelRequest
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.store import LeaseHeld, RunNotFound, RunStore, SQLiteStore, StoreError, TamperedRun
from tether.store.audit import GENESIS, SEALED_COLUMNS, chain_hash, seal
from tether.tools import Principal, ToolContext, tool

KEY = "correct horse battery staple"
LEASE_COLUMNS = frozenset({"lease_owner", "lease_until", "lease_locked"})
KEYS = {
    "runs": ("id",),
    "messages": ("run_id", "seq"),
    "events": ("run_id", "seq"),
    "ledger": ("run_id", "call_id"),
    "conversations": ("id",),
}


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool
def transfer(amount: int, context: ToolContext) -> dict[str, Any]:
    """Move money (a side effect)."""
    return {"moved": amount, "key": context.idempotency_key}


@tool(approval=True)
def refund(ticket: str) -> str:
    """Refund a ticket's order (a person approves each call)."""
    return f"refunded {ticket}"


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


async def record_runs(path: Path, key: str | None = None) -> list[str]:
    """A completed run (read, write, read, answer) and a run paused with an approved call."""
    store = SQLiteStore(path, audit_key=key)
    try:
        model = ScriptedModel(
            [
                reply_calls(("c1", "lookup", '{"key": "a"}'), ("c2", "transfer", '{"amount": 5}')),
                reply_calls(("c3", "lookup", '{"key": "b"}')),
                reply_text("all done"),
            ]
        )
        done = await Agent(model, [lookup, transfer], store=store).run("please move 5")
        assert done.status is Status.COMPLETED, done
        model = ScriptedModel(
            [reply_calls(("r1", "lookup", '{"key": "t"}')), reply_calls(("r2", "refund", '{"ticket": "T-9"}'))]
        )
        paused = await Agent(model, [lookup, refund], store=store).run("refund T-9")
        assert paused.status is Status.AWAITING_APPROVAL, paused
        decide(store, paused.run_id, "r2", approved=True)
        return [done.run_id, paused.run_id]
    finally:
        store.close()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    path = tmp_path_factory.mktemp("audit") / "pristine.db"
    run_ids = asyncio.run(record_runs(path))
    return path, run_ids


def copy_of(source: Path, target: Path) -> Path:
    target.unlink(missing_ok=True)
    with raw(source) as src, raw(target) as dst:
        src.backup(dst)
    return target


def changed(value: object) -> object:
    """Another value of the same kind: JSON stays JSON, a hash stays hex."""
    if value is None:
        return "forged"
    if isinstance(value, float):
        return value + 1.0
    if isinstance(value, int):
        return value + 1000
    assert isinstance(value, str)
    try:
        decoded = json.loads(value)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        return json.dumps({**decoded, "forged": True})
    if isinstance(decoded, list):
        return json.dumps([*decoded, "forged"])
    return value[:-1] + ("1" if value.endswith("0") else "0")


def rows_of(db: sqlite3.Connection, table: str, run_id: str) -> list[dict[str, Any]]:
    """The rows of ``table`` that belong to ``run_id`` (for ``conversations``: the conversation of that id)."""
    column = "id" if table in ("runs", "conversations") else "run_id"
    cursor = db.execute(f"SELECT * FROM {table} WHERE {column} = ?", (run_id,))
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor]


Mutation = tuple[str, str, str, tuple[Any, ...]]  # (description, run to check, SQL, its parameters)


def mutations(db: sqlite3.Connection, table: str, kind: str, run_ids: list[str]) -> Iterator[Mutation]:
    """Every single-row ``kind`` edit of ``table`` for the runs in ``run_ids``."""
    keys = KEYS[table]
    where = " AND ".join(f"{k} = ?" for k in keys)
    for run_id in run_ids:
        rows = rows_of(db, table, run_id)
        assert rows or table == "ledger", (table, run_id)
        for row in rows:
            key_values = tuple(row[k] for k in keys)
            label = f"{table} {key_values}"
            if kind == "delete":
                yield f"delete {label}", run_id, f"DELETE FROM {table} WHERE {where}", key_values
            elif kind == "update":
                for column, value in row.items():
                    if column not in LEASE_COLUMNS:
                        sql = f"UPDATE {table} SET {column} = ? WHERE {where}"
                        yield f"update {label}.{column}", run_id, sql, (changed(value), *key_values)
        if kind == "insert" and rows:
            row = dict(rows[-1])
            checked = run_id
            if table in ("runs", "conversations"):
                row["id"] = checked = f"{run_id}-copy"
            elif table == "ledger":
                row["call_id"] = "forged"
            else:
                row["seq"] += 1
            sql = f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})"
            yield f"insert into {table} after {tuple(rows[-1][k] for k in keys)}", checked, sql, tuple(row.values())


@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
@pytest.mark.parametrize("table", ["runs", "messages", "events", "ledger"])
def test_verify_and_resume_catch_every_single_row_edit(
    pristine: tuple[Path, list[str]], tmp_path: Path, table: str, kind: str
) -> None:
    source, run_ids = pristine
    target = tmp_path / "edited.db"
    with raw(source) as db:
        edits = list(mutations(db, table, kind, run_ids))
    assert edits
    unnoticed = []
    for label, run_id, sql, parameters in edits:
        copy_of(source, target)
        with raw(target) as db:
            assert db.execute(sql, parameters).rowcount == 1, label
        store = SQLiteStore(target)
        try:
            if not store.verify(run_id):
                unnoticed.append(f"{label}: runs verify says intact")
            try:
                store.load(run_id)
                unnoticed.append(f"{label}: load accepts the run")
            except StoreError:
                pass
        except RunNotFound:
            pass  # the run's row is gone (deleted, or its id changed): there is nothing left to resume
        finally:
            store.close()
    assert unnoticed == [], f"{len(unnoticed)} of {len(edits)} edits went unnoticed"


def test_the_pristine_store_verifies(pristine: tuple[Path, list[str]], tmp_path: Path) -> None:
    """Without it, the test above could pass by reporting everything."""
    store = SQLiteStore(copy_of(pristine[0], tmp_path / "copy.db"))
    try:
        for run_id in pristine[1]:
            assert store.verify(run_id) == []
            store.load(run_id)
    finally:
        store.close()


# ------------------------------------------------------------------ conversations


OWNER = Principal("carol", frozenset({"user"}))


async def record_conversation(path: Path, key: str | None = None) -> tuple[str, list[str]]:
    """A conversation of three turns (a read, a side effect, an answer), and its turns' run ids."""
    store = SQLiteStore(path, audit_key=key)
    try:
        model = ScriptedModel(
            [
                reply_calls(("k1", "lookup", '{"key": "a"}')),
                reply_text("a is known"),
                reply_calls(("k2", "transfer", '{"amount": 7}')),
                reply_text("moved"),
                reply_text("bye"),
            ]
        )
        conv = Agent(model, [lookup, transfer], store=store).conversation(principal=OWNER)
        for text in ("what is a?", "move 7", "thanks"):
            assert (await conv.send(text)).status is Status.COMPLETED
        return conv.id, [run_id for run_id, _ in store.load_conversation(conv.id).turns]
    finally:
        store.close()


@pytest.fixture(scope="module")
def pristine_conversation(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    path = tmp_path_factory.mktemp("audit") / "conversation.db"
    conversation_id, turns = asyncio.run(record_conversation(path))
    return path, conversation_id, turns


def refuses_to_go_on(store: RunStore, conversation_id: str) -> bool:
    """Whether the next turn of the conversation is refused (as tampered with, or as not there)."""
    agent = Agent(ScriptedModel([reply_text("never asked")]), [lookup, transfer], store=store)
    try:
        conv = agent.conversation(conversation_id, principal=Principal(OWNER.id))
        conv.turn("one more")
    except StoreError:
        return True
    return False


@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
@pytest.mark.parametrize("table", ["conversations", "runs", "messages", "events", "ledger"])
def test_a_conversation_catches_every_single_row_edit_of_it_and_its_turns(
    pristine_conversation: tuple[Path, str, list[str]], tmp_path: Path, table: str, kind: str
) -> None:
    """Every single-row insert, update and delete of the conversation's row or of any of its turns' rows
    stops its next turn, and ``runs verify`` of its last turn reports it."""
    source, conversation_id, turns = pristine_conversation
    target = tmp_path / "edited.db"
    with raw(source) as db:
        owners = [conversation_id] if table == "conversations" else turns
        edits = list(mutations(db, table, kind, owners))
    assert edits
    unnoticed = []
    for label, checked, sql, parameters in edits:
        copy_of(source, target)
        with raw(target) as db:
            assert db.execute(sql, parameters).rowcount == 1, label
        store = SQLiteStore(target)
        try:
            opened = checked if table == "conversations" else conversation_id
            if not refuses_to_go_on(store, opened):
                unnoticed.append(f"{label}: the next turn runs")
            try:
                if table != "conversations" and not store.verify(turns[-1]):
                    unnoticed.append(f"{label}: runs verify of the last turn says intact")
            except RunNotFound:
                pass  # the last turn's row is gone: verify says so, and nothing is resumed
        finally:
            store.close()
    assert unnoticed == [], f"{len(unnoticed)} of {len(edits)} edits went unnoticed: {unnoticed[:5]}"


def test_the_pristine_conversation_goes_on(pristine_conversation: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    """Without it, the test above could pass by refusing everything."""
    source, conversation_id, turns = pristine_conversation
    store = SQLiteStore(copy_of(source, tmp_path / "copy.db"))
    try:
        assert store.verify_conversation(conversation_id) == []
        assert [store.verify(run_id) for run_id in turns] == [[], [], []]
        assert not refuses_to_go_on(store, conversation_id)
    finally:
        store.close()


# ------------------------------------------------------------------ the keyed seal


def forge_and_rechain(path: Path, run_id: str, key: str | None) -> None:
    """Say the transfer moved 5000, in the ledger, the events and the transcript, then recompute every hash.

    What someone who can write the file and knows tether's code can do; only the key is out of reach.
    """
    forged = json.dumps({"ok": True, "result": {"moved": 5000, "key": f"{run_id}:c2"}})
    digest = __import__("hashlib").sha256(forged.encode()).hexdigest()
    with raw(path) as db:
        db.execute("UPDATE ledger SET outcome = ? WHERE run_id = ? AND call_id = 'c2'", (forged, run_id))
        for seq, data in db.execute("SELECT seq, data FROM events WHERE run_id = ?", (run_id,)).fetchall():
            event = json.loads(data)
            if event.get("id") == "c2" and "digest" in event:
                event["digest"] = digest
                db.execute("UPDATE events SET data = ? WHERE run_id = ? AND seq = ?", (json.dumps(event), run_id, seq))
        for seq, body in db.execute("SELECT seq, body FROM messages WHERE run_id = ?", (run_id,)).fetchall():
            message = json.loads(body)
            if message.get("tool_call_id") == "c2":
                message["content"] = forged
                db.execute(
                    "UPDATE messages SET body = ? WHERE run_id = ? AND seq = ?",
                    (json.dumps(message, sort_keys=True, separators=(",", ":")), run_id, seq),
                )
        last = GENESIS
        for seq, body in db.execute(
            "SELECT seq, body FROM messages WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall():
            last = chain_hash(last, seq, body)
            db.execute("UPDATE messages SET hash = ? WHERE run_id = ? AND seq = ?", (last, run_id, seq))
        db.execute("UPDATE runs SET message_hash = ? WHERE id = ?", (last, run_id))
        last = GENESIS
        for seq, at, kind, step, data in db.execute(
            "SELECT seq, at, kind, step, data FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall():
            new = chain_hash(last, run_id, seq, repr(at), kind, step, data)
            db.execute(
                "UPDATE events SET prev_hash = ?, hash = ? WHERE run_id = ? AND seq = ?", (last, new, run_id, seq)
            )
            last = new
        db.execute("UPDATE runs SET event_hash = ? WHERE id = ?", (last, run_id))
        row = db.execute(f"SELECT {', '.join(SEALED_COLUMNS)} FROM runs WHERE id = ?", (run_id,)).fetchone()
        db.execute("UPDATE runs SET seal = ? WHERE id = ?", (seal(key, run_id, row), run_id))


async def test_without_a_key_a_consistent_rechain_verifies(tmp_path: Path) -> None:
    """The documented limit: without TETHER_AUDIT_KEY, verify finds accidental and partial edits, not this."""
    path = tmp_path / "runs.db"
    run_id = (await record_runs(path))[0]
    forge_and_rechain(path, run_id, key=None)
    store = SQLiteStore(path)
    try:
        assert store.verify(run_id) == []
        assert store.ledger_entry(run_id, "c2").outcome.find("5000") > 0  # type: ignore[union-attr]
    finally:
        store.close()


@pytest.mark.parametrize("forger_key", [None, "a guessed key"])
async def test_with_a_key_a_rechain_made_without_it_is_caught(tmp_path: Path, forger_key: str | None) -> None:
    path = tmp_path / "runs.db"
    run_id = (await record_runs(path, key=KEY))[0]
    keyed = SQLiteStore(path, audit_key=KEY)
    try:
        assert keyed.verify(run_id) == []

        forge_and_rechain(path, run_id, key=forger_key)

        problems = keyed.verify(run_id)
        assert problems and any("seal" in p for p in problems), problems
        with pytest.raises(StoreError, match="tether runs verify"):
            keyed.load(run_id)
    finally:
        keyed.close()


async def test_a_keyed_run_does_not_verify_without_the_key(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    run_id = (await record_runs(path, key=KEY))[0]
    store = SQLiteStore(path)
    try:
        assert any("TETHER_AUDIT_KEY" in p for p in store.verify(run_id))
    finally:
        store.close()


def test_the_key_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runs.db"
    monkeypatch.setenv("TETHER_AUDIT_KEY", KEY)
    run_id = asyncio.run(record_runs(path))[0]
    for key, intact in ((None, True), (KEY, True), ("", False)):
        if not key and not intact:
            monkeypatch.delenv("TETHER_AUDIT_KEY")
        store = SQLiteStore(path, audit_key=key)
        try:
            assert (store.verify(run_id) == []) is intact
        finally:
            store.close()


# ------------------------------------------------------------------ leases while the model thinks


class SlowModel:
    """A model that takes ``seconds`` to answer each request."""

    name = "slow"

    def __init__(self, inner: ScriptedModel, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds

    async def complete(self, request: ModelRequest) -> Any:
        await asyncio.sleep(self.seconds)
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        return None


async def test_a_driver_waiting_on_the_model_longer_than_its_lease_keeps_it(tmp_path: Path) -> None:
    """The lease is renewed for as long as the driver drives, not only while tools run."""
    path = tmp_path / "runs.db"
    store = SQLiteStore(path, lease_seconds=0.3)
    other = SQLiteStore(path)
    try:
        agent = Agent(SlowModel(ScriptedModel([reply_text("hello")]), 1.2), [], store=store)
        task = asyncio.create_task(agent.run("hi", run_id="slow-run"))
        await asyncio.sleep(0.9)  # three lease terms into the model's answer
        with pytest.raises(LeaseHeld, match="slow-run"):
            other.acquire("slow-run")
        result = await task
        assert result.status is Status.COMPLETED
        other.acquire("slow-run")  # released at the end
    finally:
        store.close()
        other.close()


def test_a_checkpoint_refuses_to_reseal_a_row_edited_since_the_last(tmp_path: Path) -> None:
    """A driver never vouches for what someone else wrote: the next checkpoint checks the seal before it writes."""
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        state = RunState(run_id="edited", config=RunConfig(), messages=[Message("user", "hi")])
        store.create_run(state, Principal("alice"), {"base_url": "http://127.0.0.1:8080/v1"})
        store.checkpoint(state, [("run_started", {})])
        with raw(path) as db:
            db.execute("UPDATE runs SET setup = ? WHERE id = 'edited'", ('{"base_url": "http://attacker.example/v1"}',))
            before = db.execute("SELECT seal, event_count FROM runs WHERE id = 'edited'").fetchone()

        with pytest.raises(TamperedRun, match=r"edited.*does not match its seal"):
            store.checkpoint(state, [("step_started", {})])

        with raw(path) as db:
            assert db.execute("SELECT seal, event_count FROM runs WHERE id = 'edited'").fetchone() == before
        assert TamperedRun.exit_code == 6
    finally:
        store.close()
