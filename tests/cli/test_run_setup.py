"""What a run is set up with, in real subprocesses against FakeServer and a real SQLite store.

The embedded model answers only when nothing names a model or an endpoint; a
conversation goes on with the model and tools it began with; a run records
its toolset files by absolute path; a bad base URL, a run that could wait for
an approval nobody could give, and ``--json`` failures are configuration
errors that say what to set, before any run is recorded.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest
from cli_helpers import clean_env, endpoint, tether

from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls

PROMPT = "What is 248 times 15?"
REPO = Path(__file__).resolve().parents[2]
PAYMENTS = '''
from tether import tool

@tool(approval=True)
def pay(amount: int) -> str:
    """Pay an amount (needs approval)."""
    return f"paid {amount}"
'''


def runs_in(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as connection:
        return int(connection.execute("SELECT count(*) FROM runs").fetchone()[0])


def echo(request: dict[str, Any]) -> ReplySpec:
    """A model that repeats the last user message, or reports a tool result."""
    last = request["messages"][-1]
    if last["role"] == "tool":
        return text(f"result {last['content']}")
    return text(f"you said {last['content']!r}")


# ---------------------------------------------------------------- 15: never switch models silently


@pytest.mark.parametrize(
    ("argv", "extra_env", "named"),
    [
        ([], {"OPENAI_MODEL": "gpt-4o-mini"}, "the model 'gpt-4o-mini' (--model or OPENAI_MODEL)"),
        (["--model", "gpt-4o-mini"], {}, "the model 'gpt-4o-mini' (--model or OPENAI_MODEL)"),
        (["--provider", "openai"], {}, "--provider openai"),
        ([], {"TETHER_PROVIDER": "snowflake"}, "--provider snowflake"),
        (["--protocol", "responses"], {}, "--protocol responses"),
        ([], {"TETHER_PROTOCOL": "responses"}, "--protocol responses"),
    ],
    ids=["OPENAI_MODEL", "--model", "--provider", "TETHER_PROVIDER", "--protocol", "TETHER_PROTOCOL"],
)
def test_a_named_model_without_an_endpoint_is_a_configuration_error_not_the_embedded_model(
    argv: list[str], extra_env: dict[str, str], named: str, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    done = tether("run", PROMPT, "--tools", "calc", "--db", str(db), *argv, env=clean_env(**extra_env))

    assert done.code == 3, done
    assert "using the local model" not in done.err
    [line] = done.err.strip().splitlines()
    assert line.startswith(f"error: {named} is named but no endpoint is: set OPENAI_BASE_URL")
    assert "OPENAI_API_KEY" in line
    assert runs_in(db) == 0


def test_a_continued_conversation_keeps_the_model_and_endpoint_it_began_with(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with FakeServer(echo) as first, FakeServer(echo) as other:
        began = clean_env(OPENAI_BASE_URL=first.base_url, OPENAI_MODEL="first-model", OPENAI_API_KEY="x")
        child = pexpect.spawn(
            sys.executable, ["-m", "tether", "chat", "--db", str(db)], env=began, encoding="utf-8", timeout=30
        )
        child.expect(r"conversation (\w+) \(Ctrl-D to leave\)")
        conversation = child.match.group(1)
        child.expect_exact("you> ")
        child.sendline("hello")
        child.expect_exact("agent> you said 'hello'")
        child.expect_exact("you> ")
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()

        # Nothing in the environment now, or another endpoint: the conversation goes on where it began.
        for env in (clean_env(), clean_env(OPENAI_BASE_URL=other.base_url, OPENAI_MODEL="other-model")):
            done = tether("run", "and again", "--continue", conversation, "--db", str(db), env=env)
            assert done.code == 0, done
            assert "using the local model" not in done.err
        assert [r["model"] for r in first.requests] == ["first-model"] * 3
        assert other.requests == []

        # An option that names another model, endpoint or toolset is refused, not obeyed.
        for option, value in (("--model", "other-model"), ("--base-url", other.base_url), ("--tools", "calc")):
            done = tether("run", "x", "--continue", conversation, "--db", str(db), option, value, env=clean_env())
            assert done.code == 3, done
            assert f"conversation {conversation} runs with {option} " in done.err
            assert f"leave {option} out" in done.err
        assert len(first.requests) == 3 and other.requests == []


# ---------------------------------------------------------------- 16: a run's setup, stored and checked


@pytest.mark.parametrize("given", ["lib/payments.py", "payments"], ids=["file", "module-in-cwd"])
def test_a_toolset_file_is_stored_by_absolute_path_so_resume_works_from_anywhere(given: str, tmp_path: Path) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "lib").mkdir(parents=True)
    elsewhere.mkdir()
    (project / ("lib/payments.py" if given.endswith(".py") else "payments.py")).write_text(PAYMENTS)
    db = tmp_path / "runs.db"
    with FakeServer([tool_calls([("c1", "pay", '{"amount": 5}')]), text("paid")]) as server:
        env = clean_env(TETHER_DB=str(db))
        done = tether("run", "pay 5", "--tools", given, "--json", *endpoint(server), env=env, cwd=project)
        assert done.code == 20, done
        run_id = json.loads(done.out)["run_id"]
        assert tether("approve", run_id, "c1", env=env, cwd=elsewhere).code == 0
        resumed = tether("resume", run_id, "--json", "--api-key", "x", env=env, cwd=elsewhere)

    assert resumed.code == 0, resumed
    assert json.loads(resumed.out)["output"] == "paid"


def test_a_tool_needing_approval_without_a_store_is_refused_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "payments.py").write_text(PAYMENTS)
    with FakeServer([text("unreachable")]) as server:
        done = tether("run", PROMPT, "--tools", "payments", "--no-log", *endpoint(server), cwd=tmp_path)
        assert server.requests == []

    assert done.code == 3, done
    assert done.err.strip() == (
        "error: tool 'pay' needs approval: a run that waits for approval is kept in the run store; drop --no-log"
    )


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("127.0.0.1:8080/v1", "it must start with http:// or https://"),
        ("ftp://127.0.0.1/v1", "it must start with http:// or https://"),
        ("http://", "it names no host"),
        ("http://127.0.0.1:99999/v1", "port out of range 0-65535"),
        ("http://127.0.0.1:80a/v1", "port could not be cast to integer value as '80a'"),
        ("http://127.0.0.1:8080/v1?key=1", "it cannot have a query or a fragment"),
        ("http://127.0.0.1 /v1", "it contains a space or a control character"),
        ("http://[::1/v1", "invalid IPv6 URL"),
    ],
)
def test_a_malformed_base_url_is_exit_3_before_any_run_is_recorded(url: str, problem: str, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    done = tether("run", PROMPT, "--db", str(db), "--base-url", url, "--model", "m", "--api-key", "x")
    from_env = tether("run", PROMPT, "--db", str(db), env=clean_env(OPENAI_BASE_URL=url, OPENAI_MODEL="m"))

    assert (done.code, from_env.code) == (3, 3), (done, from_env)
    assert done.err.startswith(f"error: --base-url {url!r} is not a base URL: ")
    assert from_env.err.startswith(f"error: OPENAI_BASE_URL {url!r} is not a base URL: ")
    assert problem in done.err and problem in from_env.err
    assert runs_in(db) == 0


def test_a_password_in_a_malformed_base_url_is_never_shown() -> None:
    done = tether("run", PROMPT, "--base-url", "ftp://user:hunter2@host/v1", "--model", "m")
    assert done.code == 3, done
    assert "hunter2" not in done.err and "'ftp://***@host/v1'" in done.err


def test_a_base_url_carrying_a_password_is_refused_without_showing_it(tmp_path: Path) -> None:
    """It would be sent beside the key and printed in every connection error; aiohttp refused it with a traceback."""
    db = tmp_path / "runs.db"
    done = tether("run", PROMPT, "--db", str(db), "--base-url", "http://user:hunter2@127.0.0.1:9/v1", "--model", "m")

    assert done.code == 3, done
    assert done.err.startswith("error: --base-url 'http://***@127.0.0.1:9/v1' is not a base URL: it carries a user")
    assert "hunter2" not in done.err and "Traceback" not in done.err
    assert runs_in(db) == 0


def test_run_dash_reads_the_prompt_from_standard_input() -> None:
    prompt = "Summarise this:\nline one\nline two"
    with FakeServer(echo) as server:
        done = tether("run", "-", "--json", *endpoint(server), input=prompt + "\n")
        empty = tether("run", "-", *endpoint(server), input="  \n")

    assert done.code == 0, done
    assert server.requests[0]["messages"][-1] == {"role": "user", "content": prompt}
    assert empty.code == 3, empty
    assert empty.err.strip() == "error: no prompt on standard input (tether run - reads it from there)"
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("argv", "code", "exit_code"),
    [
        (["run", PROMPT, "--tools", "no_such_toolset", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"],
         "configuration_error", 3),
        (["run", PROMPT, "--base-url", "nope", "--model", "m"], "configuration_error", 3),
        (["resume", "0123456789abcdef0123456789abcdef"], "configuration_error", 3),
        (["approve", "0123456789abcdef0123456789abcdef", "c1"], "configuration_error", 3),
    ],
    ids=["unknown-toolset", "bad-base-url", "resume-unknown-run", "approve-unknown-run"],
)  # fmt: skip
def test_with_json_a_failure_is_one_json_object_with_the_same_exit_status(
    argv: list[str], code: str, exit_code: int, tmp_path: Path
) -> None:
    done = tether(*argv, "--json", env=clean_env(TETHER_DB=str(tmp_path / "runs.db")))

    assert done.code == exit_code, done
    assert done.err == ""
    error = json.loads(done.out)["error"]
    assert (error["code"], error["exit"]) == (code, exit_code)
    assert error["message"] and not error["message"].startswith("error:")
