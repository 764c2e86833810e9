"""``tether keys create/list/revoke``, run as the real command against a real run store.

The key is printed once by ``create`` and nowhere else: not by ``list``
(text or JSON), not in the database's bytes. ``revoke`` stops it for a
store that is already open, in this process.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from cli_helpers import clean_env, tether

from tether.store import SQLiteStore
from tether.store.keys import key_hash
from tether.tools.context import Principal

AUDIT_KEY = "the service's audit key, 32 characters or more"


def create(db: Path, *argv: str, **env: str) -> dict[str, object]:
    done = tether("keys", "create", "--db", str(db), "--json", *argv, env=clean_env(**env))
    assert done.code == 0, done
    made: dict[str, object] = json.loads(done.out)
    return made


def test_a_key_is_shown_once_and_works(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    done = tether("keys", "create", "--principal", "alice", "--roles", "approver,auditor", "--db", str(db))
    assert done.code == 0, done
    heading, secret = done.out.splitlines()
    assert secret.startswith("tk_") and heading.startswith("key ") and "for alice" in heading
    assert "roles: approver,auditor" in heading and "scopes: none" in heading
    assert "Shown only now" in done.err and secret not in done.err
    key_id = heading.split()[1]
    store = SQLiteStore(db)
    assert store.api_key_principal(secret) == Principal("alice", frozenset(), frozenset({"approver", "auditor"}))
    store.close()
    listed = tether("keys", "list", "--db", str(db))
    as_json = tether("keys", "list", "--db", str(db), "--json")
    assert listed.code == as_json.code == 0
    assert key_id in listed.out and "active" in listed.out and "alice" in listed.out
    assert [k["key_id"] for k in json.loads(as_json.out)] == [key_id]
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("runs.db"))
    for shown in (listed.out + listed.err, as_json.out + as_json.err, stored.decode("latin-1")):
        assert secret not in shown and secret[3:24] not in shown
    assert key_hash(secret) not in listed.out + as_json.out


def test_json_create_names_the_key_its_roles_and_scopes(tmp_path: Path) -> None:
    made = create(tmp_path / "runs.db", "--principal", "bob", "--roles", "approver", "--scope", "a,b", "--scope", "*")
    assert made["principal"] == "bob" and made["roles"] == ["approver"] and made["scopes"] == ["*", "a", "b"]
    assert str(made["key"]).startswith("tk_") and made["revoked_at"] is None and made["problem"] is None


def test_the_default_store_is_tether_db(tmp_path: Path) -> None:
    db = tmp_path / "env.db"
    done = tether("keys", "create", "--principal", "carol", "--json", env=clean_env(TETHER_DB=str(db)))
    assert done.code == 0, done
    secret = json.loads(done.out)["key"]
    store = SQLiteStore(db)
    assert store.api_key_principal(secret) is not None
    store.close()


def test_revoke_stops_a_key_for_a_store_already_open(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    made = create(db, "--principal", "alice", "--roles", "approver")
    serving = SQLiteStore(db)  # a server's store, open before and after
    assert serving.api_key_principal(str(made["key"])) is not None
    done = tether("keys", "revoke", str(made["key_id"]), "--db", str(db))
    assert (done.code, done.out.strip()) == (0, f"key {made['key_id']} revoked")
    assert serving.api_key_principal(str(made["key"])) is None
    serving.close()
    again = tether("keys", "revoke", str(made["key_id"]), "--db", str(db), "--json")
    assert again.code == 0 and json.loads(again.out)["revoked"] is False
    listed = tether("keys", "list", "--db", str(db))
    assert "revoked" in listed.out and "active" not in listed.out


def test_revoking_an_unknown_key_is_exit_3(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    create(db, "--principal", "alice")
    done = tether("keys", "revoke", "no-such-key", "--db", str(db))
    assert done.code == 3 and "no API key no-such-key" in done.err
    done = tether("keys", "revoke", "no-such-key", "--db", str(db), "--json")
    assert done.code == 3 and json.loads(done.out)["error"]["code"] == "configuration_error"


def test_a_bad_principal_role_or_scope_is_exit_3_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    for argv in (
        ["--principal", ""],
        ["--principal", "a\tb"],
        ["--principal", "alice", "--roles", "two words"],
        ["--principal", "alice", "--roles", "approver,"],
        ["--principal", "alice", "--scope", "x y"],
    ):
        done = tether("keys", "create", "--db", str(db), *argv)
        assert done.code == 3 and done.out == "" and "error:" in done.err, (argv, done)
    assert tether("keys", "list", "--db", str(db)).out.strip() == "no API keys"
    assert tether("keys", "create", "--db", str(db)).code == 2  # --principal is required


def test_list_names_a_tampered_key_under_the_audit_key(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    made = create(db, "--principal", "alice", "--roles", "viewer", TETHER_AUDIT_KEY=AUDIT_KEY)
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE api_keys SET roles = '[\"approver\"]' WHERE id = ?", (made["key_id"],))
    listed = tether("keys", "list", "--db", str(db), env=clean_env(TETHER_AUDIT_KEY=AUDIT_KEY))
    assert "REFUSED (tampered)" in listed.out and "does not match its seal" in listed.out
    [row] = json.loads(tether("keys", "list", "--db", str(db), "--json", env=clean_env(TETHER_AUDIT_KEY=AUDIT_KEY)).out)
    assert row["roles"] == ["approver"] and "does not match its seal" in row["problem"]
    store = SQLiteStore(db, audit_key=AUDIT_KEY)
    assert store.api_key_principal(str(made["key"])) is None
    store.close()
