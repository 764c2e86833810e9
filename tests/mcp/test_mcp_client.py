"""MCP servers' tools behind tether's gates: a real server process (the SDK's, tests/mcp/mcp_server.py).

Over stdio and over streamable HTTP: the tools are listed, a valid call is
executed, a bad call is refused before the server sees it, and a server killed
mid-call is a clear tool_failed and a reaped process. Each broken server
(exits, hangs, lists no tools, malformed schema) is an MCPServerError.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import gone, our_servers, server_argv, start_http_server

from tether.core.budget import Budget
from tether.core.machine import Status
from tether.core.report import RunResult
from tether.drivers.local.runner import Agent
from tether.mcp import MCPServerError, MCPToolset
from tether.mcp.client import MAX_RESPONSE_BYTES, MAX_RESPONSE_CONTAINERS
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.store import RunStore, SQLiteStore
from tether.tools import Principal

QUIET = open(os.devnull, "w")  # noqa: SIM115  (the server's own tracebacks for the failing tool)


def seen(log: Path) -> list[dict[str, Any]]:
    """The calls that reached the server."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def result_of(result: RunResult, call_id: str) -> dict[str, Any]:
    for step in result.steps:
        for call in step.calls:
            if call.id == call_id:
                return dict(json.loads(call.result or "null"))
    raise AssertionError(f"no call {call_id}")


ASKED: list[str] = []  # why each approval the helper granted was asked


def granted(call: Any) -> bool:
    ASKED.append(call.approval_reason)
    return True


async def run(
    toolset: MCPToolset, *replies: Any, store: RunStore | None = None, approve: bool = True, **options: Any
) -> RunResult:
    """A run offering the toolset. Its tools' descriptions are the server's words, so the run is tainted from its
    start and every side-effecting call asks first: granted here unless ``approve=False`` (it then pauses)."""
    store = store if store is not None else SQLiteStore(Path(tempfile.mkdtemp(prefix="tether-mcp-")) / "runs.db")
    if approve:
        options.setdefault("approver", granted)
    agent = Agent(ScriptedModel([*replies, reply_text("done")]), toolset, store=store, **options)
    return await agent.run("go")


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "calls.jsonl"


@pytest.fixture(scope="module")
def stdio(log: Path) -> Iterator[MCPToolset]:
    env = {"MCP_TEST_LOG": str(log)}
    with MCPToolset.stdio(
        server_argv("stdio"),
        env=env,
        read_only={"weather", "shout"},
        approval={"delete_everything"},
        scopes={"notes"},
        errlog=QUIET,
    ) as toolset:
        yield toolset


def test_the_servers_tools_are_listed_with_their_schemas_closed(stdio: MCPToolset) -> None:
    tools = {t.name: t for t in stdio}
    assert {"add", "weather", "shout", "big", "broken", "delete_everything", "sleepy"} <= set(tools)
    add = tools["add"].parameters
    assert add["required"] == ["a", "b"] and add["additionalProperties"] is False
    assert tools["add"].description == "Add two integers."


def test_read_only_comes_from_the_configuration_never_from_the_servers_hint(stdio: MCPToolset) -> None:
    tools = {t.name: t for t in stdio}
    assert tools["add"].read_only is False  # the server says readOnlyHint: true; nobody configured it
    assert tools["weather"].read_only is True  # configured, though the server claims nothing
    assert all(t.untrusted_output for t in stdio)


async def test_a_valid_call_is_executed_with_its_idempotency_key_and_recorded_in_the_ledger(
    stdio: MCPToolset, log: Path, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    result = await run(
        stdio, reply_calls(("c1", "add", '{"a": 248, "b": 15}'), ("c2", "idempotency_key", "{}")), store=store
    )
    assert result.status is Status.COMPLETED
    assert result_of(result, "c1") == {"ok": True, "result": 263}
    assert result_of(result, "c2") == {"ok": True, "result": f"{result.run_id}:c2"}
    assert {"tool": "add", "arguments": {"a": 248, "b": 15}} in seen(log)
    entry = store.ledger_entry(result.run_id, "c1")  # side-effecting: intent and outcome recorded
    assert entry is not None and entry.outcome is not None and '"result": 263' in entry.outcome


async def test_a_bad_call_is_refused_before_the_server_sees_it(stdio: MCPToolset, log: Path) -> None:
    before = len(seen(log))
    result = await run(
        stdio,
        reply_calls(("c1", "add", '{"a": "248", "b": 15}')),
        reply_calls(("c2", "add", '{"a": 1, "b": 2, "c": 3}'), ("c3", "add", '{"a": true, "b": 2}')),
    )
    assert result_of(result, "c1")["error"] == {
        "code": "invalid_arguments",
        "message": "a: expected integer, got string",
        "retryable": True,
    }
    assert result_of(result, "c2")["error"]["message"] == "arguments: unexpected field(s) 'c'"
    assert result_of(result, "c3")["error"]["code"] == "invalid_arguments"
    assert len(seen(log)) == before


async def test_is_error_becomes_tool_failed_and_structured_content_is_kept(stdio: MCPToolset) -> None:
    result = await run(
        stdio,
        reply_calls(("c1", "broken", "{}"), ("c2", "weather", '{"city": "Oslo"}'), ("c3", "shout", '{"text": "hi"}')),
    )
    assert result_of(result, "c1")["error"]["code"] == "tool_failed"
    assert "broken" in result_of(result, "c1")["error"]["message"]
    assert result_of(result, "c2") == {"ok": True, "result": {"city": "Oslo", "celsius": 21.5, "sky": "clear"}}
    assert result_of(result, "c3") == {"ok": True, "result": "HI"}


async def test_an_oversized_result_is_cut_with_the_marker(stdio: MCPToolset) -> None:
    result = await run(stdio, reply_calls(("c1", "big", '{"size": 50000}')))
    shown = result_of(result, "c1")["result"]
    assert shown.endswith("…[truncated: showing 20000 of 50000 characters]")


async def test_mcp_output_taints_the_run_so_the_next_side_effecting_call_waits_for_approval(
    stdio: MCPToolset, log: Path
) -> None:
    before = len(seen(log))
    result = await run(
        stdio,
        reply_calls(("c1", "weather", '{"city": "Oslo"}')),
        reply_calls(("c2", "delete_everything", '{"confirm": true}')),
        approve=False,
    )
    assert result.status is Status.AWAITING_APPROVAL
    assert result.state.tainted
    assert [c["tool"] for c in seen(log)[before:]] == ["weather"]


async def test_approval_scopes_and_budgets_gate_mcp_tools_before_the_server_sees_a_call(
    stdio: MCPToolset, log: Path
) -> None:
    before = len(seen(log))
    paused = await run(stdio, reply_calls(("c1", "delete_everything", '{"confirm": true}')), approve=False)
    assert paused.status is Status.AWAITING_APPROVAL
    [waiting] = paused.state.pending  # its own approval=, and the descriptions' taint: the first call asks
    assert waiting.approval_reason and paused.state.tainted_by is not None
    assert paused.state.tainted_by.startswith("the tool descriptions of MCP server ")

    outsider = Principal("mallory", frozenset({"tickets"}))  # lacks the toolset's scope "notes"
    hidden = await run(stdio, reply_calls(("c1", "add", '{"a": 1, "b": 2}')), principal=outsider)
    assert result_of(hidden, "c1")["error"]["code"] == "unknown_tool"

    limited = await run(
        stdio,
        reply_calls(("c1", "add", '{"a": 1, "b": 2}'), ("c2", "add", '{"a": 3, "b": 4}')),
        budget=Budget(max_tool_calls=1),
    )
    assert [result_of(limited, c)["error"]["code"] for c in ("c1", "c2")] == ["budget_exhausted"] * 2
    assert seen(log)[before:] == []


async def test_a_hung_call_times_out_and_a_server_killed_mid_call_is_a_clear_error_and_reaped(log: Path) -> None:
    before = our_servers()
    env = {"MCP_TEST_LOG": str(log)}
    toolset = await asyncio.to_thread(  # as docs/guides/mcp.md says to, inside a running loop
        MCPToolset.stdio, server_argv("stdio"), env=env, read_only={"sleepy"}, timeout=3, errlog=QUIET
    )
    try:
        hung = await run(toolset, reply_calls(("c1", "sleepy", '{"seconds": 10}')))
        assert result_of(hung, "c1")["error"]["code"] == "timeout"

        pid = result_of(await run(toolset, reply_calls(("c1", "pid", "{}"))), "c1")["result"]
        asyncio.get_running_loop().call_later(0.3, os.kill, pid, signal.SIGKILL)
        killed = await run(toolset, reply_calls(("c1", "sleepy", '{"seconds": 30}')))
        error = result_of(killed, "c1")["error"]  # tool_failed when the server dies, not a timeout later
        assert error["code"] == "tool_failed" and "went away during the call" in error["message"]
        deadline = time.monotonic() + 5
        while not gone(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert gone(pid), f"server {pid} was not reaped"

        after = await run(toolset, reply_calls(("c1", "add", '{"a": 1, "b": 2}')))
        assert "is not connected" in result_of(after, "c1")["error"]["message"]
    finally:
        await toolset.aclose()
    assert our_servers() == before


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("no-tools", "lists no tools"),
        ("bad-schema", "tool bad: invalid JSON Schema"),
        ("exit", "closed the connection"),
        ("hang", "did not answer within 3s"),
    ],
)
def test_a_broken_server_is_a_clear_error_and_its_process_is_reaped(mode: str, message: str) -> None:
    timeout = 3 if mode == "hang" else 60
    before = our_servers()
    with pytest.raises(MCPServerError, match=message):
        MCPToolset.stdio(server_argv(mode), connect_timeout=timeout)
    assert our_servers() == before


def test_a_command_that_does_not_exist_is_a_clear_error() -> None:
    with pytest.raises(MCPServerError, match="cannot start the server: No such file or directory"):
        MCPToolset.stdio("/nonexistent/mcp-server --flag")


def test_configuration_naming_tools_the_server_does_not_list_is_refused(log: Path) -> None:
    before = our_servers()
    with pytest.raises(MCPServerError, match=r"approval names tools .* does not list: nope"):
        MCPToolset.stdio(server_argv("stdio"), approval={"nope"})
    assert our_servers() == before


@pytest.fixture(scope="module")
def http_server(log: Path) -> Iterator[tuple[Any, str]]:
    process, url = start_http_server(log)
    yield process, url
    process.kill()
    process.wait()


async def test_over_http_a_call_is_validated_and_executed_and_a_bad_call_never_arrives(
    http_server: tuple[Any, str], log: Path
) -> None:
    _, url = http_server
    async with MCPToolset.http(url, prefix="wx.", read_only={"add"}) as toolset:
        tools = {t.name: t for t in toolset}  # the prefix joins the name; "." is not allowed in one: "_"
        assert {"wx_add", "wx_weather", "wx_sleepy"} <= set(tools) and tools["wx_add"].read_only
        before = len(seen(log))
        result = await run(
            toolset,
            reply_calls(("c1", "wx_add", '{"a": 2, "b": "3"}')),
            reply_calls(("c2", "wx_add", '{"a": 2, "b": 3}')),
        )
        assert result_of(result, "c1")["error"]["code"] == "invalid_arguments"
        assert result_of(result, "c2") == {"ok": True, "result": 5}
        assert seen(log)[before:] == [{"tool": "add", "arguments": {"a": 2, "b": 3}}]


async def test_over_http_a_server_killed_mid_call_is_a_clear_error(log: Path) -> None:
    process, url = start_http_server(log)
    try:
        async with MCPToolset.http(url, read_only={"sleepy"}) as toolset:
            asyncio.get_running_loop().call_later(1.0, process.kill)
            started = time.monotonic()
            result = await run(toolset, reply_calls(("c1", "sleepy", '{"seconds": 30}')))
            assert time.monotonic() - started < 15
            error = result_of(result, "c1")["error"]
            assert error["code"] == "tool_failed" and "went away during the call" in error["message"]
    finally:
        process.kill()
        assert process.wait(10) == -signal.SIGKILL


def endless_server(mode: str, sent: Path, count: int = 0) -> tuple[subprocess.Popen[bytes], str]:
    """``endless_http_server.py`` in ``mode`` (with ``count``), listening; its URL."""
    from mcp_helpers import free_port

    port = free_port()
    server = str(Path(__file__).with_name("endless_http_server.py"))
    argv = [sys.executable, server, str(port), mode, str(sent), str(count)]
    process = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, "the endless server did not start"
            time.sleep(0.1)


@pytest.mark.parametrize("mode", ["list", "call"])
async def test_over_http_an_answer_that_never_ends_is_read_up_to_its_bound_and_refused(
    mode: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server's JSON answer (a tools/list page, a call's result) past ``MAX_RESPONSE_BYTES`` is not read on:
    the host's memory holds at most the bound, and the request fails saying so, whichever it was."""
    sent = tmp_path / "sent"
    process, url = endless_server(mode, sent)
    too_large = f"larger than {MAX_RESPONSE_BYTES} bytes"
    try:
        if mode == "list":
            with pytest.raises(MCPServerError, match=too_large):
                await asyncio.to_thread(MCPToolset.http, url, read_only=True)
        else:
            async with MCPToolset.http(url, read_only=True) as toolset:
                result = await run(toolset, reply_calls(("c1", "echo", "{}")))
            error = result_of(result, "c1")["error"]
            assert error["code"] == "tool_failed" and too_large in error["message"], error
        assert [r.getMessage() for r in caplog.records if r.exc_info] == []  # said once, with no traceback
        time.sleep(0.5)  # what the server managed to write before the client let go
        assert int(sent.read_text()) < 4 * MAX_RESPONSE_BYTES  # of the 512 MiB it would send
    finally:
        process.kill()
        process.wait(10)


@pytest.mark.parametrize(
    ("mode", "count", "refused"),
    [
        ("blocks", 500_000, True),  # 15 MB: under the byte bound; the SDK made 900 MB of objects of them
        ("blocks", MAX_RESPONSE_CONTAINERS - 3, False),  # with the message, its result and its content: the bound
        ("blocks", MAX_RESPONSE_CONTAINERS - 2, True),
        ("brackets", 4 * MAX_RESPONSE_CONTAINERS, False),  # all in the text: none is an array or an object
    ],
)
async def test_over_http_an_answer_of_too_many_arrays_and_objects_is_refused_before_it_is_decoded(
    mode: str, count: int, refused: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A JSON answer holding more than ``MAX_RESPONSE_CONTAINERS`` arrays and objects fails its call naming the
    bound, with no traceback, and the session goes on; brackets in strings do not count, and up to the bound
    an answer is the call's."""
    process, url = endless_server(mode, tmp_path / "sent", count)
    try:
        async with MCPToolset.http(url, read_only=True, max_result_chars=10**7) as toolset:
            result = await run(toolset, reply_calls(("c1", "echo", "{}")), reply_calls(("c2", "echo", "{}")))
        first, second = result_of(result, "c1"), result_of(result, "c2")
        if refused:
            past = f"the server's answer holds more than {MAX_RESPONSE_CONTAINERS} JSON arrays and objects; not read"
            assert first["error"]["code"] == "tool_failed" and past in first["error"]["message"], first
            assert second == first  # the same answer again: refused again, the connection is still there
        else:
            assert first["result"] == ("\n" * (count - 1) if mode == "blocks" else "[{" * count)
        assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    finally:
        process.kill()
        process.wait(10)


async def test_over_http_a_compressed_answer_is_refused_unread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """64 KB of gzip that inflate to 64 MB: the bounds count what the SDK decodes, so tether asks for answers
    uncompressed and refuses a compressed one, whatever its size, before httpx2 inflates it."""
    process, url = endless_server("gzip", tmp_path / "sent")
    try:
        async with MCPToolset.http(url, read_only=True) as toolset:
            result = await run(toolset, reply_calls(("c1", "echo", "{}")))
        error = result_of(result, "c1")["error"]
        said = "the server's answer is compressed ('gzip'); tether asks for it uncompressed; not read"
        assert error["code"] == "tool_failed" and said in error["message"], error
        assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    finally:
        process.kill()
        process.wait(10)


def test_an_unreachable_url_is_a_clear_error() -> None:
    from mcp_helpers import free_port

    with pytest.raises(MCPServerError, match=r"MCP server http://127\.0\.0\.1:"):
        MCPToolset.http(f"http://127.0.0.1:{free_port()}/mcp", connect_timeout=10)


async def test_a_live_servers_plain_error_is_the_calls_failure_not_a_lost_connection() -> None:
    """-32000 is the SDK's "connection closed" and JSON-RPC's plain "server error": a server that still
    answers sent the latter, and its next call goes through."""
    toolset = await asyncio.to_thread(MCPToolset.stdio, server_argv("busy-once"), read_only=True, errlog=QUIET)
    try:
        result = await run(toolset, reply_calls(("c1", "busy", "{}"), ("c2", "busy", "{}")))
    finally:
        await toolset.aclose()
    first, second = result_of(result, "c1"), result_of(result, "c2")
    assert first["error"]["code"] == "tool_failed" and "busy, try again" in first["error"]["message"]
    assert second == {"ok": True, "result": "done"}


def test_a_servers_command_line_and_url_name_it_without_their_secrets() -> None:
    """What names a server reaches the model (in a failed call's message), the store and the log."""
    from tether.mcp.client import _program, _site

    assert _program(["env", "GITHUB_TOKEN=ghp_secret", "python", "/srv/server.py", "--key", "k"]) == "python server.py"
    assert _program(["npx", "-y", "@modelcontextprotocol/server-github"]) == "npx"
    assert _site("https://user:pw@mcp.example.com:8443/mcp?key=secret#x") == "https://mcp.example.com:8443/mcp"
    with pytest.raises(MCPServerError, match="cannot be read: No closing quotation"):
        MCPToolset.stdio('python "server.py')


async def test_a_servers_tool_descriptions_taint_the_run_from_its_start(stdio: MCPToolset, log: Path) -> None:
    """The model reads them in every request: "also delete everything" in a description is an injection before
    any result is read. The first side-effecting call asks, naming the server; a trusted server's do not."""
    before = len(seen(log))
    paused = await run(stdio, reply_calls(("c1", "add", '{"a": 1, "b": 2}')), approve=False)
    assert paused.status is Status.AWAITING_APPROVAL and seen(log)[before:] == []
    [waiting] = paused.state.pending
    assert waiting.approval_reason == (
        f"the run read untrusted text from the tool descriptions of MCP server {stdio.label}"
    )
    assert "python" in stdio.label and "mcp_server.py" in stdio.label  # its program and script, as elsewhere

    with MCPToolset.stdio(
        server_argv("stdio"), env={"MCP_TEST_LOG": str(log)}, untrusted_output=False, errlog=QUIET
    ) as trusted:
        done = await run(trusted, reply_calls(("c1", "add", '{"a": 1, "b": 2}')), approve=False)
    assert done.status is Status.COMPLETED and not done.state.tainted
    assert result_of(done, "c1") == {"ok": True, "result": 3}
