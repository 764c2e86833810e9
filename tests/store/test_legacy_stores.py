"""Run stores written before the store had one class open, migrate and verify unchanged.

``data/`` holds what tether wrote with its two store classes (commit
7030135): SQLite files at migration 5 (one keyed with an audit key) and a
``pg_dump`` of a PostgreSQL schema with its own two-step history. Each holds
a completed run, a run paused for an approval that was then approved, and a
conversation of two turns. Opened by today's store, every run verifies,
the approved run resumes to its end, and the conversation goes on.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import psycopg
import pytest
from postgres_server import PostgresServer

from tether.core.machine import Status
from tether.drivers.local.runner import Agent
from tether.models.scripted import ScriptedModel, reply_text
from tether.store import PostgresStore, RunStore, SQLiteStore
from tether.store.sql import MIGRATIONS
from tether.tools import ToolContext, tool

DATA = Path(__file__).resolve().parent / "data"
RUNS = ("legacy-completed", "legacy-paused", "legacy-turn-1", "legacy-turn-2")
CONVERSATIONS = {
    "legacy-v5.db": "ad5a28342bde4c1b8ef60ae7b40c5d78",
    "legacy-v5-keyed.db": "9a827b41c9b04946845da157ad89def0",
    "legacy-pg.sql": "14b5d7775bc248e18a33570245ee0ec3",
}


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(approval=True)
def refund(ticket: str, context: ToolContext) -> str:
    """Refund a ticket's order."""
    return f"refunded {ticket}"


async def check_it_carries_on(store: RunStore, conversation_id: str) -> None:
    for run_id in RUNS:
        assert store.verify(run_id) == [], run_id
        store.load(run_id)
    assert store.verify_conversation(conversation_id) == []
    resumed = await Agent(ScriptedModel([reply_text("refunded")]), [lookup, refund], store=store).resume(
        "legacy-paused"
    )
    assert (resumed.status, resumed.output) == (Status.COMPLETED, "refunded")
    agent = Agent(ScriptedModel([reply_text("third")]), [lookup], store=store)
    conversation = agent.conversation(conversation_id)
    assert conversation.turns == 2
    third = await conversation.send("once more")
    assert third.status is Status.COMPLETED
    assert store.verify(third.run_id) == [] and store.verify_conversation(conversation_id) == []


@pytest.mark.parametrize("name,key", [("legacy-v5.db", None), ("legacy-v5-keyed.db", "legacy key")])
async def test_a_sqlite_file_of_the_two_class_store_migrates_and_verifies(
    tmp_path: Path, name: str, key: str | None
) -> None:
    path = tmp_path / name
    shutil.copyfile(DATA / name, path)
    store = SQLiteStore(path, audit_key=key)
    try:
        await check_it_carries_on(store, CONVERSATIONS[name])
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        versions = [row[0] for row in db.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == list(range(1, len(MIGRATIONS) + 1))


async def test_a_postgres_schema_of_the_two_class_store_migrates_and_verifies(postgres_server: PostgresServer) -> None:
    url = postgres_server.schema_url()
    schema = url.rsplit("%3D", 1)[1]
    # psql's meta-commands (pg_dump's \\restrict lines) are for psql, not the server.
    dump = "\n".join(line for line in (DATA / "legacy-pg.sql").read_text().splitlines() if not line.startswith("\\"))
    statements = dump.replace("CREATE SCHEMA legacy;", "").replace("legacy.", f"{schema}.")
    with psycopg.connect(postgres_server.url(), autocommit=True) as db:
        db.execute(statements.encode())
    with psycopg.connect(url, autocommit=True) as db:
        legacy = db.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    assert legacy == [(1, "m1_initial"), (2, "m2_conversations")]  # the PostgreSQL store's own history
    store = PostgresStore(url)
    try:
        await check_it_carries_on(store, CONVERSATIONS["legacy-pg.sql"])
    finally:
        store.close()
    with psycopg.connect(url, autocommit=True) as db:
        names = [row[0] for row in db.execute("SELECT name FROM schema_migrations ORDER BY version")]
    assert names == [m.name for m in MIGRATIONS]  # the merged history, each step once
