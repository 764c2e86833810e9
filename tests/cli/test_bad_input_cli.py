"""Bad input to the CLI is a usage or configuration error naming it, never a traceback.

The real command in a subprocess (``cli_helpers.tether`` fails on any
Python traceback in its output); the run a decision is for is made by the
library in a real SQLite file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import clean_env, tether

from tether import Agent, SQLiteStore, Status, tool
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.tools import result_envelope

EXIT_USAGE = 2
EXIT_CONFIGURATION = 3


def test_an_argument_that_is_not_utf8_is_a_usage_error() -> None:
    done = tether("run", "hi \udcff there")  # the byte 0xFF, as the shell hands it on
    assert done.code == EXIT_USAGE and "argument 2 is not UTF-8 text" in done.err, done


def test_a_prompt_on_standard_input_that_is_not_utf8_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "run", "-"], input=b"hi \xff", capture_output=True, env=clean_env(), timeout=90
    )
    assert done.returncode == EXIT_USAGE, done
    assert b"standard input is not UTF-8 text" in done.stderr and b"Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("runs", "list", "--limit", "9" * 23), "is not in the range"),
        (("serve", "agent.py:agent", "--port", "70000"), "is not in the range"),
        (("reconcile", "r1", "c1", "--executed", "[" * 5000 + "]" * 5000), "nested more than 64 levels deep"),
    ],
)
def test_a_value_out_of_its_range_is_a_usage_error(argv: tuple[str, ...], said: str, tmp_path: Path) -> None:
    done = tether(*argv, "--db", str(tmp_path / "runs.db")) if argv[0] == "runs" else tether(*argv)
    assert done.code == EXIT_USAGE and said in done.err, done


def test_an_mcp_command_that_cannot_be_read_is_a_configuration_error() -> None:
    done = tether("run", "hi", "--mcp", 'python "server.py', "--base-url", "http://127.0.0.1:9/v1", "--api-key", "k")
    assert done.code == EXIT_CONFIGURATION and "cannot be read: No closing quotation" in done.err, done


def test_a_temporal_address_that_is_none_is_a_configuration_error() -> None:
    pytest.importorskip("temporalio")
    done = tether("run", "hi", "--engine", "temporal", "--temporal", "a:b:c", "--base-url", "http://127.0.0.1:9/v1")
    assert done.code == EXIT_CONFIGURATION and "is not a Temporal server's address" in done.err, done


@tool(approval=True)
def refund(order: str) -> str:
    """Refund an order (a person approves it first)."""
    return f"refunded {order}"


async def test_a_decision_takes_the_fingerprint_as_runs_show_prints_it_and_never_an_empty_one(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = SQLiteStore(db)
    model = ScriptedModel([reply_calls(("c1", "refund", '{"order": "A7"}')), reply_text("Refunded.")])
    paused = await Agent(model, [refund], store=store).run("Refund A7.")
    assert paused.status is Status.AWAITING_APPROVAL
    [call] = paused.state.pending
    shown = tether("runs", "show", paused.run_id, "--db", str(db))
    assert f"fingerprint {(call.fingerprint or '')[:12]}" in shown.out, shown

    empty = tether("approve", paused.run_id, "c1", "--fingerprint", "", "--db", str(db))
    assert empty.code != 0 and "an empty fingerprint names no arguments" in empty.err, empty
    approved = tether("approve", paused.run_id, "c1", "--fingerprint", (call.fingerprint or "")[:12], "--db", str(db))
    assert approved.code == 0, approved
    assert store.load(paused.run_id).state.approvals["c1"]["approved"] is True


def test_a_log_level_the_server_does_not_know_is_a_configuration_error(tmp_path: Path) -> None:
    """Checked before anything listens, not a traceback from the server as it starts."""
    pytest.importorskip("uvicorn")
    (tmp_path / "agent.py").write_text("from tether import Agent, ScriptedModel\nagent = Agent(ScriptedModel([]))\n")
    env = clean_env(TETHER_LOG_LEVEL="bogus", TETHER_DB=str(tmp_path / "runs.db"))
    done = tether("serve", "agent.py:agent", "--port", "0", env=env, cwd=tmp_path)
    assert done.code == EXIT_CONFIGURATION and "TETHER_LOG_LEVEL='bogus'" in done.err, done


@pytest.mark.parametrize("value", ["\u00b2", "9" * 5000], ids=["a-superscript-digit", "5000-digits"])
def test_a_limit_from_the_environment_that_is_no_whole_number_is_a_configuration_error(
    value: str, tmp_path: Path
) -> None:
    """A superscript two is a digit to str.isdigit and not to int(); 5000 digits are more than int() reads."""
    pytest.importorskip("uvicorn")
    (tmp_path / "agent.py").write_text("from tether import Agent, ScriptedModel\nagent = Agent(ScriptedModel([]))\n")
    env = clean_env(TETHER_MAX_RUNS_PER_USER=value, TETHER_DB=str(tmp_path / "runs.db"))
    done = tether("serve", "agent.py:agent", "--port", "0", env=env, cwd=tmp_path)
    assert done.code == EXIT_CONFIGURATION, done
    assert "error: TETHER_MAX_RUNS_PER_USER must be a whole number of at least 1" in done.err, done
    assert not (tmp_path / "runs.db").exists()


@pytest.mark.parametrize(
    "schema",
    [
        ["CREATE TABLE notes (body TEXT)"],
        # another program's tables that share a run store's names: a CI tool's runs, a Rails app's migrations
        ["CREATE TABLE runs (id INTEGER PRIMARY KEY, job TEXT)"],
        ["CREATE TABLE schema_migrations (version TEXT PRIMARY KEY)", "INSERT INTO schema_migrations VALUES ('1')"],
    ],
    ids=["notes", "runs", "rails-migrations"],
)
def test_a_database_of_something_else_is_refused_and_left_as_it_was(schema: list[str], tmp_path: Path) -> None:
    """A mistyped --db must not get a run store's tables and WAL mode added to another program's file."""
    import sqlite3

    other = tmp_path / "notes.db"
    with sqlite3.connect(other) as db:
        for statement in schema:
            db.execute(statement)
    db.close()
    before = other.read_bytes()
    done = tether("runs", "list", "--db", str(other))
    assert done.code == EXIT_CONFIGURATION and "a SQLite database of something else" in done.err, done
    assert other.read_bytes() == before and not (tmp_path / "notes.db-wal").exists()
    assert not (tmp_path / "notes.db.locks").exists()


def test_a_models_control_characters_are_shown_not_obeyed(tmp_path: Path) -> None:
    """An escape sequence in an answer would retitle the terminal or rewrite what it shows."""
    from cli_helpers import endpoint

    from tether.testing import FakeServer
    from tether.testing.fake_server import text

    hostile = "done\x1b]0;pwned\x07\x1b[2J\x9b31m \u202emoc.live@bob\u2066 pay\u200bee\u200f\ufeff"
    with FakeServer([text(hostile)]) as server:
        done = tether("run", "hi", *endpoint(server), env=clean_env(TETHER_DB=str(tmp_path / "runs.db")))
    assert done.code == 0, done
    assert (
        "answer: done\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m \\u202emoc.live@bob\\u2066 pay\\u200bee\\u200f\\ufeff"
        in done.out
    )
    assert "\x1b" not in done.out and "\x9b" not in done.out and "\x07" not in done.out
    assert "\u202e" not in done.out and "\u2066" not in done.out  # a bidi override would reorder the screen
    assert "\u200b" not in done.out and "\u200f" not in done.out  # an invisible one makes two values look alike


@pytest.mark.parametrize(
    "argv",
    [
        ("runs", "show", "3f2a"),
        ("runs", "verify", "3f2a"),
        ("approve", "3f2a", "call_1"),
        ("deny", "3f2a", "call_1"),
        ("reconcile", "3f2a", "call_1", "--not-executed"),
        ("resume", "3f2a"),
        ("keys", "revoke", "3f9a0c2d41b7e865"),
    ],
)
@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_command_on_runs_made_refuses_a_store_that_is_not_there(
    tmp_path: Path, argv: tuple[str, ...], how: str
) -> None:
    """A mistyped path is named as missing; it does not become a new, empty store that shows no runs."""
    mistyped = tmp_path / "rnus.db"
    if how == "flag":
        done = tether(*argv, "--db", str(mistyped), env=clean_env())
    else:
        done = tether(*argv, env=clean_env(TETHER_DB=str(mistyped)))
    assert done.code == EXIT_CONFIGURATION and f"there is no run store at {mistyped}" in done.err, done
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("argv", "none"), [(("runs", "list"), "no runs recorded"), (("keys", "list"), "no API keys")])
def test_a_listing_of_a_store_that_is_not_there_is_empty_and_names_the_path(
    tmp_path: Path, argv: tuple[str, ...], none: str
) -> None:
    """Nothing recorded yet, or a mistyped path: nothing listed either way, the path said, and no file made."""
    mistyped = tmp_path / "rnus.db"
    done = tether(*argv, "--db", str(mistyped), env=clean_env())
    assert done.code == 0 and done.out.strip() == f"{none}: there is no run store at {mistyped} (set TETHER_DB or --db)"
    as_json = tether(*argv, "--json", "--db", str(mistyped), env=clean_env())
    assert as_json.code == 0 and as_json.out.strip() == "[]" and f"there is no run store at {mistyped}" in as_json.err
    assert list(tmp_path.iterdir()) == []


def test_a_sqlite_url_names_its_file_and_another_scheme_is_refused(tmp_path: Path) -> None:
    """SQLAlchemy's ``sqlite:///relative`` and ``sqlite:////absolute``; ``mysql://…`` is no file named ``mysql:``."""
    store = SQLiteStore(tmp_path / "runs.db")
    store.close()
    absolute = tether("runs", "list", "--json", env=clean_env(TETHER_DB=f"sqlite:///{tmp_path}/runs.db"))
    assert absolute.code == 0 and absolute.out.strip() == "[]", absolute
    relative = tether("runs", "list", "--json", env=clean_env(TETHER_DB="sqlite:///runs.db"), cwd=tmp_path)
    assert relative.code == 0 and relative.out.strip() == "[]", relative
    made = tether("keys", "create", "--principal", "alice", "--db", "sqlite:///new.db", cwd=tmp_path, env=clean_env())
    assert made.code == 0 and (tmp_path / "new.db").exists(), made
    for url in ("mysql://db.internal/runs", "sqlite://", "sqlite:///"):
        done = tether("runs", "list", "--db", url, env=clean_env(), cwd=tmp_path)
        assert done.code == EXIT_CONFIGURATION and "names no run store tether can open" in done.err, (url, done)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(("runs.db", "new.db"))) == []


@pytest.mark.parametrize("command", [("run", "hi"), ("chat",), ("mcp", "serve")])
@pytest.mark.parametrize("principal", ["alice\x1b[2J", "bob\nadmin", "", "   ", "x" * 201, " alice", "alice "])
def test_a_principal_id_no_key_could_name_is_a_usage_error(
    tmp_path: Path, command: tuple[str, ...], principal: str
) -> None:
    """Ids with control characters, only spaces or past 200 characters: API keys and tokens refuse them too."""
    done = tether(*command, "--principal", principal, env=clean_env(TETHER_DB=str(tmp_path / "runs.db")))
    assert done.code == EXIT_USAGE and "is not usable: a principal id is 1 to 200 printable characters" in done.err
    assert not (tmp_path / "runs.db").exists()


@pytest.mark.parametrize("principal", [" alice", "alice\t", "\u3000alice"])
def test_a_key_for_a_principal_with_a_space_at_an_end_is_refused(tmp_path: Path, principal: str) -> None:
    """``" alice"`` would be a principal of its own that every list shows as ``alice``: nothing is made."""
    db = tmp_path / "runs.db"
    SQLiteStore(db).close()
    done = tether("keys", "create", "--principal", principal, "--db", str(db), env=clean_env())
    assert done.code == EXIT_CONFIGURATION and "with no space at either end" in done.err, done
    listed = tether("keys", "list", "--json", "--db", str(db), env=clean_env())
    assert listed.code == 0 and json.loads(listed.out) == [], listed


def test_mcp_read_only_without_a_server_is_refused(tmp_path: Path) -> None:
    """The tool meant read-only would come from a server the command forgot: nothing to mark, so say so."""
    done = tether("run", "hi", "--mcp-read-only", "search_files", env=clean_env(TETHER_DB=str(tmp_path / "runs.db")))
    assert done.code == EXIT_CONFIGURATION and "no --mcp or --mcp-url gives a server" in done.err, done


@tool(approval=True)
def charge(order: str, api_token: str) -> str:
    """Charge an order with the payment service's token (a person approves it first)."""
    return f"charged {order}"


async def test_runs_show_json_redacts_a_calls_secret_arguments(tmp_path: Path) -> None:
    """Everything it prints as JSON goes through the redaction; the fingerprint still binds the exact arguments."""
    db = tmp_path / "runs.db"
    model = ScriptedModel([reply_calls(("c1", "charge", '{"order": "A7", "api_token": "tok-live-4242abcd"}'))])
    paused = await Agent(model, [charge], store=SQLiteStore(db, log_content=True)).run("Charge A7.")
    assert paused.status is Status.AWAITING_APPROVAL
    shown = tether("runs", "show", paused.run_id, "--json", "--db", str(db))
    assert shown.code == 0 and "tok-live-4242abcd" not in shown.out, shown
    [pending] = json.loads(shown.out)["pending"]
    assert pending["arguments"] == {"order": "A7", "api_token": "[redacted]"}
    assert pending["fingerprint"] == paused.state.pending[0].fingerprint


@pytest.mark.parametrize("command", ["approve", "deny"])
async def test_a_decisions_reason_past_the_services_bound_is_a_usage_error_and_nothing_is_decided(
    command: str, tmp_path: Path
) -> None:
    """The reason is recorded and a denial's goes to the model: the CLI holds it to the API's 1,000 characters."""
    db = tmp_path / "runs.db"
    model = ScriptedModel([reply_calls(("c1", "charge", '{"order": "A7", "api_token": "t"}'))])
    paused = await Agent(model, [charge], store=SQLiteStore(db)).run("Charge A7.")
    assert paused.status is Status.AWAITING_APPROVAL

    done = tether(command, paused.run_id, "c1", "--reason", "x" * 1001, "--db", str(db))
    assert done.code == EXIT_USAGE and "at most 1000 characters, not 1001" in done.err, done
    assert SQLiteStore(db).load(paused.run_id).state.status is Status.AWAITING_APPROVAL
    decided = tether(command, paused.run_id, "c1", "--reason", "x" * 1000, "--db", str(db))
    assert decided.code == 0, decided


def _one_case_eval(path: Path) -> Path:
    case = {
        "id": "c1",
        "prompt": "add",
        "tools": [{"name": "f", "description": "F.", "parameters": {"type": "object", "properties": {}}}],
        "expected": [{"tool": "f", "arguments": {}}],
    }
    path.write_text(json.dumps(case) + "\n")
    return path


def test_an_eval_out_directory_that_cannot_be_made_is_a_configuration_error_before_any_case(tmp_path: Path) -> None:
    from cli_helpers import endpoint

    from tether.testing import FakeServer
    from tether.testing.fake_server import text

    data = _one_case_eval(tmp_path / "cases.jsonl")
    (tmp_path / "a-file").write_text("")
    with FakeServer([text("done")]) as server:
        done = tether("eval", str(data), "--out", str(tmp_path / "a-file" / "out"), *endpoint(server))
        assert server.requests == []
    assert done.code == EXIT_CONFIGURATION, done
    assert f"cannot write the results in {tmp_path / 'a-file' / 'out'}: Not a directory" in done.err, done


@pytest.mark.parametrize("out", ["", "  "], ids=["empty", "blank"])
@pytest.mark.parametrize(
    "command",
    [
        ("eval", "cases.jsonl", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"),
        ("eval", "agentdojo", "--scripted", "oracle", "--suite", "banking", "--attack", "none", "--limit", "1"),
    ],
)
def test_an_eval_out_of_blank_text_is_a_usage_error_and_nothing_is_written(
    command: tuple[str, ...], out: str, tmp_path: Path
) -> None:
    """--out "$OUT" with OUT unset wrote results.jsonl and report.html into the working directory."""
    _one_case_eval(tmp_path / "cases.jsonl")
    done = tether(*command, "--out", out, cwd=tmp_path)
    assert done.code == EXIT_USAGE, done
    assert "Invalid value for '--out': blank text names no directory" in done.err, done
    assert [p.name for p in tmp_path.iterdir()] == ["cases.jsonl"]


def test_an_eval_report_that_cannot_be_written_is_a_configuration_error_and_the_results_are_kept(
    tmp_path: Path,
) -> None:
    from cli_helpers import endpoint

    from tether.testing import FakeServer
    from tether.testing.fake_server import text

    data, out = _one_case_eval(tmp_path / "cases.jsonl"), tmp_path / "out"
    (out / "report.html").mkdir(parents=True)
    with FakeServer([text("done")]) as server:
        done = tether("eval", str(data), "--out", str(out), *endpoint(server))
    assert done.code == EXIT_CONFIGURATION, done
    assert f"cannot write {out / 'report.html'}: Is a directory" in done.err, done
    assert json.loads((out / "results.jsonl").read_text())["id"] == "c1"  # run again to write the report


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (("--db", ""), {}),
        (("--db", "  "), {}),
        ((), {"TETHER_DB": "  "}),
    ],
    ids=["empty-db", "blank-db", "blank-TETHER_DB"],
)
@pytest.mark.parametrize(
    "command", [("run", "hi", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"), ("runs", "list")]
)
def test_a_run_store_named_by_blank_text_is_a_configuration_error_and_no_file_is_made(
    command: tuple[str, ...], argv: tuple[str, ...], env: dict[str, str], tmp_path: Path
) -> None:
    """A blank TETHER_DB made a SQLite file named "  " in the working directory; --db "" said "the run store at .\""""
    done = tether(*command, *argv, env=clean_env(**env), cwd=tmp_path)
    assert done.code == EXIT_CONFIGURATION and "the run store is named by blank text" in done.err, done
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("code", [0, 4])
@pytest.mark.parametrize(
    "command", [("tools",), ("run", "hi", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tools")]
)
def test_a_toolset_module_that_exits_as_it_is_imported_is_a_configuration_error(
    command: tuple[str, ...], code: int, tmp_path: Path
) -> None:
    """``tether run`` exited 0, as for a completed run, with no run and no word; ``tether tools`` exited 4."""
    exits = tmp_path / "exits.py"
    exits.write_text(f"import sys\nsys.exit({code})\n")
    done = tether(*command, str(exits), env=clean_env(TETHER_DB=str(tmp_path / "runs.db")))
    assert done.code == EXIT_CONFIGURATION, done
    assert f"cannot import toolset module {str(exits)!r}: SystemExit: {code}" in done.err, done


def test_an_errors_control_characters_are_shown_not_obeyed(tmp_path: Path) -> None:
    """The message of a failure can quote text tether did not write (a module's exception, a server's words)."""
    hostile = tmp_path / "hostile.py"
    hostile.write_text("raise RuntimeError('\\x1b]0;pwned\\x07\\x9b2J \\u202eexe.dab')\n")
    done = tether("tools", str(hostile), env=clean_env(TETHER_DB=str(tmp_path / "runs.db")))
    assert done.code == EXIT_CONFIGURATION, done
    assert "RuntimeError: \\x1b]0;pwned\\x07\\x9b2J \\u202eexe.dab" in done.err, done
    assert not {"\x1b", "\x07", "\x9b", "\u202e"} & set(done.err)


def test_a_paused_calls_id_is_shown_not_obeyed(tmp_path: Path) -> None:
    """The model names the call, and the paused line printed its id raw."""
    from cli_helpers import endpoint

    from tether.testing import FakeServer
    from tether.testing.fake_server import tool_calls

    tools = tmp_path / "paying.py"
    tools.write_text(
        "from tether import tool\n\n"
        "@tool(approval=lambda arguments: True)\n"
        "def pay(to: str) -> str:\n"
        '    """Pay someone."""\n'
        "    return 'paid'\n"
    )
    call = tool_calls([("c1\x1b]0;pwned\x07", "pay", '{"to": "bob"}')])  # click strips only CSI, off a terminal
    with FakeServer([call]) as server:
        done = tether(
            "run", "pay bob", *endpoint(server), "--tools", str(tools), env=clean_env(TETHER_DB=str(tmp_path / "r.db"))
        )
    assert done.code == 20, done
    assert "paused: call c1\\x1b]0;pwned\\x07 pay" in done.err, done
    assert "\x1b" not in done.err and "\x07" not in done.err


def test_runs_list_shows_a_prompts_control_characters_not_obeyed(tmp_path: Path) -> None:
    """A served run's prompt is a caller's text, and an operator lists it."""
    from cli_helpers import endpoint

    from tether.testing import FakeServer
    from tether.testing.fake_server import text

    env = clean_env(TETHER_DB=str(tmp_path / "runs.db"))
    with FakeServer([text("ok")]) as server:
        assert tether("run", "list \x1b]0;pwned\x07 this", "--log-content", *endpoint(server), env=env).code == 0
    listed = tether("runs", "list", env=env)
    assert listed.code == 0, listed
    assert "list \\x1b]0;pwned\\x07 this" in listed.out, listed
    assert "\x1b" not in listed.out and "\x07" not in listed.out


class Crash(BaseException):
    """Stands in for the process dying inside a tool: its outcome is unknown."""


@tool
async def boom() -> str:
    """A side effect during which the process dies."""
    raise Crash


@pytest.mark.parametrize("value", ["NaN", "[1, -Infinity]", '{"amount": 1e999}'])
async def test_a_reconciled_result_that_is_not_strict_json_is_a_usage_error_and_nothing_is_recorded(
    value: str, tmp_path: Path
) -> None:
    """NaN and Infinity are no JSON: recorded, they made the call's result an envelope no reader can decode."""
    db = tmp_path / "runs.db"
    with pytest.raises(Crash):
        await Agent(ScriptedModel([reply_calls(("c1", "boom", "{}"))]), [boom], store=SQLiteStore(db)).run("boom")
    (summary,) = SQLiteStore(db).list_runs()
    paused = await Agent(ScriptedModel([]), [boom], store=SQLiteStore(db)).resume(summary.run_id).run()
    assert paused.status is Status.AWAITING_RECONCILIATION

    done = tether("reconcile", paused.run_id, "c1", "--executed", value, "--db", str(db))
    assert done.code == EXIT_USAGE and "--executed takes a JSON value: " in done.err, done
    assert "is not valid JSON" in done.err or "is out of range" in done.err, done
    stored = SQLiteStore(db)
    assert stored.load(paused.run_id).state.status is Status.AWAITING_RECONCILIATION
    assert stored.ledger_entry(paused.run_id, "c1").outcome is None  # type: ignore[union-attr]


@tool(max_result_chars=1_000)
async def small_boom() -> str:
    """A side effect with a small result, during which the process dies."""
    raise Crash


async def test_a_reconciled_result_is_cut_to_the_tools_max_result_chars_as_a_returned_one_is(tmp_path: Path) -> None:
    """A person's result reached the store and the model's next request whole, at any length."""
    db = tmp_path / "runs.db"
    with pytest.raises(Crash):
        await Agent(ScriptedModel([reply_calls(("c1", "small_boom", "{}"))]), [small_boom], store=SQLiteStore(db)).run(
            "go"
        )
    (summary,) = SQLiteStore(db).list_runs()
    paused = await Agent(ScriptedModel([]), [small_boom], store=SQLiteStore(db)).resume(summary.run_id).run()
    assert paused.status is Status.AWAITING_RECONCILIATION

    result = "x" * 100_000  # a single argument is at most 128 KiB; ``POST .../reconcile`` takes any size to this cut
    done = tether("reconcile", paused.run_id, "c1", "--executed", json.dumps(result), "--db", str(db))
    assert done.code == 0, done
    recorded = SQLiteStore(db).ledger_entry(paused.run_id, "c1").outcome  # type: ignore[union-attr]
    model = ScriptedModel([reply_text("done")])
    finished = await Agent(model, [small_boom], store=SQLiteStore(db)).resume(paused.run_id).run()
    assert finished.status is Status.COMPLETED
    sent = model.requests[-1].messages[-1].content
    assert sent == recorded == result_envelope(result, 1_000)  # the cut of a result the tool returned
    assert "[truncated: showing 1000 of 100000 characters]" in recorded


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("runs", "list", "--limit", "0", "--json"), "Invalid value for '--limit': 0 is not in the range"),
        (("runs", "list", "--json", "--limit", "0"), "Invalid value for '--limit': 0 is not in the range"),
        (("run", "hi", "-o", "temperature=abc", "--json"), "temperature='abc' is not a valid float"),
        (("run", "hi", "--json", "--principal", ""), "principal '' is not usable"),
        (("runs", "show", "--json"), "Missing argument 'RUN_ID'"),
    ],
)
def test_with_json_a_bad_value_is_one_json_object_on_stdout(argv: tuple[str, ...], said: str, tmp_path: Path) -> None:
    """--json promises one object on stdout for a failure too; click's usage text said nothing there."""
    done = tether(*argv, env=clean_env(TETHER_DB=str(tmp_path / "runs.db")))
    assert done.code == EXIT_USAGE, done
    error = json.loads(done.out)["error"]
    assert error["code"] == "usage_error" and error["exit"] == EXIT_USAGE and said in error["message"], done
    assert done.err == ""


def test_with_json_an_option_the_command_does_not_know_is_still_clicks_usage_message(tmp_path: Path) -> None:
    done = tether("runs", "list", "--json", "--bogus", env=clean_env(TETHER_DB=str(tmp_path / "runs.db")))
    assert done.code == EXIT_USAGE and done.out == "" and "No such option '--bogus'" in done.err, done


def test_a_json_word_after_the_options_end_asks_for_no_json(tmp_path: Path) -> None:
    done = tether("run", "--max-steps", "0", "--", "--json", env=clean_env(TETHER_DB=str(tmp_path / "runs.db")))
    assert done.code == EXIT_USAGE and done.out == "" and "Invalid value for '--max-steps'" in done.err, done
