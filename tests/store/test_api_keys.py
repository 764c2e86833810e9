"""API keys in the run store, against both stores: a SQLite file and a real PostgreSQL server.

A key is kept as its hash in a sealed row. Raw SQL from a connection the
stores know nothing of edits the rows the way an operator or an attacker
with write access to the database would: widened roles, an undone
revocation, a row added with a key of one's own. With ``TETHER_AUDIT_KEY``
each is refused; a revocation holds at once for every store on the database.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_server import PostgresServer

from tether.core.errors import ConfigurationError
from tether.store import SQLiteStore, SQLStore, open_store
from tether.store.dialects import Dialect
from tether.store.dialects.sqlite import SQLiteDialect
from tether.store.keys import KEY_PREFIX, key_hash, key_seal
from tether.tools.context import Principal

AUDIT_KEY = "an audit key only the service holds, 32+ chars"
DATA = Path(__file__).resolve().parent / "data"


class Backend:
    """Stores on one database, and raw SQL on it that they know nothing of."""

    def __init__(self, kind: str, target: str) -> None:
        self.kind, self.target = kind, target
        self.opened: list[SQLStore] = []

    def open(self, **options: Any) -> SQLStore:
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


def test_a_key_acts_for_its_principal_and_is_kept_only_as_its_hash(backend: Backend) -> None:
    store = backend.open()
    key_id, secret = store.create_api_key("alice", ["approver", "approver"], ["tickets:read"])
    assert secret.startswith(KEY_PREFIX) and len(secret) > 40
    assert store.api_key_principal(secret) == Principal("alice", frozenset({"tickets:read"}), frozenset({"approver"}))
    # Nothing that leads back to the key is stored but its SHA-256.
    [row] = backend.sql("SELECT * FROM api_keys")
    assert secret not in repr(row) and key_hash(secret) in row
    assert key_id in row
    listed = store.list_api_keys()
    assert [(k.key_id, k.principal, k.roles, k.scopes, k.revoked_at, k.problem) for k in listed] == [
        (key_id, "alice", ("approver",), ("tickets:read",), None, None)
    ]
    assert secret not in repr(listed) and key_hash(secret) not in repr(listed)


def test_a_key_unknown_or_near_one_is_refused(backend: Backend) -> None:
    store = backend.open()
    _, secret = store.create_api_key("alice")
    for guess in ("", KEY_PREFIX, secret[:-1], secret + "x", secret.upper(), key_hash(secret), "tk_\udcff"):
        assert store.api_key_principal(guess) is None, guess
    # No roles and no scopes given: the key holds none (only tools that need no scope are offered).
    assert store.api_key_principal(secret) == Principal("alice", frozenset(), frozenset())


def test_a_revoked_key_stops_at_once_for_every_store_on_the_database(backend: Backend) -> None:
    serving, other = backend.open(), backend.open()
    key_id, secret = serving.create_api_key("alice", ["approver"])
    _, kept = serving.create_api_key("bob")
    assert serving.api_key_principal(secret) is not None  # looked up once: nothing may remember it
    assert other.revoke_api_key(key_id) is True
    assert serving.api_key_principal(secret) is None
    assert serving.api_key_principal(kept) == Principal("bob", frozenset(), frozenset())
    assert other.revoke_api_key(key_id) is False  # already revoked
    assert other.revoke_api_key("no-such-key") is False
    [listed] = [k for k in serving.list_api_keys() if k.key_id == key_id]
    assert listed.revoked_at is not None and listed.problem is None


@pytest.mark.parametrize(
    ("edit", "params"),
    [
        ("UPDATE api_keys SET roles = ? WHERE principal = 'alice'", ('["admin", "approver"]',)),
        ("UPDATE api_keys SET scopes = ? WHERE principal = 'alice'", ('["*"]',)),
        ("UPDATE api_keys SET principal = 'root' WHERE principal = 'alice'", ()),
    ],
    ids=["roles-widened", "scopes-widened", "principal-changed"],
)
def test_an_edited_key_row_is_refused_under_the_audit_key(backend: Backend, edit: str, params: tuple[Any, ...]) -> None:
    store = backend.open(audit_key=AUDIT_KEY)
    _, secret = store.create_api_key("alice", ["viewer"])
    _, untouched = store.create_api_key("bob", ["viewer"])
    backend.sql(edit, params)
    assert store.api_key_principal(secret) is None
    assert store.api_key_principal(untouched) is not None
    [edited] = [k for k in store.list_api_keys() if k.principal != "bob"]
    assert edited.problem is not None and "does not match its seal" in edited.problem


def test_an_undone_revocation_is_refused_under_the_audit_key(backend: Backend) -> None:
    store = backend.open(audit_key=AUDIT_KEY)
    key_id, secret = store.create_api_key("alice", ["approver"])
    assert store.revoke_api_key(key_id)
    backend.sql("UPDATE api_keys SET revoked_at = NULL WHERE id = ?", (key_id,))
    assert store.api_key_principal(secret) is None


def test_a_key_row_added_without_the_audit_key_is_refused(backend: Backend) -> None:
    store = backend.open(audit_key=AUDIT_KEY)
    store.create_api_key("alice")
    # Someone with write access to the database adds a key of their own, sealed as a store without the key would.
    forged = "tk_" + "x" * 43
    row = (key_hash(forged), "mallory", '["approver"]', '["*"]', 1.0, None)
    backend.sql(
        "INSERT INTO api_keys (id, hash, principal, roles, scopes, created_at, revoked_at, seal)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        ("forged", *row, key_seal(None, "forged", row)),
    )
    assert store.api_key_principal(forged) is None
    # A store without the audit key cannot tell that forgery from its own rows: the audit key is what stops it.
    assert backend.open().api_key_principal(forged) == Principal("mallory", frozenset({"*"}), frozenset({"approver"}))


def test_keys_sealed_with_and_without_the_audit_key_need_the_same_key_to_be_honoured(backend: Backend) -> None:
    _, plain = backend.open().create_api_key("alice")
    _, keyed = backend.open(audit_key=AUDIT_KEY).create_api_key("bob")
    assert backend.open(audit_key=AUDIT_KEY).api_key_principal(plain) is None
    assert backend.open().api_key_principal(keyed) is None
    assert backend.open(audit_key="another audit key, also 32+ chars").api_key_principal(keyed) is None
    assert backend.open(audit_key=AUDIT_KEY).api_key_principal(keyed) is not None


@pytest.mark.parametrize(
    ("principal", "roles", "scopes"),
    [
        ("", (), ()),
        ("   ", (), ()),
        ("a\nb", (), ()),
        ("alice", ("two words",), ()),
        ("alice", ("",), ()),
        ("alice", (), ("a\tb",)),
        ("x" * 201, (), ()),
    ],
)
def test_a_bad_principal_role_or_scope_is_refused_and_nothing_is_written(
    backend: Backend, principal: str, roles: tuple[str, ...], scopes: tuple[str, ...]
) -> None:
    store = backend.open()
    with pytest.raises(ConfigurationError):
        store.create_api_key(principal, roles, scopes)
    assert store.list_api_keys() == []


def test_a_store_from_before_api_keys_migrates_and_keeps_keys(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    shutil.copyfile(DATA / "legacy-v5.db", path)
    store = SQLiteStore(path)
    assert store.verify("legacy-completed") == []
    _, secret = store.create_api_key("alice", ["approver"])
    store.close()
    assert SQLiteStore(path).api_key_principal(secret) == Principal("alice", frozenset(), frozenset({"approver"}))
