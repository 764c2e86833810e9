"""The real ``tether`` command in a subprocess, against a FakeServer running in this process.

The server runs in a background thread (``with FakeServer(...)``); the
subprocess reaches it over loopback. OPENAI_* variables are removed from the
child's environment so the developer's own settings never leak in.
"""

from __future__ import annotations

import json
import re
import socket
from typing import Any

import pytest
from cli_helpers import clean_env, endpoint, tether

from tether.testing.fake_server import SCENARIOS, FakeServer, raw, text

PROMPT = "What is 248 times 15?"
SECRET_KEY = "sk-test-DO-NOT-PRINT-0123456789abcdef"


def one_json_object(stdout: str) -> dict[str, Any]:
    assert stdout.endswith("\n") and stdout.count("\n") == 1, f"expected one line of JSON: {stdout!r}"
    data = json.loads(stdout)
    assert isinstance(data, dict)
    return data


def closed_port() -> int:
    """A loopback port nobody listens on (bound and released at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def assistant_call_ids(server: FakeServer) -> list[str]:
    """The tool call ids the server handed out, read back from the history the client sent."""
    return [
        call["id"]
        for request in server.requests
        for message in request["messages"]
        if message["role"] == "assistant"
        for call in message.get("tool_calls", [])
    ]


# ---------------------------------------------------------------- tether run


def test_run_json_prints_one_object_for_a_completed_run() -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", PROMPT, "--tools", "calc", "--json", *endpoint(server))
        requests = len(server.requests)

    assert done.code == 0, done
    assert done.err == ""
    data = one_json_object(done.out)
    assert re.fullmatch(r"[0-9a-f]{32}", data["run_id"])
    assert data["status"] == "completed"
    assert "3720" in data["output"]
    assert requests == 2
    assert len(data["steps"]) == 2
    calls = [call for step in data["steps"] for call in step["calls"]]
    assert len(calls) == 1
    for call in calls:
        assert set(call) == {"id", "tool", "arguments", "outcome", "executed"}
        assert call["arguments"] == {"a": 248, "b": 15}
        assert call["id"].startswith("call_")
        assert call["tool"] == "multiply"
        assert call["outcome"] == "ok"
        assert call["executed"] is True
    assert data["usage"] == {"input_tokens": 20, "output_tokens": 10, "total_tokens": 30, "estimated": False}
    assert data["pending"] == []


def test_run_readable_prints_steps_calls_answer_and_run_id() -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", PROMPT, "--tools", "calc", *endpoint(server))
        (call_id,) = assistant_call_ids(server)

    assert done.code == 0, done
    lines = done.out.splitlines()
    assert "step 1" in lines
    assert "step 2" in lines
    assert any("finish_reason=tool_calls" in line for line in lines)
    assert any("finish_reason=stop" in line for line in lines)
    (call_line,) = [line for line in lines if call_id in line]
    assert "multiply" in call_line
    assert re.search(r"\bok\b", call_line)
    assert "answer: 248 × 15 = 3720" in lines
    assert re.search(r"^run [0-9a-f]{32}: completed\b", done.out, re.MULTILINE)


def test_run_stream_gives_the_same_answer() -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        readable = tether("run", PROMPT, "--tools", "calc", "--stream", *endpoint(server))
        as_json = tether("run", PROMPT, "--tools", "calc", "--stream", "--json", *endpoint(server))
        streamed = [bool(r.get("stream")) for r in server.requests]

    assert streamed == [True] * 4
    assert readable.code == 0, readable
    assert "248 × 15 = 3720" in readable.out.splitlines()  # streamed as it came, and not repeated
    assert readable.out.count("3720") == 2  # the call's result, then the answer
    assert as_json.code == 0, as_json
    data = one_json_object(as_json.out)
    assert data["status"] == "completed"
    assert data["output"] == "248 × 15 = 3720"


@pytest.mark.parametrize("stream", [False, True])
def test_run_with_provider_anthropic_speaks_the_messages_api(stream: bool) -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        argv = ["run", PROMPT, "--provider", "anthropic", "--base-url", server.origin, "--tools", "calc", "--json"]
        done = tether(*argv, *(["--stream"] if stream else []), env=clean_env(ANTHROPIC_MODEL="claude-fake"))
        requests, headers = list(server.requests), list(server.headers)

    assert done.code == 0, done
    data = one_json_object(done.out)
    assert data["status"] == "completed" and data["output"] == "248 × 15 = 3720"
    assert len(requests) == 2 and all(r["model"] == "claude-fake" and r["max_tokens"] == 4096 for r in requests)
    assert [bool(r.get("stream")) for r in requests] == [stream, stream]
    (result,) = requests[1]["messages"][-1]["content"]
    assert result["type"] == "tool_result" and json.loads(result["content"]) == {"ok": True, "result": 3720}
    assert all(h.get("anthropic-version") == "2023-06-01" for h in headers)


def test_an_unknown_provider_is_a_configuration_error() -> None:
    done = tether("run", PROMPT, "--provider", "nope", "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert done.code == 3 and "unknown provider 'nope'" in done.err and "anthropic" in done.err


# ---------------------------------------------------------------- exit codes


def test_a_truncated_reply_exits_12() -> None:
    with FakeServer([text("248 × 15 is", finish_reason="length")] * 2) as server:
        readable = tether("run", PROMPT, "--tools", "calc", *endpoint(server))
        as_json = tether("run", PROMPT, "--tools", "calc", "--json", *endpoint(server))

    assert readable.code == 12, readable
    assert "truncated" in readable.out
    assert "answer:" not in readable.out  # a cut reply is never shown as the answer
    assert as_json.code == 12, as_json
    data = one_json_object(as_json.out)
    assert data["status"] == "truncated"
    assert data["output"] is None


def test_reaching_max_steps_with_a_tool_call_exits_10() -> None:
    with FakeServer(SCENARIOS["multiply"]) as server:
        done = tether("run", PROMPT, "--tools", "calc", "--max-steps", "1", "--json", *endpoint(server))
        requests = len(server.requests)

    assert done.code == 10, done
    data = one_json_object(done.out)
    assert data["status"] == "max_steps"
    assert requests == 1
    (call,) = data["steps"][0]["calls"]
    assert call["outcome"] == "budget_exhausted"
    assert call["executed"] is False


def test_an_unreachable_model_exits_17_naming_the_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    done = tether("run", PROMPT, "--tools", "calc", "--base-url", url, "--model", "fake", "--api-key", "x")

    assert done.code == 17, done
    assert url in done.out + done.err


def test_an_unreachable_model_explains_itself_in_one_line_on_stderr() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    done = tether("run", PROMPT, "--tools", "calc", "--json", "--base-url", url, "--model", "fake", "--api-key", "x")

    assert done.code == 17, done
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert url in lines[0] or "OPENAI_BASE_URL" in lines[0]


def test_no_endpoint_configured_exits_3_naming_the_variables() -> None:
    # TETHER_LOCAL=off: no fallback to the embedded model (tests/models/test_local.py covers that path).
    done = tether("run", PROMPT, "--tools", "calc", env=clean_env(TETHER_LOCAL="off"))

    assert done.code == 3, done
    assert done.out == ""
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert "OPENAI_BASE_URL" in lines[0]
    assert "OPENAI_API_KEY" in lines[0]


def test_an_unknown_toolset_exits_3() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"  # never contacted: the toolset is checked first
    done = tether("run", PROMPT, "--tools", "no_such_toolset", "--base-url", url, "--model", "fake")

    assert done.code == 3, done
    assert done.out == ""
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert "no_such_toolset" in lines[0]
    assert "calc" in lines[0]  # says which toolsets exist


@pytest.mark.parametrize("as_json", [False, True], ids=["readable", "json"])
@pytest.mark.parametrize("key_from", ["flag", "env"])
def test_a_401_exits_17_mentions_the_key_but_never_prints_it(as_json: bool, key_from: str) -> None:
    refusal = raw({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}, 401)
    with FakeServer([refusal] * 3) as server:  # spare replies: a retried 401 would still exit 17
        argv = ["run", PROMPT, "--tools", "calc", "--base-url", server.base_url, "--model", "fake"]
        argv += ["--json"] if as_json else []
        if key_from == "flag":
            done = tether(*argv, "--api-key", SECRET_KEY)
        else:
            done = tether(*argv, env=clean_env(OPENAI_API_KEY=SECRET_KEY))
        requests = len(server.requests)

    assert done.code == 17, done
    assert requests == 1  # 401 is not retried
    output = done.out + done.err
    assert "OPENAI_API_KEY" in output
    assert SECRET_KEY not in output
    assert SECRET_KEY[-12:] not in output
    if as_json:
        data = one_json_object(done.out)
        assert data["status"] == "model_error"


# ------------------------------------------------------------ other commands


def test_self_check_passes() -> None:
    done = tether("self-check")

    assert done.code == 0, done
    assert done.out.strip().splitlines()[-1] == "self-check passed"
    assert "FAIL" not in done.out


def test_tools_prints_the_multiply_schema_closed_to_extra_fields() -> None:
    done = tether("tools", "calc")

    assert done.code == 0, done
    blocks = re.split(r"^(?=\S)", done.out, flags=re.MULTILINE)
    (multiply,) = [b for b in blocks if b.startswith("multiply ")]
    assert multiply.splitlines()[0] == "multiply (read-only)"
    schema_text = multiply[multiply.index("{") :]
    schema = json.loads(schema_text)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["a", "b"]
    assert {name: p["type"] for name, p in schema["properties"].items()} == {"a": "integer", "b": "integer"}
