"""``-s/--system``, ``-o KEY=VALUE`` and ``--fallback-model`` on the real ``tether`` command, against FakeServers.

What the options ask is what the server receives; an unknown key or a bad
value is a usage error (exit 2) before anything is sent or recorded; a run
killed mid-way and resumed with ``tether resume`` is sent the same settings
on the same fallback chain, and ``tether runs show`` says which model
answered each step.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import clean_env, endpoint, tether

from tether.testing.fake_server import FakeServer, multiply, raw, text

PROMPT = "What is 248 times 15?"
SAMPLING = ("temperature", "max_tokens", "top_p", "seed", "stop", "parallel_tool_calls")


def sent(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k in SAMPLING}


def runs_in(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as connection:
        return int(connection.execute("SELECT count(*) FROM runs").fetchone()[0])


def test_run_sends_the_system_message_and_every_setting(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    options = ["-o", "temperature=0.2", "-o", "seed=7", "-o", "stop=END", "--option", "stop=FIN"]
    options += ["-o", "parallel_tool_calls=false", "-o", "max_tokens=300", "-o", "top_p=0.5"]
    with FakeServer(multiply) as server:
        done = tether(
            "run", PROMPT, "--tools", "calc", "-s", "Answer in French.", *options, "--db", str(db), *endpoint(server)
        )
    assert done.code == 0, done
    first = server.requests[0]
    assert first["messages"][0] == {"role": "system", "content": "Answer in French."}
    assert sent(first) == {
        "temperature": 0.2,
        "seed": 7,
        "stop": ["END", "FIN"],
        "parallel_tool_calls": False,
        "max_tokens": 300,
        "top_p": 0.5,
    }
    assert sent(server.requests[1]) == sent(first)


@pytest.mark.parametrize("command", ["run", "chat", "eval"])
@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("temp=0.2", "unknown model setting 'temp': the settings are temperature, max_tokens"),
        ("temperature=hot", "temperature='hot' is not a valid float"),
        ("temperature=nan", "temperature='nan' is not a valid float"),
        ("max_tokens=1.5", "max_tokens='1.5' is not a valid int"),
        ("max_tokens=0", "ModelSettings.max_tokens must be at least 1"),
        ("top_p=2", "ModelSettings.top_p must be above 0 and at most 1"),
        ("parallel_tool_calls=maybe", "expected true or false"),
        ("temperature", "'temperature' is not KEY=VALUE"),
    ],
)
def test_an_unknown_key_or_a_bad_value_is_a_usage_error_before_anything_happens(
    command: str, option: str, said: str, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": "c1", "prompt": "hi", "toolsets": ["calc"], "expected": []}) + "\n")
    with FakeServer([text("hi")]) as server:
        argv = {
            "run": ["run", "hi", "--db", str(db)],
            "chat": ["chat", "--db", str(db)],
            "eval": ["eval", str(cases), "--out", str(tmp_path / "out")],
        }[command]
        done = tether(*argv, "-o", option, *endpoint(server), input="hello\n")
        assert server.requests == []
    assert done.code == 2, done
    assert said in done.err and "-o" in done.err
    assert runs_in(db) == 0


def test_a_setting_the_protocol_has_no_field_for_is_a_configuration_error(tmp_path: Path) -> None:
    with FakeServer([text("hi")]) as server:
        env = clean_env(ANTHROPIC_API_KEY="x", ANTHROPIC_BASE_URL=server.origin)
        done = tether("run", "hi", "--provider", "anthropic", "--model", "claude", "-o", "seed=1", "--no-log", env=env)
        assert server.requests == []
    assert done.code == 3 and "the Messages API has no seed" in done.err, done


def test_chat_sends_the_system_message_and_settings_each_turn(tmp_path: Path) -> None:
    with FakeServer([text("one"), text("two")]) as server:
        done = tether(
            "chat",
            "-s",
            "Be brief.",
            "-o",
            "temperature=0.3",
            "--db",
            str(tmp_path / "runs.db"),
            *endpoint(server),
            input="hello\nagain\n",
        )
    assert done.code == 0, done
    assert [sent(b) for b in server.requests] == [{"temperature": 0.3}] * 2
    assert all(b["messages"][0] == {"role": "system", "content": "Be brief."} for b in server.requests)


def test_eval_sends_the_settings_and_the_system_message_of_cases_without_one(tmp_path: Path) -> None:
    cases = tmp_path / "cases.jsonl"
    lines = [
        {"id": "plain", "prompt": "hi", "toolsets": ["calc"], "expected": []},
        {"id": "own", "system": "The case's own.", "prompt": "hi", "toolsets": ["calc"], "expected": []},
    ]
    cases.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with FakeServer(lambda request: text("no call")) as server:
        done = tether(
            "eval",
            str(cases),
            "--out",
            str(tmp_path / "out"),
            "--concurrency",
            "1",
            "-s",
            "Be exact.",
            "-o",
            "temperature=0.1",
            "-o",
            "seed=3",
            *endpoint(server),
        )
    assert done.code == 0, done
    assert [sent(b) for b in server.requests] == [{"temperature": 0.1, "seed": 3}] * 2
    systems = sorted(b["messages"][0]["content"] for b in server.requests)
    assert systems == ["Be exact.", "The case's own."]


def test_a_conversation_turn_keeps_its_system_message_and_takes_new_settings_over_its_own(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with FakeServer([text("one"), text("two")]) as server:
        began = tether(
            "chat", "-s", "Sys A", "-o", "temperature=0.2", "--db", str(db), *endpoint(server), input="hello\n"
        )
        assert began.code == 0, began
        conversation = re.search(r"conversation (\w+) ", began.out).group(1)  # type: ignore[union-attr]
        later = tether("run", "again", "--continue", conversation, "-o", "seed=3", "--db", str(db), "--api-key", "x")
        assert later.code == 0, later
        other = tether("run", "x", "--continue", conversation, "-s", "Sys B", "--db", str(db), "--api-key", "x")
        assert len(server.requests) == 2
    assert [sent(b) for b in server.requests] == [{"temperature": 0.2}, {"temperature": 0.2, "seed": 3}]
    assert [b["messages"][0]["content"] for b in server.requests] == ["Sys A", "Sys A"]
    assert other.code == 3 and f"conversation {conversation} runs with --system Sys A, not Sys B" in other.err


def _crash_toolset(tmp_path: Path) -> Path:
    """A read-only tool that kills its own process the first time it runs (SIGKILL: no cleanup at all)."""
    marker = tmp_path / "crashed"
    path = tmp_path / "crashing.py"
    path.write_text(
        f'''
import os, signal
from pathlib import Path
from tether import tool

@tool(read_only=True)
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    marker = Path({str(marker)!r})
    if not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return a * b
'''
    )
    return path


def test_a_run_killed_midway_resumes_on_the_same_chain_with_the_same_settings(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    tools = _crash_toolset(tmp_path)
    down = {"error": {"message": "overloaded", "type": "server_error"}}
    with FakeServer(lambda r: raw(down, 503, {"Retry-After": "0"})) as primary, FakeServer(multiply) as second:
        argv = ["run", PROMPT, "--tools", str(tools), "--db", str(db), "--base-url", primary.base_url]
        argv += ["--model", "primary-model", "--api-key", "x", "--fallback-model", "second-model"]
        argv += ["--fallback-base-url", second.base_url, "-o", "temperature=0.2", "-o", "seed=7"]
        killed = subprocess.run(
            [sys.executable, "-m", "tether", *argv], capture_output=True, text=True, env=clean_env(), timeout=90
        )
        assert killed.returncode == -9, killed.stderr
        (run,) = json.loads(tether("runs", "list", "--db", str(db), "--json").out)
        resumed = tether("resume", run["run_id"], "--db", str(db), "--api-key", "x")
        assert resumed.code == 0, resumed
        assert "3720" in resumed.out
        # Killed in a read-only call, which needs no checkpoint before it: the resumed run asks for step 1 again.
        assert len(second.requests) == 3
        assert [sent(b) for b in second.requests] == [{"temperature": 0.2, "seed": 7}] * 3
        assert [b["model"] for b in second.requests] == ["second-model"] * 3
        assert len(primary.requests) == 9  # asked first each time, 3 times (its retries)
        shown = tether("runs", "show", run["run_id"], "--db", str(db))
    assert shown.code == 0, shown
    replied = [line for line in shown.out.splitlines() if "model replied" in line]
    assert len(replied) == 2
    assert all("by second-model after primary-model: ServerError: HTTP 503: overloaded" in line for line in replied)


def test_fallback_options_are_checked_and_pinned_like_the_model(tmp_path: Path) -> None:
    done = tether(
        "run",
        "hi",
        "--fallback-model",
        "b",
        "--fallback-base-url",
        "ftp://x",
        "--no-log",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "a",
    )
    assert done.code == 3 and "--fallback-base-url 'ftp://x' is not a base URL" in done.err, done
    temporal = tether("run", "hi", "--engine", "temporal", "-o", "seed=1", "--no-log")
    assert temporal.code == 2 and "not sent to Temporal workers" in temporal.err, temporal
