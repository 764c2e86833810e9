"""``tether run --mcp/--mcp-url`` and ``tether mcp serve``, as real processes."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp_helpers import server_argv, start_http_server

from tether.testing.fake_server import FakeServer, text, tool_calls

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import endpoint, tether


def scenario(*calls: tuple[str, str, dict[str, Any]]) -> list[Any]:
    return [tool_calls([(i, name, json.dumps(args)) for i, name, args in calls]), text("done")]


def tool_results(server: FakeServer) -> dict[str, dict[str, Any]]:
    """The tool messages tether sent back to the model, by call id."""
    last = server.requests[-1]["messages"]
    return {m["tool_call_id"]: json.loads(m["content"]) for m in last if m["role"] == "tool"}


def test_run_offers_an_mcp_servers_tools_over_stdio(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    # The SDK starts a server with a minimal environment (HOME, PATH, ...): `env` passes more.
    command = shlex.join(["env", f"MCP_TEST_LOG={log}", *server_argv("stdio")])
    with FakeServer(scenario(("c1", "add", {"a": 2, "b": 3}), ("c2", "add", {"a": "2", "b": 3}))) as server:
        done = tether(
            "run", "add", "--mcp", command, "--mcp-read-only", "add", "--json", *endpoint(server)
        )  # fmt: skip
        offered = {t["function"]["name"] for t in server.requests[0]["tools"]}
        results = tool_results(server)
    assert done.code == 0, done
    assert {"add", "weather", "sleepy"} <= offered
    assert results["c1"] == {"ok": True, "result": 5}  # the SDK server's {"result": 5}, unwrapped once
    assert results["c2"]["error"]["code"] == "invalid_arguments"
    assert [json.loads(line)["arguments"] for line in log.read_text().splitlines()] == [{"a": 2, "b": 3}]


def test_run_offers_an_mcp_servers_tools_over_http(tmp_path: Path) -> None:
    process, url = start_http_server(tmp_path / "calls.jsonl")
    try:
        with FakeServer(scenario(("c1", "weather", {"city": "Oslo"}))) as server:
            done = tether("run", "weather", "--mcp-url", url, "--mcp-read-only", "weather", "--json", *endpoint(server))
            results = tool_results(server)
    finally:
        process.kill()
        process.wait()
    assert done.code == 0, done
    assert results["c1"]["result"] == {"city": "Oslo", "celsius": 21.5, "sky": "clear"}


def test_run_with_a_broken_mcp_server_is_a_configuration_error() -> None:
    done = tether("run", "x", "--mcp", shlex.join(server_argv("no-tools")), "--base-url", "http://127.0.0.1:9/v1")
    assert done.code == 3
    assert "lists no tools" in done.err


def test_run_refuses_a_read_only_name_no_server_lists() -> None:
    done = tether(
        "run", "x", "--mcp", shlex.join(server_argv("stdio")), "--mcp-read-only", "nope",
        "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
    )  # fmt: skip
    assert done.code == 3
    assert "--mcp-read-only names tools no MCP server lists: nope" in done.err


async def test_mcp_serve_validates_every_call_strictly_before_the_tool_runs() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "tether", "mcp", "serve", "--tools", "calc"], env=env
    )
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert {"add", "multiply"} <= set(listed)
        assert listed["multiply"].input_schema["additionalProperties"] is False
        assert listed["multiply"].annotations is not None and listed["multiply"].annotations.read_only_hint is True

        ok = await session.call_tool("multiply", {"a": 248, "b": 15})
        assert not ok.is_error and ok.structured_content == {"result": 3720}

        for arguments, message in [
            ({"a": "248", "b": 15}, "invalid_arguments: a: expected integer, got string"),
            ({"a": True, "b": 15}, "invalid_arguments: a: expected integer, got boolean"),
            ({"a": 2, "b": 3, "c": 4}, "invalid_arguments: arguments: unexpected field(s) 'c'"),
        ]:
            refused = await session.call_tool("multiply", arguments)
            assert refused.is_error
            assert refused.content[0].type == "text" and refused.content[0].text == message

        unknown = await session.call_tool("rm_rf", {})
        assert unknown.is_error and unknown.content[0].type == "text"
        assert unknown.content[0].text.startswith("unknown_tool: ")


@pytest.mark.parametrize("argv", [["mcp", "serve", "--tools", "nope"]])
def test_mcp_serve_with_an_unknown_toolset_is_a_configuration_error(argv: list[str]) -> None:
    done = tether(*argv)
    assert done.code == 3
    assert "unknown toolset 'nope'" in done.err
