"""``tether run`` / ``runs`` / ``approve`` / ``reconcile`` as real subprocesses over a run store file.

Each test points ``TETHER_DB`` at a file in ``tmp_path``; the model is a
FakeServer running in a thread of this process. Tampering is raw SQL on
the file. Every invocation is checked for a Python traceback.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import clean_env, endpoint, tether

from tether.store import SQLiteStore
from tether.testing.fake_server import SCENARIOS, FakeServer, text, tool_calls

PROMPT = "What is 248 times 15?"
RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")
EXIT_VERIFY_FAILED = 6
EXIT_MISMATCH = 7


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store" / "runs.db"


@pytest.fixture
def env(db: Path) -> dict[str, str]:
    return clean_env(TETHER_DB=str(db))


def record_run(env: Mapping[str, str], *extra: str) -> str:
    """A completed multiply run recorded in the store; its id."""
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", PROMPT, "--tools", "calc", "--json", *extra, *endpoint(server), env=env)
    assert done.code == 0, done
    run_id: str = json.loads(done.out)["run_id"]
    return run_id


# ---------------------------------------------------------------- tether run


def test_run_prints_the_run_id_and_records_the_run(db: Path, env: dict[str, str]) -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", PROMPT, "--tools", "calc", *endpoint(server), env=env)

    assert done.code == 0, done
    first, last = [line for line in done.out.splitlines() if line.startswith("run ")]
    match = RUN_ID.search(first)
    assert match is not None, first
    run_id = match.group()
    assert first == f"run {run_id}"  # printed first, so a run that dies can still be found
    assert last.startswith(f"run {run_id}: completed")
    with raw(db) as conn:
        rows = conn.execute("SELECT id, status, json_extract(principal, '$.id') FROM runs").fetchall()
        (events,) = conn.execute("SELECT count(*) FROM events WHERE run_id = ?", (run_id,)).fetchone()
        (messages,) = conn.execute("SELECT count(*) FROM messages WHERE run_id = ?", (run_id,)).fetchone()
    assert rows == [(run_id, "completed", "local")]
    assert events >= 5
    assert messages == 4  # user, assistant with the call, tool, answer


def test_run_json_names_the_recorded_run(db: Path, env: dict[str, str]) -> None:
    run_id = record_run(env)
    with raw(db) as conn:
        assert conn.execute("SELECT id FROM runs").fetchall() == [(run_id,)]


def test_the_api_key_is_never_stored(db: Path, env: dict[str, str]) -> None:
    key = "sk-test-DO-NOT-STORE-0123456789abcdef"
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", PROMPT, "--tools", "calc", *endpoint(server, key), env=env)
    assert done.code == 0, done
    stored = b"".join(p.read_bytes() for p in db.parent.iterdir())
    assert key.encode() not in stored
    assert key not in done.out + done.err


def test_no_log_records_nothing(db: Path, env: dict[str, str]) -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", PROMPT, "--tools", "calc", "--no-log", "--json", *endpoint(server), env=env)
    assert done.code == 0, done
    run_id = json.loads(done.out)["run_id"]
    assert not db.exists()
    assert not db.parent.exists() or list(db.parent.iterdir()) == []

    kept = record_run(env)  # a store that exists already is not written to either
    before = db.read_bytes()
    with FakeServer(SCENARIOS["multiply"]) as server:
        again = tether("run", PROMPT, "--tools", "calc", "--no-log", *endpoint(server), env=env)
    assert again.code == 0, again
    assert db.read_bytes() == before
    listed = tether("runs", "list", "--json", env=env)
    assert [r["run_id"] for r in json.loads(listed.out)] == [kept]
    missing = tether("runs", "show", run_id, env=env)
    assert missing.code == 3, missing


def test_the_db_option_overrides_tether_db(tmp_path: Path, db: Path, env: dict[str, str]) -> None:
    other = tmp_path / "other.db"
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", PROMPT, "--tools", "calc", "--json", "--db", str(other), *endpoint(server), env=env)
    assert done.code == 0, done
    run_id = json.loads(done.out)["run_id"]
    assert not db.exists()
    listed = tether("runs", "list", "--json", "--db", str(other), env=env)
    assert [r["run_id"] for r in json.loads(listed.out)] == [run_id]


# ---------------------------------------------------------------- runs list


def test_runs_list_shows_recorded_runs_newest_first(env: dict[str, str]) -> None:
    first, second = record_run(env), record_run(env)

    done = tether("runs", "list", env=env)
    assert done.code == 0, done
    lines = done.out.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(second) and lines[1].startswith(first)
    for line in lines:
        assert "completed" in line
        assert "local" in line
        assert "2 step(s)" in line

    as_json = tether("runs", "list", "--json", env=env)
    assert as_json.code == 0, as_json
    data = json.loads(as_json.out)
    assert [r["run_id"] for r in data] == [second, first]
    for r in data:
        assert r["status"] == "completed"
        assert r["principal"] == "local"
        assert r["steps"] == 2
        assert r["created_at"] <= r["updated_at"]

    limited = tether("runs", "list", "--json", "--limit", "1", env=env)
    assert [r["run_id"] for r in json.loads(limited.out)] == [second]
    nobody = tether("runs", "list", "--json", "--principal", "nobody", env=env)
    assert json.loads(nobody.out) == []


def test_runs_list_on_an_empty_store(env: dict[str, str]) -> None:
    done = tether("runs", "list", env=env)
    assert done.code == 0, done
    assert "no runs recorded" in done.out


# ---------------------------------------------------------------- runs show


def test_runs_show_prints_a_readable_timeline(env: dict[str, str]) -> None:
    run_id = record_run(env)
    done = tether("runs", "show", run_id, env=env)

    assert done.code == 0, done
    lines = done.out.splitlines()
    assert lines[0].startswith(f"run {run_id}  completed  principal local  started ")
    timeline = [line for line in lines[1:] if line.startswith("  +")]
    assert len(timeline) == 8  # a read-only call has no ledger intent or outcome events
    seconds = []
    for line in timeline:
        match = re.match(r"^  \+\s*(\d+\.\d{3})s  step [012]  \S", line)
        assert match is not None, line
        seconds.append(float(match.group(1)))
    assert seconds[0] == 0.0
    assert seconds == sorted(seconds)
    text_ = "\n".join(timeline)
    assert timeline[0].endswith("step 0  run started")  # before the first model request
    assert "step 1  step started" in text_
    assert "step 2  step started" in text_
    assert "model replied: finish_reason=tool_calls, 1 call(s)" in text_
    assert "model replied: finish_reason=stop, 0 call(s)" in text_
    assert re.search(r'call call_\w+ multiply \{"a": 248, "b": 15\}: call validated', text_)
    assert re.search(r"call call_\w+ multiply: executed -> ok", text_)
    assert "run finished: completed" in text_
    assert lines[-1] == "answer: 248 × 15 = 3720"


def test_runs_show_json_gives_the_events(env: dict[str, str]) -> None:
    run_id = record_run(env)
    done = tether("runs", "show", run_id, "--json", env=env)

    assert done.code == 0, done
    data = json.loads(done.out)
    assert data["run_id"] == run_id
    assert data["status"] == "completed"
    assert data["principal"] == "local"
    assert data["steps"] == 2
    assert data["pending"] == []
    assert data["usage"] == {"input_tokens": 20, "output_tokens": 10}
    events = data["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    kinds = [e["kind"] for e in events]
    assert kinds[:2] == ["run_started", "step_started"]
    assert events[0]["data"]["principal"] == "local"
    assert PROMPT not in json.dumps(events[0]["data"])  # no user text unless --log-content
    assert kinds[-1] == "run_finished"
    assert "call_executed" in kinds
    (executed,) = [e for e in events if e["kind"] == "call_executed"]
    assert executed["data"]["tool"] == "multiply"
    assert executed["data"]["outcome"] == "ok"
    assert "3720" not in json.dumps(executed["data"])  # no tool results unless --log-content
    assert all(isinstance(e["at"], float) and e["step"] in (1, 2) for e in events[1:])
    assert events[0]["step"] == 0
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)


def test_log_content_keeps_results_in_the_events(env: dict[str, str]) -> None:
    run_id = record_run(env, "--log-content")
    data = json.loads(tether("runs", "show", run_id, "--json", env=env).out)
    (executed,) = [e for e in data["events"] if e["kind"] == "call_executed"]
    assert "3720" in executed["data"]["result"]
    (started,) = [e for e in data["events"] if e["kind"] == "run_started"]
    assert started["data"]["prompt"] == PROMPT


# ---------------------------------------------------------------- runs verify


def test_verify_an_untouched_run_exits_0(env: dict[str, str]) -> None:
    run_id = record_run(env)
    done = tether("runs", "verify", run_id, env=env)
    assert done.code == 0, done
    assert re.search(rf"run {run_id}: intact \(\d+ events, 4 messages\)", done.out)

    as_json = tether("runs", "verify", run_id, "--json", env=env)
    assert as_json.code == 0, as_json
    assert json.loads(as_json.out) == {"run_id": run_id, "ok": True, "problems": []}


TAMPERING = {
    "edited event data": "UPDATE events SET data = replace(data, '\"ok\"', '\"denied\"') WHERE run_id = :r",
    "edited event kind": "UPDATE events SET kind = 'call_rejected' WHERE run_id = :r AND kind = 'call_executed'",
    "deleted middle event": "DELETE FROM events WHERE run_id = :r AND seq = 3",
    "deleted last event": "DELETE FROM events WHERE run_id = :r AND seq = (SELECT max(seq) FROM events)",
    "edited message": "UPDATE messages SET body = replace(body, '248', '999') WHERE run_id = :r AND seq = 0",
    "deleted message": "DELETE FROM messages WHERE run_id = :r AND seq = 1",
    "forged event": "INSERT INTO events SELECT run_id, seq + 1, at, kind, step, data, hash, hash FROM events"
    " WHERE run_id = :r AND seq = (SELECT max(seq) FROM events)",
}


@pytest.mark.parametrize("sql", list(TAMPERING.values()), ids=list(TAMPERING))
def test_verify_after_tampering_exits_6(sql: str, db: Path, env: dict[str, str]) -> None:
    run_id = record_run(env)
    with raw(db) as conn:
        changed = conn.execute(sql, {"r": run_id}).rowcount
    assert changed >= 1

    done = tether("runs", "verify", run_id, env=env)
    assert done.code == EXIT_VERIFY_FAILED, done
    assert "tampered:" in done.out
    assert "intact" not in done.out

    as_json = tether("runs", "verify", run_id, "--json", env=env)
    assert as_json.code == EXIT_VERIFY_FAILED, as_json
    data = json.loads(as_json.out)
    assert data["run_id"] == run_id
    assert data["ok"] is False
    assert data["problems"] and all(isinstance(p, str) for p in data["problems"])


def test_verify_after_reordering_exits_6(db: Path, env: dict[str, str]) -> None:
    run_id = record_run(env)
    with raw(db) as conn:
        for a, b in ((3, -1), (4, 3), (-1, 4)):
            conn.execute("UPDATE events SET seq = ? WHERE run_id = ? AND seq = ?", (b, run_id, a))
    done = tether("runs", "verify", run_id, "--json", env=env)
    assert done.code == EXIT_VERIFY_FAILED, done
    assert json.loads(done.out)["ok"] is False


@pytest.mark.parametrize("command", ["verify", "show"])
def test_tampered_event_data_that_is_not_json(command: str, db: Path, env: dict[str, str]) -> None:
    run_id = record_run(env)
    with raw(db) as conn:
        conn.execute("UPDATE events SET data = 'not json' WHERE run_id = ? AND seq = 2", (run_id,))
    done = tether("runs", command, run_id, env=env)
    assert done.code in ((EXIT_VERIFY_FAILED,) if command == "verify" else (0, EXIT_VERIFY_FAILED, 3))


def test_verify_a_message_body_that_is_not_json(db: Path, env: dict[str, str]) -> None:
    run_id = record_run(env)
    with raw(db) as conn:
        conn.execute("UPDATE messages SET body = 'not json' WHERE run_id = ? AND seq = 0", (run_id,))
    done = tether("runs", "verify", run_id, env=env)
    assert done.code == EXIT_VERIFY_FAILED, done


# A run's row edited to JSON of the wrong shape, or a time that is no number: each command that reads it says
# the store was edited, none shows a traceback (verify, which reads the row as text, says tampered).
EDITED_ROWS = {
    "setup a list": "UPDATE runs SET setup = '[1]' WHERE id = :r",
    "saved state null": "UPDATE runs SET meta = 'null' WHERE id = :r",
    "saved state a list": "UPDATE runs SET meta = '[]' WHERE id = :r",
    "saved state not json": "UPDATE runs SET meta = 'not json' WHERE id = :r",
    "saved state without steps": "UPDATE runs SET meta = '{}' WHERE id = :r",
    "principal a list": "UPDATE runs SET principal = '[]' WHERE id = :r",
    "created_at text": "UPDATE runs SET created_at = 'abc' WHERE id = :r",
}


@pytest.mark.parametrize("sql", list(EDITED_ROWS.values()), ids=list(EDITED_ROWS))
@pytest.mark.parametrize("command", [("runs", "show"), ("approve",)])
def test_a_run_row_edited_to_the_wrong_shape_is_a_store_error(
    command: tuple[str, ...], sql: str, db: Path, env: dict[str, str]
) -> None:
    run_id = record_run(env, "--log-content")
    with raw(db) as conn:
        assert conn.execute(sql, {"r": run_id}).rowcount == 1
    done = tether(*command, run_id, *(["c1"] if command == ("approve",) else []), env=env)
    assert done.code in (3, EXIT_VERIFY_FAILED), done
    assert f"run {run_id}" in done.err + done.out, done


@pytest.mark.parametrize("sql", list(EDITED_ROWS.values()), ids=list(EDITED_ROWS))
@pytest.mark.parametrize("as_json", [False, True])
def test_runs_list_names_a_run_row_edited_to_the_wrong_shape_and_lists_the_others(
    as_json: bool, sql: str, db: Path, env: dict[str, str]
) -> None:
    """One edited row made the whole list fail: now it is named on stderr (or listed without what it cannot
    read, its prompt), and every other run is listed as before."""
    other = record_run(env, "--log-content")
    run_id = record_run(env, "--log-content")
    with raw(db) as conn:
        assert conn.execute(sql, {"r": run_id}).rowcount == 1
    done = tether("runs", "list", *(["--json"] if as_json else []), env=env)
    assert done.code == 0, done
    listed = (
        [r["run_id"] for r in json.loads(done.out)] if as_json else [line.split()[0] for line in done.out.splitlines()]
    )
    assert other in listed, done
    if run_id not in listed:
        assert f"tether: run {run_id}: " in done.err and "the store was edited" in done.err and "not listed" in done.err


# ---------------------------------------------------------------- approve, deny, reconcile


@pytest.mark.parametrize("command", ["approve", "deny"])
def test_deciding_on_a_run_with_no_pending_call_exits_7(command: str, env: dict[str, str]) -> None:
    run_id = record_run(env)
    done = tether(command, run_id, "call_nothing", env=env)

    assert done.code == EXIT_MISMATCH, done
    assert done.out == ""
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert run_id in lines[0]
    assert "completed" in lines[0] and "awaiting_approval" in lines[0]


@pytest.mark.parametrize(
    "flags",
    [[], ["--executed", '{"id": 1}', "--not-executed"]],
    ids=["neither", "both"],
)
def test_reconcile_needs_exactly_one_of_executed_or_not_executed(flags: list[str], env: dict[str, str]) -> None:
    run_id = record_run(env)
    done = tether("reconcile", run_id, "call_x", *flags, env=env)
    assert done.code == 2, done
    assert "--executed" in done.err and "--not-executed" in done.err


def test_reconcile_executed_needs_json(env: dict[str, str]) -> None:
    run_id = record_run(env)
    done = tether("reconcile", run_id, "call_x", "--executed", "not json", env=env)
    assert done.code == 2, done
    assert "--executed takes a JSON value" in done.err


def test_reconcile_on_a_run_with_no_unknown_outcome_exits_7(env: dict[str, str]) -> None:
    run_id = record_run(env)
    done = tether("reconcile", run_id, "call_x", "--not-executed", env=env)
    assert done.code == EXIT_MISMATCH, done
    assert run_id in done.err
    assert "awaiting_reconciliation" in done.err


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "show", "{run}"],
        ["runs", "show", "{run}", "--json"],
        ["runs", "verify", "{run}"],
        ["runs", "verify", "{run}", "--json"],
        ["approve", "{run}", "call_1"],
        ["deny", "{run}", "call_1"],
        ["reconcile", "{run}", "call_1", "--not-executed"],
        ["reconcile", "{run}", "call_1", "--executed", "42"],
        ["resume", "{run}"],
    ],
    ids=lambda argv: " ".join(a for a in argv if a != "{run}"),
)
def test_an_unknown_run_exits_3_naming_it(argv: list[str], db: Path, env: dict[str, str]) -> None:
    SQLiteStore(db).close()  # the store exists, without that run
    ghost = "0123456789abcdef0123456789abcdef"
    done = tether(*(a.replace("{run}", ghost) for a in argv), env=env)
    assert done.code == 3, done
    if "--json" in argv:  # the failure is one JSON object too, on stdout
        error = json.loads(done.out)["error"]
        assert (error["code"], error["exit"]) == ("configuration_error", 3) and ghost in error["message"]
        assert done.err == ""
        return
    assert done.out == ""
    assert ghost in done.err
    assert done.err.startswith("error: ")


# ---------------------------------------------------------------- a bad store


def test_a_store_that_is_not_a_database_exits_3(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 500)
    env = clean_env(TETHER_DB=str(garbage))
    for argv in (["runs", "list"], ["runs", "show", "abc"], ["runs", "verify", "abc"], ["approve", "abc", "c"]):
        done = tether(*argv, env=env)
        assert done.code == 3, (argv, done)
        assert str(garbage) in done.err
        assert len(done.err.strip().splitlines()) == 1, done.err


def test_a_directory_as_the_store_exits_3(tmp_path: Path) -> None:
    env = clean_env(TETHER_DB=str(tmp_path))
    done = tether("runs", "list", env=env)
    assert done.code == 3, done
    assert str(tmp_path) in done.err


def test_run_with_an_unusable_store_exits_3_before_calling_the_model(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x00\xff" * 4096)
    with FakeServer([text("never")]) as server:
        done = tether("run", PROMPT, "--tools", "calc", *endpoint(server), env=clean_env(TETHER_DB=str(garbage)))
        requests = len(server.requests)
    assert done.code == 3, done
    assert str(garbage) in done.err
    assert requests == 0


# ---------------------------------------------------------------- a paused run, end to end


TOOLSET = '''
from pathlib import Path

from tether.tools import tool

LOG = Path(__file__).with_name("wired.log")


@tool(approval=True)
def wire(amount: int, password: str) -> str:
    """Send money (needs a person's approval)."""
    with LOG.open("a") as f:
        f.write(f"{amount}\\n")
    return f"sent {amount}"
'''


@pytest.fixture
def toolset(tmp_path: Path, env: dict[str, str]) -> Path:
    package = tmp_path / "toolsets_for_test"
    package.mkdir()
    (package / "gate_tools.py").write_text(textwrap.dedent(TOOLSET))
    env["PYTHONPATH"] = str(package) + os.pathsep + env.get("PYTHONPATH", "")
    return package / "wired.log"


def test_a_paused_run_is_approved_then_resumed(toolset: Path, env: dict[str, str]) -> None:
    secret = "hunter2-DO-NOT-PRINT"
    arguments = json.dumps({"amount": 7, "password": secret})
    script: list[Any] = [tool_calls([("call_w1", "wire", arguments)]), text("sent it")]
    with FakeServer(script) as server:
        paused = tether("run", "send 7", "--tools", "gate_tools", "--json", *endpoint(server), env=env)
        assert paused.code == 20, paused
        run_id = json.loads(paused.out)["run_id"]
        assert f"tether approve {run_id} call_w1" in paused.err
        assert secret not in paused.out + paused.err
        assert not toolset.exists()

        shown = tether("runs", "show", run_id, env=env)
        assert shown.code == 0, shown
        assert "awaiting_approval" in shown.out
        assert "call call_w1 wire: waiting for approval" in shown.out
        assert re.search(r"pending: call call_w1 wire .*fingerprint [0-9a-f]{12}", shown.out)
        assert secret not in shown.out + shown.err
        shown_json = tether("runs", "show", run_id, "--json", env=env)
        (pending,) = json.loads(shown_json.out)["pending"]
        assert pending["id"] == "call_w1"
        assert pending["arguments"] == {"amount": 7, "password": "[redacted]"}
        assert secret not in shown_json.out

        wrong = tether("approve", run_id, "call_other", env=env)
        assert wrong.code == EXIT_MISMATCH, wrong
        assert "call_other" in wrong.err

        stale = tether("approve", run_id, "call_w1", "--fingerprint", "0" * 64, env=env)
        assert stale.code == EXIT_MISMATCH, stale
        assert not toolset.exists()

        approved = tether("approve", run_id, "call_w1", "--reason", "looks right", env=env)
        assert approved.code == 0, approved
        assert f"tether resume {run_id}" in approved.out

        twice = tether("approve", run_id, "call_w1", env=env)
        assert twice.code == EXIT_MISMATCH, twice

        resumed = tether("resume", run_id, "--json", "--api-key", "x", env=env)
        assert resumed.code == 0, resumed
        assert json.loads(resumed.out)["status"] == "completed"

    assert toolset.read_text() == "7\n"
    timeline = tether("runs", "show", run_id, env=env)
    assert "call call_w1 wire: approved by cli (looks right)" in timeline.out
    assert "run resumed" in timeline.out
    assert secret not in timeline.out
    assert tether("runs", "verify", run_id, env=env).code == 0
    again = tether("resume", run_id, env=env)
    assert again.code == EXIT_MISMATCH, again  # nothing to resume
    assert "already ended completed" in again.err


async def test_a_run_is_named_by_the_end_of_its_id_where_ids_made_together_share_their_start(tmp_path: Path) -> None:
    """Two runs started a moment apart: their ids share the first digits, and a few of the last name each."""
    from tether import Agent
    from tether.models.scripted import ScriptedModel, reply_text

    db = tmp_path / "runs.db"
    agent = Agent(ScriptedModel([reply_text("one"), reply_text("two")]), [], store=SQLiteStore(db))
    first, second = (await agent.run("hi")).run_id, (await agent.run("hi")).run_id
    # The same minute: the first eight digits or more are the same (their start), the last ones random.
    start = first[: next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)]
    for run_id in (first, second):
        shown = tether("runs", "show", run_id[-6:], "--json", "--db", str(db))
        assert shown.code == 0 and json.loads(shown.out)["run_id"] == run_id, shown
    shared = tether("runs", "show", start, "--db", str(db))
    assert shared.code != 0 and "is ambiguous" in shared.err, shared
