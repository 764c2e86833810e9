"""``tether run`` / ``resume`` against a model that sends deeply nested JSON: documented statuses, no traceback.

The real command in a subprocess, the FakeServer in a thread of this
process, a run store file in ``tmp_path`` (``cli_helpers.tether`` fails on
any Python traceback in the output).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from cli_helpers import clean_env, endpoint, tether

from tether.testing.fake_server import FakeServer, raw, text, tool_calls

EXIT_MODEL_ERROR = 17
EXIT_AWAITING_APPROVAL = 20


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return clean_env(TETHER_DB=str(tmp_path / "runs.db"))


def test_deep_arguments_are_refused_and_the_run_completes(env: dict[str, str]) -> None:
    script = [tool_calls([("call_1", "multiply", '{"a": ' + deep(5_000) + ', "b": 1}')]), text("I cannot.")]
    with FakeServer(script) as server:
        done = tether("run", "hi", "--tools", "calc", "--json", *endpoint(server), env=env)

    assert done.code == 0, done
    result = json.loads(done.out)
    assert result["status"] == "completed"
    (call,) = result["steps"][0]["calls"]
    assert (call["outcome"], call["executed"], call["arguments"]) == ("invalid_json", False, None)
    shown = tether("runs", "show", result["run_id"], env=env)
    assert shown.code == 0, shown
    assert tether("runs", "verify", result["run_id"], env=env).code == 0


def test_a_reply_nested_too_deep_ends_the_run_model_error(env: dict[str, str]) -> None:
    body = '{"choices": [{"index": 0, "message": {"role": "assistant", "content": ' + deep(100_000) + "}}]}"
    with FakeServer([raw(body)]) as server:
        done = tether("run", "hi", "--tools", "calc", "--json", *endpoint(server), env=env)

    assert done.code == EXIT_MODEL_ERROR, done
    result = json.loads(done.out)
    assert result["status"] == "model_error"
    assert result["reason"] == "ModelResponseError: response body is nested more than 128 levels deep"


TOOLSET = '''
from tether.tools import tool


@tool(approval=True)
def wire(amount: int) -> str:
    """Send money (needs a person's approval)."""
    return f"sent {amount}"
'''


def test_a_run_paused_beside_a_deep_call_is_approved_and_resumed(tmp_path: Path, env: dict[str, str]) -> None:
    package = tmp_path / "toolsets_for_test"
    package.mkdir()
    (package / "gate_tools.py").write_text(textwrap.dedent(TOOLSET))
    env["PYTHONPATH"] = str(package) + os.pathsep + env.get("PYTHONPATH", "")
    calls = [("call_1", "wire", '{"amount": ' + deep(5_000) + "}"), ("call_2", "wire", '{"amount": 7}')]
    with FakeServer([tool_calls(calls), text("sent 7")]) as server:
        paused = tether("run", "send 7", "--tools", "gate_tools", "--json", *endpoint(server), env=env)
        assert paused.code == EXIT_AWAITING_APPROVAL, paused
        run_id = json.loads(paused.out)["run_id"]
        assert tether("approve", run_id, "call_2", env=env).code == 0

        resumed = tether("resume", run_id, "--json", "--api-key", "x", env=env)
        again = tether("resume", run_id, env=env)

    assert resumed.code == 0, resumed
    result = json.loads(resumed.out)
    assert result["status"] == "completed"
    assert {c["id"]: c["outcome"] for s in result["steps"] for c in s["calls"]} == {
        "call_1": "invalid_json",
        "call_2": "ok",
    }
    assert "already ended completed" in again.err
    assert tether("runs", "verify", run_id, env=env).code == 0
