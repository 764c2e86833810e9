"""The run store contract, run against both stores: a SQLite file and a real PostgreSQL server.

Every test takes ``backend``: stores opened on one database of its kind
(a file in ``tmp_path``, a fresh schema on the session's server) and raw
SQL on it from a connection of its own, the way an operator or an attacker
would edit it, while the stores know nothing of it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_server import PostgresServer

from tether.core.budget import RunConfig
from tether.core.machine import RunState, Status
from tether.core.messages import Message
from tether.drivers.local.durable import decide
from tether.drivers.local.runner import Agent
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.store import AmbiguousRun, LeaseHeld, RunNotFound, RunStore, StoreError, TamperedRun, open_store
from tether.store.dialects import Dialect
from tether.store.dialects.sqlite import SQLiteDialect
from tether.tools import Principal, ToolContext, tool


class Backend:
    """Stores on one database, and raw SQL on it from a connection of the dialect's own, which the stores know
    nothing of (``?`` placeholders, as the store writes them: the dialect translates)."""

    def __init__(self, kind: str, target: str) -> None:
        self.kind, self.target = kind, target
        self.opened: list[RunStore] = []

    def open(self, **options: Any) -> RunStore:
        store = open_store(self.target, **options)
        self.opened.append(store)
        return store

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        dialect: Dialect
        if self.kind == "sqlite":
            dialect = SQLiteDialect(Path(self.target))
        else:
            from tether.store.dialects.postgres import PostgresDialect

            dialect = PostgresDialect(self.target, pool_size=1)
        try:
            with dialect.write() as tx:
                cursor = tx.execute(statement, params)
                return list(cursor.fetchall()) if statement.lstrip().upper().startswith("SELECT") else []
        finally:
            dialect.close()

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        chosen = Backend("sqlite", str(tmp_path / "runs.db"))
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        chosen = Backend("postgres", server.schema_url())
    yield chosen
    chosen.close()


@pytest.fixture(autouse=True)
def _no_effects() -> None:
    EFFECTS.clear()


EFFECTS: list[int] = []


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(read_only=False)
def transfer(amount: int, context: ToolContext) -> dict[str, Any]:
    """Move money (a side effect)."""
    EFFECTS.append(amount)
    return {"moved": amount, "key": context.idempotency_key}


def two_tool_steps() -> ScriptedModel:
    return ScriptedModel(
        [
            reply_calls(("c1", "lookup", '{"key": "a"}'), ("c2", "transfer", '{"amount": 5}')),
            reply_calls(("c3", "lookup", '{"key": "b"}')),
            reply_text("all done"),
        ]
    )


async def completed_run(store: RunStore, prompt: str = "please move 5") -> str:
    result = await Agent(two_tool_steps(), [lookup, transfer], store=store).run(prompt)
    assert result.status is Status.COMPLETED, result
    return result.run_id


def new_state(run_id: str, prompt: str = "hello") -> RunState:
    return RunState(run_id, RunConfig(), [Message("user", prompt)])


def start_run(store: RunStore, state: RunState, principal: Principal | None = None) -> None:
    store.create_run(state, principal or Principal("tester"), {"model": "scripted"})
    store.checkpoint(state, [("run_started", {})])


# ---------------------------------------------------------------- migrations and reopening


def test_migrations_are_recorded_and_never_applied_twice(backend: Backend) -> None:
    backend.open().close()
    first = backend.sql("SELECT version, name, applied_at FROM schema_migrations ORDER BY version")
    assert [row[0] for row in first] == list(range(1, len(first) + 1))
    assert first[0][1] == "m1_initial"
    for _ in range(2):
        backend.open().close()
    assert backend.sql("SELECT version, name, applied_at FROM schema_migrations ORDER BY version") == first


def test_stores_opening_together_apply_each_migration_once(backend: Backend) -> None:
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            backend.open()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    versions = [row[0] for row in backend.sql("SELECT version FROM schema_migrations")]
    assert len(versions) == len(set(versions)) >= 1


async def test_a_reopened_store_loads_and_verifies_a_recorded_run(backend: Backend) -> None:
    store = backend.open()
    run_id = await completed_run(store)
    store.close()
    reopened = backend.open()
    stored = reopened.load(run_id)
    assert stored.state.status is Status.COMPLETED
    assert stored.principal.id == "local"
    assert reopened.verify(run_id) == []
    assert EFFECTS == [5]


# ---------------------------------------------------------------- checkpoints and the transcript


def test_a_checkpoint_appends_exactly_the_new_messages_and_never_rewrites_them(backend: Backend) -> None:
    store = backend.open()
    state = new_state("run-1")
    start_run(store, state)
    first = backend.sql("SELECT seq, body, hash FROM messages WHERE run_id = ? ORDER BY seq", ("run-1",))
    assert len(first) == 1
    state.messages += [Message("assistant", "one"), Message("user", "two")]
    store.checkpoint(state, [("grew", {}), ("again", {})])
    state.messages.append(Message("assistant", "three"))
    store.checkpoint(state)  # no event: still saves the state
    rows = backend.sql("SELECT seq, body, hash FROM messages WHERE run_id = ? ORDER BY seq", ("run-1",))
    assert rows[:1] == first
    assert [r[0] for r in rows] == [0, 1, 2, 3]
    assert store.counts("run-1") == (3, 4)
    assert [m.content for m in store.messages("run-1")] == ["hello", "one", "two", "three"]
    assert store.verify("run-1") == []


async def test_load_round_trips_the_drivers_final_state_with_executed_from_the_ledger(backend: Backend) -> None:
    store = backend.open()
    result = await Agent(two_tool_steps(), [lookup, transfer], store=store).run("go")
    stored = store.load(result.run_id)
    assert stored.state.to_dict() == result.state.to_dict()
    assert set(stored.state.executed) == {"c1", "c2", "c3"}
    ledger = {entry.call_id: entry for entry in store.ledger(result.run_id)}
    assert ledger["c2"].tool == "transfer" and ledger["c2"].outcome is not None
    assert store.ledger_entry(result.run_id, "c2") == ledger["c2"]
    assert store.ledger_entry(result.run_id, "nope") is None
    kinds = [event.kind for event in store.events(result.run_id)]
    assert kinds[0] == "run_started" and "intent_recorded" in kinds and kinds[-1] == "run_finished"
    assert [event.seq for event in store.events(result.run_id)] == list(range(1, len(kinds) + 1))


async def test_the_runs_row_holds_no_transcript_and_events_no_user_text(backend: Backend) -> None:
    store = backend.open()
    prompt = f"PROMPT-{uuid.uuid4().hex}"
    run_id = await completed_run(store, prompt)
    (meta,) = backend.sql("SELECT meta FROM runs WHERE id = ?", (run_id,))[0]
    assert "messages" not in json.loads(meta) and prompt not in meta
    assert all(prompt not in data for (data,) in backend.sql("SELECT data FROM events WHERE run_id = ?", (run_id,)))
    assert store.logged_prompts([run_id]) == {}
    logging = backend.open(log_content=True)
    logged = await completed_run(logging, prompt)
    assert logging.logged_prompts([run_id, logged]) == {logged: prompt}


def test_intents_cleared_and_outcomes_reach_the_ledger(backend: Backend) -> None:
    from tether.core.machine import PendingCall

    store = backend.open()
    state = new_state("ledger-run")
    start_run(store, state)
    call = PendingCall("k1", "transfer", {"amount": 1}, "fp1", execute=True)
    other = PendingCall("k2", "transfer", {"amount": 2}, "fp2", execute=True)
    for pending in (call, other):
        logged = {"id": pending.call_id, "tool": "transfer", "fingerprint": pending.fingerprint}
        store.checkpoint(state, [("intent_recorded", logged)], intents=[pending])
    entry = store.ledger_entry("ledger-run", "k1")
    assert entry is not None and entry.outcome is None and entry.fingerprint == "fp1"
    store.checkpoint(state, [("outcome_recorded", {"id": "k1", "digest": "x"})], [(call, "moved 1")])
    store.checkpoint(state, [("reconciled", {"id": "k2", "executed": False})], cleared=["k2"])
    # A side effect's recorded outcome is final.
    store.checkpoint(state, [], [(call, "moved again")])
    assert [(e.call_id, e.outcome) for e in store.ledger("ledger-run")] == [("k1", "moved 1")]


# ---------------------------------------------------------------- verify and tampering


TAMPERING = {
    "edited event data": "UPDATE events SET data = '{\"forged\": 1}' WHERE run_id = ? AND seq = 3",
    "edited event kind": "UPDATE events SET kind = 'call_rejected' WHERE run_id = ? AND kind = 'call_executed'",
    "deleted middle event": "DELETE FROM events WHERE run_id = ? AND seq = 3",
    "deleted last event": "DELETE FROM events WHERE run_id = ? AND seq = (SELECT max(seq) FROM events)",
    "edited message": "UPDATE messages SET body = replace(body, 'move', 'steal') WHERE run_id = ? AND seq = 0",
    "deleted message": "DELETE FROM messages WHERE run_id = ? AND seq = 1",
    "edited saved state": "UPDATE runs SET meta = replace(meta, '\"steps\": 3', '\"steps\": 1') WHERE id = ?",
    "edited status": "UPDATE runs SET status = 'awaiting_approval' WHERE id = ?",
    "removed seal": "UPDATE runs SET seal = NULL WHERE id = ?",
    "deleted ledger row": "DELETE FROM ledger WHERE run_id = ? AND call_id = 'c2'",
    "edited ledger outcome": "UPDATE ledger SET outcome = 'nothing happened' WHERE run_id = ? AND call_id = 'c2'",
    "forged ledger row": "INSERT INTO ledger (run_id, call_id, tool, fingerprint, intent_at, outcome, outcome_at)"
    " VALUES (?, 'c9', 'transfer', '', 1.0, 'moved 9', 1.0)",
}


@pytest.mark.parametrize("sql", list(TAMPERING.values()), ids=list(TAMPERING))
async def test_verify_finds_tampering_and_load_refuses_the_run(sql: str, backend: Backend) -> None:
    store = backend.open()
    run_id = await completed_run(store)
    untouched = await completed_run(store)
    assert store.verify(run_id) == []
    backend.sql(sql, (run_id,))
    assert store.verify(run_id) != []
    with pytest.raises(TamperedRun, match=run_id):
        store.load(run_id)
    assert store.verify(untouched) == []  # each run is checked on its own


async def test_a_keyed_seal_needs_the_key(backend: Backend) -> None:
    keyed = backend.open(audit_key="k" * 32)
    run_id = await completed_run(keyed)
    assert keyed.verify(run_id) == []
    assert any("audit key" in p for p in backend.open().verify(run_id))
    assert any("does not match its seal" in p for p in backend.open(audit_key="other").verify(run_id))


def test_verify_of_an_unknown_run_names_it(backend: Backend) -> None:
    store = backend.open()
    with pytest.raises(RunNotFound, match="ghost"):
        store.verify("ghost")
    with pytest.raises(RunNotFound, match="ghost"):
        store.load("ghost")


# ---------------------------------------------------------------- leases


def test_a_second_store_cannot_take_a_live_lease(backend: Backend) -> None:
    first, second = backend.open(), backend.open()
    assert first.owner != second.owner
    state = new_state("leased-run")
    start_run(first, state)  # writing a run takes its lease
    with pytest.raises(LeaseHeld, match="leased-run") as caught:
        second.acquire("leased-run")
    assert caught.value.exit_code == 5
    first.acquire("leased-run")  # the holder may acquire again
    first.release("leased-run")
    second.acquire("leased-run")
    with pytest.raises(LeaseHeld, match="leased-run"):
        first.acquire("leased-run")
    with pytest.raises(RunNotFound, match="ghost-run"):
        first.acquire("ghost-run")


@tool(approval=True)
async def slow_transfer(amount: int) -> str:
    """Move money, taking a while (a side effect a person approves)."""
    EFFECTS.append(amount)
    await asyncio.sleep(0.2)
    return f"moved {amount}"


async def test_two_resumes_of_one_run_in_one_process_are_one_driver_and_a_refusal(backend: Backend) -> None:
    """The lease is the store's, so the second resume passed it: both drove the run, the effect's outcome was
    then unknown to one of them, and a call that had run once waited for a person to say whether it ran."""
    store = backend.open()
    model = ScriptedModel([reply_calls(("c1", "slow_transfer", '{"amount": 5}')), reply_text("moved")])
    agent = Agent(model, [slow_transfer], store=store)
    paused = await agent.run("move 5")
    [call] = paused.state.pending
    decide(store, paused.run_id, "c1", approved=True, fingerprint=call.fingerprint, by="ops")

    async def resumed() -> Any:
        return await agent.resume(paused.run_id)

    first, second = await asyncio.gather(resumed(), resumed(), return_exceptions=True)
    assert getattr(first, "status", None) is Status.COMPLETED, first
    assert isinstance(second, LeaseHeld) and "driven by another driver in this process" in str(second)
    assert EFFECTS == [5]
    assert (await agent.resume(paused.run_id)).status is Status.COMPLETED  # let go: a later resume may drive it


def test_a_lease_expires_unless_renewed(backend: Backend) -> None:
    now = [1_000_000.0]
    holder = backend.open(clock=lambda: now[0], lease_seconds=30)
    other = backend.open(clock=lambda: now[0], lease_seconds=30)
    state = new_state("remote")
    start_run(holder, state)
    now[0] += 20
    holder.renew("remote")  # good for 30 s from now
    now[0] += 20
    with pytest.raises(LeaseHeld, match="remote") as caught:
        other.acquire("remote")
    assert caught.value.until == now[0] + 10
    now[0] += 11
    other.acquire("remote")  # expired: taken over, whoever held it
    with pytest.raises(LeaseHeld, match="remote"):
        holder.renew("remote")


def test_runs_free_to_take_are_those_whose_lease_is_released_or_expired(backend: Backend) -> None:
    """What a service's takeover scan asks for: runs in flight that no live lease holds."""
    now = [1_000_000.0]
    holder = backend.open(clock=lambda: now[0], lease_seconds=30)
    scanner = backend.open(clock=lambda: now[0], lease_seconds=30)
    for run_id in ("held", "released", "lapsed"):
        start_run(holder, new_state(run_id))
    holder.release("released")
    now[0] += 20
    holder.renew("held")  # good until 50 s from the start; "lapsed" ends at 30 s
    now[0] += 15

    def free() -> list[str]:
        return sorted(s.run_id for s in scanner.list_runs(statuses=["ready"], unleased=True))

    assert free() == ["lapsed", "released"]
    assert sorted(s.run_id for s in scanner.list_runs(statuses=["ready"])) == ["held", "lapsed", "released"]
    scanner.acquire("lapsed")
    assert free() == ["released"]
    now[0] += 16
    assert free() == ["held", "released"]  # held by no one who renews


def test_a_checkpoint_after_losing_the_lease_writes_nothing(backend: Backend) -> None:
    first, second = backend.open(), backend.open()
    state = new_state("stolen")
    start_run(first, state)
    first.release("stolen")
    second.acquire("stolen")
    before = first.counts("stolen")
    state.messages.append(Message("assistant", "late"))
    with pytest.raises(LeaseHeld, match="stolen"):
        first.checkpoint(state, [("model_replied", {})])
    assert first.counts("stolen") == before
    assert first.verify("stolen") == []


def test_a_checkpoint_can_release_the_lease(backend: Backend) -> None:
    first, second = backend.open(), backend.open()
    state = new_state("done")
    start_run(first, state)
    first.checkpoint(state, [("run_finished", {})], release=True)
    second.acquire("done")


def test_of_many_stores_racing_for_one_expired_lease_exactly_one_wins(backend: Backend) -> None:
    start_run(backend.open(lease_seconds=0.0), new_state("contested"))  # expired at once
    racers = [backend.open() for _ in range(8)]
    barrier = threading.Barrier(len(racers))
    won: list[str] = []
    lost: list[str] = []

    def race(store: RunStore) -> None:
        barrier.wait()
        try:
            store.acquire("contested")
            won.append(store.owner)
        except LeaseHeld:
            lost.append(store.owner)

    threads = [threading.Thread(target=race, args=(store,)) for store in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(lost) == len(racers) - 1
    assert backend.sql("SELECT lease_owner FROM runs WHERE id = ?", ("contested",)) == [(won[0],)]


# ---------------------------------------------------------------- finding runs


def test_resolve_finds_a_run_by_a_prefix_of_its_id(backend: Backend) -> None:
    store = backend.open()
    for run_id in ("abc111", "abc222", "abd333", "a%c", "a_c"):
        start_run(store, new_state(run_id))
    assert store.resolve("abd") == "abd333"
    assert store.resolve("abc111") == "abc111"
    with pytest.raises(AmbiguousRun, match="abc111, abc222"):
        store.resolve("abc")
    with pytest.raises(RunNotFound, match="zzz"):
        store.resolve("zzz")
    with pytest.raises(RunNotFound):
        store.resolve("")
    assert store.resolve("a%") == "a%c"  # no character of a prefix is a wildcard
    assert store.resolve("a_") == "a_c"


def test_resolve_finds_a_run_by_the_end_of_its_id_when_no_id_starts_so(backend: Backend) -> None:
    """Time-ordered ids share their first digits with the runs started around them and end in random ones."""
    store = backend.open()
    for run_id in ("019a0000aaaa1111", "019a0000bbbb2222", "019a0000cccc1111", "2222xyz", "019a0000ab%_"):
        start_run(store, new_state(run_id))
    assert store.resolve("b2222") == "019a0000bbbb2222"
    assert store.resolve("2222") == "2222xyz"  # a prefix first
    assert store.resolve("cc1111") == "019a0000cccc1111"
    with pytest.raises(AmbiguousRun, match="suffix 1111 is ambiguous: it ends 019a0000aaaa1111, 019a0000cccc1111"):
        store.resolve("1111")
    with pytest.raises(RunNotFound, match="xyz"):
        store.resolve("xyz")  # an end shorter than MIN_SUFFIX finds nothing
    assert store.resolve("ab%_") == "019a0000ab%_"  # no character of an end is a wildcard
    with pytest.raises(RunNotFound):
        store.resolve("a%_")


def test_list_runs_by_principal_and_status_newest_first(backend: Backend) -> None:
    now = [1000.0]
    store = backend.open(clock=lambda: now[0])
    for run_id, who in (("r1", "alice"), ("r2", "bob"), ("r3", "alice")):
        now[0] += 1
        state = new_state(run_id)
        start_run(store, state, Principal(who))
    state = new_state("r1")
    state.status = Status.AWAITING_APPROVAL
    now[0] += 1
    store.checkpoint(state)  # r1 is now the most recently updated
    assert [s.run_id for s in store.list_runs()] == ["r3", "r2", "r1"]
    assert [s.run_id for s in store.list_runs("alice")] == ["r3", "r1"]
    assert [s.run_id for s in store.list_runs(limit=1)] == ["r3"]
    assert [s.run_id for s in store.list_runs(statuses=["awaiting_approval"])] == ["r1"]
    assert [s.run_id for s in store.list_runs(oldest_update_first=True)] == ["r2", "r3", "r1"]
    assert [s.run_id for s in store.list_runs(statuses=[])] == []
    summary = store.list_runs("bob")[0]
    assert (summary.principal, summary.status, summary.created_at) == ("bob", "ready", 1002.0)


def test_list_runs_before_a_run_pages_newest_first_ties_by_id(backend: Backend) -> None:
    """Keyset pages (``tether.serve``'s cursor): runs created later, or at the same instant, never shift one."""
    store = backend.open(clock=lambda: 1000.0)  # every run created at the same instant: the id breaks the tie
    for run_id in ("a", "b", "c", "d"):
        start_run(store, new_state(run_id), Principal("alice"))
    first = store.list_runs("alice", limit=2)
    assert [s.run_id for s in first] == ["d", "c"]
    start_run(store, new_state("e"), Principal("alice"))
    after = (first[-1].created_at, first[-1].run_id)
    assert [s.run_id for s in store.list_runs("alice", limit=2, before=after)] == ["b", "a"]
    assert [s.run_id for s in store.list_runs("alice", before=(1000.0, "a"))] == []


async def test_events_after_a_seq_are_the_later_ones_only(backend: Backend) -> None:
    """What a client following a run driven by another process polls for."""
    store = backend.open()
    run_id = await completed_run(store)
    every = store.events(run_id)
    assert [e.seq for e in every] == list(range(1, len(every) + 1))
    assert store.events(run_id, after=3) == every[3:]
    assert store.events(run_id, after=len(every)) == []


# ---------------------------------------------------------------- the CLI selects the store


async def test_runs_list_show_and_verify_read_the_store_tether_db_names(backend: Backend, tmp_path: Path) -> None:
    run_id = await completed_run(backend.open())
    import tether

    source = str(Path(tether.__file__).parents[1])  # this checkout's tether, whatever is installed
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TETHER_DB": backend.target, "PYTHONPATH": source}

    def tether(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "tether", *args], env=env, capture_output=True, text=True, timeout=60
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done

    listed = tether("runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout
    verified = tether("runs", "verify", run_id[:8])
    assert verified.returncode == 0, verified.stderr
    assert "intact" in verified.stdout
    shown = tether("runs", "show", run_id, "--db", backend.target)
    assert shown.returncode == 0, shown.stderr
    assert "transfer: outcome recorded" in shown.stdout
    backend.sql("DELETE FROM events WHERE run_id = ? AND seq = 2", (run_id,))
    failed = tether("runs", "verify", run_id)
    assert failed.returncode == 6, failed.stdout
    assert "event 2" in failed.stdout + failed.stderr


def test_an_unreachable_postgres_is_a_precise_error(tmp_path: Path) -> None:
    from postgres_server import free_port

    url = f"postgresql://tether:secret-password@127.0.0.1:{free_port()}/runs"
    with pytest.raises(StoreError, match=r"cannot open the run store at postgresql://tether@127.0.0.1:\d+/runs") as e:
        open_store(url, connect_timeout=2)
    assert "secret-password" not in str(e.value)


# ---------------------------------------------------------------- conversations


async def test_a_conversation_keeps_its_turns_and_stores_each_message_once(backend: Backend) -> None:
    store = backend.open()
    model = ScriptedModel([reply_text("first answer"), reply_text("second answer"), reply_text("third answer")])
    conv = Agent(model, [lookup], store=store).conversation()
    for prompt in ("one", "two"):
        assert (await conv.send(prompt)).status is Status.COMPLETED

    again = Agent(model, [lookup], store=backend.open()).conversation(conv.id)
    third = await again.send("three")
    assert third.status is Status.COMPLETED
    contents = [m.content for m in third.state.messages]
    assert contents == ["one", "first answer", "two", "second answer", "three", "third answer"]
    stored = store.load_conversation(conv.id)
    assert [status for _, status in stored.turns] == ["completed"] * 3
    assert backend.sql("SELECT count(*) FROM messages")[0][0] == 6  # appended once each, never rewritten
    assert all(store.verify(run_id) == [] for run_id, _ in stored.turns)
    [latest] = [r for r in store.list_runs() if r.run_id == third.run_id]
    assert (latest.conversation_id, latest.turn) == (conv.id, 3)


async def test_empty_conversations_counts_a_principals_conversations_with_no_turn_made_after_a_time(
    backend: Backend,
) -> None:
    now = [0.0]
    store = backend.open(clock=lambda: now[0])
    for at, who, conversation_id in ((100.0, "alice", "a1"), (200.0, "alice", "a2"), (300.0, "alice", "a3"),
                                     (400.0, "bob", "b1")):  # fmt: skip
        now[0] = at
        store.create_conversation(conversation_id, Principal(who), {})
    assert store.empty_conversations("alice", 0.0) == (3, 100.0)
    assert store.empty_conversations("alice", 150.0) == (2, 200.0)  # made after the time given
    assert store.empty_conversations("carol", 0.0) == (0, None)

    turned = Agent(ScriptedModel([reply_text("an answer")]), [lookup], store=store).conversation(
        "a1", principal=Principal("alice")
    )
    assert (await turned.send("hello")).status is Status.COMPLETED
    assert store.empty_conversations("alice", 0.0) == (2, 200.0)  # a conversation with a turn is not empty
    assert store.empty_conversations("bob", 0.0) == (1, 400.0)
