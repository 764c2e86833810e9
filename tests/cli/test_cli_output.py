"""What the ``tether`` command prints about a run, as real subprocesses over a real run store file.

Regression tests for issue 8, points 13-16: the timeline of ``runs show``,
paused runs in ``run --json``, arguments on call lines, the transcript in
``runs show --json``, one message per fact, run id prefixes, prompts in
``runs list``, and token budgets enforced on local estimates when the
provider reports no usage. The model is a FakeServer in a thread of this
process.
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

from tether.testing.fake_server import SCENARIOS, FakeServer, text, tool_calls

PROMPT = "What is 248 times 15?"
SECRET = "hunter2-DO-NOT-PRINT"
EXIT_NOT_WAITING = 7
ESTIMATED = "tokens estimated locally (the provider reported no usage)"
BUDGET_1000 = ("--max-total-tokens", "1000")

TOOLSET = '''
import time

from tether.tools import tool


@tool(read_only=True)
def slow_echo(text: str) -> str:
    """Wait half a second, then give the text back."""
    time.sleep(0.5)
    return text


@tool(approval=True)
def wire(amount: int, password: str) -> str:
    """Send money (needs a person's approval)."""
    return f"sent {amount}"
'''


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store" / "runs.db"


@pytest.fixture
def env(db: Path) -> dict[str, str]:
    return clean_env(TETHER_DB=str(db))


@pytest.fixture
def toolset(tmp_path: Path, env: dict[str, str]) -> str:
    package = tmp_path / "toolsets_for_output"
    package.mkdir()
    (package / "output_tools.py").write_text(textwrap.dedent(TOOLSET))
    env["PYTHONPATH"] = str(package) + os.pathsep + env.get("PYTHONPATH", "")
    return "output_tools"


def record_run(env: Mapping[str, str], *extra: str, prompt: str = PROMPT) -> str:
    """A completed multiply run recorded in the store; its id."""
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", prompt, "--tools", "calc", "--json", *extra, *endpoint(server), env=env)
    assert done.code == 0, done
    run_id: str = json.loads(done.out)["run_id"]
    return run_id


def show_json(run_id: str, env: Mapping[str, str]) -> dict[str, Any]:
    done = tether("runs", "show", run_id, "--json", env=env)
    assert done.code == 0, done
    data: dict[str, Any] = json.loads(done.out)
    return data


WIRE_CALL = tool_calls([("call_w1", "wire", json.dumps({"amount": 7, "password": SECRET}))])


def pause_for_approval(env: Mapping[str, str], toolset: str, *extra: str) -> tuple[Any, str]:
    """A run paused on ``wire(amount=7, password=SECRET)``: the finished command and the run id."""
    with FakeServer([WIRE_CALL]) as server:
        return pause_on(server, env, toolset, *extra)


def pause_on(server: FakeServer, env: Mapping[str, str], toolset: str, *extra: str) -> tuple[Any, str]:
    done = tether("run", "send 7", "--tools", toolset, *extra, *endpoint(server), env=env)
    assert done.code == 20, done
    match = re.search(r"\b[0-9a-f]{32}\b", done.out)
    assert match is not None, done
    return done, match.group()


# ---------------------------------------------------------------- 13: runs show


def test_runs_show_labels_each_event_with_the_step_it_belongs_to(env: dict[str, str]) -> None:
    run_id = record_run(env)
    events = show_json(run_id, env)["events"]

    replies = [e["step"] for e in events if e["kind"] == "model_replied"]
    assert replies == [1, 2]
    calls = [(e["kind"], e["step"]) for e in events if e["kind"].startswith("call_")]
    assert calls == [("call_validated", 1), ("call_executed", 1)]

    shown = tether("runs", "show", run_id, env=env)
    (reply_line,) = [line for line in shown.out.splitlines() if "finish_reason=tool_calls" in line]
    assert "  step 1  " in reply_line
    (executed_line,) = [line for line in shown.out.splitlines() if "executed -> ok" in line]
    assert "  step 1  " in executed_line


def test_runs_show_times_are_when_each_event_happened(toolset: str, env: dict[str, str]) -> None:
    script = [tool_calls([("call_s1", "slow_echo", '{"text": "hi"}')]), text("done")]
    with FakeServer(script) as server:
        done = tether("run", "echo hi", "--tools", toolset, "--json", *endpoint(server), env=env)
    assert done.code == 0, done
    events = show_json(json.loads(done.out)["run_id"], env)["events"]

    at: dict[str, float] = {}
    for e in events:
        at.setdefault(e["kind"], e["at"])  # the first of each kind: step 1's
    # The tool sleeps 0.5 s between these two; both are saved in one checkpoint, after it.
    assert at["call_executed"] - at["call_validated"] >= 0.45
    assert at["call_executed"] - at["model_replied"] >= 0.45


# ---------------------------------------------------------------- 14: paused runs, arguments, transcript


def test_run_json_of_a_paused_run_names_the_pending_call_and_how_to_decide(toolset: str, env: dict[str, str]) -> None:
    done, run_id = pause_for_approval(env, toolset, "--json")
    data = json.loads(done.out)

    assert data["status"] == "awaiting_approval"
    (step,) = data["steps"]
    (call,) = step["calls"]
    assert call["id"] == "call_w1" and call["tool"] == "wire"
    assert call["outcome"] == "awaiting_approval" and call["executed"] is False
    assert call["arguments"] == {"amount": 7, "password": "[redacted]"}
    (pending,) = data["pending"]
    assert pending["id"] == "call_w1" and pending["tool"] == "wire"
    assert pending["arguments"] == {"amount": 7, "password": "[redacted]"}
    assert re.fullmatch(r"[0-9a-f]{64}", pending["fingerprint"])
    assert pending["approve"] == f"tether approve {run_id} call_w1"
    assert pending["deny"] == f"tether deny {run_id} call_w1"
    assert SECRET not in done.out + done.err


def test_a_paused_run_on_the_terminal_shows_the_call_its_arguments_and_the_command(
    toolset: str, env: dict[str, str]
) -> None:
    done, run_id = pause_for_approval(env, toolset)

    (waiting,) = [line for line in done.out.splitlines() if line.startswith("  call ")]
    assert waiting.strip() == (
        'call call_w1 wire {"amount": 7, "password": "[redacted]"}: waiting for approval: wire requires approval'
    )
    assert f"tether approve {run_id} call_w1" in done.out + done.err
    assert SECRET not in done.out + done.err


def test_call_lines_show_the_arguments(env: dict[str, str]) -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", PROMPT, "--tools", "calc", *endpoint(server), env=env)
    assert done.code == 0, done
    (call_line,) = [line for line in done.out.splitlines() if line.lstrip().startswith("call ")]
    assert re.fullmatch(r'  call call_\w+ multiply \{"a": 248, "b": 15\}: ran -> ok 3720', call_line)


def test_call_lines_shorten_long_arguments(toolset: str, env: dict[str, str]) -> None:
    long_text = "x" * 5000
    script = [tool_calls([("call_s1", "slow_echo", json.dumps({"text": long_text}))]), text("done")]
    with FakeServer(script) as server:
        done = tether("run", "echo", "--tools", toolset, *endpoint(server), env=env)
    assert done.code == 0, done
    (call_line,) = [line for line in done.out.splitlines() if line.lstrip().startswith("call call_s1")]
    assert len(call_line) < 250  # the arguments and the result summary, each cut
    assert "…" in call_line and "5000 chars" in call_line
    assert long_text not in done.out


def test_runs_show_json_gives_the_transcript_with_placeholders_for_content_not_logged(env: dict[str, str]) -> None:
    run_id = record_run(env)
    data = show_json(run_id, env)

    messages = data["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert [m["seq"] for m in messages] == [0, 1, 2, 3]
    assert messages[0]["content"] == f"<{len(PROMPT)} chars>"
    (call,) = messages[1]["tool_calls"]
    assert call["tool"] == "multiply" and call["arguments"] == {"a": 248, "b": 15}
    assert messages[2]["tool_call_id"] == call["id"]
    assert re.fullmatch(r"<\d+ chars>", messages[2]["content"])
    assert re.fullmatch(r"<\d+ chars>", messages[3]["content"])
    assert PROMPT not in json.dumps(data) and "3720" not in json.dumps(messages)


def test_runs_show_json_gives_the_transcript_content_when_logged(env: dict[str, str]) -> None:
    run_id = record_run(env, "--log-content")
    messages = show_json(run_id, env)["messages"]

    assert messages[0] == {"seq": 0, "role": "user", "content": PROMPT}
    assert json.loads(messages[2]["content"]) == {"ok": True, "result": 3720}
    assert messages[3]["content"] == "248 × 15 = 3720"


# ---------------------------------------------------------------- 15: one message per fact, prefixes, lists


def test_stream_prints_the_answer_once(env: dict[str, str]) -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", PROMPT, "--tools", "calc", "--stream", *endpoint(server), env=env)
    assert done.code == 0, done
    assert (done.out + done.err).count("248 × 15 = 3720") == 1, done.out


def test_a_model_error_is_printed_once(env: dict[str, str]) -> None:
    refusal = {"error": {"message": "the model is overloaded today", "type": "server_error"}}
    from tether.testing.fake_server import raw

    with FakeServer([raw(refusal, 400)] * 3) as server:
        done = tether("run", PROMPT, "--tools", "calc", *endpoint(server), env=env)
    assert done.code == 17, done
    assert (done.out + done.err).count("the model is overloaded today") == 1, done


def test_resume_of_an_ended_run_exits_7_saying_there_is_nothing_to_resume(env: dict[str, str]) -> None:
    run_id = record_run(env)
    done = tether("resume", run_id, env=env)

    assert done.code == EXIT_NOT_WAITING, done
    assert done.out == ""
    assert done.err.strip() == f"error: run {run_id} already ended completed; there is nothing to resume"


def test_runs_list_json_help_and_output_agree_on_an_array(env: dict[str, str]) -> None:
    record_run(env)
    helped = tether("runs", "list", "--help", env=env)
    (option,) = [line for line in helped.out.splitlines() if line.strip().startswith("--json")]
    assert "array" in option and "object" not in option
    assert isinstance(json.loads(tether("runs", "list", "--json", env=env).out), list)


def test_run_ids_are_accepted_by_unique_prefix(toolset: str, env: dict[str, str]) -> None:
    with FakeServer([WIRE_CALL, text("not sent")]) as server:  # resume asks the server the run began with
        _, paused = pause_on(server, env, toolset)
        check_prefixes(paused, toolset, env)


def check_prefixes(paused: str, toolset: str, env: dict[str, str]) -> None:
    prefix = paused[:8]

    shown = tether("runs", "show", prefix, env=env)
    assert shown.code == 0, shown
    assert shown.out.startswith(f"run {paused}  awaiting_approval")
    verified = tether("runs", "verify", prefix, "--json", env=env)
    assert verified.code == 0, verified
    assert json.loads(verified.out)["run_id"] == paused
    denied = tether("deny", prefix, "call_w1", env=env)
    assert denied.code == 0, denied
    assert f"tether resume {paused}" in denied.out
    resumed = tether("resume", prefix, "--json", "--api-key", "x", env=env)
    assert resumed.code == 0, resumed
    assert json.loads(resumed.out)["run_id"] == paused
    again = tether("resume", prefix, env=env)
    assert again.code == EXIT_NOT_WAITING and paused in again.err, again

    _, second = pause_for_approval(env, toolset)
    # Ids are time-ordered: two runs a minute apart share their first 8 characters. One more than they share.
    shared = next(i for i, (a, b) in enumerate(zip(paused, second, strict=True)) if a != b)
    unique = second[: shared + 1]
    approved = tether("approve", unique, "call_w1", env=env)
    assert approved.code == 0, approved
    assert f"tether resume {second}" in approved.out


def test_reconcile_accepts_a_run_id_prefix(env: dict[str, str]) -> None:
    run_id = record_run(env)
    done = tether("reconcile", run_id[:6], "call_x", "--not-executed", env=env)
    # The run is found by its prefix, then refused: it is not waiting for a reconciliation.
    assert done.code == EXIT_NOT_WAITING, done
    assert run_id in done.err and "awaiting_reconciliation" in done.err


def test_an_ambiguous_or_unknown_prefix_exits_3_naming_the_candidates(db: Path, env: dict[str, str]) -> None:
    run_id = record_run(env)
    twin = run_id[:4] + ("0" if run_id[4] != "0" else "1") + run_id[5:]
    with sqlite3.connect(db, isolation_level=None) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(runs)")]
        copied = ", ".join("?" if c == "id" else c for c in columns)
        conn.execute(f"INSERT INTO runs SELECT {copied} FROM runs WHERE id = ?", (twin, run_id))

    ambiguous = tether("runs", "show", run_id[:4], env=env)
    assert ambiguous.code == 3, ambiguous
    assert ambiguous.out == ""
    (line,) = ambiguous.err.strip().splitlines()
    assert "ambiguous" in line and run_id in line and twin in line
    unique = tether("runs", "show", run_id[:5], env=env)
    assert unique.code == 0, unique
    assert unique.out.startswith(f"run {run_id}  completed")
    unknown = tether("runs", "verify", "zz", env=env)
    assert unknown.code == 3, unknown
    assert "no run zz" in unknown.err


def test_runs_list_shows_the_first_line_of_the_prompt_when_content_was_logged(env: dict[str, str]) -> None:
    hidden = record_run(env, prompt="Keep this private\nsecond line")
    logged = record_run(env, "--log-content", prompt="What is 248 times 15?\nShow your work.")

    done = tether("runs", "list", env=env)
    assert done.code == 0, done
    lines = done.out.strip().splitlines()
    (logged_line,) = [line for line in lines if line.startswith(logged)]
    assert logged_line.endswith("What is 248 times 15?")
    assert "Keep this private" not in done.out and "Show your work" not in done.out
    data = {r["run_id"]: r for r in json.loads(tether("runs", "list", "--json", env=env).out)}
    assert data[logged]["prompt"] == "What is 248 times 15?"
    assert data[hidden]["prompt"] is None


def test_runs_list_redacts_a_key_in_the_prompt_line_as_its_json_does(env: dict[str, str]) -> None:
    logged = record_run(env, "--log-content", prompt="Use sk-proj-LISTEDSECRET0123 to sum 248 times 15")

    done = tether("runs", "list", env=env)
    assert done.code == 0, done
    (line,) = [line for line in done.out.splitlines() if line.startswith(logged)]
    assert line.endswith("Use [redacted] to sum 248 times 15")
    assert "LISTEDSECRET" not in done.out


# Credentials of a known shape, none of them under a secret-looking key: the text patterns must see them.
SHAPED = {
    "basic": "Authorization: Basic dXNlcjpCQVNJQ1NFQ1JFVA==",
    "lower": "authorization: bearer LOWERSECRET0123",
    "tether": "tk_TETHERSECRET" + "x" * 29,
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJKV1RTRUNSRVQifQ.c2lnbmF0dXJlSldUU0VDUkVU",
    "aws": "AKIAAWSSECRET0123456",
    "github": "ghp_GITHUBSECRET" + "x" * 25,
    "pem": "-----BEGIN PRIVATE KEY-----\nMIIPEMSECRET\n-----END PRIVATE KEY-----",
    "query": "https://api.example.com/v1/items?limit=5&access_token=QUERYSECRET0123&page=2",
    "signed": "https://files.example.com/a.pdf?sig=SIGNEDSECRET0123",
}


def test_credentials_of_a_known_shape_in_logged_text_are_redacted_in_events_and_output(
    db: Path, toolset: str, env: dict[str, str]
) -> None:
    """With --log-content a prompt and a call's arguments reach the audit events and `runs show`; each
    credential below has a shape no prose has, and a private_key key is a secret-looking key."""
    prompt = "Check these: " + " | ".join(SHAPED.values())
    arguments = {"text": "hi", "private_key": "PRIVATEKEYSECRET", "refresh_tokens": ["REFRESHSECRET"]}
    echoed = tool_calls([("call_e1", "slow_echo", json.dumps(arguments))])
    with FakeServer([echoed, text("done")]) as server:
        done = tether("run", prompt, "--tools", toolset, "--log-content", "--json", *endpoint(server), env=env)
    assert done.code == 0, done
    shown = tether("runs", "show", json.loads(done.out)["run_id"], "--json", env=env)
    with sqlite3.connect(db) as store:
        events = [row[0] for row in store.execute("SELECT data FROM events")]
    assert any("Check these:" in data for data in events)  # the prompt was logged
    assert any('"private_key": "[redacted]"' in data for data in events)  # the refused call's arguments
    for where in (done.out, shown.out, *events):
        assert "SECRET" not in where, where  # each value above holds it
    assert "Authorization: Basic [redacted]" in shown.out and "authorization: bearer [redacted]" in shown.out
    assert "?limit=5&access_token=[redacted]&page=2" in shown.out  # the rest of the URL as it was
    assert any('"refresh_tokens": "[redacted]"' in data for data in events)  # not usage counts: tokens to refresh


def test_tether_local_off_does_not_suggest_installing_the_local_model() -> None:
    done = tether("run", PROMPT, "--tools", "calc", env=clean_env(TETHER_LOCAL="off"))
    assert done.code == 3, done
    assert "tether[local]" not in done.err
    assert "TETHER_LOCAL=off" in done.err


# ---------------------------------------------------------------- 16: token budgets without reported usage


def test_a_token_budget_is_enforced_on_estimates_when_the_provider_reports_no_usage(env: dict[str, str]) -> None:
    big = "a" * 2000
    script = [
        tool_calls([(f"call_{i}", "multiply", json.dumps({"a": i, "b": 2}))], usage=None, content=big)
        for i in range(1, 4)
    ] + [text("done", usage=None)]
    with FakeServer(script) as server:
        done = tether("run", PROMPT, "--tools", "calc", *BUDGET_1000, "--json", *endpoint(server), env=env)
        requests = len(server.requests)

    assert done.code == 11, done
    data = json.loads(done.out)
    assert data["status"] == "budget_exhausted"
    assert data["reason"] == f"total token budget of 1000 used; {ESTIMATED}"
    assert data["usage"]["estimated"] is True
    assert data["usage"]["total_tokens"] >= 1000
    assert requests < 4


def test_a_token_budget_on_reported_usage_says_nothing_of_estimates(env: dict[str, str]) -> None:
    script = [tool_calls([(f"call_{i}", "multiply", json.dumps({"a": i, "b": 2}))], usage=(600, 10)) for i in (1, 2)]
    with FakeServer(script) as server:
        done = tether("run", PROMPT, "--tools", "calc", *BUDGET_1000, "--json", *endpoint(server), env=env)

    assert done.code == 11, done
    data = json.loads(done.out)
    assert data["reason"] == "total token budget of 1000 used"
    assert data["usage"] == {"input_tokens": 1200, "output_tokens": 20, "total_tokens": 1220, "estimated": False}
