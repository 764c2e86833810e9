"""``--protocol responses``: ``tether run`` and ``tether chat`` speak OpenAI's Responses API, in real subprocesses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pexpect
import pytest
from cli_helpers import clean_env, endpoint, tether

from tether.testing.fake_server import SCENARIOS, FakeServer, text
from tether.toolsets import load_toolset

PROMPT = "What is 248 times 15?"
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("stream", [False, True])
def test_run_with_protocol_responses_speaks_the_responses_api(stream: bool) -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        argv = ["run", PROMPT, "--protocol", "responses", "--tools", "calc", "--json", *endpoint(server)]
        done = tether(*argv, *(["--stream"] if stream else []))
        requests = list(server.requests)

    assert done.code == 0, done
    data = json.loads(done.out)
    assert data["status"] == "completed" and data["output"] == "248 × 15 = 3720"
    assert len(requests) == 2 and all("input" in r and "messages" not in r for r in requests)
    assert [bool(r.get("stream")) for r in requests] == [stream, stream]
    result = requests[1]["input"][-1]
    assert result["type"] == "function_call_output" and json.loads(result["output"]) == {"ok": True, "result": 3720}


def test_protocol_anthropic_alone_is_the_anthropic_profile() -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        argv = ["run", PROMPT, "--protocol", "anthropic", "--base-url", server.origin, "--tools", "calc", "--json"]
        done = tether(*argv, env=clean_env(ANTHROPIC_MODEL="claude-fake", ANTHROPIC_API_KEY="x"))
        requests = list(server.requests)
    assert done.code == 0, done
    assert json.loads(done.out)["output"] == "248 × 15 = 3720"
    assert all(r["model"] == "claude-fake" and "messages" in r and "max_tokens" in r for r in requests)
    assert all("strict" not in t for t in requests[0]["tools"])  # the profile's own-schema tools


def test_the_protocol_comes_from_the_environment_and_strict_tools_from_the_profile() -> None:
    """TETHER_PROTOCOL picks the protocol; only the openai profile's tools go in strict form, ``strict`` said always."""
    own = {t.name: t.parameters for t in load_toolset("calc")}
    sent = {}
    for name, extra in (("openai", ["--provider", "openai"]), ("none", [])):
        with FakeServer([text("fine")]) as server:
            done = tether("run", PROMPT, "--tools", "calc", *endpoint(server), *extra,
                          env=clean_env(TETHER_PROTOCOL="responses"))  # fmt: skip
            assert done.code == 0, done
            sent[name] = server.requests[0]["tools"]
    assert all(t["type"] == "function" and t["strict"] is True for t in sent["openai"])
    assert {t["name"]: t["parameters"] for t in sent["none"]} == own
    assert all(t["strict"] is False for t in sent["none"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--provider", "anthropic", "--protocol", "responses"], "--protocol responses does not go with --provider "
         "anthropic, whose protocol is anthropic"),
        (["--provider", "snowflake", "--protocol", "anthropic"], "--protocol anthropic does not go with --provider "
         "snowflake, whose protocol is openai"),
        (["--protocol", "graphql"], "'graphql' is not one of 'openai', 'responses', 'anthropic'"),
    ],
)  # fmt: skip
def test_a_protocol_that_does_not_fit_is_refused_before_anything_runs(argv: list[str], message: str) -> None:
    done = tether("run", PROMPT, "--tools", "calc", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", *argv)
    assert done.code in (2, 3), done
    assert message in done.err


def test_chat_with_protocol_responses_and_its_conversation_keeps_the_protocol(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with FakeServer(SCENARIOS["multiply"]) as server:
        env = clean_env(PYTHONPATH=str(REPO / "src"), OPENAI_BASE_URL=server.base_url, OPENAI_MODEL="m")
        child = pexpect.spawn(
            sys.executable,
            ["-m", "tether", "chat", "--tools", "calc", "--protocol", "responses", "--db", str(db)],
            env=env,
            encoding="utf-8",
            timeout=30,
        )
        child.expect(r"conversation (\w+) \(Ctrl-D to leave\)")
        conversation = child.match.group(1)
        child.expect_exact("you> ")
        child.sendline(PROMPT)
        child.expect_exact("agent> 248 × 15 = 3720")
        child.expect_exact("you> ")
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before

        # The next turn goes on with the Responses API, its history included; another protocol is refused.
        done = tether("run", PROMPT, "--continue", conversation, "--db", str(db), env=env)
        assert done.code == 0, done
        refused = tether("run", "x", "--continue", conversation, "--db", str(db), "--protocol", "openai", env=env)
        requests = list(server.requests)

    assert len(requests) == 4 and all("input" in r for r in requests)
    assert [i.get("type") for i in requests[2]["input"]] == [
        None, "function_call", "function_call_output", None, None  # turn 1 (user, call, result, answer), turn 2
    ]  # fmt: skip
    assert refused.code == 3 and f"conversation {conversation} runs with --protocol responses" in refused.err
