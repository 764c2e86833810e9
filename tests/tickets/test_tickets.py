"""The tickets database and the agent's ticket tools, driven through the real gate.

Every tool call goes Toolbox.check (strict decoding and schema) then
Toolbox.invoke, against a real SQLite file seeded with the reference data.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from argon2 import PasswordHasher

from tether.core.errors import ConfigurationError
from tether.core.machine import Accepted, PendingCall
from tether.core.messages import ToolCall
from tether.tools import Executed, NotExecuted, Principal, Toolbox, ToolContext, ToolResult
from tickets_app import TicketsDB, User, seed, ticket_tools, verify_password
from tickets_app.seed_data import TICKETS, USERS
from tickets_app.tools import KB_EMPTY_NOTE, KB_NO_MATCH_NOTE

# Real argon2id, with costs low enough that a test seeds in milliseconds.
FAST_HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)

ALICE = Principal("user-alice", roles=frozenset({"customer"}))
BOB = Principal("user-bob", roles=frozenset({"customer"}))
CAROL = Principal("user-carol", roles=frozenset({"agent"}))
DAVE = Principal("user-dave", roles=frozenset({"admin"}))

ALICE_TICKETS = {t.id for t in TICKETS if t.reporter == "alice"}
BOB_TICKETS = {t.id for t in TICKETS if t.reporter == "bob"}
CAROL_TICKETS = {t.id for t in TICKETS if t.assignee == "carol"}
BOB_TICKET = next(t.id for t in TICKETS if t.reporter == "bob" and t.status == "open")
MISSING = "TICKET-999999"


def make_db(path: Path, clock: float = 1_750_000_000.0) -> TicketsDB:
    db = TicketsDB(path, clock=lambda: clock, password_hasher=FAST_HASHER)
    seed(db)
    return db


@pytest.fixture
def db(tmp_path: Path) -> TicketsDB:
    return make_db(tmp_path / "tickets.db")


@dataclass
class Snip:
    source: str
    heading: str
    text: str
    score: float


class ListKB:
    """The kb dependency: a fixed list of passages, matched by a shared word."""

    def __init__(self, snippets: list[Snip]) -> None:
        self.snippets = snippets
        self.calls: list[tuple[str, int]] = []

    def search(self, query: str, top_k: int) -> list[Snip]:
        self.calls.append((query, top_k))
        words = set(query.lower().split())
        return [s for s in self.snippets if words & set(s.text.lower().split())][:top_k]


def box(db: TicketsDB, principal: Principal, kb: ListKB | None = None) -> Toolbox:
    return Toolbox(ticket_tools(db, kb), principal)


async def call(toolbox: Toolbox, name: str, arguments: dict[str, Any], call_id: str = "call_1") -> str:
    """The envelope the model would see: the rejection, or the result of running the call."""
    decision = toolbox.check(ToolCall(call_id, name, json.dumps(arguments)))
    if not isinstance(decision, Accepted):
        return json.dumps({"ok": False, "error": {"code": decision.code.value, "message": decision.message}})
    pending = PendingCall(
        call_id=call_id,
        tool=name,
        arguments=decision.arguments,
        fingerprint=None,
        read_only=decision.read_only,
        execute=True,
        needs_approval=decision.needs_approval,
    )
    return await toolbox.invoke(pending, "run_1")


def ok(raw: str) -> Any:
    data = json.loads(raw)
    assert data["ok"] is True, raw
    return data["result"]


def failed(raw: str, code: str) -> str:
    data = json.loads(raw)
    assert data["ok"] is False, raw
    assert data["error"]["code"] == code, raw
    return str(data["error"]["message"])


def count(db: TicketsDB, table: str) -> int:
    with sqlite3.connect(db.path) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


async def all_listed(toolbox: Toolbox, **filters: Any) -> list[dict[str, Any]]:
    listed = ok(await call(toolbox, "list_tickets", {"page_size": 50, **filters}))
    assert listed["total"] == len(listed["items"])
    return list(listed["items"])


# --- the database and the seed ---------------------------------------------


def dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(path) as conn:
        return {
            "users": conn.execute("SELECT id, username, role, created_at FROM users ORDER BY id").fetchall(),
            "tickets": conn.execute("SELECT * FROM tickets ORDER BY id").fetchall(),
            "comments": conn.execute("SELECT * FROM comments ORDER BY id").fetchall(),
        }


def test_seed_is_deterministic_and_rerunnable(tmp_path: Path) -> None:
    first = make_db(tmp_path / "a.db", clock=1_700_000_000.0)
    make_db(tmp_path / "b.db", clock=1_800_000_000.0)
    assert dump(tmp_path / "a.db") == dump(tmp_path / "b.db")
    data = dump(tmp_path / "a.db")
    assert [u[1] for u in data["users"]] == ["alice", "bob", "carol", "dave"]
    assert {u[1]: u[2] for u in data["users"]} == {
        "alice": "customer",
        "bob": "customer",
        "carol": "agent",
        "dave": "admin",
    }
    assert len(data["tickets"]) == 20
    assert len(ALICE_TICKETS) > 5 and len(BOB_TICKETS) > 5 and len(ALICE_TICKETS | BOB_TICKETS) == 20
    assert 5 < len(CAROL_TICKETS) < 20
    assert {t.status for t in TICKETS} == {"open", "pending", "closed"}
    assert len(data["comments"]) >= 10

    seed(first)  # again: nothing added, nothing changed
    assert dump(tmp_path / "a.db") == data


def test_passwords_are_argon2_hashes_that_verify(db: TicketsDB) -> None:
    with sqlite3.connect(db.path) as conn:
        hashes = [row[0] for row in conn.execute("SELECT password_hash FROM users")]
    assert all(h.startswith("$argon2id$") for h in hashes)
    assert not any("-pass" in h for h in hashes)
    for user in USERS:
        assert db.verify_password(user.username, f"{user.username}-pass") == User(user.id, user.username, user.role)
    assert verify_password(db, "alice", "alice-pass") == User("user-alice", "alice", "customer")
    assert db.verify_password("alice", "bob-pass") is None
    assert db.verify_password("alice", "") is None
    assert db.verify_password("mallory", "mallory-pass") is None
    assert db.get_user("user-carol") == User("user-carol", "carol", "agent")
    assert db.get_user("user-mallory") is None


def test_seed_uses_the_default_argon2_parameters(tmp_path: Path) -> None:
    db = TicketsDB(tmp_path / "t.db")
    seed(db)
    assert db.verify_password("dave", "dave-pass") == User("user-dave", "dave", "admin")
    assert db.verify_password("dave", "alice-pass") is None


def test_schema_is_idempotent_and_data_survives_reopening(db: TicketsDB) -> None:
    db.create_schema()
    db.create_schema()
    db.close()
    again = TicketsDB(db.path, password_hasher=FAST_HASHER)
    assert again.list_visible("user-dave", "admin").total == 20
    with sqlite3.connect(db.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_corrupt_file_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "tickets.db"
    path.write_bytes(b"this is not a database, just some bytes " * 200)
    with pytest.raises(ConfigurationError, match=r"cannot use .*tickets\.db as the tickets database"):
        TicketsDB(path)


def test_another_programs_database_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id TEXT PRIMARY KEY, email TEXT)")
    with pytest.raises(ConfigurationError, match="table users lacks column"):
        TicketsDB(path)


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_an_unusable_path_is_a_configuration_error(tmp_path: Path, where: str) -> None:
    if where == "a directory":
        path = tmp_path
    else:
        (tmp_path / "plain").write_text("x")
        path = tmp_path / "plain" / "tickets.db"
    with pytest.raises(ConfigurationError, match="tickets database"):
        TicketsDB(path)


# --- who sees what ------------------------------------------------------------


@pytest.mark.parametrize("name", ["get_ticket", "add_comment", "close_ticket"])
async def test_another_customers_ticket_looks_exactly_like_a_missing_one(db: TicketsDB, name: str) -> None:
    alice = box(db, ALICE)
    extra = {"body": "hello"} if name == "add_comment" else {}
    hidden = await call(alice, name, {"ticket_id": BOB_TICKET, **extra})
    missing = await call(alice, name, {"ticket_id": MISSING, **extra})
    assert failed(hidden, "tool_failed") == f"no ticket {BOB_TICKET}"
    assert hidden.replace(BOB_TICKET, MISSING) == missing
    # and nothing happened to Bob's ticket
    assert db.visible_ticket("user-bob", "customer", BOB_TICKET) == db.visible_ticket("user-dave", "admin", BOB_TICKET)
    assert count(db, "comments") == sum(len(t.comments) for t in TICKETS)
    assert ok(await call(box(db, BOB), "get_ticket", {"ticket_id": BOB_TICKET}))["status"] == "open"


async def test_a_customer_lists_only_their_own_tickets(db: TicketsDB) -> None:
    alice = box(db, ALICE)
    items = await all_listed(alice)
    assert {t["id"] for t in items} == ALICE_TICKETS
    assert {t["reporter"] for t in items} == {"alice"}
    for status in ("open", "pending", "closed"):
        listed = await all_listed(alice, status=status)
        assert {t["id"] for t in listed} == {t.id for t in TICKETS if t.reporter == "alice" and t.status == status}
    assert {t["id"] for t in await all_listed(box(db, BOB))} == BOB_TICKETS


async def test_get_ticket_returns_fields_and_comments(db: TicketsDB) -> None:
    seeded = next(t for t in TICKETS if t.reporter == "alice" and len(t.comments) >= 2)
    ticket = ok(await call(box(db, ALICE), "get_ticket", {"ticket_id": seeded.id}))
    assert ticket["id"] == seeded.id
    assert ticket["title"] == seeded.title
    assert ticket["body"] == seeded.body
    assert ticket["reporter"] == "alice"
    assert ticket["status"] == seeded.status
    assert [c["body"] for c in ticket["comments"]] == [c.body for c in seeded.comments]
    assert [c["author"] for c in ticket["comments"]] == [c.author for c in seeded.comments]


async def test_an_agent_sees_only_tickets_assigned_to_them(db: TicketsDB) -> None:
    carol = box(db, CAROL)
    items = await all_listed(carol)
    assert {t["id"] for t in items} == CAROL_TICKETS
    assert {t["assignee"] for t in items} == {"carol"}
    unassigned = next(t.id for t in TICKETS if t.assignee is None)
    assert failed(await call(carol, "get_ticket", {"ticket_id": unassigned}), "tool_failed") == (
        f"no ticket {unassigned}"
    )
    assert ok(await call(carol, "get_ticket", {"ticket_id": sorted(CAROL_TICKETS)[0]}))["assignee"] == "carol"


async def test_an_admin_sees_every_ticket(db: TicketsDB) -> None:
    dave = box(db, DAVE)
    assert {t["id"] for t in await all_listed(dave)} == {t.id for t in TICKETS}
    assert ok(await call(dave, "get_ticket", {"ticket_id": BOB_TICKET}))["reporter"] == "bob"


async def test_a_principal_without_a_tickets_role_gets_nothing(db: TicketsDB) -> None:
    nobody = box(db, Principal("user-alice"))  # right id, no role
    message = failed(await call(nobody, "list_tickets", {}), "tool_failed")
    assert message == "this principal has no tickets role (customer, agent or admin)"
    assert failed(await call(nobody, "get_ticket", {"ticket_id": sorted(ALICE_TICKETS)[0]}), "tool_failed") == message


# --- validation and paging ----------------------------------------------------


@pytest.mark.parametrize(
    "ticket_id", ["TICKET-12", "ticket-318204", "TICKET-3182040", "TICKET-31820a", " TICKET-318204"]
)
async def test_a_malformed_ticket_id_is_rejected_before_the_tool_runs(db: TicketsDB, ticket_id: str) -> None:
    message = failed(await call(box(db, DAVE), "get_ticket", {"ticket_id": ticket_id}), "invalid_arguments")
    assert message == "ticket_id: must match ^TICKET-[0-9]{6}$"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"page": 0}, "page: must be >= 1"),
        ({"page_size": 51}, "page_size: must be <= 50"),
        ({"page": "2"}, "expected integer, got string"),
        ({"page": True}, "expected integer, got boolean"),
        ({"status": "new"}, "status"),
        ({"owner": "bob"}, "unexpected field(s) 'owner'"),
    ],
)
async def test_list_arguments_are_validated_strictly(db: TicketsDB, arguments: dict[str, Any], expected: str) -> None:
    assert expected in failed(await call(box(db, ALICE), "list_tickets", arguments), "invalid_arguments")


async def test_paging_walks_every_visible_ticket_once_newest_first(db: TicketsDB) -> None:
    alice = box(db, ALICE)
    pages = [ok(await call(alice, "list_tickets", {"page": n, "page_size": 4})) for n in (1, 2, 3, 4)]
    assert [len(p["items"]) for p in pages] == [4, 4, 3, 0]
    assert {p["total"] for p in pages} == {11}
    assert [p["page"] for p in pages] == [1, 2, 3, 4]
    ids = [t["id"] for p in pages for t in p["items"]]
    assert len(ids) == len(set(ids)) and set(ids) == ALICE_TICKETS
    created = [t["created_at"] for p in pages for t in p["items"]]
    assert created == sorted(created, reverse=True)
    assert "body" not in pages[0]["items"][0]
    first = ok(await call(alice, "list_tickets", {}))
    assert first["page"] == 1 and first["page_size"] == 10 and len(first["items"]) == 10


# --- side effects and idempotency ---------------------------------------------


async def test_create_ticket_is_reported_by_the_principal_and_idempotent(db: TicketsDB) -> None:
    alice = box(db, ALICE)
    before = count(db, "tickets")
    arguments = {"title": "Cannot download invoices", "body": "The download button does nothing."}
    first = ok(await call(alice, "create_ticket", arguments))
    again = ok(await call(alice, "create_ticket", arguments))  # same run and call: same idempotency key
    assert first == again
    assert count(db, "tickets") == before + 1
    ticket = first["ticket"]
    assert ticket["reporter"] == "alice" and ticket["status"] == "open" and ticket["assignee"] is None
    assert ok(await call(alice, "get_ticket", {"ticket_id": ticket["id"]}))["title"] == "Cannot download invoices"
    other = ok(await call(alice, "create_ticket", arguments, call_id="call_2"))
    assert other["ticket"]["id"] != ticket["id"]
    assert count(db, "tickets") == before + 2
    # Bob cannot see it
    assert failed(await call(box(db, BOB), "get_ticket", {"ticket_id": ticket["id"]}), "tool_failed")


async def test_an_agent_takes_the_tickets_they_open(db: TicketsDB) -> None:
    carol = box(db, CAROL)
    made = ok(await call(carol, "create_ticket", {"title": "Follow up with billing", "body": "Refund check."}))
    assert made["ticket"]["assignee"] == "carol" and made["ticket"]["reporter"] == "carol"
    assert ok(await call(carol, "get_ticket", {"ticket_id": made["ticket"]["id"]}))["id"] == made["ticket"]["id"]


async def test_create_ticket_needs_an_account(db: TicketsDB) -> None:
    ghost = box(db, Principal("user-ghost", roles=frozenset({"customer"})))
    message = failed(await call(ghost, "create_ticket", {"title": "Hello", "body": "x"}), "tool_failed")
    assert message == "you have no account in the tickets database"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"title": "Hi", "body": "x"}, "title"),
        ({"title": "x" * 201, "body": "x"}, "title"),
        ({"title": "Hello", "body": ""}, "body"),
        ({"title": "Hello", "body": "x" * 5001}, "body"),
        ({"title": "Hello"}, "'body' is required"),
    ],
)
async def test_create_ticket_arguments_are_bounded(db: TicketsDB, arguments: dict[str, Any], expected: str) -> None:
    assert expected in failed(await call(box(db, ALICE), "create_ticket", arguments), "invalid_arguments")


async def test_add_comment_is_idempotent_and_shows_on_the_ticket(db: TicketsDB) -> None:
    alice = box(db, ALICE)
    ticket_id = sorted(ALICE_TICKETS)[0]
    before = count(db, "comments")
    arguments = {"ticket_id": ticket_id, "body": "Any news on this?"}
    first = ok(await call(alice, "add_comment", arguments))
    assert ok(await call(alice, "add_comment", arguments)) == first
    assert count(db, "comments") == before + 1
    assert first["author"] == "alice" and first["ticket_id"] == ticket_id
    shown = ok(await call(alice, "get_ticket", {"ticket_id": ticket_id}))
    assert shown["comments"][-1]["body"] == "Any news on this?"
    assert shown["updated_at"] == first["created_at"]
    # the assigned agent sees it too
    if ticket_id in CAROL_TICKETS:
        assert ok(await call(box(db, CAROL), "get_ticket", {"ticket_id": ticket_id}))["comments"][-1] == first


async def test_close_ticket_needs_approval_and_changes_state_once(db: TicketsDB) -> None:
    bob = box(db, BOB)
    ticket_id = next(t.id for t in TICKETS if t.reporter == "bob" and t.status == "open")
    decision = bob.check(ToolCall("call_1", "close_ticket", json.dumps({"ticket_id": ticket_id})))
    assert isinstance(decision, Accepted)
    assert decision.needs_approval is True and decision.read_only is False

    first = ok(await call(bob, "close_ticket", {"ticket_id": ticket_id}))
    assert first["changed"] is True and first["status"] == "closed" and first["closed_at"]
    assert ok(await call(bob, "close_ticket", {"ticket_id": ticket_id})) == first  # a retry: the first answer
    later = ok(await call(bob, "close_ticket", {"ticket_id": ticket_id}, call_id="call_2"))
    assert later == {**first, "changed": False}
    assert ok(await call(bob, "get_ticket", {"ticket_id": ticket_id}))["closed_at"] == first["closed_at"]


def test_closing_twice_in_the_database_reports_one_change(db: TicketsDB) -> None:
    ticket_id = next(t.id for t in TICKETS if t.status == "open")
    first = db.close_ticket("user-dave", "admin", ticket_id)
    second = db.close_ticket("user-dave", "admin", ticket_id)
    assert first is not None and second is not None
    assert (first.changed, second.changed) == (True, False)
    assert first.ticket == second.ticket
    assert db.close_ticket("user-alice", "customer", BOB_TICKET) is None


async def run_call(toolbox: Toolbox, name: str, arguments: dict[str, Any]) -> ToolResult:
    decision = toolbox.check(ToolCall("call_1", name, json.dumps(arguments)))
    assert isinstance(decision, Accepted), decision
    pending = PendingCall("call_1", name, decision.arguments, None, read_only=decision.read_only, execute=True)
    return await toolbox.execute(pending, "run_1")


def _writers(ticket: Any) -> set[str]:
    return {ticket.reporter, *(c.author for c in ticket.comments)}


async def test_ticket_text_taints_exactly_when_another_user_wrote_it(db: TicketsDB) -> None:
    own = next(t for t in TICKETS if _writers(t) == {"alice"})
    answered = next(t for t in TICKETS if t.reporter == "alice" and _writers(t) != {"alice"})
    alice, carol = box(db, ALICE), box(db, CAROL)

    mine = await run_call(alice, "get_ticket", {"ticket_id": own.id})
    assert ok(mine.content)["id"] == own.id and mine.untrusted is False
    replied = await run_call(alice, "get_ticket", {"ticket_id": answered.id})
    assert ok(replied.content)["id"] == answered.id and replied.untrusted is True
    # An agent reads what customers wrote.
    assigned = next(t for t in TICKETS if t.assignee == "carol")
    assert (await run_call(carol, "get_ticket", {"ticket_id": assigned.id})).untrusted is True
    # A list shows the reporters' titles: alice's own list is hers alone, carol's is not.
    assert (await run_call(alice, "list_tickets", {})).untrusted is False
    assert (await run_call(carol, "list_tickets", {})).untrusted is True
    # A ticket alice may not see reveals no text: nothing to taint with.
    assert (await run_call(alice, "get_ticket", {"ticket_id": BOB_TICKET})).untrusted is False


async def test_kb_text_always_taints_and_written_results_never_do(db: TicketsDB) -> None:
    kb = ListKB([Snip("billing/refunds.md", "Refunds", "refund a duplicate charge", 1.0)])
    alice = box(db, ALICE, kb)
    tools = alice.all
    assert tools["search_kb"].untrusted_output
    assert (await run_call(alice, "search_kb", {"query": "refund"})).untrusted is True
    assert not any(tools[n].untrusted_output for n in ("create_ticket", "add_comment", "close_ticket"))
    created = await run_call(alice, "create_ticket", {"title": "Broken export", "body": "It fails."})
    assert created.untrusted is False
    ticket_id = ok(created.content)["ticket"]["id"]
    assert (await run_call(alice, "add_comment", {"ticket_id": ticket_id, "body": "Still failing."})).untrusted is False
    assert {n for n, t in tools.items() if t.read_only} == {"get_ticket", "list_tickets", "search_kb"}


async def test_trusting_ticket_text_never_marks_it(db: TicketsDB) -> None:
    carol = Toolbox(ticket_tools(db, ticket_text_untrusted=False), CAROL)
    assigned = next(t for t in TICKETS if t.assignee == "carol")
    assert (await run_call(carol, "get_ticket", {"ticket_id": assigned.id})).untrusted is False
    assert (await run_call(carol, "list_tickets", {})).untrusted is False


# --- reconcile hooks -----------------------------------------------------------


async def test_reconcile_hooks_find_the_effect_by_idempotency_key(db: TicketsDB) -> None:
    alice = box(db, ALICE)
    tools = alice.all
    ticket_id = next(t.id for t in TICKETS if t.reporter == "alice" and t.status == "open")
    cases = [
        ("create_ticket", {"title": "Printer offline", "body": "It says offline."}, "call_c"),
        ("add_comment", {"ticket_id": ticket_id, "body": "Still broken."}, "call_m"),
        ("close_ticket", {"ticket_id": ticket_id}, "call_x"),
    ]
    for name, arguments, call_id in cases:
        hook = tools[name].reconcile
        assert hook is not None, name
        context = ToolContext("run_1", call_id, ALICE)
        assert hook(context, arguments) == NotExecuted(), name
        result = ok(await call(alice, name, arguments, call_id=call_id))
        assert hook(context, arguments) == Executed(result), name
        assert hook(ToolContext("run_2", call_id, ALICE), arguments) == NotExecuted(), name


# --- search_kb -------------------------------------------------------------------


KB = [
    Snip("billing.md", "Refunds", "duplicate charges are refunded within 10 days", 0.91),
    Snip("billing.md", "Invoices", "download invoices from the billing page", 0.52),
    Snip("security.md", "Two-factor", "check the phone clock when codes are rejected", 0.33),
]


async def test_search_kb_returns_the_knowledge_bases_passages(db: TicketsDB) -> None:
    kb = ListKB(KB)
    found = ok(await call(box(db, ALICE, kb), "search_kb", {"query": "refund duplicate charges", "top_k": 2}))
    assert kb.calls == [("refund duplicate charges", 2)]
    assert found == {
        "results": [
            {
                "source": "billing.md",
                "heading": "Refunds",
                "text": "duplicate charges are refunded within 10 days",
                "score": 0.91,
            }
        ],
        "count": 1,
    }
    ok(await call(box(db, ALICE, kb), "search_kb", {"query": "billing"}))
    assert kb.calls[-1] == ("billing", 5)


async def test_search_kb_says_plainly_when_nothing_matches(db: TicketsDB) -> None:
    no_match = ok(await call(box(db, ALICE, ListKB(KB)), "search_kb", {"query": "quantum entanglement"}))
    assert no_match == {"results": [], "count": 0, "note": KB_NO_MATCH_NOTE}
    empty = ok(await call(box(db, ALICE, ListKB([])), "search_kb", {"query": "refund"}))
    assert empty["count"] == 0 and empty["note"] == "the knowledge base has no matching documents"
    no_kb = ok(await call(box(db, ALICE), "search_kb", {"query": "refund"}))
    assert no_kb == {"results": [], "count": 0, "note": KB_EMPTY_NOTE}
    assert "empty" in KB_EMPTY_NOTE


@pytest.mark.parametrize(
    "arguments", [{"query": "x"}, {"query": "x" * 201}, {"query": "refund", "top_k": 0}, {"query": "ok", "top_k": 11}]
)
async def test_search_kb_arguments_are_bounded(db: TicketsDB, arguments: dict[str, Any]) -> None:
    kb = ListKB(KB)
    failed(await call(box(db, ALICE, kb), "search_kb", arguments), "invalid_arguments")
    assert kb.calls == []
