"""``tether run --provider NAME`` selects a provider profile, in a real subprocess against a FakeServer.

The server replies as Snowflake Cortex does in the recordings
(tests/models/test_recorded.py shows the raw reply): valid tool calls with
``finish_reason: ""``.
"""

from __future__ import annotations

import json
from typing import Any

from cli_helpers import clean_env, endpoint, tether

from tether.models.providers import PROVIDERS
from tether.testing.fake_server import FakeServer, text, tool_calls

PROMPT = "What is 248 times 15?"


def snowflake_like() -> list[object]:
    return [
        tool_calls([("toolu_bdrk_015BgH", "multiply", '{"a":248,"b":15}')], finish_reason=""),
        text("248 × 15 = 3720", finish_reason=""),
    ]


def test_an_empty_finish_reason_with_calls_is_a_protocol_error_without_a_profile() -> None:
    with FakeServer(snowflake_like()) as server:
        done = tether("run", PROMPT, "--tools", "calc", "--json", *endpoint(server))

    assert done.code == 14, done
    data = json.loads(done.out)
    assert data["status"] == "protocol_error"
    assert data["steps"][0]["calls"] == [] or all(not c["executed"] for c in data["steps"][0]["calls"])


def test_provider_snowflake_runs_the_calls() -> None:
    with FakeServer(snowflake_like()) as server:
        done = tether("run", PROMPT, "--tools", "calc", "--provider", "snowflake", "--json", *endpoint(server))

    assert done.code == 0, done
    data = json.loads(done.out)
    assert data["status"] == "completed"
    assert "3720" in data["output"]
    [call] = data["steps"][0]["calls"]
    assert call["tool"] == "multiply" and call["outcome"] == "ok" and call["executed"] is True


def test_provider_from_the_environment() -> None:
    with FakeServer(snowflake_like()) as server:
        done = tether("run", PROMPT, "--tools", "calc", *endpoint(server), env=clean_env(TETHER_PROVIDER="snowflake"))

    assert done.code == 0, done
    assert "3720" in done.out


def test_an_unknown_provider_exits_3_listing_the_known_ones() -> None:
    done = tether("run", PROMPT, "--tools", "calc", "--provider", "nope", "--base-url", "http://127.0.0.1:9/v1")

    assert done.code == 3, done
    assert done.out == ""
    [line] = done.err.strip().splitlines()
    assert "nope" in line
    for name in PROVIDERS:
        assert name in line


def test_only_a_profile_whose_server_enforces_strict_mode_gets_the_strict_form() -> None:
    """`--provider openai` sends the tools with "strict": true; no profile, or anthropic, sends their own schemas."""
    from tether.toolsets import load_toolset

    own = {t.name: t.parameters for t in load_toolset("calc")}
    sent: dict[str, Any] = {}
    for name, extra in (("openai", ["--provider", "openai"]), ("none", []), ("anthropic", ["--provider", "anthropic"])):
        with FakeServer([text("fine")]) as server:
            where = server.origin if name == "anthropic" else server.base_url
            done = tether(
                "run", PROMPT, "--tools", "calc", "--base-url", where, "--model", "m", *extra, "--api-key", "x"
            )
            assert done.code == 0, done
            sent[name] = server.requests[0]["tools"]

    assert all(t["function"]["strict"] is True for t in sent["openai"])
    assert {t["function"]["name"]: t["function"]["parameters"] for t in sent["none"]} == own
    assert all("strict" not in t["function"] for t in sent["none"])
    assert {t["name"]: t["input_schema"] for t in sent["anthropic"]} == own
    assert all("strict" not in t for t in sent["anthropic"])
